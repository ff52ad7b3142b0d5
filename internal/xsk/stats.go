package xsk

// Stats are a socket's counters: the kernel's (XDP_STATISTICS) and this
// package's own.
type Stats struct {
	// The kernel's.
	RxDropped            uint64 // received packets dropped for other reasons than below: no fill entry, too large for a frame
	RxInvalidDescs       uint64 // fill entries the kernel could not use
	TxInvalidDescs       uint64 // TX descriptors the kernel could not send: outside the UMEM, zero-length, crossing a frame, or too many frames
	RxRingFull           uint64 // received packets dropped because the RX ring was full
	RxFillRingEmptyDescs uint64 // times the kernel found the fill ring empty
	TxRingEmptyDescs     uint64 // times the kernel found the TX ring empty

	// This package's.
	RxPackets uint64 // packets taken off the RX ring
	RxBytes   uint64
	TxPackets uint64 // packets put on the TX ring
	TxBytes   uint64
	TxKicks   uint64 // sendto calls that told the kernel to send
	TxBusy    uint64 // kicks that found the kernel busy (EAGAIN, EBUSY, ENOBUFS)
	RxWakeups uint64 // recvfrom calls that told the driver the fill ring has entries
}

// NamedCounter is one counter with the name a device's counter list
// shows it under.
type NamedCounter struct {
	Name  string
	Value uint64
}

// Named returns the counters with their names: the kernel's under the
// names of struct xdp_statistics, and this package's, all with an xsk_
// prefix.
func (st *Stats) Named() []NamedCounter {
	return []NamedCounter{
		{"xsk_rx_dropped", st.RxDropped},
		{"xsk_rx_invalid_descs", st.RxInvalidDescs},
		{"xsk_tx_invalid_descs", st.TxInvalidDescs},
		{"xsk_rx_ring_full", st.RxRingFull},
		{"xsk_rx_fill_ring_empty_descs", st.RxFillRingEmptyDescs},
		{"xsk_tx_ring_empty_descs", st.TxRingEmptyDescs},
		{"xsk_rx_packets", st.RxPackets},
		{"xsk_rx_bytes", st.RxBytes},
		{"xsk_tx_packets", st.TxPackets},
		{"xsk_tx_bytes", st.TxBytes},
		{"xsk_tx_kicks", st.TxKicks},
		{"xsk_tx_busy", st.TxBusy},
		{"xsk_rx_wakeups", st.RxWakeups},
	}
}

// Add adds o's counters to st's, to sum an interface's sockets.
func (st *Stats) Add(o Stats) {
	st.RxDropped += o.RxDropped
	st.RxInvalidDescs += o.RxInvalidDescs
	st.TxInvalidDescs += o.TxInvalidDescs
	st.RxRingFull += o.RxRingFull
	st.RxFillRingEmptyDescs += o.RxFillRingEmptyDescs
	st.TxRingEmptyDescs += o.TxRingEmptyDescs
	st.RxPackets += o.RxPackets
	st.RxBytes += o.RxBytes
	st.TxPackets += o.TxPackets
	st.TxBytes += o.TxBytes
	st.TxKicks += o.TxKicks
	st.TxBusy += o.TxBusy
	st.RxWakeups += o.RxWakeups
}

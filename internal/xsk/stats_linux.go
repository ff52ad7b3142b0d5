package xsk

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Stats returns the socket's counters.
func (s *Socket) Stats() (Stats, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return Stats{}, ErrClosed
	}
	var k unix.XDPStatistics
	size := uint32(unsafe.Sizeof(k))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_STATISTICS, uintptr(unsafe.Pointer(&k)), uintptr(unsafe.Pointer(&size)), 0); e != 0 {
		return Stats{}, fmt.Errorf("xsk: reading statistics: %w", e)
	}
	return Stats{
		RxDropped:            k.Rx_dropped,
		RxInvalidDescs:       k.Rx_invalid_descs,
		TxInvalidDescs:       k.Tx_invalid_descs,
		RxRingFull:           k.Rx_ring_full,
		RxFillRingEmptyDescs: k.Rx_fill_ring_empty_descs,
		TxRingEmptyDescs:     k.Tx_ring_empty_descs,
		RxPackets:            s.c.rxPackets.Load(),
		RxBytes:              s.c.rxBytes.Load(),
		TxPackets:            s.c.txPackets.Load(),
		TxBytes:              s.c.txBytes.Load(),
		TxKicks:              s.c.kicks.Load(),
		TxBusy:               s.c.kicksBusy.Load(),
		RxWakeups:            s.c.rxWakeups.Load(),
	}, nil
}

// setsockopt sets an SOL_XDP option to the size bytes at p.
func setsockopt(fd, opt int, p unsafe.Pointer, size uintptr) error {
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), size, 0); e != 0 {
		return e
	}
	return nil
}

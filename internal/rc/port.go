package rc

import (
	"net/netip"

	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/wire/bth"
)

// Port is what a QP needs from the device that owns it, in four small
// parts: packet buffers, a way to put finished packets on the wire,
// scheduling and timers, and the clock; and the device's memory regions.
type Port interface {
	// MRs returns the device's memory region table.
	MRs() *mr.Table
	Buffers
	Transmitter
	Scheduler
	Clock
}

// Buffers hands out packet buffers.
type Buffers interface {
	// NewBuffer returns a buffer for one outgoing packet. The QP writes the
	// transport headers, payload and pad from TxOffset on.
	NewBuffer() []byte
	// FreeBuffer returns a buffer from NewBuffer once its packet is sent.
	FreeBuffer(buf []byte)
	// TxOffset returns where, in a buffer from NewBuffer, the transport
	// headers start: room for the link, IP and UDP headers.
	TxOffset() int
}

// Transmitter puts packets on the wire.
type Transmitter interface {
	// Finish completes the packet whose transport (BTH through pad) is
	// buf[TxOffset:TxOffset+n], for the destination tx names: it adds the
	// IP and UDP headers and the ICRC, and returns the packet as the link
	// takes it (with the link's headroom in front), or nil if it cannot go
	// out. It does not keep tx.
	Finish(tx *TxDesc, buf []byte, n int) []byte
	// Send transmits packets made by Finish. It does not keep them.
	Send(pkts [][]byte)
}

// Scheduler runs a QP's deferred work and timers on the device's workers.
type Scheduler interface {
	// Schedule asks the device to call r.Run soon, from its worker.
	Schedule(r Runner)
	// Timer tells the device that r needs Run at the given time. A QP says
	// so after every change under its lock while a timer is armed; the
	// device need only act on a time earlier than it waits for.
	Timer(r Runner, at monotime.Time)
}

// Clock tells the time; tests run a QP on a fake one.
type Clock interface {
	Now() monotime.Time
}

// Runner is what a device's worker drives: a queue pair's deferred work
// (Run) and its next timer (Deadline).
type Runner interface {
	// Run does what is due: expired timers, deferred sends.
	Run()
	// Deadline returns when Run is next needed for a timer, or the zero
	// Time when no timer is armed.
	Deadline() monotime.Time
	// Resends reports whether Run at now would send again what the peer
	// has not acknowledged: the local ACK timeout or the tail-loss probe
	// has expired. The device reads the link first, as the answer may be
	// waiting there, unread.
	Resends(now monotime.Time) bool
}

// TxDesc is a packet's transmit descriptor: where it goes and how, beyond
// the transport headers the QP wrote. A connected QP keeps one for its
// peer, made when it moves to RTR; a UD send or a CNP carries its own.
type TxDesc struct {
	SGIDIndex    uint8      // the source GID: an index into the device's table
	DGID         netip.Addr // the destination GID: an IPv4-mapped or IPv6 address
	DestQPN      bth.QPN    // the destination QP, as the BTH names it
	TrafficClass uint8      // IPv4 TOS or IPv6 traffic class: DSCP and ECN
	FlowLabel    uint32     // IPv6 flow label, 20 bits
	HopLimit     uint8      // IPv4 TTL or IPv6 hop limit; 0 means 64
	SrcPort      uint16     // the UDP source port
}

package rnic

import (
	"net/netip"
	"sync"

	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/internal/rc"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// Packet buffers are fixed-size arrays from one pool, shared by the
// receive loop (which fills them) and the QPs (which fill and free them).
var bufferPool = sync.Pool{New: func() any { return new([link.BufferSize]byte) }}

func getBuffer() []byte { return bufferPool.Get().(*[link.BufferSize]byte)[:] }

func putBuffer(b []byte) { bufferPool.Put((*[link.BufferSize]byte)(b[:link.BufferSize])) }

// txOffset is where a QP writes the transport headers in a buffer: after
// the link headroom and room for an IPv6 and a UDP header.
const txOffset = link.Headroom + wire.IPv6Len + wire.UDPLen

// buffers is the rc.Buffers of every QP: the shared pool.
type buffers struct{}

func (buffers) NewBuffer() []byte     { return getBuffer() }
func (buffers) FreeBuffer(buf []byte) { putBuffer(buf) }
func (buffers) TxOffset() int         { return txOffset }

// transmitter is the device's rc.Transmitter: it finishes packets for the
// wire (IP and UDP headers, ICRC) and hands them to the link.
type transmitter struct {
	link    link.Link
	gids    []netip.Addr
	dport   uint16 // the RoCE v2 UDP port
	srcPort uint16 // the link's fixed UDP source port, or 0: each packet's own
	trace   func(dir Direction, pkt []byte)
	noRoute func()      // counts a packet no source GID can carry
	sendErr func(n int) // counts the packets of a link send that failed

	// deferrer is the link, if it can leave packets queued for a later
	// system call; polling says whether a program busy polls the device,
	// which then flushes at its polls; deferred is called after each
	// deferred send, to arm the backstop that flushes if it stops.
	deferrer link.Deferrer
	polling  func() bool
	deferred func()

	// joiner is the link, if it can join short packets into one
	// datagram; busyPolled says whether a program busy polls the device,
	// whose packets then leave as the link's Send has them.
	joiner     link.Joiner
	busyPolled func() bool
}

// Finish puts the IP and UDP headers in front of a transport packet and
// the ICRC after it, for the destination tx names, and returns the packet
// with the link's headroom in front. It runs inside a QP method, on
// whichever goroutine holds the QP.
func (t *transmitter) Finish(tx *rc.TxDesc, buf []byte, n int) []byte {
	var src netip.Addr
	if int(tx.SGIDIndex) < len(t.gids) {
		src = t.gids[tx.SGIDIndex]
	}
	srcA, dstA := src.Unmap(), tx.DGID.Unmap()
	if !srcA.IsValid() || srcA.Is4() != dstA.Is4() {
		t.noRoute()
		return nil // no usable source address: the packet cannot go out
	}
	hop := tx.HopLimit
	if hop == 0 {
		hop = 64
	}
	sport := t.srcPort
	if sport == 0 {
		sport = tx.SrcPort
	}
	start, err := wire.PutRoCEHeaders(buf, txOffset, n, &wire.RoCEFields{
		// DF and IP ID 0, as a kernel UDP socket sends them.
		// ECN-capable, so that a congested switch marks rather than drops
		// (DCQCN), as a RoCE NIC sends and as the udp link would anyway.
		IP:      wire.IPFields{Src: srcA, Dst: dstA, TrafficClass: wire.ECNCapable(tx.TrafficClass), FlowLabel: tx.FlowLabel, HopLimit: hop, DontFrag: true},
		SrcPort: sport, DstPort: t.dport,
	})
	if err != nil {
		t.noRoute()
		return nil
	}
	end := txOffset + n + wire.ICRCLen
	if t.trace != nil {
		t.trace(Sent, buf[start:end])
	}
	return buf[start-link.Headroom : end]
}

// Send hands packets to the link. A link that cannot send loses them, as
// a wire would, and counts them in send_err, as rxe counts the packets it
// failed to transmit; the transport recovers. While a program busy polls the
// device, a link.Deferrer's sends wait for the program's next poll (or
// the backstop's flush), so that what it posts between two polls leaves
// in one system call. While none busy polls, a link.Joiner joins short
// packets (a request and the ACK behind it) into one datagram, which a
// sleeping peer wakes once for.
func (t *transmitter) Send(pkts [][]byte) {
	var err error
	switch {
	case t.deferrer != nil && t.polling():
		err = t.deferrer.SendDeferred(pkts)
		t.deferred()
	case t.joiner != nil && len(pkts) > 1 && !t.busyPolled():
		err = t.joiner.SendJoined(pkts)
	default:
		err = t.link.Send(pkts)
	}
	if err != nil {
		t.sendErr(len(pkts))
	}
}

// flush sends what deferred sends left on the link.
func (t *transmitter) flush() {
	if t.deferrer != nil {
		_ = t.deferrer.Flush()
	}
}

// port is the rc.Port of a QP: the device's memory regions, buffers,
// transmitter and clock, and the worker that schedules the QP.
type port struct {
	buffers
	*transmitter
	*worker
	mrs   *mr.Table
	clock *monotime.Clock
}

// qpPort is the port one QP is made with: the device's, and the QP's own
// place in its worker's timer heap, so that telling the worker of a
// deadline, after every change under the QP's lock while a timer is
// armed, looks nothing up.
type qpPort struct {
	*port
	timer *timerEntry
}

// qpPort returns the port for a new QP numbered num, on the worker that
// owns it.
func (d *Device) qpPort(num bth.QPN) *qpPort {
	return &qpPort{port: d.ports[int(num)%len(d.workers)], timer: new(timerEntry)}
}

// Timer implements rc.Scheduler for the port's QP, r.
func (p *qpPort) Timer(_ rc.Runner, at monotime.Time) { p.worker.arm(p.timer, int64(at)) }

func (p *port) MRs() *mr.Table     { return p.mrs }
func (p *port) Now() monotime.Time { return p.clock.Now() }

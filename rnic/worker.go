package rnic

import (
	"encoding/binary"
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// Packet buffers are fixed-size arrays from one pool, shared by the
// receive loop (which fills them) and the workers (which free them).
var bufferPool = sync.Pool{New: func() any { return new([link.BufferSize]byte) }}

func getBuffer() []byte { return bufferPool.Get().(*[link.BufferSize]byte)[:] }

func putBuffer(b []byte) { bufferPool.Put((*[link.BufferSize]byte)(b[:link.BufferSize])) }

// txOffset is where a QP writes the transport headers in a buffer: after
// the link headroom and room for an IPv6 and a UDP header.
const txOffset = link.Headroom + wire.IPv6Len + wire.UDPLen

// worker runs the timers of a set of QPs (hashed by QPN) and the work
// they ask for with Schedule; received packets and posted work requests
// are processed by the goroutines that bring them. It is the qp.Port of
// its QPs.
type worker struct {
	dev   *Device
	turns atomic.Uint64 // turns taken, for tests and benchmarks

	// timerEntries holds each QP's *timerEntry, keyed by its *qp.QP:
	// written when a QP is made or destroyed, read by every Timer call.
	timerEntries sync.Map

	mu     sync.Mutex
	ready  map[*qp.QP]struct{} // QPs that asked to run
	timers timerHeap           // when to look at which QP (timerheap.go)
	wakeAt int64               // when the worker wakes, in Unix nanoseconds
	kick   chan struct{}

	// Owned by the worker goroutine.
	runList []*qp.QP
	due     []*timerEntry
	pkt     wire.Packet
}

func newWorker(d *Device) *worker {
	return &worker{
		dev:    d,
		ready:  make(map[*qp.QP]struct{}),
		kick:   make(chan struct{}, 1),
		wakeAt: math.MaxInt64, // no timer armed: the first one kicks
	}
}

func (w *worker) add(q *QP) {
	w.timerEntries.Store(q.QP, &timerEntry{q: q.QP})
}

func (w *worker) remove(q *QP) {
	e, _ := w.timerEntries.LoadAndDelete(q.QP)
	w.mu.Lock()
	if e != nil {
		e.(*timerEntry).at.Store(removed) // its items are dropped as they come up
	}
	delete(w.ready, q.QP)
	w.mu.Unlock()
}

func (w *worker) run() {
	defer w.dev.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-w.kick:
		case <-timer.C:
		case <-w.dev.done:
			return
		}
		w.turns.Add(1)
		w.runReady()
		timer.Reset(w.sleep())
	}
}

// runReady runs the QPs that asked to, and those whose timers are due.
func (w *worker) runReady() {
	now := w.dev.now()
	w.mu.Lock()
	for q := range w.ready {
		w.runList = append(w.runList, q)
	}
	clear(w.ready)
	w.mu.Unlock()
	// Run takes the QP's lock, and Schedule takes w.mu with it held:
	// never hold w.mu while running a QP.
	for _, q := range w.runList {
		q.Run()
	}
	clear(w.runList)
	w.runList = w.runList[:0]
	w.runTimers(now)
}

// The qp.Port methods.

func (w *worker) MRs() *mr.Table    { return w.dev.mrs }
func (w *worker) NewBuffer() []byte { return getBuffer() }
func (w *worker) TxOffset() int     { return txOffset }
func (w *worker) Now() time.Time    { return w.dev.now() }

// wake makes the worker take a turn, if it is not about to already.
func (w *worker) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Schedule marks q to run on the worker's next turn. It may be called from
// any goroutine, with q's lock held.
func (w *worker) Schedule(q *qp.QP) {
	w.mu.Lock()
	w.ready[q] = struct{}{}
	w.mu.Unlock()
	w.wake()
}

// Finish puts the IP and UDP headers in front of a QP's packet and the
// ICRC after it, and returns the packet with the link's headroom in front.
// It runs inside a QP method, on whichever goroutine holds the QP.
func (w *worker) Finish(q *qp.QP, buf []byte, n int) []byte {
	av := q.TxPath()
	d := w.dev
	var src netip.Addr
	if int(av.SGIDIndex) < len(d.gids) {
		src = d.gids[av.SGIDIndex]
	}
	srcA, dstA := src.Unmap(), av.DGID.Unmap()
	if !srcA.IsValid() || srcA.Is4() != dstA.Is4() {
		return nil // no usable source address: the packet cannot go out
	}
	hop := av.HopLimit
	if hop == 0 {
		hop = 64
	}
	udpLen := wire.UDPLen + n + wire.ICRCLen
	udp := buf[txOffset-wire.UDPLen : txOffset]
	sport := w.dev.srcPort
	if sport == 0 {
		sport = rocePort(q.Num())
	}
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], d.cfg.Port)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	// The ICRC is taken over the packet where it lies, with ones in the
	// fields it does not cover (wire.MaskedICRC); the real values are
	// written after.
	binary.BigEndian.PutUint16(udp[6:], 0xffff)
	end := txOffset + n
	bth4 := buf[txOffset+4] // FECN, BECN, Resv6
	buf[txOffset+4] = 0xff
	var ipStart int
	if srcA.Is4() {
		ipStart = txOffset - wire.UDPLen - wire.IPv4Len
		ip := buf[ipStart : ipStart+wire.IPv4Len]
		ip[0], ip[1] = 0x45, 0xff
		binary.BigEndian.PutUint16(ip[2:], uint16(wire.IPv4Len+udpLen))
		binary.BigEndian.PutUint32(ip[4:], 0x00004000) // ID 0, DF: what a kernel UDP socket sends
		ip[8], ip[9] = 0xff, 17
		ip[10], ip[11] = 0xff, 0xff
		s, t := srcA.As4(), dstA.As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], t[:])
		binary.LittleEndian.PutUint32(buf[end:], wire.MaskedICRC(buf[ipStart:end]))
		ip[1], ip[8] = av.TrafficClass, hop
		ip[10], ip[11] = 0, 0
		binary.BigEndian.PutUint16(ip[10:], wire.IPv4Checksum(ip))
	} else {
		ipStart = txOffset - wire.UDPLen - wire.IPv6Len
		ip := buf[ipStart : ipStart+wire.IPv6Len]
		binary.BigEndian.PutUint32(ip[0:], 0x6fffffff)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6], ip[7] = 17, 0xff
		s, t := srcA.As16(), dstA.As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], t[:])
		binary.LittleEndian.PutUint32(buf[end:], wire.MaskedICRC(buf[ipStart:end]))
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(av.TrafficClass)<<20|av.FlowLabel&0xfffff)
		ip[7] = hop
	}
	binary.BigEndian.PutUint16(udp[6:], 0)
	buf[txOffset+4] = bth4
	end += wire.ICRCLen
	if d.cfg.PacketTrace != nil {
		d.cfg.PacketTrace(Sent, buf[ipStart:end])
	}
	return buf[ipStart-link.Headroom : end]
}

// Send hands packets to the link. A link that cannot send loses them, as
// a wire would; the transport recovers.
func (w *worker) Send(pkts [][]byte) { _ = w.dev.link.Send(pkts) }

// FreeBuffer returns a packet buffer to the pool.
func (w *worker) FreeBuffer(buf []byte) { putBuffer(buf) }

// rocePort returns a QP's UDP source port as rxe chooses it:
// 0xC000 | hash_32(qpn, 14) (rxe_qp.c), constant for the QP's life.
func rocePort(n bth.QPN) uint16 {
	return 0xc000 | uint16(uint32(n)*0x61c88647>>(32-14))
}

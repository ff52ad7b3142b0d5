package mem

import (
	"math/rand/v2"
	"time"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/wire"
)

// ReorderFlush is the longest a packet waits in a reorder window that
// traffic has stopped filling; then the window is shuffled and released.
const ReorderFlush = 200 * time.Microsecond

// Faults are what a link does to the packets it sends. The zero value is a
// perfect link.
//
// Filter, when set, selects the packets the per-packet faults (DropFunc,
// DropEvery, Drop, ECN, Corrupt, Duplicate and Reorder) apply to. Delay,
// DelayFunc and Bandwidth shape every packet, and keep the order they are
// sent in.
//
// Faults are applied in this order: the drops; then ECN marking, then
// corruption, then duplication of the result; then the reorder window;
// then pacing and delay.
//
// Filter, DropFunc and DelayFunc are called with the link's send lock
// held: they must not call the link's methods.
type Faults struct {
	// Drop is the probability that a packet is dropped.
	Drop float64

	// DropEvery, if positive, drops the Nth, 2Nth, ... packet.
	DropEvery int

	// DropFunc, if set, drops the packets for which it returns true. pkt
	// is the IP packet; seq counts the packets handed to Send on this
	// link, from 0.
	DropFunc func(pkt []byte, seq uint64) bool

	// Reorder, if above 1, holds packets in a window of Reorder packets
	// and releases each full window in a seeded-random order. A window
	// traffic stops filling is released after ReorderFlush.
	Reorder int

	// Duplicate is the probability that a packet is delivered twice.
	Duplicate float64

	// Corrupt is the probability that one bit of a packet is flipped. The
	// bit is chosen among those the RoCE v2 ICRC covers, from the IP
	// header on, so a RoCE receiver can always tell.
	Corrupt float64

	// ECN is the probability that an ECN-capable packet (ECN field not
	// 00) is marked Congestion Experienced (11).
	ECN float64

	// Delay is one-way latency added to every packet.
	Delay time.Duration

	// DelayFunc, if set, adds the latency it returns to the packet pkt
	// (the IP packet), on top of Delay. Packets still arrive in the order
	// they were sent: those behind a delayed one wait for it, as they
	// would behind a host that stalls. It is called with the link's send
	// lock held: it must not call the link's methods.
	DelayFunc func(pkt []byte) time.Duration

	// Bandwidth, if positive, caps the link at this many bytes per second:
	// each packet departs when the one before it has been serialized.
	Bandwidth int64

	// Seed seeds every random choice. Each fault draws from its own
	// stream, so the packets Drop drops do not depend on whether, say,
	// Duplicate is set.
	Seed uint64

	// Filter, if set, limits the per-packet faults to the packets for
	// which it returns true.
	Filter func(pkt []byte) bool
}

// timed reports whether the faults need the scheduler.
func (f *Faults) timed() bool { return f.Delay > 0 || f.Bandwidth > 0 || f.DelayFunc != nil }

// streams holds one random stream per fault, all seeded from Faults.Seed.
type streams struct {
	drop, duplicate, corrupt, ecn, reorder *rand.Rand
}

func newStreams(seed uint64) streams {
	s := func(stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }
	return streams{drop: s(1), duplicate: s(2), corrupt: s(3), ecn: s(4), reorder: s(5)}
}

// SetFaults replaces the link's faults. It may be called at any time,
// concurrently with Send. It reseeds the random streams from f.Seed,
// restarts the DropEvery count, and releases any reorder window, so the
// packets sent after it meet the same faults whenever it is called.
func (l *Link) SetFaults(f Faults) {
	l.tx.mu.Lock()
	defer l.tx.mu.Unlock()
	if len(l.tx.hold) > 0 && !l.tx.closed {
		l.releaseHold(time.Now())
	}
	l.setFaultsLocked(f)
	if l.tx.closed {
		return
	}
	l.deliverOut()
	if l.tx.sched.n > 0 {
		l.kick()
	}
}

func (l *Link) setFaultsLocked(f Faults) {
	l.tx.faults = f
	l.tx.rng = newStreams(f.Seed)
	l.tx.nth = 0
}

// Faults returns the link's current faults.
func (l *Link) Faults() Faults {
	l.tx.mu.Lock()
	defer l.tx.mu.Unlock()
	return l.tx.faults
}

// sendOne copies one packet and applies the faults to it.
func (l *Link) sendOne(buf []byte, now time.Time) {
	seq := l.tx.seq
	l.tx.seq++
	l.stats.sent.Add(1)
	if len(buf) < link.Headroom {
		l.stats.noRoute.Add(1)
		return
	}
	pkt := buf[link.Headroom:]
	if len(pkt) > l.mtu {
		l.stats.tooBig.Add(1)
		return
	}
	dst, ok := dstAddr(pkt)
	if !ok {
		l.stats.noRoute.Add(1)
		return
	}
	f := &l.tx.faults
	faulty := f.Filter == nil || f.Filter(pkt)
	if faulty && l.drop(pkt, seq) {
		l.stats.dropped.Add(1)
		return
	}
	p := getPacket(pkt)
	p.dst = dst
	if !faulty {
		l.shape(p, now)
		return
	}
	if e := ecn(p.b[:]); f.ECN > 0 && e != 0 && l.tx.rng.ecn.Float64() < f.ECN && e != ecnCE {
		wire.MarkCE(p.b[:])
		l.stats.marked.Add(1)
	}
	if f.Corrupt > 0 && l.tx.rng.corrupt.Float64() < f.Corrupt {
		flipBit(p.b[:p.n], l.tx.rng.corrupt)
		l.stats.corrupted.Add(1)
	}
	var dup *packet
	if f.Duplicate > 0 && l.tx.rng.duplicate.Float64() < f.Duplicate {
		dup = getPacket(p.b[:p.n])
		dup.dst = dst
		l.stats.duplicated.Add(1)
	}
	l.stage(p, now)
	if dup != nil {
		l.stage(dup, now)
	}
}

// drop decides whether a packet the faults apply to is lost. Every drop
// fault sees every packet, so each one's choices do not depend on the
// others'.
func (l *Link) drop(pkt []byte, seq uint64) bool {
	f := &l.tx.faults
	drop := false
	if f.DropFunc != nil && f.DropFunc(pkt, seq) {
		drop = true
	}
	if f.DropEvery > 0 {
		l.tx.nth++
		if l.tx.nth%uint64(f.DropEvery) == 0 {
			drop = true
		}
	}
	if f.Drop > 0 && l.tx.rng.drop.Float64() < f.Drop {
		drop = true
	}
	return drop
}

// flipBit flips one random bit of pkt that the ICRC covers, within the
// length the IP header gives.
func flipBit(pkt []byte, r *rand.Rand) {
	n := len(pkt)
	if _, total := ipLen(pkt); total > 0 && total < n {
		n = total
	}
	for {
		i := r.IntN(n * 8)
		off, bit := i>>3, byte(1)<<(i&7)
		if variantBits(pkt, off)&bit == 0 {
			pkt[off] ^= bit
			return
		}
	}
}

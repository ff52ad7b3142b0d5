package congestion

import (
	"math"

	"github.com/gorxe/gorxe/internal/monotime"
)

// pacer is a token bucket that lets a reaction point's rate out in bursts
// (quic-go's internal/congestion/pacer.go is the model). Credit is kept in
// nanobits, a rate in bits per second times nanoseconds, so that accruing
// is one multiplication with no remainder to lose and a change of rate
// needs no rescaling: a byte costs 8e9.
//
// A send is allowed while the credit is positive, and may take it below
// zero by one packet (x/net/quic's pacer does the same): the sender need
// not know the next packet's size to ask. When the credit is spent the
// pacer asks to be woken when a whole burst has built up again, so that a
// paced sender wakes once a burst, not once a packet.
type pacer struct {
	credit int64  // nanobits; at most burst, above -(one packet)
	burst  int64  // nanobits: the bucket's depth at the current rate
	depth  int64  // nanobits: the deepest it gets (Config.Burst)
	window uint64 // ns: the bucket holds at most this long of the rate (Config.BurstTime); 0 for no bound
	bps    uint64
	stamp  monotime.Time // credit is as of stamp
}

// setRate changes the rate, and with it the bucket's depth if the bucket
// is bounded by time: what the rate earns in the window, from MinBurst to
// depth. Credit above the new depth is lost, as a full bucket's would be.
func (p *pacer) setRate(bps uint64) {
	p.bps = bps
	p.burst = p.depth
	if p.window == 0 {
		return
	}
	if d := uint64(p.depth); bps <= d/p.window { // bits/s × ns = nanobits
		p.burst = max(int64(bps*p.window), min(MinBurst*nanobitsPerByte, p.depth))
	}
	p.credit = min(p.credit, p.burst)
}

// nanobitsPerByte is what a byte costs.
const nanobitsPerByte = 8e9

// fill makes the bucket full as of now: pacing starts with a burst.
func (p *pacer) fill(now monotime.Time) {
	p.credit, p.stamp = p.burst, now
}

// accrue adds the credit earned at the current rate up to now.
func (p *pacer) accrue(now monotime.Time) {
	if now <= p.stamp {
		return
	}
	dt := uint64(now - p.stamp)
	p.stamp = now
	room := uint64(p.burst - p.credit) // credit <= burst
	if p.bps == 0 || dt >= room/p.bps+1 {
		if p.bps != 0 {
			p.credit = p.burst
		}
		return
	}
	p.credit += int64(dt * p.bps) // < room: no overflow
}

// spend takes n bytes' worth of credit.
func (p *pacer) spend(n int) {
	if n <= 0 {
		return
	}
	if n > maxPacket || p.credit < minCredit+int64(n)*nanobitsPerByte {
		p.credit = minCredit // a sender far past its pacing: it waits long
		return
	}
	p.credit -= int64(n) * nanobitsPerByte
}

// maxPacket and minCredit keep spend's arithmetic far from overflow.
const (
	maxPacket = 1 << 30
	minCredit = -(1 << 62)
)

// wake returns when, from now, the bucket will hold a whole burst again.
func (p *pacer) wake(now monotime.Time) monotime.Time {
	need := uint64(p.burst - p.credit)
	if p.bps == 0 {
		return math.MaxInt64
	}
	return now + monotime.Time((need+p.bps-1)/p.bps)
}

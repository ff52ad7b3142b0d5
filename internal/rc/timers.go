package rc

import (
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
)

// timers holds a QP's deadlines: the local ACK timeout of the requester
// (IBTA Vol 1 §9.7.6.1.1) and the RNR wait after an RNR NAK
// (§9.7.5.2.8). A zero Time is an unarmed timer. Its hooks are named after
// the events that drive them (onPacketSent, onAcked, onRetransmit) and
// its handlers after the timer that expired (expiredRetransmit in the
// completer, expiredProbe here).
//
// A third, the tail-loss probe, is gorxe's own: when the requester has
// heard nothing for a few round trips, it sends its last packet again with
// AckReq. Go-back-N recovers a loss from the gap the next packet reveals;
// a lost last packet (or a lost ACK) reveals nothing, and without the probe
// costs the whole local ACK timeout. The probe is an ordinary duplicate to
// the responder, so it needs nothing of the peer.
type timers struct {
	q          *QP
	retransmit monotime.Time
	rnr        monotime.Time // while set, the requester waits out an RNR NAK
	probe      monotime.Time
	probeState probeState

	// Round-trip estimate, from one AckReq packet at a time (never a
	// retransmitted one), for the probe timeout: a smoothed mean and mean
	// deviation, as TCP's (RFC 6298).
	srtt       time.Duration
	rttvar     time.Duration
	rttMax     time.Duration // the longest recent sample, decaying toward srtt
	rttPending bool
	rttPSN     bth.PSN
	rttSent    monotime.Time // zero until settle stamps it

	// When the QP first sent, kept until the first clean sample: while it
	// is set, srtt is zero or the bound the first answer gave (onAnswer),
	// which that sample replaces.
	firstSent monotime.Time

	// Probes found not needed. probeArmedAt is when the probe timer was
	// last armed. A probe resends probed, whose wait began at probedSince
	// (the probe timer's arming), and watch follows its answers: late is
	// how long after probedSince the first came. probeFloor, the least
	// probe timeout, only grows.
	probeArmedAt monotime.Time
	probed       bth.PSN
	probedSince  monotime.Time
	watch        probeWatch
	late         time.Duration
	probeFloor   time.Duration
	// backoff doubles the probe timeout once for each go-back of a
	// probe's, until a clean round-trip sample ends it.
	backoff uint8

	// unsettled says packets went out since settle last armed the
	// timers for them.
	unsettled bool
}

// probeState is where the tail-loss probe stands.
type probeState uint8

const (
	// probeArmed: the probe fires after probeTimeout without news.
	probeArmed probeState = iota
	// probeSent: a probe is out, or the probe's go-back; the next probe
	// timeout goes back (again).
	probeSent
)

// probeWatch is what the requester knows of its last probe's need.
type probeWatch uint8

const (
	// watchNone: no probe is in question.
	watchNone probeWatch = iota
	// watchAnswer: a probe is out and its PSN is not yet answered.
	watchAnswer
	// watchDuplicate: its PSN is answered; a second answer for it before
	// any later PSN's means the original packet arrived, and the probe
	// was a duplicate: the answer was late, not lost.
	watchDuplicate
)

// minProbeTimeout is the least probe timeout until a probe is found not
// needed.
const minProbeTimeout = time.Millisecond

// reset disarms every timer and forgets the round-trip estimate.
func (t *timers) reset() { *t = timers{q: t.q} }

// stop disarms every timer, as the QP enters ERR.
func (t *timers) stop() { t.retransmit, t.rnr, t.probe = 0, 0, 0 }

// next returns the earliest armed deadline, or the zero Time. Congestion
// control's (a paced sender's wake-up, a deferred CNP) are among them.
func (t *timers) next() monotime.Time {
	return monotime.Min(monotime.Min(monotime.Min(t.retransmit, t.rnr), t.probe), t.q.cc.deadline())
}

// ackTimeout returns the local ACK timeout, 4.096 µs × 2^timeout, or 0 when
// the QP's timeout attribute is 0 (wait forever).
func (t *timers) ackTimeout() time.Duration {
	if t.q.attr.Timeout == 0 {
		return 0
	}
	return time.Duration(4096<<t.q.attr.Timeout) * time.Nanosecond
}

// onPacketSent notes a packet built for sending, and starts a round-trip
// sample on an AckReq packet sent for the first time. The timers it
// needs are armed by settle.
func (t *timers) onPacketSent(psn bth.PSN, ackReq, fresh bool) {
	t.unsettled = true
	if ackReq && fresh && !t.rttPending {
		t.rttPending, t.rttPSN, t.rttSent = true, psn, 0
	}
}

// onAnswer notes a response (an ACK, a NAK, a READ response or an atomic
// ACK) to a PSN the requester sent. If no round trip is measured yet, the
// first one seeds the estimate with the time since the QP's first packet
// went out: the packet that drew the answer left no earlier, so that time
// is at least a round trip, an estimate a probe can only wait too long by.
// Without it, a QP that loses packets from its start never measures one:
// every go-back voids the sample under way (Karn's rule), and while
// packets are lost a go-back comes within every round trip of a window, so
// no probe is armed and every lost tail costs the local ACK timeout (at 5%
// loss, write_bw of 64 KiB ran at a third of its rate with a probe).
func (t *timers) onAnswer() {
	if t.srtt != 0 || t.firstSent.IsZero() {
		return
	}
	bound := max(t.q.port.Now().Sub(t.firstSent), time.Nanosecond)
	t.srtt, t.rttvar, t.rttMax = bound, bound/2, bound
}

// onRetransmit notes a go-back-N from PSN from, which why names (a
// trace.GoBack reason), or a probe's resend of PSN from
// (trace.GoBackProbe): no round-trip sample is taken of a packet sent
// again (Karn's rule), as its answer may be the copy's. A go-back that
// starts past the sampled PSN leaves the sample alone: under steady loss
// a go-back comes within most round trips of a window, and a sample
// voided by every one of them would hardly ever be taken. A probe's
// answer voids the sample whatever its PSN: the probe asks for an ACK,
// and that ACK, covering the sampled PSN, would count the probe's wait
// as a round trip. A probe and its own go-back keep watching for the
// probe's answers: if they come twice, both were spurious.
func (t *timers) onRetransmit(from bth.PSN, why string) {
	if why == trace.GoBackProbe || !t.rttPSN.Before(from) {
		t.rttPending = false
	}
	if why != trace.GoBackProbe {
		t.watch = watchNone
	}
}

// settle arms the timers for the packets sent since it last ran: the
// retransmit timer if it is not running, and the probe timer anew, and
// stamps a round-trip sample's start. The QP calls it when it has handed
// the packets to the link (unlock), so that the clock is read once for a
// burst of packets, and not between a packet's arrival and the answer a
// program sends at once (write_lat's), where it cost 70 ns a turn.
func (t *timers) settle() {
	if !t.unsettled {
		return
	}
	t.unsettled = false
	now := t.q.port.Now()
	if t.retransmit.IsZero() {
		t.restartRetransmitAt(now)
	}
	if t.rttPending && t.rttSent.IsZero() {
		t.rttSent = now
	}
	if t.srtt == 0 && t.firstSent.IsZero() {
		t.firstSent = now
	}
	t.armProbe(now)
}

// onAcked takes a round-trip sample when an answer covers the sampled PSN
// (oldest is the completer's oldest unanswered PSN), and, as the answer
// shows progress, lets the probe fire again.
func (t *timers) onAcked(oldest bth.PSN) {
	t.probeState = probeArmed
	switch {
	case t.watch == watchAnswer && oldest.After(t.probed):
		t.watch, t.late = watchDuplicate, t.q.port.Now().Sub(t.probedSince)
	case t.watch == watchDuplicate && oldest.After(t.probed.Add(1)):
		t.watch = watchNone // a later PSN is answered: the responder answered the probe with it, or not at all
	}
	if !t.rttPending || !oldest.After(t.rttPSN) || t.rttSent.IsZero() {
		return
	}
	t.rttPending = false
	t.backoff = 0
	// At least 1 ns: a round trip on a fake clock can take no time, and
	// srtt 0 means none measured.
	sample := max(t.q.port.Now().Sub(t.rttSent), time.Nanosecond)
	if t.srtt == 0 || !t.firstSent.IsZero() {
		t.srtt, t.rttvar, t.rttMax, t.firstSent = sample, sample/2, sample, 0
		return
	}
	dev := t.srtt - sample
	if dev < 0 {
		dev = -dev
	}
	t.rttvar += (dev - t.rttvar) / 4
	t.srtt += (sample - t.srtt) / 8
	if sample >= t.rttMax {
		t.rttMax = sample
	} else {
		t.rttMax -= max(t.rttMax-t.srtt, 0) / rttMaxDecay
	}
}

// onDuplicateAck takes an ACK of psn, a PSN already acknowledged. If it
// answers the last probe a second time, the packet the probe resent had
// arrived and its answer was only late (a responder answers a duplicate
// with an ACK of its own): the probe was spurious. The least probe
// timeout then becomes twice that answer's delay, or twice what it was,
// so that a host whose answers come that late stops drawing probes, at
// most a few on the QP's life (half the local ACK timeout at most, where
// the probe still saves half of what a lost tail costs without it).
func (t *timers) onDuplicateAck(psn bth.PSN) {
	if t.watch != watchDuplicate || psn.Before(t.probed) {
		return
	}
	t.watch = watchNone
	t.probeFloor = min(max(2*t.late, 2*max(t.probeFloor, minProbeTimeout)), t.ackTimeout()/2)
	q := t.q
	q.stats.SpuriousProbes++
	q.event(trace.Event{Kind: trace.ProbeSpurious, PSN: uint32(t.probed), Wait: t.probeTimeout()})
}

// rttMaxDecay is how many samples the longest round trip takes to fade,
// by a factor e, toward the smoothed one: the tail of the round trips
// over the last several hundred, where rttvar, which forgets within a
// dozen samples, has forgotten the last hiccup. A one-CPU host's hiccups
// come about one in a hundred round trips (make bench-vm: a p99 of 4 to
// 5 ms under a median of 0.4); a hundred samples after one, a decay over
// 256 keeps two thirds of it (a probe timeout of twice that covers the
// next hiccup up to a third longer), where a decay over 64 kept a fifth
// and the next hiccup drew a spurious probe in one run of two.
const rttMaxDecay = 256

// probeTimeout is how long the requester waits without news before it
// probes: four round trips, or the smoothed round trip plus four of its
// mean deviations when the round trip varies more than that, or twice the
// longest recent round trip (rttMax) when that is longer still, at least
// 1 ms, or what spurious probes taught (onDuplicateAck), and at most half
// the local ACK timeout.
//
// On a loaded or one-CPU host the round trips have a tail that the mean
// deviation, gone within a few samples, does not cover: there, a probe
// timed by it fired on merely slow answers, a few in every thousand round
// trips, and its second timeout sent the window again. A probe that was
// not needed costs a duplicate packet.
//
// No probe is armed until a round trip has been measured or the first
// answer has bounded one (armProbe, onAnswer), as Linux TCP's probe waits
// as long as its retransmission timeout until its first sample: a QP's
// first exchange can be slow where nothing after it is (a peer just
// started, its memory not yet touched: 30 to 60 ms in the emulated VMs of
// make bench-vm, where a fixed first wait of 10 ms probed and went back at
// the start of every run). The local ACK timeout recovers a first message
// lost whole.
//
// It doubles for each go-back of the probe's, and stays doubled until a
// clean round-trip sample comes, as TCP backs its retransmission timer
// off (RFC 6298, 5.5 and 5.7). A responder that answers all along, but
// late, behind a queue (soft-RoCE in an emulated VM, draining a window a
// packet a millisecond), leaves every answer after a go-back, which
// voids the sample under way (Karn's rule): without the backoff the
// round trip measured before the queue built timed every probe. Answers
// that come within the probe timeout of a go-back do not end the
// backoff: they may answer packets queued before it, and say nothing of
// how long the responder now takes. An earlier rule ended it there, and
// a 4 MB/s link that lost one packet went back 32 times for 2048
// packets and sent 7195 duplicates (rnic's TestProbeSlowDrain).
func (t *timers) probeTimeout() time.Duration {
	d := max(4*t.srtt, t.srtt+4*t.rttvar, 2*t.rttMax, minProbeTimeout)
	return min(max(d, t.probeFloor)<<t.backoff, t.ackTimeout()/2)
}

// maxProbeBackoff bounds the doublings: past it, half the local ACK
// timeout is the bound anyway.
const maxProbeBackoff = 16

func (t *timers) armProbe(now monotime.Time) {
	q := t.q
	if q.noProbe || t.srtt == 0 || t.ackTimeout() == 0 || !q.req.unanswered() {
		t.probe = 0
		return
	}
	t.probe, t.probeArmedAt = now.Add(t.probeTimeout()), now
}

// restartRetransmit re-arms the timer after progress, or disarms it when
// nothing is outstanding.
func (t *timers) restartRetransmit() { t.restartRetransmitAt(0) }

// restartRetransmitAt is restartRetransmit at now; a zero now reads the
// clock, and only if the timer is to be armed.
func (t *timers) restartRetransmitAt(now monotime.Time) {
	d := t.ackTimeout()
	if d == 0 || !t.q.req.outstanding() {
		t.retransmit, t.probe = 0, 0
		return
	}
	if now.IsZero() {
		now = t.q.port.Now()
	}
	t.retransmit = now.Add(d)
	t.armProbe(now)
}

// startRNRWait stops the requester for the time an RNR NAK asked.
func (t *timers) startRNRWait(timer aeth.RNRTimer) {
	t.rnr = t.q.port.Now().Add(timer.Duration())
	t.retransmit, t.probe = 0, 0
}

// resends reports whether run at now would retransmit: the local ACK
// timeout or the tail-loss probe has expired.
func (t *timers) resends(now monotime.Time) bool {
	return !t.retransmit.IsZero() && !now.Before(t.retransmit) || !t.probe.IsZero() && !now.Before(t.probe)
}

// rnrWaiting reports whether the requester is waiting out an RNR NAK.
func (t *timers) rnrWaiting() bool { return !t.rnr.IsZero() }

// run fires the timers that are due at now.
func (t *timers) run(now monotime.Time) {
	q := t.q
	if !t.rnr.IsZero() && !now.Before(t.rnr) {
		t.rnr = 0
		t.rnrWaitOver()
	}
	if !t.retransmit.IsZero() && !now.Before(t.retransmit) {
		t.retransmit = 0
		q.comp.expiredRetransmit()
	}
	if !t.probe.IsZero() && !now.Before(t.probe) {
		t.expiredProbe(now)
	}
	q.cc.run(now)
}

// rnrWaitOver reports the end of an RNR wait, and the go-back-N that the
// RNR NAK began and that starts now, from the NAKed PSN, unless answers
// since have left nothing to send again.
func (t *timers) rnrWaitOver() {
	q := t.q
	psn := uint32(q.req.psn)
	q.event(trace.Event{Kind: trace.RNRWaitOver, PSN: psn})
	if q.req.psn.Before(q.req.sentMax) {
		q.event(trace.Event{Kind: trace.GoBack, PSN: psn, Reason: trace.GoBackRNR})
	}
}

// expiredProbe handles a probe timeout. The first sends a probe. A second
// with still no progress means the responder is silent: it is dropping
// everything after a gap it has NAKed already, so the packet it waits for,
// the first unacknowledged one, was lost again. The requester then goes
// back to it at once, instead of after the local ACK timeout. Neither uses
// up retry_cnt, which counts local ACK timeouts.
//
// The responder may be slow rather than silent (a soft-RoCE peer in an
// emulated VM, with a queue of a window to drain), so the go-back resends
// only a few packets until one is answered (recoveryFew), and an answer
// for a packet sent before it undoes it (completer.onProgress). Each
// further probe timeout without progress goes back again, the timeout
// doubled each time (probeTimeout): a few packets on a doubling clock
// neither bury a slow responder nor leave a lost resend to the local ACK
// timeout (1/256 loss in sim's parking lot starved a flow to 2.4 of
// 10 Gb/s when the probe went back only once).
func (t *timers) expiredProbe(now monotime.Time) {
	q := t.q
	if t.probeState == probeSent {
		t.probe = 0
		t.backoff = min(t.backoff+1, maxProbeBackoff)
		q.comp.goBack(q.comp.oldest(), trace.GoBackProbe)
		q.req.sendSome()
		return
	}
	if t.probeLast("") {
		t.probed, t.probedSince, t.watch = q.req.sentMax.Add(bth.PSNMask), t.probeArmedAt, watchAnswer
	}
	t.probeState = probeSent
	t.armProbe(now)
}

// probeLast sends the last packet sent again, asking for an ACK, and
// reports whether it could (requester.resendLast; not on a QP without
// probes). why is the probe's trace reason: empty for the tail-loss
// probe, which a probe timeout sent, or trace.ProbeConfirm. The next
// probe timeout without progress goes back.
func (t *timers) probeLast(why string) bool {
	q := t.q
	if q.noProbe || !q.req.resendLast() {
		return false
	}
	// The answer may be the copy's: a sample taken from it counted the
	// probe's wait as a round trip, and twice that the next one's.
	psn := q.req.sentMax.Add(bth.PSNMask)
	t.onRetransmit(psn, trace.GoBackProbe)
	t.probeState = probeSent
	q.stats.TailProbes++
	e := trace.Event{Kind: trace.Probe, PSN: uint32(psn), Reason: why}
	if why == "" {
		e.Wait = t.probeTimeout()
	}
	q.event(e)
	return true
}

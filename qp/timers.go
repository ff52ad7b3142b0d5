package qp

import (
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
)

// timers holds a QP's two deadlines: the local ACK timeout of the
// requester (IBTA Vol 1 §9.7.6.1.1) and the RNR wait after an RNR NAK
// (§9.7.5.2.8). A zero time is an unarmed timer.
//
// A third, the tail-loss probe, is gorxe's own: when the requester has
// heard nothing for a few round trips, it sends its last packet again with
// AckReq. Go-back-N recovers a loss from the gap the next packet reveals;
// a lost last packet (or a lost ACK) reveals nothing, and without the probe
// costs the whole local ACK timeout. The probe is an ordinary duplicate to
// the responder, so it needs nothing of the peer.
type timers struct {
	retransmit time.Time
	rnr        time.Time
	probe      time.Time
	probeSent  bool // a probe is out; the next probe timeout goes back N
	probeDone  bool // the probe went back N without progress: no more probes until there is some
	rnrWait    bool // sending stops until the RNR timer expires

	// Round-trip estimate, from one AckReq packet at a time (never a
	// retransmitted one), for the probe timeout.
	srtt       time.Duration
	rttPending bool
	rttPSN     bth.PSN
	rttSent    time.Time // zero until settle stamps it

	// unsettled says packets went out since settle last armed the
	// timers for them.
	unsettled bool
}

func (t *timers) next() time.Time {
	next := time.Time{}
	for _, d := range [...]time.Time{t.retransmit, t.rnr, t.probe} {
		if !d.IsZero() && (next.IsZero() || d.Before(next)) {
			next = d
		}
	}
	return next
}

// ackTimeout returns the local ACK timeout, 4.096 µs × 2^timeout, or 0 when
// the QP's timeout attribute is 0 (wait forever).
func (q *QP) ackTimeout() time.Duration {
	if q.attr.Timeout == 0 {
		return 0
	}
	return time.Duration(4096<<q.attr.Timeout) * time.Nanosecond
}

// onPacketSent notes a packet built for sending, and starts a round-trip
// sample on an AckReq packet sent for the first time. The timers it
// needs are armed by settle.
func (t *timers) onPacketSent(psn bth.PSN, ackReq, fresh bool) {
	t.unsettled = true
	if ackReq && fresh && !t.rttPending {
		t.rttPending, t.rttPSN, t.rttSent = true, psn, time.Time{}
	}
}

// settle arms the timers for the packets sent since it last ran: the
// retransmit timer if it is not running, and the probe timer anew, and
// stamps a round-trip sample's start. The QP calls it when it has handed
// the packets to the link (unlock), so that the clock is read once for a
// burst of packets, and not between a packet's arrival and the answer a
// program sends at once (write_lat's), where it cost 70 ns a turn.
func (t *timers) settle(q *QP) {
	if !t.unsettled {
		return
	}
	t.unsettled = false
	now := q.port.Now()
	if t.retransmit.IsZero() {
		t.restartRetransmitAt(q, now)
	}
	if t.rttPending && t.rttSent.IsZero() {
		t.rttSent = now
	}
	t.armProbe(q, now)
}

// onAcked takes a round-trip sample when the ACK covers the sampled PSN.
func (t *timers) onAcked(q *QP) {
	if t.rttPending && q.comp.psn.After(t.rttPSN) {
		t.rttPending = false
		sample := q.port.Now().Sub(t.rttSent)
		if t.srtt == 0 {
			t.srtt = sample
		} else {
			t.srtt += (sample - t.srtt) / 8
		}
	}
}

// probeTimeout is how long the requester waits without news before it
// probes: four round trips, at least 1 ms, at most half the local ACK
// timeout; 10 ms until a round trip has been measured. A probe that was
// not needed costs one duplicate packet.
func (q *QP) probeTimeout() time.Duration {
	d := 10 * time.Millisecond
	if q.tm.srtt > 0 {
		d = max(4*q.tm.srtt, time.Millisecond)
	}
	return min(d, q.ackTimeout()/2)
}

func (t *timers) armProbe(q *QP, now time.Time) {
	if q.noProbe || t.probeDone || q.ackTimeout() == 0 || q.req.sentMax == q.comp.psn {
		t.probe = time.Time{}
		return
	}
	t.probe = now.Add(q.probeTimeout())
}

// restartRetransmit re-arms the timer after progress, or disarms it when
// nothing is outstanding.
func (t *timers) restartRetransmit(q *QP) { t.restartRetransmitAt(q, time.Time{}) }

// restartRetransmitAt is restartRetransmit at now; a zero now reads the
// clock, and only if the timer is to be armed.
func (t *timers) restartRetransmitAt(q *QP, now time.Time) {
	d := q.ackTimeout()
	if d == 0 || q.req.psn == q.comp.psn {
		t.retransmit = time.Time{}
		t.probe = time.Time{}
		return
	}
	if now.IsZero() {
		now = q.port.Now()
	}
	t.retransmit = now.Add(d)
	t.armProbe(q, now)
}

// startRNRWait stops the requester for the time an RNR NAK asked.
func (t *timers) startRNRWait(q *QP, timer aeth.RNRTimer) {
	t.rnrWait = true
	t.rnr = q.port.Now().Add(timer.Duration())
	t.retransmit = time.Time{}
	t.probe = time.Time{}
}

// runTimers fires the timers that are due at now.
func (q *QP) runTimers(now time.Time) {
	if q.tm.rnrWait && !now.Before(q.tm.rnr) {
		q.tm.rnrWait = false
		q.tm.rnr = time.Time{}
		if q.trace != nil {
			q.tracef("RNR wait over, resending from PSN %d", q.comp.psn)
		}
	}
	if !q.tm.retransmit.IsZero() && !now.Before(q.tm.retransmit) {
		q.expiredRetransmit()
	}
	if !q.tm.probe.IsZero() && !now.Before(q.tm.probe) {
		q.expiredProbe(now)
	}
}

// expiredProbe handles a probe timeout. The first sends a probe. A second
// with still no progress means the responder is silent: it is dropping
// everything after a gap it has NAKed already, so the packet it waits for,
// the first unacknowledged one, was lost again. The requester then goes
// back to it at once, instead of after the local ACK timeout. Neither uses
// up retry_cnt, which counts local ACK timeouts.
//
// That go-back is the probe's last word until the responder shows
// progress: if it does not answer, it may be slow rather than silent (a
// soft-RoCE peer in an emulated VM, with seconds of duplicates queued),
// and a requester that sent its window again every two probe timeouts
// would bury it in more. Only the local ACK timeout, which counts
// against retry_cnt, goes back after that.
func (q *QP) expiredProbe(now time.Time) {
	if q.tm.probeSent {
		q.tm.probeSent = false
		q.tm.probeDone = true
		if q.trace != nil {
			q.tracef("no answer to the probe: go back to PSN %d", q.comp.psn)
		}
		q.goBack(q.comp.psn)
		q.tm.probe = time.Time{}
		q.sendSome()
		return
	}
	q.sendProbe()
	q.tm.probeSent = true
	q.tm.armProbe(q, now)
}

// sendProbe sends the last packet sent again, asking for an ACK: if it was
// lost, it now arrives in order and is acknowledged; if only what followed
// was lost, the responder NAKs the gap it now sees; if it arrived, the
// responder acknowledges the duplicate. A READ or atomic is not probed:
// its duplicate would make the responder replay it.
func (q *QP) sendProbe() {
	if q.attr.State != StateRTS && q.attr.State != StateSQD || q.req.sentMax == q.comp.psn {
		return
	}
	last := q.req.sentMax.Add(bth.PSNMask)
	for i := q.sq.head; i != q.sq.tail; i++ {
		w := q.sq.at(i)
		if !w.started {
			return
		}
		if !last.InRange(w.first, w.last) {
			continue
		}
		if w.isReadOrAtomic() {
			return
		}
		saved, savedProbe := q.req, q.tm.probe
		q.req.idx, q.req.pkt, q.req.psn = i, uint32(last.Diff(w.first)), last
		q.req.probe = true
		q.stats.TailProbes++
		if q.trace != nil {
			q.tracef("no ACK for %v: probing with PSN %d", q.probeTimeout(), last)
		}
		q.sendPacket(w)
		q.req, q.tm.probe = saved, savedProbe
		return
	}
}

// expiredRetransmit handles a local ACK timeout: the requester goes back to
// the oldest unacknowledged PSN, unless retry_cnt is used up.
func (q *QP) expiredRetransmit() {
	q.tm.retransmit = time.Time{}
	if q.req.psn == q.comp.psn || q.attr.State != StateRTS && q.attr.State != StateSQD {
		return
	}
	q.stats.RetransmitTimeouts++
	if q.trace != nil {
		q.tracef("local ACK timeout at PSN %d", q.comp.psn)
	}
	if !q.useRetry() {
		return
	}
	q.goBack(q.comp.psn)
	q.tm.restartRetransmit(q)
	q.sendSome()
}

// useRetry takes one retry from retry_cnt (7 is unlimited, as rxe), or
// fails the oldest work request with RETRY_EXC_ERR when none are left.
func (q *QP) useRetry() bool {
	switch q.comp.retryLeft {
	case 7:
		return true
	case 0:
		q.stats.RetryExceededErr++
		q.enterError(q.sq.at(q.sq.head), cq.StatusRetryExcErr)
		return false
	}
	q.comp.retryLeft--
	return true
}

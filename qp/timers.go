package qp

import (
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/wire/aeth"
)

// timers holds a QP's two deadlines: the local ACK timeout of the
// requester (IBTA Vol 1 §9.7.6.1.1) and the RNR wait after an RNR NAK
// (§9.7.5.2.8). A zero time is an unarmed timer.
type timers struct {
	retransmit time.Time
	rnr        time.Time
	rnrWait    bool // sending stops until the RNR timer expires
}

func (t *timers) next() time.Time {
	switch {
	case t.retransmit.IsZero():
		return t.rnr
	case t.rnr.IsZero() || t.retransmit.Before(t.rnr):
		return t.retransmit
	}
	return t.rnr
}

// ackTimeout returns the local ACK timeout, 4.096 µs × 2^timeout, or 0 when
// the QP's timeout attribute is 0 (wait forever).
func (q *QP) ackTimeout() time.Duration {
	if q.attr.Timeout == 0 {
		return 0
	}
	return time.Duration(4096<<q.attr.Timeout) * time.Nanosecond
}

// onPacketSent arms the retransmit timer when the first unacknowledged
// packet goes out.
func (t *timers) onPacketSent(q *QP) {
	if t.retransmit.IsZero() {
		t.restartRetransmit(q)
	}
}

// restartRetransmit re-arms the timer after progress, or disarms it when
// nothing is outstanding.
func (t *timers) restartRetransmit(q *QP) {
	d := q.ackTimeout()
	if d == 0 || q.req.psn == q.comp.psn {
		t.retransmit = time.Time{}
		return
	}
	t.retransmit = q.port.Now().Add(d)
}

// startRNRWait stops the requester for the time an RNR NAK asked.
func (t *timers) startRNRWait(q *QP, timer aeth.RNRTimer) {
	t.rnrWait = true
	t.rnr = q.port.Now().Add(timer.Duration())
	t.retransmit = time.Time{}
}

// runTimers fires the timers that are due at now.
func (q *QP) runTimers(now time.Time) {
	if q.tm.rnrWait && !now.Before(q.tm.rnr) {
		q.tm.rnrWait = false
		q.tm.rnr = time.Time{}
		q.tracef("RNR wait over, resending from PSN %d", q.comp.psn)
	}
	if !q.tm.retransmit.IsZero() && !now.Before(q.tm.retransmit) {
		q.expiredRetransmit()
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
	q.tracef("local ACK timeout at PSN %d", q.comp.psn)
	if !q.useRetry() {
		return
	}
	q.goBack(q.comp.psn)
	q.tm.restartRetransmit(q)
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

package congestion

import (
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
)

// NotificationPoint is DCQCN's notification point for one QP: it turns
// the ECN CE marks on the packets the QP receives into CNPs back to the
// sender's QP, at most one per min_time_between_cnps.
//
// A marked packet with no CNP sent in the last interval is answered at
// once. One within the interval gets no CNP of its own. In the paper
// variant (the paper's rule, as uet-htsim's DCQCNSink runs it), the
// interval's end then sends one CNP for all the marks within it: Deadline
// says when, and Advance says that it is due. In the ConnectX variant
// they are only counted: NVIDIA documents no deferred CNP, and with its
// interval of a few microseconds the next mark comes soon.
//
// The zero NotificationPoint is off: it counts marks and sends no CNP.
// It is not safe for concurrent use: its QP's owner drives it.
type NotificationPoint struct {
	on       bool
	deferred bool
	interval time.Duration
	sent     bool          // a CNP has gone
	last     monotime.Time // when the last CNP went
	pending  bool          // a mark within the interval awaits its end
	c        Counters
}

// NewNotificationPoint returns a notification point with p's
// min_time_between_cnps, or p's first problem.
func NewNotificationPoint(p Params) (*NotificationPoint, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &NotificationPoint{
		on:       true,
		deferred: p.Variant == VariantPaper,
		interval: p.MinTimeBetweenCNPs,
	}, nil
}

// OnECNMarked takes a packet for this QP that arrived at now with ECN CE
// set, and reports whether to send a CNP for it now.
func (n *NotificationPoint) OnECNMarked(now monotime.Time) bool {
	n.c.NPECNMarkedRoCEPackets++
	if !n.on {
		return false
	}
	if n.sent && now < n.last.Add(n.interval) {
		n.c.NPMarksCoalesced++
		n.pending = n.deferred
		return false
	}
	n.send(now)
	return true
}

// Deadline returns when a deferred CNP is due, or the zero Time if none
// waits.
func (n *NotificationPoint) Deadline() monotime.Time {
	if !n.pending {
		return 0
	}
	return n.last.Add(n.interval)
}

// Advance reports whether a deferred CNP is due at now; if it is, the
// caller sends it now, and the next interval starts.
func (n *NotificationPoint) Advance(now monotime.Time) bool {
	if !n.pending || now < n.last.Add(n.interval) {
		return false
	}
	n.send(now)
	return true
}

// Enabled reports whether n sends CNPs (it is not the zero, off,
// NotificationPoint).
func (n *NotificationPoint) Enabled() bool { return n.on }

// Counters returns n's counters; the RP's are zero.
func (n *NotificationPoint) Counters() Counters { return n.c }

func (n *NotificationPoint) send(now monotime.Time) {
	n.sent, n.last, n.pending = true, now, false
	n.c.NPCNPSent++
}

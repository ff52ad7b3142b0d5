package mem

import (
	"sync"
	"time"
)

// egress is a link's send side after the drops: the reorder window, then
// the schedule of packets that are paced or delayed. Packets are delivered
// in the order they leave the schedule.
type egress struct {
	mu     sync.Mutex
	closed bool
	faults Faults
	rng    streams
	seq    uint64 // packets handed to Send, for DropFunc
	nth    uint64 // packets the faults applied to since SetFaults, for DropEvery

	hold      []*packet // the reorder window, in arrival order
	holdSince time.Time // when the oldest held packet arrived
	holdOrd   uint64    // arrival counter for hold

	// sched holds packets in delivery order; their times never decrease,
	// so a FIFO serves where a heap would otherwise be needed.
	sched    ring
	lastAt   time.Time // delivery time of the last scheduled packet
	nextFree time.Time // when the paced link finishes serializing

	out     []*packet // packets to deliver before the lock is released
	running bool      // the scheduler goroutine has been started
}

// stage puts a packet the faults apply to into the reorder window, or
// passes it on.
func (l *Link) stage(p *packet, now time.Time) {
	w := l.tx.faults.Reorder
	if w <= 1 {
		l.shape(p, now)
		return
	}
	if len(l.tx.hold) == 0 {
		l.tx.holdSince = now
	}
	p.ord = l.tx.holdOrd
	l.tx.holdOrd++
	l.tx.hold = append(l.tx.hold, p)
	if len(l.tx.hold) >= w {
		l.releaseHold(now)
	}
}

// releaseHold shuffles the reorder window and passes its packets on.
func (l *Link) releaseHold(now time.Time) {
	h := l.tx.hold
	r := l.tx.rng.reorder
	for i := len(h) - 1; i > 0; i-- {
		j := r.IntN(i + 1)
		h[i], h[j] = h[j], h[i]
	}
	// A packet is reordered if it follows one sent after it (RFC 4737 §3.3).
	var reordered, maxOrd uint64
	for i, p := range h {
		if i > 0 && p.ord < maxOrd {
			reordered++
		}
		maxOrd = max(maxOrd, p.ord)
		l.shape(p, now)
	}
	l.stats.reordered.Add(reordered)
	clear(h)
	l.tx.hold = h[:0]
}

// shape delivers a packet now, or schedules it when the link is paced or
// delayed or packets are already waiting, keeping delivery in order.
func (l *Link) shape(p *packet, now time.Time) {
	f := &l.tx.faults
	if !f.timed() && l.tx.sched.n == 0 {
		l.tx.out = append(l.tx.out, p)
		return
	}
	at := now
	if f.Bandwidth > 0 {
		start := now
		if l.tx.nextFree.After(start) {
			start = l.tx.nextFree
		}
		l.tx.nextFree = start.Add(time.Duration(int64(p.n) * int64(time.Second) / f.Bandwidth))
		at = l.tx.nextFree
	}
	at = at.Add(f.Delay)
	if f.DelayFunc != nil {
		at = at.Add(f.DelayFunc(p.b[:p.n]))
	}
	if at.Before(l.tx.lastAt) {
		at = l.tx.lastAt
	}
	l.tx.lastAt = at
	p.at = at
	l.tx.sched.push(p)
}

// releaseDue moves the scheduled packets that are due to the out list, and
// releases a reorder window that has waited ReorderFlush.
func (l *Link) releaseDue(now time.Time) {
	for l.tx.sched.n > 0 && !l.tx.sched.peek().at.After(now) {
		l.tx.out = append(l.tx.out, l.tx.sched.pop())
	}
	if len(l.tx.hold) > 0 && now.Sub(l.tx.holdSince) >= ReorderFlush {
		l.releaseHold(now)
	}
}

// nextDeadline returns when releaseDue next has work to do.
func (l *Link) nextDeadline() (time.Time, bool) {
	var t time.Time
	ok := false
	if l.tx.sched.n > 0 {
		t, ok = l.tx.sched.peek().at, true
	}
	if len(l.tx.hold) > 0 {
		if h := l.tx.holdSince.Add(ReorderFlush); !ok || h.Before(t) {
			t, ok = h, true
		}
	}
	return t, ok
}

// kick starts the scheduler goroutine if it is not running and tells it
// to look at its deadline again. l.tx.mu is held.
func (l *Link) kick() {
	if !l.tx.running {
		l.tx.running = true
		l.wg.Add(1)
		go l.runScheduler()
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// runScheduler delivers scheduled packets when they are due and flushes
// reorder windows that traffic stopped filling, until the link is closed.
func (l *Link) runScheduler() {
	defer l.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		l.tx.mu.Lock()
		if l.tx.closed {
			l.tx.mu.Unlock()
			return
		}
		now := time.Now()
		l.releaseDue(now)
		l.deliverOut()
		next, ok := l.nextDeadline()
		l.tx.mu.Unlock()

		if ok {
			timer.Reset(next.Sub(now))
		} else {
			timer.Stop()
		}
		select {
		case <-timer.C:
		case <-l.wake:
		case <-l.done:
			return
		}
	}
}

package rnic

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/internal/rc"
)

// A worker keeps its QPs' timers in a heap of deadlines, so that a turn
// costs in proportion to the timers that come due, not to the QPs the
// worker owns. (It used to ask every QP for its deadline twice a turn, to
// run the due ones and then to find the next: with 4096 QPs, 8192 QP
// locks a turn, at several hundred turns a second; BenchmarkScale.)
//
// A QP tells its worker of its deadline through rc.Scheduler's Timer after every
// change under its lock while a timer is armed, and deadlines mostly move
// later (the probe timer is pushed back after every burst). So a QP has at
// most one live item in the heap, and its deadline may be later than the
// item: when the item comes up, the worker asks the QP, and runs it if it
// is due or files it again at its deadline if not. Only a deadline earlier
// than the QP's item needs a new item, under the worker's lock; the next
// Timer calls, with later times, cost an atomic load. A QP whose timers
// are all disarmed leaves the heap when its item comes up.

// timerEntry is a QP's place in its worker's timer heap.
type timerEntry struct {
	q rc.Runner
	// at is the time of the QP's live item in the heap, a monotime.Time;
	// 0 when it has none, removed once the QP is destroyed.
	// An item whose time is not its entry's at has been superseded by an
	// earlier one and is dropped when it comes up. It changes under the
	// worker's lock; Timer reads it without.
	at atomic.Int64
}

// removed is a destroyed QP's timerEntry.at: earlier than any time, so
// that Timer never files the QP again.
const removed = -1

// timerItem is an entry in the heap: its QP is to be looked at at at.
type timerItem struct {
	at int64
	e  *timerEntry
}

// timerHeap is a binary min-heap of items by time. It is written out
// rather than used through container/heap, whose Push and Pop box every
// item in an interface: an allocation for each timer filed.
type timerHeap []timerItem

func (h *timerHeap) push(it timerItem) {
	*h = append(*h, it)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if s[parent].at <= s[i].at {
			break
		}
		s[parent], s[i] = s[i], s[parent]
		i = parent
	}
}

func (h *timerHeap) pop() timerItem {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = timerItem{}
	s = s[:last]
	for i := 0; ; {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(s) && s[l].at < s[least].at {
			least = l
		}
		if r < len(s) && s[r].at < s[least].at {
			least = r
		}
		if least == i {
			break
		}
		s[i], s[least] = s[least], s[i]
		i = least
	}
	*h = s
	return top
}

// next returns the earliest item's time, or math.MaxInt64.
func (h timerHeap) next() int64 {
	if len(h) == 0 {
		return math.MaxInt64
	}
	return h[0].at
}

// arm files e's QP to be looked at at at, if no item of its comes
// earlier, and wakes the worker when at comes before the worker's wake
// time. It may be called from any goroutine, with the QP's lock held.
func (w *worker) arm(e *timerEntry, at int64) {
	if cur := e.at.Load(); cur != 0 && cur <= at {
		return // an item of the QP's comes no later
	}
	w.mu.Lock()
	if cur := e.at.Load(); cur != 0 && cur <= at {
		w.mu.Unlock()
		return
	}
	e.at.Store(at)
	w.timers.push(timerItem{at: at, e: e})
	earlier := at < w.wakeAt
	if earlier {
		w.wakeAt = at
	}
	w.mu.Unlock()
	switch {
	case !earlier:
	case w.loop != nil:
		w.turnOnLoop(at)
	default:
		w.wake()
	}
}

// stallLate is how late a timer must fire for the worker to take it that
// the device was stopped, and read the link before it runs the timers
// (Device.catchUp). Go's timers fire within tens of microseconds on an
// idle host; a timer later than this says the process or the machine
// was not scheduled. A catch-up costs one system call when nothing is
// waiting. A timer that would retransmit reads the link first however
// late it fires: the answer may have come and be waiting unread, the
// receive goroutine not yet run after it (seen in an interop run on a
// loaded host: rxe's ACK crossed the bridge a millisecond before the
// tail-loss probe it made needless).
const stallLate = 250 * time.Microsecond

// runTimers runs the QPs whose items have come up by now and whose
// deadlines have passed, and files again those whose deadlines moved
// later. A QP's item leaves the heap (its entry's at goes to 0) before
// the QP is asked for its deadline: a timer the QP arms in between files
// a new item, and one it armed before shows in the deadline.
func (w *worker) runTimers(now monotime.Time) {
	t := int64(now)
	w.mu.Lock()
	for len(w.timers) > 0 && w.timers[0].at <= t {
		it := w.timers.pop()
		if it.e.at.CompareAndSwap(it.at, 0) {
			w.due = append(w.due, it.e)
		}
	}
	w.mu.Unlock()
	caughtUp := w.loop != nil // a device on a Loop is never stopped
	for _, e := range w.due {
		d := e.q.Deadline()
		if !caughtUp && !d.IsZero() && (now.Sub(d) > stallLate || e.q.Resends(now)) {
			// The device was not running when this timer fell due (the
			// process or its machine was stopped or not scheduled), or
			// the timer would send again: what it waits for may be
			// waiting on the link, read by nobody yet. Read it first, so
			// that no probe or go-back goes out at an answer that came.
			w.dev.catchUp()
			caughtUp = true
			d = e.q.Deadline()
		}
		switch {
		case d.IsZero():
			// Disarmed: the QP's next Timer call files it again.
		case !now.Before(d):
			e.q.Run() // its unlock tells Timer of the timers it arms next
		default:
			w.arm(e, int64(d))
		}
	}
	clear(w.due)
	w.due = w.due[:0]
}

// sleep returns how long the worker may sleep before its earliest item
// comes up, and leaves that time in wakeAt, below which Timer kicks it.
func (w *worker) sleep() time.Duration {
	at := w.rearm()
	if at == math.MaxInt64 {
		return time.Hour
	}
	return max(w.dev.clock.Until(monotime.Time(at)), 0)
}

// rearm leaves the earliest item's time in wakeAt, below which Timer
// wakes the worker, and returns it: math.MaxInt64 when there is none.
func (w *worker) rearm() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wakeAt = w.timers.next()
	return w.wakeAt
}

package fabric

import (
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
)

// Handler is what an event runs: Handle is called at the event's time
// with the argument it was scheduled with.
type Handler interface {
	Handle(now monotime.Time, arg any)
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(now monotime.Time, arg any)

// Handle calls f(now, arg).
func (f HandlerFunc) Handle(now monotime.Time, arg any) { f(now, arg) }

// Clock is a virtual clock with its queue of events. Time moves only when
// an event runs: Step jumps to the earliest event and runs it. Events at
// equal times run in the order they were scheduled, so a run depends on
// nothing but what was scheduled: the same events give the same run.
//
// A Clock is not safe for concurrent use; a simulation runs on one
// goroutine.
type Clock struct {
	now    monotime.Time
	seq    uint64
	events events
}

// NewClock returns a clock at its epoch, monotime's first non-zero Time,
// with no events.
func NewClock() *Clock { return &Clock{now: 1} }

// Now returns the clock's time.
func (c *Clock) Now() monotime.Time { return c.now }

// Pending returns the number of events not yet run.
func (c *Clock) Pending() int { return len(c.events) }

// At schedules h.Handle(t, arg) at t, or now if t has passed.
func (c *Clock) At(t monotime.Time, h Handler, arg any) {
	t = max(t, c.now)
	c.seq++
	c.events.push(event{at: t, seq: c.seq, h: h, arg: arg})
}

// After schedules h.Handle at d from now.
func (c *Clock) After(d time.Duration, h Handler, arg any) { c.At(c.now.Add(d), h, arg) }

// Next returns the time of the earliest event, and false if there is none.
func (c *Clock) Next() (monotime.Time, bool) {
	if len(c.events) == 0 {
		return 0, false
	}
	return c.events[0].at, true
}

// Step moves the clock to the earliest event and runs it. It returns
// false if there was none.
func (c *Clock) Step() bool {
	if len(c.events) == 0 {
		return false
	}
	e := c.events.pop()
	c.now = e.at
	e.h.Handle(e.at, e.arg)
	return true
}

// RunUntil runs every event at or before t, in order, then leaves the
// clock at t (or where it was, if that is later).
func (c *Clock) RunUntil(t monotime.Time) {
	for len(c.events) > 0 && c.events[0].at <= t {
		c.Step()
	}
	c.now = max(c.now, t)
}

// RunFor runs the events of the next d and leaves the clock d later.
func (c *Clock) RunFor(d time.Duration) { c.RunUntil(c.now.Add(d)) }

// event is one scheduled call. seq breaks ties between equal times in
// the order of scheduling.
type event struct {
	at  monotime.Time
	seq uint64
	h   Handler
	arg any
}

// events is a binary min-heap of events by (at, seq), written out rather
// than through container/heap so that scheduling allocates nothing.
type events []event

func (e *event) before(f *event) bool {
	if e.at != f.at {
		return e.at < f.at
	}
	return e.seq < f.seq
}

func (q *events) push(e event) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].before(&h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *events) pop() event {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h[n] = event{}
	h = h[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && h[l].before(&h[m]) {
			m = l
		}
		if r := l + 1; r < n && h[r].before(&h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}

package rsocket

import (
	"context"
	"sync"
	"time"
)

// deadline is a read deadline as net.Conn's, held as a context that a
// waiting read waits on: it ends when the deadline passes, when the
// socket's context ends, and whenever the deadline is set again, so that
// a read already waiting looks at the new one (the context it holds is
// then no longer the deadline's).
type deadline struct {
	parent context.Context
	mu     sync.Mutex
	at     time.Time
	ctx    context.Context
	cancel context.CancelFunc
}

func newDeadline(parent context.Context) *deadline {
	d := &deadline{parent: parent}
	d.ctx, d.cancel = context.WithCancel(parent)
	return d
}

// set moves the deadline to t; the zero time is none.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.setLocked(t)
}

func (d *deadline) setLocked(t time.Time) {
	d.cancel()
	d.at = t
	if t.IsZero() {
		d.ctx, d.cancel = context.WithCancel(d.parent)
	} else {
		d.ctx, d.cancel = context.WithDeadline(d.parent, t)
	}
}

// wake wakes the reads waiting on the deadline, which look again, and
// keeps the deadline where it is.
func (d *deadline) wake() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.setLocked(d.at)
}

// context returns the context a read waits on.
func (d *deadline) context() context.Context {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ctx
}

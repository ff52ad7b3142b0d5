package rsocket

import (
	"sync"
	"time"
)

// deadline is a read deadline as net.Conn's: a channel that is closed when
// it passes, which a read waiting on it sees even when the deadline is set
// after the read began.
type deadline struct {
	mu      sync.Mutex
	timer   *time.Timer
	expired chan struct{} // closed once the deadline has passed
}

func newDeadline() *deadline { return &deadline{expired: make(chan struct{})} }

// set moves the deadline to t; the zero time is none. Reads waiting on
// the channel keep it while t is in the future, and are woken at once
// when t has passed.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		// The timer fired: its function closes expired, or is about to.
		<-d.expired
	}
	d.timer = nil
	passed := isClosed(d.expired)
	if t.IsZero() {
		if passed {
			d.expired = make(chan struct{})
		}
		return
	}
	if wait := time.Until(t); wait > 0 {
		if passed {
			d.expired = make(chan struct{})
		}
		ch := d.expired
		d.timer = time.AfterFunc(wait, func() { close(ch) })
		return
	}
	if !passed {
		close(d.expired)
	}
}

// done returns the channel that is closed when the deadline passes.
func (d *deadline) done() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.expired
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

package cm

import (
	"time"

	"github.com/gorxe/gorxe/rnic"
)

// An alarm calls its function after a delay, each time it is set, until
// it is stopped: the connection manager's retransmission and expiry
// timers. It runs on a timer of the time package, or, for a device on a
// Loop (a simulation in virtual time), as an event of the loop's. A loop's
// event cannot be taken back, so each set or stop starts a new generation
// and an event of an older one does nothing.
//
// Its methods are called with the manager's lock held; on a Loop,
// everything runs on the loop's goroutine.
type alarm struct {
	loop rnic.Loop
	fn   func()
	t    *time.Timer
	gen  uint64
}

// newAlarm returns a stopped alarm that calls fn, on m's device's loop
// when it has one.
func (m *Manager) newAlarm(fn func()) *alarm { return &alarm{loop: m.loop, fn: fn} }

// set has the alarm call fn after d, and not at any time set before.
func (a *alarm) set(d time.Duration) {
	if a.loop == nil {
		if a.t == nil {
			a.t = time.AfterFunc(d, a.fn)
			return
		}
		a.t.Reset(d)
		return
	}
	a.gen++
	gen := a.gen
	a.loop.At(a.loop.Now()+d, func() {
		if a.gen == gen {
			a.fn()
		}
	})
}

// stop takes back what the alarm was set to do.
func (a *alarm) stop() {
	if a.t != nil {
		a.t.Stop()
	}
	a.gen++
}

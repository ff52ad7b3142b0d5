package cq

import (
	"sync"
	"sync/atomic"
)

// Batch holds back the wake-ups of the waiters on its CQs while a device
// processes a batch of packets, and gives them when the batch is over, as
// a NIC raises one completion event for a poll of its receive ring.
//
// A waiter woken in the middle of a batch wakes on another thread (the one
// processing the batch goes on with it), and on a machine with few CPUs
// that thread must first be found or woken: the Go scheduler leaves a
// goroutine readied by a running one for 3 µs before another P takes it,
// a sleep the kernel rounds up to its timer slack (50 µs). It then
// contends for the QP locks the batch still takes. Woken at the end, the
// waiter can run at once on the thread that processed the batch
// (runtime.Gosched), with nothing left to contend for.
type Batch struct {
	open    atomic.Bool
	mu      sync.Mutex
	pending []*CQ // CQs pushed to while open, each once (CQ.held)
}

// NewCQ returns an empty CQ of the given depth, as New does, whose
// wake-ups b holds back while it is open, and whose Wait runs drv, if it
// is not nil, instead of sleeping.
func (b *Batch) NewCQ(depth int, drv Driver) (*CQ, error) {
	c, err := New(depth)
	if err == nil {
		c.batch, c.driver = b, drv
	}
	return c, err
}

// A Driver is the device behind a CQ, whose receive path a goroutine
// waiting in Wait can run itself: it then waits for the device's link
// and handles what arrives, the completion it waits for among it, and
// needs no other goroutine to wake it, as a program that waits in the
// Go runtime's poller for its socket is woken by the packet itself.
type Driver interface {
	// Drive waits a while (tens of milliseconds at most) for the
	// device's link, processes what arrived on the calling goroutine
	// and returns true; or returns false when the caller should sleep
	// on the CQ instead: nothing arrived, another goroutine drives the
	// device, or its link cannot be driven. A Wake ends the wait, and
	// Drive then returns true.
	Drive() bool

	// Wake ends the Drive under way, or the next one if none is: the
	// CQ calls it when a waiter in Drive has something else to notice
	// (a completion pushed by another goroutine, the CQ's Close, the
	// waiter's context's end). It must not block.
	Wake()
}

// Begin opens the batch: from now until End, a Push into one of b's CQs
// does not wake its waiter. A Begin and its End are called under one lock
// (the device's receive lock): batches do not overlap.
func (b *Batch) Begin() { b.open.Store(true) }

// End closes the batch and wakes the waiters of the CQs pushed to since
// Begin. It reports whether there were any: the caller may then yield its
// thread to the goroutine it woke.
func (b *Batch) End() bool {
	b.mu.Lock()
	b.open.Store(false)
	pending := b.pending
	b.pending = b.pending[:0]
	for _, c := range pending {
		c.held = false
	}
	b.mu.Unlock()
	// The slice's elements stay valid until the next Begin, which
	// cannot come before End returns; pushes meanwhile find the batch
	// closed.
	for i, c := range pending {
		c.signal()
		pending[i] = nil
	}
	return len(pending) > 0
}

// hold notes c's wake-up for End and reports true if the batch is open;
// false means c must signal now.
func (b *Batch) hold(c *CQ) bool {
	if !b.open.Load() {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open.Load() {
		return false
	}
	if !c.held {
		c.held = true
		b.pending = append(b.pending, c)
	}
	return true
}

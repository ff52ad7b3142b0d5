// Package cq implements completion queues and the work completions queue
// pairs post to them, with rdma-core's status codes, opcodes and fields.
//
// Many queue pairs, on any goroutines, Push completions into a CQ; the
// application takes them out with Poll, which never blocks, or Wait, which
// blocks until there is something to take. Like a hardware CQ it has a fixed
// depth: a Push into a full CQ loses a completion, so the CQ enters a
// sticky error state that every later call reports, the counterpart of
// IBV_EVENT_CQ_ERR.
package cq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// MaxDepth is the largest depth New accepts: 2^20 entries, 56 MiB of WCs
// allocated up front, 32 times what kernel rxe allows (about 2^15); a larger
// request is a bug.
const MaxDepth = 1 << 20

// Errors returned by CQ methods.
var (
	// ErrOverflow reports that a completion was pushed into a full CQ and
	// lost. The CQ stays in error: every later Push, Poll and Wait returns
	// ErrOverflow. Queue pairs posting to it should move to the error state,
	// as after IBV_EVENT_CQ_ERR.
	ErrOverflow = errors.New("cq: completion queue overrun")
	// ErrClosed reports a CQ that has been closed.
	ErrClosed = errors.New("cq: completion queue closed")
)

// CQ is a completion queue of fixed depth: a ring of WCs under a mutex. It
// is safe for concurrent use by any number of producers and consumers;
// completions come out in the order they were pushed.
type CQ struct {
	mu     sync.Mutex
	ring   []WC // fixed, len(ring) == depth
	head   int  // index of the oldest completion
	n      int  // completions queued
	err    error
	closed bool

	// notify holds a token while completions may be waiting for a Wait; a
	// Push sends one without blocking, a waiter takes it. Capacity 1, so a
	// burst of Pushes costs one wakeup.
	notify chan struct{}
	// done is closed when the CQ overflows or is closed, waking every
	// waiter at once.
	done chan struct{}

	// batch, if set, holds back Push's wake-ups while it is open; held
	// (under batch.mu) says this CQ is among them.
	batch  *Batch
	held   bool
	driver Driver
	// drivers counts the waiters in driver.Drive, which a Push, Close
	// or the end of the context watched is the Done channel of must wake
	// (driver.Wake); unwatch cancels that (under mu).
	drivers atomic.Int32
	watched <-chan struct{}
	unwatch func() bool

	onOverflow func() // OnOverflow's, called once, outside mu
}

// New returns an empty CQ that holds up to depth completions. Depth must be
// in [1, MaxDepth].
func New(depth int) (*CQ, error) {
	if depth < 1 || depth > MaxDepth {
		return nil, fmt.Errorf("cq: depth %d outside [1, %d]", depth, MaxDepth)
	}
	return &CQ{
		ring:   make([]WC, depth),
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
	}, nil
}

// OnOverflow installs fn, called once when a Push overruns the CQ (the
// device's IBV_EVENT_CQ_ERR), on the pushing goroutine and without the
// CQ's lock; it must not block.
func (c *CQ) OnOverflow(fn func()) {
	c.mu.Lock()
	c.onOverflow = fn
	c.mu.Unlock()
}

// Depth returns the number of completions the CQ can hold.
func (c *CQ) Depth() int { return len(c.ring) }

// Len returns the number of completions waiting to be polled.
func (c *CQ) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Push appends wc. It never blocks and allocates nothing. If the CQ is full
// the completion is lost: Push returns ErrOverflow and the CQ is in error
// from then on. Push on a closed CQ returns ErrClosed.
func (c *CQ) Push(wc WC) error {
	c.mu.Lock()
	if err := c.errLocked(); err != nil {
		c.mu.Unlock()
		return err
	}
	if c.n == len(c.ring) {
		c.err = ErrOverflow
		close(c.done)
		onOverflow := c.onOverflow
		c.mu.Unlock()
		c.wakeDrivers()
		if onOverflow != nil {
			onOverflow()
		}
		return ErrOverflow
	}
	i := c.head + c.n
	if i >= len(c.ring) {
		i -= len(c.ring)
	}
	c.ring[i] = wc
	c.n++
	c.mu.Unlock()
	if c.batch == nil || !c.batch.hold(c) {
		c.signal()
	}
	return nil
}

// signal leaves a wakeup token for a waiter unless one is already there,
// and wakes a waiter that waits in the Driver.
func (c *CQ) signal() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
	c.wakeDrivers()
}

// wakeDrivers wakes the CQ's waiters that wait in the Driver, if any.
func (c *CQ) wakeDrivers() {
	if c.drivers.Load() > 0 {
		c.driver.Wake()
	}
}

// errLocked returns the CQ's terminal error, if any; closing dominates.
func (c *CQ) errLocked() error {
	if c.closed {
		return ErrClosed
	}
	return c.err
}

// Poll moves up to len(dst) of the oldest completions into dst and returns
// how many it moved. It never blocks and allocates nothing. A CQ that has
// overflowed returns 0 and ErrOverflow, a closed one 0 and ErrClosed:
// completions queued before the overflow are not returned, because one
// after them has been lost.
func (c *CQ) Poll(dst []WC) (int, error) {
	c.mu.Lock()
	if err := c.errLocked(); err != nil {
		c.mu.Unlock()
		return 0, err
	}
	k := min(len(dst), c.n)
	// At most two contiguous runs of the ring.
	first := min(k, len(c.ring)-c.head)
	copy(dst, c.ring[c.head:c.head+first])
	copy(dst[first:k], c.ring[:k-first])
	c.head += k
	if c.head >= len(c.ring) {
		c.head -= len(c.ring)
	}
	c.n -= k
	more := c.n > 0
	c.mu.Unlock()
	if k > 0 && more {
		// Another waiter may be sleeping on completions this call left.
		c.signal()
	}
	return k, nil
}

// Wait moves up to len(dst) completions into dst like Poll, first blocking
// until at least one is queued. It returns early with ctx.Err() when ctx is
// done, ErrClosed when the CQ is closed and ErrOverflow when it overflows.
// A dst of length zero returns at once, as Poll would. Waiting does not
// spin: the goroutine sleeps until a Push, Close or ctx wakes it; or, on a
// CQ with a Driver, it first sleeps in the Driver, waiting for the
// device's link itself, for as long as packets keep coming, and a Push by
// another goroutine, Close or ctx's end wakes it there (Driver.Wake).
func (c *CQ) Wait(ctx context.Context, dst []WC) (int, error) {
	if len(dst) == 0 {
		return c.Poll(dst)
	}
	drive := c.driver != nil
	for {
		n, err := c.Poll(dst)
		if n > 0 || err != nil {
			return n, err
		}
		if drive {
			if drive = c.drive(ctx); drive {
				continue
			}
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		select {
		case <-c.notify:
		case <-c.done:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// drive waits in the Driver, unless ctx is done or the CQ has something
// for Wait already, and reports whether Wait should look again and drive
// again. A Push, Close or ctx's end after the waiter is counted among
// c.drivers wakes it (signal, watch); one before is seen by the checks
// here, which come after the count.
func (c *CQ) drive(ctx context.Context) bool {
	c.watch(ctx)
	c.drivers.Add(1)
	defer c.drivers.Add(-1)
	if ctx.Err() != nil {
		return false
	}
	c.mu.Lock()
	ready := c.n > 0 || c.errLocked() != nil
	c.mu.Unlock()
	return ready || c.driver.Drive()
}

// watch has ctx's end wake the CQ's waiters in the Driver. It keeps the
// registration for the next Wait with the same context, as a program
// that waits many times under one context (a run's, a connection's)
// would otherwise pay for one each time.
// Contexts are told apart by their Done channels, which are comparable
// where a context's own type may not be, and are the same for contexts
// that end together (a context and its values).
func (c *CQ) watch(ctx context.Context) {
	done := ctx.Done()
	if done == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watched == done || c.closed {
		return
	}
	if c.unwatch != nil {
		c.unwatch()
	}
	c.watched, c.unwatch = done, context.AfterFunc(ctx, c.wakeDrivers)
}

// Close destroys the CQ, waking every Wait. Completions still queued are
// discarded; later Push, Poll and Wait calls return ErrClosed, and so does a
// second Close.
func (c *CQ) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.closed = true
	if c.err == nil {
		close(c.done)
	}
	c.n = 0
	if c.unwatch != nil {
		c.unwatch()
		c.watched, c.unwatch = nil, nil
	}
	c.wakeDrivers()
	return nil
}

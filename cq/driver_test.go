package cq

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// sleepyDriver is a Driver whose Drive waits until Wake, as a device's
// waits for its link until a packet or a Wake comes; a Wake before the
// Drive is kept for it, as a link's kick is.
type sleepyDriver struct {
	wake   chan struct{} // capacity 1
	drives atomic.Int32  // Drives under way
	wakes  atomic.Int32
}

func newSleepyDriver() *sleepyDriver { return &sleepyDriver{wake: make(chan struct{}, 1)} }

func (d *sleepyDriver) Drive() bool {
	d.drives.Add(1)
	defer d.drives.Add(-1)
	<-d.wake
	return true
}

func (d *sleepyDriver) Wake() {
	d.wakes.Add(1)
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// TestWakeEndsDrive checks that whatever a waiter in the Driver must
// notice wakes it there: a completion another goroutine pushes (alone or
// at a batch's end), the CQ's Close or overflow, and its context's end.
// Without the Wake each waiter would stay in Drive for good here.
func TestWakeEndsDrive(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(c *CQ, b *Batch, cancel context.CancelFunc)
		want error
	}{
		{"push", func(c *CQ, _ *Batch, _ context.CancelFunc) { c.Push(WC{WRID: 7}) }, nil},
		{"batch", func(c *CQ, b *Batch, _ context.CancelFunc) { b.Begin(); c.Push(WC{WRID: 7}); b.End() }, nil},
		{"close", func(c *CQ, _ *Batch, _ context.CancelFunc) { c.Close() }, ErrClosed},
		{"overflow", func(c *CQ, _ *Batch, _ context.CancelFunc) {
			for range c.Depth() + 1 {
				c.Push(WC{})
			}
		}, ErrOverflow},
		{"cancel", func(_ *CQ, _ *Batch, cancel context.CancelFunc) { cancel() }, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := newSleepyDriver()
				var b Batch
				c, err := b.NewCQ(2, d)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				got := make(chan error, 1)
				go func() {
					var wc [1]WC
					n, err := c.Wait(ctx, wc[:])
					if err == nil && (n != 1 || wc[0].WRID != 7) {
						err = errors.New("wrong completion")
					}
					got <- err
				}()
				synctest.Wait()
				if d.drives.Load() != 1 {
					t.Fatal("the waiter is not in Drive")
				}
				tc.do(c, &b, cancel)
				synctest.Wait()
				select {
				case err := <-got:
					if !errors.Is(err, tc.want) {
						t.Fatalf("Wait = %v, want %v", err, tc.want)
					}
				default:
					d.Wake() // let the waiter go
					<-got
					t.Fatal("Wait still in Drive: nothing woke it")
				}
			})
		})
	}
}

// TestWakeOnlyDrivers checks that a Push wakes the Driver only while a
// waiter of that CQ is in it: a busy-polling program's completions cost
// no Wake.
func TestWakeOnlyDrivers(t *testing.T) {
	d := newSleepyDriver()
	var b Batch
	c, err := b.NewCQ(4, d)
	if err != nil {
		t.Fatal(err)
	}
	var wc [1]WC
	for range 3 {
		c.Push(WC{})
		c.Poll(wc[:])
	}
	if n := d.wakes.Load(); n != 0 {
		t.Fatalf("%d Wakes with nobody in Drive", n)
	}
}

// TestWatchKeepsContext checks that the waits under one context
// register for its end once: the second and later allocate nothing.
func TestWatchKeepsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newSleepyDriver()
		var b Batch
		c, err := b.NewCQ(4, d)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan struct{})
		go func() {
			var wc [1]WC
			c.Wait(ctx, wc[:])
			close(done)
		}()
		synctest.Wait() // in Drive
		c.Push(WC{})
		<-done
		if c.watched != ctx.Done() {
			t.Fatal("a Wait that drove left the CQ not watching its context")
		}
		if n := testing.AllocsPerRun(100, func() { c.watch(ctx) }); n != 0 {
			t.Fatalf("%v allocations to watch the same context again", n)
		}
		vctx := context.WithValue(ctx, struct{}{}, 1) // ends with ctx
		if n := testing.AllocsPerRun(100, func() { c.watch(vctx) }); n != 0 {
			t.Fatalf("%v allocations to watch a context that ends with the watched one", n)
		}
	})
}

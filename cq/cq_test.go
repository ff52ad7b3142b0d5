package cq

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// checkNoLeak fails the test if goroutines it started outlive it.
func checkNoLeak(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(2 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				t.Errorf("goroutines leaked: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

func mustNew(t testing.TB, depth int) *CQ {
	t.Helper()
	c, err := New(depth)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNew(t *testing.T) {
	for _, d := range []int{-1, 0, MaxDepth + 1, 1 << 40} {
		if c, err := New(d); err == nil {
			t.Errorf("New(%d) = %v, nil", d, c)
		}
	}
	for _, d := range []int{1, 16, 4096} {
		c, err := New(d)
		if err != nil {
			t.Fatalf("New(%d): %v", d, err)
		}
		if c.Depth() != d || c.Len() != 0 {
			t.Errorf("New(%d): Depth %d Len %d", d, c.Depth(), c.Len())
		}
	}
}

func TestFIFOAndBatchPoll(t *testing.T) {
	c := mustNew(t, 8)
	dst := make([]WC, 3)
	if n, err := c.Poll(dst); n != 0 || err != nil {
		t.Fatalf("Poll of empty CQ = %d, %v", n, err)
	}
	if n, err := c.Poll(nil); n != 0 || err != nil {
		t.Fatalf("Poll(nil) = %d, %v", n, err)
	}
	// Push and poll in uneven batches so the ring wraps many times.
	next, want := uint64(0), uint64(0)
	for round := range 50 {
		for range round%8 + 1 {
			if c.Len() == c.Depth() {
				break
			}
			if err := c.Push(WC{WRID: next, QPNum: uint32(next)}); err != nil {
				t.Fatal(err)
			}
			next++
		}
		if c.Len() != int(next-want) {
			t.Fatalf("Len = %d, want %d", c.Len(), next-want)
		}
		n, err := c.Poll(dst[:round%3+1])
		if err != nil {
			t.Fatal(err)
		}
		if wantN := min(round%3+1, int(next-want)); n != wantN {
			t.Fatalf("round %d: Poll = %d, want %d", round, n, wantN)
		}
		for _, wc := range dst[:n] {
			if wc.WRID != want || wc.QPNum != uint32(want) {
				t.Fatalf("got WRID %d, want %d", wc.WRID, want)
			}
			want++
		}
	}
	// Drain in one batch larger than the queue.
	big := make([]WC, 20)
	n, err := c.Poll(big)
	if err != nil || n != int(next-want) {
		t.Fatalf("final Poll = %d, %v; want %d", n, err, next-want)
	}
	for _, wc := range big[:n] {
		if wc.WRID != want {
			t.Fatalf("got WRID %d, want %d", wc.WRID, want)
		}
		want++
	}
	if c.Len() != 0 {
		t.Fatalf("Len after drain = %d", c.Len())
	}
}

func TestFullDepthIsUsable(t *testing.T) {
	c := mustNew(t, 4)
	for i := range 4 {
		if err := c.Push(WC{WRID: uint64(i)}); err != nil {
			t.Fatalf("Push %d of 4: %v", i, err)
		}
	}
	dst := make([]WC, 4)
	if n, err := c.Poll(dst); n != 4 || err != nil {
		t.Fatalf("Poll = %d, %v", n, err)
	}
	for i := range 4 {
		if err := c.Push(WC{WRID: uint64(i)}); err != nil {
			t.Fatalf("refill %d: %v", i, err)
		}
	}
}

func TestOverflowIsSticky(t *testing.T) {
	checkNoLeak(t)
	c := mustNew(t, 2)
	if n, err := c.Wait(context.Background(), nil); n != 0 || err != nil {
		t.Fatalf("Wait(nil) on healthy CQ = %d, %v", n, err)
	}
	for i := range 2 {
		if err := c.Push(WC{WRID: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Push(WC{WRID: 2}); err != ErrOverflow {
		t.Fatalf("Push into full CQ = %v, want ErrOverflow", err)
	}
	dst := make([]WC, 4)
	for range 3 {
		if n, err := c.Poll(dst); n != 0 || err != ErrOverflow {
			t.Fatalf("Poll after overflow = %d, %v", n, err)
		}
		if n, err := c.Wait(context.Background(), dst); n != 0 || err != ErrOverflow {
			t.Fatalf("Wait after overflow = %d, %v", n, err)
		}
		if err := c.Push(WC{}); err != ErrOverflow {
			t.Fatalf("Push after overflow = %v", err)
		}
	}
	if n, err := c.Wait(context.Background(), nil); n != 0 || err != ErrOverflow {
		t.Fatalf("Wait(nil) after overflow = %d, %v", n, err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close after overflow = %v", err)
	}
	if _, err := c.Poll(dst); err != ErrClosed {
		t.Fatalf("Poll after overflow and Close = %v", err)
	}
}

func TestOverflowWakesWaiter(t *testing.T) {
	checkNoLeak(t)
	c := mustNew(t, 1)
	dst := make([]WC, 1)
	got := make(chan error, 1)
	go func() {
		_, err := c.Wait(context.Background(), dst)
		got <- err
	}()
	waitUntilBlocked(t)
	// The pushes race with the waiter, which takes at most one completion,
	// so one of three pushes into a CQ of depth 1 always overflows. The
	// waiter returns either that completion or ErrOverflow.
	for i := range 3 {
		c.Push(WC{WRID: uint64(2 + i)})
	}
	select {
	case err := <-got:
		if err != nil && err != ErrOverflow {
			t.Fatalf("Wait = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken")
	}
	if _, err := c.Poll(dst); err != ErrOverflow {
		t.Fatalf("Poll = %v, want ErrOverflow", err)
	}
}

// waitUntilBlocked returns once some goroutine is asleep inside Wait,
// proving that Wait sleeps in a select rather than spinning.
func waitUntilBlocked(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	buf := make([]byte, 1<<20)
	for time.Now().Before(deadline) {
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(stacks, "\n\n") {
			if strings.Contains(g, "cq.(*CQ).Wait") && strings.Contains(strings.SplitN(g, "\n", 2)[0], "[select") {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no goroutine asleep in Wait")
}

func TestWaitTimeoutAndCancel(t *testing.T) {
	checkNoLeak(t)
	c := mustNew(t, 4)
	dst := make([]WC, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if n, err := c.Wait(ctx, dst); n != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %d, %v; want DeadlineExceeded", n, err)
	}
	// Measured against the context's own deadline: a clock read after
	// WithTimeout may already lag it by however long the test was
	// descheduled in between.
	if deadline, _ := ctx.Deadline(); time.Now().Before(deadline) {
		t.Fatalf("Wait returned %v before its deadline", time.Until(deadline))
	}

	ctx, cancel = context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := c.Wait(ctx, dst)
		got <- err
	}()
	waitUntilBlocked(t)
	cancel()
	if err := <-got; err != context.Canceled {
		t.Fatalf("Wait after cancel = %v", err)
	}

	// A completion already queued wins over a done context.
	if err := c.Push(WC{WRID: 9}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Wait(ctx, dst); n != 1 || err != nil || dst[0].WRID != 9 {
		t.Fatalf("Wait with queued completion and done ctx = %d, %v, %v", n, err, dst[0])
	}
}

func TestWaitWokenByPush(t *testing.T) {
	checkNoLeak(t)
	c := mustNew(t, 4)
	got := make(chan WC, 1)
	go func() {
		dst := make([]WC, 4)
		n, err := c.Wait(context.Background(), dst)
		if n != 1 || err != nil {
			t.Errorf("Wait = %d, %v", n, err)
		}
		got <- dst[0]
	}()
	waitUntilBlocked(t)
	if err := c.Push(WC{WRID: 42, Opcode: OpRecv}); err != nil {
		t.Fatal(err)
	}
	select {
	case wc := <-got:
		if wc.WRID != 42 || wc.Opcode != OpRecv {
			t.Fatalf("woken with %v", wc)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait not woken by Push")
	}
}

// TestWaitersShareBurst checks that completions left by one waiter's short
// dst wake another waiter.
func TestWaitersShareBurst(t *testing.T) {
	checkNoLeak(t)
	c := mustNew(t, 8)
	const waiters = 4
	got := make(chan uint64, waiters)
	for range waiters {
		go func() {
			dst := make([]WC, 1)
			n, err := c.Wait(context.Background(), dst)
			if n != 1 || err != nil {
				t.Errorf("Wait = %d, %v", n, err)
			}
			got <- dst[0].WRID
		}()
	}
	waitUntilBlocked(t)
	for i := range waiters {
		if err := c.Push(WC{WRID: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	seen := make(map[uint64]bool)
	for range waiters {
		select {
		case id := <-got:
			seen[id] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of %d waiters woken", len(seen), waiters)
		}
	}
	if len(seen) != waiters {
		t.Fatalf("waiters got %v", seen)
	}
}

func TestCloseWakesWaiters(t *testing.T) {
	checkNoLeak(t)
	c := mustNew(t, 4)
	const waiters = 5
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Wait(context.Background(), make([]WC, 1))
			errs <- err
		}()
	}
	waitUntilBlocked(t)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != ErrClosed {
			t.Errorf("Wait after Close = %v", err)
		}
	}
	if err := c.Close(); err != ErrClosed {
		t.Errorf("second Close = %v", err)
	}
	if err := c.Push(WC{}); err != ErrClosed {
		t.Errorf("Push after Close = %v", err)
	}
	if _, err := c.Poll(make([]WC, 1)); err != ErrClosed {
		t.Errorf("Poll after Close = %v", err)
	}
	if c.Len() != 0 {
		t.Errorf("Len after Close = %d", c.Len())
	}
}

// TestConcurrentProducersConsumers pushes from many producers and takes
// completions with several Wait and Poll consumers; every completion must
// arrive exactly once and each producer's completions in its push order.
// Producers hold a credit per outstanding completion, as a QP may not have
// more outstanding signaled WRs than the CQ holds, so the small ring wraps
// constantly without overflowing.
func TestConcurrentProducersConsumers(t *testing.T) {
	checkNoLeak(t)
	const (
		producers = 8
		perProd   = 5000
		consumers = 3
		depth     = 64
	)
	c := mustNew(t, depth)
	credits := make(chan struct{}, depth)
	for range depth {
		credits <- struct{}{}
	}

	var prodWG sync.WaitGroup
	for p := range producers {
		prodWG.Add(1)
		go func() {
			defer prodWG.Done()
			for i := range perProd {
				<-credits
				if err := c.Push(WC{WRID: uint64(p)<<32 | uint64(i), QPNum: uint32(p)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	results := make([][]WC, consumers)
	var consWG sync.WaitGroup
	for k := range consumers {
		consWG.Add(1)
		go func() {
			defer consWG.Done()
			dst := make([]WC, k*7+1)
			for {
				var n int
				var err error
				if k == 0 {
					n, err = c.Poll(dst)
					if n == 0 && err == nil {
						if ctx.Err() != nil {
							return
						}
						runtime.Gosched()
						continue
					}
				} else {
					n, err = c.Wait(ctx, dst)
				}
				if err != nil {
					if err != context.Canceled {
						t.Error(err)
					}
					return
				}
				results[k] = append(results[k], dst[:n]...)
				for range n {
					credits <- struct{}{}
				}
			}
		}()
	}

	prodWG.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for len(credits) < depth && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	consWG.Wait()

	seen := make([][]bool, producers)
	for p := range seen {
		seen[p] = make([]bool, perProd)
	}
	total := 0
	for k, res := range results {
		last := make([]int64, producers)
		for p := range last {
			last[p] = -1
		}
		for _, wc := range res {
			p, i := int(wc.WRID>>32), int64(uint32(wc.WRID))
			if p >= producers || i >= perProd || wc.QPNum != uint32(p) {
				t.Fatalf("corrupt completion %v", wc)
			}
			if seen[p][i] {
				t.Fatalf("completion %d/%d delivered twice", p, i)
			}
			seen[p][i] = true
			if i <= last[p] {
				t.Fatalf("consumer %d saw producer %d's %d after %d", k, p, i, last[p])
			}
			last[p] = i
			total++
		}
	}
	if total != producers*perProd {
		t.Fatalf("delivered %d of %d completions", total, producers*perProd)
	}
}

// TestConcurrentOverflow has producers race past the depth with no
// consumer: exactly depth pushes succeed, and everyone sees the overflow.
func TestConcurrentOverflow(t *testing.T) {
	checkNoLeak(t)
	const depth = 100
	c := mustNew(t, depth)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, overflow := 0, 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				err := c.Push(WC{})
				mu.Lock()
				switch err {
				case nil:
					ok++
				case ErrOverflow:
					overflow++
				default:
					t.Error(err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ok != depth || overflow != 8*50-depth {
		t.Fatalf("%d pushes succeeded and %d overflowed; want %d and %d", ok, overflow, depth, 8*50-depth)
	}
	if _, err := c.Poll(make([]WC, 1)); err != ErrOverflow {
		t.Fatalf("Poll = %v", err)
	}
}

// TestPushPollAllocateNothing guards the steady-state hot path in ordinary
// test runs; the benchmarks report the same.
func TestPushPollAllocateNothing(t *testing.T) {
	c := mustNew(t, 16)
	dst := make([]WC, 4)
	wc := WC{WRID: 1, Opcode: OpSend}
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() {
		c.Push(wc)
		c.Push(wc)
		c.Poll(dst[:1])
		c.Wait(ctx, dst) // takes the second, so never blocks
	}); n != 0 {
		t.Fatalf("Push/Poll/Wait allocate %v times per run", n)
	}
}

// TestBatchHoldsWakeups checks that a Push during an open Batch wakes its
// waiter only at End, that End reports it, and that a batch allocates
// nothing.
func TestBatchHoldsWakeups(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b Batch
		c, err := b.NewCQ(4, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan int, 1)
		wait := func() {
			var wc [1]WC
			n, _ := c.Wait(context.Background(), wc[:])
			got <- n
		}
		go wait()
		synctest.Wait() // the waiter sleeps on the CQ
		b.Begin()
		for i := range 2 {
			if err := c.Push(WC{WRID: uint64(i)}); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("a push woke the waiter while the batch was open")
		default:
		}
		if !b.End() {
			t.Fatal("End reported no wake-ups after two pushes")
		}
		if n := <-got; n != 1 {
			t.Fatalf("Wait returned %d completions, want 1", n)
		}
		if b.End() {
			t.Fatal("End of an empty batch reported wake-ups")
		}
		// With the batch closed, a Push wakes at once.
		if _, err := c.Poll(make([]WC, 4)); err != nil {
			t.Fatal(err)
		}
		go wait()
		synctest.Wait()
		if err := c.Push(WC{}); err != nil {
			t.Fatal(err)
		}
		if n := <-got; n != 1 {
			t.Fatalf("Wait returned %d", n)
		}
	})
	var b Batch
	c, _ := b.NewCQ(4, nil)
	var dst [1]WC
	if allocs := testing.AllocsPerRun(100, func() {
		b.Begin()
		c.Push(WC{})
		b.End()
		c.Poll(dst[:])
	}); allocs != 0 {
		t.Fatalf("%v allocations per batch", allocs)
	}
}

// Package perftest runs rdma-core perftest's benchmarks on gorxe devices:
// ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw and the write, read and
// send latency tests, with perftest's parameters and its result tables.
//
// A test has two sides, as perftest has: the client, which drives the
// traffic, and the server, which is passive for WRITE, READ and atomics,
// receives for SEND, and answers in the latency ping-pongs. RunLocal runs
// both in one process over an in-memory fabric.
package perftest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorxe/gorxe/qp"
)

// Test names one of perftest's programs, without the ib_ prefix.
type Test string

// The tests.
const (
	WriteBW  Test = "write_bw"
	ReadBW   Test = "read_bw"
	SendBW   Test = "send_bw"
	AtomicBW Test = "atomic_bw"
	WriteLat Test = "write_lat"
	ReadLat  Test = "read_lat"
	SendLat  Test = "send_lat"
)

// Tests lists every test.
var Tests = []Test{WriteBW, ReadBW, SendBW, AtomicBW, WriteLat, ReadLat, SendLat}

// IsLatency reports whether t is a latency test.
func (t Test) IsLatency() bool { return strings.HasSuffix(string(t), "_lat") }

// Verb returns the operation the test measures, as perftest's banner
// names it: "RDMA_Write", "RDMA_Read", "Send" or "Atomic".
func (t Test) Verb() string {
	switch t {
	case WriteBW, WriteLat:
		return "RDMA_Write"
	case ReadBW, ReadLat:
		return "RDMA_Read"
	case SendBW, SendLat:
		return "Send"
	}
	return "Atomic"
}

// Atomic operations of ib_atomic_bw's -A.
const (
	FetchAndAdd = "FETCH_AND_ADD"
	CmpAndSwap  = "CMP_AND_SWAP"
)

// Params are a test's parameters, named after perftest's flags.
type Params struct {
	Test    Test
	Size    int    // -s: message size in bytes
	Iters   int    // -n: messages
	AllSize bool   // -a: every size from 2 to 8 MiB
	MTU     qp.MTU // -m: path MTU
	TxDepth int    // -t: send work requests outstanding
	RxDepth int    // -r: receives posted (send tests)
	CQMod   int    // -Q: one signaled send in CQMod
	Atomic  string // -A: FETCH_AND_ADD or CMP_AND_SWAP
	Check   bool   // --check: fill buffers with a pattern and verify every byte
	Timeout uint8  // -u: local ACK timeout exponent
	Window  int    // gorxe's requester window in PSNs
	// Events (-e) makes every wait sleep on its CQ (cq.CQ.Wait) without
	// busy polling first, as perftest's -e sleeps on CQ events. write_lat
	// then sends RDMA WRITE with immediate, and each side waits for the
	// receive completion of the peer's, since a program that sleeps
	// learns of a WRITE only from a completion. Both sides must set it.
	Events bool
	// GiveUp ends the test with ErrStalled when no completion arrives for
	// this long (gorxe's; perftest waits forever). 10 s when zero.
	GiveUp time.Duration

	progress *atomic.Uint64 // completions so far, for the watchdog
}

// watch returns a context that is cancelled, with ErrStalled as its cause,
// when the run makes no progress for GiveUp, and the function that ends
// the watch.
func (p *Params) watch(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	p.progress = new(atomic.Uint64)
	progress := p.progress
	giveUp := p.GiveUp
	stop := make(chan struct{})
	go func() {
		tick := time.NewTicker(max(giveUp/8, time.Millisecond))
		defer tick.Stop()
		last, since := progress.Load(), time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				if v := progress.Load(); v != last {
					last, since = v, now
				} else if now.Sub(since) >= giveUp {
					cancel(fmt.Errorf("%w: nothing completed for %v", ErrStalled, giveUp))
					return
				}
			}
		}
	}()
	return ctx, func() { close(stop); cancel(nil) }
}

// progressed records a completion for the watchdog.
func (p *Params) progressed() {
	if p.progress != nil {
		p.progress.Add(1)
	}
}

// Defaults fills in perftest's defaults for the fields left zero.
func (p *Params) Defaults() {
	if p.Size == 0 {
		switch {
		case p.Test == AtomicBW:
			p.Size = 8
		case p.Test.IsLatency():
			p.Size = 2
		default:
			p.Size = 65536
		}
	}
	if p.Iters == 0 {
		switch {
		case p.Test.IsLatency():
			p.Iters = 1000
		default:
			p.Iters = 5000
		}
	}
	if p.MTU == 0 {
		p.MTU = qp.MTU1024
	}
	if p.TxDepth == 0 {
		p.TxDepth = 128
		if p.Test.IsLatency() {
			p.TxDepth = 1
		}
	}
	if p.RxDepth == 0 {
		p.RxDepth = 512
	}
	if p.CQMod == 0 {
		p.CQMod = 100
	}
	if p.Atomic == "" {
		p.Atomic = FetchAndAdd
	}
	if p.Timeout == 0 {
		p.Timeout = 14
	}
	if p.GiveUp == 0 {
		p.GiveUp = 10 * time.Second
	}
}

// Validate reports parameters perftest would refuse.
func (p *Params) Validate() error {
	switch {
	case !p.known():
		return fmt.Errorf("unknown test %q", p.Test)
	case p.Size < 0 || p.Size > MaxSize:
		return fmt.Errorf("message size %d is outside 0..%d", p.Size, MaxSize)
	case p.Test == AtomicBW && p.Size != 8:
		return fmt.Errorf("atomic operations are 8 bytes, not %d", p.Size)
	case p.Iters < 1:
		return fmt.Errorf("iterations must be at least 1")
	case p.MTU.Bytes() == 0:
		return fmt.Errorf("invalid MTU")
	case p.TxDepth < 1 || p.TxDepth > 8192 || p.RxDepth < 1 || p.RxDepth > 8192:
		return fmt.Errorf("tx and rx depth must be 1..8192")
	case p.Atomic != FetchAndAdd && p.Atomic != CmpAndSwap:
		return fmt.Errorf("atomic type %q: want %s or %s", p.Atomic, FetchAndAdd, CmpAndSwap)
	}
	return nil
}

func (p *Params) known() bool {
	for _, t := range Tests {
		if t == p.Test {
			return true
		}
	}
	return false
}

// postsReceives reports whether the test's sides post a receive before
// the run: send_lat, and write_lat with Events.
func (p *Params) postsReceives() bool {
	return p.Test == SendLat || p.Test == WriteLat && p.Events
}

// MaxSize is the largest message, as perftest's -a goes: 8 MiB.
const MaxSize = 1 << 23

// Sizes returns the message sizes the test runs: Size, or with AllSize
// every power of two from 2 to 8 MiB (perftest's -a).
func (p *Params) Sizes() []int {
	if !p.AllSize || p.Test == AtomicBW {
		return []int{p.Size}
	}
	var s []int
	for n := 2; n <= MaxSize; n *= 2 {
		s = append(s, n)
	}
	return s
}

// allocsDuring returns the heap allocations run makes.
func allocsDuring(run func() error) (uint64, error) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := run()
	runtime.ReadMemStats(&after)
	return after.Mallocs - before.Mallocs, err
}

// BWResult is one line of a bandwidth table.
type BWResult struct {
	Size     int
	Iters    int
	PeakMBps float64 // MB here, as in perftest, is 2^20 bytes
	AvgMBps  float64
	MsgRate  float64 // millions of messages per second
	Elapsed  time.Duration
}

// LatResult is one line of a latency table, in microseconds.
type LatResult struct {
	Size    int
	Iters   int
	Min     float64
	Max     float64
	Typical float64 // the median
	Avg     float64
	Stdev   float64
	P99     float64
	P999    float64
}

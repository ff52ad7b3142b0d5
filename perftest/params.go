// Package perftest runs rdma-core perftest's benchmarks on gorxe devices:
// ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw and the write, read and
// send latency tests, with perftest's parameters and its result tables.
//
// A test has two sides, as perftest has: the client, which drives the
// traffic, and the server, which is passive for WRITE, READ and atomics,
// receives for SEND (and WRITE with immediate), and answers in the
// latency ping-pongs; with -b (Duplex) both sides drive. RunLocal runs
// both in one process over an in-memory fabric.
package perftest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorxe/gorxe/cq"
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

	// NumQPs is -q: the test runs on this many RC QPs, each with its own
	// key message; the client posts to them in turn, Iters to each.
	// 0 or 1 is one QP. Bandwidth tests only.
	NumQPs int
	// Duplex is -b: both sides send, and each prints the sum of both
	// sides' bandwidth. Bandwidth tests only.
	Duplex bool
	// OutReads is -o: the RDMA READs and atomics this side lets its peer
	// keep outstanding, offered in the key message (READ and atomic tests
	// only). 0 is gorxe's default, 16; more than the device takes
	// (qp.MaxRdAtomic) is cut to that, as perftest cuts to max_qp_rd_atom.
	OutReads int
	// WithImm is --write_with_imm for write_bw and write_lat (RDMA WRITE
	// with immediate; the server receives a completion for each) and
	// --send_with_imm for send_bw and send_lat (SEND with immediate).
	// Both sides must set it.
	WithImm bool
	// MRPerQP is --mr_per_qp: each QP gets a memory region of its own,
	// whose rkey and address its key message carries.
	MRPerQP bool

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
	if p.NumQPs == 0 {
		p.NumQPs = 1
	}
}

// MaxQPs is the most QPs -q takes, as perftest's MAX_QP_NUM.
const MaxQPs = 16384

// maxBuffers bounds the memory a side registers, so that a large -q with
// large messages is refused instead of exhausting the host.
const maxBuffers = 1 << 30

// qps returns how many QPs the test runs.
func (p *Params) qps() int { return max(p.NumQPs, 1) }

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
	if err := p.checkFlags(); err != nil {
		return err
	}
	// The QPs share one send and one receive CQ, as perftest's.
	if d := p.cqDepth(); d > cq.MaxDepth {
		return fmt.Errorf("-q %d with tx depth %d and rx depth %d needs CQs of %d entries; gorxe's hold at most %d",
			p.qps(), p.TxDepth, p.RxDepth, d, cq.MaxDepth)
	}
	sizes := p.Sizes()
	if b := bufferBytes(p, sizes[len(sizes)-1]); b > maxBuffers {
		return fmt.Errorf("-q %d with %d-byte messages needs %d MiB of buffers on each side; gorxe allows %d MiB",
			p.qps(), sizes[len(sizes)-1], b>>20, maxBuffers>>20)
	}
	return nil
}

// checkFlags refuses the combinations of -q, -b, -o and
// --write_with_imm/--send_with_imm that perftest's parser refuses, with
// its words (perftest_parameters.c, parser()).
func (p *Params) checkFlags() error {
	switch {
	case p.NumQPs < 0 || p.NumQPs > MaxQPs:
		return fmt.Errorf("num of Qps should be between 1 and %d, not %d", MaxQPs, p.NumQPs)
	case p.qps() > 1 && p.Test.IsLatency():
		return fmt.Errorf("-q %d: Multiple QPs only available on bw tests", p.NumQPs)
	case p.Duplex && p.Test.IsLatency():
		return fmt.Errorf("-b: Bidirectional is only available in BW test")
	case p.OutReads < 0:
		return fmt.Errorf("-o %d: the number of outstanding reads must not be negative", p.OutReads)
	case p.OutReads != 0 && p.Test != ReadBW && p.Test != ReadLat && p.Test != AtomicBW:
		return fmt.Errorf("-o %d: Setting Outstanding reads only available on READ verb (read_bw, read_lat, atomic_bw)", p.OutReads)
	case p.WithImm && (p.Test == ReadBW || p.Test == ReadLat || p.Test == AtomicBW):
		return fmt.Errorf("%s: Write_with_imm can only be used with write_lat and write_bw tests, "+
			"Send_with_imm with send_lat and send_bw", p.Test)
	}
	return nil
}

// outReads returns the out_reads this side offers in its key message:
// the READs and atomics its responder takes at once, as perftest's
// ctx_set_out_reads sets it (the device's limit for 0 or more), for the
// READ and atomic tests, and 1 for the others.
func (p *Params) outReads() uint16 {
	switch {
	case p.Test != ReadBW && p.Test != ReadLat && p.Test != AtomicBW:
		return 1
	case p.OutReads == 0:
		return maxOutReads
	}
	return uint16(min(p.OutReads, qp.MaxRdAtomic))
}

// cqDepth is the depth of a side's send and receive CQs: every QP's
// outstanding work requests, and some slack.
func (p *Params) cqDepth() int { return p.qps()*max(p.TxDepth, p.RxDepth) + 16 }

// flow returns the exchange's flow for p.
func (p *Params) flow() Flow {
	return Flow{Test: p.Test, Duplex: p.Duplex, WithImm: p.WithImm, AllSizes: p.AllSize && p.Test != AtomicBW}
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
// the run: send_lat, and write_lat with Events or WithImm.
func (p *Params) postsReceives() bool {
	return p.Test == SendLat || p.Test == WriteLat && (p.Events || p.WithImm)
}

// receives reports whether a side of a bandwidth test receives, and so
// posts receives before the run: the send_bw server, and the write_bw
// server with WithImm; with Duplex, both sides of those.
func (p *Params) receives(server bool) bool {
	return (p.Test == SendBW || p.Test == WriteBW && p.WithImm) && (server || p.Duplex)
}

// sends reports whether a side of a bandwidth test posts the test's
// operations: the client, and with Duplex the server too.
func (p *Params) sends(server bool) bool { return !server || p.Duplex }

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

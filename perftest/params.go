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
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/congestion"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// Test names one of perftest's programs, without the ib_ prefix.
type Test string

// The tests.
const (
	WriteBW   Test = "write_bw"
	ReadBW    Test = "read_bw"
	SendBW    Test = "send_bw"
	AtomicBW  Test = "atomic_bw"
	WriteLat  Test = "write_lat"
	ReadLat   Test = "read_lat"
	SendLat   Test = "send_lat"
	AtomicLat Test = "atomic_lat"
)

// Tests lists every test.
var Tests = []Test{WriteBW, ReadBW, SendBW, AtomicBW, WriteLat, ReadLat, SendLat, AtomicLat}

// IsLatency reports whether t is a latency test.
func (t Test) IsLatency() bool { return strings.HasSuffix(string(t), "_lat") }

// IsAtomic reports whether t runs atomic operations: atomic_bw and
// atomic_lat.
func (t Test) IsAtomic() bool { return t == AtomicBW || t == AtomicLat }

// oneSided reports whether t is a latency test only the client runs, one
// operation at a time, timing each round trip: read_lat and atomic_lat.
// Their server is passive.
func (t Test) oneSided() bool { return t == ReadLat || t == AtomicLat }

// readsOrAtomics reports whether t's operations are RDMA READs or
// atomics, which the out_reads of the key message limits.
func (t Test) readsOrAtomics() bool { return t == ReadBW || t == ReadLat || t.IsAtomic() }

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
	Test Test
	// Connection is -c: the QPs' transport, qp.TypeRC (zero);
	// qp.TypeUC, for write_bw, send_bw, write_lat and send_lat; or
	// qp.TypeUD, for send_bw and send_lat, whose messages are at most the
	// MTU both sides agree on (see FitUD). On UC and UD a lost message is
	// not sent again; a receiving side whose peer has finished ends with
	// the messages that came (peerDone).
	Connection qp.Type

	Size    int    // -s: message size in bytes
	Iters   int    // -n: messages
	AllSize bool   // -a: every size from 2 to 8 MiB
	MTU     qp.MTU // -m: path MTU; 0 is the port's active MTU (RunRemote) or 1024 (RunLocal)
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
	// Reversed is --reversed: the sides swap their roles in the test, so
	// that the server (the side without a peer name, which listens) runs
	// the client's part, sending, and the side that dials runs the
	// server's. The out-of-band exchange keeps its direction. As in
	// perftest, both sides must set it.
	Reversed bool
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
	// UseSRQ is --use-srq (send tests only): a side that receives (a
	// server, either side of -b, both sides of send_lat) gives its QPs one
	// shared receive queue of RxDepth receives, as perftest's, and posts
	// every receive to it, RxDepth/NumQPs for each QP's buffer to begin
	// with. The packets are the same.
	UseSRQ bool

	// Duration (-D) makes the run timed instead of counted, as perftest's
	// DURATION test type: Margin after the start the sample window opens,
	// Margin before the end it closes, and only the messages completed
	// inside it are reported (Iters is then ignored). There is no peak.
	// The send_bw server and both sides of write_lat and send_lat time
	// themselves, so the peer must be given -D too, as with perftest.
	Duration time.Duration
	// Margin (-f) is the time at either end of a timed run that is not
	// measured. Zero means perftest's default, a quarter of Duration in
	// whole seconds (so none below 4 s); NoMargin asks for none (-f 0).
	// Duration must be more than twice the margin.
	Margin time.Duration
	// Infinite (--run_infinitely, bandwidth tests only) runs until ctx
	// ends, reporting every Duration (5 s when zero) to OnReport. A run
	// that ctx ended returns no error.
	Infinite bool
	// OnReport receives each report of an Infinite run as it is made:
	// the client's in RunLocal, this side's in RunRemote. It is called
	// from the goroutine of the side's run, one report at a time.
	OnReport func(*Result)
	// WarmUp (--perform_warm_up) sends TxDepth messages (PostList with a
	// post list), every one signaled, and waits for them before the run;
	// WRITE, READ and atomic bandwidth tests only, as perftest.
	WarmUp bool
	// NoPeak (-N) reports no peak bandwidth: 0, as perftest prints it.
	// perftest also leaves the peak out of timed runs, of runs of more
	// than 20000 iterations and of the send_bw server (noPeakFor).
	NoPeak bool
	// ReportGbits (--report_gbits) reports bandwidth in Gb/s (10^9 bits)
	// instead of MB/s (2^20 bytes). The client's report to the server is
	// in its own unit, as perftest's is.
	ReportGbits bool
	// Histogram (-H) prints a latency test's sorted samples, Unsorted
	// (-U) the samples in the order they were taken, both before the
	// table. Cycles (-C) reports latencies in CPU cycles (see cpuMHz).
	Histogram bool
	Unsorted  bool
	Cycles    bool
	// Inline (-I) sends messages of at most this many bytes inline
	// (IBV_SEND_INLINE): the payload is copied at post time; the packets
	// are the same. Not for READ and atomics. 0 (rxe's) by default.
	Inline int
	// PostList (-l) posts this many work requests per PostSend call
	// (bandwidth tests). Without an explicit CQMod the CQ moderation is
	// then the post list, as in perftest.
	PostList int
	// RecvPostList (--recv_post_list) posts a receiving side's receives in
	// lists of this many per PostRecv call (bandwidth tests), as
	// perftest's ctx_set_recv_wqes and run_iter_bw_server: the first
	// receives, rx-depth rounded down to whole lists, then a list back for
	// each QP's buffer once that many of its receives have completed.
	RecvPostList int
	// CPUUtil (--cpu_util) makes a timed run (-D, not --run_infinitely)
	// report the machine's CPU use over its sample window in an extra
	// column, as perftest's: user time as a share of user and idle time,
	// all CPUs together, from /proc/stat.
	CPUUtil bool
	// LatencyGap (--latency_gap) makes each side of write_lat spin this
	// long before each post, as run_iter_lat_write does: after the peer's
	// message has come, before the post's timestamp, so the reported
	// latency (half a round trip) includes one gap per side.
	LatencyGap time.Duration
	// RateLimit (--rate_limit, --rate_units, --burst_size) paces the
	// posts of a one-way bandwidth test's sender, as perftest's software
	// rate limiter does. Its Burst is TxDepth when zero.
	RateLimit RateLimit
	// TrafficClass (--tclass) is the traffic class (IPv4 TOS, IPv6
	// traffic class) of every packet this side sends. With RDMACM it is
	// also perftest's --tos, the rdma_cm path's traffic class.
	TrafficClass uint8
	// FlowLabels (--flow_label fl0,fl1,...) are the GRH flow labels of
	// the test QPs, one each in turn (QP i takes FlowLabels[i mod len]),
	// as perftest 6.17 and later set them in modify_qp's address vector
	// (6.06 ignores the flag): each QP's UDP source port, and the IPv6
	// flow label. rdma_cm (RDMACM) sets its own path and ignores them, as
	// perftest does.
	FlowLabels []uint32
	// RDMACM is -R (--rdma_cm): the test QPs are connected with rdma_cm,
	// and the exchange travels over rdma_cm too (CommRDMACM); RunRemote
	// then needs a Conn made by DialCM or ListenCM. CommRDMACM is -z
	// (--comm_rdma_cm): only the exchange does. Neither is for UC.
	RDMACM     bool
	CommRDMACM bool
	// RetryCount (--retry_count) is the retry count rdma_cm gives the
	// test QPs it connects (-R), for timeouts and for RNR NAKs alike, as
	// perftest's conn_param, and the exchange's QP (DialCM, ListenCM)
	// for timeouts only. 0 is perftest's default, 7; NoRetries asks for
	// none. QPs connected from the keys retry 7 times whatever it says, as
	// perftest's.
	RetryCount int
	// CC and CCParams are the congestion control of RunLocal's devices
	// (gorxe's --cc and --cc-profile; rnic.Config's): DCQCN with
	// ConnectX's parameters when zero.
	CC       rnic.CCMode
	CCParams congestion.Params
	// LineRate and PacingBurst are those of RunLocal's devices (gorxe's
	// --line-rate and --pacing-burst; rnic.Config's): the link's rate and
	// rnic's default burst (64 KiB or 50 µs of the rate) when zero.
	LineRate    congestion.Rate
	PacingBurst int

	progress *atomic.Uint64 // completions so far, for the watchdog
	// sizeDefaulted says Defaults chose Size: perftest's !req_size, with
	// which a UD message larger than the MTU is cut to it rather than
	// refused.
	sizeDefaulted bool
	// cqModWarning says -Q asked for CQ moderation where perftest would
	// have turned it off by itself: Notes warns of it.
	cqModWarning bool
	// peerDone, when set, is closed once the peer has finished its run:
	// a UC receiver then stops waiting for messages that were lost.
	peerDone <-chan struct{}
	// onPost, when set, sees the number of work requests of every
	// PostSend call of a bandwidth client (tests count them).
	onPost func(n int)
	// packetTrace, when set, is the PacketTrace of RunLocal's devices.
	packetTrace func(rnic.Direction, []byte)
}

// NoMargin is the Margin that asks for none: perftest's -f 0.
const NoMargin time.Duration = -1

// NoRetries is the RetryCount that asks for none: perftest's
// --retry_count 0.
const NoRetries = -1

// cmRetries returns n, a count as Params.RetryCount, as rdma_cm's
// connection parameters take it (whose 0 is 7, and which cut above 7 to
// 7).
func cmRetries(n int) uint8 {
	if n < 0 {
		return cm.RetryNone
	}
	return uint8(min(n, 7))
}

// defaultDuration is perftest's DEF_DURATION: -D's value when only
// --run_infinitely or -f is given.
const defaultDuration = 5 * time.Second

// cpuUtilOn reports whether the run reports its CPU use: --cpu_util on
// a run timed by -D alone (perftest turns it on where it settles -D,
// before --run_infinitely).
func (p *Params) cpuUtilOn() bool { return p.CPUUtil && p.Duration > 0 && !p.Infinite }

// timed reports whether the run is timed: -D or --run_infinitely.
func (p *Params) timed() bool { return p.Duration > 0 || p.Infinite }

// period returns -D, or perftest's default of 5 s.
func (p *Params) period() time.Duration {
	if p.Duration > 0 {
		return p.Duration
	}
	return defaultDuration
}

// margin returns the margin of a timed run: -f, or perftest's default of
// duration/4 (force_dependencies, on whole seconds).
func (p *Params) margin() time.Duration {
	switch {
	case p.Margin < 0:
		return 0
	case p.Margin == 0:
		return (p.period() / 4).Truncate(time.Second)
	}
	return p.Margin
}

// noPeakFor reports whether a side reports no peak bandwidth: with -N,
// and where perftest's force_dependencies turns noPeak on by itself: timed
// runs, a receiving server (send_bw, write_bw --write_with_imm) without
// -b, and more than 20000 iterations.
func (p *Params) noPeakFor(server bool) bool {
	return p.NoPeak || p.timed() || (server && p.receives(server) && !p.Duplex) || p.Iters > 20000
}

// warmsUp reports whether --perform_warm_up sends anything: perftest
// warms up WRITE (not with immediate: "Warm up not supported for
// WRITE_IMM verb"), READ and atomics, never SEND.
func (p *Params) warmsUp() bool {
	return p.Test == ReadBW || p.Test == AtomicBW || p.Test == WriteBW && !p.WithImm
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
		p.sizeDefaulted = true
		switch {
		case p.Test.IsAtomic():
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
		if p.unreliable() && !p.timed() {
			// perftest's force_dependencies: a UC receiver posts a receive
			// for every message it can (UC_MAX_RX), since a message that
			// finds none is dropped, not refused with an RNR NAK.
			p.RxDepth = min(p.Iters, ucMaxRx)
		}
	}
	if !p.timed() {
		// force_dependencies: a counted run keeps no more outstanding
		// than it has messages, nor receives for them.
		p.TxDepth = min(p.TxDepth, max(p.Iters, 1))
		if p.recvVerb() {
			p.RxDepth = min(p.RxDepth, max(p.Iters, 1))
		}
		if p.unreliable() && p.UseSRQ && p.Iters <= minSRQRxDepth {
			// Even over -r, as perftest's force_dependencies.
			p.RxDepth = minSRQRxDepth
		}
	}
	largeSignals := p.Size > cqModSizeLimit && !p.datagram() && !p.AllSize && !p.Events
	p.cqModWarning = p.CQMod > 1 && largeSignals
	if p.CQMod == 0 {
		p.CQMod = 100
		if largeSignals {
			// "we disable cq_mod for large message size to prevent
			// from incorrect BW calculation"
			p.CQMod = 1
		}
		p.CQMod = min(p.CQMod, p.TxDepth)
		if p.PostList > 1 {
			p.CQMod = p.PostList // "CQ moderation will be the size of the post list"
		}
	}
	if p.PostList == 0 {
		p.PostList = 1
	}
	if p.RecvPostList == 0 {
		p.RecvPostList = 1
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

// Notes returns what perftest's parser prints of the parameters Defaults
// settled: a warning that -Q's CQ moderation of large messages may make
// the bandwidth wrong, in perftest's words, or nothing.
func (p *Params) Notes() string {
	if p.cqModWarning {
		return "Warning: Large message requested and CQ moderation enabled\nWarning: It can lead to inaccurate results\n"
	}
	return ""
}

// cqModSizeLimit is perftest's MSG_SIZE_CQ_MOD_LIMIT: above it a run
// without -Q signals every message (no CQ moderation), unless it is UD,
// -a or -e.
const cqModSizeLimit = 8192

// minSRQRxDepth is perftest's MIN_SRQ_UD_RX_DEPTH: the receives of a
// counted UC or UD run on an SRQ of at most that many messages.
const minSRQRxDepth = 100

// recvVerb reports whether the test's messages consume receives:
// perftest's has_recv_comp (SEND, SEND with immediate, WRITE with
// immediate).
func (p *Params) recvVerb() bool {
	return p.Test == SendBW || p.Test == SendLat || p.WithImm && (p.Test == WriteBW || p.Test == WriteLat)
}

// ucMaxRx is perftest's UC_MAX_RX: the receives a UC receiver posts at
// most by default.
const ucMaxRx = 16000

// unreliable reports whether the test runs on UC or UD QPs (-c UC, -c
// UD), which send a lost message never again.
func (p *Params) unreliable() bool { return p.Connection == qp.TypeUC || p.Connection == qp.TypeUD }

// datagram reports whether the test runs on UD QPs (-c UD).
func (p *Params) datagram() bool { return p.Connection == qp.TypeUD }

// MaxFlowLabel is the largest GRH flow label, 20 bits.
const MaxFlowLabel = 1<<20 - 1

// flowLabel is the flow label of test QP i: 0 (the port from the QP
// numbers) without --flow_label.
func (p *Params) flowLabel(i int) uint32 {
	if len(p.FlowLabels) == 0 {
		return 0
	}
	return p.FlowLabels[i%len(p.FlowLabels)]
}

// qpType returns the QPs' type: RC unless -c says otherwise.
func (p *Params) qpType() qp.Type {
	if p.Connection == 0 {
		return qp.TypeRC
	}
	return p.Connection
}

// ConnectionName returns -c's value for the QPs' type: "RC", "UC" or
// "UD", as perftest's banner prints it.
func (p *Params) ConnectionName() string {
	switch p.Connection {
	case qp.TypeUC:
		return "UC"
	case qp.TypeUD:
		return "UD"
	}
	return "RC"
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
	case p.Test.IsAtomic() && p.Size != 8:
		return fmt.Errorf("atomic operations are 8 bytes, not %d", p.Size)
	case p.Iters < 1:
		return fmt.Errorf("iterations must be at least 1")
	case p.MTU.Bytes() == 0:
		return fmt.Errorf("invalid MTU")
	case p.Connection != 0 && p.Connection != qp.TypeRC && p.Connection != qp.TypeUC && p.Connection != qp.TypeUD:
		return fmt.Errorf("connection type %d: gorxe runs RC, UC and UD", p.Connection)
	case p.Connection == qp.TypeUC && p.Test.readsOrAtomics():
		// perftest's change_conn_type, word for word.
		return fmt.Errorf("UC connection not possible in READ/ATOMIC verbs")
	case p.datagram() && p.Test != SendBW && p.Test != SendLat:
		return fmt.Errorf("UD connection only possible in SEND verb")
	case p.Connection == qp.TypeUC && (p.RDMACM || p.CommRDMACM):
		return fmt.Errorf("UC is not supported in librdmacm") // perftest's parser
	case p.Reversed && (p.RDMACM || p.CommRDMACM):
		// perftest's rdma_cm connection follows the test roles, so its
		// reversed client would dial with no server name.
		return fmt.Errorf("--reversed with -R or -z: rdma_cm connects by the test roles, which --reversed swaps; run without -R and -z")
	case p.TxDepth < 1 || p.TxDepth > 8192 || p.RxDepth < 1 || p.RxDepth > 8192 && !(p.unreliable() && p.RxDepth <= ucMaxRx):
		return fmt.Errorf("tx and rx depth must be 1..8192")
	case p.Atomic != FetchAndAdd && p.Atomic != CmpAndSwap:
		return fmt.Errorf("atomic type %q: want %s or %s", p.Atomic, FetchAndAdd, CmpAndSwap)
	}
	if err := p.checkFlags(); err != nil {
		return err
	}
	if err := p.validateOutput(); err != nil {
		return err
	}
	if err := p.RateLimit.validate(p); err != nil {
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
	case p.OutReads != 0 && !p.Test.readsOrAtomics():
		return fmt.Errorf("-o %d: Setting Outstanding reads only available on READ verb (read_bw, read_lat, atomic_bw)", p.OutReads)
	case p.UseSRQ && p.Test != SendBW && p.Test != SendLat:
		// perftest's words, its spelling too.
		return fmt.Errorf("Using SRQ only avavilible in SEND / SEND_IMM tests.")
	case p.UseSRQ && p.qps() > p.RxDepth:
		return fmt.Errorf("Using SRQ depth should be greater than number of QPs.")
	case slices.ContainsFunc(p.FlowLabels, func(fl uint32) bool { return fl > MaxFlowLabel }):
		return fmt.Errorf("--flow_label %v: a flow label is 20 bits, 0..%d", p.FlowLabels, MaxFlowLabel)
	case p.WithImm && p.Test.readsOrAtomics():
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
	case !p.Test.readsOrAtomics():
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
	return Flow{Test: p.Test, Duplex: p.Duplex, WithImm: p.WithImm, AllSizes: p.AllSize && !p.Test.IsAtomic(), Duration: p.timed(), RDMACM: p.RDMACM}
}

// validateOutput checks the timing, posting and output options as
// perftest's parser and force_dependencies do.
func (p *Params) validateOutput() error {
	lat, bw := p.Test.IsLatency(), !p.Test.IsLatency()
	switch {
	case p.Duration < 0:
		return fmt.Errorf("duration (-D) must be positive")
	case p.Infinite && lat:
		return fmt.Errorf("--run_infinitely exists only in bandwidth tests")
	case p.Infinite && p.Duplex:
		// perftest refuses it for SEND and WRITE with immediate, and runs
		// the others without the handshake -b adds before the run.
		return fmt.Errorf("--run_infinitely with -b is not supported")
	case p.timed() && p.Events:
		return fmt.Errorf("a timed run (-D or --run_infinitely) does not work with events (-e)")
	case p.timed() && p.AllSize:
		return fmt.Errorf("a timed run (-D or --run_infinitely) does not support all sizes (-a)")
	case p.timed() && p.Check:
		return fmt.Errorf("--check needs a fixed number of iterations: not with -D or --run_infinitely")
	case p.period() <= 2*p.margin():
		// perftest checks it whatever the test type, with -D's default.
		return fmt.Errorf("the duration (-D %v) must be more than twice the margin (-f %v)", p.period(), p.margin())
	case p.NoPeak && lat:
		return fmt.Errorf("no peak (-N) is only valid for bandwidth tests")
	case (p.Cycles || p.Histogram || p.Unsorted) && bw:
		return fmt.Errorf("-C, -H and -U are available only on latency tests")
	case p.Inline < 0 || p.Inline > qp.MaxInlineData:
		return fmt.Errorf("inline size (-I) %d is outside 0..%d", p.Inline, qp.MaxInlineData)
	case p.Inline > 0 && p.Test.readsOrAtomics():
		return fmt.Errorf("inline (-I) is not available on READ and atomic tests")
	case p.PostList < 1:
		return fmt.Errorf("post list (-l) must be at least 1")
	case p.PostList > 1 && lat:
		return fmt.Errorf("post list (-l) is supported in bandwidth tests only")
	case p.PostList > 1 && !p.timed() && p.Iters%p.PostList != 0:
		return fmt.Errorf("the number of iterations (-n %d) must be a multiple of the post list size (-l %d)", p.Iters, p.PostList)
	case p.PostList > 1 && p.PostList%min(p.CQMod, p.TxDepth) != 0:
		return fmt.Errorf("the post list size (-l %d) must be a multiple of the CQ moderation (-Q %d)", p.PostList, min(p.CQMod, p.TxDepth))
	case p.RecvPostList < 1:
		return fmt.Errorf("the receive post list (--recv_post_list) must be at least 1")
	case p.RecvPostList > 1 && lat:
		return fmt.Errorf("Receive post list is supported in BW tests only") // perftest's words
	case p.RecvPostList > 1 && !p.timed() && p.Iters%p.RecvPostList != 0:
		return fmt.Errorf("Number of iterations must be a multiple of receive post list size") // perftest's words
	case p.RecvPostList > p.RxDepth:
		// perftest would post no receive at all and wait for ever.
		return fmt.Errorf("the receive post list (--recv_post_list %d) does not fit in the receive queue (-r %d)", p.RecvPostList, p.RxDepth)
	case p.PostList > p.TxDepth:
		return fmt.Errorf("the post list (-l %d) does not fit in the send queue (-t %d)", p.PostList, p.TxDepth)
	case p.LatencyGap < 0:
		return fmt.Errorf("the latency gap must not be negative")
	case p.LatencyGap > 0 && bw:
		return fmt.Errorf("Latency gap feature is only for latency tests") // perftest's words
	case p.WarmUp && p.Check && p.Test == AtomicBW:
		return fmt.Errorf("--perform_warm_up changes the word --check counts atomics in")
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

// servesPassively reports whether a side takes no part in a latency
// test's run but its device answers every message of it: read_lat's and
// atomic_lat's server. Unless it sleeps on events (-e), it busy polls its
// device through the run (Side.serve), as the sides that take part do.
func (p *Params) servesPassively(server bool) bool {
	return server && (p.Test == ReadLat || p.Test == AtomicLat) && !p.Events
}

// Reports reports whether a side prints a result table: every side but
// the server of read_lat and atomic_lat, which takes no part in the run
// and prints its address lines and nothing after them, as perftest's.
func (p *Params) Reports(server bool) bool {
	return !server || p.Test != ReadLat && p.Test != AtomicLat
}

// MaxSize is the largest message, as perftest's -a goes: 8 MiB.
const MaxSize = 1 << 23

// Sizes returns the message sizes the test runs: Size, or with AllSize
// every power of two from 2 to 8 MiB (perftest's -a), on UD to the MTU.
func (p *Params) Sizes() []int {
	if !p.AllSize || p.Test.IsAtomic() {
		return []int{p.Size}
	}
	top := MaxSize
	if p.datagram() && p.MTU.Bytes() > 0 {
		top = p.MTU.Bytes()
	}
	var s []int
	for n := 2; n <= top; n *= 2 {
		s = append(s, n)
	}
	return s
}

// allocsDuring returns the heap allocations run makes.
func allocsDuring(run func() error) (uint64, error) {
	c := countAllocs()
	err := run()
	return c.since(), err
}

// allocCounter counts this process's heap allocations from its start:
// MemStats.Mallocs, exact because runtime.ReadMemStats stops the world to
// read it (runtime/metrics' count lags by what the Ps' caches hold). That
// takes tens of microseconds, and milliseconds the first time in a
// process, so a side that takes part in a run starts its counter before
// the handshake that starts the run, not between it and its first poll:
// a send_bw server that did found a short run's messages all arrived by
// then, and reported them over microseconds.
type allocCounter struct{ start uint64 }

func countAllocs() allocCounter {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return allocCounter{m.Mallocs}
}

// since returns the allocations made since c started.
func (c allocCounter) since() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs - c.start
}

// BWResult is one line of a bandwidth table.
type BWResult struct {
	Size     int
	Iters    int
	PeakMBps float64 // MB here, as in perftest, is 2^20 bytes
	AvgMBps  float64
	MsgRate  float64 // millions of messages per second
	Elapsed  time.Duration
	// CPUUtil is --cpu_util's figure for a timed run's sample window, in
	// percent (see Params.CPUUtil).
	CPUUtil float64
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
	// Timed is set for a timed run (-D), which reports Iters (the
	// messages of its sample window), Avg and TPS only: perftest's
	// RESULT_FMT_LAT_DUR table.
	Timed   bool
	TPS     float64 // transactions per second, of a timed run
	CPUUtil float64 // --cpu_util's figure, of a timed run
	// Samples are the measured times in the order taken (round trips,
	// or READs for read_lat), kept for -H and -U.
	Samples []time.Duration
}

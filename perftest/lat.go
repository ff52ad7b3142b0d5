package perftest

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/qp"
)

// waitWrite waits until the peer's RDMA WRITE carrying the value v has
// landed in s's slot 0: its last byte (perftest's poll byte) is byte(v).
// The region's write count orders the read after the write. It busy polls
// for a while, then sleeps until the region is written (see Side.wait).
func waitWrite(ctx context.Context, s *Side, p *Params, seen *uint64, v int) error {
	spin := spinner{pace: &s.pace}
	for {
		if w := s.MR.Writes(); w != *seen {
			*seen = w
			if s.Size == 0 || s.pollByte() == byte(v) {
				spin.found()
				p.progressed()
				return nil
			}
			continue
		}
		if spin.more(s.Dev) {
			continue
		}
		if _, err := s.MR.WaitWrite(ctx, *seen); err != nil {
			return fmt.Errorf("perftest: waiting for the peer's write %d: %w", v, context.Cause(ctx))
		}
	}
}

// pollByte returns the last byte of slot 0, where the peer's write_lat
// message puts its value, read as a CPU reads memory a NIC writes.
func (s *Side) pollByte() byte {
	var b [1]byte
	if s.MR.Peek(s.MR.IOVA()+uint64(s.Size-1), b[:]) != nil {
		return 0 // not while the side is open
	}
	return b[0]
}

// postOne posts one signaled work request and waits for its completion.
func postOne(ctx context.Context, s *Side, p *Params, wr qp.SendWR) error {
	if err := post(s, wr); err != nil {
		return err
	}
	return reap(ctx, s, p)
}

// post posts one signaled work request.
func post(s *Side, wr qp.SendWR) error {
	wr.Flags |= qp.SendSignaled
	_, err := s.QP.PostSend([]qp.SendWR{wr})
	return err
}

// reap waits for one send completion and checks it.
func reap(ctx context.Context, s *Side, p *Params) error {
	var wc [1]cq.WC
	if _, err := s.wait(ctx, p, s.SCQ, wc[:]); err != nil {
		return fmt.Errorf("perftest: waiting for a send completion: %w", err)
	}
	if wc[0].Status != cq.StatusSuccess {
		return completionError(wc[0])
	}
	return nil
}

// writeLat runs one side of the write_lat ping-pong as perftest's
// run_iter_lat_write does: the server writes first, each side writes value
// i+1 once it has seen the peer's value i+1 (the server: value i), and the
// last byte of each message carries the value. A side does not wait for
// its WRITE's completion before it watches for the peer's: it reaps it
// just after posting its next WRITE. The peer's ACK of a WRITE leaves
// behind the peer's answer, so waiting for it before answering would put
// one more packet on every round trip. It returns the side's round trips,
// from one of its writes to the next, as perftest times them on either
// side from tposted: one sample fewer than iters.
//
// The peer writes into slot 0 and a side writes from slots 1 and 2 in
// turn, as perftest keeps a send half and a receive half. Were they one
// place, a side would find its own poll byte there already and answer the
// first packet of the peer's multi-packet WRITE instead of its last, run
// ahead of the peer, and make a strict peer (perftest waits for exactly
// the next value) wait forever for a value it overwrote. Two send slots,
// because a WRITE is reaped after the next is posted, and a buffer must
// not change under a WRITE that may still be sent again.
//
// With Events, it runs pingPong with RDMA WRITE with immediate instead;
// with WithImm, writeImmLat.
func writeLat(ctx context.Context, s *Side, p *Params, client bool) (latOut, error) {
	if p.WithImm {
		return writeImmLat(ctx, s, p, client)
	}
	if p.Events {
		wr := qp.SendWR{Opcode: qp.WRRDMAWriteWithImm, SGList: s.ownSGE(1), RemoteAddr: s.RemoteAddr, RKey: s.RemoteKey}
		return pingPong(ctx, s, p, client, wr)
	}
	tm, ctx := latTimer(ctx, p)
	if tm != nil {
		defer tm.release()
		tm.start() // run_iter_lat_write starts it on both sides
	}
	var out latOut
	var seen uint64
	var times postTimes
	if tm == nil {
		times.rtts = make([]time.Duration, 0, p.Iters)
	}
	copy(s.Buf[s.slot(2):s.slot(2)+s.Size], s.Buf[s.slot(1):s.slot(1)+s.Size]) // one message in both
	var wrs [2]qp.SendWR
	var postBytes [2]int
	for k := range wrs {
		wrs[k] = qp.SendWR{Opcode: qp.WRRDMAWrite, SGList: s.ownSGE(1 + k), RemoteAddr: s.RemoteAddr, RKey: s.RemoteKey}
		if sendsInline(p, s.Size) {
			wrs[k].Flags = qp.SendInline // copied at post time, poll byte included
		}
		postBytes[k] = s.slot(1+k) + s.Size - 1
	}
	for i := 0; tm != nil || i < p.Iters; i++ {
		if tm != nil {
			if err := interrupted(ctx); err != nil {
				return latOut{}, err
			}
		}
		if client || i > 0 {
			v := i
			if client {
				v = i + 1
			}
			if err := waitWrite(ctx, s, p, &seen, v); err != nil {
				if tm != nil && timeUp(err) {
					break
				}
				return latOut{}, err
			}
		}
		if tm != nil && tm.ended() {
			break
		}
		if p.LatencyGap > 0 {
			spinFor(p.LatencyGap)
		}
		if tm == nil {
			// One clock read per round trip, as perftest takes one
			// timestamp per post, on either side: it ends one round trip
			// and starts the next.
			times.post(i, clock())
		}
		if s.Size > 0 {
			s.Buf[postBytes[i%2]] = byte(i + 1)
		}
		if err := post(s, wrs[i%2]); err != nil {
			return latOut{}, err
		}
		if i > 0 {
			if err := reap(ctx, s, p); err != nil {
				if tm != nil && timeUp(err) {
					break
				}
				return latOut{}, err
			}
			out.count(tm)
		}
	}
	if tm != nil {
		return out.timed(tm), nil // the last WRITE completes unreaped, as in perftest
	}
	if !client {
		if err := waitWrite(ctx, s, p, &seen, p.Iters); err != nil {
			return latOut{}, err
		}
	}
	if err := reap(ctx, s, p); err != nil {
		return latOut{}, err
	}
	out.samples = times.rtts
	return out, nil
}

// sendLat runs one side of the send_lat ping-pong over SEND (with
// immediate with WithImm) and receive. The receive for the first message
// must be posted already.
func sendLat(ctx context.Context, s *Side, p *Params, client bool) (latOut, error) {
	op := qp.WRSend
	if p.WithImm {
		op = qp.WRSendWithImm
	}
	wr := qp.SendWR{Opcode: op, SGList: s.ownSGE(0)}
	if sendsInline(p, s.Size) {
		wr.Flags = qp.SendInline
	}
	s.addressUD(&wr, 0)
	return pingPong(ctx, s, p, client, wr)
}

// pingPong runs one side of a ping-pong of wr, a SEND or a WRITE with
// immediate, each of which consumes a receive of the peer's: a side
// answers the peer's message when its receive completes. The receive for
// the first message must be posted already. It returns the side's round
// trips, each from one of its posts to the next, on both sides, as
// perftest's run_iter_lat_send and run_iter_lat_write_imm take them
// (tposted): one fewer than the messages.
func pingPong(ctx context.Context, s *Side, p *Params, client bool, wr qp.SendWR) (latOut, error) {
	// A timed run_iter_lat_send starts its clock at the first message it
	// receives (set_on_first_rx_packet), on each side.
	tm, ctx := latTimer(ctx, p)
	if tm != nil {
		defer tm.release()
	}
	var out latOut
	// recv posts the receive for message i. There is none for the
	// message after the last, as perftest posts none
	// (run_iter_lat_send): with -a, a receive left posted for this size
	// would take the next size's first, larger, message.
	recv := func(i int) error {
		if tm == nil && i >= p.Iters {
			return nil
		}
		return s.postRecv(0, qp.RecvWR{WRID: uint64(i), SGList: s.rsge(1)})
	}
	wait := func() error {
		var wc [1]cq.WC
		if _, err := s.wait(ctx, p, s.RCQ, wc[:]); err != nil {
			return fmt.Errorf("perftest: waiting for a receive: %w", err)
		}
		if wc[0].Status != cq.StatusSuccess {
			return completionError(wc[0])
		}
		if tm != nil {
			tm.start()
			out.count(tm)
		}
		return nil
	}
	// ended says whether err is the end of a timed run, or else fails it.
	ended := func(err error) bool { return tm != nil && timeUp(err) }
	var times postTimes
	if tm == nil {
		times.rtts = make([]time.Duration, 0, p.Iters)
	}
	for i := 0; tm != nil || i < p.Iters; i++ {
		if tm != nil {
			if err := interrupted(ctx); err != nil {
				return latOut{}, err
			}
		}
		if !client {
			if err := wait(); err != nil {
				if ended(err) {
					break
				}
				return latOut{}, err
			}
			if err := recv(i + 1); err != nil {
				return latOut{}, err
			}
		}
		if tm != nil && tm.ended() {
			break
		}
		if tm == nil {
			times.post(i, clock())
		}
		if err := post(s, wr); err != nil {
			return latOut{}, err
		}
		if i > 0 {
			// The last message's completion, reaped after the next
			// message is posted, as writeLat reaps: its ACK may come
			// behind the peer's answer, and waiting for it before
			// answering put it on the round trip. A side that sleeps
			// slept for it in one round trip of five.
			if err := reap(ctx, s, p); err != nil {
				if ended(err) {
					break
				}
				return latOut{}, err
			}
		}
		if client {
			if err := wait(); err != nil {
				if ended(err) {
					break
				}
				return latOut{}, err
			}
			if err := recv(i + 1); err != nil {
				return latOut{}, err
			}
		}
	}
	if tm != nil {
		return out.timed(tm), nil
	}
	if err := reap(ctx, s, p); err != nil {
		return latOut{}, err
	}
	out.samples = times.rtts
	return out, nil
}

// readLat times iters RDMA READs (read_lat) or atomics (atomic_lat), one
// at a time (run_iter_lat); timed, it runs until its runTimer ends and
// counts the operations of the sample window. An atomic_lat with Check
// verifies each atomic's result: the k-th finds k in the word, which
// starts at 0 (FETCH_AND_ADD adds 1; CMP_AND_SWAP swaps k for k+1).
func readLat(ctx context.Context, s *Side, p *Params) (latOut, error) {
	tm, ctx := latTimer(ctx, p)
	if tm != nil {
		defer tm.release()
		tm.start()
	}
	var out latOut
	wr := qp.SendWR{Opcode: qp.WRRDMARead, SGList: s.ownSGE(0), RemoteAddr: s.RemoteAddr, RKey: s.RemoteKey}
	k := uint64(0) // atomics done
	if p.Test == AtomicLat {
		wr.Opcode, wr.CompareAdd = qp.WRAtomicFetchAndAdd, 1
	}
	next := func() qp.SendWR {
		if p.Test == AtomicLat && p.Atomic == CmpAndSwap {
			wr.Opcode, wr.CompareAdd, wr.Swap = qp.WRAtomicCmpAndSwp, k, k+1
		}
		return wr
	}
	done := func() error {
		if p.Test != AtomicLat {
			return nil
		}
		if p.Check {
			if got := binary.NativeEndian.Uint64(s.src(0, s.slot(0), 8)); got != k {
				return fmt.Errorf("%w: atomic %d found %d in the word, want %d", ErrCheck, k, got, k)
			}
		}
		k++
		return nil
	}
	if tm != nil {
		for !tm.ended() {
			if err := interrupted(ctx); err != nil {
				return latOut{}, err
			}
			if err := postOne(ctx, s, p, next()); err != nil {
				if timeUp(err) {
					break
				}
				return latOut{}, err
			}
			if err := done(); err != nil {
				return latOut{}, err
			}
			out.count(tm)
		}
		return out.timed(tm), nil
	}
	out.samples = make([]time.Duration, 0, p.Iters)
	for range p.Iters {
		start := clock()
		if err := postOne(ctx, s, p, next()); err != nil {
			return latOut{}, err
		}
		out.samples = append(out.samples, clock()-start)
		if err := done(); err != nil {
			return latOut{}, err
		}
	}
	return out, nil
}

// postTimes keeps a side's round trips as perftest keeps tposted: a
// timestamp at each post, each round trip the time from one post to the
// next, one fewer than the posts.
type postTimes struct {
	rtts []time.Duration
	last time.Duration
}

// post records the post at now; i counts the posts before it.
func (t *postTimes) post(i int, now time.Duration) {
	if i > 0 {
		t.rtts = append(t.rtts, now-t.last)
	}
	t.last = now
}

// latOut is what one side of a latency test measured: the samples of a
// counted run, or the messages and sample window of a timed one.
type latOut struct {
	samples []time.Duration
	n       int
	window  time.Duration
	cpuUtil float64 // --cpu_util's figure for the window
}

// latTimer returns the runTimer of a timed latency run, not started, and
// the context that ends with it; nil and ctx for a counted run.
func latTimer(ctx context.Context, p *Params) (*runTimer, context.Context) {
	if p.Duration <= 0 {
		return nil, ctx
	}
	return newRunTimer(ctx, p)
}

// count counts a completion, if it came in the sample window.
func (o *latOut) count(tm *runTimer) {
	if tm != nil && tm.sampling() {
		o.n++
	}
}

// timed returns o with the sample window of tm.
func (o latOut) timed(tm *runTimer) latOut {
	o.window, o.cpuUtil = tm.sample(), tm.cpuUse()
	return o
}

// latDuration summarises a timed latency run as print_report_lat_duration
// does: the average latency in microseconds, half the round trip for the
// ping-pongs, and the transactions per second, over the sample window.
func latDuration(size int, o latOut, half bool) LatResult {
	r := LatResult{Size: size, Iters: o.n, Timed: true, CPUUtil: o.cpuUtil}
	if o.n == 0 || o.window <= 0 {
		return r
	}
	r.Avg = float64(o.window) / 1e3 / float64(o.n)
	if half {
		r.Avg /= 2
	}
	r.TPS = float64(o.n) / o.window.Seconds()
	return r
}

// clock returns the monotonic time since the program started. The
// latency tests time each operation with it rather than with time.Now,
// which reads the wall clock as well: one clock read less on the path
// being timed (65 ns against 140 on the development VM).
func clock() time.Duration { return time.Since(clockEpoch) }

// spinFor spins for d, as perftest's latency gap does (a busy wait on the
// cycle counter), letting the process's other goroutines run.
func spinFor(d time.Duration) {
	for end := clock() + d; clock() < end; {
		runtime.Gosched()
	}
}

var clockEpoch = time.Now()

// latStats summarises samples as perftest does; half is set for the
// ping-pong tests, which report half the round trip.
func latStats(size int, samples []time.Duration, half bool) LatResult {
	us := make([]float64, len(samples))
	for i, d := range samples {
		us[i] = float64(d) / 1e3
		if half {
			us[i] /= 2
		}
	}
	slices.Sort(us)
	r := LatResult{Size: size, Iters: len(us)}
	if len(us) == 0 {
		return r
	}
	var sum float64
	for _, v := range us {
		sum += v
	}
	r.Min, r.Max = us[0], us[len(us)-1]
	r.Typical = us[len(us)/2]
	r.Avg = sum / float64(len(us))
	var sq float64
	for _, v := range us {
		sq += (v - r.Avg) * (v - r.Avg)
	}
	r.Stdev = math.Sqrt(sq / float64(len(us)))
	pct := func(p float64) float64 { return us[min(int(math.Ceil(p*float64(len(us))))-1, len(us)-1)] }
	r.P99, r.P999 = pct(0.99), pct(0.999)
	return r
}

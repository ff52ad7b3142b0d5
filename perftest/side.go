package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/internal/cpu"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// Side is one end of a test: a QP, its CQs and a registered buffer of
// slots, each a message long. Messages cycle through the slots, so --check
// can tell one message's bytes from another's.
type Side struct {
	Dev   *rnic.Device
	PD    *mr.PD
	MR    *mr.MR
	Buf   []byte
	SCQ   *cq.CQ
	RCQ   *cq.CQ
	QP    *rnic.QP
	Slots int
	Size  int

	// The peer's buffer, as the out-of-band exchange told it.
	RemoteAddr uint64
	RemoteKey  mr.Key

	sgl  [1]qp.SGE
	pace spinPace
}

// slotCount is how many message slots a side's buffer holds: enough that a
// slot is not reused while a message in it may still be in flight, and at
// least the three write_lat uses.
func slotCount(p *Params, size int) int {
	n := max(p.TxDepth, p.RxDepth, 16)
	for n > 3 && n*max(size, 8) > 16<<20 {
		n /= 2
	}
	return max(n, 3)
}

// NewSide allocates a side's resources on dev for messages of size bytes.
func NewSide(dev *rnic.Device, p *Params, size int) (*Side, error) {
	s := &Side{Dev: dev, Size: size, Slots: slotCount(p, size)}
	s.PD = dev.AllocPD()
	s.Buf = make([]byte, max(s.Slots*max(size, 8), 2*cycleBuffer))
	var err error
	if s.MR, err = dev.RegMR(s.PD, s.Buf, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic); err != nil {
		return nil, err
	}
	depth := max(p.TxDepth, p.RxDepth) + 16
	if s.SCQ, err = dev.CreateCQ(depth); err != nil {
		return nil, err
	}
	if s.RCQ, err = dev.CreateCQ(depth); err != nil {
		return nil, err
	}
	s.QP, err = dev.CreateQP(qp.InitAttr{
		Type: qp.TypeRC, PD: s.PD, SendCQ: s.SCQ, RecvCQ: s.RCQ, Window: p.Window,
		Cap: qp.Cap{MaxSendWR: uint32(p.TxDepth) + 1, MaxRecvWR: uint32(p.RxDepth) + 1, MaxSendSGE: 1, MaxRecvSGE: 1,
			MaxInlineData: uint32(p.Inline)},
	})
	return s, err
}

// Close releases the side's QP and region, after sending what the
// device's busy polling left pending.
func (s *Side) Close() {
	s.Dev.Flush()
	if s.QP != nil {
		s.QP.Destroy()
	}
	if s.MR != nil {
		s.MR.Deregister()
	}
}

func (s *Side) slot(i int) int { return (i % s.Slots) * max(s.Size, 8) }

// The layout of RDMA WRITE and READ tests, perftest's: a peer running
// perftest registers about two messages' worth of memory (BUFF_SIZE, at
// least a page, times two) and its client addresses it as
// increase_rem_addr does: messages of at most half a page step through the
// first page in cache-line-rounded strides, larger ones all go to the
// start. gorxe addresses no more of its peer than that, and uses the same
// offsets in its own buffer, so --check can compare the two.
const (
	cycleBuffer = 4096 // perftest's cycle_buffer, the page size both sides agree on
	cacheLine   = 64
)

// rdmaStride returns the distance between messages of size bytes, or 0
// when they all go to the start of the buffer.
func rdmaStride(size int) int {
	if size > cycleBuffer/2 {
		return 0
	}
	return (max(size, 1) + cacheLine - 1) / cacheLine * cacheLine
}

// rdmaOffset returns where message i of size bytes goes.
func rdmaOffset(i, size int) int {
	st := rdmaStride(size)
	if st == 0 {
		return 0
	}
	return i % (cycleBuffer / st) * st
}

// rdmaPlaces returns how many distinct places messages of size bytes use.
func rdmaPlaces(size int) int {
	if st := rdmaStride(size); st != 0 {
		return cycleBuffer / st
	}
	return 1
}

// sge returns the scatter/gather list of message i's slot. The slice is
// reused by the next call: post it before asking for another (the verbs
// copy it).
func (s *Side) sge(i int) []qp.SGE {
	if s.Size == 0 {
		return nil
	}
	s.sgl[0] = qp.SGE{Addr: s.MR.IOVA() + uint64(s.slot(i)), Length: uint32(s.Size), LKey: s.MR.LKey()}
	return s.sgl[:]
}

// ownSGE returns message i's scatter/gather list in a slice of its own,
// for a work request posted again and again.
func (s *Side) ownSGE(i int) []qp.SGE { return append([]qp.SGE(nil), s.sge(i)...) }

// fillPattern fills every slot with bytes seeded by seed and the slot.
func (s *Side) fillPattern(seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	b := s.Buf
	for ; len(b) >= 8; b = b[8:] {
		binary.LittleEndian.PutUint64(b, r.Uint64())
	}
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// ErrCheck is returned when --check finds a byte that is not what was sent.
var ErrCheck = errors.New("perftest: data check failed")

// ErrStalled is returned when no completion arrives for Params.GiveUp: the
// peer is gone, or the network drops everything.
var ErrStalled = errors.New("perftest: no progress")

// wait waits for completions on c. It busy polls for a while first, as
// perftest does: when the device's link can receive without blocking, each
// turn runs the device's receive path on this goroutine (rnic.Device.Poll),
// so the packet that completes the wait needs no goroutine woken for it.
// Then it sleeps on the CQ. On a link that cannot be polled it spins only
// a few turns: a goroutine spinning for long would delay the Go
// scheduler's polling of the network, on which the device's own
// goroutines wait. With Params.Events it only sleeps. ctx is the run's
// watchdog context (Params.watch): its cause says why the run stopped.
func (s *Side) wait(ctx context.Context, p *Params, c *cq.CQ, dst []cq.WC) (int, error) {
	for spin := (spinner{pace: &s.pace, done: p.Events}); ; {
		if n, err := c.Poll(dst); n > 0 || err != nil {
			spin.found()
			p.progressed()
			return n, err
		}
		if !spin.more(s.Dev) {
			break
		}
	}
	n, err := c.Wait(ctx, dst)
	if err != nil && ctx.Err() != nil {
		return 0, context.Cause(ctx)
	}
	p.progressed()
	return n, err
}

// spinner paces a busy-poll loop: more polls the device and says whether
// to keep spinning, for up to the side's spin window on a device that can
// be polled, or for spins turns on one that cannot. Before it gives up it
// flushes what the device's Poll left pending.
type spinner struct {
	pace  *spinPace
	turns int
	start time.Time
	done  bool
}

// Busy-poll limits. spinTime is far longer than a round trip on a local
// network, and than the hiccups of a loaded machine (a virtual CPU the
// hypervisor takes away for a while), so that a latency test never
// sleeps: a side that slept wakes late, its peer then waits past its own
// spin and sleeps too, and both go on at a fraction of their speed. With
// 200 µs, write_lat's 99.9th percentile between two namespaces on a
// 2-CPU VM was 52-291 µs in three runs, against 50-61 µs with 5 ms. An
// idle side still gives its CPU back within a few milliseconds (perftest
// never does). minSpinTime is as short as the window gets where spinning
// keeps finding nothing (spinPace).
const (
	spins       = 8
	spinTime    = 5 * time.Millisecond
	minSpinTime = 100 * time.Microsecond
	yieldEvery  = 32
)

// oneCPU says the process runs on one CPU, where a spinner gives the CPU
// back to the kernel at every empty poll (see more).
var oneCPU = cpu.One()

// spinPace is a side's spin window, measured rather than fixed: halved,
// down to minSpinTime, by each wait whose spin found nothing, and doubled,
// up to spinTime, by each whose spin found what it waited for. Where the
// round trip fits in the window it stays at spinTime; where waits outlast
// it (an idle side, or a machine where the answer comes only once the
// spinner has stopped), a side spins a fraction of a millisecond before
// it sleeps, instead of 5 ms each time.
type spinPace struct{ window time.Duration }

func (sp *spinPace) get() time.Duration {
	if sp.window == 0 {
		sp.window = spinTime
	}
	return sp.window
}

// found tells the spinner that the wait ended, which counts for the
// window if it ended while it spun.
func (sp *spinner) found() {
	if sp.pace != nil && !sp.done {
		sp.pace.window = min(2*sp.pace.get(), spinTime)
	}
}

func (sp *spinner) more(dev *rnic.Device) bool {
	if sp.done {
		return false
	}
	sp.turns++
	if !dev.CanPoll() {
		runtime.Gosched()
		sp.done = sp.turns > spins
		return !sp.done
	}
	// The clock is read every 16 turns only, from the 16th: most waits
	// in a latency test end within a few polls, and a clock read costs
	// as much as an empty poll's own work.
	if sp.turns%16 == 0 {
		window := spinTime
		if sp.pace != nil {
			window = sp.pace.get()
		}
		switch {
		case sp.start.IsZero():
			sp.start = time.Now()
		case time.Since(sp.start) > window:
			sp.done = true
			if sp.pace != nil {
				sp.pace.window = max(window/2, minSpinTime)
			}
			dev.Flush() // nobody polls now: send what Poll left pending
			return false
		}
	}
	if dev.Poll() {
		return true
	}
	// On one CPU, an empty poll gives the CPU to whatever else is ready
	// to run: the kernel's processing of the very packet the spinner
	// waits for may be among it (a softirq deferred to ksoftirqd, on a
	// loaded or virtual machine), and would otherwise wait for the
	// spinner's time slice to end.
	if oneCPU {
		cpu.Yield()
	}
	// With one P, an empty poll yields now and then, so that the other
	// goroutines (the device's among them) get to run; not every time,
	// as Gosched is a trip through the scheduler, longer than the poll
	// itself. With more, they have the other Ps, and a spinner must not
	// yield: Gosched also wakes an idle thread to look for work, which
	// then takes the goroutine or the CPU. Yielding every 32 polls with
	// 2 Ps made a write_lat side hop between four threads, with 3000
	// thread switches a second.
	if sp.turns%yieldEvery == 0 && runtime.GOMAXPROCS(0) == 1 {
		runtime.Gosched()
	}
	return true
}

// checkSlots compares the places that the first n messages of an RDMA
// WRITE or READ test used in got with the same places in want.
func checkSlots(got, want *Side, n int) error {
	for i := range min(n, rdmaPlaces(got.Size)) {
		o := rdmaOffset(i, got.Size)
		if !bytes.Equal(got.Buf[o:o+got.Size], want.Buf[o:o+got.Size]) {
			return fmt.Errorf("%w: the message at offset %d differs", ErrCheck, o)
		}
	}
	return nil
}

// completionError turns a failed work completion into an error.
func completionError(wc cq.WC) error {
	return fmt.Errorf("perftest: completion with error: wr_id %d %v (%s)", wc.WRID, wc.Status, wc.Status.Name())
}

// bw runs the client side of a bandwidth test as run_iter_bw does: iters
// operations of the test's verb, TxDepth outstanding, PostList per post,
// one signaled in CQMod. With Duration it runs until its runTimer ends and
// reports what completed in the sample window; with Infinite it runs
// until ctx ends, handing a report to emit every period
// (run_iter_bw_infinitely), and returns a zero result.
func bw(ctx context.Context, s *Side, p *Params, origs []uint64, emit func(BWResult)) (BWResult, error) {
	cqMod := min(p.CQMod, p.TxDepth)
	postList := max(p.PostList, 1)
	wrs := make([]qp.SendWR, postList)
	sges := make([]qp.SGE, postList)
	wcs := make([]cq.WC, 64)
	if p.WarmUp && p.Test != SendBW {
		if err := warmUp(ctx, s, p, wrs, sges, wcs); err != nil {
			return BWResult{}, err
		}
	}
	var tm *runTimer
	if p.Duration > 0 && !p.Infinite {
		tm, ctx = newRunTimer(ctx, p)
		defer tm.release()
		tm.start()
	}
	var iv *interval
	if p.Infinite {
		iv = newInterval(p, emit)
	}
	timed := p.timed()
	noPeak := p.noPeakFor(false)
	posted, completed, counted := 0, 0, 0
	peak := 0.0
	start := time.Now()
	last := start
	lastDone := 0
	for {
		if tm != nil && tm.ended() || !timed && completed >= p.Iters {
			break
		}
		if iv != nil && ctx.Err() != nil {
			return BWResult{}, endInfinite(ctx)
		}
		if tm != nil {
			if err := interrupted(ctx); err != nil {
				return BWResult{}, err
			}
		}
		for (timed || posted < p.Iters) && posted-completed+postList <= p.TxDepth {
			if tm != nil && tm.ended() {
				break
			}
			for j := range wrs {
				s.bwWR(&wrs[j], sges[j:j+1], p, posted+j, cqMod)
			}
			if _, err := s.QP.PostSend(wrs); err != nil {
				return BWResult{}, err
			}
			if p.onPost != nil {
				p.onPost(len(wrs))
			}
			posted += postList
		}
		if completed >= posted {
			continue
		}
		n, err := s.wait(ctx, p, s.SCQ, wcs)
		switch {
		case err == nil:
		case tm != nil && timeUp(err):
			continue // the loop ends: outstanding sends complete unreaped, as in perftest
		case p.Infinite && stoppedByCaller(ctx, err):
			return BWResult{}, nil
		default:
			return BWResult{}, fmt.Errorf("perftest: waiting for completions after %d of %d: %w", completed, posted, err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != cq.StatusSuccess {
				return BWResult{}, completionError(wc)
			}
			done := int(wc.WRID) + 1
			if tm != nil && tm.sampling() {
				counted += done - completed
			}
			completed = done
			if p.Test == AtomicBW && origs != nil {
				origs[wc.WRID] = binary.NativeEndian.Uint64(s.Buf[s.slot(int(wc.WRID)):])
			}
		}
		if iv != nil {
			iv.tick(uint64(completed))
			continue
		}
		if now := time.Now(); !noPeak && (completed-lastDone >= p.TxDepth || completed == p.Iters) {
			if d := now.Sub(last).Seconds(); d > 0 {
				peak = max(peak, float64((completed-lastDone)*p.Size)/d/(1<<20))
			}
			last, lastDone = now, completed
		}
	}
	if tm != nil {
		return bwResult(p.Size, uint64(counted), tm.sample(), 0), nil
	}
	r := bwResult(p.Size, uint64(p.Iters), time.Since(start), 0)
	if !noPeak {
		r.PeakMBps = max(peak, r.AvgMBps)
	}
	return r, nil
}

// bwWR fills in wr, with its scatter/gather list in sgl[0], as bw's message
// i: the test's verb, the place increase_rem_addr gives message i, inline
// when it fits in Inline, signaled when it ends a run of cqMod or the run.
func (s *Side) bwWR(wr *qp.SendWR, sgl []qp.SGE, p *Params, i, cqMod int) {
	*wr = qp.SendWR{WRID: uint64(i)}
	off := s.slot(i)
	if p.Test == WriteBW || p.Test == ReadBW {
		off = rdmaOffset(i, s.Size)
	}
	if s.Size > 0 {
		sgl[0] = qp.SGE{Addr: s.MR.IOVA() + uint64(off), Length: uint32(s.Size), LKey: s.MR.LKey()}
		wr.SGList = sgl[:1]
	}
	if (i+1)%cqMod == 0 || !p.timed() && i == p.Iters-1 {
		wr.Flags = qp.SendSignaled
	}
	if sendsInline(p, s.Size) {
		wr.Flags |= qp.SendInline
	}
	remote := s.RemoteAddr + uint64(rdmaOffset(i, s.Size))
	switch p.Test {
	case WriteBW:
		wr.Opcode, wr.RemoteAddr, wr.RKey = qp.WRRDMAWrite, remote, s.RemoteKey
	case ReadBW:
		wr.Opcode, wr.RemoteAddr, wr.RKey = qp.WRRDMARead, remote, s.RemoteKey
	case SendBW:
		wr.Opcode = qp.WRSend
	case AtomicBW:
		// Every atomic goes to the same word, so the results prove
		// each one ran exactly once.
		wr.RemoteAddr, wr.RKey = s.RemoteAddr, s.RemoteKey
		if p.Atomic == CmpAndSwap {
			wr.Opcode, wr.CompareAdd, wr.Swap = qp.WRAtomicCmpAndSwp, uint64(i), uint64(i+1)
		} else {
			wr.Opcode, wr.CompareAdd = qp.WRAtomicFetchAndAdd, 1
		}
		wr.Flags |= qp.SendSignaled // each result is checked
	}
}

// sendsInline reports whether messages of size bytes go inline: at most
// Inline bytes, and a WRITE or a SEND (perftest refuses -I for the rest).
func sendsInline(p *Params, size int) bool {
	switch p.Test {
	case WriteBW, SendBW, WriteLat, SendLat:
		return p.Inline > 0 && size <= p.Inline
	}
	return false
}

// warmUp is perform_warm_up as perftest 6.2x runs it: TxDepth messages
// (PostList with a post list) like the first one, every one signaled, and
// a wait for all their completions, before the measured run. (6.06 posts
// them with the run's signaling, one in CQMod, and then waits for a
// completion of each: it never returns unless CQMod is 1.)
func warmUp(ctx context.Context, s *Side, p *Params, wrs []qp.SendWR, sges []qp.SGE, wcs []cq.WC) error {
	n := p.TxDepth
	if p.PostList > 1 {
		n = p.PostList
	}
	for posted := 0; posted < n; posted += len(wrs) {
		for j := range wrs {
			s.bwWR(&wrs[j], sges[j:j+1], p, 0, 1)
			wrs[j].WRID = uint64(posted + j)
			wrs[j].Flags |= qp.SendSignaled
		}
		if _, err := s.QP.PostSend(wrs[:min(len(wrs), n-posted)]); err != nil {
			return fmt.Errorf("perftest: posting the warm-up: %w", err)
		}
	}
	for done := 0; done < n; {
		k, err := s.wait(ctx, p, s.SCQ, wcs)
		if err != nil {
			return fmt.Errorf("perftest: waiting for the warm-up after %d of %d: %w", done, n, err)
		}
		for _, wc := range wcs[:k] {
			if wc.Status != cq.StatusSuccess {
				return completionError(wc)
			}
		}
		done += k
	}
	return nil
}

// receive keeps RxDepth receives posted on s and consumes iters messages
// (the server of send_bw), checking each against want when it is set.
func receive(ctx context.Context, s *Side, p *Params, want *Side, emit func(BWResult)) (BWResult, error) {
	posted, err := postReceives(s, p)
	if err != nil {
		return BWResult{}, err
	}
	return consumeReceives(ctx, s, p, want, posted, emit)
}

// postReceives posts the first receives of send_bw: RxDepth, or fewer if
// fewer messages come or the buffer has fewer slots (two receives in one
// slot would let a message overwrite the one before it while it is
// checked).
func postReceives(s *Side, p *Params) (int, error) {
	n := min(p.RxDepth, s.Slots)
	if !p.timed() {
		n = min(n, p.Iters)
	}
	for i := range n {
		if _, err := s.QP.PostRecv([]qp.RecvWR{{WRID: uint64(i), SGList: s.sge(i)}}); err != nil {
			return i, err
		}
	}
	return n, nil
}

// consumeReceives takes iters messages, reposting a receive for each one
// still to come, posted having been posted already, and returns the
// server's report, as run_iter_bw_server: the messages over the time from
// the first one's arrival to the last one's, without a peak. With
// Duration it receives until its own runTimer, started by the first
// message, ends, and reports the messages of the sample window; with
// Infinite it receives until ctx ends, handing emit a report every period
// (run_iter_bw_infinitely_server), and returns a zero result.
func consumeReceives(ctx context.Context, s *Side, p *Params, want *Side, posted int, emit func(BWResult)) (BWResult, error) {
	post := func(i int) error {
		_, err := s.QP.PostRecv([]qp.RecvWR{{WRID: uint64(i), SGList: s.sge(i)}})
		return err
	}
	var tm *runTimer
	if p.Duration > 0 && !p.Infinite {
		tm, ctx = newRunTimer(ctx, p)
		defer tm.release()
	}
	var iv *interval
	if p.Infinite {
		iv = newInterval(p, emit)
	}
	timed := p.timed()
	wcs := make([]cq.WC, 64)
	var first time.Duration
	done, counted := 0, 0
	for timed && (tm == nil || !tm.ended()) || !timed && done < p.Iters {
		if iv != nil && ctx.Err() != nil {
			return BWResult{}, endInfinite(ctx)
		}
		if tm != nil {
			if err := interrupted(ctx); err != nil {
				return BWResult{}, err
			}
		}
		n, err := s.wait(ctx, p, s.RCQ, wcs)
		switch {
		case err == nil:
		case tm != nil && timeUp(err):
			continue
		case p.Infinite && stoppedByCaller(ctx, err):
			return BWResult{}, nil
		default:
			return BWResult{}, fmt.Errorf("perftest: waiting for receives after %d: %w", done, err)
		}
		if done == 0 {
			first = clock() // set_on_first_rx_packet
			if tm != nil {
				tm.start()
			}
		}
		for _, wc := range wcs[:n] {
			if wc.Status != cq.StatusSuccess {
				return BWResult{}, completionError(wc)
			}
			if wc.ByteLen != uint32(p.Size) {
				return BWResult{}, fmt.Errorf("%w: received %d bytes, want %d", ErrCheck, wc.ByteLen, p.Size)
			}
			if want != nil {
				o := s.slot(int(wc.WRID))
				if !bytes.Equal(s.Buf[o:o+p.Size], want.Buf[want.slot(int(wc.WRID)):][:p.Size]) {
					return BWResult{}, fmt.Errorf("%w: message %d differs", ErrCheck, wc.WRID)
				}
			}
			done++
			if tm != nil && tm.sampling() {
				counted++
			}
			if timed || posted < p.Iters {
				if err := post(posted); err != nil {
					return BWResult{}, err
				}
				posted++
			}
		}
		if iv != nil {
			iv.tick(uint64(done))
		}
	}
	if tm != nil {
		return bwResult(p.Size, uint64(counted), tm.sample(), 0), nil
	}
	return bwResult(p.Size, uint64(done), clock()-first, 0), nil
}

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
		Cap: qp.Cap{MaxSendWR: uint32(p.TxDepth) + 1, MaxRecvWR: uint32(p.RxDepth) + 1, MaxSendSGE: 1, MaxRecvSGE: 1},
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

// sgeAt returns a scatter/gather list for a message at offset off of the
// buffer, reused like sge's.
func (s *Side) sgeAt(off int) []qp.SGE {
	if s.Size == 0 {
		return nil
	}
	s.sgl[0] = qp.SGE{Addr: s.MR.IOVA() + uint64(off), Length: uint32(s.Size), LKey: s.MR.LKey()}
	return s.sgl[:]
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

// bw runs the client side of a bandwidth test: iters operations of the
// test's verb, TxDepth outstanding, one signaled in CQMod.
func bw(ctx context.Context, s *Side, p *Params, origs []uint64) (BWResult, error) {
	cqMod := min(p.CQMod, p.TxDepth)
	wrs := make([]qp.SendWR, 1)
	wcs := make([]cq.WC, 64)
	posted, completed := 0, 0
	peak := 0.0
	start := time.Now()
	last := start
	lastDone := 0
	for completed < p.Iters {
		for posted < p.Iters && posted-completed < p.TxDepth {
			wr := &wrs[0]
			*wr = qp.SendWR{WRID: uint64(posted), SGList: s.sge(posted)}
			if (posted+1)%cqMod == 0 || posted == p.Iters-1 {
				wr.Flags = qp.SendSignaled
			}
			off := rdmaOffset(posted, s.Size)
			remote := s.RemoteAddr + uint64(off)
			switch p.Test {
			case WriteBW:
				wr.SGList = s.sgeAt(off)
				wr.Opcode, wr.RemoteAddr, wr.RKey = qp.WRRDMAWrite, remote, s.RemoteKey
			case ReadBW:
				wr.SGList = s.sgeAt(off)
				wr.Opcode, wr.RemoteAddr, wr.RKey = qp.WRRDMARead, remote, s.RemoteKey
			case SendBW:
				wr.Opcode = qp.WRSend
			case AtomicBW:
				// Every atomic goes to the same word, so the results prove
				// each one ran exactly once.
				wr.RemoteAddr, wr.RKey = s.RemoteAddr, s.RemoteKey
				if p.Atomic == CmpAndSwap {
					wr.Opcode, wr.CompareAdd, wr.Swap = qp.WRAtomicCmpAndSwp, uint64(posted), uint64(posted+1)
				} else {
					wr.Opcode, wr.CompareAdd = qp.WRAtomicFetchAndAdd, 1
				}
				wr.Flags = qp.SendSignaled // each result is checked
			}
			if _, err := s.QP.PostSend(wrs); err != nil {
				return BWResult{}, err
			}
			posted++
		}
		n, err := s.wait(ctx, p, s.SCQ, wcs)
		if err != nil {
			return BWResult{}, fmt.Errorf("perftest: waiting for completions after %d of %d: %w", completed, p.Iters, err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != cq.StatusSuccess {
				return BWResult{}, completionError(wc)
			}
			completed = int(wc.WRID) + 1
			if p.Test == AtomicBW && origs != nil {
				origs[wc.WRID] = binary.NativeEndian.Uint64(s.Buf[s.slot(int(wc.WRID)):])
			}
		}
		if now := time.Now(); completed-lastDone >= p.TxDepth || completed == p.Iters {
			if d := now.Sub(last).Seconds(); d > 0 {
				peak = max(peak, float64((completed-lastDone)*p.Size)/d/(1<<20))
			}
			last, lastDone = now, completed
		}
	}
	el := time.Since(start)
	r := BWResult{Size: p.Size, Iters: p.Iters, Elapsed: el}
	r.AvgMBps = float64(p.Size) * float64(p.Iters) / el.Seconds() / (1 << 20)
	r.MsgRate = float64(p.Iters) / el.Seconds() / 1e6
	r.PeakMBps = max(peak, r.AvgMBps)
	return r, nil
}

// receive keeps RxDepth receives posted on s and consumes iters messages
// (the server of send_bw), checking each against want when it is set.
func receive(ctx context.Context, s *Side, p *Params, want *Side) error {
	posted, err := postReceives(s, p)
	if err != nil {
		return err
	}
	return consumeReceives(ctx, s, p, want, posted)
}

// postReceives posts the first receives of send_bw: RxDepth, or fewer if
// fewer messages come or the buffer has fewer slots (two receives in one
// slot would let a message overwrite the one before it while it is
// checked).
func postReceives(s *Side, p *Params) (int, error) {
	n := min(p.RxDepth, p.Iters, s.Slots)
	for i := range n {
		if _, err := s.QP.PostRecv([]qp.RecvWR{{WRID: uint64(i), SGList: s.sge(i)}}); err != nil {
			return i, err
		}
	}
	return n, nil
}

// consumeReceives takes iters messages, reposting a receive for each one
// still to come, posted having been posted already.
func consumeReceives(ctx context.Context, s *Side, p *Params, want *Side, posted int) error {
	post := func(i int) error {
		_, err := s.QP.PostRecv([]qp.RecvWR{{WRID: uint64(i), SGList: s.sge(i)}})
		return err
	}
	wcs := make([]cq.WC, 64)
	for done := 0; done < p.Iters; {
		n, err := s.wait(ctx, p, s.RCQ, wcs)
		if err != nil {
			return fmt.Errorf("perftest: waiting for receives after %d of %d: %w", done, p.Iters, err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != cq.StatusSuccess {
				return completionError(wc)
			}
			if wc.ByteLen != uint32(p.Size) {
				return fmt.Errorf("%w: received %d bytes, want %d", ErrCheck, wc.ByteLen, p.Size)
			}
			if want != nil {
				o := s.slot(int(wc.WRID))
				if !bytes.Equal(s.Buf[o:o+p.Size], want.Buf[want.slot(int(wc.WRID)):][:p.Size]) {
					return fmt.Errorf("%w: message %d differs", ErrCheck, wc.WRID)
				}
			}
			done++
			if posted < p.Iters {
				if err := post(posted); err != nil {
					return err
				}
				posted++
			}
		}
	}
	return nil
}

package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/internal/cpu"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire/bth"
)

// Side is one end of a test: its QPs, the CQs they share and the
// registered memory they use, laid out in slots of a message each.
// Messages cycle through the slots, so --check can tell one message's
// bytes from another's.
//
// The memory is laid out as perftest lays out its own (ctx_init,
// set_up_connection): each QP has two regions, one it sends from (and
// READs into) and one it advertises in its key message, for the peer to
// write to, read from and send into. Without MRPerQP one buffer, under
// one memory region, holds the source regions of every QP, then their
// target regions; with it, each QP has a buffer and memory region of its
// own, its source region then its target region. The latency tests keep
// one region, written and sent from alike (writeLat says how it keeps
// them apart).
//
// QP, MR and Buf are QP 0's, and its source region starts Buf; RemoteAddr
// and RemoteKey are its peer's. The latency tests use only these.
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

	qps []*sideQP
	// srq, with --use-srq on a side that receives, is the shared receive
	// queue all its QPs take their receives from; qpIndex maps their QP
	// numbers to their index in qps, since a receive of QP i's buffer may
	// complete on any of them.
	srq     *rnic.SRQ
	qpIndex map[uint32]int
	sgl     [1]qp.SGE
	pace    spinPace
	// grh is the room in front of each message slot for the GRH a UD
	// QP receives a message behind: GRHLen on UD, else 0. A UD message
	// is sent from, and arrives at, grh bytes into its slot.
	grh int
}

// sideQP is one of a side's QPs with its regions of memory.
type sideQP struct {
	qp       *rnic.QP
	mr       *mr.MR
	buf      []byte // mr's memory
	src, dst int    // where the QP's two regions start in buf

	// The peer's target region for this QP, from its key message.
	remoteAddr uint64
	remoteKey  mr.Key

	// UD: the address handle to the peer, the QPN of its QP and the
	// Q_Key sends to it carry (QKey, or with -R rdma_cm's UDPQKey).
	ah         *qp.AH
	remoteQPN  bth.QPN
	remoteQKey uint32
}

// slotCount is how many message slots each region holds: enough that a
// slot is not reused while a message in it may still be in flight, and at
// least the three write_lat uses, within 16 MiB for all of a side's
// regions.
func slotCount(p *Params, size int) int {
	regions := 2 * p.qps()
	if p.Test.IsLatency() {
		regions = 1
	}
	n := max(p.TxDepth, p.RxDepth, 16)
	for n > 3 && n*max(size, 8)*regions > 16<<20 {
		n /= 2
	}
	return max(n, 3)
}

// regionSize returns the size of each region of a side for messages of
// size bytes: its slots, and for the bandwidth tests at least the page a
// perftest peer spreads its small messages over (increase_rem_addr).
func regionSize(p *Params, size int) int {
	r := slotCount(p, size) * (max(size, 8) + grhLen(p))
	if !p.Test.IsLatency() {
		r = max(r, cycleBuffer)
	}
	return (r + cacheLine - 1) / cacheLine * cacheLine
}

// grhLen returns the room a side keeps in front of each message slot:
// GRHLen on UD, else none.
func grhLen(p *Params) int {
	if p.datagram() {
		return GRHLen
	}
	return 0
}

// bufferBytes returns the memory a side registers for messages of size
// bytes.
func bufferBytes(p *Params, size int) int {
	if p.Test.IsLatency() {
		return max(regionSize(p, size), 2*cycleBuffer)
	}
	return 2 * p.qps() * regionSize(p, size)
}

// NewSide allocates a side's resources on dev for messages of size bytes:
// p.NumQPs QPs, one send and one receive CQ they share, their memory, and
// with p.UseSRQ on a side that receives (the server, either side of -b or
// of a latency test) the shared receive queue of their receives.
func NewSide(dev *rnic.Device, p *Params, size int, server bool) (s *Side, err error) {
	s = &Side{Dev: dev, Size: size, Slots: slotCount(p, size), grh: grhLen(p)}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	s.PD = dev.AllocPD()
	const access = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic
	if s.SCQ, err = dev.CreateCQ(p.cqDepth()); err != nil {
		return s, err
	}
	if s.RCQ, err = dev.CreateCQ(p.cqDepth()); err != nil {
		return s, err
	}
	ia := qp.InitAttr{
		Type: p.qpType(), PD: s.PD, SendCQ: s.SCQ, RecvCQ: s.RCQ, Window: p.Window,
		Cap: qp.Cap{MaxSendWR: uint32(p.TxDepth) + 1, MaxRecvWR: uint32(p.RxDepth) + 1, MaxSendSGE: 1, MaxRecvSGE: 1,
			MaxInlineData: uint32(p.Inline)},
	}
	if p.UseSRQ && (p.Test.IsLatency() || p.Duplex || server) {
		// perftest's max_wr is rx_depth, and its QPs then ask for no
		// receive queue of their own.
		if s.srq, err = dev.CreateSRQ(s.PD, qp.SRQAttr{MaxWR: uint32(p.RxDepth), MaxSGE: 1}); err != nil {
			return s, err
		}
		ia.SRQ, ia.Cap.MaxRecvWR, ia.Cap.MaxRecvSGE = s.srq, 0, 0
		s.qpIndex = make(map[uint32]int, p.qps())
	}
	n, region := p.qps(), regionSize(p, size)
	for i := range n {
		l := &sideQP{}
		switch {
		case p.Test.IsLatency():
			l.buf = make([]byte, bufferBytes(p, size))
		case p.MRPerQP:
			l.buf, l.src, l.dst = make([]byte, 2*region), 0, region
		case i == 0:
			l.buf, l.src, l.dst = make([]byte, bufferBytes(p, size)), 0, n*region
		default:
			l.buf, l.mr, l.src, l.dst = s.qps[0].buf, s.qps[0].mr, i*region, (n+i)*region
		}
		if l.mr == nil {
			// RegMR makes every page present, as perftest's filled
			// buffers and rxe's pinned ones are.
			if l.mr, err = dev.RegMR(s.PD, l.buf, access); err != nil {
				return s, err
			}
		}
		s.qps = append(s.qps, l)
		if l.qp, err = dev.CreateQP(ia); err != nil {
			return s, err
		}
		if s.qpIndex != nil {
			s.qpIndex[uint32(l.qp.Num())] = i
		}
	}
	s.QP, s.MR, s.Buf = s.qps[0].qp, s.qps[0].mr, s.qps[0].buf
	return s, nil
}

// Close releases the side's QPs and regions, after sending what the
// device's busy polling left pending.
func (s *Side) Close() {
	s.Dev.Flush()
	var last *mr.MR
	for _, l := range s.qps {
		if l.qp != nil {
			l.qp.Destroy()
		}
		if l.mr != nil && l.mr != last {
			l.mr.Deregister()
		}
		last = l.mr
	}
	if s.srq != nil {
		s.srq.Destroy()
	}
}

// setRemote records QP i's peer target region.
func (s *Side) setRemote(i int, addr uint64, key mr.Key) {
	s.qps[i].remoteAddr, s.qps[i].remoteKey = addr, key
	if i == 0 {
		s.RemoteAddr, s.RemoteKey = addr, key
	}
}

// targetAddr returns the address QP i advertises: its target region.
func (s *Side) targetAddr(i int) uint64 { return s.qps[i].mr.IOVA() + uint64(s.qps[i].dst) }

func (s *Side) slot(i int) int { return (i % s.Slots) * (max(s.Size, 8) + s.grh) }

// src and dst return n bytes of QP i's source or target region, from
// offset off in it.
func (s *Side) src(i, off, n int) []byte { l := s.qps[i]; return l.buf[l.src+off : l.src+off+n] }
func (s *Side) dst(i, off, n int) []byte { l := s.qps[i]; return l.buf[l.dst+off : l.dst+off+n] }

// peekDst returns a copy of n bytes of QP i's target region from offset
// off, read as a CPU reads memory a NIC writes (mr.MR.Peek): the peer's
// WRITEs and atomics land there with no completion on this side to order
// a plain read after them. A side without registered memory (a
// patternSide) is read directly.
func (s *Side) peekDst(i, off, n int) ([]byte, error) {
	l := s.qps[i]
	b := make([]byte, n)
	if l.mr == nil {
		copy(b, s.dst(i, off, n))
		return b, nil
	}
	if err := l.mr.Peek(l.mr.IOVA()+uint64(l.dst+off), b); err != nil {
		return nil, fmt.Errorf("perftest: reading QP %d's target region: %w", i, err)
	}
	return b, nil
}

// atomicWord returns the word at the start of QP i's target region,
// which the peer's atomics change.
func (s *Side) atomicWord(i int) (uint64, error) {
	b, err := s.peekDst(i, 0, 8)
	if err != nil {
		return 0, err
	}
	return binary.NativeEndian.Uint64(b), nil
}

// sgeIn returns a scatter/gather list of a message at offset off of QP
// i's memory, reused like sge's.
func (s *Side) sgeIn(i, off int) []qp.SGE {
	if s.Size == 0 {
		return nil
	}
	l := s.qps[i]
	s.sgl[0] = qp.SGE{Addr: l.mr.IOVA() + uint64(off), Length: uint32(s.Size), LKey: l.mr.LKey()}
	return s.sgl[:]
}

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

// recvSGEIn returns the scatter/gather list of a receive at offset off of
// QP i's memory: the message and the GRH room in front of it, reused like
// sge's.
func (s *Side) recvSGEIn(i, off int) []qp.SGE {
	if s.Size+s.grh == 0 {
		return nil
	}
	l := s.qps[i]
	s.sgl[0] = qp.SGE{Addr: l.mr.IOVA() + uint64(off), Length: uint32(s.Size + s.grh), LKey: l.mr.LKey()}
	return s.sgl[:]
}

// sge returns the scatter/gather list of message i's slot of QP 0's
// source region (past the GRH room). The slice is reused by the next
// call: post it before asking for another (the verbs copy it).
func (s *Side) sge(i int) []qp.SGE { return s.sgeIn(0, s.qps[0].src+s.slot(i)+s.grh) }

// rsge returns the scatter/gather list of a receive into message i's slot
// of QP 0's source region, GRH room included, reused like sge's.
func (s *Side) rsge(i int) []qp.SGE { return s.recvSGEIn(0, s.qps[0].src+s.slot(i)) }

// ownSGE returns message i's scatter/gather list in a slice of its own,
// for a work request posted again and again.
func (s *Side) ownSGE(i int) []qp.SGE { return append([]qp.SGE(nil), s.sge(i)...) }

// buffers returns the side's distinct buffers: one, or one per QP with
// MRPerQP.
func (s *Side) buffers() [][]byte {
	var bs [][]byte
	for i, l := range s.qps {
		if i == 0 || &l.buf[0] != &s.qps[i-1].buf[0] {
			bs = append(bs, l.buf)
		}
	}
	return bs
}

// fillPattern fills the side's memory with bytes seeded by seed.
func (s *Side) fillPattern(seed uint64) {
	for i, b := range s.buffers() {
		r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15+uint64(i)))
		for ; len(b) >= 8; b = b[8:] {
			binary.LittleEndian.PutUint64(b, r.Uint64())
		}
		for i := range b {
			b[i] = byte(r.Uint32())
		}
	}
}

// zeroAtomicWords zeroes the word at the start of each QP's target
// region, which the peer's atomics change.
func (s *Side) zeroAtomicWords() {
	for i := range s.qps {
		binary.NativeEndian.PutUint64(s.dst(i, 0, 8), 0)
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
		if !spin.more(s.Dev) || spin.turns%16 == 0 && ctx.Err() != nil {
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
	emptyPoll(sp.turns)
	return true
}

// emptyPoll gives the CPU back, as far as a busy poller must, after its
// turn'th poll found nothing.
func emptyPoll(turn int) {
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
	if turn%yieldEvery == 0 && runtime.GOMAXPROCS(0) == 1 {
		runtime.Gosched()
	}
}

// serve busy polls the device on a goroutine of its own, until stop is
// called, for a side that takes no part in a latency test's run
// (read_lat's and atomic_lat's server, Params.servesPassively): its
// device is the NIC that answers each of the peer's READs or atomics,
// and a receive goroutine asleep in poll(2) costs a wake-up a round
// trip, which an RNIC answering in hardware, or kernel rxe answering in
// its softirq, does not pay. It spins as the active sides wait
// (spinner), and once nothing has come for spinTime it sleeps in the
// link until something does (Device.Drive), so an idle server gives its
// CPU back. On a link that cannot wait so (the mem link) it leaves the
// device to its receive goroutine.
func (s *Side) serve() (stop func()) {
	dev := s.Dev
	if !dev.CanPoll() || !dev.CanDrive() {
		return func() {}
	}
	done, finished := make(chan struct{}), make(chan struct{})
	stopped := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	go func() {
		defer close(finished)
		defer dev.Flush()
		var since time.Time // when the last poll that found packets ended, zero till the clock is read
		for turn := 1; ; turn++ {
			if dev.Poll() {
				turn, since = 0, time.Time{}
				continue
			}
			emptyPoll(turn)
			if turn%16 != 0 {
				continue // a clock read and a select cost as much as an empty poll
			}
			if stopped() {
				return
			}
			switch {
			case since.IsZero():
				since = time.Now()
			case time.Since(since) > spinTime:
				// Nothing for a while: sleep in the link until a
				// batch comes, and spin again.
				for {
					start := time.Now()
					if dev.Drive() {
						break
					}
					if stopped() {
						return
					}
					if time.Since(start) < time.Millisecond {
						// Drive did not wait: another goroutine drives,
						// or the link is closing.
						time.Sleep(time.Millisecond)
					}
				}
				turn, since = 0, time.Time{}
			}
		}
	}()
	return sync.OnceFunc(func() {
		close(done)
		dev.Wake() // out of a Drive
		<-finished
	})
}

// awaitArrivals waits, on the target of a UC test's RDMA WRITEs, for the
// last of them to arrive before the target's memory is checked: a UC
// requester completes a WRITE as it sends it, so when it says it is done
// its last packets may still be on the way. It returns once the device
// has received at least want packets (0: unknown), or nothing for 20 ms
// (a lost packet never comes), or after 2 s.
func (s *Side) awaitArrivals(want uint64) {
	const quiet, limit = 20 * time.Millisecond, 2 * time.Second
	start := time.Now()
	last, since := s.Dev.Counters().RcvdPkts, start
	for want == 0 || last < want {
		now := time.Now()
		if now.Sub(since) >= quiet || now.Sub(start) >= limit {
			return
		}
		time.Sleep(time.Millisecond)
		if n := s.Dev.Counters().RcvdPkts; n != last {
			last, since = n, time.Now()
		}
	}
}

// checkPlaced compares, on each QP, the places the first n messages of
// an RDMA WRITE or READ test used in the requester's source region with
// the same places in the responder's target region: where a WRITE put
// what it took from the requester, or where a READ took what it put
// there.
func checkPlaced(requester, responder *Side, n int) error {
	size := requester.Size
	for i := range requester.qps {
		for k := range min(n, rdmaPlaces(size)) {
			o := rdmaOffset(k, size)
			got, err := responder.peekDst(i, o, size)
			if err != nil {
				return err
			}
			if !bytes.Equal(requester.src(i, o, size), got) {
				return fmt.Errorf("%w: the message at offset %d of QP %d differs", ErrCheck, o, i)
			}
		}
	}
	return nil
}

// completionError turns a failed work completion into an error.
func completionError(wc cq.WC) error {
	return fmt.Errorf("perftest: completion with error: wr_id %#x %v (%s)", wc.WRID, wc.Status, wc.Status.Name())
}

// wrID names message k of the side's QP i in a work request, as
// perftest's wr_id names the QP.
func wrID(i, k int) uint64 { return uint64(i)<<32 | uint64(uint32(k)) }

func splitWRID(id uint64) (i, k int) { return int(id >> 32), int(uint32(id)) }

// bw runs the sending side of a bandwidth test as perftest's run_iter_bw
// posts it: iters operations of the test's verb on each QP, TxDepth
// outstanding on each, PostList per post, one signaled in CQMod, to each
// QP in turn, as many as it has room for. origs, for atomic_bw's --check,
// gets what each QP's atomics returned.
//
// With a runTimer tm (-D), whose context ctx is, it posts until the timer
// ends and reports the messages that completed in its sample window over
// the window; with Infinite it posts until ctx ends, handing emit a
// report every period (run_iter_bw_infinitely), and returns a zero
// result.
func bw(ctx context.Context, s *Side, p *Params, origs [][]uint64, tm *runTimer, emit func(BWResult)) (BWResult, error) {
	cqMod := min(p.CQMod, p.TxDepth)
	postList := max(p.PostList, 1)
	wrs := make([]qp.SendWR, postList)
	sges := make([]qp.SGE, postList)
	wcs := make([]cq.WC, 64)
	if p.WarmUp && p.warmsUp() {
		if err := warmUp(ctx, s, p, wrs, sges, wcs); err != nil {
			return BWResult{}, err
		}
	}
	if tm != nil {
		tm.start() // idempotent: a duplex server's started at its first receive
	}
	var iv *interval
	if p.Infinite {
		iv = newInterval(p, emit)
	}
	timed := p.timed()
	noPeak := p.noPeakFor(false)
	nq := len(s.qps)
	posted, completed := make([]int, nq), make([]int, nq)
	total, sent, done, counted := p.Iters*nq, 0, 0, 0
	start := time.Now()
	var peak *peakMeter
	if !noPeak && !timed {
		peak = newPeakMeter(total, postList, cqMod, start)
	}
	pace := newBurstPacer(p)
	for {
		if tm != nil && tm.ended() || !timed && done >= total {
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
		for i, l := range s.qps {
			if !pace.open() {
				continue // until the next burst's time: poll meanwhile, as run_iter_bw
			}
			for (timed || posted[i] < p.Iters) && posted[i]-completed[i]+postList <= p.TxDepth && pace.more() {
				if tm != nil && tm.ended() {
					break
				}
				for j := range wrs {
					s.bwWR(&wrs[j], sges[j:j+1], p, i, posted[i]+j, cqMod)
				}
				if peak != nil {
					peak.posted(sent, time.Now())
				}
				if _, err := l.qp.PostSend(wrs); err != nil {
					return BWResult{}, err
				}
				if p.onPost != nil {
					p.onPost(len(wrs))
				}
				posted[i] += postList
				sent += postList
				pace.posted(postList)
			}
		}
		if done >= sent && !pace.waiting() {
			continue
		}
		n, err := pace.wait(ctx, p, done >= sent, func(ctx context.Context) (int, error) {
			return iv.wait(ctx, func(ctx context.Context) (int, error) { return s.wait(ctx, p, s.SCQ, wcs) })
		})
		switch {
		case err == nil:
		case errors.Is(err, errBurstDue):
			continue
		case errors.Is(err, errReportDue):
			iv.tick(uint64(done))
			continue
		case tm != nil && timeUp(err):
			continue // the loop ends: outstanding sends complete unreaped, as in perftest
		case p.Infinite && stoppedByCaller(ctx, err):
			return BWResult{}, nil
		default:
			return BWResult{}, fmt.Errorf("perftest: waiting for completions after %d of %d: %w", done, sent, err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != cq.StatusSuccess {
				return BWResult{}, completionError(wc)
			}
			i, k := splitWRID(wc.WRID)
			if i < nq {
				k = unwrap(k, completed[i])
			}
			if i >= nq || k < completed[i] || k >= posted[i] {
				return BWResult{}, fmt.Errorf("perftest: a completion for wr_id %#x, which is not outstanding", wc.WRID)
			}
			if tm != nil && tm.sampling() {
				counted += k + 1 - completed[i]
			}
			done += k + 1 - completed[i]
			completed[i] = k + 1
			if p.Test == AtomicBW && origs != nil {
				origs[i][k] = binary.NativeEndian.Uint64(s.src(i, s.slot(k), 8))
			}
		}
		if iv != nil {
			iv.tick(uint64(done))
			continue
		}
		if peak != nil && n > 0 {
			peak.completed(done, time.Now())
		}
	}
	if tm != nil {
		return tm.bwResult(p.Size, uint64(counted)), nil
	}
	r := rate(p.Size, total, time.Since(start))
	r.PeakMBps = 0
	if peak != nil {
		r.PeakMBps = max(peak.mbps(p.Size), r.AvgMBps)
	}
	return r, nil
}

// unwrap returns the message number whose low 32 bits a wr_id carries
// (wrID), the nearest at or after base, the oldest outstanding: a timed
// run may post more than 2^32 messages on a QP.
func unwrap(low, base int) int {
	return base + int(uint32(low)-uint32(base))
}

// bwWR fills in wr, with its scatter/gather list in sgl[0], as bw's
// message k of QP i: the test's verb, the place increase_rem_addr gives
// message k, inline when it fits in Inline, signaled when it ends a run of
// cqMod or the run.
func (s *Side) bwWR(wr *qp.SendWR, sgl []qp.SGE, p *Params, i, k, cqMod int) {
	l := s.qps[i]
	*wr = qp.SendWR{WRID: wrID(i, k)}
	off, roff := l.src+s.slot(k)+s.grh, rdmaOffset(k, s.Size)
	if p.Test == WriteBW || p.Test == ReadBW {
		off = l.src + roff
	}
	if s.Size > 0 {
		sgl[0] = qp.SGE{Addr: l.mr.IOVA() + uint64(off), Length: uint32(s.Size), LKey: l.mr.LKey()}
		wr.SGList = sgl[:1]
	}
	if (k+1)%cqMod == 0 || !p.timed() && k == p.Iters-1 {
		wr.Flags = qp.SendSignaled
	}
	if sendsInline(p, s.Size) {
		wr.Flags |= qp.SendInline
	}
	remote := l.remoteAddr + uint64(roff)
	switch p.Test {
	case WriteBW:
		wr.Opcode, wr.RemoteAddr, wr.RKey = qp.WRRDMAWrite, remote, l.remoteKey
		if p.WithImm {
			wr.Opcode = qp.WRRDMAWriteWithImm
		}
	case ReadBW:
		wr.Opcode, wr.RemoteAddr, wr.RKey = qp.WRRDMARead, remote, l.remoteKey
	case SendBW:
		wr.Opcode = qp.WRSend
		if p.WithImm {
			wr.Opcode = qp.WRSendWithImm
		}
		s.addressUD(wr, i)
	case AtomicBW:
		// Every atomic of a QP goes to the same word, so the results
		// prove each one ran exactly once.
		wr.RemoteAddr, wr.RKey = l.remoteAddr, l.remoteKey
		if p.Atomic == CmpAndSwap {
			wr.Opcode, wr.CompareAdd, wr.Swap = qp.WRAtomicCmpAndSwp, uint64(k), uint64(k+1)
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

// warmUp is perform_warm_up as perftest 6.2x runs it: on each QP in turn,
// TxDepth messages (PostList with a post list) like its first one, every
// one signaled, and a wait for all their completions, before the measured
// run. (6.06 posts them with the run's signaling, one in CQMod, and then
// waits for a completion of each: it never returns unless CQMod is 1.)
func warmUp(ctx context.Context, s *Side, p *Params, wrs []qp.SendWR, sges []qp.SGE, wcs []cq.WC) error {
	n := p.TxDepth
	if p.PostList > 1 {
		n = p.PostList
	}
	for i, l := range s.qps {
		for posted := 0; posted < n; posted += len(wrs) {
			for j := range wrs {
				s.bwWR(&wrs[j], sges[j:j+1], p, i, 0, 1)
				wrs[j].WRID = wrID(i, posted+j)
				wrs[j].Flags |= qp.SendSignaled
			}
			if _, err := l.qp.PostSend(wrs[:min(len(wrs), n-posted)]); err != nil {
				return fmt.Errorf("perftest: posting the warm-up: %w", err)
			}
		}
		for done := 0; done < n; {
			k, err := s.wait(ctx, p, s.SCQ, wcs)
			if err != nil {
				return fmt.Errorf("perftest: waiting for the warm-up of QP %d after %d of %d: %w", i, done, n, err)
			}
			for _, wc := range wcs[:k] {
				if wc.Status != cq.StatusSuccess {
					return completionError(wc)
				}
			}
			done += k
		}
	}
	return nil
}

// rate returns the result of iters messages of size bytes in el.
func rate(size, iters int, el time.Duration) BWResult {
	r := BWResult{Size: size, Iters: iters, Elapsed: el}
	r.AvgMBps = float64(size) * float64(iters) / el.Seconds() / (1 << 20)
	r.MsgRate = float64(iters) / el.Seconds() / 1e6
	r.PeakMBps = r.AvgMBps
	return r
}

// sumBW is the line perftest prints with -b: this side's size and
// iterations, the rates of both sides added (print_full_bw_report).
func sumBW(own, peer BWResult) BWResult {
	own.PeakMBps += peer.PeakMBps
	own.AvgMBps += peer.AvgMBps
	own.MsgRate += peer.MsgRate
	return own
}

// runBWSide runs one side's part of a size of a bandwidth test: the side
// sends (Params.sends) and receives (Params.receives), both at once when
// it does both, as perftest's run_iter_bi. It returns what it measured:
// its sends, or what it received; timed (-D), what it sent and received
// in the sample window of its one runTimer, as run_iter_bi counts both.
// posted receives are posted on each QP already; want, when set, holds
// what the peer sends, for --check; origs gets the results of the side's
// atomics; emit gets the reports of an infinite run.
func runBWSide(ctx context.Context, p *Params, s *Side, server bool, posted int, want *Side, origs [][]uint64, emit func(BWResult)) (BWResult, error) {
	sends, recvs := p.sends(server), p.receives(server)
	var tm *runTimer
	if p.Duration > 0 && !p.Infinite {
		tm, ctx = newRunTimer(ctx, p)
		defer tm.release()
		if !server {
			tm.start() // a client's clock starts with its run, a server's at its first receive
		}
	}
	switch {
	case sends && !recvs:
		return bw(ctx, s, p, origs, tm, emit)
	case !sends:
		return consumeReceives(ctx, s, p, want, posted, nil, tm, emit)
	}
	// The receives are taken on a goroutine of their own, with a copy
	// of the side for its own scratch and spin pacing; the QPs and CQs
	// take posts and polls from both. The server sends once its first
	// message has come, as run_iter_bi does ("SERVER will not start to
	// send packets before CLIENT start the test").
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	rs := *s
	first := make(chan struct{})
	type out struct {
		r   BWResult
		err error
	}
	recvOut := make(chan out, 1)
	go func() {
		r, err := consumeReceives(ctx, &rs, p, want, posted, func() { close(first) }, tm, nil)
		if err != nil {
			cancel(err)
		}
		recvOut <- out{r, err}
	}()
	if server {
		select {
		case <-first:
		case <-ctx.Done():
			o := <-recvOut
			if tm != nil && o.err == nil {
				return o.r, nil // the time was up before anything came
			}
			return BWResult{}, context.Cause(ctx)
		}
	}
	r, err := bw(ctx, s, p, origs, tm, emit)
	if err != nil {
		cancel(err)
	}
	o := <-recvOut
	if err == nil && o.err != nil {
		err = o.err
	}
	if tm != nil && err == nil {
		r = tm.bwResult(p.Size, uint64(r.Iters+o.r.Iters))
	}
	return r, err
}

// postReceives posts the first receives of each QP of a receiving side,
// as perftest's ctx_set_recv_wqes: RxDepth, or fewer if fewer messages
// come or, with --check of SENDs, if the target region has fewer slots
// (two receives in one slot would let a message overwrite the one before
// it while it is checked). With an SRQ the RxDepth receives are shared
// out between the QPs' buffers, as perftest's size_per_qp. It returns how
// many each QP's buffer got.
func postReceives(s *Side, p *Params) (int, error) {
	n := p.RxDepth
	if s.srq != nil {
		n /= len(s.qps)
	}
	if !p.timed() {
		n = min(n, p.Iters)
	}
	if p.Check && p.Test == SendBW {
		n = min(n, s.Slots)
	}
	if l := max(p.RecvPostList, 1); l > 1 {
		if n < l {
			return 0, fmt.Errorf("perftest: --recv_post_list %d is more than the %d receives QP buffers take here", l, n)
		}
		n -= n % l // whole lists, as perftest's size_per_qp
	}
	for i := range s.qps {
		for k := 0; k < n; k += max(p.RecvPostList, 1) {
			if err := postRecvList(s, p, i, k); err != nil {
				return k, err
			}
		}
	}
	return n, nil
}

// postRecvList posts, in one call, the receives of messages k to
// k+RecvPostList-1 of QP i: one list (--recv_post_list), or one receive.
func postRecvList(s *Side, p *Params, i, k int) error {
	l := max(p.RecvPostList, 1)
	if l == 1 {
		return postRecv(s, p, i, k)
	}
	wrs := make([]qp.RecvWR, l)
	for j := range wrs {
		wrs[j] = recvWR(s, p, i, k+j)
		wrs[j].SGList = slices.Clone(wrs[j].SGList) // recvWR's is reused
	}
	return s.postRecvs(i, wrs)
}

// postRecv posts the receive of message k of QP i: into its slot of the
// QP's target region, or, for RDMA WRITE with immediate, which puts its
// data where its RETH says, with no memory (as perftest's since 6.24,
// commit d6e1c86).
func postRecv(s *Side, p *Params, i, k int) error {
	return s.postRecv(i, recvWR(s, p, i, k))
}

// recvWR returns the receive of message k of QP i, as postRecv posts it.
// Its scatter/gather list is reused by the next call, as recvSGEIn's.
func recvWR(s *Side, p *Params, i, k int) qp.RecvWR {
	var sgl []qp.SGE
	if p.Test != WriteBW {
		sgl = s.recvSGEIn(i, s.qps[i].dst+s.slot(k))
	}
	return qp.RecvWR{WRID: wrID(i, k), SGList: sgl}
}

// postRecv posts wr, a receive into QP i's memory, as postRecvs does.
func (s *Side) postRecv(i int, wr qp.RecvWR) error { return s.postRecvs(i, []qp.RecvWR{wr}) }

// postRecvs posts wrs, receives into QP i's memory, in one call: to the
// side's SRQ with --use-srq, else to QP i.
func (s *Side) postRecvs(i int, wrs []qp.RecvWR) error {
	var err error
	if s.srq != nil {
		_, err = s.srq.PostRecv(wrs)
	} else {
		_, err = s.qps[i].qp.PostRecv(wrs)
	}
	return err
}

// matchMessage reports whether got is message m of the peer's QP j, as
// want (the peer's side, or its pattern) holds it, and returns m. On UC
// and UD (unreliable), where messages before it may have been lost, got
// may be any later message, and matchMessage returns the first whose
// bytes it has: a message's bytes are its slot's, so that of the messages
// one cycle of slots apart, the earliest stands for all.
func matchMessage(got []byte, want *Side, j, m int, unreliable bool) (int, bool) {
	tries := 1
	if unreliable {
		tries = want.Slots
	}
	for n := m; n < m+tries; n++ {
		if bytes.Equal(got, want.src(j, want.slot(n)+want.grh, len(got))) {
			return n, true
		}
	}
	return m, false
}

// errPeerDone ends a UC receiver's wait for messages: its peer has
// finished, and nothing has come for peerGrace since.
var errPeerDone = errors.New("perftest: the peer has finished; the messages still missing were lost")

// peerGrace is how long a UC receiver whose peer has finished waits for
// more messages: a UC work request completes once its packets have left,
// so the last messages may still be on their way, or waiting in this
// side's receive path.
const peerGrace = 250 * time.Millisecond

// untilPeerDone returns ctx, ended with errPeerDone once peerDone is
// closed and arrived (the messages received) has not moved for peerGrace,
// as perftest's check_alive ends a UC or UD receiver that waits for lost
// messages (after 60 to 120 s; gorxe knows when the sender is done).
func untilPeerDone(ctx context.Context, peerDone <-chan struct{}, arrived *atomic.Int64) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	quit := make(chan struct{})
	go func() {
		select {
		case <-peerDone:
		case <-quit:
			return
		}
		tick := time.NewTicker(peerGrace / 5)
		defer tick.Stop()
		last, since := arrived.Load(), time.Now()
		for {
			select {
			case <-quit:
				return
			case now := <-tick.C:
				if v := arrived.Load(); v != last {
					last, since = v, now
				} else if now.Sub(since) >= peerGrace {
					cancel(errPeerDone)
					return
				}
			}
		}
	}()
	return ctx, func() { close(quit); cancel(nil) }
}

// consumeReceives takes iters messages on each QP, reposting a receive
// for each one still to come, posted having been posted on each QP
// already, as perftest's run_iter_bw_server, and returns the side's
// report: the messages over the time from the first one's arrival to the
// last one's (set_on_first_rx_packet), without a peak. It checks each
// message against want when it is set, and calls first, if set, at the
// first. With WithImm every completion must carry immediate data
// (perftest 6.28 checks IBV_WC_WITH_IMM).
//
// With a runTimer tm (-D), whose context ctx is, it starts the timer at
// the first message, receives until the timer ends, and reports the
// messages of its sample window; with Infinite it receives until ctx
// ends, handing emit a report every period
// (run_iter_bw_infinitely_server), and returns a zero result.
func consumeReceives(ctx context.Context, s *Side, p *Params, want *Side, posted int, first func(), tm *runTimer, emit func(BWResult)) (BWResult, error) {
	nq := len(s.qps)
	next := make([]int, nq)
	for i := range next {
		next[i] = posted
	}
	list, unused := max(p.RecvPostList, 1), make([]int, nq)
	var iv *interval
	if p.Infinite {
		iv = newInterval(p, emit)
	}
	timed := p.timed()
	var arrived *atomic.Int64
	if p.peerDone != nil && !timed {
		var stop func()
		arrived = new(atomic.Int64)
		ctx, stop = untilPeerDone(ctx, p.peerDone, arrived)
		defer stop()
	}
	// came counts the messages that came on each QP: with an SRQ the
	// receive a message takes may be of another QP's buffer, and on UC
	// and UD a message lost on the way leaves the count of receives
	// behind the message number.
	came := make([]int, nq)
	wcs := make([]cq.WC, 64)
	var start time.Duration
	done, counted, total := 0, 0, p.Iters*nq
receiving:
	for timed && (tm == nil || !tm.ended()) || !timed && done < total {
		if iv != nil && ctx.Err() != nil {
			return BWResult{}, endInfinite(ctx)
		}
		if tm != nil {
			if err := interrupted(ctx); err != nil {
				return BWResult{}, err
			}
		}
		n, err := iv.wait(ctx, func(ctx context.Context) (int, error) { return s.wait(ctx, p, s.RCQ, wcs) })
		switch {
		case err == nil:
		case errors.Is(err, errReportDue):
			iv.tick(uint64(done))
			continue
		case tm != nil && timeUp(err):
			continue // receives stay posted, as in perftest
		case p.Infinite && stoppedByCaller(ctx, err):
			return BWResult{}, nil
		case errors.Is(err, errPeerDone):
			if done == 0 {
				return BWResult{}, nil
			}
			break receiving
		default:
			return BWResult{}, fmt.Errorf("perftest: waiting for receives after %d: %w", done, err)
		}
		if done == 0 {
			start = clock()
			if tm != nil {
				tm.start()
			}
		}
		if first != nil {
			first()
			first = nil
		}
		for _, wc := range wcs[:n] {
			if wc.Status != cq.StatusSuccess {
				return BWResult{}, completionError(wc)
			}
			// The message came on QP j, in receive k of QP i's buffer:
			// the same QP unless an SRQ shares the receives out.
			i, k := splitWRID(wc.WRID)
			if i >= nq {
				return BWResult{}, fmt.Errorf("perftest: a receive completion for wr_id %#x, which was not posted", wc.WRID)
			}
			j := i
			if s.srq != nil {
				var ok bool
				if j, ok = s.qpIndex[wc.QPNum]; !ok {
					return BWResult{}, fmt.Errorf("perftest: a receive completion on QP %#x, not one of the test's", wc.QPNum)
				}
			}
			if p.WithImm && wc.Flags&cq.FlagWithImm == 0 {
				return BWResult{}, fmt.Errorf("%w: a receive completion without immediate data (%v)", ErrCheck, wc)
			}
			if p.Test == SendBW && wc.ByteLen != uint32(p.Size+s.grh) {
				return BWResult{}, fmt.Errorf("%w: received %d bytes, want %d", ErrCheck, wc.ByteLen, p.Size+s.grh)
			}
			if want != nil && p.Test == SendBW {
				m, ok := matchMessage(s.dst(i, s.slot(k)+s.grh, p.Size), want, j, came[j], p.unreliable())
				if !ok {
					return BWResult{}, fmt.Errorf("%w: message %d of QP %d differs", ErrCheck, came[j], j)
				}
				came[j] = m + 1
			}
			done++
			if tm != nil && tm.sampling() {
				counted++
			}
			// A receive goes back for each one used, or with
			// --recv_post_list a list once a list's worth of QP i's
			// buffer has been used.
			if unused[i]++; unused[i] >= list && (timed || next[i]+list <= p.Iters) {
				if err := postRecvList(s, p, i, next[i]); err != nil {
					return BWResult{}, err
				}
				next[i] += list
				unused[i] -= list
			}
		}
		if iv != nil {
			iv.tick(uint64(done))
		}
		if arrived != nil {
			arrived.Store(int64(done))
		}
	}
	if tm != nil {
		return tm.bwResult(p.Size, uint64(counted)), nil
	}
	return bwResult(p.Size, uint64(done), clock()-start, 0), nil
}

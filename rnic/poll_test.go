package rnic_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/udp"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire/bth"
)

// pollUntil busy polls dev until done reports true, failing t after
// timeout. It reports how many of its Polls found packets.
func pollUntil(t testing.TB, dev *rnic.Device, done func() bool) int {
	t.Helper()
	found := 0
	for deadline := time.Now().Add(10 * time.Second); !done(); {
		if dev.Poll() {
			found++
		}
		if time.Now().After(deadline) {
			t.Fatal("busy polling: still waiting after 10s")
		}
	}
	return found
}

// polledWC busy polls dev until c has a completion and returns it.
func polledWC(t testing.TB, dev *rnic.Device, c *cq.CQ) cq.WC {
	t.Helper()
	var wc [1]cq.WC
	pollUntil(t, dev, func() bool { n, _ := c.Poll(wc[:]); return n > 0 })
	return wc[0]
}

// TestPollCanPoll: a device on a kernel UDP link can be busy polled, one
// on the in-memory fabric cannot, and there Poll does nothing.
func TestPollCanPoll(t *testing.T) {
	a, _ := newPair(t, pairOpts{})
	if a.dev.CanPoll() || a.dev.Poll() {
		t.Fatal("a device on the in-memory fabric claims to busy poll")
	}
	u, _ := newPair(t, pairOpts{udp: true})
	if !u.dev.CanPoll() {
		t.Fatal("a device on a UDP link cannot busy poll")
	}
}

// TestPollWrite: a program that busy polls gets its WRITEs' completions
// from the ACKs it receives itself, and every byte lands. (A long grace
// keeps the receive goroutine out however slowly the test runs.)
func TestPollWrite(t *testing.T) {
	a, b := newPair(t, pairOpts{udp: true, mtu: qp.MTU4096, pollGrace: time.Minute})
	fill(a.buf, 1)
	a.dev.Poll() // from here on A's receive goroutine stands aside
	const n, size = 64, 16384
	for i := range n {
		a.postSend(t, writeWR(uint64(i), a, b, i*size, size))
	}
	var got []cq.WC
	found := pollUntil(t, a.dev, func() bool {
		var wc [16]cq.WC
		k, _ := a.scq.Poll(wc[:])
		got = append(got, wc[:k]...)
		return len(got) == n
	})
	for i, wc := range got {
		if wc.Status != cq.StatusSuccess || wc.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	if found == 0 {
		t.Fatal("no Poll found a packet: the ACKs all went to the receive goroutine")
	}
	if !bytes.Equal(a.buf[:n*size], b.read(t, n*size)) {
		t.Fatal("the written bytes differ")
	}
}

// read returns a copy of the first n bytes of s's buffer, once the peer's
// completions say every write has landed. Over a UDP link the race
// detector cannot see that ordering; the region's write count, which
// programs watching memory use (mr.MR.Writes), shows it.
func (s *side) read(t testing.TB, n int) []byte {
	t.Helper()
	s.mr.Writes()
	b := make([]byte, n)
	must(t, s.mr.ReadAt(s.addr(0), b))
	return b
}

// opsOf returns the opcodes of a batch of packets a device hands its
// link (each behind link.Headroom).
func opsOf(pkts [][]byte) []bth.Opcode {
	var ops []bth.Opcode
	for _, p := range pkts {
		op, _ := opOf(p[link.Headroom:])
		ops = append(ops, op)
	}
	return ops
}

// TestPollAnswerBeforeAck: a side that polls, sees the peer's WRITE land
// and answers with its own sends the answer first and the ACK it owes
// behind it, in the same batch, so the peer can go on at once.
//
// A round may find the ACK sent already, by a Run the device's worker
// makes for its own reasons (the first Run after Modify, a timer), and
// then A's WRITE goes alone, or the ACK just before it: that is allowed
// when the worker took a turn, but most rounds must show the answer and
// the ACK, and no round the ACK before the answer without the worker.
func TestPollAnswerBeforeAck(t *testing.T) {
	var mu sync.Mutex
	var sent [][]bth.Opcode // the batches A's device handed its link
	sends := func(pkts [][]byte) {
		ops := opsOf(pkts)
		mu.Lock()
		sent = append(sent, ops)
		mu.Unlock()
	}
	// A long grace: however slowly this test runs (-race, a loaded
	// machine), the device does not take back what A left pending.
	a, b := newPair(t, pairOpts{udp: true, sendsA: sends, pollGrace: time.Minute})
	// The worker's first Run after the QP reached RTS, out of the way.
	for deadline := time.Now().Add(5 * time.Second); a.dev.WorkerTurns() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	const rounds = 20
	answered := 0 // rounds that sent the WRITE with the ACK behind it
	for round := range rounds {
		seen := a.mr.Writes()
		a.dev.Poll() // A polls before B's WRITE arrives: the receive goroutine stands aside
		b.postSend(t, writeWR(uint64(round), b, a, 0, 8))
		pollUntil(t, a.dev, func() bool { return a.mr.Writes() != seen })
		mu.Lock()
		sent = sent[:0]
		mu.Unlock()
		turns, dups := a.dev.WorkerTurns(), a.stats().DuplicateRequest
		a.postSend(t, writeWR(uint64(round), a, b, 64, 8))
		status(t, []cq.WC{polledWC(t, a.dev, a.scq)}, cq.StatusSuccess)
		status(t, wait(t, b.scq, 1, 5*time.Second), cq.StatusSuccess)
		mu.Lock()
		got := slices.Clone(sent)
		mu.Unlock()
		want := [][]bth.Opcode{{bth.RCRDMAWriteOnly, bth.RCAcknowledge}}
		switch {
		case len(got) >= 1 && slices.Equal(got[0], want[0]):
			answered++
		case len(got) >= 1 && slices.Equal(got[0], want[0][:1]):
			// The ACK left before the reset: see above.
		case len(got) >= 2 && slices.Equal(got[0], want[0][1:]) && slices.Equal(got[1], want[0][:1]) && a.dev.WorkerTurns() != turns:
			// A worker's Run sent the ACK just before the WRITE: see above.
		case len(got) >= 2 && slices.Equal(got[0], want[0][1:]) && a.stats().DuplicateRequest != dups:
			// B's WRITE came again (B probed: on a loaded machine a
			// millisecond can pass before A answers), and A's receive path
			// answered the duplicate at once.
		default:
			t.Fatalf("round %d: A sent the batches %v after B's WRITE landed, want %v", round, got, want)
		}
	}
	if answered < rounds/2 {
		t.Fatalf("only %d of %d rounds sent the WRITE and then the ACK it owed", answered, rounds)
	}
}

// TestPollBackstop: a program that stops polling without Flush still has
// the ACKs its last Poll left pending sent, by the device.
func TestPollBackstop(t *testing.T) {
	a, b := newPair(t, pairOpts{udp: true})
	for round := range 5 {
		seen := a.mr.Writes()
		b.postSend(t, writeWR(uint64(round), b, a, 0, 8))
		pollUntil(t, a.dev, func() bool { return a.mr.Writes() != seen })
		// A goes quiet: no Poll, no Flush, no PostSend.
		status(t, wait(t, b.scq, 1, 5*time.Second), cq.StatusSuccess)
	}
}

// deferringLink is a UDP link that is a link.Deferrer: SendDeferred keeps
// copies until Flush or the next Send, and it counts each way out.
type deferringLink struct {
	*udp.Link
	mu       sync.Mutex
	queued   [][]byte
	sends    int // Send calls
	deferred int // packets SendDeferred queued
	flushed  int // packets that left queued, at Flush or behind a Send
}

func (l *deferringLink) SendDeferred(pkts [][]byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range pkts {
		l.queued = append(l.queued, bytes.Clone(p))
	}
	l.deferred += len(pkts)
	return nil
}

func (l *deferringLink) flushLocked() error {
	q := l.queued
	l.queued = nil
	l.flushed += len(q)
	if len(q) == 0 {
		return nil
	}
	return l.Link.Send(q)
}

func (l *deferringLink) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.flushLocked()
}

func (l *deferringLink) Send(pkts [][]byte) error { return l.send(pkts, l.Link.Send) }

func (l *deferringLink) SendJoined(pkts [][]byte) error { return l.send(pkts, l.Link.SendJoined) }

func (l *deferringLink) send(pkts [][]byte, send func([][]byte) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sends++
	if err := l.flushLocked(); err != nil {
		return err
	}
	return send(pkts)
}

func (l *deferringLink) counts() (sends, deferred, flushed, queued int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sends, l.deferred, l.flushed, len(l.queued)
}

// TestPollDefersSends: while a program busy polls, what it posts waits on
// a link.Deferrer's queue for its next Poll, which sends it; every WRITE
// completes and lands.
func TestPollDefersSends(t *testing.T) {
	dl := &deferringLink{}
	a, b := newPair(t, pairOpts{udp: true, deferA: dl, pollGrace: time.Minute})
	fill(a.buf, 3)
	a.dev.Poll() // from here on A's program polls
	sends, _, _, _ := dl.counts()
	const n, size = 16, 1024
	for i := range n {
		a.postSend(t, writeWR(uint64(i), a, b, i*size, size))
	}
	if s, deferred, flushed, queued := dl.counts(); s != sends || deferred != n || flushed != 0 || queued != n {
		t.Fatalf("after %d posts and no Poll: %d Sends, %d deferred, %d flushed, %d queued; want no Send and all %d queued",
			n, s-sends, deferred, flushed, queued, n)
	}
	a.dev.Poll()
	if _, _, flushed, queued := dl.counts(); flushed != n || queued != 0 {
		t.Fatalf("after a Poll: %d flushed, %d queued; want all %d flushed", flushed, queued, n)
	}
	var got int
	pollUntil(t, a.dev, func() bool {
		var wc [16]cq.WC
		k, _ := a.scq.Poll(wc[:])
		for _, c := range wc[:k] {
			if c.Status != cq.StatusSuccess {
				t.Fatalf("completion: %+v", c)
			}
		}
		got += k
		return got == n
	})
	if !bytes.Equal(a.buf[:n*size], b.read(t, n*size)) {
		t.Fatal("the written bytes differ")
	}
}

// TestPollDeferredBackstop: a program that polls once and then posts and
// stops, with neither Poll nor Flush, still has its WRITE sent, by the
// device's backstop; one that never polled sends at once.
func TestPollDeferredBackstop(t *testing.T) {
	dl := &deferringLink{}
	// No tail probe, and an ACK timeout of 1.07 s: a resend would drag
	// the queued WRITE out with it, where the backstop should send it a
	// grace after the Poll.
	a, b := newPair(t, pairOpts{udp: true, deferA: dl, noProbe: true, timeout: 18})
	a.postSend(t, writeWR(1, a, b, 0, 8))
	status(t, wait(t, a.scq, 1, 5*time.Second), cq.StatusSuccess)
	if _, deferred, _, _ := dl.counts(); deferred != 0 {
		t.Fatalf("a program that never polled had %d packets deferred", deferred)
	}
	a.dev.Poll()
	a.postSend(t, writeWR(2, a, b, 0, 8))
	// From here on nothing polls, flushes or drives the device (cq.Wait
	// would: it flushes before it waits), so only the backstop can send
	// the WRITE, a grace after the Poll.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, deferred, flushed, queued := dl.counts()
		if deferred > 0 && flushed == deferred && queued == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a program that polled then stopped: %d deferred, %d flushed, %d queued after 5 s; want some deferred, all flushed", deferred, flushed, queued)
		}
		time.Sleep(time.Millisecond)
	}
	var wc [1]cq.WC
	for {
		if n, _ := a.scq.Poll(wc[:]); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the WRITE the backstop sent did not complete")
		}
		time.Sleep(time.Millisecond)
	}
	status(t, wc[:], cq.StatusSuccess)
	if st := a.stats(); st.RetransmitTimeouts != 0 {
		t.Fatalf("the WRITE left at the ACK timeout's resend (%d timeouts), not a grace after the Poll", st.RetransmitTimeouts)
	}
}

// TestPollDestroy: destroying a QP right after Poll handled a request
// still sends the ACK the request earned.
func TestPollDestroy(t *testing.T) {
	a, b := newPair(t, pairOpts{udp: true})
	seen := a.mr.Writes()
	b.postSend(t, writeWR(1, b, a, 0, 8))
	pollUntil(t, a.dev, func() bool { return a.mr.Writes() != seen })
	must(t, a.qp.Destroy())
	status(t, wait(t, b.scq, 1, 5*time.Second), cq.StatusSuccess)
}

// TestPollConcurrent: several goroutines busy polling one device, beside
// its receive goroutine, lose nothing and break nothing (run it with
// -race).
func TestPollConcurrent(t *testing.T) {
	a, b := newPair(t, pairOpts{udp: true, mtu: qp.MTU4096})
	fill(a.buf, 2)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if !b.dev.Poll() {
					runtime.Gosched() // three pollers on two CPUs: let the sender run
				}
			}
		}()
	}
	const n, size = 256, 4096
	for i := range n {
		a.postSend(t, writeWR(uint64(i), a, b, i*size, size))
	}
	wcs := wait(t, a.scq, n, 10*time.Second)
	stop.Store(true)
	wg.Wait()
	b.dev.Flush()
	for i, wc := range wcs {
		if wc.Status != cq.StatusSuccess || wc.WRID != uint64(i) {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	if !bytes.Equal(a.buf[:n*size], b.read(t, n*size)) {
		t.Fatal("the written bytes differ")
	}
}

// TestWaitDrives: two sides ping-pong SENDs over the udp link, each
// sleeping in CQ.Wait for the peer's message; the waiters run their
// devices' receive paths themselves (Drive), and nothing is lost on the
// way between them and the receive goroutines.
func TestWaitDrives(t *testing.T) {
	a, b := newPair(t, pairOpts{udp: true})
	const rounds = 200
	errc := make(chan error, 1)
	go func() {
		for i := range rounds {
			wc := wait(t, b.rcq, 1, 5*time.Second)
			if wc[0].Status != cq.StatusSuccess {
				errc <- fmt.Errorf("B's receive %d: %v", i, wc[0].Status)
				return
			}
			b.postRecv(t, qp.RecvWR{WRID: uint64(i + 1), SGList: []qp.SGE{b.sge(0, 8)}})
			b.postSend(t, qp.SendWR{WRID: uint64(i), Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: []qp.SGE{b.sge(64, 8)}})
			wait(t, b.scq, 1, 5*time.Second)
		}
		errc <- nil
	}()
	b.postRecv(t, qp.RecvWR{WRID: 0, SGList: []qp.SGE{b.sge(0, 8)}})
	for i := range rounds {
		a.postRecv(t, qp.RecvWR{WRID: uint64(i), SGList: []qp.SGE{a.sge(0, 8)}})
		a.postSend(t, qp.SendWR{WRID: uint64(i), Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: []qp.SGE{a.sge(64, 8)}})
		status(t, wait(t, a.rcq, 1, 5*time.Second), cq.StatusSuccess)
		status(t, wait(t, a.scq, 1, 5*time.Second), cq.StatusSuccess)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if a.dev.Drives() == 0 || b.dev.Drives() == 0 {
		t.Fatalf("the waiters drove %d and %d batches, want some each", a.dev.Drives(), b.dev.Drives())
	}
}

// TestCatchUp: what the timer worker reads when its timers fire late
// (after a stall, before it runs them) is processed as any batch is. While
// a program that polled has gone quiet, nobody else reads A's link; the
// ACK of A's WRITE waits there until a catch-up reads it, and the WRITE
// completes.
func TestCatchUp(t *testing.T) {
	a, b := newPair(t, pairOpts{udp: true, pollGrace: time.Minute})
	a.dev.Poll() // from here on A's receive goroutine stands aside
	a.postSend(t, writeWR(7, a, b, 0, 8))
	var wc [1]cq.WC
	for deadline := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
		if n, _ := a.scq.Poll(wc[:]); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the WRITE did not complete in 10s of catch-ups")
		}
		a.dev.CatchUp()
	}
	status(t, wc[:], cq.StatusSuccess)
	rx := a.dev.Counters().RxBatches
	if rx.CaughtUp == 0 || rx.Own != rx.CaughtUp || rx.Polled != 0 {
		t.Fatalf("A's batches: %+v; want all caught up", rx)
	}
}

// TestErrSendsOwedAck: a program that polls, sees the peer's SEND arrive
// and moves its QP to ERR at once (rdma_disconnect does) still sends the
// ACK it owed, so the peer's SEND completes successfully rather than
// waiting for an ACK and being flushed when the disconnect comes.
func TestErrSendsOwedAck(t *testing.T) {
	a, b := newPair(t, pairOpts{udp: true, pollGrace: time.Minute})
	a.dev.Poll() // A polls: the ACK for B's SEND is owed, not sent
	a.postRecv(t, qp.RecvWR{WRID: 7, SGList: []qp.SGE{a.sge(0, 64)}})
	b.postSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: []qp.SGE{b.sge(0, 16)}})
	if wc := polledWC(t, a.dev, a.rcq); wc.Status != cq.StatusSuccess {
		t.Fatalf("receive: %v", wc)
	}
	must(t, a.qp.Modify(&qp.Attr{State: qp.StateErr}, qp.AttrState))
	status(t, wait(t, b.scq, 1, 5*time.Second), cq.StatusSuccess)
}

// cheapPollLink is a UDP link that says its polls are cheap
// (link.FlagCheapPoll), as the xdp link's are, and counts the receive
// goroutine's sleeps in WaitReceive.
type cheapPollLink struct {
	*udp.Link
	waits atomic.Int64
}

func (l *cheapPollLink) Flags() link.Flags { return l.Link.Flags() | link.FlagCheapPoll }

func (l *cheapPollLink) WaitReceive() error {
	l.waits.Add(1)
	return l.Link.WaitReceive()
}

// TestBusyPoll: on a link whose polls are cheap, the receive goroutine of
// a device whose program does not poll keeps polling after a batch
// (Config.BusyPoll), so that a WRITE arriving after a quiet spell is
// taken with no sleep in the kernel, and is counted as busy polled;
// with BusyPoll negative it sleeps and is woken.
func TestBusyPoll(t *testing.T) {
	for _, c := range []struct {
		name string
		busy time.Duration
	}{{"on", time.Minute}, {"off", -1}} {
		t.Run(c.name, func(t *testing.T) {
			cl := &cheapPollLink{}
			a, b := newPair(t, pairOpts{udp: true, cheapPollB: cl, busyPoll: c.busy})
			for i := range 2 {
				time.Sleep(5 * time.Millisecond) // B's device quiet
				a.postSend(t, writeWR(uint64(i), a, b, 0, 8))
				status(t, wait(t, a.scq, 1, 5*time.Second), cq.StatusSuccess)
			}
			got := b.dev.Counters().RxBatches
			waits := cl.waits.Load()
			switch {
			case c.busy > 0 && (waits != 0 || got.Own != 0 || got.BusyPolled < 2):
				t.Fatalf("busy polling: %d sleeps in WaitReceive, %d batches woken for, %d busy polled; want none, none and both WRITEs'",
					waits, got.Own, got.BusyPolled)
			case c.busy < 0 && (waits == 0 || got.Own < 2 || got.BusyPolled != 0):
				t.Fatalf("no busy polling: %d sleeps in WaitReceive, %d batches woken for, %d busy polled; want sleeps, both WRITEs' and none",
					waits, got.Own, got.BusyPolled)
			}
		})
	}
}

// TestBusyPollYields: a program that polls takes the link from a receive
// goroutine busy polling it: every batch after its first Poll is its own.
func TestBusyPollYields(t *testing.T) {
	cl := &cheapPollLink{}
	a, b := newPair(t, pairOpts{udp: true, cheapPollB: cl, busyPoll: time.Minute, pollGrace: time.Minute})
	b.dev.Poll() // from here on B's program polls
	time.Sleep(5 * time.Millisecond)
	before := b.dev.Counters().RxBatches
	for i := range 4 {
		seen := b.mr.Writes()
		a.postSend(t, writeWR(uint64(i), a, b, 0, 8))
		pollUntil(t, b.dev, func() bool { return b.mr.Writes() != seen })
	}
	b.dev.Flush()
	status(t, wait(t, a.scq, 4, 5*time.Second), cq.StatusSuccess, cq.StatusSuccess, cq.StatusSuccess, cq.StatusSuccess)
	got := b.dev.Counters().RxBatches
	if got.BusyPolled != before.BusyPolled || got.Own != before.Own || got.Polled-before.Polled < 4 {
		t.Fatalf("while the program polled: %d batches busy polled by the device, %d woken for, %d polled by the program; want 0, 0 and 4 or more",
			got.BusyPolled-before.BusyPolled, got.Own-before.Own, got.Polled-before.Polled)
	}
}

// flagsLink is a link that only says what it can do.
type flagsLink struct {
	link.Link
	flags link.Flags
}

func (l flagsLink) Flags() link.Flags { return l.flags }

// TestBusyPollFor: busy polling is for links whose polls are cheap, on by
// default only where Go has two CPUs or more, and as long as asked when
// asked.
func TestBusyPollFor(t *testing.T) {
	cheap, plain := flagsLink{flags: link.FlagCheapPoll}, flagsLink{flags: link.FlagNoIPv4ICRC}
	for _, c := range []struct {
		link  link.Link
		busy  time.Duration
		procs int
		want  time.Duration
	}{
		{cheap, 0, 2, rnic.DefaultBusyPoll},
		{cheap, 0, 1, 0},
		{cheap, 50 * time.Microsecond, 1, 50 * time.Microsecond},
		{cheap, -1, 8, 0},
		{plain, 0, 8, 0},
		{plain, time.Millisecond, 8, 0},
	} {
		if got := rnic.BusyPollFor(rnic.Config{Link: c.link, BusyPoll: c.busy}, c.procs); got != c.want {
			t.Errorf("flags %b, BusyPoll %v, %d CPUs: %v, want %v", c.link.Flags(), c.busy, c.procs, got, c.want)
		}
	}
}

// waitWatchLink is a UDP link that calls watch, once set, before each of
// the receive goroutine's sleeps in WaitReceive.
type waitWatchLink struct {
	*udp.Link
	watch atomic.Pointer[func()]
}

func (l *waitWatchLink) WaitReceive() error {
	if f := l.watch.Load(); f != nil {
		(*f)()
	}
	return l.Link.WaitReceive()
}

// TestOnePWorkBeforeWait: where Go has one P, the receive goroutine lets
// what its batch made ready run before it sleeps in the link. A READ's
// responses go out in bursts, the first from the batch that brought the
// request and the others from the worker; a receive goroutine that went
// straight back to poll(2) would hold the only P there, and the worker
// would send them only once the runtime took the P back.
func TestOnePWorkBeforeWait(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	wl := &waitWatchLink{}
	a, b := newPair(t, pairOpts{udp: true, watchB: wl})
	var waits, early atomic.Int64
	watch := func() {
		waits.Add(1)
		if b.dev.WorkReady() > 0 {
			early.Add(1)
		}
	}
	wl.watch.Store(&watch)
	for i := range 4 {
		a.postSend(t, readWR(uint64(i), a, b, 0, 256<<10))
		status(t, wait(t, a.scq, 1, 10*time.Second), cq.StatusSuccess)
	}
	if waits.Load() == 0 {
		t.Fatal("B's receive goroutine never slept in WaitReceive")
	}
	if n := early.Load(); n != 0 {
		t.Fatalf("B's receive goroutine slept in WaitReceive %d times of %d with work ready for the worker", n, waits.Load())
	}
}

// joinWatchLink is a UDP link (a link.Joiner) that records the opcodes of
// each batch the device hands it, and which way: Send or SendJoined.
type joinWatchLink struct {
	*udp.Link
	mu            sync.Mutex
	plain, joined [][]bth.Opcode
}

func (l *joinWatchLink) record(to *[][]bth.Opcode, pkts [][]byte) {
	ops := opsOf(pkts)
	l.mu.Lock()
	*to = append(*to, ops)
	l.mu.Unlock()
}

func (l *joinWatchLink) Send(pkts [][]byte) error {
	l.record(&l.plain, pkts)
	return l.Link.Send(pkts)
}

func (l *joinWatchLink) SendJoined(pkts [][]byte) error {
	l.record(&l.joined, pkts)
	return l.Link.SendJoined(pkts)
}

// batches returns and forgets what the link recorded.
func (l *joinWatchLink) batches() (plain, joined [][]bth.Opcode) {
	l.mu.Lock()
	defer l.mu.Unlock()
	plain, joined = l.plain, l.joined
	l.plain, l.joined = nil, nil
	return plain, joined
}

// TestJoinWhileAsleep: a program that sleeps on its CQ answers a SEND with
// its own, and the ACK it owes goes behind, in one batch the device hands
// the link to join (link.Joiner), and the udp link sends as one datagram;
// a program that busy polls has the same batch sent as Send has it, two
// datagrams, so that its busy-polling peer sees the answer first.
func TestJoinWhileAsleep(t *testing.T) {
	jl := &joinWatchLink{}
	a, b := newPair(t, pairOpts{udp: true, joinA: jl, pollGrace: time.Minute})
	want := []bth.Opcode{bth.RCSendOnly, bth.RCAcknowledge}
	// round has A wait for a SEND from B with await, answer it, and B take
	// the answer; it returns A's batches from the answer on. A waits
	// first, so that its waiter, not its receive goroutine, takes B's
	// SEND, and the ACK is left owed for the answer to take along.
	round := func(i int, await func() cq.WC) (plain, joined [][]bth.Opcode) {
		t.Helper()
		a.postRecv(t, qp.RecvWR{WRID: uint64(i), SGList: []qp.SGE{a.sge(0, 8)}})
		b.postRecv(t, qp.RecvWR{WRID: uint64(i), SGList: []qp.SGE{b.sge(0, 8)}})
		got := make(chan cq.WC, 1)
		go func() { got <- await() }()
		time.Sleep(time.Millisecond)
		b.postSend(t, qp.SendWR{WRID: uint64(i), Opcode: qp.WRSend, SGList: []qp.SGE{b.sge(64, 8)}})
		status(t, []cq.WC{<-got}, cq.StatusSuccess)
		jl.batches()
		a.postSend(t, qp.SendWR{WRID: uint64(i), Opcode: qp.WRSend, SGList: []qp.SGE{a.sge(64, 8)}})
		status(t, wait(t, b.rcq, 1, 5*time.Second), cq.StatusSuccess)
		return jl.batches()
	}
	const rounds = 10
	joined := 0
	runs := jl.Stats().Runs
	for i := range rounds {
		_, j := round(i, func() cq.WC {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			wc := []cq.WC{{Status: cq.StatusGeneralErr}} // if nothing came
			a.rcq.Wait(ctx, wc)
			return wc[0]
		})
		if len(j) > 0 && slices.Equal(j[0], want) {
			joined++
		}
	}
	// A worker's turn or the backstop can send the ACK before the answer
	// in a round (TestPollAnswerBeforeAck), and a slow waiter can leave
	// B's SEND to the receive goroutine, which answers it at once; most
	// rounds must join.
	if joined < rounds/2 {
		t.Fatalf("asleep: %d of %d rounds handed the link the answer and the ACK to join", joined, rounds)
	}
	if got := jl.Stats().Runs - runs; got < uint64(joined) {
		t.Fatalf("asleep: the link sent %d joined datagrams for %d joined batches", got, joined)
	}
	a.dev.Poll() // from here on A's program busy polls
	for i := range rounds {
		plain, j := round(rounds+i, func() cq.WC {
			wc := []cq.WC{{Status: cq.StatusGeneralErr}} // if nothing came
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
				a.dev.Poll()
				if n, _ := a.rcq.Poll(wc); n > 0 {
					break
				}
			}
			return wc[0]
		})
		if len(j) != 0 {
			t.Fatalf("busy polling: round %d handed the link %v to join (and %v to send)", i, j, plain)
		}
	}
}

// wakeCountLink counts the device's WakeReceive calls: the kicks that end
// a waiter's Drive for something other than a packet.
type wakeCountLink struct {
	*udp.Link
	wakes atomic.Int64
}

func (l *wakeCountLink) WakeReceive() {
	l.wakes.Add(1)
	l.Link.WakeReceive()
}

// TestDriveWoken checks, with Drive's own timeout out of reach, that a
// waiter in Drive is woken by a completion no packet brings (its QP moved
// to the error state by another goroutine flushes a receive) and by its
// context's end, and that the packets it processes itself, and the
// completions they push, kick nothing.
func TestDriveWoken(t *testing.T) {
	rnic.SetDriveWait(t, time.Hour)
	wl := &wakeCountLink{}
	a, b := newPair(t, pairOpts{udp: true, wakeA: wl})
	const rounds = 10
	for i := range rounds {
		a.postRecv(t, qp.RecvWR{WRID: uint64(i), SGList: []qp.SGE{a.sge(0, 8)}})
		got := make(chan []cq.WC, 1)
		go func() { got <- wait(t, a.rcq, 1, 10*time.Second) }()
		time.Sleep(time.Millisecond) // A waits first, in Drive
		b.postSend(t, qp.SendWR{WRID: uint64(i), Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: []qp.SGE{b.sge(64, 8)}})
		status(t, <-got, cq.StatusSuccess)
		status(t, wait(t, b.scq, 1, 10*time.Second), cq.StatusSuccess) // B's Drive takes A's ACK
	}
	if n := wl.wakes.Load(); n != 0 {
		t.Fatalf("%d kicks in %d rounds whose completions the waiter's own Drive pushed", n, rounds)
	}
	drives := a.dev.Drives()
	if drives == 0 {
		t.Fatal("no batch was processed in a waiter's Drive")
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		var wc [1]cq.WC
		_, err := a.rcq.Wait(ctx, wc[:])
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait after its context's end = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait went on after its context's end")
	}

	a.postRecv(t, qp.RecvWR{WRID: 99, SGList: []qp.SGE{a.sge(0, 8)}})
	go func() {
		var wc [1]cq.WC
		_, err := a.rcq.Wait(context.Background(), wc[:])
		if err == nil && (wc[0].WRID != 99 || wc[0].Status != cq.StatusWRFlushErr) {
			err = fmt.Errorf("completion %+v, want WR 99 flushed", wc[0])
		}
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := a.qp.Modify(&qp.Attr{State: qp.StateErr}, qp.AttrState); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a flushed receive's completion did not wake the waiter in Drive")
	}
	if wl.wakes.Load() == 0 {
		t.Fatal("no kick for the completions no packet brought")
	}
}

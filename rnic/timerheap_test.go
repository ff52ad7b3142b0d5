package rnic

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/internal/rc"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire/bth"
)

func TestTimerHeapOrder(t *testing.T) {
	var h timerHeap
	r := rand.New(rand.NewPCG(3, 4))
	var want []int64
	for round := range 50 {
		for range r.IntN(40) {
			at := r.Int64N(1000) + 1
			h.push(timerItem{at: at})
			want = append(want, at)
		}
		slices.Sort(want)
		for range r.IntN(len(want) + 1) {
			if got := h.pop().at; got != want[0] {
				t.Fatalf("round %d: popped %d, want %d", round, got, want[0])
			}
			want = want[1:]
		}
		if h.next() != append(want, 1<<63-1)[0] {
			t.Fatalf("round %d: next %d, want %v", round, h.next(), want)
		}
	}
}

// TestWorkerTimers: a QP's timer earlier than the worker's wake time kicks
// the worker, one later does not; a later time for a QP already filed
// files nothing, an earlier one supersedes its item; the worker drops the
// items of QPs with no timer armed, and of destroyed QPs, and sleeps until
// the earliest item left.
func TestWorkerTimers(t *testing.T) {
	d := &Device{clock: monotime.NewClock(), mrs: mr.NewTable()}
	w := newWorker(d)
	port := &port{worker: w, mrs: d.mrs, clock: d.clock, transmitter: &d.tx}
	newQP := func(num bth.QPN) *QP {
		c, err := cq.New(4)
		if err != nil {
			t.Fatal(err)
		}
		qport := &qpPort{port: port, timer: new(timerEntry)}
		q, err := rc.New(qport, num, qp.InitAttr{Type: qp.TypeRC, PD: d.mrs.AllocPD(), SendCQ: c, RecvCQ: c,
			Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1}})
		if err != nil {
			t.Fatal(err)
		}
		dq := &QP{e: q, rcq: q, dev: d, w: w, timer: qport.timer}
		w.add(dq)
		return dq
	}
	kicked := func() bool {
		select {
		case <-w.kick:
			return true
		default:
			return false
		}
	}
	if got := w.sleep(); got != time.Hour {
		t.Fatalf("with no timer armed the worker sleeps %v, want an hour", got)
	}
	a, b := newQP(0x11), newQP(0x12)
	now := d.clock.Now()
	w.arm(a.timer, int64(now.Add(time.Second)))
	if !kicked() {
		t.Error("the first timer armed did not kick the worker")
	}
	w.sleep()
	w.arm(b.timer, int64(now.Add(2*time.Second)))
	if kicked() {
		t.Error("a timer later than the worker's wake time kicked it")
	}
	w.arm(a.timer, int64(now.Add(3*time.Second)))
	if len(w.timers) != 2 {
		t.Errorf("a QP's later time filed a new item: %d items, want 2", len(w.timers))
	}
	w.arm(b.timer, int64(now.Add(500*time.Millisecond)))
	if k := kicked(); !k || len(w.timers) != 3 {
		t.Errorf("a QP's earlier time: kicked %v, %d items; want a kick and 3 items", k, len(w.timers))
	}
	if got := w.sleep(); got > 500*time.Millisecond {
		t.Errorf("the worker sleeps %v, past the earliest timer (500ms from the start)", got)
	}

	w.remove(a)
	w.arm(a.timer, int64(now.Add(100*time.Millisecond)))
	if k := kicked(); k || len(w.timers) != 3 {
		t.Errorf("a destroyed QP's timer: kicked %v, %d items; want no kick and 3 items", k, len(w.timers))
	}
	// Neither QP has a timer armed (Deadline is zero): their items come up
	// and are dropped, the superseded one with them.
	w.runTimers(now.Add(time.Second))
	if len(w.timers) != 1 || w.timers[0].e.q != rc.Runner(b.e) {
		t.Fatalf("after a second, %d items left, want b's 2s one", len(w.timers))
	}
	w.runTimers(now.Add(2 * time.Second))
	if len(w.timers) != 0 || w.sleep() != time.Hour {
		t.Fatalf("after two seconds, %d items left, want none", len(w.timers))
	}
	w.arm(b.timer, int64(now.Add(4*time.Second)))
	if k := kicked(); !k || len(w.timers) != 1 {
		t.Errorf("a QP whose item was dropped arms again: kicked %v, %d items; want a kick and 1 item", k, len(w.timers))
	}
}

// stubRunner is a QP's engine as the worker sees it: a deadline, whether
// running then would retransmit, and how often it ran.
type stubRunner struct {
	deadline monotime.Time
	resend   bool
	runs     int
}

func (r *stubRunner) Run()                    { r.runs++; r.deadline = 0 }
func (r *stubRunner) Deadline() monotime.Time { return r.deadline }
func (r *stubRunner) Resends(now monotime.Time) bool {
	return r.resend && !r.deadline.IsZero() && !now.Before(r.deadline)
}

// answeringPoller is a link.Poller on which the answer a runner's timer
// waits for is waiting: reading the link (TryReceive) disarms the timer,
// as the ACK a tail-loss probe waits for does.
type answeringPoller struct {
	r     *stubRunner
	tries int
}

func (p *answeringPoller) WaitReceive() error { return nil }
func (p *answeringPoller) TryReceive([][]byte, []int) (int, error) {
	p.tries++
	p.r.deadline = 0
	return 0, nil
}

// TestLateTimersReadFirst: a timer that fires more than stallLate after
// it fell due (the device was stopped), or one that would retransmit,
// reads the link first, once, and does not fire if what it waited for
// was there; any other on time, or as late as Go's timers run on a busy
// machine, fires without reading; a timer item the QP has moved later,
// or disarmed, reads nothing.
func TestLateTimersReadFirst(t *testing.T) {
	d := &Device{clock: monotime.NewClock(), mrs: mr.NewTable()}
	w := newWorker(d)
	r := &stubRunner{}
	p := &answeringPoller{r: r}
	d.rx.poller = p
	e := &timerEntry{q: r}
	for _, tc := range []struct {
		late        time.Duration
		resend      bool
		reads, runs int
	}{
		{0, false, 0, 1},
		{stallLate / 2, false, 0, 1},
		{stallLate + time.Microsecond, false, 1, 0},
		{time.Second, false, 1, 0},
		{0, true, 1, 0},
		{stallLate / 2, true, 1, 0},
		{time.Second, true, 1, 0},
	} {
		p.tries, r.runs, r.resend = 0, 0, tc.resend
		r.deadline = d.clock.Now().Add(time.Hour) // far from the real clock: only runTimers's now matters
		w.arm(e, int64(r.deadline))
		w.runTimers(r.deadline.Add(tc.late))
		if p.tries != tc.reads || r.runs != tc.runs {
			t.Errorf("a timer run %v after it fell due (retransmitting %v): the link was read %d times and the QP ran %d; want %d and %d",
				tc.late, tc.resend, p.tries, r.runs, tc.reads, tc.runs)
		}
		if len(w.timers) != 0 {
			t.Fatalf("%d timer items left after the turn", len(w.timers))
		}
	}

	// An item the QP's deadline has since moved past, and one it has
	// disarmed: a late turn reads nothing, and files the first again.
	p.tries, r.runs = 0, 0
	at := d.clock.Now().Add(time.Hour)
	w.arm(e, int64(at))
	r.deadline = at.Add(2 * time.Second)
	w.runTimers(at.Add(time.Second))
	if p.tries != 0 || r.runs != 0 || len(w.timers) != 1 {
		t.Errorf("an item moved later: %d reads, %d runs, %d items; want 0, 0 and 1", p.tries, r.runs, len(w.timers))
	}
	r.deadline = 0
	w.runTimers(at.Add(3 * time.Second))
	if p.tries != 0 || r.runs != 0 || len(w.timers) != 0 {
		t.Errorf("a disarmed timer: %d reads, %d runs, %d items; want none", p.tries, r.runs, len(w.timers))
	}
}

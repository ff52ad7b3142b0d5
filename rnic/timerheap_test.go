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
		q, err := rc.New(port, num, qp.InitAttr{Type: qp.TypeRC, PD: d.mrs.AllocPD(), SendCQ: c, RecvCQ: c,
			Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1}})
		if err != nil {
			t.Fatal(err)
		}
		dq := &QP{e: q, dev: d, w: w}
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
	w.Timer(a.e, now.Add(time.Second))
	if !kicked() {
		t.Error("the first timer armed did not kick the worker")
	}
	w.sleep()
	w.Timer(b.e, now.Add(2*time.Second))
	if kicked() {
		t.Error("a timer later than the worker's wake time kicked it")
	}
	w.Timer(a.e, now.Add(3*time.Second))
	if len(w.timers) != 2 {
		t.Errorf("a QP's later time filed a new item: %d items, want 2", len(w.timers))
	}
	w.Timer(b.e, now.Add(500*time.Millisecond))
	if k := kicked(); !k || len(w.timers) != 3 {
		t.Errorf("a QP's earlier time: kicked %v, %d items; want a kick and 3 items", k, len(w.timers))
	}
	if got := w.sleep(); got > 500*time.Millisecond {
		t.Errorf("the worker sleeps %v, past the earliest timer (500ms from the start)", got)
	}

	w.remove(a)
	w.Timer(a.e, now.Add(100*time.Millisecond))
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
	w.Timer(b.e, now.Add(4*time.Second))
	if k := kicked(); !k || len(w.timers) != 1 {
		t.Errorf("a QP whose item was dropped arms again: kicked %v, %d items; want a kick and 1 item", k, len(w.timers))
	}
}

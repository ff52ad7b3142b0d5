package rc

import (
	"math/rand/v2"
	"testing"

	"github.com/gorxe/gorxe/qp"
)

// TestQueuesGrow: the work queues grow as they fill, wherever head has
// wrapped to, up to the capacity asked and no further; the live WQEs keep
// their order and their addresses; and a queue that never holds more than
// a few WQEs stays a few slots long.
func TestQueuesGrow(t *testing.T) {
	const limit = 13
	var sq sendQueue
	var rq recvQueue
	sq.init(qp.Cap{MaxSendWR: limit, MaxSendSGE: 2})
	rq.init(qp.Cap{MaxRecvWR: limit, MaxRecvSGE: 2})
	if len(sq.slots) != 0 || len(rq.slots) != 0 {
		t.Fatalf("new queues hold %d and %d slots, want none", len(sq.slots), len(rq.slots))
	}
	r := rand.New(rand.NewPCG(1, 2))
	var next uint64      // the next WRID to post
	var live []*sendWQE  // the send WQEs queued, oldest first
	var liveR []*recvWQE // the receive WQEs queued
	fulls := 0           // steps that ended with the queues full
	for step := range 2000 {
		most := limit
		if step < 500 {
			most = 3 // a while with few outstanding, first
		}
		if r.IntN(2) == 0 && len(live) < most {
			if sq.full() || rq.full() {
				t.Fatalf("step %d: full with %d of %d queued", step, len(live), limit)
			}
			w, v := sq.free(), rq.free()
			w.wr.WRID, v.wrid = next, next
			if cap(w.sges) != 2 || cap(v.sges) != 2 {
				t.Fatalf("step %d: SGE capacity %d and %d, want 2", step, cap(w.sges), cap(v.sges))
			}
			sq.tail++
			rq.tail++
			next++
			live, liveR = append(live, w), append(liveR, v)
		} else if len(live) > 0 {
			sq.head++
			rq.head++
			live, liveR = live[1:], liveR[1:]
		}
		for k := range live {
			i := sq.head + uint64(k)
			if sq.at(i) != live[k] || rq.at(i) != liveR[k] {
				t.Fatalf("step %d: WQE %d of %d moved or lost", step, k, len(live))
			}
		}
		if len(live) == limit {
			if !sq.full() || !rq.full() {
				t.Fatalf("step %d: %d queued and not full", step, limit)
			}
			fulls++
		}
		if step == 499 && (len(sq.slots) != 4 || len(rq.slots) != 4) {
			t.Fatalf("with at most 3 outstanding the queues hold %d and %d slots, want 4", len(sq.slots), len(rq.slots))
		}
		if len(sq.slots) > limit || len(rq.slots) > limit {
			t.Fatalf("step %d: %d and %d slots, more than the %d asked", step, len(sq.slots), len(rq.slots), limit)
		}
	}
	if fulls == 0 {
		t.Error("the queues were never full")
	}
	if len(sq.slots) != limit {
		t.Errorf("after filling, the send queue holds %d slots, want %d", len(sq.slots), limit)
	}
}

package rnic_test

import (
	"context"
	"testing"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/qp"
)

// TestPostAllocatesNothing: posting work requests built on the caller's
// stack, one at a time, as a C program fills its ibv_send_wr and
// ibv_recv_wr, allocates nothing, and neither does the SEND that follows
// through both devices to its completions. The verbs call the engines
// directly: through an interface, escape analysis must assume the engine
// keeps the slice, and every post allocated it on the heap (write_lat -e
// spent two allocations a round trip there, make bench-instr).
func TestPostAllocatesNothing(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	send := qp.SendWR{WRID: 1, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: []qp.SGE{a.sge(64, 8)}}
	recv := qp.RecvWR{WRID: 2, SGList: []qp.SGE{b.sge(0, 8)}}
	ctx := context.Background()
	var wc [1]cq.WC
	round := func() {
		if _, err := b.qp.PostRecv([]qp.RecvWR{recv}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.qp.PostSend([]qp.SendWR{send}); err != nil {
			t.Fatal(err)
		}
		for _, c := range []*cq.CQ{a.scq, b.rcq} {
			if _, err := c.Wait(ctx, wc[:]); err != nil {
				t.Fatal(err)
			}
			if wc[0].Status != cq.StatusSuccess {
				t.Fatalf("completion %+v", wc[0])
			}
		}
	}
	for range 100 { // warm up: the queues grow to their working size
		round()
	}
	if n := testing.AllocsPerRun(500, round); n > 0.1 {
		t.Fatalf("%.2f allocations a round of PostRecv, PostSend and their completions, want none", n)
	}
}

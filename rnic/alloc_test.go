package rnic_test

import (
	"testing"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/qp"
)

// TestPostAllocatesNothing: posting work requests built on the caller's
// stack, one at a time, as a C program fills its ibv_send_wr and
// ibv_recv_wr, allocates nothing. The verbs call the engines directly:
// through an interface, escape analysis must assume the engine keeps the
// slice, and every post allocated it on the heap (write_lat -e spent two
// allocations a round trip there, make bench-instr).
//
// The QP is in ERR, where a post completes at once with a flush error:
// the posts' own path, without the packets, whose buffers come from a
// sync.Pool that the race detector empties at random.
func TestPostAllocatesNothing(t *testing.T) {
	a, _ := newPair(t, pairOpts{})
	if err := a.qp.Modify(&qp.Attr{State: qp.StateErr}, qp.AttrState); err != nil {
		t.Fatal(err)
	}
	send := qp.SendWR{WRID: 1, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: []qp.SGE{a.sge(64, 8)}}
	recv := qp.RecvWR{WRID: 2, SGList: []qp.SGE{a.sge(0, 8)}}
	var wc [1]cq.WC
	round := func() {
		if _, err := a.qp.PostRecv([]qp.RecvWR{recv}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.qp.PostSend([]qp.SendWR{send}); err != nil {
			t.Fatal(err)
		}
		for _, c := range []*cq.CQ{a.rcq, a.scq} {
			if n, err := c.Poll(wc[:]); n != 1 || err != nil || wc[0].Status != cq.StatusWRFlushErr {
				t.Fatalf("Poll = %d, %v, %+v; want one flushed completion", n, err, wc[0])
			}
		}
	}
	for range 100 { // warm up: the queues grow to their working size
		round()
	}
	if n := testing.AllocsPerRun(1000, round); n != 0 {
		t.Fatalf("%v allocations a PostRecv and PostSend (and their flushed completions), want none", n)
	}
}

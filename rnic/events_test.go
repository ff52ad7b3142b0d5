package rnic_test

import (
	"context"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// nextEvent takes the device's next asynchronous event, failing the test
// if none comes within a few seconds.
func nextEvent(t *testing.T, d *rnic.Device) rnic.AsyncEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := d.GetAsyncEvent(ctx)
	if err != nil {
		t.Fatalf("no asynchronous event: %v", err)
	}
	return ev
}

// noEvent fails the test if the device has an event queued.
func noEvent(t *testing.T, d *rnic.Device) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if ev, err := d.GetAsyncEvent(ctx); err == nil {
		t.Fatalf("an unexpected event: %v", ev.Type)
	}
}

// TestAccessErrEvent: an RDMA WRITE or READ with an R_Key the responder
// does not know fails the requester's WR with REM_ACCESS_ERR, and the
// responder's device reports IBV_EVENT_QP_ACCESS_ERR for its QP, once
// (C9-222.1.1, as rxe); a WRITE with immediate, whose error a receive
// completion reports, raises none.
func TestAccessErrEvent(t *testing.T) {
	for _, c := range []struct {
		name  string
		op    qp.WROpcode
		event bool
	}{
		{"WRITE", qp.WRRDMAWrite, true},
		{"READ", qp.WRRDMARead, true},
		{"WRITE with immediate", qp.WRRDMAWriteWithImm, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := newPair(t, pairOpts{})
			if c.op == qp.WRRDMAWriteWithImm {
				if _, err := b.qp.PostRecv([]qp.RecvWR{{WRID: 9, SGList: []qp.SGE{b.sge(0, 64)}}}); err != nil {
					t.Fatal(err)
				}
			}
			wr := qp.SendWR{WRID: 1, Opcode: c.op, Flags: qp.SendSignaled, SGList: []qp.SGE{a.sge(0, 64)},
				RemoteAddr: b.addr(0), RKey: b.mr.RKey() ^ 0x5a5a}
			if _, err := a.qp.PostSend([]qp.SendWR{wr}); err != nil {
				t.Fatal(err)
			}
			if wc := wait(t, a.scq, 1, 5*time.Second)[0]; wc.Status != cq.StatusRemAccessErr {
				t.Fatalf("the requester's completion %v, want REM_ACCESS_ERR", wc.Status)
			}
			if c.event {
				if ev := nextEvent(t, b.dev); ev.Type != rnic.EventQPAccessErr || ev.QP != b.qp {
					t.Fatalf("event %v on QP %p, want %v on the responder's QP", ev.Type, ev.QP, rnic.EventQPAccessErr)
				}
			}
			noEvent(t, b.dev)
			noEvent(t, a.dev)
		})
	}
}

// TestLastWQEEvent: a QP with an SRQ that enters ERR reports
// IBV_EVENT_QP_LAST_WQE_REACHED, once; one without an SRQ reports
// nothing.
func TestLastWQEEvent(t *testing.T) {
	_, b := newPair(t, pairOpts{})
	srq, err := b.dev.CreateSRQ(b.pd, qp.SRQAttr{MaxWR: 4, MaxSGE: 1})
	must(t, err)
	q, err := b.dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: b.pd, SendCQ: b.scq, RecvCQ: b.rcq, SRQ: srq,
		Cap: qp.Cap{MaxSendWR: 4, MaxSendSGE: 1}})
	must(t, err)
	must(t, q.Modify(&qp.Attr{State: qp.StateInit, Port: 1}, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags))
	must(t, q.Modify(&qp.Attr{State: qp.StateErr}, qp.AttrState))
	if ev := nextEvent(t, b.dev); ev.Type != rnic.EventQPLastWQEReached || ev.QP != q {
		t.Fatalf("event %v on QP %p, want %v on the SRQ's QP", ev.Type, ev.QP, rnic.EventQPLastWQEReached)
	}
	must(t, q.Modify(&qp.Attr{State: qp.StateErr}, qp.AttrState)) // again: no event
	must(t, b.qp.Modify(&qp.Attr{State: qp.StateErr}, qp.AttrState))
	noEvent(t, b.dev)
	if rnic.EventQPLastWQEReached.String() != "last WQE reached" {
		t.Errorf("the event's name is %q", rnic.EventQPLastWQEReached)
	}
}

// TestCQErrEvent: a receive CQ that overruns reports IBV_EVENT_CQ_ERR for
// that CQ, once, and its QP goes to ERR.
func TestCQErrEvent(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	small, err := b.dev.CreateCQ(1)
	must(t, err)
	rq, err := b.dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: b.pd, SendCQ: b.scq, RecvCQ: small,
		Cap: qp.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	sq := createQP(t, a, qp.TypeRC)
	connectQP(t, sq, a, b, qp.TypeRC, rq.Num(), 0x100)
	connectQP(t, rq, b, a, qp.TypeRC, sq.Num(), 0x100)
	for i := range 2 {
		if _, err := rq.PostRecv([]qp.RecvWR{{WRID: uint64(i), SGList: []qp.SGE{b.sge(i*64, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if _, err := sq.PostSend([]qp.SendWR{{WRID: uint64(i), Opcode: qp.WRSend, SGList: []qp.SGE{a.sge(0, 16)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if ev := nextEvent(t, b.dev); ev.Type != rnic.EventCQErr || ev.CQ != small {
		t.Fatalf("event %v on CQ %p, want %v on the small CQ", ev.Type, ev.CQ, rnic.EventCQErr)
	}
	deadline := time.Now().Add(5 * time.Second)
	for rq.State() != qp.StateErr && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if rq.State() != qp.StateErr {
		t.Fatalf("the QP whose CQ overran is in %v", rq.State())
	}
	noEvent(t, b.dev)
}

package rnic_test

import (
	"bytes"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// newUCQP creates a QP of type typ on s and connects it to the QP
// numbered dest on peer (connectQP).
func newUCQP(t *testing.T, s, peer *side, typ qp.Type, dest bth.QPN, psn bth.PSN) *rnic.QP {
	t.Helper()
	q := createQP(t, s, typ)
	connectQP(t, q, s, peer, typ, dest, psn)
	return q
}

func createQP(t *testing.T, s *side, typ qp.Type) *rnic.QP {
	t.Helper()
	q, err := s.dev.CreateQP(qp.InitAttr{Type: typ, PD: s.pd, SendCQ: s.scq, RecvCQ: s.rcq,
		Cap: qp.Cap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// connectQP takes q from RESET to RTS, connected to the QP numbered dest
// on peer, with the attributes its type takes (IBTA Table 91), path MTU
// 1024, PSNs from psn.
func connectQP(t *testing.T, q *rnic.QP, s, peer *side, typ qp.Type, dest bth.QPN, psn bth.PSN) {
	t.Helper()
	must(t, q.Modify(&qp.Attr{State: qp.StateInit, Port: 1, AccessFlags: s.mr.Access()},
		qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags))
	rtr := qp.Attr{State: qp.StateRTR, PathMTU: qp.MTU1024, DestQPNum: dest, RQPSN: psn,
		AV: qp.AddressVector{DGID: peer.dev.GIDs()[0]}}
	rtrMask := qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN
	rts := qp.Attr{State: qp.StateRTS, SQPSN: psn}
	rtsMask := qp.AttrState | qp.AttrSQPSN
	if typ == qp.TypeRC {
		// newPair's timeout and retry count, perftest's: a 4 ms timeout
		// with one retry fails when the race detector and a loaded
		// machine hold a device off for 10 ms.
		rtr.MaxDestRdAtomic, rts.Timeout, rts.RetryCnt, rts.MaxRdAtomic = 1, 14, 7, 1
		rtrMask |= qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
		rtsMask |= qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic
	}
	must(t, q.Modify(&rtr, rtrMask))
	must(t, q.Modify(&rts, rtsMask))
}

// ucOpcode returns the BTH opcode of an IPv4 RoCE packet.
func ucOpcode(pkt []byte) bth.Opcode { return bth.Opcode(pkt[wire.IPv4Len+wire.UDPLen]) }

// TestUCLoss: over a fabric that loses one packet of a UC SEND, that
// message is lost and never sent again, the messages after it arrive
// whole (the receive WQE the lost one had begun to fill takes the next),
// every send work request completes, and the responder sends nothing.
func TestUCLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{bufSize: 1 << 20})
		const psn = 0x100
		qa, qb := createQP(t, a, qp.TypeUC), createQP(t, b, qp.TypeUC)
		connectQP(t, qa, a, b, qp.TypeUC, qb.Num(), psn)
		connectQP(t, qb, b, a, qp.TypeUC, qa.Num(), psn)

		var ucSent, middles, fromB atomic.Int64
		a.link.SetFaults(mem.Faults{DropFunc: func(pkt []byte, _ uint64) bool {
			op := ucOpcode(pkt)
			if op.Service() != bth.ServiceUC {
				return false
			}
			ucSent.Add(1)
			return op == bth.UCSendMiddle && middles.Add(1) == 2 // the MIDDLE of the second SEND
		}})
		b.link.SetFaults(mem.Faults{DropFunc: func(pkt []byte, _ uint64) bool { fromB.Add(1); return false }})

		const n, size, slot = 6, 3 * 1024, 4096
		fill(a.buf[:n*slot], 7)
		for i := range n {
			if _, err := qb.PostRecv([]qp.RecvWR{{WRID: uint64(100 + i), SGList: []qp.SGE{b.sge(i*slot, slot)}}}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			if _, err := qa.PostSend([]qp.SendWR{{WRID: uint64(i), Opcode: qp.WRSend, Flags: qp.SendSignaled,
				SGList: []qp.SGE{a.sge(i*slot, size)}}}); err != nil {
				t.Fatal(err)
			}
		}
		for i, wc := range wait(t, a.scq, n, 5*time.Second) {
			if wc.WRID != uint64(i) || wc.Status != cq.StatusSuccess {
				t.Fatalf("send completion %d: %v", i, wc)
			}
		}
		wcs := wait(t, b.rcq, n-1, 5*time.Second)
		expectNone(t, b.rcq, 50*time.Millisecond)
		for j, wc := range wcs {
			msg := j // receive j holds message j, and after the lost second one, message j+1
			if j >= 1 {
				msg = j + 1
			}
			if wc.WRID != uint64(100+j) || wc.Status != cq.StatusSuccess || wc.ByteLen != size {
				t.Fatalf("receive %d: %v", j, wc)
			}
			if !bytes.Equal(b.buf[j*slot:j*slot+size], a.buf[msg*slot:msg*slot+size]) {
				t.Fatalf("receive %d does not hold message %d", j, msg)
			}
		}
		if got := ucSent.Load(); got != 3*n {
			t.Fatalf("A sent %d UC packets for %d 3-packet messages: something was sent again", got, n)
		}
		if got := fromB.Load(); got != 0 {
			t.Fatalf("B sent %d packets; a UC responder answers nothing", got)
		}
		st := qb.Stats()
		if st.OutOfSeqRequest != 1 || st.UCDroppedMsgs != 1 {
			t.Fatalf("B's out_of_seq_request %d, uc_dropped_msgs %d; want 1 and 1", st.OutOfSeqRequest, st.UCDroppedMsgs)
		}
	})
}

// TestUCServiceMismatch: UC packets to an RC QP and RC packets to a UC QP
// are dropped by the device and counted as bad_opcode (rxe
// check_type_state); neither QP executes them.
func TestUCServiceMismatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{})
		ucB := newUCQP(t, b, a, qp.TypeUC, 0, 1)
		ucToRC := newUCQP(t, a, b, qp.TypeUC, b.qp.Num(), 1) // UC sender, RC receiver
		rcToUC := newUCQP(t, a, b, qp.TypeRC, ucB.Num(), 1)  // RC sender, UC receiver
		b.postRecv(t, qp.RecvWR{WRID: 1, SGList: []qp.SGE{b.sge(0, 64)}})
		if _, err := ucB.PostRecv([]qp.RecvWR{{WRID: 2, SGList: []qp.SGE{b.sge(64, 64)}}}); err != nil {
			t.Fatal(err)
		}
		send := []qp.SendWR{{WRID: 9, Opcode: qp.WRSend, SGList: []qp.SGE{a.sge(0, 16)}}}
		if _, err := ucToRC.PostSend(send); err != nil {
			t.Fatal(err)
		}
		if _, err := rcToUC.PostSend(send); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for b.dev.Counters().BadOpcode < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("bad_opcode %d, want at least 2", b.dev.Counters().BadOpcode)
			}
			time.Sleep(time.Millisecond)
		}
		expectNone(t, b.rcq, 20*time.Millisecond)
		if b.qp.Stats().RcvdPkts != 0 || ucB.Stats().RcvdPkts != 0 {
			t.Fatalf("a QP took a packet of the other service: RC %d, UC %d", b.qp.Stats().RcvdPkts, ucB.Stats().RcvdPkts)
		}
	})
}

// TestTakesInFirst: a program's UC and UD QPs send behind the device's
// receive work (Device.receiveFirst), having no flow control; RC QPs,
// whose windows hold their senders back, and QP 1, whose few MADs go as
// they come, do not wait.
func TestTakesInFirst(t *testing.T) {
	a, _ := newPair(t, pairOpts{})
	for _, c := range []struct {
		typ  qp.Type
		want bool
	}{{qp.TypeRC, false}, {qp.TypeUC, true}, {qp.TypeUD, true}} {
		if q := createQP(t, a, c.typ); q.TakesInFirst() != c.want {
			t.Errorf("%v QP: takes in first %v, want %v", c.typ, q.TakesInFirst(), c.want)
		}
	}
	gsi, err := a.dev.CreateGSI(qp.InitAttr{PD: a.pd, SendCQ: a.scq, RecvCQ: a.rcq, Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if gsi.TakesInFirst() {
		t.Error("QP 1 takes in first")
	}
}

// TestTakeInFirstRule: a UC or UD sender reads the link first when its
// last batch was half full or more, or when nobody has read it for a
// while (its goroutine may be starved of a CPU), but not in between, and
// not for staleness alone where a program polls the device.
func TestTakeInFirstRule(t *testing.T) {
	a, _ := newPair(t, pairOpts{udp: true}) // a link.Poller
	for _, c := range []struct {
		since        time.Duration
		backlog      bool
		first, stale bool
	}{
		{0, false, false, false},
		{50 * time.Microsecond, false, false, false},
		{time.Millisecond, false, true, true},
		{0, true, true, false},
		{time.Millisecond, true, true, false},
	} {
		if first, stale := a.dev.TakeInFirstAfter(c.since, c.backlog); first != c.first || stale != c.stale {
			t.Errorf("read %v ago, backlog %v: first %v stale %v, want %v %v", c.since, c.backlog, first, stale, c.first, c.stale)
		}
	}
	a.dev.Poll() // a program polls: its polls read the link
	if first, _ := a.dev.TakeInFirstAfter(time.Millisecond, false); first {
		t.Error("a stale link read first where a program polls")
	}
	if first, _ := a.dev.TakeInFirstAfter(0, true); !first {
		t.Error("a backlog not read first where a program polls")
	}
}

package rnic_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// TestSRQ: over the in-memory fabric, two of B's RC QPs receive from one
// SRQ the SENDs of two of A's: the WQEs are used in the order posted,
// each completion names the QP the message came on, and the data lands
// in the WQE's buffer. The limit event arrives from GetAsyncEvent once,
// with the limit disarmed. The QPs' own PostRecv is refused, and the SRQ
// cannot be destroyed until they are.
func TestSRQ(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	srq, err := b.dev.CreateSRQ(b.pd, qp.SRQAttr{MaxWR: 16, MaxSGE: 1})
	must(t, err)
	var bq [2]*rnic.QP
	var aq [2]*rnic.QP
	for i := range bq {
		bq[i], err = b.dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: b.pd, SendCQ: b.scq, RecvCQ: b.rcq, SRQ: srq,
			Cap: qp.Cap{MaxSendWR: 4, MaxSendSGE: 1}})
		must(t, err)
		aq[i] = createQP(t, a, qp.TypeRC)
	}
	for i := range bq {
		connectQP(t, aq[i], a, b, qp.TypeRC, bq[i].Num(), 0x100)
		connectQP(t, bq[i], b, a, qp.TypeRC, aq[i].Num(), 0x100)
	}
	if _, err := bq[0].PostRecv([]qp.RecvWR{{WRID: 1, SGList: []qp.SGE{b.sge(0, 8)}}}); !errors.Is(err, qp.ErrBadWR) {
		t.Fatalf("PostRecv on a QP with an SRQ: %v, want ErrBadWR", err)
	}
	const msgs, size = 12, 3000 // three packets each at MTU 1024
	for i := range msgs {
		if _, err := srq.PostRecv([]qp.RecvWR{{WRID: uint64(100 + i), SGList: []qp.SGE{b.sge(i*4096, 4096)}}}); err != nil {
			t.Fatal(err)
		}
	}
	must(t, srq.Modify(&qp.SRQAttr{SRQLimit: 5}, qp.SRQAttrLimit))

	// QP 0 sends the even messages, QP 1 the odd ones, one at a time, so
	// that the order they take WQEs in is known.
	for i := range msgs {
		fill(a.buf[i*size:(i+1)*size], uint64(i))
		s := aq[i%2]
		if _, err := s.PostSend([]qp.SendWR{{WRID: uint64(i), Opcode: qp.WRSend, Flags: qp.SendSignaled,
			SGList: []qp.SGE{a.sge(i*size, size)}}}); err != nil {
			t.Fatal(err)
		}
		wc := wait(t, b.rcq, 1, 5*time.Second)[0]
		if wc.Status != cq.StatusSuccess || wc.WRID != uint64(100+i) || wc.QPNum != uint32(bq[i%2].Num()) || wc.ByteLen != size {
			t.Fatalf("message %d: completion %+v; want WQE %d on QP %#x, %d bytes", i, wc, 100+i, uint32(bq[i%2].Num()), size)
		}
		if !bytes.Equal(b.buf[i*4096:i*4096+size], a.buf[i*size:(i+1)*size]) {
			t.Fatalf("message %d did not land in WQE %d's buffer", i, 100+i)
		}
	}
	wait(t, a.scq, msgs, 5*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := b.dev.GetAsyncEvent(ctx)
	if err != nil || ev.Type != rnic.EventSRQLimitReached || ev.SRQ != srq {
		t.Fatalf("async event %+v, %v; want the SRQ's limit", ev, err)
	}
	if got := srq.Query(); got.SRQLimit != 0 || got.MaxWR != 16 {
		t.Fatalf("Query %+v after the event: want the limit disarmed", got)
	}
	done, stop := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer stop()
	if ev, err := b.dev.GetAsyncEvent(done); err == nil {
		t.Fatalf("a second event %+v without re-arming", ev)
	}

	if err := srq.Destroy(); !errors.Is(err, rnic.ErrSRQInUse) {
		t.Fatalf("Destroy of an SRQ in use: %v, want ErrSRQInUse", err)
	}
	for _, q := range bq {
		must(t, q.Destroy())
	}
	must(t, srq.Destroy())
	if err := srq.Destroy(); err == nil {
		t.Fatal("a second Destroy succeeded")
	}
	if _, err := b.dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: b.pd, SendCQ: b.scq, RecvCQ: b.rcq, SRQ: srq,
		Cap: qp.Cap{MaxSendWR: 1}}); !errors.Is(err, qp.ErrAttr) {
		t.Fatalf("CreateQP with a destroyed SRQ: %v, want ErrAttr", err)
	}
}

// TestSRQOtherDevice: a QP cannot take an SRQ of another device; a bad
// SRQ is refused at creation.
func TestSRQOtherDevice(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	srq, err := a.dev.CreateSRQ(a.pd, qp.SRQAttr{MaxWR: 4})
	must(t, err)
	if _, err := b.dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: b.pd, SendCQ: b.scq, RecvCQ: b.rcq, SRQ: srq,
		Cap: qp.Cap{MaxSendWR: 1}}); !errors.Is(err, qp.ErrAttr) {
		t.Fatalf("CreateQP with another device's SRQ: %v, want ErrAttr", err)
	}
	for _, attr := range []qp.SRQAttr{{MaxWR: 0}, {MaxWR: qp.MaxWR + 1}, {MaxWR: 4, MaxSGE: qp.MaxSGE + 1}, {MaxWR: 4, SRQLimit: 5}} {
		if _, err := a.dev.CreateSRQ(a.pd, attr); !errors.Is(err, qp.ErrAttr) {
			t.Errorf("CreateSRQ(%+v): %v, want ErrAttr", attr, err)
		}
	}
}

// TestSRQUD: UD QPs receive from an SRQ as well; a message the WQE
// cannot hold completes it with REM_INV_REQ_ERR (class E), and the QP
// takes the next.
func TestSRQUD(t *testing.T) {
	f := mem.NewFabric()
	a, b := newUDSide(t, f, "10.0.0.1", udQKey), newUDSide(t, f, "10.0.0.2", udQKey)
	srq, err := b.dev.CreateSRQ(b.pd, qp.SRQAttr{MaxWR: 4, MaxSGE: 1})
	must(t, err)
	bq, err := b.dev.CreateQP(qp.InitAttr{Type: qp.TypeUD, PD: b.pd, SendCQ: b.scq, RecvCQ: b.rcq, SRQ: srq,
		Cap: qp.Cap{MaxSendWR: 1}})
	must(t, err)
	must(t, bq.Modify(&qp.Attr{State: qp.StateInit, Port: 1, QKey: udQKey}, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrQKey))
	must(t, bq.Modify(&qp.Attr{State: qp.StateRTR}, qp.AttrState))
	must(t, bq.Modify(&qp.Attr{State: qp.StateRTS}, qp.AttrState|qp.AttrSQPSN))
	_, err = srq.PostRecv([]qp.RecvWR{
		{WRID: 1, SGList: []qp.SGE{{Addr: b.mr.IOVA(), Length: 100, LKey: b.mr.LKey()}}},
		{WRID: 2, SGList: []qp.SGE{{Addr: b.mr.IOVA() + 4096, Length: 2048, LKey: b.mr.LKey()}}},
	})
	must(t, err)
	fill(a.buf, 3)
	ah := a.ahTo(t, b)
	for range 2 {
		wr := qp.SendWR{WRID: 9, Opcode: qp.WRSend, Flags: qp.SendSignaled, AH: ah, RemoteQPN: bq.Num(), RemoteQKey: udQKey,
			SGList: []qp.SGE{{Addr: a.mr.IOVA(), Length: 200, LKey: a.mr.LKey()}}}
		if _, err := a.qp.PostSend([]qp.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
	}
	wcs := wait(t, b.rcq, 2, 5*time.Second)
	if wcs[0].WRID != 1 || wcs[0].Status != cq.StatusRemInvReqErr || wcs[1].WRID != 2 || wcs[1].Status != cq.StatusSuccess ||
		wcs[1].ByteLen != 240 || wcs[1].QPNum != uint32(bq.Num()) {
		t.Fatalf("completions %+v", wcs)
	}
	if !bytes.Equal(b.buf[4096+40:4096+240], a.buf[:200]) || bq.State() != qp.StateRTS {
		t.Fatalf("the second message did not land, or the QP is in %v", bq.State())
	}
}

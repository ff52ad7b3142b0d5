package rc

import (
	"testing"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/reth"
)

// TestWindowRefillsInBatches: once the window is full, the requester
// waits until ACKs have opened an ackInterval's worth of it and then sends
// that many packets together, rather than one packet per ACK.
func TestWindowRefillsInBatches(t *testing.T) {
	const window = 16 // ackInterval 4
	q, port, m, _ := windowQP(t, window)
	if got := q.req.ackInterval(); got != 4 {
		t.Fatalf("ackInterval = %d with window %d, want 4", got, window)
	}
	if _, err := q.PostSend([]qp.SendWR{{Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGList: []qp.SGE{{Addr: m.IOVA(), Length: 64 << 10, LKey: m.LKey()}}, RemoteAddr: 0x1000, RKey: 7}}); err != nil {
		t.Fatal(err)
	}
	if port.count != window {
		t.Fatalf("posting a 64-packet WRITE sent %d packets, want the window, %d", port.count, window)
	}
	first := bth.PSN(rtsAttr.SQPSN)
	ack := ackPacket(t)
	for _, step := range []struct {
		acked int // packets acknowledged in all
		sent  int // packets sent in all after the ACK
	}{
		{1, 16}, {2, 16}, {3, 16}, // less than an ackInterval of room: wait
		{4, 20},          // room for 4: send them together
		{5, 20}, {7, 20}, // the window is full again: wait
		{8, 24},
		{20, 36}, // a big ACK opens the whole window
	} {
		ack.BTH.SetPSN(first.Add(uint32(step.acked - 1)))
		q.HandlePacket(ack)
		if port.count != step.sent {
			t.Fatalf("after ACKs of %d packets, %d sent in all, want %d", step.acked, port.count, step.sent)
		}
	}
}

// TestResponseResendsAtOnce: a response that sends the requester back
// (here a READ response past the one awaited, an implied NAK) has it send
// again before HandlePacket returns: going back disarms the retransmit
// timer until the requester sends, so nothing else is sure to make it.
func TestResponseResendsAtOnce(t *testing.T) {
	q, port, m, _ := windowQP(t, 0)
	if _, err := q.PostSend([]qp.SendWR{{WRID: 3, Opcode: qp.WRRDMARead, Flags: qp.SendSignaled,
		SGList: []qp.SGE{{Addr: m.IOVA(), Length: 3 << 10, LKey: m.LKey()}}, RemoteAddr: 0x1000, RKey: 7}}); err != nil {
		t.Fatal(err)
	}
	if port.count != 1 {
		t.Fatalf("posting a READ sent %d packets, want 1", port.count)
	}
	first := bth.PSN(rtsAttr.SQPSN)
	buf, _ := wire.AppendTransport(nil, &wire.Headers{
		BTH: bth.Fields{Opcode: bth.RCRDMAReadResponseMiddle, PKey: 0xffff, DestQP: 0x11, PSN: first.Add(1)},
	}, make([]byte, 1024))
	buf = append(buf, 0, 0, 0, 0)
	var resp wire.Packet
	if err := wire.ParseUDPPayload(&resp, buf); err != nil {
		t.Fatal(err)
	}
	if q.HandlePacket(&resp) {
		t.Errorf("a READ response left the QP owing an ACK")
	}
	if port.count != 2 {
		t.Fatalf("after the READ response past the first, %d packets sent in all, want the READ sent again (2)", port.count)
	}
	var again wire.Packet // the fake port leaves the ICRC out
	if err := wire.ParseUDPPayload(&again, append(port.last[:len(port.last):len(port.last)], 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if op, psn := again.BTH.Opcode(), again.BTH.PSN(); op != bth.RCRDMAReadRequest || psn != first {
		t.Errorf("sent %v PSN %d, want the READ request again at PSN %d", op, psn, first)
	}
	if d := q.Deadline(); d.IsZero() {
		t.Errorf("no timer armed for the READ sent again")
	}
}

// timerPort records the deadlines a QP tells it of.
type timerPort struct {
	benchPort
	told []monotime.Time
}

func (p *timerPort) Timer(r Runner, at monotime.Time) { p.told = append(p.told, at) }

// TestTimerToldAfterIdle: a QP whose timers were disarmed by an ACK tells
// the device of the deadline of its next request, though it is later than
// one it told before. A device that had nothing to wait for sleeps until
// told; were the QP to keep quiet, the lost request would never be resent.
func TestTimerToldAfterIdle(t *testing.T) {
	port := &timerPort{benchPort: benchPort{fakePort: fakePort{mrs: mr.NewTable()}, buf: make([]byte, 9100)}}
	c, err := cq.New(64)
	if err != nil {
		t.Fatal(err)
	}
	pd := port.mrs.AllocPD()
	q, err := New(port, 0x11, qp.InitAttr{Type: qp.TypeRC, PD: pd, SendCQ: c, RecvCQ: c,
		Cap: qp.Cap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := port.mrs.Register(pd, make([]byte, 4096), 0x10000, mr.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		a qp.Attr
		m qp.AttrMask
	}{{initAttr, initMask}, {rtrAttr, rtrMask}, {rtsAttr, rtsMask}} {
		if err := q.Modify(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	write := []qp.SendWR{{Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGList: []qp.SGE{{Addr: m.IOVA(), Length: 64, LKey: m.LKey()}}, RemoteAddr: 0x1000, RKey: 7}}
	ack := ackPacket(t)
	psn := bth.PSN(rtsAttr.SQPSN)
	for i := range 3 {
		port.told = port.told[:0]
		if _, err := q.PostSend(write); err != nil {
			t.Fatal(err)
		}
		d := q.Deadline()
		if d.IsZero() || len(port.told) == 0 || port.told[len(port.told)-1] != d {
			t.Fatalf("WRITE %d: deadline %v, the device was told %v", i, d, port.told)
		}
		ack.BTH.SetPSN(psn.Add(uint32(i)))
		q.HandlePacket(ack)
		if d := q.Deadline(); !d.IsZero() {
			t.Fatalf("WRITE %d acknowledged, yet a timer is armed for %v", i, d)
		}
		// Past the first deadline (a probe timeout, 10 ms before a round
		// trip is measured), so that the next comes later than it.
		port.advance(15 * time.Millisecond)
	}
}

// TestFlushAck: a WRITE that asks for an ACK leaves the responder owing
// one (HandlePacket says so), FlushAck sends it, and only once.
func TestFlushAck(t *testing.T) {
	q, port, m, _ := windowQP(t, 0)
	owe(t, q, m, 8)
	if port.count != 0 {
		t.Fatalf("%d packets sent before FlushAck, want the ACK deferred", port.count)
	}
	q.FlushAck()
	if port.count != 1 {
		t.Fatalf("FlushAck sent %d packets, want the ACK", port.count)
	}
	var ack wire.Packet // the fake port leaves the ICRC out
	if err := wire.ParseUDPPayload(&ack, append(port.last[:len(port.last):len(port.last)], 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if op, psn := ack.BTH.Opcode(), ack.BTH.PSN(); op != bth.RCAcknowledge || psn != bth.PSN(rtrAttr.RQPSN) {
		t.Errorf("FlushAck sent %v PSN %d, want the ACK of PSN %d", op, psn, rtrAttr.RQPSN)
	}
	q.FlushAck()
	if port.count != 1 {
		t.Errorf("a second FlushAck sent %d more packets", port.count-1)
	}
}

// TestPostSendCarriesOwedAck: a PostSend on a QP that owes an ACK sends
// its request and then the ACK, in one link batch, and leaves nothing
// owed.
func TestPostSendCarriesOwedAck(t *testing.T) {
	q, port, m, _ := windowQP(t, 0)
	port.keep = true
	owe(t, q, m, 2)
	if _, err := q.PostSend([]qp.SendWR{{Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGList: []qp.SGE{{Addr: m.IOVA() + 64, Length: 2, LKey: m.LKey()}}, RemoteAddr: 0x1000, RKey: 7}}); err != nil {
		t.Fatal(err)
	}
	if len(port.batches) != 1 || len(port.batches[0]) != 2 {
		t.Fatalf("PostSend sent batches of %v packets, want one of 2", batchSizes(port.batches))
	}
	want := []struct {
		op  bth.Opcode
		psn bth.PSN
	}{{bth.RCRDMAWriteOnly, bth.PSN(rtsAttr.SQPSN)}, {bth.RCAcknowledge, bth.PSN(rtrAttr.RQPSN)}}
	for i, b := range port.batches[0] {
		var p wire.Packet // the fake port leaves the ICRC out
		if err := wire.ParseUDPPayload(&p, append(b, 0, 0, 0, 0)); err != nil {
			t.Fatal(err)
		}
		if op, psn := p.BTH.Opcode(), p.BTH.PSN(); op != want[i].op || psn != want[i].psn {
			t.Errorf("packet %d of the batch is %v PSN %d, want %v PSN %d", i, op, psn, want[i].op, want[i].psn)
		}
	}
	q.FlushAck()
	if port.count != 2 {
		t.Errorf("FlushAck after PostSend sent %d more packets, want none", port.count-2)
	}
}

// owe hands q the peer's first WRITE, of n bytes into m with AckReq, and
// checks that it leaves the responder owing an ACK.
func owe(t *testing.T, q *QP, m *mr.MR, n int) {
	t.Helper()
	buf, _ := wire.AppendTransport(nil, &wire.Headers{
		BTH:  bth.Fields{Opcode: bth.RCRDMAWriteOnly, PKey: 0xffff, DestQP: 0x11, PSN: bth.PSN(rtrAttr.RQPSN), AckReq: true},
		RETH: reth.Fields{VA: m.IOVA(), RKey: reth.Key(m.RKey()), DMALen: uint32(n)},
	}, make([]byte, n))
	buf = append(buf, 0, 0, 0, 0) // an ICRC, not checked here
	var w wire.Packet
	if err := wire.ParseUDPPayload(&w, buf); err != nil {
		t.Fatal(err)
	}
	if !q.HandlePacket(&w) {
		t.Fatal("a WRITE with AckReq left no ACK owed")
	}
}

func batchSizes(batches [][][]byte) []int {
	n := make([]int, len(batches))
	for i, b := range batches {
		n[i] = len(b)
	}
	return n
}

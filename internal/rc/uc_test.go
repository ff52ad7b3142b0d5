package rc

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/reth"
)

var (
	ucRTRAttr = qp.Attr{State: qp.StateRTR, PathMTU: qp.MTU256, DestQPNum: 0x12, RQPSN: 1,
		AV: qp.AddressVector{DGID: netip.MustParseAddr("::ffff:10.0.0.2")}}
	ucRTRMask = qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN
	ucRTSAttr = qp.Attr{State: qp.StateRTS, SQPSN: 1}
	ucRTSMask = qp.AttrState | qp.AttrSQPSN
)

// ucPort is a fakePort that also notes, at each Send, how many work
// completions the CQ held: a UC work request must not complete before its
// last packet has gone to the link.
type ucPort struct {
	fakePort
	cq       *cq.CQ
	cqAtSend []int
}

func (p *ucPort) Send(pkts [][]byte) {
	p.cqAtSend = append(p.cqAtSend, p.cq.Len())
	p.fakePort.Send(pkts)
}

// newUCQP returns a UC QP in RTS with path MTU 256 and a 64 KiB region
// with every access, and its port and CQ.
func newUCQP(t *testing.T) (*QP, *ucPort, *mr.MR, *cq.CQ) {
	t.Helper()
	c, err := cq.New(64)
	if err != nil {
		t.Fatal(err)
	}
	port := &ucPort{fakePort: fakePort{mrs: mr.NewTable()}, cq: c}
	q, err := New(port, 0x11, qp.InitAttr{
		Type: qp.TypeUC, PD: port.mrs.AllocPD(), SendCQ: c, RecvCQ: c, SigAll: true,
		Cap: qp.Cap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		a qp.Attr
		m qp.AttrMask
	}{{initAttr, initMask}, {ucRTRAttr, ucRTRMask}, {ucRTSAttr, ucRTSMask}} {
		if err := q.Modify(&s.a, s.m); err != nil {
			t.Fatalf("to %v: %v", s.a.State, err)
		}
	}
	m, err := port.mrs.Register(q.pd, make([]byte, 64<<10), 0x10000, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	return q, port, m, c
}

// TestUCTransitions: a UC QP takes IBTA Table 91's UC attributes and
// refuses RC's (the ACK timeout, retry counts, RNR timer, READ/atomic
// depths) with ErrAttr, as the kernel's ib_modify_qp_is_ok does for rxe.
func TestUCTransitions(t *testing.T) {
	rtsRC := ucRTSAttr
	rtsRC.Timeout, rtsRC.RetryCnt, rtsRC.RNRRetry, rtsRC.MaxRdAtomic = 14, 7, 7, 1
	tests := []struct {
		name string
		upTo int // 0: from RESET; 1: from INIT; 2: from RTR
		attr qp.Attr
		mask qp.AttrMask
		want error
	}{
		{"INIT", 0, initAttr, initMask, nil},
		{"INIT without access flags", 0, initAttr, initMask &^ qp.AttrAccessFlags, qp.ErrAttr},
		{"RTR", 1, ucRTRAttr, ucRTRMask, nil},
		{"RTR with access flags", 1, ucRTRAttr, ucRTRMask | qp.AttrAccessFlags, nil},
		{"RTR without RQ PSN", 1, ucRTRAttr, ucRTRMask &^ qp.AttrRQPSN, qp.ErrAttr},
		{"RTR without path MTU", 1, ucRTRAttr, ucRTRMask &^ qp.AttrPathMTU, qp.ErrAttr},
		{"RTR with max_dest_rd_atomic", 1, ucRTRAttr, ucRTRMask | qp.AttrMaxDestRdAtomic, qp.ErrAttr},
		{"RTR with min_rnr_timer", 1, ucRTRAttr, ucRTRMask | qp.AttrMinRNRTimer, qp.ErrAttr},
		{"RTS", 2, ucRTSAttr, ucRTSMask, nil},
		{"RTS without SQ PSN", 2, ucRTSAttr, qp.AttrState, qp.ErrAttr},
		{"RTS with timeout", 2, rtsRC, ucRTSMask | qp.AttrTimeout, qp.ErrAttr},
		{"RTS with retry_cnt", 2, rtsRC, ucRTSMask | qp.AttrRetryCnt, qp.ErrAttr},
		{"RTS with rnr_retry", 2, rtsRC, ucRTSMask | qp.AttrRNRRetry, qp.ErrAttr},
		{"RTS with max_rd_atomic", 2, rtsRC, ucRTSMask | qp.AttrMaxQPRdAtomic, qp.ErrAttr},
		{"RTS with min_rnr_timer", 2, rtsRC, ucRTSMask | qp.AttrMinRNRTimer, qp.ErrAttr},
		{"RTS with RC's attributes", 2, rtsRC, rtsMask, qp.ErrAttr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			port := &fakePort{mrs: mr.NewTable()}
			c, _ := cq.New(8)
			q, err := New(port, 0x11, qp.InitAttr{Type: qp.TypeUC, PD: port.mrs.AllocPD(), SendCQ: c, RecvCQ: c,
				Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1}})
			if err != nil {
				t.Fatal(err)
			}
			steps := []struct {
				a qp.Attr
				m qp.AttrMask
			}{{initAttr, initMask}, {ucRTRAttr, ucRTRMask}}
			for _, s := range steps[:tt.upTo] {
				if err := q.Modify(&s.a, s.m); err != nil {
					t.Fatal(err)
				}
			}
			before := q.State()
			err = q.Modify(&tt.attr, tt.mask)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Modify: %v, want %v", err, tt.want)
			}
			if err != nil && q.State() != before {
				t.Fatalf("a refused Modify moved the QP from %v to %v", before, q.State())
			}
		})
	}
	// And an RC QP still needs RC's.
	q, _ := newTestQP(t)
	_ = toInit(q)
	if err := q.Modify(&ucRTRAttr, ucRTRMask); !errors.Is(err, qp.ErrAttr) {
		t.Fatalf("RC QP to RTR with UC's attributes: %v, want ErrAttr", err)
	}
}

// TestUCRefusesReadAndAtomic: READ, the atomics and SEND with invalidate
// have no UC opcode; PostSend refuses them and queues nothing.
func TestUCRefusesReadAndAtomic(t *testing.T) {
	q, port, m, _ := newUCQP(t)
	sge := []qp.SGE{{Addr: m.IOVA(), Length: 8, LKey: m.LKey()}}
	for _, op := range []qp.WROpcode{qp.WRRDMARead, qp.WRAtomicCmpAndSwp, qp.WRAtomicFetchAndAdd, qp.WRSendWithInv} {
		n, err := q.PostSend([]qp.SendWR{{WRID: 1, Opcode: op, SGList: sge, RemoteAddr: 0x10000, RKey: m.RKey()}})
		if n != 0 || !errors.Is(err, qp.ErrBadWR) {
			t.Errorf("%v on UC: posted %d, %v; want 0, ErrBadWR", op, n, err)
		}
	}
	if len(port.sent) != 0 || q.State() != qp.StateRTS {
		t.Fatalf("%d packets sent, state %v", len(port.sent), q.State())
	}
}

// TestUCRequester: a UC SEND and WRITE go out with UC opcodes and no
// AckReq, complete once their last packets have gone to the link and not
// before, and leave no timer armed.
func TestUCRequester(t *testing.T) {
	q, port, m, c := newUCQP(t)
	wrs := []qp.SendWR{
		{WRID: 1, Opcode: qp.WRSend, SGList: []qp.SGE{{Addr: m.IOVA(), Length: 600, LKey: m.LKey()}}},
		{WRID: 2, Opcode: qp.WRRDMAWriteWithImm, ImmData: 7, RemoteAddr: 0x5000, RKey: 0x77,
			SGList: []qp.SGE{{Addr: m.IOVA(), Length: 256, LKey: m.LKey()}}},
		{WRID: 3, Opcode: qp.WRRDMAWrite, RemoteAddr: 0x5000, RKey: 0x77,
			SGList: []qp.SGE{{Addr: m.IOVA(), Length: 512, LKey: m.LKey()}}},
	}
	if _, err := q.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	want := []bth.Opcode{bth.UCSendFirst, bth.UCSendMiddle, bth.UCSendLast,
		bth.UCRDMAWriteOnlyWithImm, bth.UCRDMAWriteFirst, bth.UCRDMAWriteLast}
	if len(port.sent) != len(want) {
		t.Fatalf("%d packets sent, want %d", len(port.sent), len(want))
	}
	for i, b := range port.sent {
		h := bth.Header(b)
		if h.Opcode() != want[i] || h.AckReq() || h.PSN() != bth.PSN(1+i) {
			t.Errorf("packet %d: %v PSN %d AckReq %v; want %v PSN %d without AckReq", i, h.Opcode(), h.PSN(), h.AckReq(), want[i], 1+i)
		}
	}
	if len(port.cqAtSend) != 1 || port.cqAtSend[0] != 0 {
		t.Fatalf("completions in the CQ at each Send: %v; want none before the packets left", port.cqAtSend)
	}
	var wcs [8]cq.WC
	n, _ := c.Poll(wcs[:])
	if n != 3 {
		t.Fatalf("%d completions after the packets left, want 3", n)
	}
	for i, wc := range wcs[:n] {
		if wc.WRID != uint64(i+1) || wc.Status != cq.StatusSuccess {
			t.Errorf("completion %d: %v", i, wc)
		}
	}
	if d := q.Deadline(); !d.IsZero() {
		t.Fatalf("a timer is armed at %v; UC has none", d)
	}
	// Nothing is retransmitted, however long the QP waits.
	port.advance(10e9)
	q.Run()
	if len(port.sent) != len(want) {
		t.Fatalf("%d packets after a long wait, want %d", len(port.sent), len(want))
	}
}

// ucSend returns the packets of a UC SEND of msg at path MTU 256, from
// PSN psn on.
func ucSend(t *testing.T, msg []byte, psn bth.PSN) []*wire.Packet {
	t.Helper()
	var pkts []*wire.Packet
	n := (len(msg) + 255) / 256
	for k := range n {
		op := sendOpcode(qp.WRSend, k == 0, k == n-1)
		pkts = append(pkts, request(t, wire.Headers{BTH: bth.Fields{Opcode: unreliable(op), PSN: psn.Add(uint32(k))}},
			msg[k*256:min(len(msg), (k+1)*256)]))
	}
	return pkts
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// TestUCGapDropsMessage: a SEND whose MIDDLE was lost is dropped, without
// a word to the requester; the receive WQE it had begun to fill takes the
// next SEND, which arrives whole; a lost LAST followed by an ONLY loses
// only the first message.
func TestUCGapDropsMessage(t *testing.T) {
	q, port, m, c := newUCQP(t)
	mem := make([]byte, 4096)
	rm, err := port.mrs.Register(q.pd, mem, 0x100000, mr.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := q.PostRecv([]qp.RecvWR{{WRID: uint64(10 + i), SGList: []qp.SGE{{Addr: rm.IOVA() + uint64(i)*2048, Length: 2048, LKey: rm.LKey()}}}}); err != nil {
			t.Fatal(err)
		}
	}
	_ = m
	first := pattern(1000, 1) // 4 packets, PSNs 1-4
	lost := ucSend(t, first, 1)
	for _, p := range append(lost[:2:2], lost[3]) { // the second MIDDLE (PSN 3) is lost
		q.HandlePacket(p)
	}
	second := pattern(900, 2) // PSNs 5-8
	for _, p := range ucSend(t, second, 5) {
		q.HandlePacket(p)
	}
	var wcs [8]cq.WC
	n, _ := c.Poll(wcs[:])
	if n != 1 || wcs[0].WRID != 10 || wcs[0].Status != cq.StatusSuccess || wcs[0].ByteLen != 900 {
		t.Fatalf("completions %v; want receive 10 (reused) with 900 bytes", wcs[:n])
	}
	if !bytes.Equal(mem[:900], second) {
		t.Fatal("the second SEND did not arrive whole")
	}

	// A lost LAST (PSN 12), then an ONLY: the ONLY begins a new message.
	third := ucSend(t, pattern(1000, 3), 9) // PSNs 9-12
	for _, p := range third[:3] {
		q.HandlePacket(p)
	}
	only := pattern(100, 4)
	q.HandlePacket(ucSend(t, only, 13)[0])
	n, _ = c.Poll(wcs[:])
	if n != 1 || wcs[0].WRID != 11 || wcs[0].ByteLen != 100 || !bytes.Equal(mem[2048:2148], only) {
		t.Fatalf("completions %v; want receive 11 with the 100-byte ONLY", wcs[:n])
	}
	st := q.Stats()
	if st.OutOfSeqRequest != 2 || st.UCDroppedMsgs != 2 {
		t.Errorf("out_of_seq_request %d, uc_dropped_msgs %d; want 2 and 2", st.OutOfSeqRequest, st.UCDroppedMsgs)
	}
	if len(port.sent) != 0 {
		t.Fatalf("the UC responder sent %d packets; it never answers", len(port.sent))
	}
	if q.State() != qp.StateRTS {
		t.Fatalf("state %v", q.State())
	}
}

// TestUCResponderErrorsDrop: on UC a SEND without a receive WQE, an RDMA
// WRITE with a bad rkey and one to a QP without remote write access are
// dropped silently and counted; the QP stays up, sends nothing, and takes
// the next message.
func TestUCResponderErrorsDrop(t *testing.T) {
	q, port, m, c := newUCQP(t)
	write := func(psn bth.PSN, key reth.Key, data []byte) *wire.Packet {
		return request(t, wire.Headers{BTH: bth.Fields{Opcode: bth.UCRDMAWriteOnly, PSN: psn},
			RETH: reth.Fields{VA: m.IOVA(), RKey: key, DMALen: uint32(len(data))}}, data)
	}
	// No receive WQE: the whole 2-packet SEND is dropped.
	for _, p := range ucSend(t, pattern(300, 1), 1) {
		q.HandlePacket(p)
	}
	q.HandlePacket(write(3, reth.Key(m.RKey())+1, []byte("bad key!")))
	q.HandlePacket(write(4, reth.Key(m.RKey()), []byte("good key")))
	if got := q.Stats(); got.OutOfBuffer != 1 || got.UCDroppedMsgs != 2 || got.OutOfSeqRequest != 0 {
		t.Errorf("out_of_buffer %d, uc_dropped_msgs %d, out_of_seq_request %d; want 1, 2, 0",
			got.OutOfBuffer, got.UCDroppedMsgs, got.OutOfSeqRequest)
	}
	buf := make([]byte, 8)
	_ = m.ReadAt(m.IOVA(), buf)
	if string(buf) != "good key" {
		t.Fatalf("memory holds %q after the good WRITE", buf)
	}
	// Without REMOTE_WRITE on the QP, WRITEs are dropped too.
	noWrite := qp.Attr{State: qp.StateRTS, AccessFlags: mr.LocalWrite}
	if err := q.Modify(&noWrite, qp.AttrState|qp.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	q.HandlePacket(write(5, reth.Key(m.RKey()), []byte("refused!")))
	_ = m.ReadAt(m.IOVA(), buf)
	if string(buf) != "good key" || q.Stats().UCDroppedMsgs != 3 {
		t.Fatalf("memory %q, uc_dropped_msgs %d after a WRITE without access", buf, q.Stats().UCDroppedMsgs)
	}
	if n, _ := c.Poll(make([]cq.WC, 4)); n != 0 || len(port.sent) != 0 || q.State() != qp.StateRTS {
		t.Fatalf("%d completions, %d packets sent, state %v; want none, none, RTS", n, len(port.sent), q.State())
	}
}

// TestUCIgnoresRC: RC requests and ACKs mean nothing to a UC QP.
func TestUCIgnoresRC(t *testing.T) {
	q, port, m, _ := newUCQP(t)
	q.HandlePacket(request(t, wire.Headers{BTH: bth.Fields{Opcode: bth.RCRDMAWriteOnly, PSN: 1, AckReq: true},
		RETH: reth.Fields{VA: m.IOVA(), RKey: reth.Key(m.RKey()), DMALen: 4}}, []byte("rc!!")))
	buf := make([]byte, 4)
	_ = m.ReadAt(m.IOVA(), buf)
	if string(buf) == "rc!!" || len(port.sent) != 0 {
		t.Fatalf("a UC QP executed an RC WRITE (memory %q, %d packets sent)", buf, len(port.sent))
	}
}

// TestUCCompletesAtBatchEnd: a UC WRITE whose last packet fills a link
// batch (txBatch packets) goes out within the PostSend, and completes
// when the QP is released, though nothing is left to send then.
func TestUCCompletesAtBatchEnd(t *testing.T) {
	q, port, m, c := newUCQP(t)
	wr := qp.SendWR{WRID: 5, Opcode: qp.WRRDMAWrite, RemoteAddr: 0x5000, RKey: 0x77,
		SGList: []qp.SGE{{Addr: m.IOVA(), Length: txBatch * 256, LKey: m.LKey()}}}
	if _, err := q.PostSend([]qp.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	var wcs [2]cq.WC
	if n, _ := c.Poll(wcs[:]); n != 1 || wcs[0].WRID != 5 || len(port.sent) != txBatch {
		t.Fatalf("%d packets sent, completions %v; want %d and WR 5's", len(port.sent), wcs[:n], txBatch)
	}
}

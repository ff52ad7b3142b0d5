package rc

import (
	"bytes"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/deth"
	"github.com/gorxe/gorxe/wire/reth"
)

// srqFixture is a shared receive queue, the QPs created with it (each on
// a port of its own), one CQ for all, and a region its WQEs point into:
// WQE id i owns the 512 bytes at i*512.
type srqFixture struct {
	srq    *SRQ
	pd     *mr.PD
	mrs    *mr.Table
	mem    []byte
	m      *mr.MR
	cq     *cq.CQ
	limits int // limit events
	mu     sync.Mutex
}

const srqSlot = 512

func newSRQFixture(t *testing.T, maxWR uint32) *srqFixture {
	t.Helper()
	f := &srqFixture{mrs: mr.NewTable(), mem: make([]byte, 64*srqSlot)}
	f.pd = f.mrs.AllocPD()
	var err error
	if f.m, err = f.mrs.Register(f.pd, f.mem, 0x100000, mr.LocalWrite|mr.RemoteWrite); err != nil {
		t.Fatal(err)
	}
	if f.cq, err = cq.New(1024); err != nil {
		t.Fatal(err)
	}
	f.srq, err = NewSRQ(f.pd, qp.SRQAttr{MaxWR: maxWR, MaxSGE: 1}, func() {
		f.mu.Lock()
		f.limits++
		f.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// post posts WQEs with the given ids, each over its own slot of n bytes.
func (f *srqFixture) post(t *testing.T, n uint32, ids ...uint64) {
	t.Helper()
	for _, id := range ids {
		wr := qp.RecvWR{WRID: id, SGList: []qp.SGE{{Addr: f.m.IOVA() + id%64*srqSlot, Length: n, LKey: f.m.LKey()}}}
		if _, err := f.srq.PostRecv([]qp.RecvWR{wr}); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *srqFixture) slot(id uint64) []byte { return f.mem[id%64*srqSlot:][:srqSlot] }

func (f *srqFixture) limitEvents() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.limits
}

// qp returns a QP of type typ (RC or UC) numbered num in RTS, path MTU
// 256, receiving from the fixture's SRQ.
func (f *srqFixture) qp(t *testing.T, typ qp.Type, num bth.QPN) (*QP, *fakePort) {
	t.Helper()
	port := &fakePort{mrs: f.mrs}
	q, err := New(port, num, qp.InitAttr{Type: typ, PD: f.pd, SendCQ: f.cq, RecvCQ: f.cq, SRQ: f.srq,
		Cap: qp.Cap{MaxSendWR: 4, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		a qp.Attr
		m qp.AttrMask
	}{{initAttr, initMask}, {withMTU(rtrAttr, qp.MTU256), rtrMask}, {rtsAttr, rtsMask}}
	if typ == qp.TypeUC {
		steps[1], steps[2] = struct {
			a qp.Attr
			m qp.AttrMask
		}{ucRTRAttr, ucRTRMask}, struct {
			a qp.Attr
			m qp.AttrMask
		}{ucRTSAttr, ucRTSMask}
	}
	for _, s := range steps {
		if err := q.Modify(&s.a, s.m); err != nil {
			t.Fatalf("to %v: %v", s.a.State, err)
		}
	}
	return q, port
}

func (f *srqFixture) poll(t *testing.T) []cq.WC {
	t.Helper()
	wcs := make([]cq.WC, 64)
	n, err := f.cq.Poll(wcs)
	if err != nil {
		t.Fatal(err)
	}
	return wcs[:n]
}

// rcSend returns the packets of an RC SEND of msg at path MTU 256 from
// PSN psn on, the last asking for an ACK.
func rcSend(t *testing.T, msg []byte, psn bth.PSN) []*wire.Packet {
	t.Helper()
	var pkts []*wire.Packet
	n := max((len(msg)+255)/256, 1)
	for k := range n {
		op := sendOpcode(qp.WRSend, k == 0, k == n-1)
		pkts = append(pkts, request(t, wire.Headers{BTH: bth.Fields{Opcode: op, PSN: psn.Add(uint32(k)), AckReq: k == n-1}},
			msg[k*256:min(len(msg), (k+1)*256)]))
	}
	return pkts
}

// TestSRQSharedInOrder: two RC QPs take WQEs from one SRQ in the order
// they were posted, whichever QP a message arrives on; a WQE is taken
// at a message's first packet and held by value, so the SRQ's ring may
// reuse its slot before the message's last packet fills the WQE.
func TestSRQSharedInOrder(t *testing.T) {
	f := newSRQFixture(t, 8)
	a, _ := f.qp(t, qp.TypeRC, 0x11)
	b, _ := f.qp(t, qp.TypeRC, 0x12)
	f.post(t, srqSlot, 1, 2, 3, 4)

	long := pattern(400, 1) // two packets on A
	pa := rcSend(t, long, 1)
	a.HandlePacket(pa[0]) // takes WQE 1
	short := pattern(100, 2)
	b.HandlePacket(rcSend(t, short, 1)[0]) // takes WQE 2
	// Eight more WQEs may be posted now that two have left: the ring's
	// indices 8 and 9 are the slots WQEs 1 and 2 were posted in.
	f.post(t, srqSlot, 5, 6, 7, 8, 9, 10)
	if n, err := f.srq.PostRecv([]qp.RecvWR{{WRID: 11}}); n != 0 || !errors.Is(err, qp.ErrQueueFull) {
		t.Fatalf("posting a ninth WQE: %d, %v; want ErrQueueFull", n, err)
	}
	a.HandlePacket(pa[1])
	a.HandlePacket(rcSend(t, pattern(10, 3), 3)[0]) // WQE 3

	want := []cq.WC{
		{WRID: 2, QPNum: 0x12, ByteLen: 100},
		{WRID: 1, QPNum: 0x11, ByteLen: 400},
		{WRID: 3, QPNum: 0x11, ByteLen: 10},
	}
	got := f.poll(t)
	if len(got) != len(want) {
		t.Fatalf("completions %v, want %v", got, want)
	}
	for i, wc := range got {
		w := want[i]
		if wc.WRID != w.WRID || wc.QPNum != w.QPNum || wc.ByteLen != w.ByteLen || wc.Status != cq.StatusSuccess || wc.Opcode != cq.OpRecv {
			t.Errorf("completion %d: %+v, want WRID %d QP %#x %d bytes", i, wc, w.WRID, w.QPNum, w.ByteLen)
		}
	}
	if !bytes.Equal(f.slot(1)[:400], long) || !bytes.Equal(f.slot(2)[:100], short) {
		t.Fatal("a message did not land in the WQE it took")
	}
	if got := f.srq.Posted(); got != 7 {
		t.Fatalf("%d WQEs left in the SRQ, want 7", got)
	}
}

// TestSRQQPVerbs: a QP created with an SRQ refuses PostRecv, reports no
// receive queue of its own, and needs none sized; a QP of another PD
// than the SRQ's is refused.
func TestSRQQPVerbs(t *testing.T) {
	f := newSRQFixture(t, 8)
	q, _ := f.qp(t, qp.TypeRC, 0x11)
	if n, err := q.PostRecv([]qp.RecvWR{{WRID: 1}}); n != 0 || !errors.Is(err, qp.ErrBadWR) {
		t.Fatalf("PostRecv on a QP with an SRQ: %d, %v; want ErrBadWR", n, err)
	}
	if c := q.Query().Cap; c.MaxRecvWR != 0 || c.MaxRecvSGE != 0 {
		t.Fatalf("QP cap %+v: want no receive queue", c)
	}
	_, err := New(&fakePort{mrs: f.mrs}, 0x13, qp.InitAttr{Type: qp.TypeRC, PD: f.mrs.AllocPD(), SendCQ: f.cq, RecvCQ: f.cq,
		SRQ: f.srq, Cap: qp.Cap{MaxSendWR: 1}})
	if !errors.Is(err, qp.ErrAttr) {
		t.Fatalf("QP in another PD than its SRQ: %v, want ErrAttr", err)
	}
}

// TestSRQLimitEvent: the limit event fires once, when a take leaves
// fewer WQEs posted than the limit, which it disarms; it does not fire
// again until the limit is set again.
func TestSRQLimitEvent(t *testing.T) {
	f := newSRQFixture(t, 16)
	q, _ := f.qp(t, qp.TypeRC, 0x11)
	f.post(t, srqSlot, 1, 2, 3, 4, 5)
	if err := f.srq.Modify(&qp.SRQAttr{SRQLimit: 3}, qp.SRQAttrLimit); err != nil {
		t.Fatal(err)
	}
	psn := bth.PSN(1)
	send := func() {
		q.HandlePacket(rcSend(t, []byte("x"), psn)[0])
		psn++
	}
	for i, want := range []int{0, 0, 1, 1} { // 4, 3, 2 (< 3: fires), 1 left
		send()
		if got := f.limitEvents(); got != want {
			t.Fatalf("after take %d (%d left): %d limit events, want %d", i+1, f.srq.Posted(), got, want)
		}
	}
	if a := f.srq.Query(); a.SRQLimit != 0 || a.MaxWR != 16 || a.MaxSGE != 1 {
		t.Fatalf("Query after the event: %+v; want the limit disarmed (0)", a)
	}
	f.post(t, srqSlot, 6, 7, 8, 9) // 5 posted
	send()                         // 4: disarmed, nothing
	if err := f.srq.Modify(&qp.SRQAttr{SRQLimit: 3}, qp.SRQAttrLimit); err != nil {
		t.Fatal(err)
	}
	send() // 3
	send() // 2: fires again
	send() // 1
	if got := f.limitEvents(); got != 2 {
		t.Fatalf("%d limit events after re-arming, want 2", got)
	}
	if wcs := f.poll(t); len(wcs) != 8 {
		t.Fatalf("%d completions, want 8", len(wcs))
	}
}

// TestSRQModify: max_wr may grow, or shrink down to the WQEs posted and
// the limit; a limit above max_wr is refused; a refused Modify changes
// nothing.
func TestSRQModify(t *testing.T) {
	f := newSRQFixture(t, 4)
	f.post(t, srqSlot, 1, 2, 3)
	for _, tt := range []struct {
		name string
		a    qp.SRQAttr
		m    qp.SRQAttrMask
		ok   bool
	}{
		{"shrink below posted", qp.SRQAttr{MaxWR: 2}, qp.SRQAttrMaxWR, false},
		{"limit above max_wr", qp.SRQAttr{SRQLimit: 5}, qp.SRQAttrLimit, false},
		{"zero max_wr", qp.SRQAttr{MaxWR: 0}, qp.SRQAttrMaxWR, false},
		{"too large", qp.SRQAttr{MaxWR: qp.MaxWR + 1}, qp.SRQAttrMaxWR, false},
		{"unknown mask bit", qp.SRQAttr{}, 1 << 2, false},
		{"grow with a limit", qp.SRQAttr{MaxWR: 32, SRQLimit: 8}, qp.SRQAttrMaxWR | qp.SRQAttrLimit, true},
		{"shrink below limit", qp.SRQAttr{MaxWR: 6}, qp.SRQAttrMaxWR, false},
		{"shrink to posted", qp.SRQAttr{MaxWR: 3, SRQLimit: 0}, qp.SRQAttrMaxWR | qp.SRQAttrLimit, true},
	} {
		before := f.srq.Query()
		err := f.srq.Modify(&tt.a, tt.m)
		if (err == nil) != tt.ok || err != nil && !errors.Is(err, qp.ErrAttr) {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if err != nil && f.srq.Query() != before {
			t.Fatalf("%s: refused, but the SRQ went from %+v to %+v", tt.name, before, f.srq.Query())
		}
	}
	if a := f.srq.Query(); a.MaxWR != 3 || a.SRQLimit != 0 {
		t.Fatalf("Query %+v, want max_wr 3, limit 0", a)
	}
	if _, err := f.srq.PostRecv([]qp.RecvWR{{WRID: 9}}); !errors.Is(err, qp.ErrQueueFull) {
		t.Fatalf("posting to a full SRQ of 3: %v", err)
	}
}

// TestSRQNotFlushedByQPError: a QP that goes to ERR completes the WQE it
// had taken with WR_FLUSH_ERR and leaves the SRQ's WQEs to the other QP,
// whether the application moved it or a fatal NAK did.
func TestSRQNotFlushedByQPError(t *testing.T) {
	f := newSRQFixture(t, 8)
	a, _ := f.qp(t, qp.TypeRC, 0x11)
	b, _ := f.qp(t, qp.TypeRC, 0x12)
	c, _ := f.qp(t, qp.TypeRC, 0x13)
	f.post(t, srqSlot, 1, 2, 3, 4, 5)

	a.HandlePacket(rcSend(t, pattern(300, 1), 1)[0]) // takes WQE 1
	if err := toErr(a); err != nil {
		t.Fatal(err)
	}
	// C takes WQE 2 and gets a WRITE FIRST in the middle of its SEND:
	// out of sequence, a fatal NAK.
	c.HandlePacket(rcSend(t, pattern(300, 2), 1)[0])
	c.HandlePacket(request(t, wire.Headers{BTH: bth.Fields{Opcode: bth.RCRDMAWriteLast, PSN: 2}}, []byte("abcd")))
	if c.State() != qp.StateErr {
		t.Fatalf("QP C in %v after an out-of-sequence opcode", c.State())
	}
	b.HandlePacket(rcSend(t, pattern(10, 3), 1)[0]) // WQE 3
	got := f.poll(t)
	want := []struct {
		id     uint64
		qpn    uint32
		status cq.Status
	}{{1, 0x11, cq.StatusWRFlushErr}, {2, 0x13, cq.StatusWRFlushErr}, {3, 0x12, cq.StatusSuccess}}
	if len(got) != len(want) {
		t.Fatalf("completions %v; want %v", got, want)
	}
	for i, w := range want {
		if got[i].WRID != w.id || got[i].QPNum != w.qpn || got[i].Status != w.status {
			t.Errorf("completion %d: %+v, want WRID %d QP %#x %v", i, got[i], w.id, w.qpn, w.status)
		}
	}
	if n := f.srq.Posted(); n != 2 {
		t.Fatalf("%d WQEs left in the SRQ, want 2 (4 and 5)", n)
	}
	// PostSend in ERR flushes the QP's queues, not the SRQ.
	if _, err := a.PostSend([]qp.SendWR{{WRID: 9, Opcode: qp.WRSend}}); err != nil {
		t.Fatal(err)
	}
	if n := f.srq.Posted(); n != 2 {
		t.Fatalf("%d WQEs left in the SRQ after a post in ERR, want 2", n)
	}
}

// TestSRQUCClassE: on a UC QP with an SRQ, what drops a message without
// one completes the WQE it took in error instead (IBTA class E, rxe): a
// SEND longer than the WQE and a lost MIDDLE with REM_INV_REQ_ERR, a
// missing LAST too (the new message is delivered, as without an SRQ), a
// WRITE with immediate with a bad rkey with REM_ACCESS_ERR. The QP stays
// in RTS and sends nothing.
func TestSRQUCClassE(t *testing.T) {
	f := newSRQFixture(t, 16)
	q, port := f.qp(t, qp.TypeUC, 0x11)
	f.post(t, 300, 1, 2, 3, 4, 5, 6, 7)

	psn := bth.PSN(1)
	deliver := func(pkts []*wire.Packet) {
		for _, p := range pkts {
			q.HandlePacket(p)
		}
		psn = psn.Add(uint32(len(pkts)))
	}
	deliver(ucSend(t, pattern(400, 1), psn)) // WQE 1: 400 bytes do not fit 300
	lost := ucSend(t, pattern(600, 2), psn)  // WQE 2: its MIDDLE is lost
	q.HandlePacket(lost[0])
	q.HandlePacket(lost[2])
	psn = psn.Add(3)
	noLast := ucSend(t, pattern(500, 3), psn) // WQE 3: its LAST is lost...
	q.HandlePacket(noLast[0])
	psn = psn.Add(2)
	only := pattern(50, 4)
	deliver(ucSend(t, only, psn)) // ...and this ONLY fills WQE 4
	q.HandlePacket(request(t, wire.Headers{BTH: bth.Fields{Opcode: bth.UCRDMAWriteOnlyWithImm, PSN: psn},
		RETH: reth.Fields{VA: f.m.IOVA(), RKey: reth.Key(f.m.RKey()) + 1, DMALen: 4}, Imm: 7}, []byte("bad!"))) // WQE 5
	psn++
	q.HandlePacket(request(t, wire.Headers{BTH: bth.Fields{Opcode: bth.UCRDMAWriteOnlyWithImm, PSN: psn},
		RETH: reth.Fields{VA: f.m.IOVA() + 60*srqSlot, RKey: reth.Key(f.m.RKey()), DMALen: 4}, Imm: 8}, []byte("good"))) // WQE 6

	want := []struct {
		id     uint64
		status cq.Status
		op     cq.Opcode
	}{
		{1, cq.StatusRemInvReqErr, cq.OpRecv},
		{2, cq.StatusRemInvReqErr, cq.OpRecv},
		{3, cq.StatusRemInvReqErr, cq.OpRecv},
		{4, cq.StatusSuccess, cq.OpRecv},
		{5, cq.StatusRemAccessErr, cq.OpRecv},
		{6, cq.StatusSuccess, cq.OpRecvRDMAWithImm},
	}
	got := f.poll(t)
	if len(got) != len(want) {
		t.Fatalf("completions %+v; want %d", got, len(want))
	}
	for i, w := range want {
		if got[i].WRID != w.id || got[i].Status != w.status || w.status == cq.StatusSuccess && got[i].Opcode != w.op {
			t.Errorf("completion %d: %+v; want WRID %d %v", i, got[i], w.id, w.status)
		}
	}
	if !bytes.Equal(f.slot(4)[:50], only) || string(f.mem[60*srqSlot:][:4]) != "good" {
		t.Fatal("the good messages did not land")
	}
	if q.State() != qp.StateRTS || len(port.sent) != 0 || f.srq.Posted() != 1 {
		t.Fatalf("state %v, %d packets sent, %d WQEs left; want RTS, none, 1", q.State(), len(port.sent), f.srq.Posted())
	}
}

// udQP returns a UD QP in RTS with Q_Key 0x1234 and a 1024-byte MTU,
// receiving from the fixture's SRQ.
func (f *srqFixture) udQP(t *testing.T) *UD {
	t.Helper()
	q, err := NewUD(&fakePort{mrs: f.mrs}, 0x21, qp.InitAttr{Type: qp.TypeUD, PD: f.pd, SendCQ: f.cq, RecvCQ: f.cq, SRQ: f.srq,
		Cap: qp.Cap{MaxSendWR: 1}}, 1024)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		a qp.Attr
		m qp.AttrMask
	}{
		{qp.Attr{State: qp.StateInit, Port: 1, QKey: 0x1234}, qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrQKey},
		{qp.Attr{State: qp.StateRTR}, qp.AttrState},
		{qp.Attr{State: qp.StateRTS}, qp.AttrState | qp.AttrSQPSN},
	} {
		if err := q.Modify(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

// TestSRQUD: a UD QP with an SRQ receives into its WQEs; one too small
// for the message completes with REM_INV_REQ_ERR (class E) and the QP
// stays up; a wrong Q_Key takes no WQE; with the SRQ empty the message
// is dropped; PostRecv on the QP is refused.
func TestSRQUD(t *testing.T) {
	f := newSRQFixture(t, 8)
	q := f.udQP(t)
	f.post(t, 100, 1)
	f.post(t, srqSlot, 2)
	ud := func(qkey uint32, payload []byte) *wire.Packet {
		return request(t, wire.Headers{BTH: bth.Fields{Opcode: bth.UDSendOnly}, DETH: deth.Fields{QKey: qkey, SrcQP: 0x99}}, payload)
	}
	q.HandlePacket(ud(0x1234, pattern(80, 1))) // 40 + 80 > 100: WQE 1 in error
	q.HandlePacket(ud(0x4321, pattern(8, 2)))  // Q_Key violation: no WQE taken
	msg := pattern(200, 3)
	q.HandlePacket(ud(0x1234, msg)) // WQE 2
	q.HandlePacket(ud(0x1234, msg)) // none left: dropped
	got := f.poll(t)
	if len(got) != 2 || got[0].WRID != 1 || got[0].Status != cq.StatusRemInvReqErr ||
		got[1].WRID != 2 || got[1].Status != cq.StatusSuccess || got[1].ByteLen != GRHLen+200 || got[1].SrcQP != 0x99 {
		t.Fatalf("completions %+v", got)
	}
	if !bytes.Equal(f.slot(2)[GRHLen:GRHLen+200], msg) {
		t.Fatal("the message did not land behind the GRH area")
	}
	if st := q.Stats(); st.UDDropped != 2 || st.QKeyViolations != 1 || q.State() != qp.StateRTS {
		t.Fatalf("ud_dropped %d, qkey violations %d, state %v", st.UDDropped, st.QKeyViolations, q.State())
	}
	if _, err := q.PostRecv([]qp.RecvWR{{WRID: 3}}); !errors.Is(err, qp.ErrBadWR) {
		t.Fatalf("PostRecv on a UD QP with an SRQ: %v", err)
	}
}

// TestSRQConcurrentQPs: QPs driven from goroutines of their own, and a
// poster, share one SRQ; every WQE completes exactly once. Run with -race.
func TestSRQConcurrentQPs(t *testing.T) {
	const perQP, nqp = 300, 3
	f := newSRQFixture(t, 64)
	qps := make([]*QP, nqp)
	for i := range qps {
		qps[i], _ = f.qp(t, qp.TypeRC, bth.QPN(0x11+i))
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // posts every WQE, waiting for room
		defer wg.Done()
		for id := uint64(0); id < perQP*nqp; {
			wr := qp.RecvWR{WRID: id, SGList: []qp.SGE{{Addr: f.m.IOVA() + id*8, Length: 8, LKey: f.m.LKey()}}}
			if _, err := f.srq.PostRecv([]qp.RecvWR{wr}); err == nil {
				id++
			}
		}
	}()
	for _, q := range qps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for psn := bth.PSN(1); psn <= perQP; {
				before := q.expectedPSN()
				q.HandlePacket(rcSend(t, []byte("ping"), psn)[0])
				if q.expectedPSN() != before { // accepted; else RNR: send it again
					psn++
				}
			}
		}()
	}
	wg.Wait()
	var ids []uint64
	for {
		wcs := f.poll(t)
		if len(wcs) == 0 {
			break
		}
		for _, wc := range wcs {
			if wc.Status != cq.StatusSuccess {
				t.Fatalf("completion %+v", wc)
			}
			ids = append(ids, wc.WRID)
		}
	}
	slices.Sort(ids)
	if len(ids) != perQP*nqp || slices.Compact(ids)[len(ids)-1] != perQP*nqp-1 || len(slices.Compact(ids)) != perQP*nqp {
		t.Fatalf("%d completions of %d WQEs", len(ids), perQP*nqp)
	}
}

// expectedPSN returns the PSN the QP's responder expects next.
func (q *QP) expectedPSN() bth.PSN {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.resp.psn
}

package rnic_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/rnic/rnictest"
)

// udSide is a device with one UD QP in RTS, as ibv_ud_pingpong sets it
// up: INIT with a P_Key index, port and Q_Key, RTR with nothing more, RTS
// with a send PSN.
type udSide struct {
	dev      *rnic.Device
	pd       *mr.PD
	scq, rcq *cq.CQ
	buf      []byte
	mr       *mr.MR
	qp       *rnic.QP
}

const udQKey = 0x11111111 // perftest's DEF_QKEY

func newUDSide(t *testing.T, f *mem.Fabric, addr string, qkey uint32) *udSide {
	t.Helper()
	dev := rnictest.Open(t, f, addr)
	s := &udSide{dev: dev, pd: dev.AllocPD(), buf: make([]byte, 1<<16)}
	var err error
	if s.scq, err = dev.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	if s.rcq, err = dev.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	if s.mr, err = dev.RegMR(s.pd, s.buf, mr.LocalWrite); err != nil {
		t.Fatal(err)
	}
	s.qp, err = dev.CreateQP(qp.InitAttr{Type: qp.TypeUD, PD: s.pd, SendCQ: s.scq, RecvCQ: s.rcq,
		Cap: qp.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}})
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.qp.Modify(&qp.Attr{State: qp.StateInit, Port: 1, QKey: qkey}, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrQKey))
	must(t, s.qp.Modify(&qp.Attr{State: qp.StateRTR}, qp.AttrState))
	must(t, s.qp.Modify(&qp.Attr{State: qp.StateRTS, SQPSN: 0x123}, qp.AttrState|qp.AttrSQPSN))
	return s
}

func (s *udSide) postRecv(t *testing.T, id uint64, off, n int) {
	t.Helper()
	if _, err := s.qp.PostRecv([]qp.RecvWR{{WRID: id, SGList: []qp.SGE{{Addr: s.mr.IOVA() + uint64(off), Length: uint32(n), LKey: s.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
}

// send posts a signaled UD SEND of buf[off:off+n] to dst's QP.
func (s *udSide) send(t *testing.T, ah *qp.AH, dst *udSide, qkey uint32, id uint64, off, n int, imm bool) {
	t.Helper()
	wr := qp.SendWR{WRID: id, Opcode: qp.WRSend, Flags: qp.SendSignaled, AH: ah, RemoteQPN: dst.qp.Num(), RemoteQKey: qkey,
		SGList: []qp.SGE{{Addr: s.mr.IOVA() + uint64(off), Length: uint32(n), LKey: s.mr.LKey()}}}
	if imm {
		wr.Opcode, wr.ImmData = qp.WRSendWithImm, 0xdeadbeef
	}
	if _, err := s.qp.PostSend([]qp.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	status(t, wait(t, s.scq, 1, 5*time.Second), cq.StatusSuccess)
}

func (s *udSide) ahTo(t *testing.T, dst *udSide) *qp.AH {
	t.Helper()
	ah, err := s.dev.CreateAH(s.pd, qp.AddressVector{DGID: dst.dev.GIDs()[0], HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	return ah
}

// TestUDSendRecv: a UD SEND lands behind the 40-byte GRH area, which
// holds the sender's IP header (IPv4: 20 zero bytes, then the header;
// IPv6: the header); the completion says GRH, counts the 40 bytes, names
// the source QP and carries the immediate; an AH made from it reaches
// the sender back.
func TestUDSendRecv(t *testing.T) {
	for _, v := range []struct{ name, a, b string }{{"IPv4", "10.0.0.1", "10.0.0.2"}, {"IPv6", "fd00::1", "fd00::2"}} {
		t.Run(v.name, func(t *testing.T) {
			f := mem.NewFabric()
			a, b := newUDSide(t, f, v.a, udQKey), newUDSide(t, f, v.b, udQKey)
			fill(a.buf, 7)
			b.postRecv(t, 1, 0, 40+1000)
			a.send(t, a.ahTo(t, b), b, udQKey, 9, 100, 1000, true)
			wcs := wait(t, b.rcq, 1, 5*time.Second)
			wc := wcs[0]
			if wc.Status != cq.StatusSuccess || wc.Opcode != cq.OpRecv || wc.ByteLen != 1040 || wc.SrcQP != uint32(a.qp.Num()) ||
				wc.Flags != cq.FlagGRH|cq.FlagWithImm || wc.ImmData != 0xdeadbeef || wc.WRID != 1 {
				t.Fatalf("completion %v, want RECV of 1040 bytes from QP %#x with GRH and immediate 0xdeadbeef", wc, uint32(a.qp.Num()))
			}
			if !bytes.Equal(b.buf[40:1040], a.buf[100:1100]) {
				t.Fatal("the message behind the GRH differs from what was sent")
			}
			grh := b.buf[:40]
			src, dst := netip.MustParseAddr(v.a), netip.MustParseAddr(v.b)
			if src.Is4() {
				if !bytes.Equal(grh[:20], make([]byte, 20)) || grh[20]>>4 != 4 ||
					netip.AddrFrom4([4]byte(grh[32:36])) != src || netip.AddrFrom4([4]byte(grh[36:40])) != dst {
					t.Fatalf("GRH % x: want 20 zero bytes and the IPv4 header from %v to %v", grh, src, dst)
				}
			} else if grh[0]>>4 != 6 || netip.AddrFrom16([16]byte(grh[8:24])) != src || netip.AddrFrom16([16]byte(grh[24:40])) != dst {
				t.Fatalf("GRH % x: want the IPv6 header from %v to %v", grh, src, dst)
			}
			// The answer, addressed from the completion.
			ah, err := b.dev.CreateAHFromWC(b.pd, &wc, grh)
			if err != nil {
				t.Fatal(err)
			}
			if got := ah.AV().DGID.Unmap(); got != src {
				t.Fatalf("AH from the WC goes to %v, want %v", got, src)
			}
			a.postRecv(t, 2, 0, 40+8)
			b.send(t, ah, a, udQKey, 3, 40, 8, false)
			if wc := wait(t, a.rcq, 1, 5*time.Second)[0]; wc.Status != cq.StatusSuccess || wc.ByteLen != 48 || wc.SrcQP != uint32(b.qp.Num()) {
				t.Fatalf("answer's completion %v", wc)
			}
		})
	}
}

// TestUDDrops: what a UD QP cannot take is dropped and counted, never
// answered, and the receive it did not fit stays posted for the next:
// a wrong Q_Key, no receive posted, a receive too small for the GRH and
// the message. A privileged Q_Key (high bit) in the work request stands
// for the sender's own.
func TestUDDrops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := mem.NewFabric()
		a, b := newUDSide(t, f, "10.0.0.1", udQKey), newUDSide(t, f, "10.0.0.2", udQKey)
		ah := a.ahTo(t, b)
		noWC := func(what string) {
			t.Helper()
			time.Sleep(50 * time.Millisecond)
			var wc [1]cq.WC
			if n, _ := b.rcq.Poll(wc[:]); n != 0 {
				t.Fatalf("%s: completion %v, want none", what, wc[0])
			}
		}
		a.send(t, ah, b, udQKey, 1, 0, 16, false) // no receive posted
		noWC("no receive")
		b.postRecv(t, 7, 0, 40+16)
		a.send(t, ah, b, 0x22222222, 2, 0, 16, false) // wrong Q_Key
		noWC("wrong Q_Key")
		a.send(t, ah, b, udQKey, 3, 0, 17, false) // one byte too many
		noWC("too long")
		a.send(t, ah, b, 0x80000000, 4, 0, 16, false) // privileged: a's own, which is b's
		if wc := wait(t, b.rcq, 1, 5*time.Second)[0]; wc.WRID != 7 || wc.Status != cq.StatusSuccess || wc.ByteLen != 56 {
			t.Fatalf("completion %v, want receive 7 with the last message", wc)
		}
		st := b.qp.Stats()
		if st.QKeyViolations != 1 || st.UDDropped != 2 {
			t.Fatalf("counters: %d Q_Key violations, %d dropped; want 1 and 2", st.QKeyViolations, st.UDDropped)
		}
		if st.SentPkts != 0 {
			t.Fatalf("the UD QP sent %d packets: it answers nothing", st.SentPkts)
		}
	})
}

// TestUDLongerThanMTU: a message longer than the port's MTU sends nothing
// and completes successfully (IBTA C10-93.1.1, as rxe).
func TestUDLongerThanMTU(t *testing.T) {
	f := mem.NewFabric()
	a, b := newUDSide(t, f, "10.0.0.1", udQKey), newUDSide(t, f, "10.0.0.2", udQKey)
	mtu := a.dev.MTU().Bytes()
	b.postRecv(t, 1, 0, 1<<15)
	sent := a.qp.Stats().SentPkts
	a.send(t, a.ahTo(t, b), b, udQKey, 1, 0, mtu+1, false)
	if a.qp.Stats().SentPkts != sent {
		t.Fatal("a message longer than the MTU went out")
	}
	a.send(t, a.ahTo(t, b), b, udQKey, 2, 0, mtu, false)
	if wc := wait(t, b.rcq, 1, 5*time.Second)[0]; wc.ByteLen != uint32(40+mtu) {
		t.Fatalf("completion %v, want the MTU-sized message", wc)
	}
}

// TestUDVerbs: the UD column of the IBTA's attribute rules, and what a UD
// send work request may be.
func TestUDVerbs(t *testing.T) {
	f := mem.NewFabric()
	a, b := newUDSide(t, f, "10.0.0.1", udQKey), newUDSide(t, f, "10.0.0.2", udQKey)
	s := a.dev.AllocPD()
	c, _ := a.dev.CreateCQ(4)
	q, err := a.dev.CreateQP(qp.InitAttr{Type: qp.TypeUD, PD: s, SendCQ: c, RecvCQ: c, Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Modify(&qp.Attr{State: qp.StateInit, Port: 1}, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort); !errors.Is(err, qp.ErrAttr) {
		t.Errorf("RESET -> INIT without a Q_Key: %v, want ErrAttr", err)
	}
	if err := q.Modify(&qp.Attr{State: qp.StateInit, Port: 1, AccessFlags: mr.RemoteWrite}, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrQKey|qp.AttrAccessFlags); !errors.Is(err, qp.ErrAttr) {
		t.Errorf("RESET -> INIT with access flags: %v, want ErrAttr", err)
	}
	must(t, q.Modify(&qp.Attr{State: qp.StateInit, Port: 1, QKey: 5}, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrQKey))
	if err := q.Modify(&qp.Attr{State: qp.StateRTR, DestQPNum: 3}, qp.AttrState|qp.AttrDestQPN); !errors.Is(err, qp.ErrAttr) {
		t.Errorf("INIT -> RTR with a destination QP: %v, want ErrAttr", err)
	}
	ah := a.ahTo(t, b)
	sge := []qp.SGE{{Addr: a.mr.IOVA(), Length: 8, LKey: a.mr.LKey()}}
	for _, tt := range []struct {
		name string
		wr   qp.SendWR
	}{
		{"READ", qp.SendWR{Opcode: qp.WRRDMARead, AH: ah, SGList: sge}},
		{"WRITE", qp.SendWR{Opcode: qp.WRRDMAWrite, AH: ah, SGList: sge}},
		{"atomic", qp.SendWR{Opcode: qp.WRAtomicFetchAndAdd, AH: ah, SGList: sge}},
		{"no AH", qp.SendWR{Opcode: qp.WRSend, SGList: sge}},
		{"AH of another PD", qp.SendWR{Opcode: qp.WRSend, AH: qp.NewAH(s, ah.AV()), SGList: sge}},
	} {
		if _, err := a.qp.PostSend([]qp.SendWR{tt.wr}); !errors.Is(err, qp.ErrBadWR) {
			t.Errorf("%s on UD: %v, want ErrBadWR", tt.name, err)
		}
	}
	if _, err := a.dev.CreateAH(a.pd, qp.AddressVector{DGID: netip.MustParseAddr("fd00::9")}); err == nil {
		t.Error("an AH from an IPv4 GID to an IPv6 address: no error")
	}
	if _, err := a.dev.CreateAH(a.pd, qp.AddressVector{DGID: netip.MustParseAddr("10.0.0.9"), SGIDIndex: 5}); err == nil {
		t.Error("an AH with a source GID index past the table: no error")
	}
	// A bad local key fails the send with LOC_PROT_ERR and the QP errs.
	wr := qp.SendWR{WRID: 5, Opcode: qp.WRSend, AH: ah, RemoteQPN: b.qp.Num(), SGList: []qp.SGE{{Addr: a.mr.IOVA(), Length: 8, LKey: a.mr.LKey() + 1}}}
	if _, err := a.qp.PostSend([]qp.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	status(t, wait(t, a.scq, 1, 5*time.Second), cq.StatusLocProtErr)
	if st := a.qp.State(); st != qp.StateErr {
		t.Fatalf("state %v after a bad local key, want ERR", st)
	}
}

// TestUDServiceChecks: a UD packet to an RC QP, and an RC one to a UD QP,
// are dropped as bad opcodes before they reach the QP.
func TestUDServiceChecks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := mem.NewFabric()
		a, b := newUDSide(t, f, "10.0.0.1", udQKey), newUDSide(t, f, "10.0.0.2", udQKey)
		pd := b.dev.AllocPD()
		c, _ := b.dev.CreateCQ(4)
		rcq, err := b.dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: pd, SendCQ: c, RecvCQ: c, Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1}})
		if err != nil {
			t.Fatal(err)
		}
		before := b.dev.Counters().BadOpcode
		wr := qp.SendWR{Opcode: qp.WRSend, Flags: qp.SendSignaled, AH: a.ahTo(t, b), RemoteQPN: rcq.Num(), RemoteQKey: udQKey,
			SGList: []qp.SGE{{Addr: a.mr.IOVA(), Length: 8, LKey: a.mr.LKey()}}}
		if _, err := a.qp.PostSend([]qp.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		wait(t, a.scq, 1, 5*time.Second)
		deadline := time.Now().Add(5 * time.Second)
		for b.dev.Counters().BadOpcode == before {
			if time.Now().After(deadline) {
				t.Fatal("a UD SEND to an RC QP was not dropped as a bad opcode")
			}
			time.Sleep(time.Millisecond)
		}
	})
}

// TestGSI: QP 1 exists once CreateGSI makes it, sends with source QP 1,
// and takes only the GSI's Q_Key (0x80010000), whatever its own is.
func TestGSI(t *testing.T) {
	f := mem.NewFabric()
	a, b := newUDSide(t, f, "10.0.0.1", udQKey), newUDSide(t, f, "10.0.0.2", udQKey)
	gsi := func(s *udSide) *rnic.QP {
		q, err := s.dev.CreateGSI(qp.InitAttr{PD: s.pd, SendCQ: s.scq, RecvCQ: s.rcq, Cap: qp.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if q.Num() != rnic.GSIQPN {
			t.Fatalf("GSI QP is %#x, want 1", uint32(q.Num()))
		}
		must(t, q.Modify(&qp.Attr{State: qp.StateInit, Port: 1, QKey: 0x80010000}, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrQKey))
		must(t, q.Modify(&qp.Attr{State: qp.StateRTR}, qp.AttrState))
		must(t, q.Modify(&qp.Attr{State: qp.StateRTS}, qp.AttrState|qp.AttrSQPSN))
		return q
	}
	ga, gb := gsi(a), gsi(b)
	if _, err := a.dev.CreateGSI(qp.InitAttr{PD: a.pd, SendCQ: a.scq, RecvCQ: a.rcq, Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1}}); err == nil {
		t.Fatal("a second GSI QP: no error")
	}
	if _, err := gb.PostRecv([]qp.RecvWR{{WRID: 1, SGList: []qp.SGE{{Addr: b.mr.IOVA(), Length: 40 + 256, LKey: b.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	ah := a.ahTo(t, b)
	mad := func(qkey uint32) {
		wr := qp.SendWR{WRID: 2, Opcode: qp.WRSend, Flags: qp.SendSignaled, AH: ah, RemoteQPN: rnic.GSIQPN, RemoteQKey: qkey,
			SGList: []qp.SGE{{Addr: a.mr.IOVA(), Length: 256, LKey: a.mr.LKey()}}}
		if _, err := ga.PostSend([]qp.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		status(t, wait(t, a.scq, 1, 5*time.Second), cq.StatusSuccess)
	}
	mad(udQKey) // not the GSI's
	mad(0x80010000)
	wc := wait(t, b.rcq, 1, 5*time.Second)[0]
	if wc.SrcQP != 1 || wc.ByteLen != 296 || wc.QPNum != 1 {
		t.Fatalf("completion %v, want 296 bytes on QP 1 from QP 1", wc)
	}
	if v := gb.Stats().QKeyViolations; v != 1 {
		t.Fatalf("%d Q_Key violations on the GSI, want 1", v)
	}
}

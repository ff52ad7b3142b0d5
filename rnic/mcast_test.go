package rnic_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire/bth"
)

// mcastQKey is rdma_cm's Q_Key for UD and multicast (RDMA_UDP_QKEY).
const mcastQKey = 0x01234567

// sendMcast posts a signaled UD SEND with immediate of buf[off:off+n] to
// the multicast QP at ah's group, and waits for its completion.
func (s *udSide) sendMcast(t *testing.T, ah *qp.AH, id uint64, off, n int) {
	t.Helper()
	wr := qp.SendWR{WRID: id, Opcode: qp.WRSendWithImm, ImmData: uint32(s.qp.Num()), Flags: qp.SendSignaled, AH: ah,
		RemoteQPN: bth.MulticastQPN, RemoteQKey: mcastQKey,
		SGList: []qp.SGE{{Addr: s.mr.IOVA() + uint64(off), Length: uint32(n), LKey: s.mr.LKey()}}}
	if _, err := s.qp.PostSend([]qp.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	status(t, wait(t, s.scq, 1, 5*time.Second), cq.StatusSuccess)
}

// TestMcast: a UD SEND to the multicast QP at a group reaches every QP
// attached to the group, on every device, each into a receive of its own
// behind a GRH whose destination is the group; a QP with another Q_Key
// drops it; once detached, a QP receives nothing more; a destroyed QP
// leaves its groups, and the device's link the group with its last QP.
func TestMcast(t *testing.T) {
	for _, v := range []struct{ name, a, b, c, d, group string }{
		{"IPv4", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "::ffff:224.0.1.1"},
		{"IPv6", "fd00::1", "fd00::2", "fd00::3", "fd00::4", "ff0e::1:2"},
	} {
		t.Run(v.name, func(t *testing.T) {
			f := mem.NewFabric()
			a := newUDSide(t, f, v.a, mcastQKey)
			b, c := newUDSide(t, f, v.b, mcastQKey), newUDSide(t, f, v.c, mcastQKey)
			b2 := b.another(t, mcastQKey)
			other := newUDSide(t, f, v.d, udQKey) // another Q_Key: attached, it drops the group's SENDs
			group := netip.MustParseAddr(v.group)
			for _, s := range []*udSide{b, b2, c, other} {
				must(t, s.dev.AttachMcast(s.qp, group))
				s.postRecv(t, 1, 0, 40+100)
				s.postRecv(t, 2, 200, 40+100)
			}
			must(t, b.dev.AttachMcast(b.qp, group)) // again: no error, one attachment
			if g := b.dev.McastGroups(); g[group.Unmap()] != 2 || len(g) != 1 {
				t.Fatalf("b's groups %v, want %v with 2 QPs", g, group.Unmap())
			}
			fill(a.buf, 3)
			ah, err := a.dev.CreateAH(a.pd, qp.AddressVector{DGID: group, HopLimit: 64})
			if err != nil {
				t.Fatal(err)
			}
			a.sendMcast(t, ah, 7, 1000, 100)
			for _, s := range []*udSide{b, b2, c} {
				wc := wait(t, s.rcq, 1, 5*time.Second)[0]
				if wc.Status != cq.StatusSuccess || wc.WRID != 1 || wc.ByteLen != 140 || wc.SrcQP != uint32(a.qp.Num()) ||
					wc.Flags != cq.FlagGRH|cq.FlagWithImm || wc.ImmData != uint32(a.qp.Num()) {
					t.Fatalf("%v QP %#x: completion %v, want RECV 1 of 140 bytes from QP %#x with its QPN as immediate",
						s.dev.GIDs()[0], uint32(s.qp.Num()), wc, uint32(a.qp.Num()))
				}
				if !bytes.Equal(s.buf[40:140], a.buf[1000:1100]) {
					t.Fatalf("QP %#x: the message differs from what was sent", uint32(s.qp.Num()))
				}
				if dst := grhDst(s.buf[:40]); dst != group.Unmap() {
					t.Fatalf("QP %#x: the GRH's destination is %v, want the group %v", uint32(s.qp.Num()), dst, group.Unmap())
				}
			}
			for end := time.Now().Add(5 * time.Second); other.qp.Stats().QKeyViolations == 0 && time.Now().Before(end); {
				time.Sleep(time.Millisecond)
			}
			if n, _ := other.rcq.Poll(make([]cq.WC, 4)); n != 0 || other.qp.Stats().QKeyViolations != 1 {
				t.Fatalf("the QP with another Q_Key: %d completions and %d Q_Key violations, want 0 and 1", n, other.qp.Stats().QKeyViolations)
			}

			// b2 detached and c destroyed: only b receives the next.
			must(t, b.dev.DetachMcast(b2.qp, group))
			if err := b.dev.DetachMcast(b2.qp, group); err == nil {
				t.Fatal("detaching a QP that is not attached: no error")
			}
			must(t, c.qp.Destroy())
			if g := c.dev.McastGroups(); len(g) != 0 {
				t.Fatalf("c's groups %v after its QP was destroyed, want none", g)
			}
			noQP := c.dev.Counters().NoQP
			a.sendMcast(t, ah, 8, 2000, 100)
			if wc := wait(t, b.rcq, 1, 5*time.Second)[0]; wc.Status != cq.StatusSuccess || wc.WRID != 2 {
				t.Fatalf("b: completion %v, want RECV 2", wc)
			}
			time.Sleep(50 * time.Millisecond)
			if n, _ := b2.rcq.Poll(make([]cq.WC, 4)); n != 0 {
				t.Fatalf("the detached QP received %d more", n)
			}
			if got := c.dev.Counters().NoQP; got != noQP {
				t.Fatalf("c's link still in the group: %d packets for no QP, want %d", got, noQP)
			}
		})
	}
}

// another creates a second UD QP in RTS on s's device, with s's CQs and
// memory.
func (s *udSide) another(t *testing.T, qkey uint32) *udSide {
	t.Helper()
	o := *s
	var err error
	if o.rcq, err = s.dev.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	o.buf = make([]byte, 1<<12)
	if o.mr, err = s.dev.RegMR(s.pd, o.buf, s.mr.Access()); err != nil {
		t.Fatal(err)
	}
	if o.qp, err = s.dev.CreateQP(qp.InitAttr{Type: qp.TypeUD, PD: s.pd, SendCQ: s.scq, RecvCQ: o.rcq,
		Cap: qp.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	must(t, o.qp.Modify(&qp.Attr{State: qp.StateInit, Port: 1, QKey: qkey}, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrQKey))
	must(t, o.qp.Modify(&qp.Attr{State: qp.StateRTR}, qp.AttrState))
	must(t, o.qp.Modify(&qp.Attr{State: qp.StateRTS}, qp.AttrState|qp.AttrSQPSN))
	return &o
}

// grhDst returns the destination address of the GRH area grh: the IPv4
// header's behind 20 zero bytes, or the IPv6 header's.
func grhDst(grh []byte) netip.Addr {
	if grh[20]>>4 == 4 {
		return netip.AddrFrom4([4]byte(grh[36:40]))
	}
	return netip.AddrFrom16([16]byte(grh[24:40]))
}

// unicastOnly is a link that cannot join multicast groups.
type unicastOnly struct{ link.Link }

// TestMcastRefused: only a UD QP attaches to a group, only to a multicast
// GID, and only on a link that can join one; a group takes at most
// rnic.MaxMcastAttach QPs.
func TestMcastRefused(t *testing.T) {
	f := mem.NewFabric()
	s := newUDSide(t, f, "10.0.0.1", mcastQKey)
	group := netip.MustParseAddr("::ffff:239.1.2.3")
	if err := s.dev.AttachMcast(s.qp, netip.MustParseAddr("::ffff:10.0.0.2")); !errors.Is(err, rnic.ErrNotMcast) {
		t.Errorf("a unicast GID: %v, want ErrNotMcast", err)
	}
	rcq, err := s.dev.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := s.dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: s.pd, SendCQ: rcq, RecvCQ: rcq, Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.dev.AttachMcast(rc, group); err == nil {
		t.Error("an RC QP attached to a group")
	}
	for range rnic.MaxMcastAttach - 1 {
		must(t, s.dev.AttachMcast(s.another(t, mcastQKey).qp, group))
	}
	must(t, s.dev.AttachMcast(s.qp, group))
	if err := s.dev.AttachMcast(s.another(t, mcastQKey).qp, group); err == nil {
		t.Errorf("QP %d attached to a group", rnic.MaxMcastAttach+1)
	}

	ml, err := f.NewLink(netip.MustParseAddr("10.0.0.5"))
	if err != nil {
		t.Fatal(err)
	}
	dev, err := rnic.Open(rnic.Config{Link: unicastOnly{ml}})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd := dev.AllocPD()
	ucq, err := dev.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	ud, err := dev.CreateQP(qp.InitAttr{Type: qp.TypeUD, PD: pd, SendCQ: ucq, RecvCQ: ucq, Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.AttachMcast(ud, group); err == nil {
		t.Error("attached to a group on a link that cannot join one")
	}
}

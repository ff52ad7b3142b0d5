//go:build linux

package tap

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire/bth"
)

// TestMulticastOwnDevice: on a device over the tap link, a UD QP attached
// to a group receives what another QP of the same device sends to the
// group, as on rxe, whose host's kernel loops its multicast back.
func TestMulticastOwnDevice(t *testing.T) {
	needRoot(t)
	l := open(t, Config{Bridge: newBridge(t), Addrs: []netip.Prefix{prefix("10.9.0.5/24")}})
	dev, err := rnic.Open(rnic.Config{Link: l})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const qkey = 0x01234567
	pd := dev.AllocPD()
	buf := make([]byte, 4096)
	m, err := dev.RegMR(pd, buf, mr.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	newUD := func() (*rnic.QP, *cq.CQ) {
		c, err := dev.CreateCQ(8)
		if err != nil {
			t.Fatal(err)
		}
		q, err := dev.CreateQP(qp.InitAttr{Type: qp.TypeUD, PD: pd, SendCQ: c, RecvCQ: c, Cap: qp.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []struct {
			a    qp.Attr
			mask qp.AttrMask
		}{
			{qp.Attr{State: qp.StateInit, Port: 1, QKey: qkey}, qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrQKey},
			{qp.Attr{State: qp.StateRTR}, qp.AttrState},
			{qp.Attr{State: qp.StateRTS}, qp.AttrState | qp.AttrSQPSN},
		} {
			if err := q.Modify(&s.a, s.mask); err != nil {
				t.Fatal(err)
			}
		}
		return q, c
	}
	recv, rcq := newUD()
	send, scq := newUD()
	group := netip.MustParseAddr("::ffff:239.1.2.4")
	if err := dev.AttachMcast(recv, group); err != nil {
		t.Fatal(err)
	}
	if _, err := recv.PostRecv([]qp.RecvWR{{WRID: 1, SGList: []qp.SGE{{Addr: m.IOVA(), Length: 1024, LKey: m.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	ah, err := dev.CreateAH(pd, qp.AddressVector{DGID: group, HopLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	copy(buf[2048:], "to the group")
	wr := qp.SendWR{WRID: 2, Opcode: qp.WRSend, Flags: qp.SendSignaled, AH: ah, RemoteQPN: bth.MulticastQPN, RemoteQKey: qkey,
		SGList: []qp.SGE{{Addr: m.IOVA() + 2048, Length: 12, LKey: m.LKey()}}}
	if _, err := send.PostSend([]qp.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*cq.CQ{scq, rcq} {
		wcs := make([]cq.WC, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n, err := c.Wait(ctx, wcs)
		cancel()
		if err != nil || n != 1 || wcs[0].Status != cq.StatusSuccess {
			t.Fatalf("completion %v (%v), want a success", wcs[0], err)
		}
		if c == rcq && (wcs[0].ByteLen != 40+12 || string(buf[40:52]) != "to the group" || wcs[0].SrcQP != uint32(send.Num())) {
			t.Fatalf("received %v: %q, want the 12 bytes QP %#x sent", wcs[0], buf[40:52], uint32(send.Num()))
		}
	}
}

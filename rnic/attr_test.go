package rnic_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/rnic/rnictest"
)

// macLink is a mem link with an Ethernet address of its own, as the tap
// and xdp links have.
type macLink struct {
	*mem.Link
	mac net.HardwareAddr
}

func (l macLink) MAC() net.HardwareAddr { return l.mac }

// TestNodeGUID: a device on a link with an Ethernet address takes its
// modified EUI-64 as its node GUID, as rxe; one on a link without takes a
// unicast, locally administered one from its first GID, the same for the
// same GID and different for another.
func TestNodeGUID(t *testing.T) {
	f := mem.NewFabric()
	l, err := f.NewLink(netip.MustParseAddr("10.0.0.9"))
	if err != nil {
		t.Fatal(err)
	}
	dev, err := rnic.Open(rnic.Config{Link: macLink{l, net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}}})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if got, want := dev.NodeGUID(), uint64(0x505400fffe123456); got != want {
		t.Errorf("node GUID %#x, want %#x (the MAC's EUI-64)", got, want)
	}
	a, b := rnictest.Open(t, f, "10.0.0.1"), rnictest.Open(t, f, "10.0.0.2")
	ga, gb := a.NodeGUID(), b.NodeGUID()
	if ga == gb || ga>>56&3 != 2 || gb>>56&3 != 2 {
		t.Errorf("GUIDs %#x and %#x: want two different ones, unicast and locally administered", ga, gb)
	}
	if a2 := rnictest.Open(t, mem.NewFabric(), "10.0.0.1"); a2.NodeGUID() != ga {
		t.Errorf("the same GID gave GUIDs %#x and %#x", ga, a2.NodeGUID())
	}
	if q := a.Query(); q.NodeGUID != ga || q.SysImageGUID != ga {
		t.Errorf("Query's GUIDs %#x and %#x, want the node GUID %#x", q.NodeGUID, q.SysImageGUID, ga)
	}
}

// TestQuery: what Query and QueryPort report is what the device takes:
// a QP with the reported largest capacities is created, and one past
// them is refused; the port's active MTU is the device's, its GID table
// the device's.
func TestQuery(t *testing.T) {
	dev := rnictest.Open(t, mem.NewFabric(), "10.0.0.1")
	a := dev.Query()
	pd := dev.AllocPD()
	c, err := dev.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	most := qp.Cap{MaxSendWR: uint32(a.MaxQPWR), MaxRecvWR: uint32(a.MaxQPWR), MaxSendSGE: uint32(a.MaxSGE), MaxRecvSGE: uint32(a.MaxSGE), MaxInlineData: uint32(a.MaxInlineData)}
	q, err := dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: pd, SendCQ: c, RecvCQ: c, Cap: most})
	if err != nil {
		t.Fatalf("a QP of the largest capacities reported: %v", err)
	}
	q.Destroy()
	for _, over := range []qp.Cap{
		{MaxSendWR: uint32(a.MaxQPWR) + 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1},
		{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: uint32(a.MaxSGE) + 1, MaxRecvSGE: 1},
		{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: uint32(a.MaxInlineData) + 1},
	} {
		if q, err := dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: pd, SendCQ: c, RecvCQ: c, Cap: over}); err == nil {
			q.Destroy()
			t.Errorf("a QP past the reported limits (%+v) was created", over)
		}
	}
	if _, err := dev.CreateCQ(a.MaxCQE + 1); err == nil {
		t.Errorf("a CQ of %d entries, past max_cqe, was created", a.MaxCQE+1)
	}
	p := dev.QueryPort()
	if p.ActiveMTU != dev.MTU() || p.GIDTblLen != len(dev.GIDs()) || p.State != rnic.PortActive {
		t.Errorf("port %+v: want active MTU %v, %d GIDs, PORT_ACTIVE", p, dev.MTU(), len(dev.GIDs()))
	}
	if a.MaxMcastGrp != rnic.MaxMcastGroups || a.MaxQPRdAtom != qp.MaxRdAtomic || a.AtomicCap != rnic.AtomicHCA {
		t.Errorf("attributes %+v", a)
	}
}

var _ link.Link = macLink{}

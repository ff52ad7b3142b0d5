package cm

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire/bth"
)

// ErrMcastIPv6 is returned by JoinMulticast for an IPv6 group: the
// kernel's rdma_cm joins only IPv4 groups with RoCE v2 GIDs
// (cma_iboe_join_multicast's -ENOTSUPP).
var ErrMcastIPv6 = errors.New("cm: join multicast: operation not supported: RoCE v2 multicast groups are IPv4 ones")

// Multicast is a multicast group a UD QP joined with JoinMulticast: what
// rdma_cm's RDMA_CM_EVENT_MULTICAST_JOIN tells (its ud param) of where
// to send to the group.
type Multicast struct {
	// Group is the group's IPv4 address.
	Group netip.Addr
	// AV addresses the group: its MGID, the group's address
	// IPv4-mapped (::ffff:224.0.1.1, as cma_iboe_set_mgid makes it for
	// RoCE v2), from the device's GID of the local address, with hop
	// limit 64 and traffic class 0, as the kernel's join sets them.
	AV qp.AddressVector
	// QPN is the multicast QP (0xFFFFFF) and QKey rdma_cm's UDP Q_Key,
	// what a send to the group carries.
	QPN  bth.QPN
	QKey uint32

	dev      *rnic.Device
	q        *rnic.QP
	attached bool
}

// JoinMulticast joins the IPv4 multicast group as rdma_join_multicast
// does on a RoCE v2 device: q, a UD QP whose Q_Key is UDPQKey, is
// attached to the group's MGID (as librdmacm attaches the rdma_cm ID's
// QP), so that the device's link joins the group on the network (IGMP),
// unless sendOnly (RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: the QP sends to
// the group and receives nothing of it, and the host does not join).
// local is the device's address to send from; the zero Addr takes its
// first IPv4 one. On RoCE nothing is sent to join: there is no subnet
// manager, and the kernel completes the join at once.
func (m *Manager) JoinMulticast(group, local netip.Addr, q *rnic.QP, sendOnly bool) (*Multicast, error) {
	g := group.Unmap()
	switch {
	case !g.IsValid() || g.IsUnspecified():
		return nil, errors.New("cm: join multicast: no group address")
	case g.Is6():
		return nil, ErrMcastIPv6
	case !g.IsMulticast():
		return nil, fmt.Errorf("cm: join multicast: %v is not a multicast address", g)
	}
	if !local.IsValid() {
		local = m.LocalFor(g)
	}
	sgid := m.dev.GIDIndex(local)
	if sgid < 0 {
		return nil, fmt.Errorf("cm: join multicast: %v is not an address of the device", local)
	}
	mgid := netip.AddrFrom16(g.As16())
	mc := &Multicast{
		Group: g,
		AV:    qp.AddressVector{DGID: mgid, SGIDIndex: uint8(sgid), HopLimit: 64},
		QPN:   bth.MulticastQPN, QKey: UDPQKey,
		dev: m.dev, q: q,
	}
	if !sendOnly {
		if err := m.dev.AttachMcast(q, mgid); err != nil {
			return nil, fmt.Errorf("cm: join multicast: %w", err)
		}
		mc.attached = true
	}
	return mc, nil
}

// Leave leaves the group, as rdma_leave_multicast: the QP is detached
// from it.
func (mc *Multicast) Leave() error {
	if !mc.attached {
		return nil
	}
	mc.attached = false
	return mc.dev.DetachMcast(mc.q, mc.AV.DGID)
}

package rnic

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/wire"
)

// MaxMcastGroups and MaxMcastAttach are a device's limits on multicast,
// rxe's (rxe_param.h: RXE_MAX_MCAST_GRP, RXE_MAX_MCAST_QP_ATTACH), which
// ibv_query_device reports as max_mcast_grp and max_mcast_qp_attach: the
// groups its QPs may be attached to at once, and the QPs attached to one
// group.
const (
	MaxMcastGroups = 8192
	MaxMcastAttach = 56
)

// ErrNotMcast is returned by AttachMcast for a GID that is not a
// multicast address.
var ErrNotMcast = errors.New("not a multicast GID")

// AttachMcast attaches q, a UD QP, to the multicast group gid, as
// ibv_attach_mcast does (its LID has no meaning on RoCE): from then on q
// receives, besides what is sent to its own number, every UD SEND sent to
// the multicast QP (0xFFFFFF) at gid, when the packet's Q_Key is q's
// (IBTA Vol 1 §10.5.2.5). gid is an IPv4 multicast address, IPv4-mapped
// as RoCE v2 GIDs are (::ffff:224.0.1.1) or not, or an IPv6 one (ff00::/8).
//
// The device's link joins the group when the first QP is attached to it
// (link.Multicaster: IGMP or MLD on the network), and leaves it when the
// last is detached or destroyed. A link that cannot join a group refuses,
// and so does a QP that is not UD, as rdma-core's EINVAL. Attaching a QP
// to a group it is attached to already is no error, as on rxe.
func (d *Device) AttachMcast(q *QP, gid netip.Addr) error {
	if err := d.mcastArgs(q, gid); err != nil {
		return fmt.Errorf("rnic: attach multicast: %w", err)
	}
	g := gid.Unmap()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if d.qps[q.Num()] != q {
		return fmt.Errorf("rnic: attach multicast: QP %#x is destroyed", uint32(q.Num()))
	}
	qps, joined := d.mcast[g]
	switch {
	case slices.Contains(qps, q):
		return nil
	case !joined && len(d.mcast) >= MaxMcastGroups:
		return fmt.Errorf("rnic: attach multicast: the device's QPs are attached to %d groups, its most", MaxMcastGroups)
	case len(qps) >= MaxMcastAttach:
		return fmt.Errorf("rnic: attach multicast: %d QPs are attached to %v, the most one group takes", MaxMcastAttach, g)
	}
	if !joined {
		m, ok := d.link.(link.Multicaster)
		if !ok {
			return errors.New("rnic: attach multicast: the device's link cannot join a multicast group")
		}
		if err := m.JoinGroup(g); err != nil {
			return fmt.Errorf("rnic: attach multicast: %w", err)
		}
		if d.mcast == nil {
			d.mcast = make(map[netip.Addr][]*QP)
		}
	}
	// A new slice, never appended to in place: the receive path reads
	// the old one without the lock.
	d.mcast[g] = append(slices.Clip(qps), q)
	return nil
}

// DetachMcast detaches q from the multicast group gid, as
// ibv_detach_mcast. It fails if q is not attached to it.
func (d *Device) DetachMcast(q *QP, gid netip.Addr) error {
	if err := d.mcastArgs(q, gid); err != nil {
		return fmt.Errorf("rnic: detach multicast: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.detachMcastLocked(q, gid.Unmap()) {
		return fmt.Errorf("rnic: detach multicast: QP %#x is not attached to %v", uint32(q.Num()), gid)
	}
	return nil
}

// mcastArgs checks the arguments of AttachMcast and DetachMcast.
func (d *Device) mcastArgs(q *QP, gid netip.Addr) error {
	switch {
	case q == nil || q.dev != d:
		return errors.New("the QP is not one of the device's")
	case q.udq == nil || q.Num() == GSIQPN:
		return fmt.Errorf("QP %#x is not a UD QP: only UD QPs receive multicast", uint32(q.Num()))
	case !gid.Unmap().IsMulticast():
		return fmt.Errorf("%v: %w", gid, ErrNotMcast)
	}
	return nil
}

// detachMcastLocked takes q from group g, which the link leaves if q was
// its last QP, and reports whether q was attached to it. d.mu must be
// held.
func (d *Device) detachMcastLocked(q *QP, g netip.Addr) bool {
	qps := d.mcast[g]
	i := slices.Index(qps, q)
	if i < 0 {
		return false
	}
	if len(qps) == 1 {
		delete(d.mcast, g)
		if m, ok := d.link.(link.Multicaster); ok {
			m.LeaveGroup(g) // nothing to do about a failure: the device no longer listens
		}
		return true
	}
	d.mcast[g] = slices.Delete(slices.Clone(qps), i, i+1)
	return true
}

// detachAllMcastLocked takes q, being destroyed, from every group it is
// attached to. d.mu must be held.
func (d *Device) detachAllMcastLocked(q *QP) {
	for g, qps := range d.mcast {
		if slices.Contains(qps, q) {
			d.detachMcastLocked(q, g)
		}
	}
}

// McastGroups returns the multicast groups the device's QPs are attached
// to, and how many QPs each has.
func (d *Device) McastGroups() map[netip.Addr]int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	m := make(map[netip.Addr]int, len(d.mcast))
	for g, qps := range d.mcast {
		m[g] = len(qps)
	}
	return m
}

// receiveMcast hands p, a packet to the multicast QP, to each QP attached
// to its destination group, as rxe's rxe_rcv_mcast_pkt: each one checks
// the packet's Q_Key against its own and takes a receive of its own. A
// group no QP is attached to is counted as a missing QP. d.rx.mu must be
// held.
func (d *Device) receiveMcast(p *wire.Packet, pkt []byte) {
	d.mu.RLock()
	qps := d.mcast[p.Dst().Unmap()]
	d.mu.RUnlock()
	if len(qps) == 0 {
		d.noQP.Add(1)
		return
	}
	// Every QP of a group is UD and has no peer: what admit checks is
	// the same for each.
	if !d.admit(qps[0], p) {
		return
	}
	if d.cfg.PacketTrace != nil {
		d.cfg.PacketTrace(Received, pkt)
	}
	for _, q := range qps {
		q.e.HandlePacket(p) // a UD QP owes no ACK
	}
}

package xdp

import (
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/groups"
)

// Multicast. The XDP program takes every RoCE packet off the interface,
// to a group or not; what makes the interface receive a group's frames
// at all is the host's membership, which the kernel keeps for a socket:
// each link has one UDP socket of each family, made at Open in the
// link's namespace, that joins the groups on the interface (IGMP or MLD,
// and the interface's address filter), and the receive path takes the
// frames to those groups as its own.
type mcast struct {
	groups.Set
	fd4, fd6 int // the membership sockets, or -1
}

// open makes the membership sockets; a family the host does not
// have (IPv6 turned off) leaves its -1.
func (m *mcast) open() {
	m.fd4, _ = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	m.fd6, _ = unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
}

// close closes the membership sockets, which ends their memberships.
func (m *mcast) close() {
	for _, fd := range []int{m.fd4, m.fd6} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	m.fd4, m.fd6 = -1, -1
}

var _ link.Multicaster = (*Link)(nil)

// JoinGroup makes the interface a member of the multicast group, and the
// link receive what is sent to it. It implements link.Multicaster.
func (l *Link) JoinGroup(group netip.Addr) error {
	g := group.Unmap().WithZone("")
	if !g.IsMulticast() {
		return fmt.Errorf("xdp: join %v: not a multicast group", group)
	}
	l.rw.RLock()
	defer l.rw.RUnlock()
	if l.closed.Load() {
		return link.ErrClosed
	}
	if err := l.mc.Join(g, func() error { return l.membership(g, true) }); err != nil {
		return fmt.Errorf("xdp: join %v on %s: %w", g, l.name, err)
	}
	return nil
}

// LeaveGroup ends one JoinGroup of the group. It implements
// link.Multicaster.
func (l *Link) LeaveGroup(group netip.Addr) error {
	g := group.Unmap().WithZone("")
	l.rw.RLock()
	defer l.rw.RUnlock()
	err := l.mc.Leave(g, func() error {
		if l.closed.Load() {
			return nil // the sockets are closed, and their memberships with them
		}
		return l.membership(g, false)
	})
	if err != nil {
		return fmt.Errorf("xdp: leave %v: %w", g, err)
	}
	return nil
}

// membership joins (or leaves) g on the link's interface with the
// membership socket of g's family.
func (l *Link) membership(g netip.Addr, join bool) error {
	m := &l.mc
	if g.Is4() {
		if m.fd4 < 0 {
			return errors.New("no IPv4 socket")
		}
		op := unix.IP_ADD_MEMBERSHIP
		if !join {
			op = unix.IP_DROP_MEMBERSHIP
		}
		return unix.SetsockoptIPMreqn(m.fd4, unix.IPPROTO_IP, op, &unix.IPMreqn{Multiaddr: g.As4(), Ifindex: int32(l.ifindex)})
	}
	if m.fd6 < 0 {
		return errors.New("no IPv6 socket")
	}
	op := unix.IPV6_JOIN_GROUP
	if !join {
		op = unix.IPV6_LEAVE_GROUP
	}
	return unix.SetsockoptIPv6Mreq(m.fd6, unix.IPPROTO_IPV6, op, &unix.IPv6Mreq{Multiaddr: g.As16(), Interface: uint32(l.ifindex)})
}

package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/link"
)

// Multicast. The link's socket is bound to its own address, so it never
// gets what is sent to a group. Each group the link joins has a socket of
// its own, bound to the group's address and the link's port with
// SO_REUSEADDR (so that other processes on the host may join it too), and
// a member of the group on the interface that holds the link's address,
// as the kernel's rdma_cm makes the host one for rxe (IGMP or MLD). A
// goroutine reads it, as the Go runtime's poller wakes it, and hands the
// packets on, headers synthesized, through a queue that Receive empties
// before it reads its own socket. Multicast is rare next to the link's
// unicast traffic: its packets take this slower road so that the other's
// takes not one step more than a load of the queue's length.

// mcastHopLimit is the IPv4 TTL or IPv6 hop limit of what the link sends
// to a group: rdma_cm's for RoCE v2 multicast (IPV6_DEFAULT_HOPLIMIT).
const mcastHopLimit = 64

// mcastQueueLen bounds the packets the groups' sockets have read and
// Receive has not yet taken; more are dropped and counted.
const mcastQueueLen = 1024

// mcast is the link's multicast state.
type mcast struct {
	mu     sync.Mutex
	groups map[netip.Addr]*group

	qmu  sync.Mutex
	q    [][]byte // packets read from the groups' sockets, whole, for Receive
	free [][]byte
	n    atomic.Int32 // len(q), for Receive and the waits
}

// group is one joined group: its socket, and how many joins it holds.
type group struct {
	joins int
	conn  *net.UDPConn
	done  chan struct{} // closed when its reader has returned
}

var _ link.Multicaster = (*Link)(nil)

// JoinGroup makes the link a member of the multicast group: the host
// joins it on the interface that holds the link's address, and the
// link receives what is sent to the group at its port. It implements
// link.Multicaster.
func (l *Link) JoinGroup(g netip.Addr) error {
	g = g.Unmap().WithZone("")
	if !g.IsMulticast() || g.Is4() != l.v4 {
		return fmt.Errorf("udp: join %v: not an IPv%d multicast group", g, map[bool]int{true: 4, false: 6}[l.v4])
	}
	m := &l.mc
	m.mu.Lock()
	defer m.mu.Unlock()
	if l.closed.Load() {
		return link.ErrClosed
	}
	if gr := m.groups[g]; gr != nil {
		gr.joins++
		return nil
	}
	conn, err := l.listenGroup(g)
	if err != nil {
		return fmt.Errorf("udp: join %v: %w", g, err)
	}
	gr := &group{joins: 1, conn: conn, done: make(chan struct{})}
	if m.groups == nil {
		m.groups = make(map[netip.Addr]*group)
	}
	m.groups[g] = gr
	go l.readGroup(gr.conn, g, gr.done)
	return nil
}

// LeaveGroup ends one JoinGroup of the group; at the last, the link's
// socket for it leaves the group and closes. It implements
// link.Multicaster.
func (l *Link) LeaveGroup(g netip.Addr) error {
	g = g.Unmap().WithZone("")
	m := &l.mc
	m.mu.Lock()
	gr := m.groups[g]
	if gr == nil {
		m.mu.Unlock()
		return fmt.Errorf("udp: leave %v: not a member", g)
	}
	if gr.joins--; gr.joins > 0 {
		m.mu.Unlock()
		return nil
	}
	delete(m.groups, g)
	m.mu.Unlock()
	err := gr.conn.Close() // the kernel drops the membership with the socket
	<-gr.done
	return err
}

// closeGroups closes every group's socket, for Close.
func (l *Link) closeGroups() {
	m := &l.mc
	m.mu.Lock()
	groups := m.groups
	m.groups = nil
	m.mu.Unlock()
	for _, gr := range groups {
		gr.conn.Close()
		<-gr.done
	}
}

// listenGroup opens the socket of group g: bound to g and the link's port,
// with SO_REUSEADDR so that other sockets of the host may join g too,
// and the host a member of g on the interface that holds the link's
// address. (The net package's multicast listeners bind the wildcard
// address, which would take the port from the host's other RoCE
// sockets, the link's own included.)
func (l *Link) listenGroup(g netip.Addr) (*net.UDPConn, error) {
	ifc, err := interfaceHolding(l.addr)
	if err != nil {
		return nil, err
	}
	fd, err := bindSock(g, l.port, 0, func(fd int) error {
		type opt struct{ level, name, value int }
		opts := []opt{{unix.SOL_SOCKET, unix.SO_REUSEADDR, 1}}
		if l.v4 {
			opts = append(opts, opt{unix.IPPROTO_IP, unix.IP_RECVTOS, 1},
				// Only the groups this socket joined, not every group
				// some socket of the host did.
				opt{unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0})
		} else {
			opts = append(opts, opt{unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1}, opt{unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1},
				opt{unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1}) // rxe's zero checksums
		}
		for _, o := range opts {
			if err := unix.SetsockoptInt(fd, o.level, o.name, o.value); err != nil {
				return fmt.Errorf("setsockopt: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bind %v: %w", netip.AddrPortFrom(g, l.port), err)
	}
	if l.v4 {
		err = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP,
			&unix.IPMreqn{Multiaddr: g.As4(), Address: l.addr.As4(), Ifindex: int32(ifc.Index)})
	} else {
		err = unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, &unix.IPv6Mreq{Multiaddr: g.As16(), Interface: uint32(ifc.Index)})
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("joining on interface %s: %w", ifc.Name, err)
	}
	return fileConn(fd, "udp:"+g.String())
}

// fileConn returns a *net.UDPConn over the socket fd, and closes fd: a
// goroutine that reads the conn is woken by the Go runtime's poller.
func fileConn(fd int, name string) (*net.UDPConn, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close() // FilePacketConn keeps a duplicate
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

// readGroup reads conn, group dst's socket, until it closes, and queues
// each datagram as a packet for Receive, its headers synthesized. A packet
// the queue has no room for is dropped and counted.
func (l *Link) readGroup(conn *net.UDPConn, dst netip.Addr, done chan struct{}) {
	defer close(done)
	hdr := headerLen(dst.Is4())
	buf := make([]byte, link.MaxPacket)
	oob := make([]byte, unix.CmsgSpace(4))
	m := &l.mc
	for {
		n, oobn, flags, from, err := conn.ReadMsgUDPAddrPort(buf[hdr:], oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			l.stats.receiveErrors.Add(1)
			continue
		}
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			l.stats.truncated.Add(1)
			continue
		}
		tos, _ := controls(oob[:oobn])
		size := l.headers(buf, netip.AddrPortFrom(from.Addr().Unmap(), from.Port()), dst, tos, n)
		m.qmu.Lock()
		if len(m.q) >= mcastQueueLen {
			m.qmu.Unlock()
			l.stats.mcastDropped.Add(1)
			continue
		}
		var b []byte
		if k := len(m.free); k > 0 {
			b, m.free = m.free[k-1], m.free[:k-1]
		} else {
			b = make([]byte, 0, link.MaxPacket)
		}
		m.q = append(m.q, append(b[:0], buf[:size]...))
		m.n.Store(int32(len(m.q)))
		m.qmu.Unlock()
		l.sock.Kick()
	}
}

// takeGroups copies up to len(bufs) packets the groups' sockets queued to
// bufs[i][link.Headroom:], sets sizes[i], and returns how many.
func (l *Link) takeGroups(bufs [][]byte, sizes []int) int {
	m := &l.mc
	m.qmu.Lock()
	defer m.qmu.Unlock()
	k := min(len(bufs), len(sizes), len(m.q))
	for i, p := range m.q[:k] {
		sizes[i] = copy(bufs[i][link.Headroom:], p)
		m.free = append(m.free, p)
	}
	m.q = append(m.q[:0], m.q[k:]...)
	m.n.Store(int32(len(m.q)))
	return k
}

//go:build linux

package tap

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/ether"
	"github.com/gorxe/gorxe/wire"
)

// Multicast. On a TAP, gorxe is a host of its own, so it joins a group
// as one: it takes the frames sent to the group's MAC and address, and
// tells the switch (a bridge snooping IGMP) with IGMPv2 membership
// reports (RFC 2236): one at the join, one for each query, and a leave
// at the last LeaveGroup. IPv4 groups only: RoCE v2 multicast, as the
// kernel's rdma_cm joins it, is IPv4's, and the link sends no MLD.
//
// IGMPv2, inside an IPv4 header with the Router Alert option (RFC 2113)
// and TTL 1:
//
//	 0      1          2          4
//	+------+----------+----------+
//	| type | max resp | checksum |
//	+------+----------+----------+
//	| group address              |
//	+----------------------------+
const (
	protoIGMP       = 2
	igmpLen         = 8
	igmpQuery       = 0x11
	igmpV2Report    = 0x16
	igmpLeave       = 0x17
	igmpIPHeaderLen = 24 // with the Router Alert option
)

// allRouters is 224.0.0.2, where IGMPv2 leaves go.
var allRouters = [4]byte{224, 0, 0, 2}

// mcast is the link's multicast state.
type mcast struct {
	mu     sync.Mutex
	joins  map[[4]byte]int
	groups atomic.Pointer[map[[4]byte]struct{}] // the groups joined, for the receive path
}

// has reports whether the link has joined group g.
func (m *mcast) has(g [4]byte) bool {
	set := m.groups.Load()
	if set == nil {
		return false
	}
	_, ok := (*set)[g]
	return ok
}

// publish sets the receive path's set of groups to the joined ones.
// m.mu must be held.
func (m *mcast) publish() {
	set := make(map[[4]byte]struct{}, len(m.joins))
	for g := range m.joins {
		set[g] = struct{}{}
	}
	m.groups.Store(&set)
}

var _ link.Multicaster = (*Link)(nil)

// JoinGroup makes the link a member of the IPv4 multicast group: it
// reports its membership (IGMPv2) and receives what is sent to the
// group. It implements link.Multicaster.
func (l *Link) JoinGroup(group netip.Addr) error {
	g := group.Unmap()
	switch {
	case !g.IsMulticast():
		return fmt.Errorf("tap: join %v: not a multicast group", group)
	case !g.Is4():
		return fmt.Errorf("tap: join %v: IPv6 groups are not supported: the tap link sends no MLD", group)
	case len(l.v4) == 0:
		return fmt.Errorf("tap: join %v: the link has no IPv4 address to report from", group)
	}
	if l.closed.Load() {
		return link.ErrClosed
	}
	m := &l.mc
	m.mu.Lock()
	defer m.mu.Unlock()
	a := g.As4()
	if m.joins == nil {
		m.joins = make(map[[4]byte]int)
	}
	if m.joins[a]++; m.joins[a] == 1 {
		m.publish()
		l.sendIGMP(igmpV2Report, a, a)
	}
	return nil
}

// LeaveGroup ends one JoinGroup of the group; at the last the link sends
// an IGMPv2 leave. It implements link.Multicaster.
func (l *Link) LeaveGroup(group netip.Addr) error {
	g := group.Unmap()
	m := &l.mc
	m.mu.Lock()
	defer m.mu.Unlock()
	a := g.As4()
	switch m.joins[a] {
	case 0:
		return fmt.Errorf("tap: leave %v: not a member", group)
	case 1:
		delete(m.joins, a)
		m.publish()
		if !l.closed.Load() {
			l.sendIGMP(igmpLeave, a, allRouters)
		}
		return nil
	}
	m.joins[a]--
	return nil
}

// inputIGMP answers a membership query with a report of each group it
// asks about that the link has joined (a general query asks about all).
// The IPv4 packet is f[ether.HeaderLen:ether.HeaderLen+total] with an
// ihl-byte header.
func (l *Link) inputIGMP(f []byte, ihl, total int) {
	igmp := f[ether.HeaderLen+ihl : ether.HeaderLen+total]
	if len(igmp) < igmpLen || internetChecksum(igmp) != 0 {
		l.stats.dropBadFrame.Add(1)
		return
	}
	if igmp[0] != igmpQuery {
		return // another host's report or leave: nothing to do
	}
	asked := [4]byte(igmp[4:8])
	m := &l.mc
	m.mu.Lock()
	defer m.mu.Unlock()
	for g := range m.joins {
		if asked == [4]byte{} || asked == g {
			l.sendIGMP(igmpV2Report, g, g)
		}
	}
}

// sendIGMP sends an IGMPv2 message of type typ about group to dst, from
// the link's first IPv4 address.
func (l *Link) sendIGMP(typ byte, group, dst [4]byte) {
	mac, _ := ether.MulticastMAC(netip.AddrFrom4(dst))
	l.smu.Lock()
	defer l.smu.Unlock()
	b := l.sbuf[:ether.HeaderLen+igmpIPHeaderLen+igmpLen]
	ether.PutHeader(b, mac, l.mac, ether.TypeIPv4)
	ip := b[ether.HeaderLen : ether.HeaderLen+igmpIPHeaderLen]
	clear(ip)
	ip[0], ip[1] = 0x46, 0xc0 // IHL 6; precedence 6 (internetwork control), as Linux sends IGMP
	binary.BigEndian.PutUint16(ip[2:], igmpIPHeaderLen+igmpLen)
	ip[8], ip[9] = 1, protoIGMP
	copy(ip[12:16], l.v4[0][:])
	copy(ip[16:20], dst[:])
	ip[20], ip[21] = 0x94, 0x04 // Router Alert, value 0
	wire.IPv4(ip).UpdateChecksum()
	igmp := b[ether.HeaderLen+igmpIPHeaderLen:]
	clear(igmp)
	igmp[0] = typ
	copy(igmp[4:8], group[:])
	binary.BigEndian.PutUint16(igmp[2:], internetChecksum(igmp))
	l.stats.igmp.Add(1)
	_ = l.write(b)
}

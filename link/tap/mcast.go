//go:build linux

package tap

import (
	"encoding/binary"
	"fmt"
	"net/netip"

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
	return l.mc.Join(g, func() error {
		l.sendIGMP(igmpV2Report, g.As4(), g.As4())
		return nil
	})
}

// LeaveGroup ends one JoinGroup of the group; at the last the link sends
// an IGMPv2 leave. It implements link.Multicaster.
func (l *Link) LeaveGroup(group netip.Addr) error {
	g := group.Unmap()
	err := l.mc.Leave(g, func() error {
		if !l.closed.Load() {
			l.sendIGMP(igmpLeave, g.As4(), allRouters)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("tap: leave %v: %w", group, err)
	}
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
	l.mc.Each(func(g netip.Addr) {
		if asked == [4]byte{} || asked == g.As4() {
			l.sendIGMP(igmpV2Report, g.As4(), g.As4())
		}
	})
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

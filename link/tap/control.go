//go:build linux

package tap

import (
	"encoding/binary"
	"net/netip"

	"github.com/gorxe/gorxe/link/internal/ether"
	"github.com/gorxe/gorxe/wire"
)

// ARP for IPv4 over Ethernet (RFC 826):
//
//	 0       2       4    5    6       8            14      18           24      28
//	+-------+-------+----+----+-------+------------+-------+------------+-------+
//	| htype | ptype |hlen|plen| oper  | sender MAC | s. IP | target MAC | t. IP |
//	|   1   | 0800  | 6  | 4  | 1 / 2 |            |       |            |       |
//	+-------+-------+----+----+-------+------------+-------+------------+-------+
const (
	arpLen     = 28
	arpRequest = 1
	arpReply   = 2
)

// inputARP answers ARP requests for our addresses and learns from requests
// for them, from replies and from gratuitous ARP.
func (l *Link) inputARP(f []byte, n int) {
	a := f[ether.HeaderLen:n]
	if len(a) < arpLen || binary.BigEndian.Uint32(a[0:4]) != 0x00010800 || a[4] != 6 || a[5] != 4 {
		l.stats.dropBadFrame.Add(1)
		return
	}
	oper := binary.BigEndian.Uint16(a[6:8])
	sha, spa, tpa := [6]byte(a[8:14]), [4]byte(a[14:18]), [4]byte(a[24:28])
	switch {
	case oper == arpRequest && l.isV4(tpa):
		if spa != [4]byte{} { // not an address probe (RFC 5227)
			l.learn(addr4(spa[:]), sha, true)
		}
		l.stats.arp.Add(1)
		m := putARP(f, arpReply, l.mac, tpa, sha, spa, sha)
		_ = l.write(f[:m])
	case oper == arpReply || oper == arpRequest && spa == tpa:
		l.stats.arp.Add(1)
		l.learn(addr4(spa[:]), sha, false)
	default:
		l.stats.dropNotForUs.Add(1)
	}
}

// putARP builds an Ethernet frame carrying an ARP packet into b and
// returns its length.
func putARP(b []byte, oper uint16, sha [6]byte, spa [4]byte, tha [6]byte, tpa [4]byte, ethDst [6]byte) int {
	ether.PutHeader(b, ethDst, sha, ether.TypeARP)
	a := b[ether.HeaderLen : ether.HeaderLen+arpLen]
	binary.BigEndian.PutUint32(a[0:4], 0x00010800)
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:8], oper)
	copy(a[8:14], sha[:])
	copy(a[14:18], spa[:])
	copy(a[18:24], tha[:])
	copy(a[24:28], tpa[:])
	return ether.HeaderLen + arpLen
}

// ICMP echo (RFC 792) and ICMPv6 echo (RFC 4443 §4) share a layout:
//
//	 0      1      2          4            6
//	+------+------+----------+------------+------------+-------------
//	| type | code | checksum | identifier | sequence   | data ...
//	+------+------+----------+------------+------------+-------------
const (
	icmpEchoReply    = 0
	icmpEchoRequest  = 8
	icmp6EchoRequest = 128
	icmp6EchoReply   = 129
	icmp6NeighborSol = 135
	icmp6NeighborAdv = 136
	ndpOptSourceLLA  = 1
	ndpOptTargetLLA  = 2
	ndpHopLimit      = 255 // RFC 4861 §7.1: anything else was forwarded
	replyHopLimit    = 64
	naSolicited      = 1 << 30
	naOverride       = 1 << 29
	ndpLen           = 24 // NS and NA without options
	ndpWithLLA       = ndpLen + 8
	nsFrameLen       = ether.HeaderLen + ipv6Len + ndpWithLLA
	minEchoLen       = 8
)

// inputICMPv4 answers an echo request in place: the IPv4 packet is
// f[ether.HeaderLen:ether.HeaderLen+total] with an ihl-byte header.
func (l *Link) inputICMPv4(f []byte, ihl, total int) {
	ip := f[ether.HeaderLen : ether.HeaderLen+total]
	icmp := ip[ihl:]
	if len(icmp) < minEchoLen || internetChecksum(icmp) != 0 {
		l.stats.dropBadFrame.Add(1)
		return
	}
	if icmp[0] != icmpEchoRequest || icmp[1] != 0 {
		l.stats.dropNotRoCE.Add(1)
		return
	}
	ether.PutHeader(f, [6]byte(f[6:12]), l.mac, ether.TypeIPv4)
	h := wire.IPv4(ip)
	src, dst := h.Src(), h.Dst()
	h.SetSrc(dst)
	h.SetDst(src)
	h.SetTTL(replyHopLimit)
	h.UpdateChecksum()
	icmp[0] = icmpEchoReply
	icmp[2], icmp[3] = 0, 0
	binary.BigEndian.PutUint16(icmp[2:], internetChecksum(icmp))
	l.stats.icmp.Add(1) // before the reply goes out, for whoever waits for it
	_ = l.write(f[:ether.HeaderLen+total])
}

// inputICMPv6 answers echo requests and neighbour solicitations for our
// addresses and learns from advertisements. The IPv6 packet is
// f[ether.HeaderLen:ether.HeaderLen+total]; unicast says it came to our MAC address.
func (l *Link) inputICMPv6(f []byte, total int, unicast bool) {
	ip := f[ether.HeaderLen : ether.HeaderLen+total]
	icmp := ip[ipv6Len:]
	if len(icmp) < 4 || icmp6Checksum(ip[8:24], ip[24:40], icmp) != 0 {
		l.stats.dropBadFrame.Add(1)
		return
	}
	src := [16]byte(ip[8:24])
	switch icmp[0] {
	case icmp6EchoRequest:
		if !unicast || len(icmp) < minEchoLen || icmp[1] != 0 {
			l.stats.dropNotForUs.Add(1)
			return
		}
		ether.PutHeader(f, [6]byte(f[6:12]), l.mac, ether.TypeIPv6)
		h := wire.IPv6(ip)
		h.SetSrc(h.Dst())
		h.SetDst(addr16(src[:]))
		h.SetHopLimit(replyHopLimit)
		icmp[0] = icmp6EchoReply
		icmp[2], icmp[3] = 0, 0
		binary.BigEndian.PutUint16(icmp[2:], icmp6Checksum(ip[8:24], ip[24:40], icmp))
		l.stats.icmp.Add(1)
		_ = l.write(f[:ether.HeaderLen+total])

	case icmp6NeighborSol:
		// RFC 4861 §4.3 and §7.1.1 (validation), §7.2.4 (the answer).
		if ip[7] != ndpHopLimit || icmp[1] != 0 || len(icmp) < ndpLen {
			l.stats.dropBadFrame.Add(1)
			return
		}
		target := [16]byte(icmp[8:24])
		if !l.isV6(target) {
			l.stats.dropNotForUs.Add(1)
			return
		}
		sll, has, ok := ndpOption(icmp[ndpLen:], ndpOptSourceLLA)
		dad := src == [16]byte{} // duplicate address detection (RFC 4862)
		if !ok || dad && has {
			l.stats.dropBadFrame.Add(1)
			return
		}
		ethDst, dst, flags := [6]byte(f[6:12]), src, uint32(naSolicited|naOverride)
		if has {
			ethDst = sll
			l.learn(addr16(src[:]), sll, true)
		}
		if dad {
			ethDst, dst, flags = ether.IPv6AllNode, allNodes, naOverride
		}
		l.stats.ndp.Add(1)
		m := putNA(f, l.mac, ethDst, target, dst, target, flags)
		_ = l.write(f[:m])

	case icmp6NeighborAdv:
		if ip[7] != ndpHopLimit || icmp[1] != 0 || len(icmp) < ndpLen {
			l.stats.dropBadFrame.Add(1)
			return
		}
		tll, has, ok := ndpOption(icmp[ndpLen:], ndpOptTargetLLA)
		if !ok {
			l.stats.dropBadFrame.Add(1)
			return
		}
		l.stats.ndp.Add(1)
		if has {
			l.learn(addr16(icmp[8:24]), tll, false)
		}

	default:
		l.stats.dropNotRoCE.Add(1)
	}
}

// ndpOption finds a link-layer address option of type typ (RFC 4861 §4.6.1)
// among opts. ok is false if the options are malformed.
func ndpOption(opts []byte, typ byte) (mac [6]byte, has, ok bool) {
	for len(opts) > 0 {
		if len(opts) < 2 {
			return mac, false, false
		}
		n := int(opts[1]) * 8
		if n == 0 || n > len(opts) {
			return mac, false, false
		}
		if opts[0] == typ && n >= 8 {
			mac, has = [6]byte(opts[2:8]), true
		}
		opts = opts[n:]
	}
	return mac, has, true
}

// putNS builds a neighbour solicitation for target into b: from src to
// target's solicited-node multicast address, with our MAC address as the
// source link-layer address option (RFC 4861 §4.3, §7.2.2).
func putNS(b []byte, mac [6]byte, src, target [16]byte) int {
	group := solicitedNode(target)
	ether.PutHeader(b, [6]byte{0x33, 0x33, group[12], group[13], group[14], group[15]}, mac, ether.TypeIPv6)
	icmp := putIPv6(b[ether.HeaderLen:], src, group, ndpWithLLA)
	icmp[0], icmp[1] = icmp6NeighborSol, 0
	binary.BigEndian.PutUint32(icmp[4:8], 0)
	copy(icmp[8:24], target[:])
	icmp[24], icmp[25] = ndpOptSourceLLA, 1
	copy(icmp[26:32], mac[:])
	binary.BigEndian.PutUint16(icmp[2:4], icmp6Checksum(src[:], group[:], icmp))
	return nsFrameLen
}

// putNA builds a neighbour advertisement for target into b, with our MAC
// address as the target link-layer address option (RFC 4861 §4.4).
func putNA(b []byte, mac, ethDst [6]byte, src, dst, target [16]byte, flags uint32) int {
	ether.PutHeader(b, ethDst, mac, ether.TypeIPv6)
	icmp := putIPv6(b[ether.HeaderLen:], src, dst, ndpWithLLA)
	icmp[0], icmp[1] = icmp6NeighborAdv, 0
	binary.BigEndian.PutUint32(icmp[4:8], flags)
	copy(icmp[8:24], target[:])
	icmp[24], icmp[25] = ndpOptTargetLLA, 1
	copy(icmp[26:32], mac[:])
	binary.BigEndian.PutUint16(icmp[2:4], icmp6Checksum(src[:], dst[:], icmp))
	return nsFrameLen
}

// putIPv6 writes an IPv6 header for an ICMPv6 message of n bytes with the
// neighbour discovery hop limit, and returns the message's bytes with its
// checksum zeroed.
func putIPv6(b []byte, src, dst [16]byte, n int) []byte {
	wire.IPv6(b).Encode(&wire.IPv6Fields{
		PayloadLen: uint16(n),
		NextHeader: protoICMPv6,
		HopLimit:   ndpHopLimit,
		Src:        netip.AddrFrom16(src),
		Dst:        netip.AddrFrom16(dst),
	})
	icmp := b[ipv6Len : ipv6Len+n]
	icmp[2], icmp[3] = 0, 0
	return icmp
}

// internetChecksum returns the Internet checksum (RFC 1071) of b. Over
// data that includes its checksum it returns 0 if that checksum is right.
func internetChecksum(b []byte) uint16 { return ^wire.Checksum(b, 0) }

// icmp6Checksum is the ICMPv6 checksum of msg under the IPv6 pseudo-header
// (RFC 8200 §8.1, RFC 4443 §2.3). Over a message that includes its
// checksum it returns 0 if that checksum is right.
func icmp6Checksum(src, dst, msg []byte) uint16 {
	return ^wire.Checksum(msg, wire.PseudoHeaderChecksum(protoICMPv6, src, dst, uint16(len(msg))))
}

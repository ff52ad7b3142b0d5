//go:build linux

package tap

import (
	"encoding/binary"
	"net/netip"

	"github.com/gorxe/gorxe/link/internal/ether"
)

// The headers input reads, after the Ethernet header (package ether).
// Only untagged frames are accepted: the frame is read so that an
// untagged one's IP packet lands at link.Headroom, and a VLAN tag would
// put it 4 bytes off.
const (
	ipv4Len     = 20
	ipv6Len     = 40
	udpLen      = 8
	protoICMP   = 1
	protoUDP    = 17
	protoICMPv6 = 58
)

var allNodes = [16]byte{0: 0xff, 1: 0x02, 15: 1} // ff02::1

// input handles the frame f[:n] read from the TAP (f extends to the end of
// its buffer, room for building a reply in place). It returns the length
// of the IP packet at f[ether.HeaderLen:] if that is a RoCE packet for this host;
// otherwise it answers, learns from or drops the frame and returns 0.
func (l *Link) input(f []byte, n int) int {
	l.stats.framesIn.Add(1)
	if n < ether.HeaderLen || n > len(f) {
		l.stats.dropBadFrame.Add(1)
		return 0
	}
	dstMAC := [6]byte(f[0:6])
	switch binary.BigEndian.Uint16(f[12:14]) {
	case ether.TypeIPv4:
		// Unicast to us, or to a multicast MAC, which inputIPv4 narrows
		// to the groups joined.
		if dstMAC != l.mac && (!ether.IsMulticast(dstMAC) || dstMAC == ether.Broadcast) {
			l.stats.dropNotForUs.Add(1)
			return 0
		}
		return l.inputIPv4(f, n)
	case ether.TypeIPv6:
		// Unicast to us, or IPv6 multicast (33:33:...) which inputIPv6
		// narrows to the addresses neighbour discovery uses.
		if dstMAC != l.mac && (dstMAC[0] != 0x33 || dstMAC[1] != 0x33) {
			l.stats.dropNotForUs.Add(1)
			return 0
		}
		return l.inputIPv6(f, n, dstMAC == l.mac)
	case ether.TypeARP:
		if dstMAC != l.mac && dstMAC != ether.Broadcast {
			l.stats.dropNotForUs.Add(1)
			return 0
		}
		l.inputARP(f, n)
	case ether.TypeVLAN, ether.TypeQinQ:
		l.stats.dropBadFrame.Add(1)
	default:
		l.stats.dropNotRoCE.Add(1)
	}
	return 0
}

// IPv4 header (RFC 791 §3.1); offsets used here:
//
//	0: version, IHL   2: total length   6: flags, fragment offset
//	8: TTL   9: protocol   10: checksum   12: source   16: destination
func (l *Link) inputIPv4(f []byte, n int) int {
	ip := f[ether.HeaderLen:n]
	if len(ip) < ipv4Len || ip[0]>>4 != 4 {
		l.stats.dropBadFrame.Add(1)
		return 0
	}
	ihl := int(ip[0]&0xf) * 4
	total := int(binary.BigEndian.Uint16(ip[2:4]))
	if ihl < ipv4Len || total < ihl || total > len(ip) {
		l.stats.dropBadFrame.Add(1)
		return 0
	}
	if binary.BigEndian.Uint16(ip[6:8])&0x3fff != 0 { // MF or an offset: a fragment
		l.stats.dropBadFrame.Add(1)
		return 0
	}
	if dst := [4]byte(ip[16:20]); !l.isV4(dst) && !(l.mc.Has(netip.AddrFrom4(dst)) || dst[0]>>4 == 0xe && ip[9] == protoIGMP) {
		l.stats.dropNotForUs.Add(1)
		return 0
	}
	ip = ip[:total]
	switch ip[9] {
	case protoIGMP:
		l.inputIGMP(f, ihl, total)
		return 0
	case protoUDP:
		if len(ip) >= ihl+udpLen && binary.BigEndian.Uint16(ip[ihl+2:]) == l.port {
			return total
		}
	case protoICMP:
		l.inputICMPv4(f, ihl, total)
		return 0
	}
	l.stats.dropNotRoCE.Add(1)
	return 0
}

func (l *Link) isV4(a [4]byte) bool {
	for _, x := range l.v4 {
		if x == a {
			return true
		}
	}
	return false
}

func (l *Link) isV6(a [16]byte) bool {
	for _, x := range l.v6 {
		if x == a {
			return true
		}
	}
	return false
}

// isSolicitedNode reports whether a is the solicited-node multicast
// address (ff02::1:ffXX:XXXX, RFC 4291 §2.7.1) of one of our addresses.
func (l *Link) isSolicitedNode(a [16]byte) bool {
	for _, x := range l.v6 {
		if a == solicitedNode(x) {
			return true
		}
	}
	return false
}

func solicitedNode(a [16]byte) [16]byte {
	return [16]byte{0: 0xff, 1: 0x02, 11: 1, 12: 0xff, 13: a[13], 14: a[14], 15: a[15]}
}

// IPv6 header (RFC 8200 §3); offsets used here:
//
//	0: version, traffic class, flow label   4: payload length
//	6: next header   7: hop limit   8: source   24: destination
func (l *Link) inputIPv6(f []byte, n int, unicast bool) int {
	ip := f[ether.HeaderLen:n]
	if len(ip) < ipv6Len || ip[0]>>4 != 6 {
		l.stats.dropBadFrame.Add(1)
		return 0
	}
	total := ipv6Len + int(binary.BigEndian.Uint16(ip[4:6]))
	if total > len(ip) {
		l.stats.dropBadFrame.Add(1)
		return 0
	}
	ip = ip[:total]
	dst := [16]byte(ip[24:40])
	if unicast {
		if !l.isV6(dst) {
			l.stats.dropNotForUs.Add(1)
			return 0
		}
	} else if dst != allNodes && !l.isSolicitedNode(dst) {
		l.stats.dropNotForUs.Add(1)
		return 0
	}
	switch ip[6] {
	case protoUDP:
		if unicast && len(ip) >= ipv6Len+udpLen && binary.BigEndian.Uint16(ip[ipv6Len+2:]) == l.port {
			return total
		}
	case protoICMPv6:
		l.inputICMPv6(f, total, unicast)
		return 0
	}
	l.stats.dropNotRoCE.Add(1)
	return 0
}

func addr4(b []byte) netip.Addr  { return netip.AddrFrom4([4]byte(b)) }
func addr16(b []byte) netip.Addr { return netip.AddrFrom16([16]byte(b)) }

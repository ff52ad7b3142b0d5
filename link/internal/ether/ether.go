// Package ether writes and reads the Ethernet II headers of the links
// that send and receive whole frames (tap, xdp): the header in front of
// an IP packet, and where a received frame's IP packet starts.
//
//	 0                   6                  12      14
//	+-------------------+-------------------+-------+-------------
//	| destination MAC   | source MAC        | type  | payload ...
//	+-------------------+-------------------+-------+-------------
//
// A frame may carry 802.1Q or 802.1ad tags (4 bytes each) between the
// source address and the EtherType.
package ether

import (
	"encoding/binary"
	"net/netip"
)

// Header length and the EtherTypes gorxe's links meet.
const (
	HeaderLen = 14
	TagLen    = 4 // an 802.1Q or 802.1ad tag

	TypeIPv4 = 0x0800
	TypeARP  = 0x0806
	TypeIPv6 = 0x86dd
	TypeVLAN = 0x8100 // 802.1Q
	TypeQinQ = 0x88a8 // 802.1ad, the outer tag of two
)

// Addresses every host listens to.
var (
	Broadcast   = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	IPv6AllNode = [6]byte{0x33, 0x33, 0, 0, 0, 1} // ff02::1's multicast MAC
)

// MulticastMAC returns the Ethernet address an IP multicast group is
// sent to: 01:00:5e and the group's low 23 bits for IPv4 (RFC 1112 §6.4),
// 33:33 and its low 32 bits for IPv6 (RFC 2464 §7); false if group is not
// a multicast address.
func MulticastMAC(group netip.Addr) ([6]byte, bool) {
	group = group.Unmap()
	if !group.IsMulticast() {
		return [6]byte{}, false
	}
	if group.Is4() {
		a := group.As4()
		return [6]byte{0x01, 0x00, 0x5e, a[1] & 0x7f, a[2], a[3]}, true
	}
	a := group.As16()
	return [6]byte{0x33, 0x33, a[12], a[13], a[14], a[15]}, true
}

// IsMulticast reports whether mac is a group address (its I/G bit set):
// multicast or broadcast.
func IsMulticast(mac [6]byte) bool { return mac[0]&1 != 0 }

// PutHeader writes an Ethernet header at f[:HeaderLen].
func PutHeader(f []byte, dst, src [6]byte, etherType uint16) {
	copy(f[0:6], dst[:])
	copy(f[6:12], src[:])
	binary.BigEndian.PutUint16(f[12:14], etherType)
}

// Destination returns an IP packet's destination address and the
// EtherType that carries it, or false if pkt is not an IPv4 or IPv6
// packet.
func Destination(pkt []byte) (netip.Addr, uint16, bool) {
	if len(pkt) >= 20 && pkt[0]>>4 == 4 {
		return netip.AddrFrom4([4]byte(pkt[16:20])), TypeIPv4, true
	}
	if len(pkt) >= 40 && pkt[0]>>4 == 6 {
		return netip.AddrFrom16([16]byte(pkt[24:40])), TypeIPv6, true
	}
	return netip.Addr{}, 0, false
}

// TypeOf returns the EtherType that carries an IP packet: IPv4's for
// version 4, IPv6's otherwise.
func TypeOf(pkt []byte) uint16 {
	if len(pkt) > 0 && pkt[0]>>4 == 4 {
		return TypeIPv4
	}
	return TypeIPv6
}

// Payload returns where a frame's payload starts, past any tags, and its
// EtherType; false if the frame is too short for its headers.
func Payload(f []byte) (off int, etherType uint16, ok bool) {
	off = 12
	for {
		if len(f) < off+2 {
			return 0, 0, false
		}
		etherType = binary.BigEndian.Uint16(f[off:])
		if etherType != TypeVLAN && etherType != TypeQinQ {
			return off + 2, etherType, true
		}
		off += TagLen
	}
}

package wire

import (
	"encoding/binary"
	"net/netip"
)

// ProtocolUDP is UDP's number in the IPv4 Protocol and IPv6 Next Header
// fields.
const ProtocolUDP = 17

// IPv4 is a view of an IPv4 header (RFC 791 §3.1). Its methods need at
// least IPv4Len bytes; ChecksumValid and UpdateChecksum need HeaderLen.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version|  IHL  |      TOS      |          Total Length         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Identification        |R|D|M|     Fragment Offset     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Time to Live |    Protocol   |        Header Checksum        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         Source Address                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Destination Address                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// IHL is the header's length in 4-byte words: 5 for the header without
// options that RoCE v2 requires. TOS holds DSCP (6 bits) and ECN (2 bits,
// RFC 3168). D is Don't Fragment, M More Fragments, R reserved.
type IPv4 []byte

const (
	ipv4VersionIHL = 0
	ipv4TOS        = 1
	ipv4TotalLen   = 2
	ipv4ID         = 4
	ipv4Flags      = 6
	ipv4TTL        = 8
	ipv4Protocol   = 9
	ipv4Checksum   = 10
	ipv4Src        = 12
	ipv4Dst        = 16

	ipv4DontFrag = 0x4000 // in the 16 bits at ipv4Flags
)

// HeaderLen returns the header's length in bytes, from IHL.
func (h IPv4) HeaderLen() int { return int(h[ipv4VersionIHL]&0x0f) * 4 }

// TOS returns the type of service byte: DSCP and ECN.
func (h IPv4) TOS() uint8 { return h[ipv4TOS] }

// TotalLen returns the length of the packet, header included.
func (h IPv4) TotalLen() uint16 { return binary.BigEndian.Uint16(h[ipv4TotalLen:]) }

// ID returns the Identification field.
func (h IPv4) ID() uint16 { return binary.BigEndian.Uint16(h[ipv4ID:]) }

// DontFrag returns the Don't Fragment flag.
func (h IPv4) DontFrag() bool { return binary.BigEndian.Uint16(h[ipv4Flags:])&ipv4DontFrag != 0 }

// IsFragment reports whether the More Fragments flag or the fragment
// offset is set: the header is that of a fragment, not of a whole packet.
func (h IPv4) IsFragment() bool { return binary.BigEndian.Uint16(h[ipv4Flags:])&0x3fff != 0 }

// TTL returns the time to live.
func (h IPv4) TTL() uint8 { return h[ipv4TTL] }

// Protocol returns the protocol of the payload; ProtocolUDP for RoCE v2.
func (h IPv4) Protocol() uint8 { return h[ipv4Protocol] }

// Checksum returns the header checksum field.
func (h IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(h[ipv4Checksum:]) }

// Src returns the source address.
func (h IPv4) Src() netip.Addr { return netip.AddrFrom4([4]byte(h[ipv4Src:])) }

// Dst returns the destination address.
func (h IPv4) Dst() netip.Addr { return netip.AddrFrom4([4]byte(h[ipv4Dst:])) }

// SetTOS sets the type of service byte.
func (h IPv4) SetTOS(v uint8) { h[ipv4TOS] = v }

// SetTotalLen sets the length of the packet, header included.
func (h IPv4) SetTotalLen(n uint16) { binary.BigEndian.PutUint16(h[ipv4TotalLen:], n) }

// SetID sets the Identification field.
func (h IPv4) SetID(id uint16) { binary.BigEndian.PutUint16(h[ipv4ID:], id) }

// SetTTL sets the time to live.
func (h IPv4) SetTTL(v uint8) { h[ipv4TTL] = v }

// SetChecksum sets the header checksum field.
func (h IPv4) SetChecksum(c uint16) { binary.BigEndian.PutUint16(h[ipv4Checksum:], c) }

// SetSrc sets the source address, which must be IPv4 or IPv4-mapped.
func (h IPv4) SetSrc(a netip.Addr) { a4 := a.As4(); copy(h[ipv4Src:], a4[:]) }

// SetDst sets the destination address, which must be IPv4 or IPv4-mapped.
func (h IPv4) SetDst(a netip.Addr) { a4 := a.As4(); copy(h[ipv4Dst:], a4[:]) }

// UpdateChecksum sets the header checksum to the one the rest of the
// header calls for (RFC 1071).
func (h IPv4) UpdateChecksum() {
	h.SetChecksum(0)
	h.SetChecksum(IPv4Checksum(h[:h.HeaderLen()]))
}

// ChecksumValid reports whether the header checksum is right.
func (h IPv4) ChecksumValid() bool { return Checksum(h[:h.HeaderLen()], 0) == 0xffff }

// IPv4Fields holds the fields of an IPv4 header without options.
type IPv4Fields struct {
	TOS      uint8  // DSCP and ECN
	TotalLen uint16 // header and payload
	ID       uint16
	DontFrag bool // RoCE v2 senders set it
	TTL      uint8
	Protocol uint8
	Checksum uint16     // the header checksum as written; see UpdateChecksum
	Src, Dst netip.Addr // IPv4 or IPv4-mapped
}

// Encode writes f into the header, with version 4, IHL 5, More Fragments
// clear and fragment offset 0. It panics if Src or Dst is not an IPv4 or
// IPv4-mapped address.
func (h IPv4) Encode(f *IPv4Fields) {
	_ = h[IPv4Len-1]
	h[ipv4VersionIHL] = 4<<4 | IPv4Len/4
	h[ipv4TOS] = f.TOS
	h.SetTotalLen(f.TotalLen)
	h.SetID(f.ID)
	var flags uint16
	if f.DontFrag {
		flags = ipv4DontFrag
	}
	binary.BigEndian.PutUint16(h[ipv4Flags:], flags)
	h[ipv4TTL] = f.TTL
	h[ipv4Protocol] = f.Protocol
	h.SetChecksum(f.Checksum)
	h.SetSrc(f.Src)
	h.SetDst(f.Dst)
}

// IPv6 is a view of an IPv6 header (RFC 8200 §3). Its methods need at
// least IPv6Len bytes.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version| Traffic Class |               Flow Label              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Payload Length        |  Next Header  |   Hop Limit   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	+                                                               +
//	|                                                               |
//	+                         Source Address                        +
//	|                                                               |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	+                                                               +
//	|                                                               |
//	+                      Destination Address                      +
//	|                                                               |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The traffic class holds DSCP (6 bits) and ECN (2 bits, RFC 3168), as
// the IPv4 TOS does. Payload Length counts the bytes after this header.
type IPv6 []byte

const (
	ipv6VersionTCFlow = 0
	ipv6PayloadLen    = 4
	ipv6NextHeader    = 6
	ipv6HopLimit      = 7
	ipv6Src           = 8
	ipv6Dst           = 24

	ipv6FlowLabelMask = 0xfffff
)

// TrafficClass returns the traffic class: DSCP and ECN.
func (h IPv6) TrafficClass() uint8 {
	return uint8(binary.BigEndian.Uint16(h[ipv6VersionTCFlow:]) >> 4)
}

// FlowLabel returns the 20-bit flow label.
func (h IPv6) FlowLabel() uint32 {
	return binary.BigEndian.Uint32(h[ipv6VersionTCFlow:]) & ipv6FlowLabelMask
}

// PayloadLen returns the length of what follows the header.
func (h IPv6) PayloadLen() uint16 { return binary.BigEndian.Uint16(h[ipv6PayloadLen:]) }

// NextHeader returns the type of the header that follows; ProtocolUDP for
// RoCE v2, which allows no extension headers.
func (h IPv6) NextHeader() uint8 { return h[ipv6NextHeader] }

// HopLimit returns the hop limit.
func (h IPv6) HopLimit() uint8 { return h[ipv6HopLimit] }

// Src returns the source address.
func (h IPv6) Src() netip.Addr { return netip.AddrFrom16([16]byte(h[ipv6Src:])) }

// Dst returns the destination address.
func (h IPv6) Dst() netip.Addr { return netip.AddrFrom16([16]byte(h[ipv6Dst:])) }

// SetTrafficClassFlowLabel sets the traffic class and the flow label,
// which share the header's first word with the version.
func (h IPv6) SetTrafficClassFlowLabel(tc uint8, flow uint32) {
	binary.BigEndian.PutUint32(h[ipv6VersionTCFlow:], 6<<28|uint32(tc)<<20|flow&ipv6FlowLabelMask)
}

// SetPayloadLen sets the length of what follows the header.
func (h IPv6) SetPayloadLen(n uint16) { binary.BigEndian.PutUint16(h[ipv6PayloadLen:], n) }

// SetHopLimit sets the hop limit.
func (h IPv6) SetHopLimit(v uint8) { h[ipv6HopLimit] = v }

// SetSrc sets the source address.
func (h IPv6) SetSrc(a netip.Addr) { a16 := a.As16(); copy(h[ipv6Src:], a16[:]) }

// SetDst sets the destination address.
func (h IPv6) SetDst(a netip.Addr) { a16 := a.As16(); copy(h[ipv6Dst:], a16[:]) }

// IPv6Fields holds the fields of an IPv6 header.
type IPv6Fields struct {
	TrafficClass uint8  // DSCP and ECN
	FlowLabel    uint32 // 20 bits; higher bits are ignored
	PayloadLen   uint16
	NextHeader   uint8
	HopLimit     uint8
	Src, Dst     netip.Addr
}

// Encode writes f into the header, with version 6. It panics if Src or
// Dst is the zero Addr.
func (h IPv6) Encode(f *IPv6Fields) {
	_ = h[IPv6Len-1]
	h.SetTrafficClassFlowLabel(f.TrafficClass, f.FlowLabel)
	h.SetPayloadLen(f.PayloadLen)
	h[ipv6NextHeader] = f.NextHeader
	h[ipv6HopLimit] = f.HopLimit
	h.SetSrc(f.Src)
	h.SetDst(f.Dst)
}

// UDP is a view of a UDP header (RFC 768). Its methods need at least
// UDPLen bytes.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Source Port          |        Destination Port       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|             Length            |            Checksum           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Length counts the header and the payload. A zero checksum means none
// was computed; rxe and most RoCE v2 NICs send zero, over IPv6 too, as
// the ICRC covers the packet.
type UDP []byte

const (
	udpSrcPort  = 0
	udpDstPort  = 2
	udpLength   = 4
	udpChecksum = 6
)

// SrcPort returns the source port; a RoCE v2 flow's entropy.
func (h UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(h[udpSrcPort:]) }

// DstPort returns the destination port; UDPPort for RoCE v2.
func (h UDP) DstPort() uint16 { return binary.BigEndian.Uint16(h[udpDstPort:]) }

// Length returns the length of the header and the payload.
func (h UDP) Length() uint16 { return binary.BigEndian.Uint16(h[udpLength:]) }

// Checksum returns the checksum field.
func (h UDP) Checksum() uint16 { return binary.BigEndian.Uint16(h[udpChecksum:]) }

// SetLength sets the length of the header and the payload.
func (h UDP) SetLength(n uint16) { binary.BigEndian.PutUint16(h[udpLength:], n) }

// SetChecksum sets the checksum field.
func (h UDP) SetChecksum(c uint16) { binary.BigEndian.PutUint16(h[udpChecksum:], c) }

// UDPFields holds the fields of a UDP header.
type UDPFields struct {
	SrcPort, DstPort uint16
	Length           uint16
	Checksum         uint16
}

// Encode writes f into the header.
func (h UDP) Encode(f *UDPFields) {
	_ = h[UDPLen-1]
	binary.BigEndian.PutUint16(h[udpSrcPort:], f.SrcPort)
	binary.BigEndian.PutUint16(h[udpDstPort:], f.DstPort)
	h.SetLength(f.Length)
	h.SetChecksum(f.Checksum)
}

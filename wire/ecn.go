package wire

import "encoding/binary"

// ECN is the two-bit Explicit Congestion Notification field (RFC 3168 §5)
// at the bottom of the IPv4 TOS byte and the IPv6 traffic class, below the
// six-bit DSCP:
//
//	  0   1   2   3   4   5   6   7
//	+---+---+---+---+---+---+---+---+
//	|         DSCP          |  ECN  |
//	+---+---+---+---+---+---+---+---+
//
// RoCE v2 congestion control (DCQCN, Annex A17.9) runs on it: a NIC sends
// its packets ECN-capable, a congested switch marks them CE instead of
// dropping them, and the receiving NIC answers a marked packet with a
// CNP. The ICRC does not cover the byte, so a switch may rewrite it.
type ECN uint8

// The four ECN codepoints.
const (
	NotECT ECN = 0 // the sender does not take part in ECN
	ECT1   ECN = 1 // ECN-capable transport (1); L4S uses it
	ECT0   ECN = 2 // ECN-capable transport (0): what RoCE v2 NICs send
	CE     ECN = 3 // Congestion Experienced: a switch marked the packet
)

// String returns the codepoint's RFC 3168 name.
func (e ECN) String() string {
	switch e & 3 {
	case NotECT:
		return "Not-ECT"
	case ECT1:
		return "ECT(1)"
	case ECT0:
		return "ECT(0)"
	}
	return "CE"
}

// TrafficClass returns the IPv4 TOS or IPv6 traffic class byte made of a
// DSCP (0..63) and an ECN codepoint.
func TrafficClass(dscp uint8, e ECN) uint8 { return dscp<<2 | uint8(e&3) }

// ECNCapable returns the traffic class tc with its ECN field set to ECT(0)
// if it is Not-ECT, and as it is otherwise: the byte a RoCE v2 NIC sends a
// packet with when its address vector asks for traffic class tc, so that
// switches mark it rather than drop it (the udp link does the same for
// the kernel's socket).
func ECNCapable(tc uint8) uint8 {
	if ECN(tc&3) == NotECT {
		return tc | uint8(ECT0)
	}
	return tc
}

// CE reports whether a switch marked the packet Congestion Experienced.
func (p *Packet) CE() bool { return ECN(p.ECN()) == CE }

// MarkCE sets an IP packet's ECN field to Congestion Experienced (0b11),
// as a congested switch does (RFC 3168 §5). IPv4's header checksum covers
// the TOS byte, so it is updated incrementally (RFC 1624 eqn. 3): a
// wrong checksum stays wrong. The RoCE v2 ICRC masks the field (IBTA
// Annex A17.3.3) and stays right. A packet too short for its header is
// left as it is.
func MarkCE(ip []byte) {
	switch {
	case len(ip) >= 4 && ip[0]>>4 == 6:
		h := IPv6(ip)
		h.SetTrafficClassFlowLabel(h.TrafficClass()|3, h.FlowLabel())
		return
	case len(ip) < 20 || ip[0]>>4 != 4:
		return
	}
	h := IPv4(ip)
	old := binary.BigEndian.Uint16(ip[0:])
	h.SetTOS(h.TOS() | 3)
	sum := uint32(^h.Checksum()) + uint32(^old) + uint32(binary.BigEndian.Uint16(ip[0:]))
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	h.SetChecksum(^uint16(sum))
}

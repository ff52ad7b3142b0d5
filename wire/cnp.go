package wire

import "github.com/gorxe/gorxe/wire/bth"

// A RoCE v2 Congestion Notification Packet (Annex A17.9.3) tells the
// sender of a flow that its packets arrived ECN CE-marked, so that it
// slows down. It is a BTH and 16 reserved bytes:
//
//	 0               1               2               3
//	+---------------+-+-+---+-------+-------------------------------+
//	| OpCode 0x81   |0|0|0 0|  0    |         P_Key 0xFFFF          |  BTH
//	+---------------+-+-+---+-------+-------------------------------+
//	|0|1|0 0 0 0 0 0|  DestQP: the flow's sender's QP                |  FECN 0, BECN 1
//	+-+-+-----------+-----------------------------------------------+
//	|0|0 0 0 0 0 0 0|  PSN 0                                        |
//	+-+-------------+-----------------------------------------------+
//	|                  16 reserved bytes, zero                      |
//	|                                                               |
//	+---------------------------------------------------------------+
//	|                           ICRC                                |
//	+---------------------------------------------------------------+
//
// 28 bytes of transport and an ICRC: a 60-byte IPv4 packet (UDP length 40),
// an 80-byte IPv6 one. It consumes no PSN and is never acknowledged.
// ConnectX NICs send it with traffic class CNPTrafficClass and UDP source
// port 0 (../shared/reference/dcqcn.md §1.6 has captures).

// CNPTrafficClass is the traffic class ConnectX NICs send CNPs with: DSCP
// 48 (cnp_dscp's default) and ECT(0), 0xC2.
const CNPTrafficClass = 48<<2 | uint8(ECT0)

// CNPHeaders returns the transport headers of a CNP that tells the sender
// of the flow to queue pair dqpn to slow down: opcode 0x81, BECN set,
// P_Key 0xFFFF, PSN 0 and 16 reserved bytes. The notification point sends
// it to the requester's address with dqpn the requester's QPN.
func CNPHeaders(dqpn bth.QPN) Headers {
	return Headers{BTH: bth.Fields{Opcode: bth.CNP, BECN: true, PKey: bth.DefaultPKey, DestQP: dqpn}}
}

// CNP returns a Frame for a CNP from src to dst for the flow to queue pair
// dqpn. RoCE v2 CNPs travel with DSCP 48 and ECT(0) (CNPTrafficClass) on
// ConnectX NICs; the caller may change TrafficClass and SrcPort.
func CNP(ip IPFields, dqpn bth.QPN) Frame {
	return Frame{IP: ip, DstPort: UDPPort, Headers: CNPHeaders(dqpn)}
}

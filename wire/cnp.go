package wire

import "github.com/gorxe/gorxe/wire/bth"

// CNPHeaders returns the transport headers of a RoCE v2 Congestion
// Notification Packet (Annex A17.9.3) that tells the sender of the flow to
// queue pair dqpn to slow down: opcode 0x81, BECN set, P_Key 0xFFFF, PSN 0
// and 16 reserved bytes. The notification point sends it to the
// requester's address with dqpn the requester's QPN.
func CNPHeaders(dqpn bth.QPN) Headers {
	return Headers{BTH: bth.Fields{Opcode: bth.CNP, BECN: true, PKey: bth.DefaultPKey, DestQP: dqpn}}
}

// CNP returns a Frame for a CNP from src to dst for the flow to queue pair
// dqpn. RoCE v2 CNPs travel with DSCP 48 and ECT(0) (traffic class 0xC2)
// on ConnectX NICs; the caller may change TrafficClass and SrcPort.
func CNP(ip IPFields, dqpn bth.QPN) Frame {
	return Frame{IP: ip, DstPort: UDPPort, Headers: CNPHeaders(dqpn)}
}

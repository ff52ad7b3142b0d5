package wire

import "github.com/gorxe/gorxe/wire/bth"

// FlowLabel returns the flow label of a connection between QPs lqpn and
// rqpn, the same whichever end computes it: the product of the QPNs folded
// to 20 bits (rdma_calc_flow_label in the kernel's include/rdma/ib_verbs.h).
func FlowLabel(lqpn, rqpn bth.QPN) uint32 {
	fl := uint64(lqpn) * uint64(rqpn)
	fl ^= fl >> 20
	fl ^= fl >> 40
	return uint32(fl & 0xfffff)
}

// UDPSourcePort returns the UDP source port of RoCE v2 packets with flow
// label fl between QPs lqpn and rqpn, as rdma-core's rdma_get_udp_sport,
// the kernel's rxe, mlx5 and irdma choose it: from the flow label, or
// when that is 0 from FlowLabel(lqpn, rqpn), its low 14 bits xored with
// its high 6, in 0xC000..0xFFFF. Both ends of a connection get the same
// port, so both directions hash alike in ECMP.
func UDPSourcePort(fl uint32, lqpn, rqpn bth.QPN) uint16 {
	if fl == 0 {
		fl = FlowLabel(lqpn, rqpn)
	}
	lo, hi := fl&0x3fff, fl&0xfc000
	lo ^= hi >> 14
	return uint16(lo | 0xc000)
}

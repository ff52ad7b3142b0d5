package rnic

import (
	"errors"
	"net/netip"

	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// The receive checks. A packet from a hostile peer meets them in this
// order, and none of them lets it near memory or a QP's state unless the
// IBTA (Vol 1 §9.6, packet header validation; §9.7.5, responder; §10.9.3,
// partitions), or kernel rxe where the IBTA leaves it open, would have
// executed it. "Counter" names the entry of Device.Counters().Named() that
// counts the drop; a dash means rxe counts nothing either.
//
//	check                                  where                          on failure                        counter
//	-------------------------------------  -----------------------------  --------------------------------  ------------------
//	IPv4 without options, no fragment,     wire.ParseIP                   drop                              malformed
//	  UDP, IP and UDP lengths agree
//	UDP destination port is Config.Port    process (receive.go)           drop                              malformed
//	BTH and ICRC fit                       wire.ParseUDPPayload           drop                              malformed
//	TVer is 0 (§9.6; rxe hdr_check)        wire.ParseUDPPayload ErrTVer   drop                              malformed
//	opcode defined (not reserved)          wire.ParseUDPPayload ErrOpcode drop, before the ICRC (rxe_rcv)   bad_opcode
//	headers the opcode calls for fit; pad  wire.ParseUDPPayload           drop                              malformed
//	  aligns the payload to 4 bytes;
//	  payload only where the opcode has one
//	ICRC                                   process                        drop                              icrc_errors
//	CNP (0x81): destination QP exists      handleCNP (congestion.go)      consumed, not answered            rp_cnp_ignored
//	  IP source is the QP's peer,          handleCNP                      drop                              addr_mismatch
//	  P_Key admitted                       handleCNP                      drop                              pkey_violations
//	  QP sends (RTR, RTS, SQD), DCQCN on   rc HandleCNP                   consumed: counted ignored         rp_cnp_ignored
//	  otherwise: the QP's RP cuts its rate rc HandleCNP                   -                                 rp_cnp_handled
//	destination QP exists (QPs 0 and       process, Device.lookup         drop                              no_qp
//	  0xFFFFFF never do; QP 1 once
//	  CreateGSI made it)
//	opcode's service is the QP's (RC, UC,  admit (rxe check_type_state)   drop                              bad_opcode
//	  UD)
//	IP source is the QP's peer (AV DGID),  admit (rxe check_addr)         drop                              addr_mismatch
//	  IP destination is the QP's own GID
//	P_Key matches the QP's P_Key table     admit (rxe check_keys)         drop                              pkey_violations
//	  entry (only 0xFFFF, index 0)
//	QP state: requests in RTR, RTS, SQD;   qp handleRequest,              drop                              -
//	  responses in RTS, SQD                  handleResponse
//	UD: Q_Key is the QP's (the GSI's:      rc UD.HandlePacket             drop                              qkey_violations
//	  0x80010000; rxe check_keys)
//	UD: a receive is posted, it holds the  rc UD.HandlePacket             drop (class D), the receive stays ud_dropped
//	  GRH and the message, which fits
//	  the MTU
//
// The responder's checks (internal/rc/responder.go, in order; IBTA §9.7.5.1, rxe_resp.c):
//
//	PSN after the expected one             handleRequest                  NAK PSN sequence error once,      out_of_seq_request
//	                                                                        then drop until it comes (C9-114)
//	PSN before the expected one            duplicateRequest               ACK again, replay a READ, answer  duplicate_request
//	                                                                        an atomic from its saved value
//	opcode continues the message (C9-91)   inSequence                     NAK invalid request, QP to ERR    -
//	payload length and path MTU (C9-92)    payloadLenOK                   NAK invalid request, QP to ERR    -
//	RETH DMA length at most 2^31 (C9-94)   dmaLenOK (request_checks.go)   NAK invalid request, QP to ERR    -
//	QP access flags allow WRITE, READ,     executeWrite, executeRead,     NAK invalid request, QP to ERR    -
//	  atomic; max_dest_rd_atomic > 0         executeAtomic                  (rxe: ERR_UNSUPPORTED_OPCODE)
//	FLUSH, ATOMIC WRITE (unsupported)      handleRequest default          NAK invalid request, QP to ERR    -
//	receive WQE posted (SEND, WRITE with   executeSend, executeWrite      RNR NAK with min_rnr_timer at     send_rnr_err
//	  immediate)                                                            the packet's PSN; QP stays up
//	receive WQE's SGEs valid               executeSend                    NAK remote operational error,     -
//	                                                                        receive LOC_PROT_ERR, QP to ERR
//	SEND fits the receive WQE              executeSend                    NAK invalid request, receive      -
//	                                                                        LOC_LEN_ERR, QP to ERR
//	rkey, PD, range and MR access          executeWrite, executeRead,     NAK remote access error, QP ERR   -
//	  (none for a zero-length READ or        executeAtomic (mr.Lookup)
//	  WRITE, C9-88)
//	WRITE payload adds up to DMA length    executeWrite                   NAK invalid request, QP to ERR    -
//	atomic address 8-byte aligned          executeAtomic                  NAK invalid request, QP to ERR    -
//
// A UC responder (internal/rc/uc.go) answers none of these: a PSN gap or
// an opcode out of sequence drops the message in progress and the packets
// after it up to the next FIRST or ONLY (out_of_seq_request counts the
// gaps); a missing receive WQE (out_of_buffer), a bad rkey, missing
// REMOTE_WRITE access or a length error drops the message; each dropped
// message counts in uc_dropped_msgs. Only a receive WQE with a bad lkey
// still moves the QP to ERR, without a NAK.
//
// The completer's (internal/rc/completer.go): a response for a PSN the requester
// has not sent is ignored; a stale ACK (before the oldest unacknowledged
// PSN) is ignored; NAKs fail the oldest WQE with the matching status.

// defaultPKey is the device's P_Key table: one entry, index 0, the
// default partition with full membership, as rxe's.
const defaultPKey = bth.DefaultPKey

// pkeyMatch reports whether a packet's P_Key admits it to a QP whose
// P_Key table entry is entry (IBTA Vol 1 §10.9.3; rxe's pkey_match): the
// partition numbers (low 15 bits) are equal, and at least one of the two
// is a full member (top bit set). A limited member (0x7FFF) of the
// default partition may talk to a full one.
func pkeyMatch(pkt, entry uint16) bool {
	return pkt&0x7fff == entry&0x7fff && (pkt|entry)&0x8000 != 0
}

// countUnparsed counts a packet the parser refused: an opcode no
// transport defines (or gorxe does not know) is a bad opcode, as rxe
// drops it (rxe_rcv, "Reject unknown opcodes before ICRC processing");
// anything else is malformed.
func (d *Device) countUnparsed(err error) {
	if errors.Is(err, wire.ErrOpcode) {
		d.badOpcode.Add(1)
		return
	}
	d.malformed.Add(1)
}

// admit applies the checks that need the destination QP but not its
// transport state: the opcode's service, the IP addresses and the P_Key
// (rxe hdr_check: check_type_state, check_addr, check_keys). It counts
// what it drops.
func (d *Device) admit(q *QP, p *wire.Packet) bool {
	if p.BTH.Opcode().Service() != q.e.Service() { // each QP takes its own transport's opcodes
		d.badOpcode.Add(1)
		return false
	}
	if path := q.path.Load(); path != nil && !d.fromPeer(p, path.dgid, path.sgidIndex) {
		d.addrMismatch.Add(1)
		return false
	}
	if !pkeyMatch(p.BTH.PKey(), defaultPKey) {
		d.pkeyViolations.Add(1)
		return false
	}
	return true
}

// fromPeer reports whether p came from the QP's peer, dgid, to the QP's
// own GID, the sgid'th of the device. A QP without an address vector has
// no peer yet; its state drops what it is sent.
func (d *Device) fromPeer(p *wire.Packet, dgid netip.Addr, sgid uint8) bool {
	if int(sgid) >= len(d.gids) {
		return false
	}
	return p.Src().Unmap() == dgid.Unmap() && p.Dst().Unmap() == d.gids[sgid].Unmap()
}

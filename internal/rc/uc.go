package rc

import (
	"fmt"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
)

// Unreliable Connected queue pairs (IBTA Vol 1 ch. 9, the UC service;
// rxe_req.c, rxe_resp.c for IB_QPT_UC) run the RC engines with what makes RC
// reliable taken out:
//
//   - the requester sends SEND and RDMA WRITE only, with UC opcodes
//     (0x20-0x2B), never sets AckReq, keeps no window, arms no timer and
//     retransmits nothing; a work request is done once its last packet
//     has gone to the link (completer.retireSent);
//   - the responder sends nothing at all, no ACK, NAK or RNR NAK: it
//     executes packets in PSN order, and on a gap, an out-of-sequence
//     opcode or an error it drops the message in progress and every
//     packet after it until the next FIRST or ONLY, where it starts
//     again whatever that packet's PSN (handleUnreliable).
//
// A receive WQE that a dropped SEND had begun to fill stays at the head
// of the receive queue, and the next SEND fills it from its start, as
// rxe resets it (do_class_d1e_error). With a shared receive queue the WQE
// cannot go back: the IBTA's class E applies instead of D, and rxe
// completes it in error (srq.go, responder.releaseRecv). Errors that rxe answers for RC with
// a NAK and ERR are, on UC, silent drops of the message, as rxe's
// RESPST_ERR_LENGTH, RESPST_ERR_RKEY_VIOLATION (UC without SRQ) and
// check_op_valid's UC branch; a SEND finding no receive WQE is dropped
// (RESPST_ERR_RNR, class D) and counted in out_of_buffer. Only a receive
// WQE that cannot be written (a bad lkey) still fails the QP, as rxe's
// ERR_MALFORMED_WQE does for every service.
//
// One difference from rxe: a FIRST or ONLY that arrives while a message
// is in progress (its LAST was lost) ends that message and begins its
// own: a missing LAST is the IBTA's class D1 error, where, in the words
// of rxe's do_class_d1e_error, "the previous message is invalid and
// ignored" and the new packet "may be the start of a new message and
// could be valid". rxe then drops that packet as well, and so loses the
// message after a lost MIDDLE or LAST too; gorxe delivers it.

// ucTransitions are the attribute requirements of each transition for UC
// QPs (IBTA Vol 1 Table 91; the kernel's qp_state_table, which rxe and
// rdma-core apply). The RC-only attributes, the ACK timeout, retry
// counts, RNR timer and READ/atomic depths, are refused.
var ucTransitions = transitionRules{
	{qp.StateReset, qp.StateInit}: {qp.AttrPKeyIndex | qp.AttrPort | qp.AttrAccessFlags, 0},
	{qp.StateInit, qp.StateInit}:  {0, qp.AttrPKeyIndex | qp.AttrPort | qp.AttrAccessFlags},
	{qp.StateInit, qp.StateRTR}: {
		qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN,
		qp.AttrPKeyIndex | qp.AttrAccessFlags | qp.AttrAltPath,
	},
	{qp.StateRTR, qp.StateRTS}: {qp.AttrSQPSN, qp.AttrCurState | qp.AttrAccessFlags | qp.AttrAltPath | qp.AttrPathMigState},
	{qp.StateRTS, qp.StateRTS}: {0, qp.AttrCurState | qp.AttrAccessFlags | qp.AttrAltPath | qp.AttrPathMigState},
	{qp.StateRTS, qp.StateSQD}: {0, qp.AttrEnSQDAsyncNotify},
	{qp.StateSQD, qp.StateSQD}: {0, qp.AttrAV | qp.AttrAltPath | qp.AttrAccessFlags | qp.AttrPKeyIndex | qp.AttrPathMigState},
	{qp.StateSQD, qp.StateRTS}: {0, qp.AttrCurState | qp.AttrAccessFlags | qp.AttrAltPath | qp.AttrPathMigState},
}

// checkUnreliableWR refuses, at post time, what a UC QP cannot carry:
// READs and atomics need a response, and UC has no SEND with invalidate
// opcode (rxe's next_opcode_uc knows none).
func checkUnreliableWR(wr *qp.SendWR) error {
	switch wr.Opcode {
	case qp.WRSend, qp.WRSendWithImm, qp.WRRDMAWrite, qp.WRRDMAWriteWithImm:
		return nil
	}
	return fmt.Errorf("%w: opcode %v is not supported on UC", qp.ErrBadWR, wr.Opcode)
}

// unreliable returns the UC opcode of an RC SEND or RDMA WRITE opcode:
// the same operation and position, in the UC service (IBTA Vol 1 Table 38).
func unreliable(op bth.Opcode) bth.Opcode { return op | bth.Opcode(bth.ServiceUC)<<5 }

// reliable returns the RC opcode of a UC one, which the responder's
// execution code speaks.
func reliable(op bth.Opcode) bth.Opcode { return op &^ (7 << 5) }

// handleUnreliable is a UC responder's receive path (rxe_resp.c check_psn and check_op_seq for IB_QPT_UC).
func (r *responder) handleUnreliable(p *wire.Packet) {
	q := r.q
	switch q.attr.State {
	case qp.StateRTR, qp.StateRTS, qp.StateSQD:
	default:
		return
	}
	op := p.BTH.Opcode()
	if op.Service() != bth.ServiceUC || p.Info.Response {
		return // the device drops opcodes of another service; rxe does too
	}
	psn := p.BTH.PSN()
	gap := psn != r.psn
	r.psn = psn.Add(1) // dropped or not, so that the next gap is the next loss
	if gap {
		// rxe counts out_of_seq_request for RC only; here it counts the
		// gaps a UC responder saw as well.
		q.stats.OutOfSeqRequest++
	}
	rc := reliable(op)
	switch pos := p.Info.Position; {
	case pos&wire.First != 0:
		if r.inMsg == msgSend || r.inMsg == msgWrite {
			// Its LAST never came (class D1; E with an SRQ).
			r.dropMessage(cq.StatusRemInvReqErr, p, "the message in progress: a FIRST or ONLY came before its LAST")
		}
		r.inMsg = msgNone
	case gap:
		if r.inMsg != msgDropped {
			r.dropMessage(cq.StatusRemInvReqErr, p, "PSN gap: the message is dropped up to the next FIRST or ONLY")
		}
		return
	case r.inMsg == msgDropped:
		return
	case !r.inSequence(rc, pos):
		r.dropMessage(cq.StatusRemInvReqErr, p, "opcode out of sequence")
		return
	}
	r.execute(p, rc, psn)
}

// dropMessage abandons the UC message in progress, or the one p begins,
// for the reason why: the rest of it is dropped up to the next FIRST or
// ONLY, and a receive WQE it had begun to fill stays at the head of the
// queue, to be filled again from its start; or, taken from an SRQ,
// completes with status (releaseRecv).
func (r *responder) dropMessage(status cq.Status, p *wire.Packet, why string) {
	r.q.stats.UCDroppedMsgs++
	r.dropped(p, why)
	r.inMsg = msgDropped
	r.releaseRecv(status)
	r.writeMR = nil
}

// reject answers a request p the responder cannot execute, for the
// reason why: for RC a NAK with code and the QP to ERR; for UC, a silent
// drop of the message (rxe: class D and E errors of UC), in which a WQE
// taken from an SRQ completes with the status rxe pairs with code:
// REM_ACCESS_ERR for an R_Key violation, REM_INV_REQ_ERR for the rest
// (class E).
func (r *responder) reject(code aeth.NAKCode, p *wire.Packet, why string) {
	if r.q.uc {
		status := cq.StatusRemInvReqErr
		if code == aeth.NAKRemoteAccess {
			status = cq.StatusRemAccessErr
		}
		r.dropMessage(status, p, why)
		return
	}
	r.fatalNAK(code, p, why)
}

// noReceive answers a SEND or WRITE with immediate p that finds no
// receive WQE: for RC an RNR NAK; UC has no RNR, and drops the message
// (rxe: RESPST_ERR_RNR, class D for UC), counted in out_of_buffer.
func (r *responder) noReceive(p *wire.Packet) {
	q := r.q
	if q.uc {
		q.stats.OutOfBuffer++
		r.dropMessage(cq.StatusRemInvReqErr, p, "no receive posted") // nothing held: nothing completes
		return
	}
	r.rnrNAK(p)
}

// retireSent completes, in order, the UC work requests whose last packet
// has gone to the link: every one the requester has moved past.
func (c *completer) retireSent() {
	q := c.q
	for q.sq.head != q.req.idx {
		w := q.sq.at(q.sq.head)
		if !w.acked {
			return
		}
		c.psn = w.last.Add(1)
		c.answered(w)
	}
}

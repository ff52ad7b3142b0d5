package qp

import (
	"encoding/binary"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
)

// completer tracks what the responder has answered.
type completer struct {
	psn       bth.PSN // the oldest PSN not yet acknowledged or answered
	retryLeft uint8   // retries left of retry_cnt
	rnrLeft   uint8   // retries left of rnr_retry
	// retrying is set by a go-back-N and cleared by progress: while it is
	// set, further gaps in READ responses (the rest of the lost burst) do
	// not start another retransmission.
	retrying bool
}

// HandlePacket processes a packet addressed to this QP. The device has
// parsed it and checked its ICRC. It reports whether the responder now
// owes an ACK it has deferred, for FlushAck.
func (q *QP) HandlePacket(p *wire.Packet) (ackOwed bool) {
	q.mu.Lock()
	defer q.unlock()
	q.stats.RcvdPkts++
	if p.Info.Response {
		q.handleResponse(p)
	} else {
		q.handleRequest(p)
	}
	return q.resp.ackPending
}

// handleResponse is the completer (IBTA Vol 1 §9.7.5.2; rxe_comp.c). A
// response may open the window, retire a fenced READ, or send the
// requester back (a NAK, an implied NAK), so the requester sends what it
// now can before the QP is unlocked: nothing else would make it.
func (q *QP) handleResponse(p *wire.Packet) {
	if q.attr.State != StateRTS && q.attr.State != StateSQD {
		return
	}
	psn := p.BTH.PSN()
	if !psn.Before(q.req.sentMax) {
		if q.trace != nil {
			q.tracef("ghost response %v PSN %d ignored: nothing sent there", p.BTH.Opcode(), psn)
		}
		return
	}
	switch p.BTH.Opcode() {
	case bth.RCAcknowledge:
		q.handleAck(psn, p.AETH.Syndrome())
	case bth.RCAtomicAcknowledge:
		q.handleAtomicAck(psn, p.AtomicAck.OrigData())
	case bth.RCRDMAReadResponseFirst, bth.RCRDMAReadResponseMiddle,
		bth.RCRDMAReadResponseLast, bth.RCRDMAReadResponseOnly:
		q.handleReadResponse(p, psn)
	}
	q.sendSome()
}

func (q *QP) handleAck(psn bth.PSN, syn aeth.Syndrome) {
	if psn.Before(q.comp.psn.Add(bth.PSNMask)) { // before comp.psn - 1: stale
		return
	}
	switch syn.Type() {
	case aeth.TypeACK:
		if w := q.retire(psn); w != nil && w.isReadOrAtomic() && !w.first.After(psn) {
			// The responder is past a READ or atomic whose answer never
			// arrived: implied NAK (C9-114).
			q.impliedNAK(w)
		}
	case aeth.TypeRNRNAK:
		if psn.Before(q.comp.psn) {
			return
		}
		q.retire(psn.Add(bth.PSNMask))
		q.stats.RcvdRNRErr++
		if q.trace != nil {
			q.tracef("RNR NAK at PSN %d: peer has no receive posted, wait %v", psn, syn.RNRTimer())
		}
		switch q.comp.rnrLeft {
		case 7:
		case 0:
			q.stats.RNRNakRetryErr++
			q.enterError(q.sq.at(q.sq.head), cq.StatusRNRRetryExcErr)
			return
		default:
			q.comp.rnrLeft--
		}
		q.seek(psn)
		q.req.noAck = 0
		q.tm.startRNRWait(q, syn.RNRTimer())
	case aeth.TypeNAK:
		if psn.Before(q.comp.psn) {
			return
		}
		q.retire(psn.Add(bth.PSNMask))
		code := syn.NAKCode()
		if q.trace != nil {
			q.tracef("NAK %v at PSN %d", code, psn)
		}
		if code == aeth.NAKPSNSequenceError {
			q.stats.RcvdSeqErr++
			if q.useRetry() {
				q.goBack(psn)
				q.tm.restartRetransmit(q)
			}
			return
		}
		status := cq.StatusRemOpErr
		switch code {
		case aeth.NAKInvalidRequest:
			status = cq.StatusRemInvReqErr
		case aeth.NAKRemoteAccess:
			status = cq.StatusRemAccessErr
		}
		if q.sq.head != q.sq.tail {
			q.enterError(q.sq.at(q.sq.head), status)
		}
	}
}

// retire completes, in order, the SEND and RDMA WRITE work requests that
// every PSN up to and including a acknowledges. It stops at the first WQE
// that a does not finish (a READ or atomic waits for its own answer) and
// returns it, or nil when the queue is done.
func (q *QP) retire(a bth.PSN) *sendWQE {
	progress := false
	defer func() {
		if progress {
			q.onProgress()
		}
	}()
	for q.sq.head != q.sq.tail {
		w := q.sq.at(q.sq.head)
		if !w.started || w.first.After(a) {
			return w
		}
		if w.isReadOrAtomic() {
			return w
		}
		if w.last.After(a) {
			if next := a.Add(1); next.After(q.comp.psn) {
				q.comp.psn = next
				progress = true
			}
			return w
		}
		if next := w.last.Add(1); next.After(q.comp.psn) {
			q.comp.psn = next
		}
		progress = true
		q.answered(w)
	}
	return nil
}

// onProgress runs after the completer moved comp.psn forward: retries are
// restored, the timer restarts, and a requester left behind by a
// retransmission skips what is already acknowledged.
func (q *QP) onProgress() {
	q.tm.onAcked(q)
	q.tm.probeSent, q.tm.probeDone = false, false
	q.comp.retryLeft = q.attr.RetryCnt
	q.comp.rnrLeft = q.attr.RNRRetry
	q.comp.retrying = false
	if q.req.psn.Before(q.comp.psn) {
		q.seek(q.comp.psn)
	}
	q.tm.restartRetransmit(q)
}

// impliedNAK retransmits from the oldest unanswered PSN of w, a READ or
// atomic whose responses were lost, once per loss.
func (q *QP) impliedNAK(w *sendWQE) {
	if q.comp.retrying {
		return
	}
	if q.trace != nil {
		q.tracef("implied NAK: answers to work request %d lost from PSN %d", w.wr.WRID, q.comp.psn)
	}
	if q.useRetry() {
		q.goBack(q.comp.psn)
		q.tm.restartRetransmit(q)
	}
}

// awaiting returns the READ (read set) or atomic WQE that a response with
// PSN r answers, if r is the PSN the completer waits for. A response also
// acknowledges every SEND and WRITE before it, which are retired first. A
// response past the one awaited means those between were lost (implied
// NAK); a response before it is a duplicate. Both return nil.
func (q *QP) awaiting(r bth.PSN, read bool) *sendWQE {
	if r.Before(q.comp.psn) {
		return nil
	}
	w := q.retire(r.Add(bth.PSNMask))
	if w == nil || (w.wr.Opcode == WRRDMARead) != read || !w.isReadOrAtomic() || !r.InRange(w.first, w.last) {
		if w != nil && w.isReadOrAtomic() && w.last.Before(r) {
			q.impliedNAK(w)
		}
		return nil
	}
	if r != q.comp.psn {
		q.impliedNAK(w) // a response before this one was lost
		return nil
	}
	return w
}

// answered retires w, at the head of the queue, now fully answered.
func (q *QP) answered(w *sendWQE) {
	w.acked = true
	q.sq.head++
	q.completeSend(w, cq.StatusSuccess)
}

func (q *QP) handleReadResponse(p *wire.Packet, r bth.PSN) {
	w := q.awaiting(r, true)
	if w == nil {
		return
	}
	k := uint32(r.Diff(w.first))
	off := k * uint32(q.mtu)
	want := min(w.length-off, uint32(q.mtu))
	op := p.BTH.Opcode()
	lastOp := op == bth.RCRDMAReadResponseLast || op == bth.RCRDMAReadResponseOnly
	if uint32(len(p.Payload)) != want || lastOp != (r == w.last) {
		q.tracef("READ response PSN %d: %d bytes as %v, want %d", r, len(p.Payload), op, want)
		q.enterError(w, cq.StatusBadRespErr)
		return
	}
	if !scatter(w.wr.SGList, w.mrs, off, p.Payload) {
		q.enterError(w, cq.StatusLocProtErr)
		return
	}
	q.comp.psn = r.Add(1)
	if r == w.last {
		q.answered(w)
	}
	q.onProgress()
}

func (q *QP) handleAtomicAck(r bth.PSN, orig uint64) {
	w := q.awaiting(r, false) // an atomic's one PSN: first == last == r
	if w == nil {
		return
	}
	var v [8]byte
	binary.NativeEndian.PutUint64(v[:], orig) // the local buffer holds a host-order u64
	if !scatter(w.wr.SGList, w.mrs, 0, v[:]) {
		q.enterError(w, cq.StatusLocProtErr)
		return
	}
	q.comp.psn = r.Add(1)
	q.answered(w)
	q.onProgress()
}

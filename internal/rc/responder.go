package rc

import (
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
)

// responder executes requests in PSN order and answers them (IBTA Vol 1
// §9.7.4, §9.7.5.1; rxe_resp.c).
//
// Its answers leave in PSN order through one queue (replies): a READ's
// responses, an atomic's ACK, and the ACKs and NAKs behind them. When the
// queue is empty, as it is but for READs, an answer goes at once; a READ
// sends its first burst on the path that received the request and leaves
// the rest to the device's worker, a burst a turn, so that one large READ
// holds neither the QP nor the device's receive path for its whole length.
type responder struct {
	q     *QP
	psn   bth.PSN  // the expected PSN
	msn   aeth.MSN // messages completed
	nak   nakState
	inMsg msgState

	// The message in progress, between its FIRST and LAST packets.
	wqe       recvWQE // a copy of the receive WQE a SEND is filling, when held
	held      bool    // wqe holds a WQE (takeRecv)
	wqeMRs    []*mr.MR
	sendOff   uint32
	writeMR   *mr.MR
	writeVA   uint64
	writeLeft uint32
	writeLen  uint32

	// Saved READ and atomic requests, to answer duplicates (C9-104).
	res     []resource
	resNext int

	replies replyQueue

	ackPending bool // an ACK is deferred, to be merged with later ones
	ackPSN     bth.PSN
	hdr        wire.Headers
}

// nakState says whether the responder is silent after a NAK.
type nakState uint8

const (
	nakNone nakState = iota
	// nakSequence: a PSN sequence error NAK is out; packets are dropped
	// until the expected PSN arrives (C9-96).
	nakSequence
	// nakRNR: an RNR NAK is out; the requester resends from its PSN.
	nakRNR
)

// msgState is the multi-packet message in progress, if any (C9-91).
type msgState uint8

const (
	msgNone msgState = iota
	msgSend
	msgWrite
	// msgDropped: UC only, a message was dropped; its remaining packets
	// are dropped up to the next FIRST or ONLY (uc.go).
	msgDropped
)

// resource remembers a READ or atomic request and its result.
type resource struct {
	valid  bool
	atomic bool
	first  bth.PSN
	last   bth.PSN
	va     uint64
	rkey   mr.Key
	length uint32
	orig   uint64
}

// start readies the responder for the QP's initial receive PSN, as the QP
// enters RTR.
func (r *responder) start() {
	q := r.q
	n := max(int(q.attr.MaxDestRdAtomic), 1)
	*r = responder{
		q:       q,
		psn:     q.attr.RQPSN,
		res:     make([]resource, n),
		replies: newReplyQueue(n),
	}
}

// reset forgets everything, as the QP returns to RESET. A WQE taken from
// an SRQ is lost with the rest, as rxe's RESPST_RESET forgets it.
func (r *responder) reset() { *r = responder{q: r.q} }

// abandon drops the message in progress and the answers not yet sent, as
// the QP enters ERR. A WQE it had taken from an SRQ completes with
// WR_FLUSH_ERR (rxe's check_resource in the error state); one of the QP's
// own queue is still at its head, where the QP's flush completes it.
func (r *responder) abandon() {
	if r.held && r.q.srq != nil {
		r.completeRecv(cq.WC{Status: cq.StatusWRFlushErr, Opcode: cq.OpRecv})
	}
	r.held = false
	r.inMsg = msgNone
	r.replies.clear()
	r.ackPending = false
}

// takeRecv gives the responder the receive WQE of the message that
// begins: a copy of the head of the QP's own receive queue, which stays
// queued until the message completes (a UC message dropped half-way
// leaves it for the next), or the oldest of the SRQ's, which leaves the
// shared queue at once (srq.go). It reports false when none is posted.
func (r *responder) takeRecv() bool {
	q := r.q
	switch {
	case q.srq != nil:
		r.held = q.srq.take(&r.wqe)
	case q.rq.head != q.rq.tail:
		r.wqe.copyFrom(q.rq.at(q.rq.head))
		r.held = true
	}
	return r.held
}

// completeRecv retires the held WQE with wc, whose WRID it sets.
func (r *responder) completeRecv(wc cq.WC) {
	q := r.q
	wc.WRID = r.wqe.wrid
	if q.srq == nil {
		q.rq.head++
	}
	r.held = false
	q.pushRecv(wc)
}

// releaseRecv lets go of the held WQE of a message dropped half-way (UC).
// One of the QP's own queue stays at its head, to be filled again from
// its start by the next SEND, as rxe resets it (class D1). One taken from
// an SRQ cannot go back: it completes with status (class E; rxe's
// do_class_d1e_error, RESPST_ERR_LENGTH and RESPST_ERR_RKEY_VIOLATION).
func (r *responder) releaseRecv(status cq.Status) {
	if r.held && r.q.srq != nil {
		r.completeRecv(cq.WC{Status: status, Opcode: cq.OpRecv})
	}
	r.held = false
}

// handleRequest is the responder's receive path.
func (r *responder) handleRequest(p *wire.Packet) {
	q := r.q
	switch q.attr.State {
	case qp.StateRTR, qp.StateRTS, qp.StateSQD:
	default:
		return
	}
	op := p.BTH.Opcode()
	if op.Service() != bth.ServiceRC {
		return // rxe drops opcodes of another service silently
	}
	psn := p.BTH.PSN()
	switch d := psn.Diff(r.psn); {
	case d > 0:
		q.stats.OutOfSeqRequest++
		if r.nak == nakNone {
			if q.trace != nil {
				q.tracef("request PSN %d, expected %d: NAK sequence error", psn, r.psn)
			}
			r.sendAck(aeth.NAK(aeth.NAKPSNSequenceError), r.psn)
			r.nak = nakSequence
		}
		return
	case d < 0:
		q.stats.DuplicateRequest++
		r.duplicateRequest(p, psn)
		return
	}
	if r.replies.full() {
		// More READs and atomics than max_dest_rd_atomic are waiting to
		// be answered: the requester broke its limit. The request is not
		// taken; the requester's go-back-N brings it again.
		return
	}
	r.nak = nakNone
	if !r.inSequence(op, p.Info.Position) {
		q.tracef("opcode %v out of sequence", op)
		r.fatalNAK(aeth.NAKInvalidRequest, psn)
		return
	}
	r.execute(p, op, psn)
}

// execute checks the lengths of a request that arrived in order and
// executes it. op is its opcode as RC numbers it (a UC opcode less its
// service bits).
func (r *responder) execute(p *wire.Packet, op bth.Opcode, psn bth.PSN) {
	q := r.q
	info := p.Info
	if info.Payload && !r.payloadLenOK(info.Position, len(p.Payload)) {
		q.tracef("%v PSN %d: %d-byte payload breaks the path MTU rule (C9-92)", p.BTH.Opcode(), psn, len(p.Payload))
		r.reject(aeth.NAKInvalidRequest, psn)
		return
	}
	if !dmaLenOK(p) {
		q.tracef("%v PSN %d: DMA length %d is more than 2^31 (C9-94)", p.BTH.Opcode(), psn, p.RETH.DMALen())
		r.reject(aeth.NAKInvalidRequest, psn)
		return
	}
	switch op {
	case bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLast, bth.RCSendLastWithImm,
		bth.RCSendOnly, bth.RCSendOnlyWithImm, bth.RCSendLastWithInvalidate, bth.RCSendOnlyWithInvalidate:
		r.executeSend(p, psn)
	case bth.RCRDMAWriteFirst, bth.RCRDMAWriteMiddle, bth.RCRDMAWriteLast, bth.RCRDMAWriteLastWithImm,
		bth.RCRDMAWriteOnly, bth.RCRDMAWriteOnlyWithImm:
		r.executeWrite(p, psn)
	case bth.RCRDMAReadRequest:
		r.executeRead(p, psn)
	case bth.RCCompareSwap, bth.RCFetchAdd:
		r.executeAtomic(p, psn)
	default: // FLUSH and ATOMIC_WRITE are not supported yet
		r.fatalNAK(aeth.NAKInvalidRequest, psn)
	}
}

// inSequence checks the opcode against the message in progress (C9-91).
func (r *responder) inSequence(op bth.Opcode, pos wire.Position) bool {
	isSend := op <= bth.RCSendOnlyWithImm || op == bth.RCSendLastWithInvalidate || op == bth.RCSendOnlyWithInvalidate
	isWrite := op >= bth.RCRDMAWriteFirst && op <= bth.RCRDMAWriteOnlyWithImm
	switch {
	case pos == wire.Middle || pos == wire.Last:
		return isSend && r.inMsg == msgSend || isWrite && r.inMsg == msgWrite
	default: // a new message
		return r.inMsg == msgNone
	}
}

// payloadLenOK applies C9-92: FIRST and MIDDLE packets carry exactly one
// path MTU; LAST and ONLY packets at most one.
func (r *responder) payloadLenOK(pos wire.Position, n int) bool {
	mtu := r.q.mtu
	if pos == wire.First || pos == wire.Middle {
		return n == mtu
	}
	return n <= mtu && (pos != wire.Last || n > 0)
}

func (r *responder) executeSend(p *wire.Packet, psn bth.PSN) {
	q := r.q
	pos := p.Info.Position
	if pos&wire.First != 0 {
		if !r.takeRecv() {
			r.noReceive(psn)
			return
		}
		r.wqeMRs = r.wqeMRs[:0]
		for _, s := range r.wqe.sges {
			m, _, err := q.port.MRs().Lookup(s.LKey, q.pd, s.Addr, uint64(s.Length), mr.LocalWrite)
			if err != nil {
				q.tracef("receive work request %d: SGE %v: %v", r.wqe.wrid, s.LKey, err)
				r.failRecv(cq.StatusLocProtErr, aeth.NAKRemoteOperation, psn)
				return
			}
			r.wqeMRs = append(r.wqeMRs, m)
		}
		r.sendOff = 0
	}
	if uint64(r.sendOff)+uint64(len(p.Payload)) > r.wqe.length {
		q.tracef("SEND of more than the %d bytes the receive work request %d holds", r.wqe.length, r.wqe.wrid)
		if q.uc {
			// rxe: ERR_LENGTH, class D for UC, the WQE stays for the
			// next SEND; with an SRQ class E, it completes in error.
			r.dropMessage(cq.StatusRemInvReqErr)
			return
		}
		r.failRecv(cq.StatusLocLenErr, aeth.NAKInvalidRequest, psn)
		return
	}
	if !scatter(r.wqe.sges, r.wqeMRs, r.sendOff, p.Payload) {
		r.failRecv(cq.StatusLocProtErr, aeth.NAKRemoteOperation, psn)
		return
	}
	r.sendOff += uint32(len(p.Payload))
	if pos&wire.Last == 0 {
		r.inMsg = msgSend
	} else {
		r.inMsg = msgNone
		wc := cq.WC{Opcode: cq.OpRecv, ByteLen: r.sendOff}
		if p.ImmDt != nil {
			wc.ImmData, wc.Flags = p.ImmDt.Imm(), cq.FlagWithImm
		}
		if p.IETH != nil {
			// gorxe has no memory windows or fast-registration MRs to
			// invalidate; the key is reported as rdma-core reports it.
			wc.InvalidatedRKey, wc.Flags = uint32(p.IETH.RKey()), cq.FlagWithInv
		}
		r.msn = (r.msn + 1) & aeth.MSNMask
		r.completeRecv(wc)
	}
	r.accepted(p, psn)
}

func (r *responder) executeWrite(p *wire.Packet, psn bth.PSN) {
	q := r.q
	pos := p.Info.Position
	if pos&wire.First != 0 && q.attr.AccessFlags&mr.RemoteWrite == 0 {
		q.tracef("RDMA WRITE to a QP without REMOTE_WRITE access")
		r.reject(aeth.NAKInvalidRequest, psn)
		return
	}
	// A WRITE with immediate consumes a receive WQE, taken before the
	// rkey and the length are checked, as rxe's check_resource comes
	// before its check_rkey: with an SRQ, a UC WRITE that fails them
	// completes the WQE in error (class E).
	imm := p.ImmDt != nil
	if imm && !r.takeRecv() {
		r.noReceive(psn)
		return
	}
	if pos&wire.First != 0 {
		f := p.RETH.Fields()
		r.writeMR, r.writeVA, r.writeLeft, r.writeLen = nil, f.VA, f.DMALen, f.DMALen
		if f.DMALen > 0 { // a zero-length WRITE names no memory (C9-88)
			m, _, err := q.port.MRs().Lookup(f.RKey, q.pd, f.VA, uint64(f.DMALen), mr.RemoteWrite)
			if err != nil {
				q.tracef("RDMA WRITE rkey %v va %#x len %d: %v", f.RKey, f.VA, f.DMALen, err)
				r.reject(aeth.NAKRemoteAccess, psn)
				return
			}
			r.writeMR = m
		}
		q.stats.RDMARecvs++
	}
	n := uint32(len(p.Payload))
	if n > r.writeLeft || pos&wire.Last != 0 && n != r.writeLeft {
		q.tracef("RDMA WRITE carries %d bytes where %d remain of %d", n, r.writeLeft, r.writeLen)
		r.reject(aeth.NAKInvalidRequest, psn)
		return
	}
	if n > 0 {
		if err := r.writeMR.WriteAt(r.writeVA, p.Payload); err != nil {
			r.reject(aeth.NAKRemoteAccess, psn)
			return
		}
	}
	r.writeVA += uint64(n)
	r.writeLeft -= n
	if pos&wire.Last == 0 {
		r.inMsg = msgWrite
	} else {
		r.inMsg = msgNone
		r.msn = (r.msn + 1) & aeth.MSNMask
		if imm {
			r.completeRecv(cq.WC{
				Opcode: cq.OpRecvRDMAWithImm, ByteLen: r.writeLen,
				ImmData: p.ImmDt.Imm(), Flags: cq.FlagWithImm,
			})
		}
	}
	r.accepted(p, psn)
}

func (r *responder) executeRead(p *wire.Packet, psn bth.PSN) {
	q := r.q
	if !r.admits(p, mr.RemoteRead) {
		return
	}
	f := p.RETH.Fields()
	var m *mr.MR
	if f.DMALen > 0 {
		var err error
		m, _, err = q.port.MRs().Lookup(f.RKey, q.pd, f.VA, uint64(f.DMALen), mr.RemoteRead)
		if err != nil {
			q.tracef("RDMA READ rkey %v va %#x len %d: %v", f.RKey, f.VA, f.DMALen, err)
			r.fatalNAK(aeth.NAKRemoteAccess, psn)
			return
		}
	}
	n := r.readPackets(f.DMALen)
	res := r.newResource()
	*res = resource{valid: true, first: psn, last: psn.Add(n - 1), va: f.VA, rkey: f.RKey, length: f.DMALen}
	q.stats.RDMARecvs++
	r.msn = (r.msn + 1) & aeth.MSNMask // C9-148: counted when executed
	r.psn = res.last.Add(1)
	r.queueRead(m, psn, f.VA, f.DMALen)
}

// admits reports whether the QP lets a peer make the READ or atomic p:
// its access flags grant need, and max_dest_rd_atomic
// leaves room to remember the request. If not, the responder NAKs an
// invalid request, and the QP moves to ERR.
func (r *responder) admits(p *wire.Packet, need mr.Access) bool {
	q := r.q
	if q.attr.AccessFlags&need != 0 && q.attr.MaxDestRdAtomic > 0 {
		return true
	}
	q.tracef("%v to a QP without %v access or max_dest_rd_atomic", p.BTH.Opcode(), need)
	r.fatalNAK(aeth.NAKInvalidRequest, p.BTH.PSN())
	return false
}

// readPackets returns how many responses, and so PSNs, a READ of n bytes
// takes: at least one.
func (r *responder) readPackets(n uint32) uint32 {
	mtu := uint32(r.q.mtu)
	return max((n+mtu-1)/mtu, 1)
}

func (r *responder) executeAtomic(p *wire.Packet, psn bth.PSN) {
	q := r.q
	if !r.admits(p, mr.RemoteAtomic) {
		return
	}
	f := p.AtomicETH.Fields()
	if f.VA%8 != 0 {
		q.tracef("atomic at %#x is not 8-byte aligned", f.VA)
		r.fatalNAK(aeth.NAKInvalidRequest, psn)
		return
	}
	m, _, err := q.port.MRs().Lookup(f.RKey, q.pd, f.VA, 8, mr.RemoteAtomic)
	if err != nil {
		q.tracef("atomic rkey %v va %#x: %v", f.RKey, f.VA, err)
		r.fatalNAK(aeth.NAKRemoteAccess, psn)
		return
	}
	var orig uint64
	if p.BTH.Opcode() == bth.RCCompareSwap {
		orig, err = m.CompareAndSwap(f.VA, f.Compare, f.SwapAdd)
	} else {
		orig, err = m.FetchAndAdd(f.VA, f.SwapAdd)
	}
	if err != nil {
		q.tracef("atomic at %#x: %v", f.VA, err)
		r.fatalNAK(aeth.NAKInvalidRequest, psn)
		return
	}
	res := r.newResource()
	*res = resource{valid: true, atomic: true, first: psn, last: psn, va: f.VA, rkey: f.RKey, orig: orig}
	q.stats.RDMARecvs++
	r.msn = (r.msn + 1) & aeth.MSNMask
	r.psn = psn.Add(1)
	r.queueAtomicAck(psn, orig)
}

// newResource takes the next slot of the ring; like rxe, gorxe does not
// refuse a requester that exceeds max_dest_rd_atomic but recycles the
// oldest entry.
func (r *responder) newResource() *resource {
	res := &r.res[r.resNext]
	r.resNext = (r.resNext + 1) % len(r.res)
	return res
}

// duplicateRequest answers a request the responder has already executed
// (IBTA Vol 1 §9.7.5.1.1): SEND and WRITE are acknowledged again, READs
// replayed from their saved request, atomics answered with the saved
// original value and never executed twice.
func (r *responder) duplicateRequest(p *wire.Packet, psn bth.PSN) {
	q := r.q
	switch op := p.BTH.Opcode(); op {
	case bth.RCRDMAReadRequest:
		f := p.RETH.Fields()
		for i := range r.res {
			res := &r.res[i]
			if !res.valid || res.atomic || !psn.InRange(res.first, res.last) {
				continue
			}
			// A retried READ asks for a tail of the original (C9-107).
			if f.VA < res.va || uint64(f.VA)+uint64(f.DMALen) > res.va+uint64(res.length) || f.RKey != res.rkey {
				return
			}
			var m *mr.MR
			if f.DMALen > 0 {
				var err error
				if m, _, err = q.port.MRs().Lookup(f.RKey, q.pd, f.VA, uint64(f.DMALen), mr.RemoteRead); err != nil {
					r.fatalNAK(aeth.NAKRemoteAccess, psn)
					return
				}
			}
			if q.trace != nil {
				q.tracef("duplicate READ PSN %d: replaying %d bytes", psn, f.DMALen)
			}
			r.replies.dropRead(psn) // what is still queued of the first answer
			r.queueRead(m, psn, f.VA, f.DMALen)
			return
		}
	case bth.RCCompareSwap, bth.RCFetchAdd:
		for i := range r.res {
			if res := &r.res[i]; res.valid && res.atomic && res.first == psn {
				if q.trace != nil {
					q.tracef("duplicate atomic PSN %d: answering the saved value", psn)
				}
				r.queueAtomicAck(psn, res.orig)
				return
			}
		}
	default:
		// Acknowledge everything received so far (C9-105).
		r.deferAck(r.psn.Add(bth.PSNMask))
	}
}

// accepted finishes a SEND or WRITE packet: the expected PSN moves on and
// an ACK is due if the requester asked for one (never on UC).
func (r *responder) accepted(p *wire.Packet, psn bth.PSN) {
	r.psn = psn.Add(1)
	if p.BTH.AckReq() && !r.q.uc {
		r.deferAck(psn)
	}
}

// deferAck schedules an ACK of psn. ACKs are cumulative, so one sent at the
// end of the batch covers every one deferred before it. Behind queued
// answers, the ACK waits its turn in the queue.
func (r *responder) deferAck(psn bth.PSN) {
	if !r.replies.empty() {
		r.replies.push(reply{kind: replyAck, syn: aeth.ACK(aeth.UnlimitedCredits), psn: psn})
		return
	}
	if r.ackPending {
		r.q.stats.AckDeferred++
	}
	r.ackPending, r.ackPSN = true, psn
}

// flushAck sends the deferred ACK, if any. An ACK is deferred only while
// no answer is queued, and every answer queued flushes it first, so it is
// never sent ahead of an answer to an earlier request.
func (r *responder) flushAck() {
	if r.ackPending && r.replies.empty() {
		r.ackPending = false
		r.transmitAck(aeth.ACK(aeth.UnlimitedCredits), r.ackPSN)
	}
}

// sendAck sends an ACK or NAK after any deferred one and any answer still
// queued.
func (r *responder) sendAck(syn aeth.Syndrome, psn bth.PSN) {
	if !r.replies.empty() {
		r.replies.push(reply{kind: replyAck, syn: syn, psn: psn})
		r.q.port.Schedule(r.q)
		return
	}
	r.flushAck()
	r.transmitAck(syn, psn)
}

func (r *responder) transmitAck(syn aeth.Syndrome, psn bth.PSN) {
	h := &r.hdr
	*h = r.q.headers(bth.RCAcknowledge, psn)
	h.AETH.Syndrome, h.AETH.MSN = syn, r.msn
	r.q.build(h, 0, nil)
}

func (r *responder) rnrNAK(psn bth.PSN) {
	q := r.q
	q.stats.SendRNRErr++
	if q.trace != nil {
		q.tracef("no receive posted for PSN %d: RNR NAK, timer %v", psn, aeth.RNRTimer(q.attr.MinRNRTimer))
	}
	r.sendAck(aeth.RNRNAK(aeth.RNRTimer(q.attr.MinRNRTimer)), psn)
	r.nak = nakRNR
}

// fatalNAK answers a request the responder cannot execute with a NAK and
// moves the QP to ERR (IBTA Vol 1 §9.9.2, class B and C errors). The NAK
// goes at once: answers still queued are not sent from ERR.
func (r *responder) fatalNAK(code aeth.NAKCode, psn bth.PSN) {
	r.replies.clear()
	r.flushAck()
	r.transmitAck(aeth.NAK(code), psn)
	r.q.enterError(nil, 0)
}

// failRecv completes the receive WQE being filled with status, NAKs the
// requester and moves the QP to ERR. A UC responder sends no NAK: a
// receive WQE it cannot write into fails the QP all the same (rxe:
// ERR_MALFORMED_WQE, class A for every service).
func (r *responder) failRecv(status cq.Status, code aeth.NAKCode, psn bth.PSN) {
	q := r.q
	if r.held {
		r.completeRecv(cq.WC{Status: status, Opcode: cq.OpRecv})
	}
	if q.uc {
		q.enterError(nil, 0)
		return
	}
	r.fatalNAK(code, psn)
}

// queueRead queues the responses to a READ of length bytes at va from m,
// with PSNs from psn on (IBTA Vol 1 §9.7.5.1.3), and sends the first burst.
func (r *responder) queueRead(m *mr.MR, psn bth.PSN, va uint64, length uint32) {
	r.flushAck()
	n := r.readPackets(length)
	r.replies.push(reply{kind: replyRead, m: m, psn: psn, va: va, left: length, n: n})
	r.sendReplies(readBurst)
}

// queueAtomicAck answers an atomic, in order behind any queued answers.
func (r *responder) queueAtomicAck(psn bth.PSN, orig uint64) {
	r.flushAck()
	r.replies.push(reply{kind: replyAtomic, psn: psn, orig: orig})
	r.sendReplies(readBurst)
}

// readBurst is how many responses the path that executed a request sends
// before it leaves the rest to the worker: enough for a READ of a few
// path MTUs to go at once, few enough that the receive path soon moves on.
const readBurst = 64

// sendReplies sends up to budget packets from the head of the reply queue,
// then the deferred ACK if the queue is empty; if answers remain, it asks
// the device to run the QP again, at once or, when pacing holds a READ's
// responses back, at the QP's pacing timer.
func (r *responder) sendReplies(budget int) {
	q := r.q
	for budget > 0 && !r.replies.empty() {
		rp := r.replies.front()
		switch rp.kind {
		case replyRead:
			budget -= r.sendReadResponses(rp, budget)
			if rp.i < rp.n {
				if q.cc.held() {
					return // paced: the QP's timer brings it back for the next burst
				}
				continue
			}
		case replyAtomic:
			h := &r.hdr
			*h = q.headers(bth.RCAtomicAcknowledge, rp.psn)
			h.AETH.Syndrome, h.AETH.MSN = aeth.ACK(aeth.UnlimitedCredits), r.msn
			h.AtomicAck = rp.orig
			q.build(h, 0, nil)
			budget--
		case replyAck:
			r.transmitAck(rp.syn, rp.psn)
			budget--
		}
		r.replies.pop()
	}
	if r.replies.empty() {
		r.flushAck()
		return
	}
	q.port.Schedule(q)
}

// sendReadResponses sends up to budget of a READ's remaining responses,
// fewer if the congestion control's pacing holds them back; the first and
// last carry an AETH. It returns how many it sent.
func (r *responder) sendReadResponses(rp *reply, budget int) int {
	q := r.q
	mtu := uint32(q.mtu)
	h := &r.hdr
	sent := 0
	for ; rp.i < rp.n && sent < budget; sent++ {
		if !q.cc.mayBuild() {
			break
		}
		op := bth.RCRDMAReadResponseMiddle
		switch {
		case rp.n == 1:
			op = bth.RCRDMAReadResponseOnly
		case rp.i == 0:
			op = bth.RCRDMAReadResponseFirst
		case rp.i == rp.n-1:
			op = bth.RCRDMAReadResponseLast
		}
		*h = q.headers(op, rp.psn.Add(rp.i))
		h.AETH.Syndrome, h.AETH.MSN = aeth.ACK(aeth.UnlimitedCredits), r.msn
		n := min(rp.left, mtu)
		m, va := rp.m, rp.va
		q.build(h, n, func(dst []byte) {
			if m.ReadAt(va, dst) != nil {
				clear(dst) // the region went away mid-reply
			}
		})
		rp.va += uint64(n)
		rp.left -= n
		rp.i++
	}
	return sent
}

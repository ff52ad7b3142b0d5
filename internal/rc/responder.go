package rc

import (
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/trace"
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
	ackDup     bool // the deferred ACK answers a duplicate
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
	if wc.Status == cq.StatusSuccess {
		q.stats.RDMARecvs++ // rxe's do_complete of a receive WQE
	}
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
			r.sendNAK(aeth.NAK(aeth.NAKPSNSequenceError), r.psn, p)
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
		r.dropped(p, "more READs and atomics waiting than max_dest_rd_atomic")
		return
	}
	r.nak = nakNone
	if !r.inSequence(op, p.Info.Position) {
		r.fatalNAK(aeth.NAKInvalidRequest, p, "opcode out of sequence")
		return
	}
	r.execute(p, op, psn)
}

// execute checks the lengths of a request that arrived in order and
// executes it. op is its opcode as RC numbers it (a UC opcode less its
// service bits).
func (r *responder) execute(p *wire.Packet, op bth.Opcode, psn bth.PSN) {
	info := p.Info
	if info.Payload && !r.payloadLenOK(info.Position, len(p.Payload)) {
		r.reject(aeth.NAKInvalidRequest, p, "payload length breaks the path MTU rule (C9-92)")
		return
	}
	if !dmaLenOK(p) {
		r.reject(aeth.NAKInvalidRequest, p, "DMA length more than 2^31 (C9-94)")
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
		r.fatalNAK(aeth.NAKInvalidRequest, p, "opcode not supported")
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
			r.noReceive(p)
			return
		}
		r.wqeMRs = r.wqeMRs[:0]
		for _, s := range r.wqe.sges {
			m, _, err := q.port.MRs().Lookup(s.LKey, q.pd, s.Addr, uint64(s.Length), mr.LocalWrite)
			if err != nil {
				r.failRecv(cq.StatusLocProtErr, aeth.NAKRemoteOperation, p, "receive work request's SGE: "+err.Error())
				return
			}
			r.wqeMRs = append(r.wqeMRs, m)
		}
		r.sendOff = 0
	}
	if uint64(r.sendOff)+uint64(len(p.Payload)) > r.wqe.length {
		const why = "SEND longer than the receive work request"
		if q.uc {
			// rxe: ERR_LENGTH, class D for UC, the WQE stays for the
			// next SEND; with an SRQ class E, it completes in error.
			r.dropMessage(cq.StatusRemInvReqErr, p, why)
			return
		}
		r.failRecv(cq.StatusLocLenErr, aeth.NAKInvalidRequest, p, why)
		return
	}
	if !scatter(r.wqe.sges, r.wqeMRs, r.sendOff, p.Payload) {
		r.failRecv(cq.StatusLocProtErr, aeth.NAKRemoteOperation, p, errScatter)
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
		r.reject(aeth.NAKInvalidRequest, p, "RDMA WRITE to a QP without REMOTE_WRITE access")
		return
	}
	// A WRITE with immediate consumes a receive WQE, taken before the
	// rkey and the length are checked, as rxe's check_resource comes
	// before its check_rkey: with an SRQ, a UC WRITE that fails them
	// completes the WQE in error (class E).
	imm := p.ImmDt != nil
	if imm && !r.takeRecv() {
		r.noReceive(p)
		return
	}
	if pos&wire.First != 0 {
		f := p.RETH.Fields()
		r.writeMR, r.writeVA, r.writeLeft, r.writeLen = nil, f.VA, f.DMALen, f.DMALen
		if f.DMALen > 0 { // a zero-length WRITE names no memory (C9-88)
			m, _, err := q.port.MRs().Lookup(f.RKey, q.pd, f.VA, uint64(f.DMALen), mr.RemoteWrite)
			if err != nil {
				r.reject(aeth.NAKRemoteAccess, p, err.Error())
				return
			}
			r.writeMR = m
		}
	}
	n := uint32(len(p.Payload))
	if n > r.writeLeft || pos&wire.Last != 0 && n != r.writeLeft {
		r.reject(aeth.NAKInvalidRequest, p, "RDMA WRITE payload does not add up to its DMA length")
		return
	}
	if n > 0 {
		if err := r.writeMR.WriteAt(r.writeVA, p.Payload); err != nil {
			r.reject(aeth.NAKRemoteAccess, p, errScatter)
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
			r.fatalNAK(aeth.NAKRemoteAccess, p, err.Error())
			return
		}
	}
	n := r.readPackets(f.DMALen)
	res := r.newResource()
	*res = resource{valid: true, first: psn, last: psn.Add(n - 1), va: f.VA, rkey: f.RKey, length: f.DMALen}
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
	why := "RDMA READ to a QP without REMOTE_READ access or max_dest_rd_atomic"
	if need == mr.RemoteAtomic {
		why = "atomic to a QP without REMOTE_ATOMIC access or max_dest_rd_atomic"
	}
	r.fatalNAK(aeth.NAKInvalidRequest, p, why)
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
		r.fatalNAK(aeth.NAKInvalidRequest, p, "atomic address not 8-byte aligned")
		return
	}
	m, _, err := q.port.MRs().Lookup(f.RKey, q.pd, f.VA, 8, mr.RemoteAtomic)
	if err != nil {
		r.fatalNAK(aeth.NAKRemoteAccess, p, err.Error())
		return
	}
	var orig uint64
	if p.BTH.Opcode() == bth.RCCompareSwap {
		orig, err = m.CompareAndSwap(f.VA, f.Compare, f.SwapAdd)
	} else {
		orig, err = m.FetchAndAdd(f.VA, f.SwapAdd)
	}
	if err != nil {
		r.fatalNAK(aeth.NAKInvalidRequest, p, err.Error())
		return
	}
	res := r.newResource()
	*res = resource{valid: true, atomic: true, first: psn, last: psn, va: f.VA, rkey: f.RKey, orig: orig}
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
// original value and never executed twice. A READ or atomic whose saved
// state is gone, or a READ that asks for more than it did, is dropped.
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
				r.dropped(p, "duplicate READ asks for more than the saved READ (C9-107)")
				return
			}
			var m *mr.MR
			if f.DMALen > 0 {
				var err error
				if m, _, err = q.port.MRs().Lookup(f.RKey, q.pd, f.VA, uint64(f.DMALen), mr.RemoteRead); err != nil {
					r.fatalNAK(aeth.NAKRemoteAccess, p, err.Error())
					return
				}
			}
			r.duplicate(p, trace.DuplicateReplayed)
			r.replies.dropRead(psn) // what is still queued of the first answer
			r.queueRead(m, psn, f.VA, f.DMALen)
			return
		}
		r.dropped(p, "duplicate READ not among the saved READs")
	case bth.RCCompareSwap, bth.RCFetchAdd:
		for i := range r.res {
			if res := &r.res[i]; res.valid && res.atomic && res.first == psn {
				r.duplicate(p, trace.DuplicateAnswered)
				r.queueAtomicAck(psn, res.orig)
				return
			}
		}
		r.dropped(p, "duplicate atomic not among the saved atomics")
	default:
		// Acknowledge everything received so far (C9-105). An ACK owed
		// to new requests leaves first, on its own, so that the
		// requester sees its packet answered twice: one that probed
		// learns that its probe was not needed (timers.onDuplicateAck).
		// Later duplicates in the batch share one ACK.
		r.duplicate(p, trace.DuplicateAcked)
		if !r.ackDup {
			r.flushAck()
		}
		r.deferAck(r.psn.Add(bth.PSNMask), true)
	}
}

// duplicate reports the duplicate request p and what the responder does
// with it, a trace.Duplicate reason.
func (r *responder) duplicate(p *wire.Packet, what string) {
	r.q.event(trace.Event{Kind: trace.Duplicate, PSN: uint32(p.BTH.PSN()), Expected: uint32(r.psn), Opcode: p.BTH.Opcode().String(), Reason: what})
}

// dropped reports the request p dropped without an answer, and why.
func (r *responder) dropped(p *wire.Packet, why string) {
	r.q.event(trace.Event{Kind: trace.Dropped, PSN: uint32(p.BTH.PSN()), Opcode: p.BTH.Opcode().String(), Reason: why})
}

// accepted finishes a SEND or WRITE packet: the expected PSN moves on and
// an ACK is due if the requester asked for one (never on UC).
func (r *responder) accepted(p *wire.Packet, psn bth.PSN) {
	r.psn = psn.Add(1)
	if p.BTH.AckReq() && !r.q.uc {
		r.deferAck(psn, false)
	}
}

// deferAck schedules an ACK of psn, for a duplicate request if dup. ACKs
// are cumulative, so one sent at the end of the batch covers every one
// deferred before it. Behind queued answers, the ACK waits its turn in the
// queue.
func (r *responder) deferAck(psn bth.PSN, dup bool) {
	if !r.replies.empty() {
		r.replies.push(reply{kind: replyAck, syn: aeth.ACK(aeth.UnlimitedCredits), psn: psn})
		return
	}
	if r.ackPending {
		r.q.stats.AckDeferred++
	}
	r.ackPending, r.ackDup, r.ackPSN = true, dup, psn
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

// sendNAK sends the NAK or RNR NAK syn with PSN psn, in answer to the
// request p, after any deferred ACK and any answer still queued. It is
// reported as it leaves: queued, it may never leave, replaced by an ACK
// queued behind it (replyQueue.push).
func (r *responder) sendNAK(syn aeth.Syndrome, psn bth.PSN, p *wire.Packet) {
	req, op := p.BTH.PSN(), p.BTH.Opcode()
	if !r.replies.empty() {
		r.replies.push(reply{kind: replyAck, syn: syn, psn: psn, req: req, op: op})
		r.q.port.Schedule(r.q)
		return
	}
	r.flushAck()
	r.nakSent(syn, req, psn, op, "")
	r.transmitAck(syn, psn)
}

// nakSent reports the NAK or RNR NAK syn leaving in answer to the request
// at psn with opcode op, when the responder expected the PSN expected;
// why is the rule the request broke, if the syndrome does not say it all.
func (r *responder) nakSent(syn aeth.Syndrome, psn, expected bth.PSN, op bth.Opcode, why string) {
	ev := trace.Event{PSN: uint32(psn), Opcode: op.String(), Reason: why}
	if syn.Type() == aeth.TypeRNRNAK {
		ev.Kind, ev.Wait = trace.RNRNAKSent, syn.RNRTimer().Duration()
	} else {
		ev.Kind, ev.Expected, ev.Syndrome = trace.NAKSent, uint32(expected), syndrome(syn.NAKCode())
	}
	r.q.event(ev)
}

func (r *responder) transmitAck(syn aeth.Syndrome, psn bth.PSN) {
	h := &r.hdr
	*h = r.q.headers(bth.RCAcknowledge, psn)
	h.AETH.Syndrome, h.AETH.MSN = syn, r.msn
	r.q.build(h, 0, nil)
}

// rnrNAK answers the SEND or WRITE with immediate p, which finds no
// receive WQE, with an RNR NAK.
func (r *responder) rnrNAK(p *wire.Packet) {
	q := r.q
	q.stats.SendRNRErr++
	r.sendNAK(aeth.RNRNAK(aeth.RNRTimer(q.attr.MinRNRTimer)), p.BTH.PSN(), p)
	r.nak = nakRNR
}

// fatalNAK answers the request p, which the responder cannot execute for
// the reason why, with a NAK and moves the QP to ERR (IBTA Vol 1 §9.9.2,
// class B and C errors). The NAK goes at once: answers still queued are
// not sent from ERR.
func (r *responder) fatalNAK(code aeth.NAKCode, p *wire.Packet, why string) {
	if code == aeth.NAKRemoteAccess && p.ImmDt == nil {
		// An R_Key violation no receive completion reports (C9-222.1.1).
		r.q.async(AsyncAccessErr)
	}
	psn := p.BTH.PSN()
	r.replies.clear()
	r.flushAck()
	r.nakSent(aeth.NAK(code), psn, r.psn, p.BTH.Opcode(), why)
	r.transmitAck(aeth.NAK(code), psn)
	r.q.enterError(nil, 0, errNAKSent)
}

// failRecv completes the receive WQE being filled by p with status, NAKs
// the requester and moves the QP to ERR; why says what went wrong. A UC
// responder sends no NAK: a receive WQE it cannot write into fails the QP
// all the same (rxe: ERR_MALFORMED_WQE, class A for every service).
func (r *responder) failRecv(status cq.Status, code aeth.NAKCode, p *wire.Packet, why string) {
	q := r.q
	if r.held {
		r.completeRecv(cq.WC{Status: status, Opcode: cq.OpRecv})
	}
	if q.uc {
		q.enterError(nil, 0, why)
		return
	}
	r.fatalNAK(code, p, why)
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
			if rp.syn.Type() != aeth.TypeACK {
				r.nakSent(rp.syn, rp.req, rp.psn, rp.op, "")
			}
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

package qp

import (
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
)

// responder executes requests in PSN order (IBTA Vol 1 §9.7.4; rxe_resp.c).
type responder struct {
	psn     bth.PSN  // the expected PSN
	msn     aeth.MSN // messages completed
	nakSent bool     // a sequence or RNR NAK for psn is out: drop until psn arrives

	// The message in progress, between its FIRST and LAST packets.
	inSend    bool
	inWrite   bool
	wqe       *recvWQE // the receive WQE a SEND is filling
	wqeMRs    []*mr.MR
	sendOff   uint32
	writeMR   *mr.MR
	writeVA   uint64
	writeLeft uint32
	writeLen  uint32

	// Saved READ and atomic requests, to answer duplicates (C9-104).
	res     []resource
	resNext int

	ackPending bool // an ACK is deferred, to be merged with later ones
	ackPSN     bth.PSN
	hdr        wire.Headers
}

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

func (r *responder) start(q *QP) {
	q.resp = responder{
		psn: bth.PSN(q.attr.RQPSN),
		res: make([]resource, max(int(q.attr.MaxDestRdAtomic), 1)),
	}
}

// handleRequest is the responder's receive path.
func (q *QP) handleRequest(p *wire.Packet) {
	switch q.attr.State {
	case StateRTR, StateRTS, StateSQD:
	default:
		return
	}
	op := p.BTH.Opcode()
	if op.Service() != bth.ServiceRC {
		return // rxe drops opcodes of another service silently
	}
	r := &q.resp
	psn := p.BTH.PSN()
	switch d := psn.Diff(r.psn); {
	case d > 0:
		q.stats.OutOfSeqRequest++
		if !r.nakSent {
			if q.trace != nil {
				q.tracef("request PSN %d, expected %d: NAK sequence error", psn, r.psn)
			}
			q.sendAck(aeth.NAK(aeth.NAKPSNSequenceError), r.psn)
			r.nakSent = true
		}
		return
	case d < 0:
		q.stats.DuplicateRequest++
		q.duplicateRequest(p, psn)
		return
	}
	r.nakSent = false
	info := p.Info
	if !q.inSequence(op, info.Position) {
		q.tracef("opcode %v out of sequence", op)
		q.fatalNAK(aeth.NAKInvalidRequest, psn)
		return
	}
	if info.Payload && !q.payloadLenOK(info.Position, len(p.Payload)) {
		q.tracef("%v PSN %d: %d-byte payload breaks the path MTU rule (C9-92)", op, psn, len(p.Payload))
		q.fatalNAK(aeth.NAKInvalidRequest, psn)
		return
	}
	if !dmaLenOK(p) {
		q.tracef("%v PSN %d: DMA length %d is more than 2^31 (C9-94)", op, psn, p.RETH.DMALen())
		q.fatalNAK(aeth.NAKInvalidRequest, psn)
		return
	}
	switch op {
	case bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLast, bth.RCSendLastWithImm,
		bth.RCSendOnly, bth.RCSendOnlyWithImm, bth.RCSendLastWithInvalidate, bth.RCSendOnlyWithInvalidate:
		q.executeSend(p, psn)
	case bth.RCRDMAWriteFirst, bth.RCRDMAWriteMiddle, bth.RCRDMAWriteLast, bth.RCRDMAWriteLastWithImm,
		bth.RCRDMAWriteOnly, bth.RCRDMAWriteOnlyWithImm:
		q.executeWrite(p, psn)
	case bth.RCRDMAReadRequest:
		q.executeRead(p, psn)
	case bth.RCCompareSwap, bth.RCFetchAdd:
		q.executeAtomic(p, psn)
	default: // FLUSH and ATOMIC_WRITE are not supported yet
		q.fatalNAK(aeth.NAKInvalidRequest, psn)
	}
}

// inSequence checks the opcode against the message in progress (C9-91).
func (q *QP) inSequence(op bth.Opcode, pos wire.Position) bool {
	r := &q.resp
	isSend := op <= bth.RCSendOnlyWithImm || op == bth.RCSendLastWithInvalidate || op == bth.RCSendOnlyWithInvalidate
	isWrite := op >= bth.RCRDMAWriteFirst && op <= bth.RCRDMAWriteOnlyWithImm
	switch {
	case pos == wire.Middle || pos == wire.Last:
		return isSend && r.inSend || isWrite && r.inWrite
	default: // a new message
		return !r.inSend && !r.inWrite
	}
}

// payloadLenOK applies C9-92: FIRST and MIDDLE packets carry exactly one
// path MTU; LAST and ONLY packets at most one.
func (q *QP) payloadLenOK(pos wire.Position, n int) bool {
	if pos == wire.First || pos == wire.Middle {
		return n == q.mtu
	}
	return n <= q.mtu && (pos != wire.Last || n > 0)
}

func (q *QP) executeSend(p *wire.Packet, psn bth.PSN) {
	r := &q.resp
	pos := p.Info.Position
	if pos&wire.First != 0 {
		if q.rq.head == q.rq.tail {
			q.rnrNAK(psn)
			return
		}
		r.wqe = q.rq.at(q.rq.head)
		r.wqeMRs = r.wqeMRs[:0]
		for _, s := range r.wqe.sges {
			m, _, err := q.port.MRs().Lookup(s.LKey, q.pd, s.Addr, uint64(s.Length), mr.LocalWrite)
			if err != nil {
				q.tracef("receive work request %d: SGE %v: %v", r.wqe.wrid, s.LKey, err)
				q.failRecv(cq.StatusLocProtErr, aeth.NAKRemoteOperation, psn)
				return
			}
			r.wqeMRs = append(r.wqeMRs, m)
		}
		r.sendOff = 0
	}
	if uint64(r.sendOff)+uint64(len(p.Payload)) > r.wqe.length {
		q.tracef("SEND of more than the %d bytes the receive work request %d holds", r.wqe.length, r.wqe.wrid)
		q.failRecv(cq.StatusLocLenErr, aeth.NAKInvalidRequest, psn)
		return
	}
	if !scatter(r.wqe.sges, r.wqeMRs, r.sendOff, p.Payload) {
		q.failRecv(cq.StatusLocProtErr, aeth.NAKRemoteOperation, psn)
		return
	}
	r.sendOff += uint32(len(p.Payload))
	r.inSend = pos&wire.Last == 0
	if pos&wire.Last != 0 {
		wc := cq.WC{WRID: r.wqe.wrid, Opcode: cq.OpRecv, ByteLen: r.sendOff}
		if p.ImmDt != nil {
			wc.ImmData, wc.Flags = p.ImmDt.Imm(), cq.FlagWithImm
		}
		if p.IETH != nil {
			// gorxe has no memory windows or fast-registration MRs to
			// invalidate; the key is reported as rdma-core reports it.
			wc.InvalidatedRKey, wc.Flags = uint32(p.IETH.RKey()), cq.FlagWithInv
		}
		q.rq.head++
		r.wqe = nil
		r.msn = (r.msn + 1) & aeth.MSNMask
		q.pushRecv(wc)
	}
	q.accepted(p, psn)
}

func (q *QP) executeWrite(p *wire.Packet, psn bth.PSN) {
	r := &q.resp
	pos := p.Info.Position
	if pos&wire.First != 0 {
		if q.attr.AccessFlags&mr.RemoteWrite == 0 {
			q.tracef("RDMA WRITE to a QP without REMOTE_WRITE access")
			q.fatalNAK(aeth.NAKInvalidRequest, psn)
			return
		}
		f := p.RETH.Fields()
		r.writeMR, r.writeVA, r.writeLeft, r.writeLen = nil, f.VA, f.DMALen, f.DMALen
		if f.DMALen > 0 { // a zero-length WRITE names no memory (C9-88)
			m, _, err := q.port.MRs().Lookup(mr.Key(f.RKey), q.pd, f.VA, uint64(f.DMALen), mr.RemoteWrite)
			if err != nil {
				q.tracef("RDMA WRITE rkey %v va %#x len %d: %v", mr.Key(f.RKey), f.VA, f.DMALen, err)
				q.fatalNAK(aeth.NAKRemoteAccess, psn)
				return
			}
			r.writeMR = m
		}
		q.stats.RDMARecvs++
	}
	n := uint32(len(p.Payload))
	if n > r.writeLeft || pos&wire.Last != 0 && n != r.writeLeft {
		q.tracef("RDMA WRITE carries %d bytes where %d remain of %d", n, r.writeLeft, r.writeLen)
		q.fatalNAK(aeth.NAKInvalidRequest, psn)
		return
	}
	imm := p.ImmDt != nil
	if imm && q.rq.head == q.rq.tail {
		q.rnrNAK(psn) // WRITE with immediate consumes a receive
		return
	}
	if n > 0 {
		if err := r.writeMR.WriteAt(r.writeVA, p.Payload); err != nil {
			q.fatalNAK(aeth.NAKRemoteAccess, psn)
			return
		}
	}
	r.writeVA += uint64(n)
	r.writeLeft -= n
	r.inWrite = pos&wire.Last == 0
	if pos&wire.Last != 0 {
		r.msn = (r.msn + 1) & aeth.MSNMask
		if imm {
			w := q.rq.at(q.rq.head)
			q.rq.head++
			q.pushRecv(cq.WC{
				WRID: w.wrid, Opcode: cq.OpRecvRDMAWithImm, ByteLen: r.writeLen,
				ImmData: p.ImmDt.Imm(), Flags: cq.FlagWithImm,
			})
		}
	}
	q.accepted(p, psn)
}

func (q *QP) executeRead(p *wire.Packet, psn bth.PSN) {
	if q.attr.AccessFlags&mr.RemoteRead == 0 || q.attr.MaxDestRdAtomic == 0 {
		q.tracef("RDMA READ to a QP without REMOTE_READ access or max_dest_rd_atomic")
		q.fatalNAK(aeth.NAKInvalidRequest, psn)
		return
	}
	f := p.RETH.Fields()
	var m *mr.MR
	if f.DMALen > 0 {
		var err error
		m, _, err = q.port.MRs().Lookup(mr.Key(f.RKey), q.pd, f.VA, uint64(f.DMALen), mr.RemoteRead)
		if err != nil {
			q.tracef("RDMA READ rkey %v va %#x len %d: %v", mr.Key(f.RKey), f.VA, f.DMALen, err)
			q.fatalNAK(aeth.NAKRemoteAccess, psn)
			return
		}
	}
	n := q.readPackets(f.DMALen)
	res := q.newResource()
	*res = resource{valid: true, first: psn, last: psn.Add(n - 1), va: f.VA, rkey: mr.Key(f.RKey), length: f.DMALen}
	q.stats.RDMARecvs++
	r := &q.resp
	r.msn = (r.msn + 1) & aeth.MSNMask // C9-148: counted when executed
	r.psn = res.last.Add(1)
	q.sendReadResponses(m, psn, f.VA, f.DMALen)
}

// readPackets returns how many responses, and so PSNs, a READ of n bytes
// takes: at least one.
func (q *QP) readPackets(n uint32) uint32 {
	return max((n+uint32(q.mtu)-1)/uint32(q.mtu), 1)
}

func (q *QP) executeAtomic(p *wire.Packet, psn bth.PSN) {
	if q.attr.AccessFlags&mr.RemoteAtomic == 0 || q.attr.MaxDestRdAtomic == 0 {
		q.tracef("atomic to a QP without REMOTE_ATOMIC access or max_dest_rd_atomic")
		q.fatalNAK(aeth.NAKInvalidRequest, psn)
		return
	}
	f := p.AtomicETH.Fields()
	if f.VA%8 != 0 {
		q.tracef("atomic at %#x is not 8-byte aligned", f.VA)
		q.fatalNAK(aeth.NAKInvalidRequest, psn)
		return
	}
	m, _, err := q.port.MRs().Lookup(mr.Key(f.RKey), q.pd, f.VA, 8, mr.RemoteAtomic)
	if err != nil {
		q.tracef("atomic rkey %v va %#x: %v", mr.Key(f.RKey), f.VA, err)
		q.fatalNAK(aeth.NAKRemoteAccess, psn)
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
		q.fatalNAK(aeth.NAKInvalidRequest, psn)
		return
	}
	res := q.newResource()
	*res = resource{valid: true, atomic: true, first: psn, last: psn, va: f.VA, rkey: mr.Key(f.RKey), orig: orig}
	q.stats.RDMARecvs++
	r := &q.resp
	r.msn = (r.msn + 1) & aeth.MSNMask
	r.psn = psn.Add(1)
	q.sendAtomicAck(psn, orig)
}

// newResource takes the next slot of the ring; like rxe, gorxe does not
// refuse a requester that exceeds max_dest_rd_atomic but recycles the
// oldest entry.
func (q *QP) newResource() *resource {
	r := &q.resp
	res := &r.res[r.resNext]
	r.resNext = (r.resNext + 1) % len(r.res)
	return res
}

// duplicateRequest answers a request the responder has already executed
// (IBTA Vol 1 §9.7.5.1.1): SEND and WRITE are acknowledged again, READs
// replayed from their saved request, atomics answered with the saved
// original value and never executed twice.
func (q *QP) duplicateRequest(p *wire.Packet, psn bth.PSN) {
	r := &q.resp
	switch op := p.BTH.Opcode(); op {
	case bth.RCRDMAReadRequest:
		f := p.RETH.Fields()
		for i := range r.res {
			res := &r.res[i]
			if !res.valid || res.atomic || !psn.InRange(res.first, res.last) {
				continue
			}
			// A retried READ asks for a tail of the original (C9-107).
			if f.VA < res.va || uint64(f.VA)+uint64(f.DMALen) > res.va+uint64(res.length) || mr.Key(f.RKey) != res.rkey {
				return
			}
			var m *mr.MR
			if f.DMALen > 0 {
				var err error
				if m, _, err = q.port.MRs().Lookup(mr.Key(f.RKey), q.pd, f.VA, uint64(f.DMALen), mr.RemoteRead); err != nil {
					q.fatalNAK(aeth.NAKRemoteAccess, psn)
					return
				}
			}
			if q.trace != nil {
				q.tracef("duplicate READ PSN %d: replaying %d bytes", psn, f.DMALen)
			}
			q.sendReadResponses(m, psn, f.VA, f.DMALen)
			return
		}
	case bth.RCCompareSwap, bth.RCFetchAdd:
		for i := range r.res {
			if res := &r.res[i]; res.valid && res.atomic && res.first == psn {
				if q.trace != nil {
					q.tracef("duplicate atomic PSN %d: answering the saved value", psn)
				}
				q.sendAtomicAck(psn, res.orig)
				return
			}
		}
	default:
		// Acknowledge everything received so far (C9-105).
		q.deferAck(r.psn.Add(bth.PSNMask))
	}
}

// accepted finishes a SEND or WRITE packet: the expected PSN moves on and
// an ACK is due if the requester asked for one.
func (q *QP) accepted(p *wire.Packet, psn bth.PSN) {
	q.resp.psn = psn.Add(1)
	if p.BTH.AckReq() {
		q.deferAck(psn)
	}
}

// deferAck schedules an ACK of psn. ACKs are cumulative, so one sent at the
// end of the batch covers every one deferred before it.
func (q *QP) deferAck(psn bth.PSN) {
	r := &q.resp
	if r.ackPending {
		q.stats.AckDeferred++
	}
	r.ackPending, r.ackPSN = true, psn
}

// flushAck sends the deferred ACK, if any.
func (r *responder) flushAck(q *QP) {
	if r.ackPending {
		r.ackPending = false
		q.transmitAck(aeth.ACK(aeth.UnlimitedCredits), r.ackPSN)
	}
}

// sendAck sends an ACK or NAK now, after any deferred one.
func (q *QP) sendAck(syn aeth.Syndrome, psn bth.PSN) {
	q.resp.flushAck(q)
	q.transmitAck(syn, psn)
}

func (q *QP) transmitAck(syn aeth.Syndrome, psn bth.PSN) {
	h := &q.resp.hdr
	*h = wire.Headers{BTH: bth.Fields{Opcode: bth.RCAcknowledge, PKey: bth.DefaultPKey, DestQP: bth.QPN(q.attr.DestQPNum), PSN: psn}}
	h.AETH.Syndrome, h.AETH.MSN = syn, q.resp.msn
	q.transmit(h, nil, 0, 0)
}

func (q *QP) rnrNAK(psn bth.PSN) {
	q.stats.SendRNRErr++
	if q.trace != nil {
		q.tracef("no receive posted for PSN %d: RNR NAK, timer %v", psn, aeth.RNRTimer(q.attr.MinRNRTimer))
	}
	q.sendAck(aeth.RNRNAK(aeth.RNRTimer(q.attr.MinRNRTimer)), psn)
	q.resp.nakSent = true
}

// fatalNAK answers a request the responder cannot execute with a NAK and
// moves the QP to ERR (IBTA Vol 1 §9.9.2, class B and C errors).
func (q *QP) fatalNAK(code aeth.NAKCode, psn bth.PSN) {
	q.sendAck(aeth.NAK(code), psn)
	q.enterError(nil, 0)
}

// failRecv completes the receive WQE being filled with status, NAKs the
// requester and moves the QP to ERR.
func (q *QP) failRecv(status cq.Status, code aeth.NAKCode, psn bth.PSN) {
	r := &q.resp
	if r.wqe != nil {
		q.pushRecv(cq.WC{WRID: r.wqe.wrid, Status: status, Opcode: cq.OpRecv})
		q.rq.head++
		r.wqe = nil
	}
	q.fatalNAK(code, psn)
}

// sendReadResponses sends the responses to a READ of length bytes at va
// from m, with PSNs from psn on (IBTA Vol 1 §9.7.5.1.3). The first and last
// carry an AETH.
func (q *QP) sendReadResponses(m *mr.MR, psn bth.PSN, va uint64, length uint32) {
	q.resp.flushAck(q)
	n := q.readPackets(length)
	h := &q.resp.hdr
	for i := range n {
		op := bth.RCRDMAReadResponseMiddle
		switch {
		case n == 1:
			op = bth.RCRDMAReadResponseOnly
		case i == 0:
			op = bth.RCRDMAReadResponseFirst
		case i == n-1:
			op = bth.RCRDMAReadResponseLast
		}
		*h = wire.Headers{BTH: bth.Fields{Opcode: op, PKey: bth.DefaultPKey, DestQP: bth.QPN(q.attr.DestQPNum), PSN: psn.Add(i)}}
		h.AETH.Syndrome, h.AETH.MSN = aeth.ACK(aeth.UnlimitedCredits), q.resp.msn
		off := i * uint32(q.mtu)
		q.transmit(h, m, va+uint64(off), min(length-off, uint32(q.mtu)))
	}
}

func (q *QP) sendAtomicAck(psn bth.PSN, orig uint64) {
	q.resp.flushAck(q)
	h := &q.resp.hdr
	*h = wire.Headers{BTH: bth.Fields{Opcode: bth.RCAtomicAcknowledge, PKey: bth.DefaultPKey, DestQP: bth.QPN(q.attr.DestQPNum), PSN: psn}}
	h.AETH.Syndrome, h.AETH.MSN = aeth.ACK(aeth.UnlimitedCredits), q.resp.msn
	h.AtomicAck = orig
	q.transmit(h, nil, 0, 0)
}

// transmit builds a response packet from h and n bytes of payload read
// from m at va, and hands it to the port.
func (q *QP) transmit(h *wire.Headers, m *mr.MR, va uint64, n uint32) {
	buf := q.port.NewBuffer()
	t := buf[q.txOff:]
	off := h.Encode(t)
	if n > 0 {
		if m.ReadAt(va, t[off:off+int(n)]) != nil {
			clear(t[off : off+int(n)]) // the region went away mid-reply
		}
	}
	off += int(n)
	pad := wire.PadLen(int(n))
	clear(t[off : off+pad])
	bth.Header(t).SetPadCnt(pad)
	q.queueTx(buf, off+pad)
}

package rc

import (
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/reth"
)

// requester turns send work requests into packets (IBTA Vol 1 §9.7.1;
// rxe_req.c): segmentation by path MTU, PSNs, AckReq, a bounded window.
// Its position is the WQE being sent (idx, between sq.head and sq.tail),
// the packet within it, and the next PSN. The completer moves it back
// (goBack) and forward (skipTo); nothing else writes it.
type requester struct {
	q       *QP
	idx     uint64
	pkt     uint32
	psn     bth.PSN
	sentMax bth.PSN // one past the highest PSN ever sent: later PSNs are ghosts
	noAck   int     // packets sent since the last one with AckReq
	state   sendState
	hdr     wire.Headers
}

// sendState is why the requester is or is not sending.
type sendState uint8

const (
	// sendIdle: not started (before RTS), or its queue is empty.
	sendIdle sendState = iota
	// sendReady: it sends whatever the window and limits allow.
	sendReady
	// sendWindowFull: the window filled; sending resumes once ACKs have
	// opened an ackInterval's worth of it, so that packets go to the link
	// in batches rather than a few per ACK.
	sendWindowFull
)

// start positions the requester at the head of the send queue with the
// QP's initial send PSN, as the QP enters RTS.
func (r *requester) start() {
	q := r.q
	psn := q.attr.SQPSN
	*r = requester{q: q, idx: q.sq.head, psn: psn, sentMax: psn, state: sendReady}
	q.comp.start(psn)
}

// outstanding reports whether the requester stands past the oldest
// unanswered PSN, or has probed for the recovery to learn whether the
// packets after it are arriving (recoveryConfirm): whether it has packets
// out that it has not gone back on, and whose answers the timers wait for.
func (r *requester) outstanding() bool {
	return r.psn != r.q.comp.oldest() || r.q.comp.state == recoveryConfirm
}

// unanswered reports whether any PSN ever sent is still unanswered, gone
// back on or not.
func (r *requester) unanswered() bool { return r.sentMax != r.q.comp.oldest() }

// maxBurst bounds how many packets one call sends while it holds the QP,
// so that the receive loop, which needs the lock to take ACKs, and other
// QPs' work are not held up; the rest is left to the QP's worker.
const maxBurst = 256

// sendSome sends packets while the send queue has work, the window has
// room, and nothing (an RNR wait, max_rd_atomic, a fence, the congestion
// control's pacing) holds it back.
//
// In SQD the send queue drains: work requests already started are sent to
// the end (retransmissions included), and no new one starts.
func (r *requester) sendSome() {
	q := r.q
	if !q.canSend() || q.tm.rnrWaiting() {
		return
	}
	for n := 0; r.idx != q.sq.tail; n++ {
		if n == maxBurst {
			q.port.Schedule(q) // let others have the lock; the device calls Run
			return
		}
		if !r.windowRoom() {
			return
		}
		w := q.sq.at(r.idx)
		if q.attr.State == qp.StateSQD && !w.started {
			return
		}
		if r.pkt == 0 && !r.canStart(w) {
			return
		}
		if !q.cc.mayBuild() {
			return // paced: the QP's timer brings it back for the next burst
		}
		if !w.started && !r.startWQE(w) {
			return
		}
		r.sendPacket(w, false)
		if q.attr.State == qp.StateErr {
			return
		}
	}
}

// windowRoom reports whether the window lets another packet go.
func (r *requester) windowRoom() bool {
	if r.q.uc {
		return true // nothing is acknowledged, so nothing holds a window open
	}
	oldest := r.q.comp.oldest()
	if r.q.comp.holds(r.psn) {
		return false // a few packets after a timeout, until one is answered
	}
	room := int32(r.q.window) - r.psn.Diff(oldest)
	switch {
	case room <= 0:
		r.state = sendWindowFull
		return false
	case r.state == sendWindowFull && room < int32(r.ackInterval()):
		return false
	}
	r.state = sendReady
	return true
}

// canStart applies the limits on starting a WQE: max_rd_atomic for READs
// and atomics (never more than the peer's max_dest_rd_atomic, which the
// application passes as this QP's max_rd_atomic), and the fence, which
// waits for every earlier READ and atomic.
func (r *requester) canStart(w *sendWQE) bool {
	q := r.q
	if !w.isReadOrAtomic() && w.wr.Flags&qp.SendFence == 0 {
		return true
	}
	outstanding := 0
	for i := q.sq.head; i != r.idx; i++ {
		if o := q.sq.at(i); o.isReadOrAtomic() && !o.acked {
			outstanding++
		}
	}
	if w.wr.Flags&qp.SendFence != 0 && outstanding > 0 {
		return false
	}
	return !w.isReadOrAtomic() || outstanding < max(int(q.attr.MaxRdAtomic), 1)
}

// startWQE resolves the WQE's local buffers and assigns its PSNs. A bad
// lkey or range fails the WQE with LOC_PROT_ERR and the QP moves to ERR.
func (r *requester) startWQE(w *sendWQE) bool {
	q := r.q
	need := mr.Access(0)
	if w.isReadOrAtomic() {
		need = mr.LocalWrite // responses are written into local memory
	}
	w.mrs = w.mrs[:0]
	for _, s := range w.wr.SGList {
		m, _, err := q.port.MRs().Lookup(s.LKey, q.pd, s.Addr, uint64(s.Length), need)
		if err != nil {
			q.enterError(w, cq.StatusLocProtErr, "local SGE: "+err.Error())
			return false
		}
		w.mrs = append(w.mrs, m)
	}
	w.npkts = 1
	if w.wr.Opcode != qp.WRAtomicCmpAndSwp && w.wr.Opcode != qp.WRAtomicFetchAndAdd && w.length > 0 {
		w.npkts = (w.length + uint32(q.mtu) - 1) / uint32(q.mtu)
	}
	w.first = r.psn
	w.last = w.first.Add(w.npkts - 1)
	w.started = true
	return true
}

// sendPacket builds and transmits packet r.pkt of w. A probe asks for an
// ACK whatever its place in the window, and so do the few packets resent
// after a local ACK timeout or an unanswered probe (recoveryFew) and the last packet of a
// burst that pacing ends: the burst is then acknowledged while the
// requester waits for the next, and the local ACK timer and the tail-loss
// probe never take the wait for a loss.
func (r *requester) sendPacket(w *sendWQE, probe bool) {
	q := r.q
	k := r.pkt
	off := k * uint32(q.mtu)
	first, last := k == 0, k == w.npkts-1
	h := &r.hdr
	*h = q.headers(0, r.psn)
	var payload uint32
	switch w.wr.Opcode {
	case qp.WRRDMARead:
		// One request asks for every remaining response; after a retry
		// it asks only for what is missing (IBTA C9-88, rxe req_retry).
		h.BTH.Opcode = bth.RCRDMAReadRequest
		h.RETH.VA, h.RETH.RKey, h.RETH.DMALen = w.wr.RemoteAddr+uint64(off), w.wr.RKey, w.length-off
		last = true
	case qp.WRAtomicCmpAndSwp, qp.WRAtomicFetchAndAdd:
		h.BTH.Opcode = bth.RCFetchAdd
		if w.wr.Opcode == qp.WRAtomicCmpAndSwp {
			h.BTH.Opcode = bth.RCCompareSwap
			h.AtomicETH.SwapAdd, h.AtomicETH.Compare = w.wr.Swap, w.wr.CompareAdd
		} else {
			h.AtomicETH.SwapAdd = w.wr.CompareAdd
		}
		h.AtomicETH.VA, h.AtomicETH.RKey = w.wr.RemoteAddr, w.wr.RKey
	default:
		payload = min(w.length-off, uint32(q.mtu))
		h.BTH.Opcode = sendOpcode(w.wr.Opcode, first, last)
		if q.uc {
			h.BTH.Opcode = unreliable(h.BTH.Opcode)
		}
		if first && (w.wr.Opcode == qp.WRRDMAWrite || w.wr.Opcode == qp.WRRDMAWriteWithImm) {
			h.RETH.VA, h.RETH.RKey, h.RETH.DMALen = w.wr.RemoteAddr, w.wr.RKey, w.length
		}
		h.Imm = w.wr.ImmData
		h.IETH = reth.Key(w.wr.InvalidateRKey)
		h.BTH.SE = last && w.wr.Flags&qp.SendSolicited != 0
	}
	r.noAck++
	if q.uc {
		// UC asks for no acknowledgement (rxe sets AckReq for RC only).
	} else if last || r.noAck >= r.ackInterval() || probe || q.comp.resendingFew() || q.cc.lastOfBurst(h.Len()+int(payload)+wire.PadLen(int(payload))) {
		h.BTH.AckReq = true
		r.noAck = 0
	}
	fresh := r.psn == r.sentMax

	q.build(h, payload, func(dst []byte) { q.gather(w, off, dst) })

	if w.wr.Opcode == qp.WRRDMARead {
		r.psn = w.last.Add(1)
	} else {
		r.psn = r.psn.Add(1)
	}
	if r.psn.After(r.sentMax) {
		r.sentMax = r.psn
	}
	if q.uc {
		// Nothing is acknowledged, retransmitted or timed: the WQE is
		// done once its last packet is built, and completes when that
		// packet has gone to the link (completer.retireSent).
		w.acked = last
	} else {
		q.tm.onPacketSent(h.BTH.PSN, h.BTH.AckReq, fresh)
	}
	if last {
		r.idx++
		r.pkt = 0
	} else {
		r.pkt++
	}
}

// ackInterval is how many packets go out between two with AckReq: at most
// MaxAckInterval, and a quarter of the window, so that ACKs arrive while
// the window still has room and the pipe never drains waiting for one.
func (r *requester) ackInterval() int {
	return max(min(qp.MaxAckInterval, r.q.window/4), 1)
}

// sendOpcode picks the SEND or RDMA WRITE opcode for a packet's place in
// its message (IBTA Vol 1 §9.4.1).
func sendOpcode(op qp.WROpcode, first, last bool) bth.Opcode {
	type pos struct{ first, middle, last, only bth.Opcode }
	var p pos
	switch op {
	case qp.WRSend:
		p = pos{bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLast, bth.RCSendOnly}
	case qp.WRSendWithImm:
		p = pos{bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLastWithImm, bth.RCSendOnlyWithImm}
	case qp.WRSendWithInv:
		p = pos{bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLastWithInvalidate, bth.RCSendOnlyWithInvalidate}
	case qp.WRRDMAWrite:
		p = pos{bth.RCRDMAWriteFirst, bth.RCRDMAWriteMiddle, bth.RCRDMAWriteLast, bth.RCRDMAWriteOnly}
	case qp.WRRDMAWriteWithImm:
		p = pos{bth.RCRDMAWriteFirst, bth.RCRDMAWriteMiddle, bth.RCRDMAWriteLastWithImm, bth.RCRDMAWriteOnlyWithImm}
	}
	switch {
	case first && last:
		return p.only
	case first:
		return p.first
	case last:
		return p.last
	}
	return p.middle
}

// gather copies the message bytes [off, off+len(dst)) of w into dst, from
// its inline data or its SGEs.
func (q *QP) gather(w *sendWQE, off uint32, dst []byte) {
	if w.wr.Flags&qp.SendInline != 0 {
		copy(dst, w.inline[off:])
		return
	}
	forEachSGE(w.wr.SGList, off, len(dst), func(i int, addr uint64, lo, hi int) {
		_ = w.mrs[i].ReadAt(addr, dst[lo:hi])
	})
}

// scatter copies src into the message bytes [off, off+len(src)) of the
// SGE list, through the regions mrs resolved. It reports false if a region
// went away.
func scatter(sges []qp.SGE, mrs []*mr.MR, off uint32, src []byte) bool {
	ok := true
	forEachSGE(sges, off, len(src), func(i int, addr uint64, lo, hi int) {
		if mrs[i].WriteAt(addr, src[lo:hi]) != nil {
			ok = false
		}
	})
	return ok
}

// forEachSGE walks the part [off, off+n) of a message laid out over sges,
// calling fn with each SGE's index, the address within it, and the part
// [lo, hi) of the n bytes that SGE holds.
func forEachSGE(sges []qp.SGE, off uint32, n int, fn func(i int, addr uint64, lo, hi int)) {
	done := 0
	for i, s := range sges {
		if done == n {
			return
		}
		if off >= s.Length {
			off -= s.Length
			continue
		}
		take := min(int(s.Length-off), n-done)
		fn(i, s.Addr+uint64(off), done, done+take)
		done += take
		off = 0
	}
}

// goBack rewinds the requester to psn, which the completer has not seen
// acknowledged, to send everything from there again (go-back-N, IBTA Vol 1
// §9.7.5.2).
func (r *requester) goBack(psn bth.PSN) {
	r.seek(psn)
	r.noAck = 0
}

// skipTo moves a requester that a retransmission left behind psn, the
// oldest PSN not yet acknowledged, forward to it: what lies before is
// acknowledged and need not go again.
func (r *requester) skipTo(psn bth.PSN) {
	if r.psn.Before(psn) {
		r.seek(psn)
	}
}

// seek moves the requester to psn: into the started WQE that holds it, or
// to the first WQE not yet started.
func (r *requester) seek(psn bth.PSN) {
	q := r.q
	for i := q.sq.head; i != q.sq.tail; i++ {
		w := q.sq.at(i)
		if !w.started {
			r.idx, r.pkt, r.psn = i, 0, psn
			return
		}
		if psn.InRange(w.first, w.last) {
			r.idx = i
			r.pkt = uint32(psn.Diff(w.first)) // a READ asks again for what is missing
			r.psn = psn
			return
		}
	}
	r.idx, r.pkt, r.psn = q.sq.tail, 0, psn
}

// rewind puts the requester back at the head of the send queue, which a
// flush has emptied.
func (r *requester) rewind() { r.idx, r.pkt = r.q.sq.head, 0 }

// resendLast sends the last packet sent again, asking for an ACK, without
// moving the requester: the tail-loss probe. If it was lost, it now
// arrives in order and is acknowledged; if only what followed was lost,
// the responder NAKs the gap it now sees; if it arrived, the responder
// acknowledges the duplicate. A READ or atomic is not probed: its
// duplicate would make the responder replay it. It reports whether a
// probe went out.
func (r *requester) resendLast() bool {
	q := r.q
	if !q.canSend() || !r.unanswered() {
		return false
	}
	last := r.sentMax.Add(bth.PSNMask)
	for i := q.sq.head; i != q.sq.tail; i++ {
		w := q.sq.at(i)
		if !w.started {
			return false
		}
		if !last.InRange(w.first, w.last) {
			continue
		}
		if w.isReadOrAtomic() {
			return false
		}
		idx, pkt, psn, noAck, state := r.idx, r.pkt, r.psn, r.noAck, r.state
		r.idx, r.pkt, r.psn = i, uint32(last.Diff(w.first)), last
		r.sendPacket(w, true)
		r.idx, r.pkt, r.psn, r.noAck, r.state = idx, pkt, psn, noAck, state
		return true
	}
	return false
}

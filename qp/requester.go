package qp

import (
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/reth"
)

// requester is the send side's position: the WQE being sent (idx, between
// sq.head and sq.tail), the packet within it, and the next PSN.
type requester struct {
	idx     uint64
	pkt     uint32
	psn     bth.PSN
	sentMax bth.PSN // one past the highest PSN ever sent: later PSNs are ghosts
	noAck   int     // packets sent since the last one with AckReq
	probe   bool    // the packet being sent is a tail-loss probe
	full    bool    // the window filled: wait for a batch's worth of room
	hdr     wire.Headers
	started bool
}

func (r *requester) start(q *QP) {
	psn := bth.PSN(q.attr.SQPSN)
	q.req = requester{idx: q.sq.head, psn: psn, sentMax: psn, started: true}
	q.comp.psn = q.req.psn
	q.comp.retryLeft = q.attr.RetryCnt
	q.comp.rnrLeft = q.attr.RNRRetry
}

// maxBurst bounds how many packets one call sends while it holds the QP,
// so that the receive loop, which needs the lock to take ACKs, and other
// QPs' work are not held up; the rest is left to the QP's worker.
const maxBurst = 256

// sendSome sends packets while the send queue has work, the window has
// room, and nothing (an RNR wait, max_rd_atomic, a fence) holds it back.
//
// In SQD the send queue drains: work requests already started are sent to
// the end (retransmissions included), and no new one starts.
func (q *QP) sendSome() {
	if q.attr.State != StateRTS && q.attr.State != StateSQD || q.tm.rnrWait {
		return
	}
	for n := 0; q.req.idx != q.sq.tail; n++ {
		if n == maxBurst {
			q.port.Schedule(q) // let others have the lock; the device calls Run
			return
		}
		if !q.windowRoom() {
			return
		}
		w := q.sq.at(q.req.idx)
		if q.attr.State == StateSQD && !w.started {
			return
		}
		if q.req.pkt == 0 && !q.canStart(w) {
			return
		}
		if !w.started {
			if !q.startWQE(w) {
				return
			}
		}
		q.sendPacket(w)
		if q.attr.State == StateErr {
			return
		}
	}
}

// windowRoom reports whether the window lets another packet go. Once the
// window has filled, sending resumes only when ACKs have opened an
// ackInterval's worth of it, so that the packets go to the link in
// batches rather than a few per ACK.
func (q *QP) windowRoom() bool {
	room := int32(q.window) - q.req.psn.Diff(q.comp.psn)
	switch {
	case room <= 0:
		q.req.full = true
		return false
	case q.req.full && room < int32(q.ackInterval()):
		return false
	}
	q.req.full = false
	return true
}

// canStart applies the limits on starting a WQE: max_rd_atomic for READs
// and atomics, and the fence, which waits for every earlier READ and atomic.
func (q *QP) canStart(w *sendWQE) bool {
	if !w.isReadOrAtomic() && w.wr.Flags&SendFence == 0 {
		return true
	}
	outstanding := 0
	for i := q.sq.head; i != q.req.idx; i++ {
		if o := q.sq.at(i); o.isReadOrAtomic() && !o.acked {
			outstanding++
		}
	}
	if w.wr.Flags&SendFence != 0 && outstanding > 0 {
		return false
	}
	return !w.isReadOrAtomic() || outstanding < max(int(q.attr.MaxRdAtomic), 1)
}

// startWQE resolves the WQE's local buffers and assigns its PSNs. A bad
// lkey or range fails the WQE with LOC_PROT_ERR and the QP moves to ERR.
func (q *QP) startWQE(w *sendWQE) bool {
	need := mr.Access(0)
	if w.isReadOrAtomic() {
		need = mr.LocalWrite // responses are written into local memory
	}
	w.mrs = w.mrs[:0]
	for _, s := range w.wr.SGList {
		m, _, err := q.port.MRs().Lookup(s.LKey, q.pd, s.Addr, uint64(s.Length), need)
		if err != nil {
			q.tracef("work request %d: local SGE %v: %v", w.wr.WRID, s.LKey, err)
			q.enterError(w, cq.StatusLocProtErr)
			return false
		}
		w.mrs = append(w.mrs, m)
	}
	w.npkts = 1
	if w.wr.Opcode != WRAtomicCmpAndSwp && w.wr.Opcode != WRAtomicFetchAndAdd && w.length > 0 {
		w.npkts = (w.length + uint32(q.mtu) - 1) / uint32(q.mtu)
	}
	w.first = q.req.psn
	w.last = w.first.Add(w.npkts - 1)
	w.started = true
	if w.wr.Opcode != WRSend && w.wr.Opcode != WRSendWithImm && w.wr.Opcode != WRSendWithInv {
		q.stats.RDMASends++
	}
	return true
}

// sendPacket builds and transmits packet q.req.pkt of w.
func (q *QP) sendPacket(w *sendWQE) {
	k := q.req.pkt
	off := k * uint32(q.mtu)
	first, last := k == 0, k == w.npkts-1
	h := &q.req.hdr
	*h = wire.Headers{BTH: bth.Fields{PKey: bth.DefaultPKey, DestQP: bth.QPN(q.attr.DestQPNum), PSN: q.req.psn}}
	var payload uint32
	switch w.wr.Opcode {
	case WRRDMARead:
		// One request asks for every remaining response; after a retry
		// it asks only for what is missing (IBTA C9-88, rxe req_retry).
		h.BTH.Opcode = bth.RCRDMAReadRequest
		h.RETH = reth.Fields{VA: w.wr.RemoteAddr + uint64(off), RKey: reth.Key(w.wr.RKey), DMALen: w.length - off}
		last = true
	case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
		h.BTH.Opcode = bth.RCFetchAdd
		if w.wr.Opcode == WRAtomicCmpAndSwp {
			h.BTH.Opcode = bth.RCCompareSwap
			h.AtomicETH.SwapAdd, h.AtomicETH.Compare = w.wr.Swap, w.wr.CompareAdd
		} else {
			h.AtomicETH.SwapAdd = w.wr.CompareAdd
		}
		h.AtomicETH.VA, h.AtomicETH.RKey = w.wr.RemoteAddr, reth.Key(w.wr.RKey)
	default:
		payload = min(w.length-off, uint32(q.mtu))
		h.BTH.Opcode = sendOpcode(w.wr.Opcode, first, last)
		if first && (w.wr.Opcode == WRRDMAWrite || w.wr.Opcode == WRRDMAWriteWithImm) {
			h.RETH = reth.Fields{VA: w.wr.RemoteAddr, RKey: reth.Key(w.wr.RKey), DMALen: w.length}
		}
		h.Imm = w.wr.ImmData
		h.IETH = reth.Key(w.wr.InvalidateRKey)
		h.BTH.SE = last && w.wr.Flags&SendSolicited != 0
	}
	q.req.noAck++
	if last || q.req.noAck >= q.ackInterval() || q.req.probe {
		h.BTH.AckReq = true
		q.req.noAck = 0
	}
	fresh := q.req.psn == q.req.sentMax

	buf := q.port.NewBuffer()
	t := buf[q.txOff:]
	n, err := h.Encode(t)
	if payload > 0 && err == nil {
		q.gather(w, off, t[n:n+int(payload)])
	}
	n += int(payload)
	pad := wire.PadLen(int(payload))
	clear(t[n : n+pad])
	bth.Header(t).SetPadCnt(pad)
	n += pad
	if err != nil {
		// The QP chose the opcode itself, so this is a bug. Nothing goes
		// out: the packet is lost, and the retry limit ends the QP.
		q.port.FreeBuffer(buf)
		q.tracef("requester: %v", err)
	} else {
		q.queueTx(buf, n)
	}

	if w.wr.Opcode == WRRDMARead {
		q.req.psn = w.last.Add(1)
	} else {
		q.req.psn = q.req.psn.Add(1)
	}
	if q.req.psn.After(q.req.sentMax) {
		q.req.sentMax = q.req.psn
	}
	q.tm.onPacketSent(h.BTH.PSN, h.BTH.AckReq, fresh)
	if last {
		q.req.idx++
		q.req.pkt = 0
	} else {
		q.req.pkt++
	}
}

// ackInterval is how many packets go out between two with AckReq: at most
// MaxAckInterval, and a quarter of the window, so that ACKs arrive while
// the window still has room and the pipe never drains waiting for one.
func (q *QP) ackInterval() int {
	return max(min(MaxAckInterval, q.window/4), 1)
}

// sendOpcode picks the SEND or RDMA WRITE opcode for a packet's place in
// its message (IBTA Vol 1 §9.4.1).
func sendOpcode(op WROpcode, first, last bool) bth.Opcode {
	type pos struct{ first, middle, last, only bth.Opcode }
	var p pos
	switch op {
	case WRSend:
		p = pos{bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLast, bth.RCSendOnly}
	case WRSendWithImm:
		p = pos{bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLastWithImm, bth.RCSendOnlyWithImm}
	case WRSendWithInv:
		p = pos{bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLastWithInvalidate, bth.RCSendOnlyWithInvalidate}
	case WRRDMAWrite:
		p = pos{bth.RCRDMAWriteFirst, bth.RCRDMAWriteMiddle, bth.RCRDMAWriteLast, bth.RCRDMAWriteOnly}
	case WRRDMAWriteWithImm:
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
	if w.wr.Flags&SendInline != 0 {
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
func scatter(sges []SGE, mrs []*mr.MR, off uint32, src []byte) bool {
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
func forEachSGE(sges []SGE, off uint32, n int, fn func(i int, addr uint64, lo, hi int)) {
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
func (q *QP) goBack(psn bth.PSN) {
	q.seek(psn)
	q.tm.rttPending = false // Karn: no samples across a retransmission
	q.req.noAck = 0
	q.comp.retrying = true
	q.stats.CompleterRetryErr++
	if q.trace != nil {
		q.tracef("go back to PSN %d", psn)
	}
}

// seek moves the requester to psn: into the started WQE that holds it, or
// to the first WQE not yet started.
func (q *QP) seek(psn bth.PSN) {
	for i := q.sq.head; i != q.sq.tail; i++ {
		w := q.sq.at(i)
		if !w.started {
			q.req.idx, q.req.pkt = i, 0
			q.req.psn = psn
			return
		}
		if psn.InRange(w.first, w.last) {
			q.req.idx = i
			q.req.pkt = uint32(psn.Diff(w.first)) // a READ asks again for what is missing
			q.req.psn = psn
			return
		}
	}
	q.req.idx, q.req.pkt, q.req.psn = q.sq.tail, 0, psn
}

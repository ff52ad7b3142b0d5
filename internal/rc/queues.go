package rc

import (
	"fmt"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire/bth"
)

// sendWQE is a send work queue entry: the posted request, copied so the
// user may reuse theirs, and the transport's progress on it.
type sendWQE struct {
	wr      qp.SendWR
	sges    []qp.SGE // backing store of wr.SGList, MaxSendSGE long
	inline  []byte   // inline data copied at post time
	mrs     []*mr.MR // each SGE's region, resolved when the WQE starts
	length  uint32   // total bytes
	npkts   uint32   // packets (for READ: response packets, hence PSNs)
	first   bth.PSN  // PSN of the first packet
	last    bth.PSN  // PSN of the last packet (READ: of the last response)
	started bool     // PSNs assigned and SGEs resolved
	acked   bool     // done on the wire: ACKed, or every response arrived
	failed  bool     // completes with status
	status  cq.Status
}

func (w *sendWQE) isReadOrAtomic() bool {
	switch w.wr.Opcode {
	case qp.WRRDMARead, qp.WRAtomicCmpAndSwp, qp.WRAtomicFetchAndAdd:
		return true
	}
	return false
}

// sendQueue is the ring of send WQEs (ring). head is the oldest not yet completed,
// tail the next free slot; the requester's position lies between them.
// The indices only grow; a slot is index % len(slots).
//
// The ring holds pointers, and both it and its WQEs are allocated as the
// queue fills, not when the QP is made: a QP that never has more than a
// few work requests outstanding costs a few WQEs, whatever capacity it
// asked for. (A perftest QP asks for 129 send and 513 receive WQEs: 62 KB
// allocated up front, against a budget of 64 KiB an idle QP for 4096 QPs
// a device; TestIdleQPMemory.) A WQE once allocated stays with its slot
// and keeps its slices' backing, so the steady state allocates nothing.
// The pointers also keep a WQE where it is when the ring grows: the
// responder holds the receive WQE a SEND is filling.
type sendQueue struct {
	ring[sendWQE]
	nsge int // SGE capacity of a new WQE's slices
}

func (s *sendQueue) init(c qp.Cap) {
	*s = sendQueue{ring: ring[sendWQE]{limit: uint64(c.MaxSendWR)}, nsge: max(int(c.MaxSendSGE), 1)}
}

// free returns the WQE in the tail slot, to be filled and then queued by
// advancing tail. The queue must not be full.
func (s *sendQueue) free() *sendWQE {
	w := s.tailSlot()
	if *w == nil {
		*w = &sendWQE{sges: make([]qp.SGE, 0, s.nsge), mrs: make([]*mr.MR, 0, s.nsge)}
	}
	return *w
}

// recvWQE is a receive work queue entry.
type recvWQE struct {
	wrid   uint64
	sges   []qp.SGE
	length uint64
}

// recvQueue is a ring of receive WQEs, allocated as it fills, as the
// send queue's.
type recvQueue struct {
	ring[recvWQE]
	nsge int
}

func (r *recvQueue) init(c qp.Cap) {
	*r = recvQueue{ring: ring[recvWQE]{limit: uint64(c.MaxRecvWR)}, nsge: max(int(c.MaxRecvSGE), 1)}
}

// free returns the WQE in the tail slot, as sendQueue.free.
func (r *recvQueue) free() *recvWQE {
	w := r.tailSlot()
	if *w == nil {
		*w = &recvWQE{sges: make([]qp.SGE, 0, r.nsge)}
	}
	return *w
}

// post queues a copy of wr. The queue must not be full.
func (r *recvQueue) post(wr *qp.RecvWR) {
	w := r.free()
	w.wrid = wr.WRID
	w.sges = append(w.sges[:0], wr.SGList...)
	w.length = 0
	for _, s := range wr.SGList {
		w.length += uint64(s.Length)
	}
	r.tail++
}

// copyFrom makes w a copy of src, reusing w's SGE slice.
func (w *recvWQE) copyFrom(src *recvWQE) {
	w.wrid, w.length = src.wrid, src.length
	w.sges = append(w.sges[:0], src.sges...)
}

// ring is the ring of a work queue: pointers to its WQEs, head the oldest
// not yet completed, tail the next free slot. The indices only grow; a
// slot is index % len(slots). It grows, doubling, as it fills, up to
// limit entries outstanding.
type ring[T any] struct {
	slots      []*T
	limit      uint64 // the queue's capacity: outstanding WQEs allowed
	head, tail uint64
}

func (r *ring[T]) at(i uint64) *T { return r.slots[i%uint64(len(r.slots))] }
func (r *ring[T]) full() bool     { return r.tail-r.head == r.limit }

// tailSlot returns the tail slot, growing the ring if every slot holds an
// outstanding WQE; the slot holds nil until its first use. The queue must
// not be full.
func (r *ring[T]) tailSlot() **T {
	if r.tail-r.head == uint64(len(r.slots)) {
		r.grow()
	}
	return &r.slots[r.tail%uint64(len(r.slots))]
}

// grow makes the ring twice as long (at least 4 slots, at most limit),
// each entry, the live ones from head on among them, at its index's place
// in the new length.
func (r *ring[T]) grow() {
	old := uint64(len(r.slots))
	next := make([]*T, min(max(2*old, 4), r.limit))
	for k := range old {
		i := r.head + k
		next[i%uint64(len(next))] = r.slots[i%old]
	}
	r.slots = next
}

// PostSend queues send work requests, as ibv_post_send. It checks each
// request before queueing any of it; on error it returns the index of the
// first request it did not queue. In ERR the requests are queued and
// completed at once with WR_FLUSH_ERR, as rxe does.
func (q *QP) PostSend(wrs []qp.SendWR) (int, error) {
	q.mu.Lock()
	defer q.unlock()
	switch q.attr.State {
	case qp.StateRTS, qp.StateSQD, qp.StateErr:
	default:
		return 0, fmt.Errorf("%w: post_send in %v", qp.ErrNotPosting, q.attr.State)
	}
	for i := range wrs {
		if err := q.checkSendWR(&wrs[i]); err != nil {
			return i, err
		}
		if q.sq.full() {
			return i, fmt.Errorf("%w: %d send work requests outstanding", qp.ErrQueueFull, q.sq.limit)
		}
		q.enqueueSend(&wrs[i])
	}
	if q.attr.State == qp.StateErr {
		q.flush()
	} else {
		q.req.sendSome() // the doorbell: the caller's goroutine sends
		// An ACK the responder still owes (rnic.Device.Poll leaves them
		// for later) goes out too, behind the new requests in the same
		// link batch. A link hands on a batch's packets in order, so a
		// peer that waits for one of the requests (write_lat's answer)
		// waits for the ACK's building (its headers and ICRC) but not for
		// its trip through the kernel; and the two cost one system call,
		// not two (BenchmarkRawPingPong, BenchmarkPolledPingPong). The
		// ACK is not delayed either, whatever the program does next.
		q.resp.flushAck()
	}
	return len(wrs), nil
}

func (q *QP) checkSendWR(wr *qp.SendWR) error {
	var total uint64
	for _, s := range wr.SGList {
		total += uint64(s.Length)
	}
	switch {
	case uint32(len(wr.SGList)) > q.attr.Cap.MaxSendSGE && wr.Flags&qp.SendInline == 0:
		return fmt.Errorf("%w: %d SGEs, the QP allows %d", qp.ErrBadWR, len(wr.SGList), q.attr.Cap.MaxSendSGE)
	case wr.Flags&qp.SendInline != 0 && wr.Inline != nil && len(wr.Inline) > int(q.attr.Cap.MaxInlineData):
		return fmt.Errorf("%w: %d bytes inline, the QP allows %d", qp.ErrBadWR, len(wr.Inline), q.attr.Cap.MaxInlineData)
	case wr.Flags&qp.SendInline != 0 && total > uint64(q.attr.Cap.MaxInlineData):
		return fmt.Errorf("%w: %d bytes inline, the QP allows %d", qp.ErrBadWR, total, q.attr.Cap.MaxInlineData)
	case total > qp.MaxMsgSize:
		return fmt.Errorf("%w: %d-byte message, the largest is %d", qp.ErrBadWR, total, qp.MaxMsgSize)
	}
	if q.uc {
		return checkUnreliableWR(wr)
	}
	switch wr.Opcode {
	case qp.WRSend, qp.WRSendWithImm, qp.WRSendWithInv, qp.WRRDMAWrite, qp.WRRDMAWriteWithImm:
	case qp.WRRDMARead:
		if wr.Flags&qp.SendInline != 0 {
			return fmt.Errorf("%w: RDMA READ cannot be inline", qp.ErrBadWR)
		}
	case qp.WRAtomicCmpAndSwp, qp.WRAtomicFetchAndAdd:
		if total != 8 || wr.Flags&qp.SendInline != 0 || len(wr.SGList) != 1 {
			return fmt.Errorf("%w: an atomic needs one 8-byte local buffer, not %d bytes", qp.ErrBadWR, total)
		}
		if wr.RemoteAddr%8 != 0 {
			return fmt.Errorf("%w: atomic remote address %#x is not 8-byte aligned", qp.ErrBadWR, wr.RemoteAddr)
		}
	default:
		return fmt.Errorf("%w: opcode %v is not supported on RC", qp.ErrBadWR, wr.Opcode)
	}
	return nil
}

func (q *QP) enqueueSend(wr *qp.SendWR) {
	w := q.sq.free()
	sges, mrs, inline := w.sges[:0], w.mrs[:0], w.inline[:0]
	*w = sendWQE{wr: *wr, sges: sges, mrs: mrs, inline: inline}
	var total uint64
	if wr.Flags&qp.SendInline != 0 && wr.Opcode != qp.WRRDMARead {
		// Inline data is copied now, from the caller's registered or
		// unregistered memory alike: the lkey is not checked (as
		// IBV_SEND_INLINE). gorxe addresses it through the SGE's region.
		if wr.Inline != nil {
			inline = append(inline, wr.Inline...)
			total = uint64(len(wr.Inline))
		} else {
			for _, s := range wr.SGList {
				inline = q.appendInline(inline, s)
				total += uint64(s.Length)
			}
		}
		w.inline = inline
		w.wr.Inline = nil
		w.wr.SGList = nil
	} else {
		w.sges = append(w.sges, wr.SGList...)
		w.wr.SGList = w.sges
		for _, s := range wr.SGList {
			total += uint64(s.Length)
		}
	}
	w.length = uint32(total)
	q.sq.tail++
}

// appendInline copies an inline SGE's bytes. Inline data names memory by
// address: gorxe finds it through the region the lkey names, if that
// region covers it, and otherwise copies zeros (the caller asked for
// bytes gorxe cannot address; the length still counts).
func (q *QP) appendInline(b []byte, s qp.SGE) []byte {
	n := len(b)
	b = append(b, make([]byte, s.Length)...)
	if m, _, err := q.port.MRs().Lookup(s.LKey, q.pd, s.Addr, uint64(s.Length), 0); err == nil {
		_ = m.ReadAt(s.Addr, b[n:])
	}
	return b
}

// PostRecv queues receive work requests, as ibv_post_recv. Receives may
// be posted from INIT on; in ERR they complete at once with WR_FLUSH_ERR.
func (q *QP) PostRecv(wrs []qp.RecvWR) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n, err := postRecv(&q.rq, q.srq != nil, &q.attr, wrs)
	if err == nil && q.attr.State == qp.StateErr {
		q.flush()
	}
	return n, err
}

// postRecv checks and queues receive work requests on rq, for a QP with
// attributes a (a shared queue's QP takes none): what ibv_post_recv does
// on every QP type. It returns how many it queued; in ERR the caller
// completes them at once.
func postRecv(rq *recvQueue, onSRQ bool, a *qp.Attr, wrs []qp.RecvWR) (int, error) {
	if onSRQ {
		return 0, errSRQPostRecv
	}
	if a.State == qp.StateReset {
		return 0, fmt.Errorf("%w: post_recv in RESET", qp.ErrNotPosting)
	}
	for i := range wrs {
		wr := &wrs[i]
		if uint32(len(wr.SGList)) > a.Cap.MaxRecvSGE {
			return i, fmt.Errorf("%w: %d SGEs, the QP allows %d", qp.ErrBadWR, len(wr.SGList), a.Cap.MaxRecvSGE)
		}
		if rq.full() {
			return i, fmt.Errorf("%w: %d receive work requests outstanding", qp.ErrQueueFull, rq.limit)
		}
		rq.post(wr)
	}
	return len(wrs), nil
}

// errSRQPostRecv refuses a PostRecv on a QP that receives from a shared
// queue, as rxe's post_recv does (EINVAL).
var errSRQPostRecv = fmt.Errorf("%w: the QP receives from a shared receive queue: post to the SRQ", qp.ErrBadWR)

// isSend reports whether op is a SEND, which rxe's rdma_sends counts.
func isSend(op qp.WROpcode) bool {
	return op == qp.WRSend || op == qp.WRSendWithImm || op == qp.WRSendWithInv
}

// completeSend retires a send WQE with a work completion when it failed,
// was signaled, or the QP signals all.
func (q *QP) completeSend(w *sendWQE, status cq.Status) {
	if isSend(w.wr.Opcode) {
		q.stats.RDMASends++ // rxe's do_complete: every SEND retired, signaled or not
	}
	if status == cq.StatusSuccess && w.wr.Flags&qp.SendSignaled == 0 && !q.sigAll {
		return
	}
	wc := cq.WC{WRID: w.wr.WRID, Status: status}
	switch w.wr.Opcode {
	case qp.WRRDMAWrite, qp.WRRDMAWriteWithImm:
		wc.Opcode = cq.OpRDMAWrite
	case qp.WRRDMARead:
		wc.Opcode, wc.ByteLen = cq.OpRDMARead, w.length
	case qp.WRAtomicCmpAndSwp:
		wc.Opcode, wc.ByteLen = cq.OpCompSwap, 8
	case qp.WRAtomicFetchAndAdd:
		wc.Opcode, wc.ByteLen = cq.OpFetchAdd, 8
	default:
		wc.Opcode = cq.OpSend
	}
	q.pushSend(wc)
}

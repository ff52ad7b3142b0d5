package rc

import (
	"fmt"
	"sync"

	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
)

// SRQ is a shared receive queue (IBTA Vol 1 §10.2.9.5; rxe_srq.c): one
// ring of receive WQEs from which the responders of every QP created with
// it take theirs. Those QPs run on different goroutines, so the queue has
// its own lock, taken under a QP's (rnic's lock order). A responder takes
// a WQE by value when a message's first packet arrives (take): the WQE
// leaves the queue at once, and no slot of the ring is held while the
// message fills it.
//
// What a QP does with a WQE it took differs from a WQE of its own queue
// in two ways. A WQE cannot go back to a shared queue, so where a UC or
// UD responder without an SRQ drops a message and leaves the WQE for the
// next (IBTA class D), with an SRQ it completes the WQE with an error
// (class E), as rxe's do_class_d1e_error and its RESPST_ERR_LENGTH and
// RESPST_ERR_RKEY_VIOLATION do. And the queue belongs to no QP: a QP
// that goes to ERR completes only the WQE it had taken, with
// WR_FLUSH_ERR; the WQEs still queued stay for the other QPs.
type SRQ struct {
	mu      sync.Mutex
	pd      *mr.PD
	rq      recvQueue
	maxSGE  uint32
	limit   uint32 // srq_limit; 0 when disarmed
	onLimit func()
}

// NewSRQ creates a shared receive queue in pd with attr's sizes and limit.
// As rxe's rxe_srq_from_init, it takes attr.SRQLimit at creation too,
// which arms the limit event at once (ibv_create_srq(3) calls the field
// irrelevant there; rxe keeps it). onLimit, if not nil, is called, without
// the queue's lock, when a take leaves fewer WQEs than the armed limit.
func NewSRQ(pd *mr.PD, attr qp.SRQAttr, onLimit func()) (*SRQ, error) {
	switch {
	case pd == nil:
		return nil, fmt.Errorf("%w: an SRQ needs a PD", qp.ErrAttr)
	case attr.MaxWR < 1 || attr.MaxWR > qp.MaxWR:
		return nil, fmt.Errorf("%w: SRQ max_wr %d (want 1..%d)", qp.ErrAttr, attr.MaxWR, qp.MaxWR)
	case attr.MaxSGE > qp.MaxSGE:
		return nil, fmt.Errorf("%w: SRQ max_sge %d (at most %d)", qp.ErrAttr, attr.MaxSGE, qp.MaxSGE)
	case attr.SRQLimit > attr.MaxWR:
		return nil, fmt.Errorf("%w: srq_limit %d is more than max_wr %d", qp.ErrAttr, attr.SRQLimit, attr.MaxWR)
	}
	s := &SRQ{pd: pd, maxSGE: max(attr.MaxSGE, 1), limit: attr.SRQLimit, onLimit: onLimit}
	s.rq.init(qp.Cap{MaxRecvWR: attr.MaxWR, MaxRecvSGE: s.maxSGE})
	return s, nil
}

// PD returns the protection domain the queue was created in.
func (s *SRQ) PD() *mr.PD { return s.pd }

// PostRecv queues receive work requests, as ibv_post_srq_recv. On error
// it returns the index of the first request it did not queue.
func (s *SRQ) PostRecv(wrs []qp.RecvWR) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range wrs {
		wr := &wrs[i]
		if uint32(len(wr.SGList)) > s.maxSGE {
			return i, fmt.Errorf("%w: %d SGEs, the SRQ allows %d", qp.ErrBadWR, len(wr.SGList), s.maxSGE)
		}
		if s.rq.full() {
			return i, fmt.Errorf("%w: %d receive work requests outstanding on the SRQ", qp.ErrQueueFull, s.rq.limit)
		}
		s.rq.post(wr)
	}
	return len(wrs), nil
}

// Modify changes the queue's size or limit, as ibv_modify_srq: mask says
// which of attr's MaxWR and SRQLimit apply. A size smaller than the WQEs
// posted, or than the limit, is refused, as rxe refuses them; a limit
// more than the size too. A limit of 0 disarms the event. Nothing changes
// when an error is returned.
func (s *SRQ) Modify(attr *qp.SRQAttr, mask qp.SRQAttrMask) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if extra := mask &^ (qp.SRQAttrMaxWR | qp.SRQAttrLimit); extra != 0 {
		return fmt.Errorf("%w: SRQ attribute mask %#x", qp.ErrAttr, uint32(extra))
	}
	size, limit := uint32(s.rq.limit), s.limit
	if mask&qp.SRQAttrMaxWR != 0 {
		size = attr.MaxWR
	}
	if mask&qp.SRQAttrLimit != 0 {
		limit = attr.SRQLimit
	}
	posted := s.rq.tail - s.rq.head
	switch {
	case size < 1 || size > qp.MaxWR:
		return fmt.Errorf("%w: SRQ max_wr %d (want 1..%d)", qp.ErrAttr, size, qp.MaxWR)
	case uint64(size) < posted:
		return fmt.Errorf("%w: SRQ max_wr %d is less than the %d work requests posted", qp.ErrAttr, size, posted)
	case limit > size:
		return fmt.Errorf("%w: srq_limit %d is more than max_wr %d", qp.ErrAttr, limit, size)
	}
	s.rq.limit = uint64(size)
	s.limit = limit
	return nil
}

// Query returns the queue's attributes, as ibv_query_srq: its size, SGEs
// per WQE, and the limit, 0 once the event has fired.
func (s *SRQ) Query() qp.SRQAttr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return qp.SRQAttr{MaxWR: uint32(s.rq.limit), MaxSGE: s.maxSGE, SRQLimit: s.limit}
}

// Posted returns how many receive WQEs are queued.
func (s *SRQ) Posted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.rq.tail - s.rq.head)
}

// take copies the oldest WQE into w, reusing w's SGE slice, and removes
// it from the queue; it reports false when the queue is empty. If fewer
// WQEs remain than an armed limit, the limit is disarmed and onLimit
// called (rxe's get_srq_wqe), after the lock is released.
func (s *SRQ) take(w *recvWQE) bool {
	s.mu.Lock()
	if s.rq.head == s.rq.tail {
		s.mu.Unlock()
		return false
	}
	w.copyFrom(s.rq.at(s.rq.head))
	s.rq.head++
	fire := s.limit != 0 && s.rq.tail-s.rq.head < uint64(s.limit)
	if fire {
		s.limit = 0
	}
	s.mu.Unlock()
	if fire && s.onLimit != nil {
		s.onLimit()
	}
	return true
}

// sharedQueue returns the SRQ ia names, or nil, and zeroes ia's receive
// sizes when it names one: a QP with an SRQ has no receive queue of its
// own, and ibv_query_qp reports its max_recv_wr and max_recv_sge as 0,
// as rxe does.
func sharedQueue(ia *qp.InitAttr) (*SRQ, error) {
	if ia.SRQ == nil {
		return nil, nil
	}
	s, ok := ia.SRQ.(*SRQ)
	if !ok || s == nil {
		return nil, fmt.Errorf("%w: %T is not a shared receive queue of this device", qp.ErrAttr, ia.SRQ)
	}
	if s.pd != ia.PD {
		// rxe does not check; the IBTA leaves it open (o10-22.2.1 lets
		// them differ). gorxe keeps one PD for a QP's receives, so that
		// a WQE's lkeys are checked in the PD it was posted for.
		return nil, fmt.Errorf("%w: the SRQ is of another protection domain than the QP", qp.ErrAttr)
	}
	ia.Cap.MaxRecvWR, ia.Cap.MaxRecvSGE = 0, 0
	return s, nil
}

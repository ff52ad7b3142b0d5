package rnic

import (
	"errors"
	"fmt"

	"github.com/gorxe/gorxe/internal/rc"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
)

// SRQ is a shared receive queue of this device, ibv_srq: QPs created with
// it (qp.InitAttr.SRQ) take their receive WQEs from it, in the order they
// were posted, whichever QP a message arrives on (internal/rc's srq.go
// has the engine's rules). It is a qp.SRQ.
type SRQ struct {
	e     *rc.SRQ
	dev   *Device
	users int  // QPs created with it and not destroyed, under dev.mu
	gone  bool // destroyed, under dev.mu
}

// ErrSRQInUse is returned by an SRQ's Destroy while QPs use it, as the
// kernel's ib_destroy_srq_user refuses (EBUSY).
var ErrSRQInUse = errors.New("rnic: SRQ in use by queue pairs")

// CreateSRQ creates a shared receive queue in pd, as ibv_create_srq:
// attr.MaxWR receive WQEs of up to attr.MaxSGE SGEs each (1 to
// qp.MaxWR, and qp.MaxSGE). attr.SRQLimit, as rxe takes it at creation,
// arms the limit event at once when it is not 0. The event,
// EventSRQLimitReached, comes from GetAsyncEvent.
func (d *Device) CreateSRQ(pd *mr.PD, attr qp.SRQAttr) (*SRQ, error) {
	d.mu.RLock()
	closed := d.closed
	d.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	s := &SRQ{dev: d}
	e, err := rc.NewSRQ(pd, attr, func() { d.events.post(AsyncEvent{Type: EventSRQLimitReached, SRQ: s}) })
	if err != nil {
		return nil, err
	}
	s.e = e
	return s, nil
}

// PostRecv queues receive work requests, as ibv_post_srq_recv. On error
// it returns the index of the first request it did not queue.
func (s *SRQ) PostRecv(wrs []qp.RecvWR) (int, error) { return s.e.PostRecv(wrs) }

// Modify changes the queue's size (qp.SRQAttrMaxWR) or arms its limit
// (qp.SRQAttrLimit; 0 disarms it), as ibv_modify_srq. Growing is always
// allowed; shrinking below the WQEs posted, or below the limit, is
// refused, as rxe refuses it.
func (s *SRQ) Modify(attr *qp.SRQAttr, mask qp.SRQAttrMask) error { return s.e.Modify(attr, mask) }

// Query returns the queue's attributes, as ibv_query_srq; its SRQLimit is
// 0 once the limit event has fired.
func (s *SRQ) Query() qp.SRQAttr { return s.e.Query() }

// Posted returns how many receive WQEs are queued.
func (s *SRQ) Posted() int { return s.e.Posted() }

// Destroy removes the queue, as ibv_destroy_srq; it is refused with
// ErrSRQInUse while QPs created with it remain. The WQEs still posted are
// dropped without completions.
func (s *SRQ) Destroy() error {
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case s.gone:
		return errors.New("rnic: SRQ already destroyed")
	case s.users > 0:
		return fmt.Errorf("%w: %d", ErrSRQInUse, s.users)
	}
	s.gone = true
	return nil
}

// attach checks that ia's SRQ, if any, is a live SRQ of d, counts the QP
// as its user, and returns ia with the engine's queue in its place. It
// runs under d.mu.
func (d *Device) attachSRQ(ia *qp.InitAttr) (*SRQ, error) {
	if ia.SRQ == nil {
		return nil, nil
	}
	s, ok := ia.SRQ.(*SRQ)
	switch {
	case !ok || s == nil:
		return nil, fmt.Errorf("%w: %T is not a gorxe SRQ", qp.ErrAttr, ia.SRQ)
	case s.dev != d:
		return nil, fmt.Errorf("%w: the SRQ is of another device", qp.ErrAttr)
	case s.gone:
		return nil, fmt.Errorf("%w: the SRQ was destroyed", qp.ErrAttr)
	}
	ia.SRQ = s.e
	return s, nil
}

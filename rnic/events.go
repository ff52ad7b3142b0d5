package rnic

import (
	"context"
	"strconv"
	"sync"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/internal/rc"
)

// EventType is the kind of an asynchronous event, numbered as rdma-core's
// enum ibv_event_type.
type EventType uint32

// Asynchronous event types: those rxe reports.
const (
	// EventCQErr: a CQ (AsyncEvent.CQ) overran, a completion was lost,
	// and the CQ is in error; the QPs that pushed into it went to ERR.
	EventCQErr EventType = 0 // IBV_EVENT_CQ_ERR
	// EventQPAccessErr: an RC QP's responder (AsyncEvent.QP) met an
	// R_Key violation that no receive completion reports, a request
	// without immediate data (IBTA C9-222.1.1); the QP is in ERR.
	EventQPAccessErr EventType = 3 // IBV_EVENT_QP_ACCESS_ERR
	// EventSRQLimitReached: fewer receive WQEs than its armed limit are
	// left in an SRQ (AsyncEvent.SRQ), whose limit is now disarmed.
	EventSRQLimitReached EventType = 15 // IBV_EVENT_SRQ_LIMIT_REACHED
	// EventQPLastWQEReached: a QP with an SRQ (AsyncEvent.QP) entered
	// ERR and takes no more WQEs from the SRQ: it may be destroyed
	// without losing one.
	EventQPLastWQEReached EventType = 16 // IBV_EVENT_QP_LAST_WQE_REACHED
)

// String returns the event's name as ibv_event_type_str spells it.
func (t EventType) String() string {
	switch t {
	case EventCQErr:
		return "CQ error"
	case EventQPAccessErr:
		return "local access violation work queue error"
	case EventSRQLimitReached:
		return "SRQ limit reached"
	case EventQPLastWQEReached:
		return "last WQE reached"
	}
	return "event " + strconv.Itoa(int(t))
}

// AsyncEvent is an asynchronous event, struct ibv_async_event: what
// happened, and to which object.
type AsyncEvent struct {
	Type EventType
	SRQ  *SRQ   // the SRQ of an SRQ event
	QP   *QP    // the QP of a QP event
	CQ   *cq.CQ // the CQ of a CQ event
}

// asyncEvent posts the engine's event about q as the device's.
func (q *QP) asyncEvent(ev rc.Async) {
	switch ev {
	case rc.AsyncAccessErr:
		q.dev.events.post(AsyncEvent{Type: EventQPAccessErr, QP: q})
	case rc.AsyncLastWQE:
		q.dev.events.post(AsyncEvent{Type: EventQPLastWQEReached, QP: q})
	}
}

// events is a device's queue of asynchronous events: events are queued
// from the receive path, under a QP's lock, and never wait for a reader;
// GetAsyncEvent takes them in order.
type events struct {
	mu    sync.Mutex
	q     []AsyncEvent
	ready chan struct{} // holds a token while q may be non-empty
}

func (e *events) post(ev AsyncEvent) {
	e.mu.Lock()
	e.q = append(e.q, ev)
	e.mu.Unlock()
	select {
	case e.ready <- struct{}{}:
	default:
	}
}

func (e *events) next() (AsyncEvent, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.q) == 0 {
		return AsyncEvent{}, false
	}
	ev := e.q[0]
	e.q = e.q[1:]
	if len(e.q) > 0 {
		select {
		case e.ready <- struct{}{}:
		default:
		}
	}
	return ev, true
}

// GetAsyncEvent returns the device's next asynchronous event, waiting for
// one until ctx ends or the device is closed, as ibv_get_async_event
// does (there is nothing to acknowledge). Events are kept until taken, so
// a program that never calls it loses nothing but memory: an event for
// each arming of an SRQ limit, each QP that goes to ERR with an SRQ or on
// an R_Key violation, each CQ that overruns. A program on a Loop passes a
// ctx that is done, to take a queued event without waiting.
func (d *Device) GetAsyncEvent(ctx context.Context) (AsyncEvent, error) {
	for {
		if ev, ok := d.events.next(); ok {
			return ev, nil
		}
		select {
		case <-d.events.ready:
		case <-ctx.Done():
			return AsyncEvent{}, context.Cause(ctx)
		case <-d.done:
			return AsyncEvent{}, ErrClosed
		}
	}
}

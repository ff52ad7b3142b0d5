package rnic

import (
	"context"
	"strconv"
	"sync"
)

// EventType is the kind of an asynchronous event, numbered as rdma-core's
// enum ibv_event_type.
type EventType uint32

// Asynchronous event types. gorxe reports only the SRQ limit so far.
const (
	// EventSRQLimitReached: fewer receive WQEs than its armed limit are
	// left in an SRQ (AsyncEvent.SRQ), whose limit is now disarmed.
	EventSRQLimitReached EventType = 15 // IBV_EVENT_SRQ_LIMIT_REACHED
)

// String returns the event's name as ibv_event_type_str spells it.
func (t EventType) String() string {
	if t == EventSRQLimitReached {
		return "SRQ limit reached"
	}
	return "event " + strconv.Itoa(int(t))
}

// AsyncEvent is an asynchronous event, struct ibv_async_event: what
// happened, and to which object.
type AsyncEvent struct {
	Type EventType
	SRQ  *SRQ // the SRQ of an SRQ event
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
// a program that never calls it loses nothing but memory, one event per
// arming of a limit. A program on a Loop passes a ctx that is done, to
// take a queued event without waiting.
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

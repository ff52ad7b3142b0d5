package fabric

import (
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
)

// QueueStats counts what happened at one egress queue.
type QueueStats struct {
	Enqueued      uint64 // packets that found room
	EnqueuedBytes uint64
	Dequeued      uint64 // packets put on the wire to the host
	SentBytes     uint64 // bytes whose last bit is on the wire
	Marked        uint64 // packets marked CE
	Dropped       uint64 // packets that found the buffer full (tail drop)
	DroppedBytes  uint64
	Lost          uint64 // packets lost on the link after the queue (Config.Loss)
	Bytes         int    // queued now
	MaxBytes      int    // the most ever queued

	// Paused and PausedTime are for a queue to another switch (Connect),
	// whose PFC pauses it.
	Paused     bool
	PausedTime time.Duration
}

// PortStats counts what happened at one port and its host's transmitter.
type PortStats struct {
	Sent           uint64 // packets the host queued with Send
	SentBytes      uint64
	Transmitted    uint64 // packets the host put on the wire
	Received       uint64 // packets that reached the switch
	NoRoute        uint64 // of those, for no address of any port, or not IP
	TooBig         uint64 // packets longer than the MTU, dropped at Send
	Delivered      uint64 // packets that reached the host
	DeliveredBytes uint64
	Pauses         uint64        // pause frames the switch sent the host
	Resumes        uint64        // resume frames
	HostQueued     int           // bytes waiting in the host's transmit queue
	Ingress        int           // bytes from this port in the egress queues, which PFC watches
	Paused         bool          // the host's transmitter is paused now
	PausedTime     time.Duration // the time it has been paused, this pause included
}

// Queue returns the counters of port's egress queue; port must be one of
// the switch's, from 0 to Ports()-1.
func (s *Switch) Queue(port int) QueueStats {
	p := &s.ports[port]
	q := p.queue
	q.Bytes = p.down.bytes
	q.Paused, q.PausedTime = p.down.pausedSince(s.clock.Now())
	return q
}

// Port returns port's counters; port must be one of the switch's. PausedTime includes a pause in force.
func (s *Switch) Port(port int) PortStats {
	p := &s.ports[port]
	st := p.stats
	st.HostQueued = p.up.bytes
	st.Ingress = p.ingress
	st.Paused, st.PausedTime = p.up.pausedSince(s.clock.Now())
	return st
}

// pausedSince returns whether t is paused and its time paused up to now.
func (t *transmitter) pausedSince(now monotime.Time) (bool, time.Duration) {
	d := t.pausedTime
	if t.paused {
		d += now.Sub(t.pausedAt)
	}
	return t.paused, d
}

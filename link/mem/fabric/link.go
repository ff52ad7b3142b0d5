package fabric

import (
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
)

// transmitter serializes frames from a FIFO onto one direction of a link
// and hands each to the far end a propagation delay after its last bit.
type transmitter struct {
	s      *Switch
	port   int
	rate   uint64 // bits per second
	delay  time.Duration
	far    Handler // takes the frame off the link
	egress bool    // the switch's egress queue, not a host's NIC

	q     []*frame
	head  int
	bytes int // queued, not counting the frame on the wire

	busy bool
	rem  uint64 // bit-nanoseconds owed by the last frame, carried to the next one back to back

	paused     bool // by a pause frame from the switch (host transmitters only)
	pausedAt   monotime.Time
	pausedTime time.Duration
}

func (t *transmitter) push(f *frame) {
	if t.head > 0 && t.head == len(t.q) {
		t.q, t.head = t.q[:0], 0
	}
	t.q = append(t.q, f)
	t.bytes += len(f.b)
}

// serialization returns how long n bytes take on the wire. The remainder
// of bytes×8×10⁹/rate is carried from frame to frame while the link stays
// busy, so that back to back frames take exactly their bits' time in sum.
func (t *transmitter) serialization(n int) time.Duration {
	bits := uint64(n)*8*uint64(time.Second) + t.rem
	t.rem = bits % t.rate
	return time.Duration(bits / t.rate)
}

// start puts the next frame on the wire if the link is idle.
func (t *transmitter) start(now monotime.Time) {
	if t.busy || t.paused || t.head == len(t.q) {
		if !t.busy {
			t.rem = 0
		}
		return
	}
	f := t.q[t.head]
	t.q[t.head] = nil
	t.head++
	t.bytes -= len(f.b)
	if t.egress {
		t.s.dequeued(now, t.port, f)
	}
	t.busy = true
	t.s.clock.After(t.serialization(len(f.b)), t, f)
}

// Handle runs when a frame's last bit is on the wire.
func (t *transmitter) Handle(now monotime.Time, arg any) {
	f := arg.(*frame)
	p := &t.s.ports[t.port]
	switch {
	case !t.egress:
		p.stats.Transmitted++
		t.s.clock.After(t.delay, t.far, f)
	case t.s.loss > 0 && t.s.rng.Float64() < t.s.loss:
		p.queue.SentBytes += uint64(len(f.b))
		p.queue.Lost++
		t.s.tracef(now, "lose", t.port, len(f.b), t.bytes)
		t.s.freeFrame(f)
	default:
		p.queue.SentBytes += uint64(len(f.b))
		t.s.clock.After(t.delay, t.far, f)
	}
	t.busy = false
	t.start(now)
}

// pauseFrame is a PFC frame reaching a host: arg true pauses its
// transmitter, false resumes it.
type pauseFrame struct{ t *transmitter }

// Handle applies the frame.
func (p *pauseFrame) Handle(now monotime.Time, arg any) {
	t := p.t
	pause := arg.(bool)
	if pause == t.paused {
		return
	}
	t.paused = pause
	if pause {
		t.pausedAt = now
		t.s.tracef(now, "paused", t.port, 0, t.bytes)
		return
	}
	t.pausedTime += now.Sub(t.pausedAt)
	t.s.tracef(now, "resumed", t.port, 0, t.bytes)
	t.start(now)
}

package fabric

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
)

// SampleHeader is the first line SampleQueues writes: the columns of its
// rows.
const SampleHeader = "time_ns,port,queue_bytes,enqueued,marked,dropped,sent_bytes,pauses,paused_ns,queue_paused_ns\n"

// SampleQueues writes, at every interval from now until until, a CSV row
// per port: the clock's time in nanoseconds, the port, its egress
// queue's length, its counts of packets enqueued, marked and dropped and
// of bytes sent to the host so far, the pause frames the switch has sent
// the port's host and the time the host has spent paused, and the time
// the egress queue has spent paused by the switch it sends to (Connect). It writes
// SampleHeader first. Rows are buffered; the last is flushed at until.
func (s *Switch) SampleQueues(w io.Writer, every time.Duration, until monotime.Time) error {
	if every <= 0 {
		return fmt.Errorf("%w: sampling interval %v", ErrConfig, every)
	}
	sp := &sampler{s: s, w: bufio.NewWriter(w), every: every, until: until}
	if _, err := sp.w.WriteString(SampleHeader); err != nil {
		return err
	}
	s.clock.At(s.clock.Now(), sp, nil)
	return nil
}

type sampler struct {
	s     *Switch
	w     *bufio.Writer
	every time.Duration
	until monotime.Time
	line  []byte
}

// Handle writes the rows of one sample and schedules the next.
func (sp *sampler) Handle(now monotime.Time, _ any) {
	for i := range sp.s.ports {
		q, p := sp.s.Queue(i), sp.s.Port(i)
		b := strconv.AppendInt(sp.line[:0], int64(now), 10)
		for _, v := range []uint64{uint64(i), uint64(q.Bytes), q.Enqueued, q.Marked, q.Dropped, q.SentBytes, p.Pauses, uint64(p.PausedTime), uint64(q.PausedTime)} {
			b = append(b, ',')
			b = strconv.AppendUint(b, v, 10)
		}
		b = append(b, '\n')
		sp.line = b
		sp.w.Write(b)
	}
	if next := now.Add(sp.every); next <= sp.until {
		sp.s.clock.At(next, sp, nil)
		return
	}
	sp.w.Flush()
}

package sim

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/link/mem/fabric"
)

// Recorder samples a network at a fixed interval: each flow's rate at
// the switch that delivers it and its reaction point's state, and each
// watched egress queue.
type Recorder struct {
	net    *Network
	every  time.Duration
	Times  []time.Duration // the sampling times, from the clock's epoch
	Flows  []*FlowSeries
	Queues []*QueueSeries
}

// FlowSeries is one flow's samples. Rates are over the interval that
// ends at the sample's time.
type FlowSeries struct {
	Flow    *Flow
	sw      *fabric.Switch // the switch that delivers the flow to its destination
	Bytes   []uint64       // IP bytes of its data packets delivered so far
	Goodput []float64      // Gb/s of those bytes
	Rate    []float64      // Gb/s: its reaction point's current rate (RC)
	Target  []float64      // Gb/s: its target rate (RT)
	Alpha   []float64
	CNPs    []uint64 // CNPs its reaction point has handled so far (rp_cnp_handled)
}

// QueueSeries is one egress queue's samples.
type QueueSeries struct {
	Name    string
	Switch  *fabric.Switch
	Port    int
	Length  []int    // bytes queued
	Sent    []uint64 // bytes sent so far
	Marked  []uint64 // packets marked CE so far
	Dropped []uint64 // packets dropped so far
	Lost    []uint64 // packets lost on the link so far
	Pauses  []uint64 // pause frames sent to the port's sender so far
}

// Record samples every flow added so far and the queues named in
// watch, every interval from now until the clock reads until.
func (n *Network) Record(every, until time.Duration, watch ...QueueSeries) (*Recorder, error) {
	if every <= 0 {
		return nil, fmt.Errorf("sim: sampling interval %v", every)
	}
	r := &Recorder{net: n, every: every}
	for _, f := range n.flows {
		sw, _ := f.Dst.link.Switch()
		sw.TrackFlows()
		r.Flows = append(r.Flows, &FlowSeries{Flow: f, sw: sw})
	}
	for _, q := range watch {
		if q.Port < 0 || q.Port >= q.Switch.Ports() {
			return nil, fmt.Errorf("sim: queue %s: no port %d", q.Name, q.Port)
		}
		r.Queues = append(r.Queues, &QueueSeries{Name: q.Name, Switch: q.Switch, Port: q.Port})
	}
	n.clock.At(n.clock.Now(), r, until)
	return r, nil
}

// Handle takes one sample and schedules the next (fabric.Handler).
func (r *Recorder) Handle(now monotime.Time, arg any) {
	until := arg.(time.Duration)
	t := time.Duration(now - 1)
	r.Times = append(r.Times, t)
	perGbps := 8 / r.every.Seconds() / 1e9
	for _, s := range r.Flows {
		f := s.Flow
		b, _ := s.sw.FlowCount(f.Src.Addr(), f.Dst.Addr())
		var last uint64
		if k := len(s.Bytes); k > 0 {
			last = s.Bytes[k-1]
		}
		s.Bytes = append(s.Bytes, b)
		s.Goodput = append(s.Goodput, float64(b-last)*perGbps)
		st, c := f.Congestion()
		s.Rate = append(s.Rate, float64(st.Rate)/1e9)
		s.Target = append(s.Target, float64(st.TargetRate)/1e9)
		s.Alpha = append(s.Alpha, st.Alpha)
		s.CNPs = append(s.CNPs, c.RPCNPHandled)
	}
	for _, q := range r.Queues {
		st, p := q.Switch.Queue(q.Port), q.Switch.Port(q.Port)
		q.Length = append(q.Length, st.Bytes)
		q.Sent = append(q.Sent, st.SentBytes)
		q.Marked = append(q.Marked, st.Marked)
		q.Dropped = append(q.Dropped, st.Dropped)
		q.Lost = append(q.Lost, st.Lost)
		q.Pauses = append(q.Pauses, p.Pauses)
	}
	if next := t + r.every; next <= until {
		r.net.clock.At(monotime.Time(next)+1, r, until)
	}
}

// Interval returns the sampling interval.
func (r *Recorder) Interval() time.Duration { return r.every }

// FlowHeader and QueueHeader are the first lines of WriteFlows' and
// WriteQueues' CSV.
const (
	FlowHeader  = "time_us,flow,src,dst,bytes,goodput_gbps,rate_gbps,target_gbps,alpha,cnps_handled\n"
	QueueHeader = "time_us,queue,length_bytes,sent_bytes,marked,dropped,lost,pauses\n"
)

// WriteFlows writes a CSV row per flow per sample, after FlowHeader.
// Numbers are printed with fixed precision, so that the same run gives
// the same bytes.
func (r *Recorder) WriteFlows(w io.Writer) error {
	bw := bufio.NewWriter(w)
	bw.WriteString(FlowHeader)
	var b []byte
	for i, t := range r.Times {
		for _, s := range r.Flows {
			f := s.Flow
			b = appendMicros(b[:0], t)
			b = append(b, ',')
			b = append(b, f.Name...)
			b = append(b, ',')
			b = f.Src.Addr().AppendTo(b)
			b = append(b, ',')
			b = f.Dst.Addr().AppendTo(b)
			b = append(b, ',')
			b = strconv.AppendUint(b, s.Bytes[i], 10)
			for _, v := range []float64{s.Goodput[i], s.Rate[i], s.Target[i]} {
				b = append(b, ',')
				b = strconv.AppendFloat(b, v, 'f', 4, 64)
			}
			b = append(b, ',')
			b = strconv.AppendFloat(b, s.Alpha[i], 'f', 6, 64)
			b = append(b, ',')
			b = strconv.AppendUint(b, s.CNPs[i], 10)
			b = append(b, '\n')
			bw.Write(b)
		}
	}
	return bw.Flush()
}

// WriteQueues writes a CSV row per watched queue per sample, after
// QueueHeader.
func (r *Recorder) WriteQueues(w io.Writer) error {
	bw := bufio.NewWriter(w)
	bw.WriteString(QueueHeader)
	var b []byte
	for i, t := range r.Times {
		for _, q := range r.Queues {
			b = appendMicros(b[:0], t)
			b = append(b, ',')
			b = append(b, q.Name...)
			b = append(b, ',')
			b = strconv.AppendInt(b, int64(q.Length[i]), 10)
			for _, v := range []uint64{q.Sent[i], q.Marked[i], q.Dropped[i], q.Lost[i], q.Pauses[i]} {
				b = append(b, ',')
				b = strconv.AppendUint(b, v, 10)
			}
			b = append(b, '\n')
			bw.Write(b)
		}
	}
	return bw.Flush()
}

// appendMicros appends d in microseconds, to the nanosecond.
func appendMicros(b []byte, d time.Duration) []byte {
	return strconv.AppendFloat(b, float64(d)/1e3, 'f', 3, 64)
}

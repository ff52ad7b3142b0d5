package sim

import (
	"math"
	"slices"
	"time"
)

// Jain returns Jain's fairness index of xs, (Σx)²/(n·Σx²): 1 when all are
// equal, 1/n when one has everything. It is 1 for no values or all zero.
func Jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// Percentile returns the p-th percentile (0 to 100) of xs by the nearest
// rank, or 0 for none.
func Percentile(xs []int, p float64) int {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// index returns the index of the first sample at or after t.
func (r *Recorder) index(t time.Duration) int {
	i, _ := slices.BinarySearch(r.Times, t)
	return min(i, len(r.Times)-1)
}

// Gbps returns each flow's rate, in Gb/s of IP bytes delivered, from t0
// to t1 (snapped to samples).
func (r *Recorder) Gbps(t0, t1 time.Duration) []float64 {
	i, j := r.index(t0), r.index(t1)
	out := make([]float64, len(r.Flows))
	if j <= i {
		return out
	}
	d := (r.Times[j] - r.Times[i]).Seconds()
	for k, s := range r.Flows {
		out[k] = float64(s.Bytes[j]-s.Bytes[i]) * 8 / d / 1e9
	}
	return out
}

// Windows returns Jain's index over each window of length w from t0 to
// t1, among the flows active through the window (started at or before
// its start, not stopped before its end).
func (r *Recorder) Windows(t0, t1, w time.Duration) []float64 {
	var out []float64
	for a := t0; a+w <= t1; a += w {
		var rates []float64
		for k, x := range r.Gbps(a, a+w) {
			if f := r.Flows[k].Flow; f.Start <= a && (f.Stop == 0 || f.Stop >= a+w) {
				rates = append(rates, x)
			}
		}
		out = append(out, Jain(rates))
	}
	return out
}

// QueueLengths returns q's samples from t0 to t1.
func (r *Recorder) QueueLengths(q *QueueSeries, t0, t1 time.Duration) []int {
	return q.Length[r.index(t0):r.index(t1)]
}

// Utilization returns the share of q's line rate it sent from t0 to t1.
func (r *Recorder) Utilization(q *QueueSeries, rate uint64, t0, t1 time.Duration) float64 {
	i, j := r.index(t0), r.index(t1)
	if j <= i {
		return 0
	}
	return float64(q.Sent[j]-q.Sent[i]) * 8 / (r.Times[j] - r.Times[i]).Seconds() / float64(rate)
}

package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gorxe/gorxe/internal/simplot"
	"github.com/gorxe/gorxe/rnic"
)

// plotPoints is the most points a line gets: samples are averaged in
// groups down to it, so that a 200 ms run sampled every 10 µs draws
// 2000 points a flow, not 20000.
const plotPoints = 2000

// Page returns the report's figures: for a run, each flow's rate
// delivered at the receiver and its reaction point's rate over time,
// and the watched queues' lengths; for a sweep, fairness, use and queue
// by N.
func (r *Report) Page() simplot.Page {
	if r.Recorder == nil {
		return r.sweepPage()
	}
	rec, o := r.Recorder, r.Options
	group := max(1, (len(rec.Times)-1+plotPoints-1)/plotPoints)
	xs := make([]float64, 0, len(rec.Times)/group+1)
	for i := 0; i+group <= len(rec.Times); i += group {
		xs = append(xs, float64(rec.Times[i+group-1])/float64(time.Millisecond))
	}
	avg := func(v []float64) []float64 {
		out := make([]float64, 0, len(xs))
		for i := 0; i+group <= len(v); i += group {
			var s float64
			for _, x := range v[i : i+group] {
				s += x
			}
			out = append(out, s/float64(group))
		}
		return out
	}
	line := float64(o.Rate) / 1e9
	every := rec.every * time.Duration(group)
	goodput := simplot.Figure{Title: r.Name, XLabel: "time (ms)", YLabel: fmt.Sprintf("delivered (Gb/s per %v)", every),
		YRange: simplot.Range{Min: 0, Max: line * 1.05}}
	rates := simplot.Figure{Title: "reaction point rates (RC)", XLabel: "time (ms)", YLabel: "rate (Gb/s)",
		YRange: simplot.Range{Min: 0, Max: line * 1.05}}
	if n := len(rec.Flows); n > 1 {
		goodput.Refs = []simplot.RefLine{{Y: line / float64(n), Label: "fair share"}}
	}
	for _, s := range rec.Flows {
		goodput.Series = append(goodput.Series, simplot.Series{Name: s.Flow.Name, X: xs, Y: avg(s.Goodput)})
		rates.Series = append(rates.Series, simplot.Series{Name: s.Flow.Name, X: xs, Y: avg(s.Rate)})
	}
	queues := simplot.Figure{Title: "egress queues", XLabel: "time (ms)", YLabel: "queue (KB)"}
	if o.ECN.Kmax > 0 {
		queues.Refs = []simplot.RefLine{{Y: kb(o.ECN.Kmin), Label: "Kmin"}, {Y: kb(o.ECN.Kmax), Label: "Kmax"}}
	}
	for _, q := range rec.Queues {
		ls := make([]float64, len(q.Length))
		for i, l := range q.Length {
			ls[i] = kb(l)
		}
		queues.Series = append(queues.Series, simplot.Series{Name: q.Name, X: xs, Y: avg(ls)})
	}
	figs := []simplot.Figure{goodput}
	if o.CC == rnic.CCDCQCN { // its rates say something
		figs = append(figs, rates)
	}
	return simplot.Page{Figures: append(figs, queues)}
}

func (r *Report) sweepPage() simplot.Page {
	var ns, jmin, jmed, util, qmed, qp99 []float64
	for _, row := range r.Rows {
		ns = append(ns, float64(row.N))
		jmin = append(jmin, row.JainMin)
		jmed = append(jmed, row.JainMedian)
		util = append(util, 100*row.Utilization)
		qmed = append(qmed, kb(row.QueueMedian))
		qp99 = append(qp99, kb(row.QueueP99))
	}
	return simplot.Page{Figures: []simplot.Figure{
		{Title: r.Name, XLabel: "senders (N)", YLabel: fmt.Sprintf("Jain's index, %v windows", r.Options.Window),
			YRange: simplot.Range{Min: 0.9, Max: 1}, Refs: []simplot.RefLine{{Y: 0.99, Label: "0.99"}},
			Series: []simplot.Series{{Name: "min", X: ns, Y: jmin}, {Name: "median", X: ns, Y: jmed}}},
		{Title: "bottleneck use", XLabel: "senders (N)", YLabel: "% of line rate",
			Series: []simplot.Series{{Name: "use", X: ns, Y: util}}},
		{Title: "bottleneck queue", XLabel: "senders (N)", YLabel: "queue (KB)",
			Series: []simplot.Series{{Name: "median", X: ns, Y: qmed}, {Name: "p99", X: ns, Y: qp99}}},
	}}
}

// SweepHeader is the first line of WriteSweep's CSV.
const SweepHeader = "n,utilization,jain_min,jain_median,queue_median_bytes,queue_p99_bytes,marked,dropped,pauses,cnps_handled\n"

// WriteSweep writes a sweep's rows as CSV, after SweepHeader.
func (r *Report) WriteSweep(w io.Writer) error {
	b := []byte(SweepHeader)
	for _, row := range r.Rows {
		b = strconv.AppendInt(b, int64(row.N), 10)
		for _, v := range []float64{row.Utilization, row.JainMin, row.JainMedian} {
			b = append(b, ',')
			b = strconv.AppendFloat(b, v, 'f', 6, 64)
		}
		for _, v := range []uint64{uint64(row.QueueMedian), uint64(row.QueueP99), row.Marked, row.Dropped, row.Pause, row.CNPs} {
			b = append(b, ',')
			b = strconv.AppendUint(b, v, 10)
		}
		b = append(b, '\n')
	}
	_, err := w.Write(b)
	return err
}

// WriteFiles writes the report's CSV into dir, which it creates if need
// be (flows.csv and queues.csv for a run, sweep.csv for a sweep), and
// its figures into dir/plot.FORMAT, format png or svg. It returns the
// files' names.
func (r *Report) WriteFiles(dir, format string) ([]string, error) {
	if format != "png" && format != "svg" {
		return nil, fmt.Errorf("sim: plot format %q: want png or svg", format)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var names []string
	write := func(name string, fn func(io.Writer) error) error {
		path := filepath.Join(dir, name)
		var b bytes.Buffer
		if err := fn(&b); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		names = append(names, path)
		return os.WriteFile(path, b.Bytes(), 0o644)
	}
	var err error
	if r.Recorder != nil {
		err = errors.Join(write("flows.csv", r.Recorder.WriteFlows), write("queues.csv", r.Recorder.WriteQueues))
	} else {
		err = write("sweep.csv", r.WriteSweep)
	}
	if err != nil {
		return nil, err
	}
	page := r.Page()
	if err := write("plot."+format, func(w io.Writer) error { return page.Write(w, format) }); err != nil {
		return nil, err
	}
	return names, nil
}

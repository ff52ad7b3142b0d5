package sim

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link/mem/fabric"
	"github.com/gorxe/gorxe/rnic"
)

// run runs the named scenario with its defaults, changed by edit.
func run(t *testing.T, name string, edit func(o *Options)) *Report {
	t.Helper()
	sc, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	o := Defaults()
	if sc.Defaults != nil {
		sc.Defaults(&o)
	}
	if edit != nil {
		edit(&o)
	}
	wall := time.Now()
	r, err := sc.Run(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s (%v of wall time)\n%s", r.Title, time.Since(wall), strings.Join(r.Lines, "\n"))
	return r
}

// TestTwoFlows is the DCQCN paper's experiment, with its parameters: two
// long flows into one 40 Gb/s port use at least 99% of it once they have
// converged, with the queue's median at most 100 KB and rarely above
// Kmax (the criteria the paper's author gives for a packet-level
// simulation of it).
func TestTwoFlows(t *testing.T) {
	r := run(t, "two-flows", nil)
	o, rec := r.Options, r.Recorder
	q := rec.Queues[0]
	if u := rec.Utilization(q, o.Rate, o.Settle, o.Duration); u < 0.99 || u > 1.001 {
		t.Errorf("the bottleneck ran at %.2f%% of its rate, want at least 99%%", 100*u)
	}
	ls := rec.QueueLengths(q, o.Settle, o.Duration)
	if m := Percentile(ls, 50); m > 100_000 || m == 0 {
		t.Errorf("the queue's median is %d bytes, want 1 to 100 KB", m)
	}
	if p := Percentile(ls, 99); p > o.ECN.Kmax+50_000 {
		t.Errorf("the queue's 99th percentile is %d bytes, above Kmax %d by more than 50 KB", p, o.ECN.Kmax)
	}
	for _, s := range rec.Flows {
		if c := s.CNPs[len(s.CNPs)-1]; c == 0 {
			t.Errorf("flow %s handled no CNP", s.Flow.Name)
		}
	}
}

// TestIncastFairness: up to 16 senders into one port share it fairly
// over 5 ms windows once converged; the median window's Jain index is at
// least 0.99.
func TestIncastFairness(t *testing.T) {
	for _, n := range []int{4, 16} {
		r := run(t, "incast", func(o *Options) { o.N = n; o.Duration = 150 * time.Millisecond })
		o, rec := r.Options, r.Recorder
		js := rec.Windows(o.Settle, o.Duration, o.Window)
		if len(js) != int((o.Duration-o.Settle)/o.Window) {
			t.Fatalf("N=%d: %d windows", n, len(js))
		}
		if m := median(js); m < 0.99 {
			t.Errorf("N=%d: the median 5 ms window's Jain index is %.4f, want at least 0.99", n, m)
		}
	}
}

// TestParkingLot: with PFC alone, switch 2 shares the receiver's port
// between its two busy ingress ports, giving the sender beside the
// receiver half of it and the three behind switch 1 a sixth each; DCQCN
// gives each sender a quarter, within 15%. Neither loses a packet.
func TestParkingLot(t *testing.T) {
	for _, c := range []struct {
		cc   rnic.CCMode
		want []float64
	}{
		{rnic.CCNone, []float64{40.0 / 6, 40.0 / 6, 40.0 / 6, 20}},
		{rnic.CCDCQCN, []float64{10, 10, 10, 10}},
	} {
		r := run(t, "parking-lot", func(o *Options) { o.CC = c.cc; o.Duration = 100 * time.Millisecond; o.Settle = 30 * time.Millisecond })
		o, rec := r.Options, r.Recorder
		got := rec.Gbps(o.Settle, o.Duration)
		for i, w := range c.want {
			if math.Abs(got[i]-w) > 0.15*w {
				t.Errorf("%v: flow %s %.2f Gb/s, want %.2f within 15%%", c.cc, rec.Flows[i].Flow.Name, got[i], w)
			}
		}
		last := len(rec.Times) - 1
		for _, q := range rec.Queues {
			if q.Dropped[last] != 0 {
				t.Errorf("%v: queue %s dropped %d", c.cc, q.Name, q.Dropped[last])
			}
		}
	}
}

// TestParkingLotLoss: with 1/256 of packets lost, go-back-N recovers
// every loss (every WRITE completes successfully, or Run would fail) and
// DCQCN still shares the port.
func TestParkingLotLoss(t *testing.T) {
	r := run(t, "parking-lot-loss", func(o *Options) { o.Duration = 100 * time.Millisecond; o.Settle = 30 * time.Millisecond })
	o, rec := r.Options, r.Recorder
	last := len(rec.Times) - 1
	if l := rec.Queues[0].Lost[last]; l == 0 {
		t.Fatal("nothing lost")
	}
	var retries uint64
	for _, s := range rec.Flows {
		retries += s.Flow.Stats().CompleterRetryErr
	}
	if retries == 0 {
		t.Error("no go-back-N retransmission")
	}
	got := rec.Gbps(o.Settle, o.Duration)
	if sum(got) < 0.85*40 || Jain(got) < 0.95 {
		t.Errorf("rates %.2f: sum %.2f Gb/s, Jain %.4f", got, sum(got), Jain(got))
	}
}

// TestRepeatable: a run repeated with the same seed writes the same CSV
// byte for byte; another seed marks other packets.
func TestRepeatable(t *testing.T) {
	csv := func(seed uint64) []byte {
		r := run(t, "incast", func(o *Options) { o.N = 4; o.Seed = seed; o.Duration = 20 * time.Millisecond; o.Settle = 0 })
		var b bytes.Buffer
		if err := r.Recorder.WriteFlows(&b); err != nil {
			t.Fatal(err)
		}
		if err := r.Recorder.WriteQueues(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	a, b, c := csv(7), csv(7), csv(8)
	if !bytes.HasPrefix(a, []byte(FlowHeader)) || !bytes.Contains(a, []byte(QueueHeader)) {
		t.Fatalf("no CSV headers:\n%.300s", a)
	}
	if !bytes.Equal(a, b) {
		t.Error("the same seed gave different CSV")
	}
	if bytes.Equal(a, c) {
		t.Error("another seed gave the same CSV")
	}
}

// TestOptionErrors: options a run cannot take are refused before it.
func TestOptionErrors(t *testing.T) {
	for _, c := range []struct {
		edit func(o *Options)
		want string
	}{
		{func(o *Options) { o.Rate = 0 }, "zero link rate"},
		{func(o *Options) { o.Duration = 0 }, "must be positive"},
		{func(o *Options) { o.Settle = o.Duration }, "settle"},
		{func(o *Options) { o.N = 0 }, "senders"},
		{func(o *Options) { o.Params.RPGTimeReset = 0 }, "rpg_time_reset"},
		{func(o *Options) { o.ECN = fabric.RED{Kmin: 10, Kmax: 5} }, "Kmin"},
		{func(o *Options) { o.Loss = 1 }, "Loss"},
	} {
		o := Defaults()
		c.edit(&o)
		_, err := Run("two-flows", o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want an error saying %q", err, c.want)
		}
	}
	if _, err := Lookup("nonesuch"); err == nil || !strings.Contains(err.Error(), "two-flows") {
		t.Errorf("an unknown scenario: %v", err)
	}
}

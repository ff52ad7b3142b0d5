package sim

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/gorxe/gorxe/congestion"
	"github.com/gorxe/gorxe/link/mem/fabric"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// Options are a scenario's knobs. The zero value of a field takes the
// scenario's default (Defaults); Loss and PFC are what they are.
type Options struct {
	Rate     uint64        // every link's rate, bits per second
	Delay    time.Duration // every link's one-way propagation delay
	Buffer   int           // bytes per egress queue
	ECN      fabric.RED    // the egress queues' marking
	PFC      *fabric.PFC   // pause frames; nil for none
	Loss     float64       // the share of packets lost leaving each egress queue
	CC       rnic.CCMode
	Params   congestion.Params // DCQCN's parameters (the paper's by default)
	Burst    int               // DCQCN's pacing burst, bytes
	Size     int               // bytes per WRITE
	Depth    int               // WRITEs each flow keeps posted
	Seed     uint64
	Duration time.Duration // how long the run lasts, virtual time
	Settle   time.Duration // what the figures skip at the start
	Sample   time.Duration // the sampling interval
	Window   time.Duration // Jain's index's window
	N        int           // senders, for incast
	Sweep    []int         // the Ns of incast-sweep
}

// Defaults returns the options every scenario starts from: the DCQCN
// paper's testbed (40 Gb/s, RED with Kmin 5 KB, Kmax 200 KB and Pmax 1%,
// the paper's DCQCN parameters) with 1 µs links, as the ns-3 RDMA
// simulators run it, and perftest's 64 KiB WRITEs.
func Defaults() Options {
	return Options{
		Rate:     40e9,
		Delay:    time.Microsecond,
		Buffer:   32 << 20,
		ECN:      fabric.RED{Kmin: 5_000, Kmax: 200_000, Pmax: 0.01},
		Params:   congestion.Paper(),
		Burst:    8 << 10,
		Size:     DefaultSize,
		Depth:    DefaultDepth,
		Seed:     1,
		Duration: 200 * time.Millisecond,
		Settle:   50 * time.Millisecond,
		Sample:   10 * time.Microsecond,
		Window:   5 * time.Millisecond,
		N:        16,
		Sweep:    []int{2, 4, 8, 16, 32, 64},
	}
}

// Scenario is a named experiment.
type Scenario struct {
	Name    string
	Summary string
	// Defaults changes Defaults() for the scenario, before the user's
	// options apply.
	Defaults func(o *Options)
	Run      func(o Options) (*Report, error)
}

// Report is what a scenario found.
type Report struct {
	Name  string   // what ran, short: the plots' title
	Title string   // what ran, with every setting
	Lines []string // the figures, one per line
	// Recorder holds the samples of the run the figures describe; nil
	// for a sweep, whose Rows hold its figures.
	Recorder *Recorder
	Rows     []SweepRow
	Options  Options
}

// SweepRow is one N of incast-sweep.
type SweepRow struct {
	N                      int
	Utilization            float64
	JainMin, JainMedian    float64
	QueueMedian, QueueP99  int
	Marked, Dropped, Pause uint64
	CNPs                   uint64
}

func (r *Report) printf(format string, args ...any) {
	r.Lines = append(r.Lines, fmt.Sprintf(format, args...))
}

// Scenarios returns the scenarios, by name.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "two-flows", Summary: "two long flows into one 40 Gb/s port (the DCQCN paper's)", Run: twoFlows},
		{Name: "incast", Summary: "N senders into one port (--n, 16 by default)", Run: incast},
		{Name: "incast-sweep", Summary: "incast for N = 2, 4, 8, 16, 32, 64: fairness, queue and throughput by N",
			Run: incastSweep},
		{Name: "join-leave", Summary: "a flow joins a running one at a third of the run and leaves at two thirds: time to fair share",
			Defaults: func(o *Options) { o.Duration = 300 * time.Millisecond; o.Settle = 0 }, Run: joinLeave},
		{Name: "parking-lot", Summary: "three senders behind one switch and one beside the receiver, with PFC: port-fair 6.67/6.67/6.67/20, fair 10 each",
			Defaults: parkingDefaults, Run: parkingLot},
		{Name: "parking-lot-loss", Summary: "parking-lot with 1/256 of packets lost on every link: go-back-N under DCQCN",
			Defaults: func(o *Options) { parkingDefaults(o); o.Loss = 1.0 / 256 }, Run: parkingLot},
	}
}

// Lookup returns the scenario named name.
func Lookup(name string) (Scenario, error) {
	var names []string
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return Scenario{}, fmt.Errorf("sim: no scenario %q; there are %s", name, strings.Join(names, ", "))
}

func parkingDefaults(o *Options) {
	o.PFC = &fabric.PFC{XOFF: 300_000, XON: 280_000}
}

// check says what is wrong with o, before a run.
func (o *Options) check() error {
	switch {
	case o.Rate == 0:
		return fmt.Errorf("sim: zero link rate")
	case o.Duration <= 0 || o.Sample <= 0 || o.Window <= 0:
		return fmt.Errorf("sim: duration %v, sample %v and window %v must be positive", o.Duration, o.Sample, o.Window)
	case o.Settle < 0 || o.Settle >= o.Duration:
		return fmt.Errorf("sim: settle %v must be within the run's %v", o.Settle, o.Duration)
	case o.N < 1 || o.N > 250:
		return fmt.Errorf("sim: %d senders (1 to 250)", o.N)
	}
	if o.CC == rnic.CCDCQCN {
		if err := o.Params.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// star is a network of one switch with the receiver on port 0 and
// senders on ports 1 to n.
type star struct {
	net        *Network
	s          *fabric.Switch
	recv       *Host
	senders    []*Host
	bottleneck QueueSeries
}

func hostAddr(sw, i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(sw), byte(i >> 8), byte(i)})
}

func (o *Options) device() rnic.Config {
	return rnic.Config{CC: o.CC, CCParams: o.Params, PacingBurst: o.Burst}
}

func (o *Options) switchConfig(ports []fabric.PortConfig) fabric.Config {
	return fabric.Config{Ports: ports, Buffer: o.Buffer, ECN: o.ECN, PFC: o.PFC, Loss: o.Loss, Seed: o.Seed}
}

func (o *Options) port(addrs ...netip.Addr) fabric.PortConfig {
	return fabric.PortConfig{Rate: o.Rate, Delay: o.Delay, Addrs: addrs}
}

func newStar(o *Options, n int) (*star, error) {
	ports := make([]fabric.PortConfig, n+1)
	for i := range ports {
		ports[i] = o.port(hostAddr(1, i+1))
	}
	net := New(fabric.NewClock(), o.device())
	s, err := net.AddSwitch(o.switchConfig(ports))
	if err != nil {
		return nil, err
	}
	st := &star{net: net, s: s, bottleneck: QueueSeries{Name: "bottleneck", Switch: s, Port: 0}}
	if st.recv, err = net.AddHost("r", s, 0); err != nil {
		return nil, err
	}
	for i := range n {
		h, err := net.AddHost(fmt.Sprintf("s%d", i+1), s, i+1)
		if err != nil {
			return nil, err
		}
		st.senders = append(st.senders, h)
	}
	return st, nil
}

// runStar adds a flow from each sender to the receiver (start and stop
// say when, if not nil), records, and runs.
func runStar(o *Options, st *star, when func(i int, f *Flow)) (*Recorder, error) {
	for i, h := range st.senders {
		f := &Flow{Name: h.Name, Src: h, Dst: st.recv, Size: o.Size, Depth: o.Depth}
		if when != nil {
			when(i, f)
		}
		if err := st.net.AddFlow(f); err != nil {
			return nil, err
		}
	}
	rec, err := st.net.Record(o.Sample, o.Duration, st.bottleneck)
	if err != nil {
		return nil, err
	}
	if err := st.net.Run(o.Duration); err != nil {
		return nil, err
	}
	return rec, nil
}

// summary prints what every run reports: each flow's rate, the
// bottleneck's use and queue, fairness, the marks, drops, pauses and
// CNPs.
func summary(r *Report, o *Options, rec *Recorder, q *QueueSeries) {
	t0, t1 := o.Settle, o.Duration
	r.printf("after %v, to %v:", t0, t1)
	rates := rec.Gbps(t0, t1)
	var parts []string
	for i, x := range rates {
		parts = append(parts, fmt.Sprintf("%s %.2f", rec.Flows[i].Flow.Name, x))
	}
	if len(parts) <= 8 {
		r.printf("  flows (Gb/s): %s", strings.Join(parts, ", "))
	} else {
		r.printf("  flows (Gb/s): min %.2f, max %.2f, sum %.2f", slices.Min(rates), slices.Max(rates), sum(rates))
	}
	r.printf("  %s: %.2f%% of %.0f Gb/s used", q.Name, 100*rec.Utilization(q, o.Rate, t0, t1), float64(o.Rate)/1e9)
	ls := rec.QueueLengths(q, t0, t1)
	above := 0
	for _, l := range ls {
		if o.ECN.Kmax > 0 && l > o.ECN.Kmax {
			above++
		}
	}
	r.printf("  queue (KB): median %.1f, p99 %.1f, max %.1f; above Kmax %.2f%% of the time",
		kb(Percentile(ls, 50)), kb(Percentile(ls, 99)), kb(slices.Max(ls)), 100*float64(above)/float64(len(ls)))
	js := rec.Windows(t0, t1, o.Window)
	if len(js) > 0 {
		r.printf("  Jain's index over %v windows: min %.4f, median %.4f", o.Window, slices.Min(js), median(js))
	}
	last := len(rec.Times) - 1
	var cnps uint64
	for _, s := range rec.Flows {
		cnps += s.CNPs[last]
	}
	r.printf("  whole run: %s %d marked, %d dropped, %d lost; %d PFC pause frames in the network; %d CNPs handled",
		q.Name, q.Marked[last], q.Dropped[last], q.Lost[last], rec.net.pauses(), cnps)
}

func kb(b int) float64 { return float64(b) / 1000 }

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// newReport starts the report of a run called name.
func newReport(name string, o *Options, rec *Recorder) *Report {
	cc := "DCQCN off"
	if o.CC == rnic.CCDCQCN {
		cc = "DCQCN, " + o.Params.Variant.String() + "'s parameters"
	}
	return &Report{Name: name + ", " + cc, Title: header(name, cc, o), Recorder: rec, Options: *o}
}

func header(name, cc string, o *Options) string {
	s := fmt.Sprintf("%s: %.0f Gb/s links, %v delay, %s, RED %d/%d/%g, buffer %d", name, float64(o.Rate)/1e9, o.Delay, cc,
		o.ECN.Kmin, o.ECN.Kmax, o.ECN.Pmax, o.Buffer)
	if o.PFC != nil {
		s += fmt.Sprintf(", PFC %d/%d", o.PFC.XOFF, o.PFC.XON)
	}
	if o.Loss > 0 {
		s += fmt.Sprintf(", loss %g", o.Loss)
	}
	return s + fmt.Sprintf(", seed %d", o.Seed)
}

func twoFlows(o Options) (*Report, error) {
	o.N = 2
	return runIncast(o, "two flows")
}

func incast(o Options) (*Report, error) { return runIncast(o, fmt.Sprintf("%d:1 incast", o.N)) }

func runIncast(o Options, name string) (*Report, error) {
	st, err := newStar(&o, o.N)
	if err != nil {
		return nil, err
	}
	defer st.net.Close()
	rec, err := runStar(&o, st, nil)
	if err != nil {
		return nil, err
	}
	r := newReport(name, &o, rec)
	summary(r, &o, rec, rec.Queues[0])
	return r, nil
}

func incastSweep(o Options) (*Report, error) {
	r := newReport("incast sweep", &o, nil)
	r.printf("%4s %8s %9s %9s %10s %10s %9s %9s %7s %9s", "N", "util%", "Jain min", "Jain med", "q med KB", "q p99 KB", "marked", "dropped", "pauses", "CNPs")
	for _, n := range o.Sweep {
		p := o
		p.N = n
		if err := p.check(); err != nil {
			return nil, err
		}
		st, err := newStar(&p, n)
		if err != nil {
			return nil, err
		}
		rec, err := runStar(&p, st, nil)
		st.net.Close()
		if err != nil {
			return nil, fmt.Errorf("N=%d: %w", n, err)
		}
		q := rec.Queues[0]
		ls := rec.QueueLengths(q, p.Settle, p.Duration)
		js := rec.Windows(p.Settle, p.Duration, p.Window)
		last := len(rec.Times) - 1
		row := SweepRow{N: n, Utilization: rec.Utilization(q, p.Rate, p.Settle, p.Duration),
			JainMin: slices.Min(js), JainMedian: median(js),
			QueueMedian: Percentile(ls, 50), QueueP99: Percentile(ls, 99),
			Marked: q.Marked[last], Dropped: q.Dropped[last], Pause: q.Pauses[last]}
		for _, s := range rec.Flows {
			row.CNPs += s.CNPs[last]
		}
		r.Rows = append(r.Rows, row)
		r.printf("%4d %8.2f %9.4f %9.4f %10.1f %10.1f %9d %9d %7d %9d", n, 100*row.Utilization, row.JainMin, row.JainMedian,
			kb(row.QueueMedian), kb(row.QueueP99), row.Marked, row.Dropped, row.Pause, row.CNPs)
	}
	return r, nil
}

// joinLeave runs flow 1 from the start and flow 2 from a third of the
// run to two thirds, and reports how long after each change the rates
// take to settle within 10% of their fair shares.
func joinLeave(o Options) (*Report, error) {
	st, err := newStar(&o, 2)
	if err != nil {
		return nil, err
	}
	defer st.net.Close()
	join, leave := o.Duration/3, 2*o.Duration/3
	rec, err := runStar(&o, st, func(i int, f *Flow) {
		if i == 1 {
			f.Start, f.Stop = join, leave
		}
	})
	if err != nil {
		return nil, err
	}
	r := newReport("join and leave", &o, rec)
	share := float64(o.Rate) / 1e9 * 0.985 // what the headers leave of the line rate
	// settled returns how long after from every window of o.Window
	// (sliding by a tenth of it) up to to passes ok.
	settled := func(from, to time.Duration, ok func(rates []float64) bool) string {
		w := o.Window
		since := time.Duration(-1)
		for a := from; a+w <= to; a += w / 10 {
			switch fine := ok(rec.Gbps(a, a+w)); {
			case fine && since < 0:
				since = a
			case !fine:
				since = -1
			}
		}
		if since < 0 {
			return "never"
		}
		return (since - from).String()
	}
	fair := func(rates []float64) bool { return Jain(rates) >= 0.95 }
	used := func(rates []float64) bool { return sum(rates) >= 0.95*share }
	near := func(want float64) func([]float64) bool {
		return func(rates []float64) bool {
			return rates[0] >= 0.9*want && rates[0] <= 1.1*want && (want == share || rates[1] >= 0.9*want && rates[1] <= 1.1*want)
		}
	}
	r.printf("flow 2 joins at %v; from then on, in every %v window until it leaves:", join, o.Window)
	r.printf("  Jain's index at least 0.95 after %s; 95%% of the port used after %s; both within 10%% of %.1f Gb/s after %s",
		settled(join, leave, fair), settled(join, leave, used), share/2, settled(join, leave, near(share/2)))
	r.printf("flow 2 leaves at %v: flow 1 within 10%% of %.1f Gb/s after %s", leave, share, settled(leave, o.Duration, near(share)))
	summary(r, &o, rec, rec.Queues[0])
	return r, nil
}

// parkingLot runs the 4:1 parking lot: senders s1, s2 and s3 on switch
// 1, whose port 3 goes to switch 2; sender s4 and the receiver on switch
// 2. With PFC alone, switch 2 serves its two busy ingress ports equally:
// s4 gets half the receiver's port and s1 to s3 a sixth each. DCQCN
// should give each a quarter.
func parkingLot(o Options) (*Report, error) {
	net := New(fabric.NewClock(), o.device())
	r1, r2, r3, r4, rr := hostAddr(1, 1), hostAddr(1, 2), hostAddr(1, 3), hostAddr(2, 1), hostAddr(2, 2)
	s1, err := net.AddSwitch(o.switchConfig([]fabric.PortConfig{o.port(r1), o.port(r2), o.port(r3), o.port(r4, rr)}))
	if err != nil {
		return nil, err
	}
	s2, err := net.AddSwitch(o.switchConfig([]fabric.PortConfig{o.port(r1, r2, r3), o.port(r4), o.port(rr)}))
	if err != nil {
		return nil, err
	}
	defer net.Close()
	if err := fabric.Connect(s1, 3, s2, 0); err != nil {
		return nil, err
	}
	recv, err := net.AddHost("r", s2, 2)
	if err != nil {
		return nil, err
	}
	var senders []*Host
	for i, at := range []struct {
		s    *fabric.Switch
		port int
	}{{s1, 0}, {s1, 1}, {s1, 2}, {s2, 1}} {
		h, err := net.AddHost(fmt.Sprintf("s%d", i+1), at.s, at.port)
		if err != nil {
			return nil, err
		}
		senders = append(senders, h)
	}
	for _, h := range senders {
		if err := net.AddFlow(&Flow{Name: h.Name, Src: h, Dst: recv, Size: o.Size, Depth: o.Depth}); err != nil {
			return nil, err
		}
	}
	rec, err := net.Record(o.Sample, o.Duration, QueueSeries{Name: "to-receiver", Switch: s2, Port: 2},
		QueueSeries{Name: "switch1-to-switch2", Switch: s1, Port: 3})
	if err != nil {
		return nil, err
	}
	if err := net.Run(o.Duration); err != nil {
		return nil, err
	}
	r := newReport("4:1 parking lot", &o, rec)
	summary(r, &o, rec, rec.Queues[0])
	last := len(rec.Times) - 1
	q := rec.Queues[1]
	r.printf("  switch 1 to 2: %d marked, %d dropped, %d lost; switch 2 paused switch 1 %d times", q.Marked[last], q.Dropped[last], q.Lost[last], s2.Port(0).Pauses)
	var st qp.Counters
	for _, s := range rec.Flows {
		c := s.Flow.Stats()
		st.Add(&c)
	}
	r.printf("  go-back-N: %d retransmissions started (completer_retry_err), %d sequence NAKs received (rcvd_seq_err), %d local ACK timeouts",
		st.CompleterRetryErr, st.RcvdSeqErr, st.RetransmitTimeouts)
	return r, nil
}

// Run checks o and runs the scenario named name with it.
func Run(name string, o Options) (*Report, error) {
	sc, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	return sc.Run(o)
}

// pauses returns the PFC pause frames every switch has sent so far.
func (n *Network) pauses() uint64 {
	var p uint64
	for _, s := range n.switches {
		for i := range s.Ports() {
			p += s.Port(i).Pauses
		}
	}
	return p
}

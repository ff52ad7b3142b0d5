package fabric

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/wire"
)

const (
	ect0 = 2 // ECN field values (RFC 3168)
	ect1 = 1
	ce   = 3
)

func TestREDProbability(t *testing.T) {
	r := RED{Kmin: 5000, Kmax: 200000, Pmax: 0.01}
	for _, c := range []struct {
		q    int
		want float64
	}{
		{0, 0}, {4999, 0}, {5000, 0}, // at or below Kmin
		{5000 + 195000/2, 0.005}, {200000, 0.01}, // linear up to Pmax at Kmax
		{200001, 1}, {1 << 30, 1}, // above Kmax, every packet
	} {
		if got := r.Probability(c.q); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Probability(%d) = %v, want %v", c.q, got, c.want)
		}
	}
	if p := (RED{}).Probability(1 << 30); p != 0 {
		t.Errorf("the zero RED marks with probability %v", p)
	}
	dctcp := RED{Kmin: 30000, Kmax: 30000, Pmax: 1}
	if dctcp.Probability(30000) != 0 || dctcp.Probability(30001) != 1 {
		t.Error("Kmin = Kmax is not a step at K")
	}
}

// TestMarkingCurve measures the fraction of ECT packets marked as they
// leave a queue held at q bytes, over many packets with a fixed seed: 0
// up to Kmin, rising linearly to Pmax at Kmax, 1 above.
func TestMarkingCurve(t *testing.T) {
	red := RED{Kmin: 20000, Kmax: 100000, Pmax: 0.2}
	const n = 20000
	for _, q := range []int{0, 10000, 20000, 21000, 40000, 60000, 80000, 100000, 101000, 150000} {
		clock := NewClock()
		s, err := NewSwitch(clock, Config{Ports: ports(2, 40e9, 1000), Buffer: 1 << 20, ECN: red, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		out := &s.ports[1]
		for out.down.bytes < q {
			out.down.push(s.newFrame(ip4(hostB, 1000, ect0), 0))
		}
		for range n {
			s.dequeued(clock.Now(), 1, s.newFrame(ip4(hostB, 1000, ect0), 0))
		}
		got := float64(s.Queue(1).Marked) / n
		want := red.Probability(q)
		// Five standard deviations of a binomial fraction, and exact at 0 and 1.
		tol := 5 * math.Sqrt(want*(1-want)/n)
		if math.Abs(got-want) > tol {
			t.Errorf("queue %d bytes: marked %.4f, want %.4f ± %.4f", q, got, want, tol)
		}
	}
}

// TestMarkOnlyECT: a marked IPv4 packet differs from what was sent only in
// its ECN bits and header checksum, which stays right; an IPv6 packet only
// in its ECN bits; Not-ECT and CE packets pass unchanged and uncounted.
func TestMarkOnlyECT(t *testing.T) {
	clock, s, rs := newSwitch(t, Config{
		Ports:  []PortConfig{{Rate: 100e9, Addrs: []netip.Addr{hostA}}, {Rate: 1e9, Addrs: []netip.Addr{hostB, host6}}},
		Buffer: 1 << 20,
		ECN:    RED{Kmin: 0, Kmax: 1, Pmax: 1}, // every packet with a byte behind it
	})
	sent := [][]byte{
		ip4(hostB, 1000, ect0), // leaves an empty queue: not marked
		ip4(hostB, 1000, 0xb8|ect0),
		ip4(hostB, 1000, 0xb8|ect1),
		ip6(host6, 1000, 0x88|ect0),
		ip4(hostB, 1000, 0xb8), // Not-ECT
		ip4(hostB, 1000, 0xb8|ce),
		ip4(hostB, 1000, ect0), // the last leaves an empty queue
	}
	// The 100 Gb/s host fills the 1 Gb/s port's queue: the first packet
	// leaves an empty queue, the rest queue behind it.
	for _, p := range sent {
		s.Send(0, p)
	}
	for clock.Step() {
	}
	got := rs[1].pkts
	if len(got) != len(sent) {
		t.Fatalf("delivered %d packets, want %d", len(got), len(sent))
	}
	wantCE := []bool{false, true, true, true, false, true, false}
	for i, p := range got {
		diff := diffBytes(sent[i], p)
		if !wantCE[i] || i == 5 {
			if len(diff) != 0 {
				t.Errorf("packet %d changed at bytes %v", i, diff)
			}
			continue
		}
		if p[0]>>4 == 4 {
			h := wire.IPv4(p)
			if h.TOS() != sent[i][1]|ce || !h.ChecksumValid() {
				t.Errorf("packet %d: TOS %#x, checksum valid %v", i, h.TOS(), h.ChecksumValid())
			}
			if fmt.Sprint(diff) != "[1 10 11]" && fmt.Sprint(diff) != "[1 10]" && fmt.Sprint(diff) != "[1 11]" {
				t.Errorf("packet %d changed at bytes %v, want only TOS and checksum", i, diff)
			}
		} else {
			h := wire.IPv6(p)
			if h.TrafficClass() != 0x88|ce || h.FlowLabel() != 0x12345 || fmt.Sprint(diff) != "[1]" {
				t.Errorf("IPv6 packet: traffic class %#x, flow label %#x, changed at %v", h.TrafficClass(), h.FlowLabel(), diff)
			}
		}
	}
	if q := s.Queue(1); q.Marked != 3 {
		t.Errorf("Marked = %d, want 3", q.Marked)
	}
}

func diffBytes(a, b []byte) []int {
	var d []int
	for i := range a {
		if a[i] != b[i] {
			d = append(d, i)
		}
	}
	return d
}

// TestTailDrop: a burst into a slow port fills the buffer; what does not
// fit is dropped, what fits is delivered in order.
func TestTailDrop(t *testing.T) {
	ps := ports(3, 100e9, 1000)
	ps[2].Rate = 1e9
	clock, s, rs := newSwitch(t, Config{Ports: ps, Buffer: 3000, MTU: 1500})
	for i := range 10 {
		p := ip4(hostC, 1000, ect0)
		p[100] = byte(i)
		s.Send(0, p)
	}
	for clock.Step() {
	}
	q := s.Queue(2)
	// The first leaves at once; three fill the buffer behind it.
	if q.Enqueued != 4 || q.Dropped != 6 || q.DroppedBytes != 6000 || q.MaxBytes != 3000 || q.Bytes != 0 {
		t.Errorf("queue: %+v", q)
	}
	if len(rs[2].pkts) != 4 {
		t.Fatalf("delivered %d", len(rs[2].pkts))
	}
	for i, p := range rs[2].pkts {
		if p[100] != byte(i) {
			t.Errorf("delivery %d is packet %d", i, p[100])
		}
	}
	if st := s.Port(2); st.Delivered != 4 || st.DeliveredBytes != 4000 {
		t.Errorf("port: %+v", st)
	}
}

// TestLoss: with Config.Loss, about that share of the packets leaving an
// egress queue never arrive; each costs the link its time all the same,
// and the same seed loses the same ones.
func TestLoss(t *testing.T) {
	const n, loss = 25600, 1.0 / 256
	run := func(seed uint64) (QueueStats, []byte) {
		clock, s, rs := newSwitch(t, Config{Ports: ports(2, 40e9, 1000), Buffer: n * 1000, Loss: loss, Seed: seed})
		for i := range n {
			p := ip4(hostB, 1000, ect0)
			p[100], p[101] = byte(i), byte(i>>8)
			s.Send(0, p)
		}
		t0 := clock.Now()
		for clock.Step() {
		}
		// n packets of 1000 bytes at 40 Gb/s take 200 ns each; the last
		// one, whether lost or not, has left the queue at n×200 ns.
		if q := s.Queue(1); q.SentBytes != n*1000 {
			t.Errorf("sent %d bytes, want %d", q.SentBytes, n*1000)
		}
		var got []byte
		for _, p := range rs[1].pkts {
			got = append(got, p[100], p[101])
		}
		if d := clock.Now().Sub(t0); d < n*200 {
			t.Errorf("the run took %v, less than the queue's %v", d, time.Duration(n*200))
		}
		q := s.Queue(1)
		if uint64(len(rs[1].pkts))+q.Lost != n {
			t.Errorf("%d delivered and %d lost of %d", len(rs[1].pkts), q.Lost, n)
		}
		return q, got
	}
	q, a := run(1)
	if q.Lost < 60 || q.Lost > 140 { // 100 expected; 4 standard deviations
		t.Errorf("lost %d of %d at 1/256", q.Lost, n)
	}
	if _, b := run(1); !bytes.Equal(a, b) {
		t.Error("the same seed lost other packets")
	}
	if _, c := run(2); bytes.Equal(a, c) {
		t.Error("another seed lost the same packets")
	}
}

// TestSerialization: a packet takes bytes×8/rate on each link and the
// delay across it, exactly; at a rate that does not divide, back to back
// packets carry the remainder so that their sum is exact.
func TestSerialization(t *testing.T) {
	clock, s, rs := newSwitch(t, Config{Ports: ports(2, 40e9, 1000), Buffer: 1 << 20})
	t0 := clock.Now()
	for range 3 {
		s.Send(0, ip4(hostB, 1000, ect0))
	}
	for clock.Step() {
	}
	// 1000 B at 40 Gb/s is 200 ns; up, 1 µs, out of the switch, 1 µs.
	for i, want := range []time.Duration{2400, 2600, 2800} {
		if got := rs[1].at[i].Sub(t0); got != want {
			t.Errorf("packet %d delivered after %v, want %v", i, got, want)
		}
	}

	// 1000 B at 3 Gb/s is 2666⅔ ns: the host finishes at 2666, 5333 and
	// 8000 ns; the 8 Gb/s port adds 1000 ns to each.
	ps := ports(2, 3e9, 0)
	ps[1].Rate = 8e9
	clock, s, rs = newSwitch(t, Config{Ports: ps, Buffer: 1 << 20})
	t0 = clock.Now()
	for range 3 {
		s.Send(0, ip4(hostB, 1000, ect0))
	}
	for clock.Step() {
	}
	for i, want := range []time.Duration{3666, 6333, 9000} {
		if got := rs[1].at[i].Sub(t0); got != want {
			t.Errorf("3 Gb/s: packet %d delivered after %v, want %v", i, got, want)
		}
	}
	if st := s.Port(0); st.Sent != 3 || st.Transmitted != 3 || st.Received != 3 || st.HostQueued != 0 {
		t.Errorf("port 0: %+v", st)
	}
}

// traceLine is one parsed line of a switch's trace.
type traceLine struct {
	at         int64
	what       string
	port, n, q int
}

func parseTrace(t *testing.T, b []byte) []traceLine {
	t.Helper()
	var ls []traceLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var l traceLine
		if _, err := fmt.Sscanf(sc.Text(), "%d %s port=%d len=%d q=%d", &l.at, &l.what, &l.port, &l.n, &l.q); err != nil {
			t.Fatalf("trace line %q: %v", sc.Text(), err)
		}
		ls = append(ls, l)
	}
	return ls
}

// TestPFC: two hosts send into one port at the same rate. With PFC the
// switch pauses each ingress once its bytes pass XOFF and resumes it at
// XON; the pause reaches the host a link delay later; nothing is dropped.
// Without PFC the same buffer drops.
func TestPFC(t *testing.T) {
	const (
		xoff, xon = 20000, 10000
		delay     = 1000 // ns
		pkts      = 200
	)
	run := func(pfc *PFC) (*Switch, []traceLine, *received) {
		var trace bytes.Buffer
		clock, s, rs := newSwitch(t, Config{Ports: ports(3, 40e9, delay), Buffer: 60000, PFC: pfc, Trace: &trace})
		for range pkts {
			s.Send(0, ip4(hostC, 1000, ect0))
			s.Send(1, ip4(hostC, 1000, ect0))
		}
		for clock.Step() {
		}
		return s, parseTrace(t, trace.Bytes()), rs[2]
	}

	s, trace, got := run(&PFC{XOFF: xoff, XON: xon})
	if q := s.Queue(2); q.Dropped != 0 || len(got.pkts) != 2*pkts {
		t.Fatalf("with PFC: %d dropped, %d of %d delivered", q.Dropped, len(got.pkts), 2*pkts)
	}
	// In flight when a pause is sent: what the host sends while the
	// pause crosses the link and the packet it is sending then, and
	// what is on the link towards the switch.
	headroom := 2*delay*40/8 + 2*1000
	xoffAt := map[int]int64{}
	for _, l := range trace {
		switch l.what {
		case "xoff":
			if l.q <= xoff || l.q > xoff+1000 {
				t.Errorf("port %d paused with %d bytes queued, want just above XOFF %d", l.port, l.q, xoff)
			}
			xoffAt[l.port] = l.at
		case "xon":
			if l.q > xon || l.q <= xon-1000 {
				t.Errorf("port %d resumed with %d bytes queued, want just at or below XON %d", l.port, l.q, xon)
			}
		case "paused":
			if at, ok := xoffAt[l.port]; !ok || l.at != at+delay {
				t.Errorf("port %d paused at %d, a pause was sent at %d (%v)", l.port, l.at, at, ok)
			}
		}
	}
	for i := range 2 {
		st := s.Port(i)
		if st.Pauses == 0 || st.Resumes != st.Pauses || st.PausedTime <= 0 || st.Paused {
			t.Errorf("port %d: %+v", i, st)
		}
	}
	if q := s.Queue(2); q.MaxBytes > 2*(xoff+headroom) {
		t.Errorf("queue reached %d bytes, more than two ports' XOFF and headroom %d", q.MaxBytes, 2*(xoff+headroom))
	}

	s, _, got = run(nil)
	if q := s.Queue(2); q.Dropped == 0 || int(q.Dropped)+len(got.pkts) != 2*pkts {
		t.Fatalf("without PFC: %d dropped, %d delivered", q.Dropped, len(got.pkts))
	}
	if st := s.Port(0); st.Pauses != 0 || st.PausedTime != 0 {
		t.Errorf("without PFC: port 0 %+v", st)
	}
}

// scenario runs four hosts sending to one another through a marking,
// pausing switch, and returns its trace.
func scenario(t *testing.T, seed uint64) []byte {
	var trace bytes.Buffer
	clock, s, _ := newSwitch(t, Config{
		Ports:  ports(4, 25e9, 1500),
		Buffer: 36000, // less than XOFF and the headroom: some drops
		ECN:    RED{Kmin: 5000, Kmax: 40000, Pmax: 0.5},
		PFC:    &PFC{XOFF: 30000, XON: 20000},
		Seed:   seed,
		Trace:  &trace,
	})
	send := HandlerFunc(func(now monotime.Time, arg any) {
		i := arg.(int)
		s.Send(i, ip4(netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + (i+1+i%2)%4)}), 500+i*300, ect0))
	})
	for k := range 400 {
		for i := range 4 {
			clock.At(monotime.Time(1+k*(100+i*7)), send, i)
		}
	}
	for clock.Step() {
	}
	return trace.Bytes()
}

// TestSameSeedSameTrace: a run is a function of its inputs and seed.
func TestSameSeedSameTrace(t *testing.T) {
	a, b := scenario(t, 1), scenario(t, 1)
	if !bytes.Equal(a, b) {
		t.Fatal("two runs with seed 1 traced differently")
	}
	for _, what := range []string{" mark ", " xoff ", " drop ", " deliver "} {
		if !bytes.Contains(a, []byte(what)) {
			t.Errorf("the scenario never traced %q", what)
		}
	}
	if c := scenario(t, 2); bytes.Equal(a, c) {
		t.Error("seeds 1 and 2 traced the same")
	}
}

func TestConfigErrors(t *testing.T) {
	good := func() Config { return Config{Ports: ports(2, 40e9, 1000), Buffer: 1 << 20} }
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no ports", func(c *Config) { c.Ports = nil }, "no ports"},
		{"zero rate", func(c *Config) { c.Ports[1].Rate = 0 }, "port 1: zero rate"},
		{"negative delay", func(c *Config) { c.Ports[0].Delay = -1 }, "negative delay"},
		{"small buffer", func(c *Config) { c.Buffer = 8999 }, "smaller than one packet"},
		{"small buffer, MTU", func(c *Config) { c.MTU = 1500; c.Buffer = 1000 }, "smaller than one packet of MTU 1500"},
		{"MTU", func(c *Config) { c.MTU = 9001 }, "MTU 9001"},
		{"Kmin above Kmax", func(c *Config) { c.ECN = RED{Kmin: 200, Kmax: 100, Pmax: 0.1} }, "Kmin 200 is above Kmax 100"},
		{"negative K", func(c *Config) { c.ECN = RED{Kmin: -1, Kmax: 100} }, "negative ECN threshold"},
		{"Pmax", func(c *Config) { c.ECN = RED{Kmax: 100, Pmax: 1.5} }, "Pmax 1.5"},
		{"Pmax NaN", func(c *Config) { c.ECN = RED{Kmax: 100, Pmax: math.NaN()} }, "Pmax NaN"},
		{"Loss", func(c *Config) { c.Loss = 1 }, "Loss 1 is not"},
		{"Loss negative", func(c *Config) { c.Loss = -0.1 }, "Loss -0.1"},
		{"Loss NaN", func(c *Config) { c.Loss = math.NaN() }, "Loss NaN"},
		{"XON above XOFF", func(c *Config) { c.PFC = &PFC{XOFF: 100, XON: 100} }, "XOFF 100 must be above XON 100"},
		{"duplicate address", func(c *Config) { c.Ports[1].Addrs = c.Ports[0].Addrs }, "on ports 0 and 1"},
		{"invalid address", func(c *Config) { c.Ports[1].Addrs = []netip.Addr{{}} }, "invalid address"},
	} {
		cfg := good()
		c.edit(&cfg)
		_, err := NewSwitch(NewClock(), cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrConfig saying %q", c.name, err, c.want)
		}
	}
	if _, err := NewSwitch(NewClock(), good()); err != nil {
		t.Fatal(err)
	}
}

// TestMisdirected: packets for no port, not IP, too big, or from a port
// the switch lacks are counted or refused, never forwarded.
func TestMisdirected(t *testing.T) {
	clock, s, rs := newSwitch(t, Config{Ports: ports(2, 40e9, 1000), Buffer: 20000, MTU: 1500})
	s.Send(0, ip4(netip.MustParseAddr("10.9.9.9"), 100, ect0))
	s.Send(0, []byte{0x00, 1, 2, 3})
	s.Send(0, ip4(hostB, 1501, ect0))
	if err := s.Send(2, ip4(hostB, 100, ect0)); !errors.Is(err, ErrPort) {
		t.Errorf("Send on port 2: %v", err)
	}
	if err := s.OnReceive(-1, nil); !errors.Is(err, ErrPort) {
		t.Errorf("OnReceive on port -1: %v", err)
	}
	for clock.Step() {
	}
	if st := s.Port(0); st.NoRoute != 2 || st.TooBig != 1 || st.Received != 2 {
		t.Errorf("port 0: %+v", st)
	}
	if len(rs[0].pkts)+len(rs[1].pkts) != 0 {
		t.Error("a misdirected packet was delivered")
	}
}

func BenchmarkSwitch(b *testing.B) {
	clock := NewClock()
	s, err := NewSwitch(clock, Config{Ports: ports(3, 100e9, 1000), Buffer: 1 << 20, ECN: RED{Kmin: 5000, Kmax: 200000, Pmax: 0.01}})
	if err != nil {
		b.Fatal(err)
	}
	p := ip4(hostC, 1000, ect0)
	b.ReportAllocs()
	for b.Loop() {
		s.Send(0, p)
		s.Send(1, p)
		clock.RunFor(160)
	}
}

// TestSampleQueues: a row per port at every interval, with the queue as
// it is at that instant.
func TestSampleQueues(t *testing.T) {
	ps := ports(2, 80e9, 0)
	ps[1].Rate = 8e9 // 1000 B take 100 ns in, 1000 ns out
	clock, s, _ := newSwitch(t, Config{Ports: ps, Buffer: 1 << 20})
	var out bytes.Buffer
	t0 := clock.Now()
	if err := s.SampleQueues(&out, 500, t0.Add(2000)); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		s.Send(0, ip4(hostB, 1000, ect0))
	}
	for clock.Step() {
	}
	// The first packet leaves at 100 ns; the others arrive at 200, 300 and
	// 400 and leave at 1100, 2100 and 3100.
	want := SampleHeader +
		"1,0,0,0,0,0,0,0,0,0\n1,1,0,0,0,0,0,0,0,0\n" +
		"501,0,0,0,0,0,0,0,0,0\n501,1,3000,4,0,0,0,0,0,0\n" +
		"1001,0,0,0,0,0,0,0,0,0\n1001,1,3000,4,0,0,0,0,0,0\n" +
		"1501,0,0,0,0,0,0,0,0,0\n1501,1,2000,4,0,0,1000,0,0,0\n" +
		"2001,0,0,0,0,0,0,0,0,0\n2001,1,2000,4,0,0,1000,0,0,0\n"
	if out.String() != want {
		t.Errorf("samples:\n%s\nwant:\n%s", out.String(), want)
	}
	if err := s.SampleQueues(&out, 0, 0); !errors.Is(err, ErrConfig) {
		t.Errorf("a zero interval: %v", err)
	}
}

// roce returns an n-byte IPv4 RoCE v2 packet from src to dst with BTH
// opcode op.
func roce(src, dst netip.Addr, n int, op byte) []byte {
	b := ip4(dst, n, ect0)
	wire.IPv4(b).SetSrc(src)
	wire.IPv4(b).UpdateChecksum()
	b[wire.IPv4Len+2], b[wire.IPv4Len+3] = wire.UDPPort>>8, wire.UDPPort&0xff
	b[wire.IPv4Len+wire.UDPLen] = op
	return b
}

// TestSampleFlows: data bytes per (source, destination) with their rate
// over each interval, CNPs counted for the flow they slow, ACKs not at
// all.
func TestSampleFlows(t *testing.T) {
	clock, s, _ := newSwitch(t, Config{Ports: ports(3, 8e9, 0), Buffer: 1 << 20}) // 1000 B in 1 µs
	var out bytes.Buffer
	t0 := clock.Now()
	if err := s.SampleFlows(&out, 4000, t0.Add(8000)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s.Send(1, roce(hostB, hostA, 1000, 0x0a)) // RDMA WRITE Only, B to A
	}
	s.Send(0, roce(hostA, hostC, 1000, 0x0a))
	s.Send(2, roce(hostC, hostA, 100, 0x81)) // a CNP from C for the flow A to C
	s.Send(2, roce(hostC, hostA, 60, 0x11))  // an ACK
	clock.RunFor(4000)
	s.Send(0, roce(hostA, hostC, 1000, 0x0a))
	for clock.Step() {
	}
	// B's three reach A at 2, 3 and 4 µs, after the CNP (1 µs in, 100 ns
	// out) and the ACK; A's first reaches C at 2 µs, its second at 6.
	want := FlowHeader +
		"4001,10.0.0.1,10.0.0.3,1000,2000000000,1\n" +
		"4001,10.0.0.2,10.0.0.1,2000,4000000000,0\n" +
		"8001,10.0.0.1,10.0.0.3,2000,2000000000,1\n" +
		"8001,10.0.0.2,10.0.0.1,3000,2000000000,0\n"
	if out.String() != want {
		t.Errorf("flows:\n%s\nwant:\n%s", out.String(), want)
	}
	if err := s.SampleFlows(&out, -1, 0); !errors.Is(err, ErrConfig) {
		t.Errorf("a negative interval: %v", err)
	}
}

// TestParkingLot: hosts A and B on switch 1 and C on switch 2 send to D
// on switch 2 with PFC. Switch 2 pauses switch 1's queue towards it,
// which fills and pauses A and B: nothing is lost, and PFC's known
// unfairness shows, C getting about half of D's port and A and B about a
// quarter each.
func TestParkingLot(t *testing.T) {
	const rate, delay = 40e9, 1000
	hostD := netip.MustParseAddr("10.0.0.4")
	at := func(as ...netip.Addr) PortConfig { return PortConfig{Rate: rate, Delay: delay, Addrs: as} }
	clock := NewClock()
	pfc := &PFC{XOFF: 30000, XON: 20000}
	s1, err := NewSwitch(clock, Config{Ports: []PortConfig{at(hostA), at(hostB), at(hostC, hostD)}, Buffer: 200000, PFC: pfc})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := NewSwitch(clock, Config{Ports: []PortConfig{at(hostA, hostB), at(hostC), at(hostD)}, Buffer: 200000, PFC: pfc})
	if err != nil {
		t.Fatal(err)
	}
	if err := Connect(s1, 2, s2, 0); err != nil {
		t.Fatal(err)
	}
	if err := Connect(s1, 2, s2, 1); !errors.Is(err, ErrPort) {
		t.Errorf("a port connected twice: %v", err)
	}
	if err := s1.Send(2, ip4(hostD, 1000, ect0)); !errors.Is(err, ErrPort) {
		t.Errorf("Send on a port to a switch: %v", err)
	}
	var flows bytes.Buffer
	if err := s2.SampleFlows(&flows, 100_000, clock.Now().Add(1_000_000)); err != nil {
		t.Fatal(err)
	}
	const pkts = 6000 // more than the 1 ms sampled
	for range pkts {
		s1.Send(0, roce(hostA, hostD, 1000, 0x0a))
		s1.Send(1, roce(hostB, hostD, 1000, 0x0a))
		s2.Send(1, roce(hostC, hostD, 1000, 0x0a))
	}
	for clock.Step() {
	}
	if q1, q2 := s1.Queue(2), s2.Queue(2); q1.Dropped+q2.Dropped != 0 || s2.Port(2).Delivered != 3*pkts {
		t.Fatalf("dropped %d and %d, delivered %d of %d", q1.Dropped, q2.Dropped, s2.Port(2).Delivered, 3*pkts)
	}
	if q := s1.Queue(2); q.PausedTime == 0 || s2.Port(0).Pauses == 0 {
		t.Errorf("switch 1's queue to switch 2 was never paused: %+v", q)
	}
	for i := range 2 {
		if p := s1.Port(i); p.Pauses == 0 {
			t.Errorf("host %d on switch 1 was never paused: %+v", i, p)
		}
	}
	// Rates at 1 ms, over its last 100 µs, by source.
	rates := map[string]float64{}
	for _, line := range strings.Split(flows.String(), "\n") {
		f := strings.Split(line, ",")
		if len(f) == 6 && f[0] == fmt.Sprint(int64(clock0(1_000_000))) {
			var r float64
			fmt.Sscan(f[4], &r)
			rates[f[1]] = r / 1e9
		}
	}
	a, b, c := rates["10.0.0.1"], rates["10.0.0.2"], rates["10.0.0.3"]
	t.Logf("at 1 ms: A %.2f, B %.2f, C %.2f Gb/s", a, b, c)
	if sum := a + b + c; sum < 38 || sum > 40 {
		t.Errorf("D's port carries %.2f Gb/s of 40", sum)
	}
	if c < 16 || c > 24 || a < 8 || a > 12 || b < 8 || b > 12 {
		t.Errorf("shares A %.2f, B %.2f, C %.2f Gb/s; want about 10, 10, 20", a, b, c)
	}
}

// clock0 returns the time on a new clock d nanoseconds after its start.
func clock0(d int64) monotime.Time { return NewClock().Now().Add(time.Duration(d)) }

package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// The timed runs below run in synctest bubbles over an in-memory fabric
// that delays every packet by delay each way: the fake clock moves only
// while every goroutine waits, for a packet or for the run's timer, so a
// -D run takes no real time and its windows are exact.
const delay = 5 * time.Millisecond

// timedParams is a two-second run with half-second margins: a one-second
// sample window, from 0.5 s to 1.5 s.
func timedParams(t Test) Params {
	return Params{Test: t, Size: 64, Duration: 2 * time.Second, Margin: 500 * time.Millisecond, TxDepth: 8, CQMod: 4, Timeout: 12}
}

func runLocal(t *testing.T, p Params, f mem.Faults) Result {
	t.Helper()
	res, err := RunLocal(context.Background(), p, f)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 {
		t.Fatalf("%d results", len(res))
	}
	return res[0]
}

// TestTimedBWSampleWindow: a timed run reports the messages of its sample
// window over exactly that window, in units of the CQ moderation
// (perftest counts cq_mod per completion), with no peak: about half of
// what a two-second run with half-second margins sends.
func TestTimedBWSampleWindow(t *testing.T) {
	for _, tt := range []Test{WriteBW, ReadBW, SendBW, AtomicBW} {
		t.Run(string(tt), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := timedParams(tt)
				if tt == AtomicBW {
					p.Size = 8
				}
				var posted atomic.Int64
				p.onPost = func(n int) { posted.Add(int64(n)) }
				b := runLocal(t, p, mem.Faults{Delay: delay}).BW
				if b.Elapsed != time.Second {
					t.Errorf("sample window %v, want 1s", b.Elapsed)
				}
				if b.PeakMBps != 0 || b.Iters == 0 || b.Iters%4 != 0 {
					t.Errorf("peak %v, %d messages (want no peak, a multiple of 4)", b.PeakMBps, b.Iters)
				}
				if share := float64(b.Iters) / float64(posted.Load()); share < 0.45 || share > 0.55 {
					t.Errorf("%d of %d messages counted: %.2f of them, want about half", b.Iters, posted.Load(), share)
				}
				if want := float64(b.Iters) / 1e6; b.MsgRate != want {
					t.Errorf("message rate %v, want %v", b.MsgRate, want)
				}
			})
		})
	}
}

// TestTimedBWCountsNothingOutsideTheWindow: with every packet dropped
// from just before the sample window opens to just after it closes, the
// messages complete before and after it, and none counts.
func TestTimedBWCountsNothingOutsideTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		blackout := func(now time.Time) bool {
			d := now.Sub(start)
			return d > 400*time.Millisecond && d < 1600*time.Millisecond
		}
		var before, after atomic.Int64
		p := timedParams(WriteBW)
		p.onPost = func(n int) {
			switch d := time.Since(start); {
			case d < 400*time.Millisecond:
				before.Add(int64(n))
			case d > 1600*time.Millisecond:
				after.Add(int64(n))
			}
		}
		f := mem.Faults{Delay: delay, DropFunc: func([]byte, uint64) bool { return blackout(time.Now()) }}
		b := runLocal(t, p, f).BW
		if b.Iters != 0 {
			t.Errorf("%d messages counted, want none", b.Iters)
		}
		// A post needs the completion of an earlier message.
		if before.Load() <= int64(p.TxDepth) || after.Load() == 0 {
			t.Errorf("%d messages posted before the blackout, %d after: messages did not complete on both sides of it", before.Load(), after.Load())
		}
	})
}

// TestTimedSendBWServer: the send_bw server keeps its own time from the
// first message it receives, as run_iter_bw_server does, and both sides
// end on their own: the client first, then the server, which counted a
// window of the same length.
func TestTimedSendBWServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := timedParams(SendBW)
		p.Defaults()
		client, server, closeAll, err := localPair(&p, mem.Faults{Delay: delay})
		if err != nil {
			t.Fatal(err)
		}
		defer closeAll()
		ctx, stop := p.watch(context.Background())
		defer stop()
		type out struct {
			b   BWResult
			end time.Time
			err error
		}
		posted, err := postReceives(server, &p)
		if err != nil {
			t.Fatal(err)
		}
		srv := make(chan out, 1)
		go func() {
			b, err := runBWSide(ctx, &p, server, true, posted, nil, nil, nil)
			srv <- out{b, time.Now(), err}
		}()
		start := time.Now()
		cb, err := runBWSide(ctx, &p, client, false, 0, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		clientEnd := time.Now()
		s := <-srv
		if s.err != nil {
			t.Fatal(s.err)
		}
		if d := clientEnd.Sub(start); d != 2*time.Second {
			t.Errorf("the client ran %v, want 2s", d)
		}
		// The server's clock started when the first SEND arrived.
		if d := s.end.Sub(start); d != 2*time.Second+delay {
			t.Errorf("the server ran until %v, want 2s and the first SEND's %v", d, delay)
		}
		if s.b.Elapsed != time.Second || cb.Elapsed != time.Second {
			t.Errorf("windows %v (server) and %v (client), want 1s", s.b.Elapsed, cb.Elapsed)
		}
		if s.b.Iters == 0 || s.b.PeakMBps != 0 || s.b.Iters < cb.Iters*9/10 || s.b.Iters > cb.Iters*11/10 {
			t.Errorf("the server counted %d (peak %v), the client %d", s.b.Iters, s.b.PeakMBps, cb.Iters)
		}
	})
}

// TestTimedLatency: a timed latency test reports the round trips of its
// sample window, the average latency (half a round trip for the
// ping-pongs) and the transactions per second.
func TestTimedLatency(t *testing.T) {
	for _, c := range []struct {
		test Test
		avg  float64 // microseconds: every packet takes delay
	}{
		{WriteLat, 5000}, // half of a 10 ms round trip
		{SendLat, 5000},
		{ReadLat, 10000}, // a READ is a round trip
	} {
		t.Run(string(c.test), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := timedParams(c.test)
				p.TxDepth, p.CQMod = 0, 0
				l := runLocal(t, p, mem.Faults{Delay: delay}).Lat
				if !l.Timed || l.Size != 64 {
					t.Fatalf("%+v", l)
				}
				// 1 s of 10 ms round trips; the window may cut one.
				if l.Iters < 99 || l.Iters > 101 {
					t.Errorf("%d round trips in the window, want 100", l.Iters)
				}
				if l.Avg < c.avg*0.98 || l.Avg > c.avg*1.02 || l.TPS != float64(l.Iters) {
					t.Errorf("average %v µs, %v per second; want %v µs, %d per second", l.Avg, l.TPS, c.avg, l.Iters)
				}
			})
		})
	}
}

// TestInfinite: --run_infinitely reports every -D until the caller's
// context ends, which ends the run without an error.
func TestInfinite(t *testing.T) {
	for _, tt := range []Test{WriteBW, SendBW} {
		t.Run(string(tt), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var reports []BWResult
				p := Params{Test: tt, Size: 64, Infinite: true, Duration: time.Second, TxDepth: 8, CQMod: 4, Timeout: 12}
				p.OnReport = func(r *Result) {
					reports = append(reports, *r.BW)
					if len(reports) == 2 {
						cancel()
					}
				}
				res, err := RunLocal(ctx, p, mem.Faults{Delay: delay})
				if err != nil || res != nil {
					t.Fatalf("%v %v", res, err)
				}
				if len(reports) != 2 {
					t.Fatalf("%d reports", len(reports))
				}
				for _, b := range reports {
					// A report comes with the first completion after the
					// period: at most a round trip late.
					if b.Elapsed < time.Second || b.Elapsed > time.Second+2*delay || b.Iters == 0 || b.PeakMBps != 0 || b.Size != 64 {
						t.Errorf("report %+v", b)
					}
				}
			})
		})
	}
}

// TestStalledInfiniteRunFails: an infinite run that stops making progress
// reports nothing done every period, as perftest's print thread does
// (where nothing completes, no completion would trigger a report), and
// then ends with ErrStalled, not quietly.
func TestStalledInfiniteRunFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var reports []BWResult
		p := Params{Test: WriteBW, Size: 64, Infinite: true, Duration: time.Second, GiveUp: 3500 * time.Millisecond, Timeout: 12}
		p.OnReport = func(r *Result) { reports = append(reports, *r.BW) }
		_, err := RunLocal(context.Background(), p, mem.Faults{Drop: 1})
		if !errors.Is(err, ErrStalled) {
			t.Fatalf("%v, want ErrStalled", err)
		}
		if len(reports) < 3 {
			t.Fatalf("%d reports before giving up after 3.5 periods, want 3: %+v", len(reports), reports)
		}
		for _, r := range reports {
			if r.Iters != 0 || r.AvgMBps != 0 || r.Elapsed < time.Second || r.Elapsed > 1100*time.Millisecond {
				t.Errorf("report %+v, want nothing done in a period of 1 s", r)
			}
		}
	})
}

// countOps returns a PacketTrace that counts the requests sent with opcode
// op: the distinct PSNs of the packets sent with it, so that a
// retransmission (a timer or a tail probe that fires on a loaded machine)
// is not counted twice.
func countOps(op bth.Opcode) (func(rnic.Direction, []byte), *atomic.Int64) {
	var n atomic.Int64
	var mu sync.Mutex
	seen := make(map[bth.PSN]bool)
	return func(dir rnic.Direction, pkt []byte) {
		var p wire.Packet
		if dir == rnic.Sent && wire.ParseIP(&p, pkt) == nil && p.BTH.Opcode() == op {
			mu.Lock()
			defer mu.Unlock()
			if psn := p.BTH.PSN(); !seen[psn] {
				seen[psn] = true
				n.Add(1)
			}
		}
	}, &n
}

// TestWarmUp: --perform_warm_up sends TxDepth more messages before the
// run, on WRITE, READ and atomic tests, and none on send_bw.
func TestWarmUp(t *testing.T) {
	for _, c := range []struct {
		test Test
		op   bth.Opcode
		warm int
	}{
		{WriteBW, bth.RCRDMAWriteOnly, 16},
		{ReadBW, bth.RCRDMAReadRequest, 16},
		{AtomicBW, bth.RCFetchAdd, 16},
		{SendBW, bth.RCSendOnly, 0},
	} {
		t.Run(string(c.test), func(t *testing.T) {
			for _, warm := range []bool{false, true} {
				trace, n := countOps(c.op)
				p := Params{Test: c.test, Iters: 100, TxDepth: 16, WarmUp: warm, packetTrace: trace}
				if c.test != AtomicBW {
					p.Size = 64
				}
				runLocal(t, p, mem.Faults{})
				want := int64(100)
				if warm {
					want += int64(c.warm)
				}
				if n.Load() != want {
					t.Errorf("warm-up %v: %d requests sent, want %d", warm, n.Load(), want)
				}
			}
		})
	}
}

// TestPostList: -l posts that many work requests per call, and the CQ
// moderation follows it.
func TestPostList(t *testing.T) {
	for _, tt := range []Test{WriteBW, SendBW, AtomicBW} {
		var calls, wrs atomic.Int64
		p := Params{Test: tt, Iters: 240, PostList: 8, Check: true}
		if tt != AtomicBW {
			p.Size = 100
		}
		p.onPost = func(n int) {
			calls.Add(1)
			wrs.Add(int64(n))
			if n != 8 {
				t.Errorf("%s: a post of %d", tt, n)
			}
		}
		r := runLocal(t, p, mem.Faults{})
		if calls.Load() != 30 || wrs.Load() != 240 || !r.Checked || r.BW.Iters != 240 {
			t.Errorf("%s: %d posts of %d requests; checked %v", tt, calls.Load(), wrs.Load(), r.Checked)
		}
	}
	p := Params{Test: WriteBW, PostList: 8}
	p.Defaults()
	if p.CQMod != 8 {
		t.Errorf("CQ moderation %d with -l 8, want 8", p.CQMod)
	}
}

// TestInline: messages that fit in -I go inline, and arrive as the same
// bytes; READs and atomics never do.
func TestInline(t *testing.T) {
	for _, tt := range []Test{WriteBW, SendBW, WriteLat, SendLat} {
		p := Params{Test: tt, Iters: 50, Size: 64, Inline: 64, Check: true}
		if r := runLocal(t, p, mem.Faults{}); !r.Checked {
			t.Errorf("%s: not checked", tt)
		}
	}
	for _, c := range []struct {
		test   Test
		size   int
		inline bool
	}{
		{WriteBW, 64, true}, {SendBW, 64, true}, {WriteBW, 65, false}, {ReadBW, 64, false}, {AtomicBW, 8, false},
	} {
		if got := sendsInline(&Params{Test: c.test, Inline: 64}, c.size); got != c.inline {
			t.Errorf("%s of %d bytes with -I 64: inline %v", c.test, c.size, got)
		}
	}
}

// TestTrafficClass: --tclass is the traffic class of every packet a side
// sends, its requests and its acknowledgements, made ECN-capable (ECT(0))
// as a RoCE NIC sends it, for DCQCN.
func TestTrafficClass(t *testing.T) {
	for _, tt := range []Test{WriteBW, ReadBW, SendLat} {
		var sent, wrong atomic.Int64
		p := Params{Test: tt, Iters: 50, Size: 64, TrafficClass: 0xb8}
		p.packetTrace = func(dir rnic.Direction, pkt []byte) {
			if dir != rnic.Sent {
				return
			}
			sent.Add(1)
			if wire.IPv4(pkt).TOS() != 0xb8|uint8(wire.ECT0) {
				wrong.Add(1)
			}
		}
		runLocal(t, p, mem.Faults{})
		if sent.Load() < 50 || wrong.Load() != 0 {
			t.Errorf("%s: %d of %d packets without traffic class 0xb8 and ECT(0)", tt, wrong.Load(), sent.Load())
		}
	}
}

// TestFlowLabel: --flow_label's labels go to the QPs in turn, and each
// QP's packets, requests and acknowledgements alike, leave from the UDP
// source port rxe and mlx5 derive from its label; without labels a
// connection's two directions share one port, from the QP numbers.
func TestFlowLabel(t *testing.T) {
	labels := []uint32{0x12345, 7}
	for _, c := range []struct {
		p      Params
		labels []uint32
	}{
		{Params{Test: WriteBW, NumQPs: 3}, labels},
		{Params{Test: SendBW, NumQPs: 3, Connection: qp.TypeUD}, labels},
		{Params{Test: ReadLat}, labels[1:]},
		{Params{Test: WriteBW, NumQPs: 2}, nil},
	} {
		var ports sourcePorts
		p := c.p
		p.Iters, p.Size, p.FlowLabels, p.packetTrace = 200, 64, c.labels, ports.trace
		runLocal(t, p, mem.Faults{})
		ports.check(t, &p)
	}
}

// TestRemoteFlowLabel: --flow_label over perftest's exchange, each side
// setting its own QPs' labels.
func TestRemoteFlowLabel(t *testing.T) {
	var ports sourcePorts
	cdev, sdev := memDevices(t, rnic.Config{PacketTrace: ports.trace})
	p := Params{Test: WriteBW, NumQPs: 3, Iters: 100, Size: 4096, FlowLabels: []uint32{5, 0xfffff}}
	runRemotePair(t, context.Background(), context.Background(), cdev, sdev, p, p, nil)
	ports.check(t, &p)
}

// sourcePorts collects the UDP source ports of the packets devices send,
// by sender and destination QP.
type sourcePorts struct {
	mu    sync.Mutex
	ports map[sourceFlow]map[uint16]bool
}

type sourceFlow struct {
	src string // the sender's IP address
	dst bth.QPN
}

// trace is a PacketTrace.
func (s *sourcePorts) trace(dir rnic.Direction, pkt []byte) {
	var w wire.Packet
	if dir != rnic.Sent || wire.ParseIP(&w, pkt) != nil {
		return
	}
	src := w.IP[8:24] // IPv6
	if len(w.IP) == wire.IPv4Len {
		src = w.IP[12:16]
	}
	f := sourceFlow{string(src), w.BTH.DestQP()}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ports == nil {
		s.ports = map[sourceFlow]map[uint16]bool{}
	}
	if s.ports[f] == nil {
		s.ports[f] = map[uint16]bool{}
	}
	s.ports[f][binary.BigEndian.Uint16(w.UDP)] = true
}

// check fails the test unless each sending QP of the run p sent from one
// port: with p.FlowLabels, QP i of each side from the port of label
// i mod len (0xc000 | the low 14 bits xor the high 6); without, one port
// for both directions of each connection.
func (s *sourcePorts) check(t *testing.T, p *Params) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	name := fmt.Sprintf("%s UD=%t -q %d labels %v", p.Test, p.datagram(), p.qps(), p.FlowLabels)
	senders := 2 * p.qps() // a UD server sends nothing
	if p.datagram() {
		senders = p.qps()
	}
	if len(s.ports) != senders {
		t.Fatalf("%s: packets to %d QPs, want %d", name, len(s.ports), senders)
	}
	got := map[uint16]int{} // source port -> QPs sent to from it
	for f, ps := range s.ports {
		if len(ps) != 1 {
			t.Errorf("%s: packets to QP %#x from %d source ports, want one", name, uint32(f.dst), len(ps))
		}
		for sp := range ps {
			got[sp]++
		}
	}
	if len(p.FlowLabels) == 0 {
		if len(got) != p.qps() {
			t.Errorf("%s: source ports %v, want one per connection", name, got)
		}
		for sp, n := range got {
			if n != 2 || sp < 0xc000 {
				t.Errorf("%s: source ports %v, want one per connection in 0xc000..0xffff", name, got)
			}
		}
		return
	}
	for i := range senders { // QP i of each side takes label i mod len
		fl := p.FlowLabels[i%p.qps()%len(p.FlowLabels)]
		got[uint16(0xc000|(fl&0x3fff^fl>>14))]--
	}
	for sp, n := range got {
		if n != 0 {
			t.Errorf("%s: %d QPs' packets too many from source port %#x (ports %v)", name, n, sp, s.ports)
		}
	}
}

// TestValidateOptions: what perftest refuses, gorxe refuses with a clear
// error.
func TestValidateOptions(t *testing.T) {
	for _, c := range []struct {
		p    Params
		want string
	}{
		{Params{Test: WriteBW, Duration: -time.Second}, "positive"},
		{Params{Test: WriteBW, Duration: 5 * time.Second, AllSize: true}, "all sizes"},
		{Params{Test: WriteLat, Duration: 5 * time.Second, Events: true}, "events"},
		{Params{Test: WriteBW, Infinite: true, Events: true}, "events"},
		{Params{Test: SendLat, Infinite: true}, "only in bandwidth"},
		{Params{Test: WriteBW, Duration: 4 * time.Second, Margin: 2 * time.Second}, "twice the margin"},
		{Params{Test: WriteBW, Margin: 3 * time.Second}, "twice the margin"}, // against -D's default 5 s
		{Params{Test: WriteBW, Duration: 5 * time.Second, Check: true}, "fixed number"},
		{Params{Test: WriteLat, NoPeak: true}, "-N"},
		{Params{Test: WriteBW, Histogram: true}, "latency tests"},
		{Params{Test: SendBW, Cycles: true}, "latency tests"},
		{Params{Test: ReadBW, Inline: 32}, "READ and atomic"},
		{Params{Test: AtomicBW, Inline: 32}, "READ and atomic"},
		{Params{Test: WriteBW, Inline: 2000}, "outside"},
		{Params{Test: WriteLat, PostList: 4}, "bandwidth tests only"},
		{Params{Test: WriteBW, PostList: 4, Iters: 10}, "multiple of the post list"},
		{Params{Test: WriteBW, PostList: 4, CQMod: 3}, "multiple of the CQ moderation"},
		{Params{Test: WriteBW, PostList: 256, Iters: 256}, "does not fit"},
		{Params{Test: AtomicBW, WarmUp: true, Check: true}, "warm_up"},
		{Params{Test: WriteBW, FlowLabels: []uint32{1, 1 << 20}}, "20 bits"},
	} {
		p := c.p
		p.Defaults()
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error about %q", c.p, err, c.want)
		}
	}
	for _, p := range []Params{
		{Test: WriteBW, Duration: 2 * time.Second}, // margin 0: 2/4 in whole seconds
		{Test: WriteBW, Duration: 5 * time.Second, Margin: NoMargin},
		{Test: SendBW, Infinite: true},
		{Test: WriteBW, PostList: 4, Iters: 100, Inline: 220, NoPeak: true, ReportGbits: true, WarmUp: true, TrafficClass: 0xff},
		{Test: WriteLat, Cycles: true, Histogram: true, Unsorted: true, Inline: 220},
	} {
		p.Defaults()
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
}

// TestMargin: -f's default is a quarter of -D in whole seconds.
func TestMargin(t *testing.T) {
	for _, c := range []struct{ d, f, want time.Duration }{
		{2 * time.Second, 0, 0},
		{5 * time.Second, 0, time.Second},
		{10 * time.Second, 0, 2 * time.Second},
		{10 * time.Second, 3 * time.Second, 3 * time.Second},
		{10 * time.Second, NoMargin, 0},
	} {
		p := Params{Duration: c.d, Margin: c.f}
		if got := p.margin(); got != c.want {
			t.Errorf("-D %v -f %v: margin %v, want %v", c.d, c.f, got, c.want)
		}
	}
}

// TestNoPeak: no peak is reported where perftest measures none.
func TestNoPeak(t *testing.T) {
	for _, c := range []struct {
		p      Params
		server bool
		want   bool
	}{
		{Params{Test: WriteBW, Iters: 5000}, false, false},
		{Params{Test: WriteBW, Iters: 5000, NoPeak: true}, false, true},
		{Params{Test: WriteBW, Iters: 20001}, false, true},
		{Params{Test: WriteBW, Duration: time.Second}, false, true},
		{Params{Test: SendBW, Iters: 5000}, true, true},
		{Params{Test: SendBW, Iters: 5000}, false, false},
	} {
		if got := c.p.noPeakFor(c.server); got != c.want {
			t.Errorf("%+v server %v: no peak %v", c.p, c.server, got)
		}
	}
	r := runLocal(t, Params{Test: WriteBW, Iters: 200, Size: 64, NoPeak: true}, mem.Faults{})
	if r.BW.PeakMBps != 0 || r.BW.AvgMBps <= 0 {
		t.Fatalf("-N: %+v", r.BW)
	}
}

// TestHistogramSamples: -H and -U keep the samples for the report.
func TestHistogramSamples(t *testing.T) {
	// The ping-pongs time from one post to the next on both sides, as
	// perftest's tposted: one round trip fewer than the messages.
	for _, p := range []Params{{Test: WriteLat}, {Test: SendLat}, {Test: WriteLat, WithImm: true}} {
		p.Iters, p.Histogram = 50, true
		if r := runLocal(t, p, mem.Faults{}); len(r.Lat.Samples) != 49 {
			t.Fatalf("%s (imm %t): %d samples, want 49", p.Test, p.WithImm, len(r.Lat.Samples))
		}
	}
	if r := runLocal(t, Params{Test: ReadLat, Iters: 50}, mem.Faults{}); r.Lat.Samples != nil {
		t.Fatal("samples kept without -H or -U")
	}
}

// TestExchangeContextDeadline: a step that its context's deadline cuts
// short fails with context.DeadlineExceeded, also when the connection's
// own deadline, set to the same instant, fires first.
func TestExchangeContextDeadline(t *testing.T) {
	for range 20 {
		a, b := net.Pipe()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		c := NewConn(ctx, a, true)
		_, err := c.ExchangeVersions("6.06") // the server reads first; b never writes
		cancel()
		a.Close()
		b.Close()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v, want context.DeadlineExceeded", err)
		}
	}
}

// TestTimedRunInterrupted: a timed run whose caller's context ends stops
// then, with the context's error, not at the end of its -D, also while
// its waits find what they wait for at once and never sleep (no delay on
// the fabric, so real time).
func TestTimedRunInterrupted(t *testing.T) {
	for _, tt := range []Test{WriteBW, SendBW, WriteLat, SendLat, ReadLat} {
		t.Run(string(tt), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			time.AfterFunc(200*time.Millisecond, cancel)
			p := Params{Test: tt, Size: 64, Duration: time.Minute}
			start := time.Now()
			_, err := RunLocal(ctx, p, mem.Faults{})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%v, want context.Canceled", err)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("the run took %v after its context ended at 0.2 s", d)
			}
		})
	}
}

// TestTimedWithQPsAndDuplex: -D with -q counts the messages of every QP
// in the window (perftest's one global iters); with -b each side counts
// what it sent and, for SEND, what it received, as run_iter_bi does, and
// the sides' windows are as long as one side's.
func TestTimedWithQPsAndDuplex(t *testing.T) {
	for _, c := range []struct {
		name  string
		p     Params
		share float64 // of every message posted by either side, what one side counts
	}{
		{"write_bw -q 3", Params{Test: WriteBW, NumQPs: 3}, 0.5},
		{"write_bw -b", Params{Test: WriteBW, Duplex: true}, 0.25},
		{"send_bw -b", Params{Test: SendBW, Duplex: true}, 0.5},
		{"send_bw -q 2 -b", Params{Test: SendBW, Duplex: true, NumQPs: 2}, 0.5},
		{"write_bw --write_with_imm", Params{Test: WriteBW, WithImm: true}, 0.5},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := timedParams(c.p.Test)
				p.NumQPs, p.Duplex, p.WithImm = c.p.NumQPs, c.p.Duplex, c.p.WithImm
				var posted atomic.Int64
				p.onPost = func(n int) { posted.Add(int64(n)) }
				r := runLocal(t, p, mem.Faults{Delay: delay})
				own := r.BW
				if p.Duplex {
					own = r.OwnBW
					if r.PeerBW.Elapsed != time.Second || r.BW.Iters != own.Iters || r.BW.AvgMBps != own.AvgMBps+r.PeerBW.AvgMBps {
						t.Errorf("sum %+v of own %+v and peer %+v", r.BW, own, r.PeerBW)
					}
				}
				if own.Elapsed != time.Second || own.PeakMBps != 0 {
					t.Errorf("window %v, peak %v", own.Elapsed, own.PeakMBps)
				}
				if share := float64(own.Iters) / float64(posted.Load()); share < c.share*0.9 || share > c.share*1.1 {
					t.Errorf("%d of %d messages counted: %.3f of them, want %.2f", own.Iters, posted.Load(), share, c.share)
				}
			})
		})
	}
}

// TestTimedWriteImmLatency: write_lat --write_with_imm -D counts the
// round trips of its window as run_iter_lat_write_imm does.
func TestTimedWriteImmLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := timedParams(WriteLat)
		p.TxDepth, p.CQMod, p.WithImm = 0, 0, true
		l := runLocal(t, p, mem.Faults{Delay: delay}).Lat
		if !l.Timed || l.Iters < 99 || l.Iters > 101 || l.Avg < 4900 || l.Avg > 5100 {
			t.Fatalf("%+v, want about 100 round trips of 10 ms", l)
		}
	})
}

// TestInfiniteClientFinishes: a stopped --run_infinitely client of
// write_bw finishes as perftest's does from 6.24 (f51c4f0): the
// handshake after the run, the report, the close, as after any run; the
// passive server takes it and ends without an error or a result.
func TestInfiniteClientFinishes(t *testing.T) {
	cdev, sdev := memDevices(t, rnic.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := Params{Test: WriteBW, Infinite: true, Duration: 100 * time.Millisecond, Size: 64}
	type res struct {
		r   []Result
		err error
	}
	srv := make(chan res, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			srv <- res{nil, err}
			return
		}
		conn := NewConn(ctx, nc, true)
		defer conn.Close()
		r, err := RunRemote(ctx, p, RemoteOptions{Dev: sdev, Conn: conn})
		srv <- res{r, err}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{Conn: nc}
	cctx, stop := context.WithCancel(ctx)
	var last BWResult
	pc := p
	pc.OnReport = func(r *Result) {
		if last = *r.BW; r.BW.Iters > 0 {
			stop()
		}
	}
	conn := NewConn(cctx, rec, false)
	out, err := RunRemote(cctx, pc, RemoteOptions{Dev: cdev, Conn: conn})
	conn.Close()
	if err != nil || len(out) != 0 {
		t.Fatalf("client: %v %v", out, err)
	}
	s := <-srv
	if s.err != nil || len(s.r) != 0 {
		t.Fatalf("server: %v %v", s.r, s.err)
	}
	// Both sides advertise 6.06, so both write "done".
	want := "ver sys sys mtu k0 k0 k0 k0 rep k0 done"
	rec.mu.Lock()
	qpn := uint32(0)
	if d, err := ParseKey(rec.writes[4]); err == nil {
		qpn = d.QPN
	}
	rec.mu.Unlock()
	if got := rec.steps(t, qpn); got != want {
		t.Fatalf("the client wrote\n %s\nwant\n %s", got, want)
	}
	// Its report is its last: the second of the report's writes (after
	// the four prefix writes, four key messages and the size) is iters.
	rec.mu.Lock()
	iters := binary.BigEndian.Uint64(rec.writes[9])
	rec.mu.Unlock()
	if iters != uint64(last.Iters) {
		t.Fatalf("the client reported %d iterations at the end, its last report %d", iters, last.Iters)
	}
}

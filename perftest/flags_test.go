package perftest

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/link/udp"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// -q, -b, -o, --write_with_imm/--send_with_imm and --mr_per_qp, end to
// end: both sides in one process (RunLocal), and a client and a server
// speaking the exchange over TCP (RunRemote) on the mem link and on
// kernel UDP sockets on the loopback.

// flagCases are the runs every transport does. Iterations are per QP.
var flagCases = []struct {
	name string
	p    Params
}{
	{"write_bw -q 4", Params{Test: WriteBW, NumQPs: 4, Size: 5000}},
	{"read_bw -q 4", Params{Test: ReadBW, NumQPs: 4, Size: 5000}},
	{"send_bw -q 4", Params{Test: SendBW, NumQPs: 4, Size: 5000}},
	{"atomic_bw -q 4", Params{Test: AtomicBW, NumQPs: 4}},
	{"atomic_bw -q 2 CMP_AND_SWAP", Params{Test: AtomicBW, NumQPs: 2, Atomic: CmpAndSwap}},
	{"write_bw -b", Params{Test: WriteBW, Duplex: true, Size: 3000}},
	{"read_bw -b", Params{Test: ReadBW, Duplex: true, Size: 3000}},
	{"send_bw -b", Params{Test: SendBW, Duplex: true, Size: 3000}},
	{"atomic_bw -b", Params{Test: AtomicBW, Duplex: true}},
	{"write_bw -q 3 -b --mr_per_qp", Params{Test: WriteBW, NumQPs: 3, Duplex: true, MRPerQP: true, Size: 100}},
	{"send_bw -q 2 -b", Params{Test: SendBW, NumQPs: 2, Duplex: true, Size: 100}},
	{"read_bw -o 4", Params{Test: ReadBW, OutReads: 4, Size: 5000}},
	{"write_bw --write_with_imm", Params{Test: WriteBW, WithImm: true, Size: 5000}},
	{"write_bw -q 2 -b --write_with_imm", Params{Test: WriteBW, NumQPs: 2, Duplex: true, WithImm: true, Size: 700}},
	{"send_bw --send_with_imm", Params{Test: SendBW, WithImm: true, Size: 700}},
	{"write_lat --write_with_imm", Params{Test: WriteLat, WithImm: true, Size: 100}},
	{"send_lat --send_with_imm", Params{Test: SendLat, WithImm: true, Size: 100}},
}

const flagIters = 150

// checkBWResult checks a bandwidth result of p: its size, its
// iterations (perftest's: per QP times the QPs), its rates.
func checkBWResult(t *testing.T, who string, p Params, b *BWResult) {
	t.Helper()
	size := p.Size
	if size == 0 {
		size = 8
	}
	if b == nil {
		t.Fatalf("%s: no bandwidth result", who)
	}
	// A receiving server without -b reports no peak (0), as perftest's.
	noPeak := who == "server" && p.noPeakFor(true)
	if b.Size != size || b.Iters != flagIters*max(p.NumQPs, 1) || !(b.AvgMBps > 0) || !(b.MsgRate > 0) ||
		noPeak && b.PeakMBps != 0 || !noPeak && b.PeakMBps < b.AvgMBps {
		t.Fatalf("%s: %+v; want %d bytes, %d iterations", who, *b, size, flagIters*max(p.NumQPs, 1))
	}
}

// checkDuplex checks that a duplex result is the sum of its two sides.
func checkDuplex(t *testing.T, who string, p Params, r Result) {
	t.Helper()
	if r.OwnBW == nil || r.PeerBW == nil {
		t.Fatalf("%s: duplex without both sides' results: %+v", who, r)
	}
	checkBWResult(t, who+" (own)", p, r.OwnBW)
	checkBWResult(t, who+" (peer)", p, r.PeerBW)
	if r.BW.AvgMBps != r.OwnBW.AvgMBps+r.PeerBW.AvgMBps || r.BW.PeakMBps != r.OwnBW.PeakMBps+r.PeerBW.PeakMBps ||
		r.BW.MsgRate != r.OwnBW.MsgRate+r.PeerBW.MsgRate || r.BW.Iters != r.OwnBW.Iters {
		t.Fatalf("%s: printed %+v is not own %+v + peer %+v", who, *r.BW, *r.OwnBW, *r.PeerBW)
	}
}

func TestFlagsLocal(t *testing.T) {
	for _, tc := range flagCases {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			p.Iters, p.Check, p.Timeout = flagIters, true, 12
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := RunLocal(ctx, p, mem.Faults{Drop: 0.01, Seed: 11})
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != 1 || !res[0].Checked {
				t.Fatalf("results %+v", res)
			}
			r := res[0]
			if p.Test.IsLatency() {
				if r.Lat == nil || r.Lat.Iters != flagIters || !(r.Lat.Min > 0 && r.Lat.Min <= r.Lat.Max) {
					t.Fatalf("latency %+v", r.Lat)
				}
				return
			}
			if p.Duplex {
				checkDuplex(t, "local", p, r)
			} else {
				checkBWResult(t, "local", p, r.BW)
			}
		})
	}
}

// runPairOn runs p as a client on links[0] and a server on links[1],
// talking perftest's exchange over TCP on the loopback.
func runPairOn(t *testing.T, p Params, links [2]link.Link) (client, server []Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var devs [2]*rnic.Device
	for i, l := range links {
		cfg := rnic.Config{Link: l}
		if sp, ok := l.(link.SourcePorter); ok {
			cfg.Port = sp.SourcePort() // a UDP link's port is the RoCE port too
		}
		var err error
		if devs[i], err = rnic.Open(cfg); err != nil {
			t.Fatal(err)
		}
		defer devs[i].Close()
	}
	return runRemotePair(t, ctx, ctx, devs[0], devs[1], p, p, nil)
}

func memLinks(t *testing.T, faults mem.Faults) [2]link.Link {
	fab := mem.NewFabric()
	var links [2]link.Link
	for i, a := range []string{"10.0.0.1", "10.0.0.2"} {
		l, err := fab.NewLink(netip.MustParseAddr(a))
		if err != nil {
			t.Fatal(err)
		}
		f := faults
		f.Seed += uint64(i)
		l.SetFaults(f)
		links[i] = l
	}
	return links
}

// udpLinks opens kernel UDP links on 127.0.0.1 and 127.0.0.2, on one
// port both addresses have free, as RoCE v2 peers share theirs.
func udpLinks(t testing.TB) [2]link.Link {
	t.Helper()
	ls, err := udp.LoopbackPair(udp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return [2]link.Link{ls[0], ls[1]}
}

func TestFlagsRemote(t *testing.T) {
	for _, kind := range []string{"mem", "udp"} {
		for _, tc := range flagCases {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				p := tc.p
				p.Iters, p.Check, p.Timeout = flagIters, true, 12
				links := memLinks(t, mem.Faults{Drop: 0.005, Seed: 5})
				if kind == "udp" {
					links = udpLinks(t)
				}
				c, s := runPairOn(t, p, links)
				if len(c) != 1 || len(s) != 1 || !c[0].Checked || !s[0].Checked {
					t.Fatalf("client %+v\nserver %+v", c, s)
				}
				if p.Test.IsLatency() {
					if l := c[0].Lat; l == nil || l.Iters != flagIters || !(l.Min > 0 && l.Min <= l.Max) {
						t.Fatalf("client latency %+v", l)
					}
					return
				}
				switch {
				case p.Duplex:
					checkDuplex(t, "client", p, c[0])
					checkDuplex(t, "server", p, s[0])
					// Each side's report reached the other whole.
					if *c[0].OwnBW != withElapsed(*s[0].PeerBW, c[0].OwnBW.Elapsed) ||
						*s[0].OwnBW != withElapsed(*c[0].PeerBW, s[0].OwnBW.Elapsed) {
						t.Fatalf("client own %+v peer %+v\nserver own %+v peer %+v", *c[0].OwnBW, *c[0].PeerBW, *s[0].OwnBW, *s[0].PeerBW)
					}
				case ExchangesBWReport(p.Test) && !p.WithImm:
					checkBWResult(t, "client", p, c[0].BW)
					// The passive server prints the client's report.
					if *s[0].BW != withElapsed(*c[0].BW, 0) {
						t.Fatalf("server %+v, client %+v", *s[0].BW, *c[0].BW)
					}
				default:
					// send_bw and write_bw with immediate: the server
					// reports what it received.
					checkBWResult(t, "client", p, c[0].BW)
					checkBWResult(t, "server", p, s[0].BW)
				}
				if n := len(c[0].Local.GID.String()); n == 0 || c[0].Remote.QPN != s[0].Local.QPN || s[0].Remote.QPN != c[0].Local.QPN {
					t.Fatalf("QP 0: client %+v/%+v, server %+v/%+v", c[0].Local, c[0].Remote, s[0].Local, s[0].Remote)
				}
			})
		}
	}
}

// withElapsed returns b with Elapsed, which the reports do not carry,
// replaced.
func withElapsed(b BWResult, el time.Duration) BWResult {
	b.Elapsed = el
	return b
}

// TestFlagsRefused checks that what perftest's parser refuses is refused,
// in its words, before anything runs.
func TestFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		p    Params
		want string
	}{
		{Params{Test: WriteLat, NumQPs: 2}, "Multiple QPs only available on bw tests"},
		{Params{Test: ReadLat, NumQPs: 3}, "Multiple QPs only available on bw tests"},
		{Params{Test: SendLat, Duplex: true}, "Bidirectional is only available in BW test"},
		{Params{Test: WriteLat, Duplex: true}, "Bidirectional is only available in BW test"},
		{Params{Test: WriteBW, OutReads: 4}, "Setting Outstanding reads only available on READ verb"},
		{Params{Test: SendBW, OutReads: 4}, "Setting Outstanding reads only available on READ verb"},
		{Params{Test: WriteLat, OutReads: 4}, "Setting Outstanding reads only available on READ verb"},
		{Params{Test: ReadBW, OutReads: -1}, "must not be negative"},
		{Params{Test: ReadBW, WithImm: true}, "Write_with_imm can only be used with write_lat and write_bw"},
		{Params{Test: AtomicBW, WithImm: true}, "Write_with_imm can only be used with write_lat and write_bw"},
		{Params{Test: WriteBW, NumQPs: MaxQPs + 1}, "num of Qps should be between 1 and 16384"},
		{Params{Test: WriteBW, NumQPs: -2}, "num of Qps should be between 1 and 16384"},
		{Params{Test: WriteBW, NumQPs: 1024, Size: 1 << 20}, "MiB of buffers"},
		{Params{Test: SendBW, NumQPs: 4096, RxDepth: 8192}, "needs CQs of"},
	} {
		p := tc.p
		if _, err := RunLocal(context.Background(), p, mem.Faults{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v\nwant an error containing %q", tc.p, err, tc.want)
		}
		p.Defaults()
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate %+v: %v", tc.p, err)
		}
	}
	for _, p := range []Params{
		{Test: ReadLat, OutReads: 4},
		{Test: AtomicBW, OutReads: 500},
		{Test: WriteBW, NumQPs: 16, Duplex: true, WithImm: true, MRPerQP: true},
		{Test: SendLat, WithImm: true, MRPerQP: true},
		{Test: SendBW, NumQPs: 1},
	} {
		p.Defaults()
		if err := p.Validate(); err != nil {
			t.Errorf("%+v refused: %v", p, err)
		}
	}
}

// TestOutReads checks the out_reads a side offers (-o) and what its QPs
// are given: the responder takes its own offer (max_dest_rd_atomic), the
// requester keeps the peer's outstanding (max_rd_atomic), cut to what the
// device takes.
func TestOutReads(t *testing.T) {
	for _, tc := range []struct {
		p    Params
		want uint16
	}{
		{Params{Test: ReadBW}, 128}, // rxe's max_qp_rd_atom, as perftest offers it
		{Params{Test: ReadBW, OutReads: 4}, 4},
		{Params{Test: AtomicBW, OutReads: 1}, 1},
		{Params{Test: ReadLat, OutReads: 500}, qp.MaxRdAtomic},
		{Params{Test: WriteBW}, 1},
		{Params{Test: SendLat}, 1},
	} {
		if got := tc.p.outReads(); got != tc.want {
			t.Errorf("%+v: out_reads %d, want %d", tc.p, got, tc.want)
		}
	}
	links := memLinks(t, mem.Faults{})
	dev, err := rnic.Open(rnic.Config{Link: links[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, tc := range []struct {
		own, peer     uint16
		wantRd, wantD uint8
	}{
		{4, 16, 16, 4},
		{16, 4, 4, 16},
		{128, 200, 128, 128}, // a peer offering more than the device takes
		{1, 0, 1, 1},         // a peer offering nothing
	} {
		p := Params{Test: ReadBW, NumQPs: 2}
		p.Defaults()
		s, err := NewSide(dev, &p, 4096, false)
		if err != nil {
			t.Fatal(err)
		}
		gid := dev.GIDs()[0]
		local := s.dests(&p, gid)
		remote := seqDests(0x40, 2, "::ffff:10.0.0.2")
		for i := range local {
			local[i].OutReads, remote[i].OutReads = tc.own, tc.peer
		}
		if err := s.connect(&p, local, remote, 0); err != nil {
			t.Fatal(err)
		}
		for i, l := range s.qps {
			a := l.qp.Query()
			if a.MaxRdAtomic != tc.wantRd || a.MaxDestRdAtomic != tc.wantD {
				t.Errorf("own %d peer %d: QP %d has max_rd_atomic %d, max_dest_rd_atomic %d; want %d, %d",
					tc.own, tc.peer, i, a.MaxRdAtomic, a.MaxDestRdAtomic, tc.wantRd, tc.wantD)
			}
			if uint64(a.DestQPNum) != uint64(remote[i].QPN) {
				t.Errorf("QP %d connected to %#x, want %#x", i, a.DestQPNum, remote[i].QPN)
			}
		}
		s.Close()
	}
}

// TestDests checks the key messages of -q 3, with and without
// --mr_per_qp, against perftest's layout (set_up_connection): one rkey,
// vaddr = buf + (N+i)·region; or each QP's own rkey, vaddr = buf[i] +
// region.
func TestDests(t *testing.T) {
	links := memLinks(t, mem.Faults{})
	dev, err := rnic.Open(rnic.Config{Link: links[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, perQP := range []bool{false, true} {
		p := Params{Test: WriteBW, NumQPs: 3, MRPerQP: perQP, Size: 100}
		p.Defaults()
		s, err := NewSide(dev, &p, p.Size, false)
		if err != nil {
			t.Fatal(err)
		}
		d := s.dests(&p, dev.GIDs()[0])
		region := uint64(regionSize(&p, p.Size))
		seen := map[uint32]bool{}
		for i, k := range d {
			l := s.qps[i]
			if k.QPN != uint32(l.qp.Num()) || k.OutReads != 1 || k.RKey != uint32(l.mr.RKey()) || k.PSN > 0xffffff {
				t.Errorf("mr_per_qp %v: QP %d: %+v", perQP, i, k)
			}
			want := s.qps[0].mr.IOVA() + uint64(3+i)*region
			if perQP {
				want = l.mr.IOVA() + region
			}
			if k.VAddr != want {
				t.Errorf("mr_per_qp %v: QP %d: vaddr %#x, want %#x", perQP, i, k.VAddr, want)
			}
			seen[k.RKey] = true
		}
		if wantKeys := map[bool]int{false: 1, true: 3}[perQP]; len(seen) != wantKeys {
			t.Errorf("mr_per_qp %v: %d distinct rkeys, want %d", perQP, len(seen), wantKeys)
		}
		s.Close()
	}
}

// TestReceivesBeyondSlots checks that a receiving side posts rx_depth
// receives on each QP, as perftest does, even when its target region has
// fewer slots; only --check of SENDs, which needs a slot per message in
// flight, holds it to its slots.
func TestReceivesBeyondSlots(t *testing.T) {
	links := memLinks(t, mem.Faults{})
	dev, err := rnic.Open(rnic.Config{Link: links[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, tc := range []struct {
		p    Params
		want int
	}{
		{Params{Test: SendBW}, 100},
		{Params{Test: SendBW, Check: true}, -1}, // the slots
		{Params{Test: WriteBW, WithImm: true, Check: true}, 100},
	} {
		p := tc.p
		p.NumQPs, p.Size, p.Iters, p.RxDepth = 4, 65536, 300, 100
		p.Defaults()
		s, err := NewSide(dev, &p, p.Size, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.connect(&p, s.dests(&p, dev.GIDs()[0]), seqDests(0x40, 4, "::ffff:10.0.0.2"), 0); err != nil {
			t.Fatal(err)
		}
		want := tc.want
		if want < 0 {
			want = s.Slots
		}
		if s.Slots >= p.RxDepth {
			t.Fatalf("%d slots: the test needs fewer than the receives", s.Slots)
		}
		if n, err := postReceives(s, &p); err != nil || n != want {
			t.Errorf("%s check %v: %d receives per QP, %v; want %d", p.Test, p.Check, n, err, want)
		}
		s.Close()
	}
}

// TestAtomicAllSizes: -a leaves the atomic tests at their one size, 8
// bytes, as perftest's atomic_bw (RUN_ALL run as RUN_REGULAR) and
// atomic_lat (no RUN_ALL at all) do, and so does their exchange; the
// others run every size.
func TestAtomicAllSizes(t *testing.T) {
	for _, tt := range Tests {
		p := Params{Test: tt, AllSize: true}
		p.Defaults()
		if err := p.Validate(); err != nil {
			t.Fatalf("%s -a: %v", tt, err)
		}
		sizes, flow := p.Sizes(), p.flow()
		if tt.IsAtomic() {
			if len(sizes) != 1 || sizes[0] != 8 || flow.AllSizes {
				t.Errorf("%s -a: sizes %v, AllSizes %v: want 8 bytes once", tt, sizes, flow.AllSizes)
			}
			continue
		}
		if len(sizes) != 23 || !flow.AllSizes {
			t.Errorf("%s -a: sizes %v, AllSizes %v", tt, sizes, flow.AllSizes)
		}
	}
	res, err := RunLocal(context.Background(), Params{Test: AtomicLat, AllSize: true, Iters: 20}, mem.Faults{})
	if err != nil || len(res) != 1 || res[0].Lat == nil || res[0].Lat.Size != 8 {
		t.Fatalf("atomic_lat -a: %v, %+v", err, res)
	}
}

// TestDefaultDepths: Defaults settles the depths and the CQ moderation as
// perftest's force_dependencies does: a counted run's tx depth (and, for
// SEND and WRITE with immediate, rx depth) at most its messages; no CQ
// moderation for messages over 8 KiB unless -Q, UD, -a or -e; moderation
// at most the tx depth; a post list's size as moderation.
func TestDefaultDepths(t *testing.T) {
	for _, c := range []struct {
		p             Params
		tx, rx, cqMod int
	}{
		{Params{Test: WriteBW, Iters: 50}, 50, 512, 1},
		{Params{Test: WriteBW, Size: 4096, Iters: 1000}, 128, 512, 100},
		{Params{Test: WriteBW, Size: 4096, Iters: 50}, 50, 512, 50},
		{Params{Test: SendBW, Iters: 50}, 50, 50, 1},
		{Params{Test: WriteBW, Iters: 50, WithImm: true}, 50, 50, 1},
		{Params{Test: WriteBW, Iters: 50, Events: true}, 50, 512, 50},
		{Params{Test: WriteBW, Iters: 5, AllSize: true}, 5, 512, 5},
		{Params{Test: WriteBW, Iters: 50, CQMod: 10}, 50, 512, 10},
		{Params{Test: WriteBW, Iters: 48, PostList: 4}, 48, 512, 4},
		{Params{Test: SendBW, Size: 1024, Iters: 50, Connection: qp.TypeUD}, 50, 50, 50},
		{Params{Test: WriteBW, Duration: 2 * time.Second}, 128, 512, 1},
		{Params{Test: WriteLat, Iters: 50}, 1, 512, 1},
	} {
		p := c.p
		p.Defaults()
		if p.TxDepth != c.tx || p.RxDepth != c.rx || p.CQMod != c.cqMod {
			t.Errorf("%+v: tx %d rx %d cq_mod %d, want %d %d %d", c.p, p.TxDepth, p.RxDepth, p.CQMod, c.tx, c.rx, c.cqMod)
		}
	}
}

// TestCQModWarning: -Q above 1 on messages above 8 KiB, where perftest
// would have signaled every message, gets perftest's warning; a -Q 1, a
// default -Q, small messages, UD, -a and -e do not.
func TestCQModWarning(t *testing.T) {
	for _, c := range []struct {
		p    Params
		warn bool
	}{
		{Params{Test: WriteBW, CQMod: 10}, true},
		{Params{Test: SendBW, Size: 8193, CQMod: 2}, true},
		{Params{Test: WriteBW, CQMod: 1}, false},
		{Params{Test: WriteBW}, false},
		{Params{Test: WriteBW, Size: 8192, CQMod: 10}, false},
		{Params{Test: SendBW, Size: 65536, Connection: qp.TypeUD, CQMod: 10}, false},
		{Params{Test: WriteBW, AllSize: true, CQMod: 10}, false},
		{Params{Test: WriteBW, Events: true, CQMod: 10}, false},
	} {
		p := c.p
		p.Defaults()
		if got := p.Notes() != ""; got != c.warn {
			t.Errorf("%+v: notes %q, want a warning %v", c.p, p.Notes(), c.warn)
		}
	}
}

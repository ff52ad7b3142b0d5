package perftest

import (
	"cmp"
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
)

// TestUD runs send_bw (one QP and three) and send_lat on UD QPs (-c UD)
// with --check: every byte arrives behind its GRH room, the send_bw
// receiver sends nothing, and each message is one packet.
func TestUD(t *testing.T) {
	for _, tc := range []struct {
		name    string
		test    Test
		qps     int
		withImm bool
	}{{"send_bw", SendBW, 1, false}, {"send_bw/q3", SendBW, 3, false}, {"send_bw/imm", SendBW, 1, true}, {"send_lat", SendLat, 1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			p := Params{Test: tc.test, Connection: qp.TypeUD, Iters: 300, Check: true, NumQPs: tc.qps, WithImm: tc.withImm, Size: 1000}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := RunLocal(ctx, p, mem.Faults{})
			if err != nil {
				t.Fatal(err)
			}
			r := res[0]
			if !r.Checked {
				t.Fatal("check did not run")
			}
			if tc.test.IsLatency() {
				if r.Lat == nil || r.Lat.Iters != 300 || r.Client.SentPkts != 300 || r.Server.SentPkts != 300 {
					t.Fatalf("latency result %+v, client sent %d, server %d packets", r.Lat, r.Client.SentPkts, r.Server.SentPkts)
				}
				return
			}
			n := uint64(300 * tc.qps)
			if r.BW == nil || r.BW.Iters != int(n) || r.Client.SentPkts != n || r.Server.SentPkts != 0 {
				t.Fatalf("bandwidth result %+v, client sent %d packets (want %d), server %d (want 0)", r.BW, r.Client.SentPkts, n, r.Server.SentPkts)
			}
		})
	}
}

// TestUDSizes: perftest's check_mtu for UD. A size of perftest's own
// choosing larger than the MTU is cut to it, with its note; -a runs the
// powers of two up to the MTU; a size given with -s larger than the MTU
// is refused with perftest's words.
func TestUDSizes(t *testing.T) {
	p := Params{Test: SendBW, Connection: qp.TypeUD}
	p.Defaults()
	note, err := p.FitUD()
	if err != nil || p.Size != 1024 || note != " Max msg size in UD is MTU 1024\n Changing to this MTU\n" {
		t.Errorf("default size: %d, note %q, %v; want 1024 and perftest's note", p.Size, note, err)
	}
	p = Params{Test: SendLat, Connection: qp.TypeUD}
	p.Defaults()
	if note, err := p.FitUD(); err != nil || p.Size != 2 || note != "" {
		t.Errorf("send_lat's default: %d, note %q, %v", p.Size, note, err)
	}
	p = Params{Test: SendBW, Connection: qp.TypeUD, AllSize: true, MTU: qp.MTU2048}
	p.Defaults()
	if _, err := p.FitUD(); err != nil {
		t.Fatal(err)
	}
	if s := p.Sizes(); len(s) != 11 || s[0] != 2 || s[10] != 2048 {
		t.Errorf("-a on UD at MTU 2048: sizes %v, want 2 ... 2048", s)
	}
	p = Params{Test: SendBW, Connection: qp.TypeUD, Size: 1025}
	p.Defaults()
	if _, err := p.FitUD(); !errors.Is(err, ErrUDSize) || !strings.Contains(err.Error(), "Max message size in UD cannot be greater than MTU") {
		t.Errorf("-s 1025 at MTU 1024: %v", err)
	}
	if _, err := RunLocal(context.Background(), Params{Test: SendLat, Connection: qp.TypeUD, Size: 4096}, mem.Faults{}); !errors.Is(err, ErrUDSize) {
		t.Errorf("RunLocal with -s 4096: %v", err)
	}
}

// TestUDRefused: perftest runs UD for SEND only, and says so.
func TestUDRefused(t *testing.T) {
	for _, tt := range []Test{WriteBW, ReadBW, AtomicBW, WriteLat, ReadLat, AtomicLat} {
		p := Params{Test: tt, Connection: qp.TypeUD}
		p.Defaults()
		if err := p.Validate(); err == nil || err.Error() != "UD connection only possible in SEND verb" {
			t.Errorf("%s -c UD: %v", tt, err)
		}
	}
	p := Params{Test: SendBW, Connection: qp.TypeUD}
	if p.ConnectionName() != "UD" {
		t.Errorf("connection name %q", p.ConnectionName())
	}
}

// TestUDLossEnds: on a lossy fabric the UD send_bw client completes every
// message, sent once each, and the server ends with what came once the
// client is done, in process and across perftest's exchange.
func TestUDLossEnds(t *testing.T) {
	p := Params{Test: SendBW, Connection: qp.TypeUD, Iters: 2000, Size: 1024, GiveUp: 20 * time.Second}
	start := time.Now()
	res, err := RunLocal(context.Background(), p, mem.Faults{Drop: 0.01, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("the run took %v: the server waited for lost messages", el)
	}
	r := res[0]
	if r.BW == nil || r.BW.Iters != 2000 || r.Client.SentPkts != 2000 || r.Server.RcvdPkts >= 2000 {
		t.Fatalf("client result %+v, sent %d packets, server received %d; want 2000, 2000 and fewer", r.BW, r.Client.SentPkts, r.Server.RcvdPkts)
	}

	p.Iters = 1000
	start = time.Now()
	c, s := runPair(t, p, mem.Faults{Drop: 0.01, Seed: 11})
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("the remote run took %v: the server waited for lost messages", el)
	}
	if len(c) != 1 || len(s) != 1 || c[0].BW == nil || s[0].BW == nil || c[0].BW.Iters != 1000 || s[0].BW.Iters >= 1000 || s[0].BW.Iters == 0 {
		t.Fatalf("client %+v server %+v; want 1000 sent and fewer received", c, s)
	}
}

// TestRemoteUD runs send_bw and send_lat -c UD across perftest's
// exchange with --check, on IPv4 and IPv6 GIDs, and with -a, whose sizes
// stop at the MTU on both sides.
func TestRemoteUD(t *testing.T) {
	for _, fam := range []struct{ name, a, b string }{{"IPv4", "10.0.0.1", "10.0.0.2"}, {"IPv6", "fd00::1", "fd00::2"}} {
		for _, tc := range []struct {
			name string
			p    Params
			want int // results
		}{
			{"send_bw", Params{Test: SendBW, Size: 1024, NumQPs: 2}, 1},
			{"send_lat", Params{Test: SendLat, Size: 500}, 1},
			// -a stops at the MTU: the port's active MTU, 4096 on the
			// mem link, with no -m (2 ... 4096 bytes), or -m's.
			{"send_bw/all", Params{Test: SendBW, AllSize: true, Iters: 100}, 12},
			{"send_bw/all/m1024", Params{Test: SendBW, AllSize: true, Iters: 100, MTU: qp.MTU1024}, 10},
		} {
			t.Run(fam.name+"/"+tc.name, func(t *testing.T) {
				p := tc.p
				p.Connection, p.Check = qp.TypeUD, true
				if p.Iters == 0 {
					p.Iters = 300
				}
				fab := mem.NewFabric()
				var links [2]link.Link
				for i, a := range []string{fam.a, fam.b} {
					l, err := fab.NewLink(netip.MustParseAddr(a))
					if err != nil {
						t.Fatal(err)
					}
					links[i] = l
				}
				c, s := runPairOn(t, p, links)
				if len(c) != tc.want || len(s) != tc.want {
					t.Fatalf("%d client and %d server results, want %d", len(c), len(s), tc.want)
				}
				for i, r := range append(c, s...) {
					// The send_lat server reports nothing, as perftest's.
					if !r.Checked || (r.BW == nil && r.Lat == nil && (i < len(c) || !p.Test.IsLatency())) {
						t.Fatalf("result %d: %+v", i, r)
					}
				}
				mtu := cmp.Or(p.MTU, qp.MTU4096).Bytes()
				if last := c[len(c)-1]; tc.p.AllSize && last.BW.Size != mtu {
					t.Errorf("last size %d, want the MTU, %d", last.BW.Size, mtu)
				}
				if got := c[0].Remote.GID; got != netip.MustParseAddr(fam.b) && got.Unmap() != netip.MustParseAddr(fam.b) {
					t.Errorf("the client's peer GID %v, want %s", got, fam.b)
				}
			})
		}
	}
}

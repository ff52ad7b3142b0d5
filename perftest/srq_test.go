package perftest

import (
	"strings"
	"testing"

	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
)

// TestUseSRQ runs the send tests with --use-srq and --check on RC, UC and
// UD, -q 4 and -b among them: every message arrives whole, whichever QP's
// buffer the shared queue gave it (on -q 4 the receives of QP 0's buffer
// come first in the queue, so most messages land in another QP's buffer
// than their own).
func TestUseSRQ(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Params
	}{
		{"send_bw", Params{Test: SendBW, Size: 4000}},
		{"send_bw/q4", Params{Test: SendBW, Size: 3000, NumQPs: 4, RxDepth: 64}},
		{"send_bw/q4/imm", Params{Test: SendBW, Size: 100, NumQPs: 4, RxDepth: 8, WithImm: true}},
		{"send_bw/b", Params{Test: SendBW, Size: 2000, NumQPs: 2, Duplex: true}},
		{"send_bw/UC", Params{Test: SendBW, Size: 2000, NumQPs: 3, Connection: qp.TypeUC}},
		{"send_bw/UD", Params{Test: SendBW, Size: 512, NumQPs: 2, Connection: qp.TypeUD}},
		{"send_lat", Params{Test: SendLat}},
		{"send_lat/UD", Params{Test: SendLat, Size: 64, Connection: qp.TypeUD}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			p.UseSRQ, p.Check, p.Iters = true, true, 300
			r := runLocal(t, p, mem.Faults{})
			if !r.Checked {
				t.Fatal("check did not run")
			}
			switch {
			case p.Test.IsLatency() && (r.Lat == nil || r.Lat.Iters != 300):
				t.Fatalf("latency result %+v", r.Lat)
			case !p.Test.IsLatency() && (r.BW == nil || r.BW.Iters != 300*max(p.NumQPs, 1)):
				t.Fatalf("bandwidth result %+v", r.BW)
			}
		})
	}
}

// TestUseSRQSides: with --use-srq only a side that receives has an SRQ
// (perftest's srq_exists: the server, both sides of -b and of a latency
// test), its QPs take their receives from it, and the first receives,
// rx-depth shared out between the QPs' buffers, are posted to it.
func TestUseSRQSides(t *testing.T) {
	for _, tc := range []struct {
		p              Params
		client, server bool
	}{
		{Params{Test: SendBW, NumQPs: 3, RxDepth: 100}, false, true},
		{Params{Test: SendBW, NumQPs: 3, RxDepth: 100, Duplex: true}, true, true},
		{Params{Test: SendLat}, true, true},
	} {
		p := tc.p
		p.UseSRQ, p.Iters = true, 1000
		p.Defaults()
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		client, server, closeAll, err := localPair(&p, mem.Faults{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []struct {
			side *Side
			want bool
		}{{client, tc.client}, {server, tc.server}} {
			if (s.side.srq != nil) != s.want {
				t.Errorf("%s -q %d -b=%v: SRQ %v, want %v", p.Test, p.qps(), p.Duplex, s.side.srq != nil, s.want)
				continue
			}
			if !s.want || p.Test.IsLatency() {
				continue
			}
			for _, l := range s.side.qps {
				if _, err := l.qp.PostRecv([]qp.RecvWR{{SGList: s.side.rsge(0)}}); err == nil {
					t.Errorf("a QP on the SRQ took a receive of its own")
				}
			}
			n, err := postReceives(s.side, &p)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.side.srq.Posted(); n != 33 || got != 99 {
				t.Errorf("postReceives: %d for each of 3 QPs, %d on the SRQ; want 33 and 99", n, got)
			}
		}
		closeAll()
	}
}

// TestUseSRQRefused: --use-srq is for the send tests, and needs at least
// a receive for each QP, as perftest's parser says; a counted UC or UD
// run of at most 100 messages posts 100 receives, even over -r.
func TestUseSRQRefused(t *testing.T) {
	for _, tc := range []struct {
		p    Params
		want string
	}{
		{Params{Test: WriteBW}, "Using SRQ only avavilible in SEND / SEND_IMM tests."},
		{Params{Test: ReadLat}, "Using SRQ only avavilible in SEND / SEND_IMM tests."},
		{Params{Test: AtomicBW}, "Using SRQ only avavilible in SEND / SEND_IMM tests."},
		{Params{Test: SendBW, NumQPs: 8, RxDepth: 4}, "Using SRQ depth should be greater than number of QPs."},
	} {
		p := tc.p
		p.UseSRQ = true
		p.Defaults()
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s -q %d -r %d: %v, want %q", p.Test, p.NumQPs, p.RxDepth, err, tc.want)
		}
	}
	for _, tc := range []struct {
		conn        qp.Type
		iters, rx   int
		srq         bool
		wantRxDepth int
	}{
		{qp.TypeUD, 50, 0, true, 100},
		{qp.TypeUD, 50, 10, true, 100},
		{qp.TypeUC, 100, 0, true, 100},
		{qp.TypeUC, 101, 0, true, 101},
		{qp.TypeUD, 50, 0, false, 50},
		{qp.TypeRC, 50, 0, true, 50},
	} {
		p := Params{Test: SendBW, Connection: tc.conn, Iters: tc.iters, RxDepth: tc.rx, UseSRQ: tc.srq}
		p.Defaults()
		if p.RxDepth != tc.wantRxDepth {
			t.Errorf("-c %d -n %d -r %d srq=%v: rx depth %d, want %d", tc.conn, tc.iters, tc.rx, tc.srq, p.RxDepth, tc.wantRxDepth)
		}
	}
}

// TestRecvPostList: --recv_post_list posts a receiving side's receives in
// whole lists, rx-depth rounded down, and a list back once a list's worth
// of a QP's buffer is used: every message arrives, on its own receive
// queues and on an SRQ, and perftest's refusals hold.
func TestRecvPostList(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Params
	}{
		{"send_bw/q2", Params{Test: SendBW, Size: 3000, NumQPs: 2, RxDepth: 100, RecvPostList: 8}},
		{"send_bw/q2/srq", Params{Test: SendBW, Size: 3000, NumQPs: 2, RxDepth: 100, RecvPostList: 8, UseSRQ: true}},
		{"send_bw/UD", Params{Test: SendBW, Size: 500, RxDepth: 64, RecvPostList: 16, Connection: qp.TypeUD}},
		{"write_bw/imm", Params{Test: WriteBW, Size: 3000, RxDepth: 50, RecvPostList: 10, WithImm: true}},
		{"send_bw/b", Params{Test: SendBW, Size: 3000, RxDepth: 100, RecvPostList: 4, Duplex: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			p.Iters, p.Check = 400, true
			if r := runLocal(t, p, mem.Faults{}); !r.Checked || r.BW == nil || r.BW.Iters != 400*max(p.NumQPs, 1) {
				t.Fatalf("%+v: %+v", p, r.BW)
			}
		})
	}

	p := Params{Test: SendBW, NumQPs: 2, RxDepth: 100, RecvPostList: 8, UseSRQ: true, Iters: 400}
	p.Defaults()
	_, server, closeAll, err := localPair(&p, mem.Faults{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	var b strings.Builder
	PrintBanner(&b, &p, BannerInfo{Device: "gorxe0", Server: true})
	if !strings.Contains(b.String(), " Recv Post List  : 8\n RX depth        : 100\n") {
		t.Errorf("banner\n%s", b.String())
	}
	n, err := postReceives(server, &p)
	if err != nil {
		t.Fatal(err)
	}
	if got := server.srq.Posted(); n != 48 || got != 96 {
		t.Fatalf("%d receives for each QP's buffer, %d on the SRQ; want 48 (50 in lists of 8) and 96", n, got)
	}

	for _, c := range []struct {
		p    Params
		want string
	}{
		{Params{Test: SendLat, RecvPostList: 2}, "Receive post list is supported in BW tests only"},
		{Params{Test: SendBW, Iters: 100, RecvPostList: 8}, "Number of iterations must be a multiple of receive post list size"},
		{Params{Test: SendBW, Iters: 128, RxDepth: 4, RecvPostList: 8}, "does not fit in the receive queue"},
	} {
		c.p.Defaults()
		if err := c.p.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.p, err, c.want)
		}
	}
}

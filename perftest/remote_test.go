package perftest

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// runPair runs p as a client and a server on two devices of one in-memory
// fabric whose links both apply faults, talking perftest's exchange over
// TCP on the loopback (runPairOn).
func runPair(t *testing.T, p Params, faults mem.Faults) (client, server []Result) {
	t.Helper()
	fab := mem.NewFabric()
	var links [2]link.Link
	for i, a := range []string{"10.0.0.1", "10.0.0.2"} {
		l, err := fab.NewLink(netip.MustParseAddr(a))
		if err != nil {
			t.Fatal(err)
		}
		l.SetFaults(faults)
		links[i] = l
	}
	return runPairOn(t, p, links)
}

func TestRemoteEveryTest(t *testing.T) {
	for _, tt := range Tests {
		t.Run(string(tt), func(t *testing.T) {
			p := Params{Test: tt, Iters: 300, Check: true}
			if !tt.IsLatency() && tt != AtomicBW {
				p.Size = 10000
			}
			c, s := runPair(t, p, mem.Faults{Drop: 0.005, Seed: 7})
			if len(c) != 1 || len(s) != 1 || !c[0].Checked || !s[0].Checked {
				t.Fatalf("client %+v server %+v", c, s)
			}
			if tt.IsLatency() {
				if c[0].Lat == nil || c[0].Lat.Iters != 300 {
					t.Fatalf("client latency %+v", c[0].Lat)
				}
				// write_lat's and send_lat's servers time their own
				// round trips, as perftest's print theirs; read_lat's and
				// atomic_lat's take no part.
				passive := tt == ReadLat || tt == AtomicLat
				if passive != (s[0].Lat == nil) || !passive && (s[0].Lat.Iters != 300 || s[0].Lat.Min <= 0 || s[0].Lat.Max < s[0].Lat.Min) {
					t.Fatalf("server latency %+v", s[0].Lat)
				}
				return
			}
			if c[0].BW == nil || s[0].BW == nil || c[0].BW.Iters != 300 {
				t.Fatalf("client %+v server %+v", c[0].BW, s[0].BW)
			}
			if ExchangesBWReport(tt) && s[0].BW.AvgMBps != c[0].BW.AvgMBps {
				t.Fatalf("the server reports %v, the client measured %v", s[0].BW.AvgMBps, c[0].BW.AvgMBps)
			}
		})
	}
}

// TestRemoteAllSizes: -a runs every size, 2 B to 8 MiB. The ping-pongs
// over receives (send_lat, write_lat with immediate) leave no receive
// posted after a size's last message, as perftest posts none: one left
// would take the next size's first, larger, message (send_lat -a failed
// at 4 bytes with a local length error).
func TestRemoteAllSizes(t *testing.T) {
	for _, p := range []Params{
		{Test: WriteBW}, {Test: SendBW}, {Test: ReadLat}, {Test: SendLat}, {Test: WriteLat, WithImm: true},
	} {
		p.AllSize, p.Iters, p.Check = true, 4, true
		c, _ := runPair(t, p, mem.Faults{})
		if len(c) != 23 {
			t.Fatalf("%s: %d sizes", p.Test, len(c))
		}
	}
}

// runRemotePair runs the client with pc and the server with ps on the
// two devices, perftest's exchange between them on TCP over the loopback.
// The client runs in cctx and closes its connection when it returns, as a
// killed perftest's closes; afterClient, if set, runs then. The server
// runs in sctx.
func runRemotePair(t *testing.T, cctx, sctx context.Context, cdev, sdev *rnic.Device, pc, ps Params, afterClient func()) (client, server []Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		r   []Result
		err error
	}
	srv := make(chan res, 1)
	go func() {
		conn, err := Accept(sctx, ln)
		if err != nil {
			srv <- res{nil, err}
			return
		}
		defer conn.Close()
		r, err := RunRemote(sctx, ps, RemoteOptions{Dev: sdev, Conn: conn})
		srv <- res{r, err}
	}()
	conn, err := Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client, err = RunRemote(cctx, pc, RemoteOptions{Dev: cdev, Conn: conn})
	conn.Close()
	if afterClient != nil {
		afterClient()
	}
	s := <-srv
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	if s.err != nil {
		t.Fatalf("server: %v", s.err)
	}
	return client, s.r
}

// memDevices opens two devices on an in-memory fabric, each with cfg and
// its own link.
func memDevices(t *testing.T, cfg rnic.Config) (client, server *rnic.Device) {
	t.Helper()
	fab := mem.NewFabric()
	var devs [2]*rnic.Device
	for i, a := range []string{"10.0.0.1", "10.0.0.2"} {
		l, err := fab.NewLink(netip.MustParseAddr(a))
		if err != nil {
			t.Fatal(err)
		}
		c := cfg
		c.Link = l
		if devs[i], err = rnic.Open(c); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { devs[i].Close() })
	}
	return devs[0], devs[1]
}

// TestPassiveInfiniteServerStops: the passive server of an infinite run
// waits for the client however long it runs, past its own watchdog's
// GiveUp, and its context ends the wait without an error.
func TestPassiveInfiniteServerStops(t *testing.T) {
	cdev, sdev := memDevices(t, rnic.Config{})
	// The server's QP goes with it: the client stops soon after, before
	// its own watchdog would see that nothing completes any more.
	cctx, stopClient := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer stopClient()
	sctx, stopServer := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer stopServer()
	reports := 0
	p := Params{Test: WriteBW, Infinite: true, Duration: 200 * time.Millisecond, Size: 64}
	pc := p
	pc.OnReport = func(*Result) { reports++ }
	ps := p
	ps.GiveUp = 100 * time.Millisecond
	c, s := runRemotePair(t, cctx, sctx, cdev, sdev, pc, ps, nil)
	if len(c) != 0 || len(s) != 0 || reports < 2 {
		t.Fatalf("client %v, server %v, %d reports", c, s, reports)
	}
}

// TestAddressesBeforeRun: RunRemote hands over both sides' address
// information, every QP's, once the keys are exchanged: before any RoCE
// packet, as perftest prints its address lines before the run. A passive
// server's only result comes at the run's end.
func TestAddressesBeforeRun(t *testing.T) {
	links := memLinks(t, mem.Faults{})
	var devs [2]*rnic.Device
	for i, l := range links {
		d, err := rnic.Open(rnic.Config{Link: l})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		devs[i] = d
	}
	p := Params{Test: WriteBW, NumQPs: 3, Iters: 200, Size: 4096}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type call struct {
		local, remote []Info
		rcvd          uint64
	}
	calls := make(chan call, 2)
	opt := func(d *rnic.Device) func(local, remote []Info) {
		return func(local, remote []Info) { calls <- call{local, remote, d.Counters().RcvdPkts} }
	}
	srv := make(chan error, 1)
	go func() {
		conn, err := Accept(context.Background(), ln)
		if err == nil {
			defer conn.Close()
			_, err = RunRemote(context.Background(), p, RemoteOptions{Dev: devs[1], Conn: conn, Addresses: opt(devs[1])})
		}
		srv <- err
	}()
	conn, err := Dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	res, err := RunRemote(context.Background(), p, RemoteOptions{Dev: devs[0], Conn: conn, Addresses: opt(devs[0])})
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-srv; err != nil {
		t.Fatal(err)
	}
	for range 2 {
		c := <-calls
		if len(c.local) != 3 || len(c.remote) != 3 || c.rcvd != 0 {
			t.Fatalf("%d local and %d remote addresses, %d packets received before; want 3, 3, 0", len(c.local), len(c.remote), c.rcvd)
		}
	}
	if res[0].Locals[2].QPN == 0 || len(calls) != 0 {
		t.Fatalf("result %+v, %d more calls", res[0], len(calls))
	}
}

// TestRemoteReversed: with --reversed on both sides the side that
// listened runs the client's part and the side that dialled the
// server's, while the exchange keeps its direction. Which device sent the
// data shows it: the test's client sends the WRITEs and SENDs and
// receives the READ responses (10 packets a message at 10000 bytes,
// against one request or at most one ACK).
func TestRemoteReversed(t *testing.T) {
	for _, tt := range []Test{WriteBW, SendBW, ReadBW, ReadLat, WriteLat} {
		t.Run(string(tt), func(t *testing.T) {
			p := Params{Test: tt, Iters: 200, MTU: qp.MTU1024, Check: true, Reversed: true}
			if !tt.IsLatency() {
				p.Size = 10000
			}
			dialled, listened := runPair(t, p, mem.Faults{})
			if len(dialled) != 1 || len(listened) != 1 || !dialled[0].Checked || !listened[0].Checked {
				t.Fatalf("dialled %+v listened %+v", dialled, listened)
			}
			if tt.IsLatency() {
				// read_lat's server takes no part and reports nothing.
				if listened[0].Lat == nil || listened[0].Lat.Iters != 200 {
					t.Fatalf("the listening side (the test's client) reports %+v", listened[0].Lat)
				}
				if (tt == ReadLat) != (dialled[0].Lat == nil) {
					t.Fatalf("the dialling side (the test's server) reports %+v", dialled[0].Lat)
				}
				return
			}
			if listened[0].BW == nil || listened[0].BW.Iters != 200 || dialled[0].BW == nil {
				t.Fatalf("listened %+v dialled %+v", listened[0].BW, dialled[0].BW)
			}
			c := listened[0].Client // the listening side's device
			out, in := c.SentPkts, c.RcvdPkts
			if tt == ReadBW {
				out, in = in, out
			}
			if out < 200*10 || in >= out/5 {
				t.Fatalf("the listening side, the test's client, sent %d packets and received %d", c.SentPkts, c.RcvdPkts)
			}
		})
	}
}

// TestReversedRefusedWithCM: perftest's rdma_cm connection follows the
// test roles, so --reversed cannot go with -R or -z.
func TestReversedRefusedWithCM(t *testing.T) {
	for _, p := range []Params{{Test: WriteBW, Reversed: true, RDMACM: true}, {Test: SendBW, Reversed: true, CommRDMACM: true}} {
		p.Defaults()
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "--reversed") {
			t.Errorf("%+v: %v, want a refusal naming --reversed", p, err)
		}
	}
}

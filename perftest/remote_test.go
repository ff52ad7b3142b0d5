package perftest

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/rnic"
)

// runPair runs p as a client and a server on two devices of one in-memory
// fabric, talking perftest's exchange over TCP on the loopback.
func runPair(t *testing.T, p Params, faults mem.Faults) (client, server []Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fab := mem.NewFabric()
	var devs [2]*rnic.Device
	for i, a := range []string{"10.0.0.1", "10.0.0.2"} {
		l, err := fab.NewLink(netip.MustParseAddr(a))
		if err != nil {
			t.Fatal(err)
		}
		l.SetFaults(faults)
		if devs[i], err = rnic.Open(rnic.Config{Link: l}); err != nil {
			t.Fatal(err)
		}
		defer devs[i].Close()
	}
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
		conn, err := Accept(ctx, ln)
		if err != nil {
			srv <- res{nil, err}
			return
		}
		defer conn.Close()
		r, err := RunRemote(ctx, p, RemoteOptions{Dev: devs[1], Conn: conn})
		srv <- res{r, err}
	}()
	conn, err := Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client, err = RunRemote(ctx, p, RemoteOptions{Dev: devs[0], Conn: conn})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	s := <-srv
	if s.err != nil {
		t.Fatalf("server: %v", s.err)
	}
	return client, s.r
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

func TestRemoteAllSizes(t *testing.T) {
	for _, tt := range []Test{WriteBW, SendBW, ReadLat} {
		c, _ := runPair(t, Params{Test: tt, AllSize: true, Iters: 4, Check: true}, mem.Faults{})
		if len(c) != 23 {
			t.Fatalf("%s: %d sizes", tt, len(c))
		}
	}
}

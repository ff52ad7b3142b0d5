//go:build linux

package perftest

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link/udp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire"
)

// udpDevices opens two devices on kernel UDP links on 127.0.0.1 and
// 127.0.0.2 (udp.LoopbackPair). trace is the server's PacketTrace.
func udpDevices(t *testing.T, trace func(rnic.Direction, []byte)) (client, server *rnic.Device) {
	t.Helper()
	ls, err := udp.LoopbackPair(udp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var devs [2]*rnic.Device
	for i, l := range ls {
		cfg := rnic.Config{Link: l, Port: l.SourcePort()}
		if i == 1 {
			cfg.PacketTrace = trace
		}
		if devs[i], err = rnic.Open(cfg); err != nil {
			l.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { devs[i].Close() })
	}
	return devs[0], devs[1]
}

// TestTimedOverUDP runs -D 2 between two gorxe devices on kernel UDP
// sockets: write_bw (the server passive, printing the client's report),
// send_bw and write_lat (both sides timed, each reporting its own), with
// the client's --tclass on every packet the server receives.
func TestTimedOverUDP(t *testing.T) {
	if testing.Short() {
		t.Skip("timed runs of 2 s")
	}
	for _, tt := range []Test{WriteBW, SendBW, WriteLat} {
		t.Run(string(tt), func(t *testing.T) {
			var rcvd, marked atomic.Int64
			trace := func(dir rnic.Direction, pkt []byte) {
				if dir == rnic.Received {
					rcvd.Add(1)
					// The udp link adds ECT(0) to a class without ECN bits.
					if wire.IPv4(pkt).TOS()&^3 == 0x60 {
						marked.Add(1)
					}
				}
			}
			cdev, sdev := udpDevices(t, trace)
			p := Params{Test: tt, Duration: 2 * time.Second, Size: 4096}
			if tt == WriteLat {
				p.Size = 64
			}
			pc := p
			pc.TrafficClass = 0x60
			c, s := runRemotePair(t, context.Background(), context.Background(), cdev, sdev, pc, p, nil)
			if len(c) != 1 || len(s) != 1 {
				t.Fatalf("%d client and %d server results", len(c), len(s))
			}
			if n, m := rcvd.Load(), marked.Load(); n == 0 || m != n {
				t.Errorf("%d of the %d packets the server received had the client's traffic class", m, n)
			}
			if tt.IsLatency() {
				cl, sl := c[0].Lat, s[0].Lat
				if cl == nil || sl == nil || !cl.Timed || !sl.Timed || cl.Iters == 0 || sl.Iters == 0 || cl.Avg <= 0 || cl.TPS <= 0 {
					t.Fatalf("client %+v server %+v", cl, sl)
				}
				return
			}
			cb, sb := c[0].BW, s[0].BW
			if cb == nil || sb == nil || cb.Iters == 0 || cb.PeakMBps != 0 || sb.PeakMBps != 0 || cb.AvgMBps <= 0 {
				t.Fatalf("client %+v server %+v", cb, sb)
			}
			// perftest's margin for -D 2 is 2/4 seconds, rounded down: none.
			if cb.Elapsed < 2*time.Second || cb.Elapsed > 3*time.Second {
				t.Errorf("client window %v", cb.Elapsed)
			}
			if tt == WriteBW && (sb.Iters != cb.Iters || sb.AvgMBps != cb.AvgMBps) {
				t.Errorf("the server reports %+v, the client measured %+v", sb, cb)
			}
		})
	}
}

// TestInfiniteOverUDP: a --run_infinitely client reports every -D until
// its context ends, after two reports, and returns without an error. The
// passive write_bw server waits until the client's connection closes;
// the send_bw server receives, reporting every -D too, until its own
// context ends. Neither returns an error.
func TestInfiniteOverUDP(t *testing.T) {
	if testing.Short() {
		t.Skip("infinite runs of 2 s")
	}
	for _, tt := range []Test{WriteBW, SendBW} {
		t.Run(string(tt), func(t *testing.T) {
			cdev, sdev := udpDevices(t, nil)
			cctx, stopClient := context.WithCancel(context.Background())
			defer stopClient()
			sctx, stopServer := context.WithCancel(context.Background())
			defer stopServer()
			var reports []BWResult
			p := Params{Test: tt, Infinite: true, Duration: time.Second, Size: 4096}
			pc := p
			pc.OnReport = func(r *Result) {
				reports = append(reports, *r.BW)
				if len(reports) == 2 {
					stopClient()
				}
			}
			ps := p
			var serverReports atomic.Int64
			ps.OnReport = func(*Result) { serverReports.Add(1) }
			afterClient := stopServer // perftest's send_bw server runs until it is killed
			if tt == WriteBW {
				afterClient = nil // the passive server ends when the client's connection closes
			}
			c, s := runRemotePair(t, cctx, sctx, cdev, sdev, pc, ps, afterClient)
			if len(c) != 0 || len(s) != 0 {
				t.Fatalf("results %v %v", c, s)
			}
			if len(reports) != 2 {
				t.Fatalf("%d reports", len(reports))
			}
			for _, b := range reports {
				if b.Iters == 0 || b.PeakMBps != 0 || b.Elapsed < time.Second || b.Size != 4096 {
					t.Errorf("report %+v", b)
				}
			}
			if tt == SendBW && serverReports.Load() == 0 {
				t.Error("the send_bw server reported nothing")
			}
		})
	}
}

// TestTimedRunInterruptedOverUDP: a timed run on a link the device busy
// polls, whose waits find completions at once and never sleep, still
// stops when its caller's context ends.
func TestTimedRunInterruptedOverUDP(t *testing.T) {
	for _, tt := range []Test{WriteBW, WriteLat} {
		t.Run(string(tt), func(t *testing.T) {
			cdev, sdev := udpDevices(t, nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			p := Params{Test: tt, Size: 64, Duration: time.Minute}
			go func() {
				conn, err := Accept(ctx, ln)
				if err != nil {
					return
				}
				defer conn.Close()
				RunRemote(ctx, p, RemoteOptions{Dev: sdev, Conn: conn}) // ends when the client's connection closes
			}()
			conn, err := Dial(ctx, ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			cctx, stop := context.WithCancel(ctx)
			time.AfterFunc(300*time.Millisecond, stop)
			start := time.Now()
			_, err = RunRemote(cctx, p, RemoteOptions{Dev: cdev, Conn: conn})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%v, want context.Canceled", err)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("the run took %v after its context ended at 0.3 s", d)
			}
		})
	}
}

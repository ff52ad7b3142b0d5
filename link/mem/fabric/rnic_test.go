package fabric_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link/mem/fabric"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// host is a gorxe device on a switch port with a region and a CQ.
type host struct {
	dev *rnic.Device
	pd  *mr.PD
	cq  *cq.CQ
	buf []byte
	mr  *mr.MR
}

const access = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead

func newHost(t testing.TB, r *fabric.RealTime, port, bufSize int) *host {
	t.Helper()
	l, err := r.Link(port)
	if err != nil {
		t.Fatal(err)
	}
	return newHostOn(t, l, bufSize)
}

func newHostOn(t testing.TB, l *fabric.Link, bufSize int) *host {
	t.Helper()
	var err error
	h := &host{buf: make([]byte, bufSize)}
	if h.dev, err = rnic.Open(rnic.Config{Link: l}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.dev.Close() })
	h.pd = h.dev.AllocPD()
	if h.cq, err = h.dev.CreateCQ(4096); err != nil {
		t.Fatal(err)
	}
	if h.mr, err = h.dev.RegMR(h.pd, h.buf, access); err != nil {
		t.Fatal(err)
	}
	return h
}

// end is one end of an RC connection: a QP on a host.
type end struct {
	*host
	qp *rnic.QP
}

// connect creates a QP on a and one on b and takes them to RTS, each the
// other's peer.
func connect(t testing.TB, ha, hb *host) (a, b end) {
	t.Helper()
	a, b = end{host: ha}, end{host: hb}
	for _, e := range []*end{&a, &b} {
		var err error
		e.qp, err = e.dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: e.pd, SendCQ: e.cq, RecvCQ: e.cq,
			Cap: qp.Cap{MaxSendWR: 4096, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range [][2]*end{{&a, &b}, {&b, &a}} {
		s, peer := p[0], p[1]
		if err := s.qp.Modify(&qp.Attr{State: qp.StateInit, Port: 1, AccessFlags: access},
			qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags); err != nil {
			t.Fatal(err)
		}
		if err := s.qp.Modify(&qp.Attr{State: qp.StateRTR, PathMTU: qp.MTU4096, DestQPNum: peer.qp.Num(), RQPSN: 1,
			MaxDestRdAtomic: 16, AV: qp.AddressVector{DGID: peer.dev.GIDs()[0], HopLimit: 64}},
			qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN|qp.AttrMaxDestRdAtomic|qp.AttrMinRNRTimer); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []end{a, b} {
		if err := s.qp.Modify(&qp.Attr{State: qp.StateRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, MaxRdAtomic: 16},
			qp.AttrState|qp.AttrSQPSN|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|qp.AttrMaxQPRdAtomic); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

// write posts n WRITEs of size bytes from a's buffer to b's, signaled, and
// waits for their completions.
func write(a, b end, n, size int) error {
	wrs := make([]qp.SendWR, n)
	for i := range wrs {
		off := i * size % len(a.buf)
		wrs[i] = qp.SendWR{WRID: uint64(i), Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGList:     []qp.SGE{{Addr: a.mr.IOVA() + uint64(off), Length: uint32(size), LKey: a.mr.LKey()}},
			RemoteAddr: b.mr.IOVA() + uint64(off), RKey: b.mr.RKey()}
	}
	if _, err := a.qp.PostSend(wrs); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	wcs := make([]cq.WC, 64)
	for done := 0; done < n; {
		k, err := a.cq.Wait(ctx, wcs)
		if err != nil {
			return fmt.Errorf("%d of %d WRITEs complete: %w", done, n, err)
		}
		for _, wc := range wcs[:k] {
			if wc.Status != cq.StatusSuccess {
				return fmt.Errorf("WRITE %d: %v", wc.WRID, wc.Status)
			}
		}
		done += k
	}
	return nil
}

// TestDevicesInVirtualTime runs two real gorxe devices through a 40 Gb/s
// switch inside a synctest bubble: the WRITEs take the virtual time the
// wire gives them, close to 40 Gb/s of goodput, whatever the wall time.
func TestDevicesInVirtualTime(t *testing.T) {
	const (
		rate  = 40e9
		delay = time.Microsecond
		size  = 64 << 10
		n     = 256 // 16 MiB
	)
	var simulated time.Duration
	wall := time.Now()
	synctest.Test(t, func(t *testing.T) {
		ps := make([]fabric.PortConfig, 2)
		for i := range ps {
			ps[i] = fabric.PortConfig{Rate: rate, Delay: delay, Addrs: []netip.Addr{netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)})}}
		}
		r, err := fabric.NewRealTime(fabric.Config{Ports: ps, Buffer: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		a, b := connect(t, newHost(t, r, 0, 1<<20), newHost(t, r, 1, 1<<20))
		for i := range a.buf {
			a.buf[i] = byte(i * 7)
		}
		t0 := time.Now()
		if err := write(a, b, n, size); err != nil {
			t.Fatal(err)
		}
		simulated = time.Since(t0)
		if !bytes.Equal(a.buf, b.buf) {
			t.Fatal("the WRITEs' data differs")
		}
		var q fabric.QueueStats
		r.Do(func(s *fabric.Switch) { q = s.Queue(1) })
		if q.Dropped != 0 || q.Enqueued < n*size/4096 {
			t.Errorf("queue to B: %+v", q)
		}
		goodput := float64(n*size*8) / simulated.Seconds()
		t.Logf("%d MiB in %v of virtual time: %.2f Gb/s goodput on a %.0f Gb/s port; queue to B at most %d bytes",
			n*size>>20, simulated, goodput/1e9, rate/1e9, q.MaxBytes)
		// 4096-byte payloads in 4140-byte packets (IPv4, UDP, BTH, ICRC,
		// and a RETH on the first of each message's 16) carry at most 98.9%.
		if goodput > rate || goodput < 0.9*rate {
			t.Errorf("goodput %.2f Gb/s, want 90%% to 100%% of %.0f Gb/s", goodput/1e9, rate/1e9)
		}
	})
	t.Logf("simulated %v in %v of wall time: %.3f simulated seconds per wall second", simulated, time.Since(wall), simulated.Seconds()/time.Since(wall).Seconds())
}

// incastRun is an N:1 incast of real gorxe devices: each of senders
// hosts WRITEs bytes to the last host's port through one switch, all at
// rate with a 1 µs delay, with PFC and, if asked, RED marking.
type incastRun struct {
	senders int
	rate    uint64
	bytes   int  // per sender, a multiple of 64 KiB
	mark    bool // the DCQCN paper's RED: Kmin 5 KB, Kmax 200 KB, Pmax 1%
	seed    uint64
	trace   bool

	// Results.
	out       []byte        // the switch's trace
	csv       []byte        // SampleQueues' and SampleFlows' rows, every 100 µs
	simulated time.Duration // the bubble's time the WRITEs took
	wall      time.Duration // the wall time of the whole run
}

// run runs the incast in a synctest bubble and checks what holds for
// every N: PFC loses nothing, every sender is paused, and, without
// marks, the receiver's port runs at close to its line rate. (Marks let
// devices that run DCQCN cut their rates, which may cost some of it.)
func (c *incastRun) run(t *testing.T) {
	const size = 64 << 10
	n := c.bytes / size
	wall := time.Now()
	synctest.Test(t, func(t *testing.T) {
		var tr bytes.Buffer
		ps := make([]fabric.PortConfig, c.senders+1)
		for i := range ps {
			ps[i] = fabric.PortConfig{Rate: c.rate, Delay: time.Microsecond, Addrs: []netip.Addr{netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)})}}
		}
		cfg := fabric.Config{Ports: ps, Buffer: 200000 * c.senders, PFC: &fabric.PFC{XOFF: 50000, XON: 30000}, Seed: c.seed}
		if c.mark {
			cfg.ECN = fabric.RED{Kmin: 5000, Kmax: 200000, Pmax: 0.01}
		}
		if c.trace {
			cfg.Trace = &tr
		}
		r, err := fabric.NewRealTime(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var queues, flows bytes.Buffer
		r.Do(func(s *fabric.Switch) {
			if err := s.SampleQueues(&queues, 100*time.Microsecond, s.Now().Add(10*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			if err := s.SampleFlows(&flows, 100*time.Microsecond, s.Now().Add(10*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		})
		sink := newHost(t, r, c.senders, 1<<20)
		errc := make(chan error, c.senders)
		t0 := time.Now()
		for i := range c.senders {
			a, b := connect(t, newHost(t, r, i, 1<<20), sink)
			go func() { errc <- write(a, b, n, size) }()
		}
		for range c.senders {
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}
		c.simulated = time.Since(t0)
		r.Do(func(s *fabric.Switch) {
			q := s.Queue(c.senders)
			if q.Dropped != 0 || q.Enqueued != uint64(c.senders*n*size/4096) {
				t.Errorf("queue to the receiver: %+v", q)
			}
			for i := range c.senders {
				if p := s.Port(i); p.Pauses == 0 || p.PausedTime == 0 {
					t.Errorf("port %d never paused: %+v", i, p)
				}
			}
		})
		want := 0.95
		if c.mark {
			want = 0.5
		}
		if goodput := float64(c.senders*n*size*8) / c.simulated.Seconds(); goodput < want*float64(c.rate) {
			t.Errorf("incast goodput %.2f Gb/s into a %d Gb/s port, want %.0f%% of it", goodput/1e9, c.rate/1e9, want*100)
		}
		time.Sleep(10 * time.Millisecond) // the samplers' last rows
		// The switch writes them under its lock.
		r.Do(func(*fabric.Switch) {
			c.out = tr.Bytes()
			c.csv = append(queues.Bytes(), flows.Bytes()...)
		})
	})
	c.wall = time.Since(wall)
}

// TestIncastRepeatable runs the same incast twice with the same seed: the
// switch's traces are the same byte for byte, though the bubble runs the
// devices' goroutines in no fixed order.
func TestIncastRepeatable(t *testing.T) {
	runs := [2]incastRun{}
	for i := range runs {
		runs[i] = incastRun{senders: 2, rate: 40e9, bytes: 4 << 20, mark: true, seed: 1, trace: true}
		runs[i].run(t)
	}
	a, b := runs[0].out, runs[1].out
	t.Logf("8 MiB into one 40 Gb/s port: %v and %v of virtual time, %v of wall time for both; trace %d lines, SHA-256 %x; samples SHA-256 %x",
		runs[0].simulated, runs[1].simulated, runs[0].wall+runs[1].wall, bytes.Count(a, []byte("\n")), sha256.Sum256(a), sha256.Sum256(runs[0].csv))
	if len(a) == 0 {
		t.Fatal("no trace")
	}
	if ca, cb := runs[0].csv, runs[1].csv; !bytes.Contains(ca, []byte(",10.0.0.2,10.0.0.3,")) || !bytes.Equal(ca, cb) {
		t.Errorf("the samples differ or lack a flow:\n%s\n%s", ca, cb)
	}
	if !bytes.Equal(a, b) {
		la, lb := bytes.Split(a, []byte("\n")), bytes.Split(b, []byte("\n"))
		i := 0
		for i < min(len(la), len(lb)) && bytes.Equal(la[i], lb[i]) {
			i++
		}
		t.Errorf("traces differ from line %d of %d/%d: %q vs %q", i, len(la), len(lb), la[min(i, len(la)-1)], lb[min(i, len(lb)-1)])
	}
}

// TestIncast16 measures the simulator's speed on 16 real devices sending
// into one 100 Gb/s port.
func TestIncast16(t *testing.T) {
	if testing.Short() {
		t.Skip("16 devices")
	}
	c := incastRun{senders: 16, rate: 100e9, bytes: 2 << 20}
	c.run(t)
	t.Logf("16:1 at 100 Gb/s, 32 MiB: %v of virtual time in %v of wall time: %.4f simulated seconds per wall second",
		c.simulated, c.wall, c.simulated.Seconds()/c.wall.Seconds())
}

// TestParkingLotDevices: real devices A and B on switch 1 and C on switch
// 2 WRITE to D on switch 2, with PFC between the switches and towards the
// hosts. PFC's unfairness shows as it does with the switch's own packets
// (TestParkingLot): C gets about half of D's port, A and B a quarter each.
func TestParkingLotDevices(t *testing.T) {
	const rate, size, n = 40e9, 64 << 10, 128 // 8 MiB from each
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}) }
	at := func(as ...netip.Addr) fabric.PortConfig {
		return fabric.PortConfig{Rate: rate, Delay: time.Microsecond, Addrs: as}
	}
	synctest.Test(t, func(t *testing.T) {
		clock := fabric.NewClock()
		pfc := &fabric.PFC{XOFF: 30000, XON: 20000}
		s1, err := fabric.NewSwitch(clock, fabric.Config{Ports: []fabric.PortConfig{at(addr(1)), at(addr(2)), at(addr(3), addr(4))}, Buffer: 400000, PFC: pfc})
		if err != nil {
			t.Fatal(err)
		}
		s2, err := fabric.NewSwitch(clock, fabric.Config{Ports: []fabric.PortConfig{at(addr(1), addr(2)), at(addr(3)), at(addr(4))}, Buffer: 400000, PFC: pfc})
		if err != nil {
			t.Fatal(err)
		}
		if err := fabric.Connect(s1, 2, s2, 0); err != nil {
			t.Fatal(err)
		}
		var flows bytes.Buffer
		if err := s2.SampleFlows(&flows, 100*time.Microsecond, clock.Now().Add(time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		r, err := fabric.Drive(clock, s1, s2)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		hostAt := func(s *fabric.Switch, port int) *host {
			l, err := r.LinkAt(s, port)
			if err != nil {
				t.Fatal(err)
			}
			return newHostOn(t, l, 1<<20)
		}
		d := hostAt(s2, 2)
		errc := make(chan error, 3)
		for _, h := range []*host{hostAt(s1, 0), hostAt(s1, 1), hostAt(s2, 1)} {
			a, b := connect(t, h, d)
			go func() { errc <- write(a, b, n, size) }()
		}
		for range 3 {
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}
		rates := map[string]float64{}
		r.Do(func(*fabric.Switch) {
			if q1, q2 := s1.Queue(2), s2.Queue(2); q1.Dropped+q2.Dropped != 0 || q1.PausedTime == 0 {
				t.Errorf("queue to switch 2 %+v; queue to D %+v", q1, q2)
			}
			for _, line := range strings.Split(flows.String(), "\n") {
				f := strings.Split(line, ",")
				if len(f) == 6 && f[0] == "1000001" { // 1 ms after the clock's epoch, 1
					var v float64
					fmt.Sscan(f[4], &v)
					rates[f[1]] = v / 1e9
				}
			}
		})
		a, b, c := rates["10.0.0.1"], rates["10.0.0.2"], rates["10.0.0.3"]
		t.Logf("at 1 ms: A %.2f, B %.2f, C %.2f Gb/s", a, b, c)
		if c < 16 || c > 24 || a < 8 || a > 12 || b < 8 || b > 12 {
			t.Errorf("shares A %.2f, B %.2f, C %.2f Gb/s; want about 10, 10, 20", a, b, c)
		}
	})
}

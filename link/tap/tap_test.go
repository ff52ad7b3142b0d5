//go:build linux

package tap

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/linktest"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// pair opens two TAP links on a new bridge, with no neighbour known: the
// first packets each sends wait for ARP or neighbour discovery.
func pair(t testing.TB, aPrefix, bPrefix string) (a, b *Link) {
	t.Helper()
	br := newBridge(t)
	a = open(t, Config{Bridge: br, Addrs: []netip.Prefix{prefix(aPrefix)}})
	b = open(t, Config{Bridge: br, Addrs: []netip.Prefix{prefix(bPrefix)}})
	return a, b
}

func TestConformanceIPv4(t *testing.T) {
	needRoot(t)
	linktest.Run(t, func(t *testing.T) (link.Link, link.Link, netip.Addr, netip.Addr) {
		a, b := pair(t, "10.9.0.5/24", "10.9.0.6/24")
		return a, b, a.Addrs()[0], b.Addrs()[0]
	})
}

func TestConformanceIPv6(t *testing.T) {
	needRoot(t)
	linktest.Run(t, func(t *testing.T) (link.Link, link.Link, netip.Addr, netip.Addr) {
		a, b := pair(t, "fd00::5/64", "fd00::6/64")
		return a, b, a.Addrs()[0], b.Addrs()[0]
	})
}

// rocePacket returns a RoCE v2 SEND ONLY packet behind link.Headroom bytes.
func rocePacket(t testing.TB, src, dst netip.Addr, psn uint32, payload int) []byte {
	t.Helper()
	return rocePacketFrom(t, src, dst, 0xc000, psn, payload)
}

// rocePacketFrom is rocePacket from UDP port sport.
func rocePacketFrom(t testing.TB, src, dst netip.Addr, sport uint16, psn uint32, payload int) []byte {
	t.Helper()
	f := wire.Frame{
		IP:      wire.IPFields{Src: src, Dst: dst, HopLimit: 64, DontFrag: true},
		SrcPort: sport, DstPort: wire.UDPPort,
		Headers: wire.Headers{BTH: bth.Fields{Opcode: bth.RCSendOnly, PKey: bth.DefaultPKey, DestQP: 0x11, PSN: bth.PSN(psn)}},
		Payload: bytes.Repeat([]byte{byte(psn)}, payload),
	}
	buf, err := f.Append(make([]byte, link.Headroom, link.BufferSize))
	if err != nil {
		t.Fatal(err)
	}
	return buf
}

type received struct {
	pkt []byte
	err error
}

// receiveAll runs Receive on l until it is closed, sending a copy of every
// packet to the returned channel, as a device's receive loop would.
func receiveAll(t testing.TB, l *Link) <-chan received {
	ch := make(chan received, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		bufs := make([][]byte, link.BatchSize)
		for i := range bufs {
			bufs[i] = make([]byte, link.BufferSize)
		}
		sizes := make([]int, link.BatchSize)
		for {
			n, err := l.Receive(bufs, sizes)
			if err != nil {
				ch <- received{err: err}
				return
			}
			for i := range n {
				ch <- received{pkt: bytes.Clone(bufs[i][link.Headroom : link.Headroom+sizes[i]])}
			}
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return ch
}

func next(t testing.TB, ch <-chan received) []byte {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Receive: %v", r.err)
		}
		return r.pkt
	case <-time.After(5 * time.Second):
		t.Fatal("no packet in 5s")
	}
	return nil
}

func TestQueuedUntilResolved(t *testing.T) {
	needRoot(t)
	for _, tt := range []struct{ name, a, b string }{
		{"IPv4", "10.9.0.5/24", "10.9.0.6/24"},
		{"IPv6", "fd00::5/64", "fd00::6/64"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// b opens first, so its gratuitous ARP or unsolicited
			// advertisement goes out before a exists: a must resolve b.
			br := newBridge(t)
			b := open(t, Config{Bridge: br, Addrs: []netip.Prefix{prefix(tt.b)}})
			a := open(t, Config{Bridge: br, Addrs: []netip.Prefix{prefix(tt.a)}})
			aAddr, bAddr := a.Addrs()[0], b.Addrs()[0]
			var want [][]byte
			for i := range 3 {
				want = append(want, rocePacket(t, aAddr, bAddr, uint32(i), 100))
			}
			if err := a.Send(want); err != nil {
				t.Fatal(err)
			}
			// The first packet waits at least for the request to reach b
			// and the answer to come back.
			if s := a.Stats(); s.Queued == 0 || s.Solicits != 1 {
				t.Fatalf("after sending to an unresolved neighbour: %+v", s)
			}
			ch := receiveAll(t, b)
			for i := range want {
				if got := next(t, ch); !bytes.Equal(got, want[i][link.Headroom:]) {
					t.Fatalf("packet %d:\n got %x\nwant %x", i, got, want[i][link.Headroom:])
				}
			}
			eventually(t, time.Second, "PacketsOut = 3", func() bool { return a.Stats().PacketsOut == 3 })
			if s := a.Stats(); s.ARP+s.NDP != 1 || s.DropNoNeighbor != 0 || s.DropQueueFull != 0 {
				t.Fatalf("a resolved b without one ARP reply or advertisement: %+v", s)
			}
			// b learned a from its request: b's answers need no resolution.
			if err := b.Send([][]byte{rocePacket(t, bAddr, aAddr, 9, 10)}); err != nil {
				t.Fatal(err)
			}
			if s := b.Stats(); s.Queued != 0 || s.Solicits != 0 || s.PacketsOut != 1 {
				t.Fatalf("answer to a host that resolved us: %+v", s)
			}
		})
	}
}

func TestResolveFails(t *testing.T) {
	needRoot(t)
	for _, tt := range []struct{ name, own, dead string }{
		{"IPv4", "10.9.0.5/24", "10.9.0.77"},
		{"IPv6", "fd00::5/64", "fd00::77"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			br := newBridge(t)
			l := open(t, Config{Bridge: br, Addrs: []netip.Prefix{prefix(tt.own)},
				ResolveInterval: 20 * time.Millisecond, ResolveAttempts: 3})
			dead := netip.MustParseAddr(tt.dead)
			bufs := [][]byte{
				rocePacket(t, l.Addrs()[0], dead, 1, 10),
				rocePacket(t, l.Addrs()[0], dead, 2, 10),
			}
			if err := l.Send(bufs); err != nil {
				t.Fatal(err)
			}
			eventually(t, 2*time.Second, "queued packets dropped", func() bool { return l.Stats().DropNoNeighbor == 2 })
			if s := l.Stats(); s.Solicits != 3 || s.Queued != 2 || s.PacketsOut != 0 {
				t.Fatalf("after giving up: %+v", s)
			}
			// A later packet starts a new resolution.
			if err := l.Send(bufs[:1]); err != nil {
				t.Fatal(err)
			}
			if s := l.Stats(); s.Solicits != 4 || s.Queued != 3 {
				t.Fatalf("after sending again: %+v", s)
			}
		})
	}
}

func TestSendDrops(t *testing.T) {
	needRoot(t)
	br := newBridge(t)
	l := open(t, Config{Bridge: br, Addrs: []netip.Prefix{prefix("10.9.0.5/24")}, QueueBytes: 1000})
	src := l.Addrs()[0]
	offLink := rocePacket(t, src, netip.MustParseAddr("10.10.0.1"), 1, 10)
	tooBig := rocePacket(t, src, netip.MustParseAddr("10.9.0.9"), 1, 1500)
	bad := make([]byte, link.Headroom+10) // not an IP packet
	var queue [][]byte
	for i := range 5 {
		queue = append(queue, rocePacket(t, src, netip.MustParseAddr("10.9.0.9"), uint32(i), 300))
	}
	if err := l.Send(append([][]byte{offLink, tooBig, bad}, queue...)); err != nil {
		t.Fatal(err)
	}
	s := l.Stats()
	if s.DropOffLink != 1 || s.DropTooBig != 1 || s.DropBadFrame != 1 || s.Queued != 2 || s.DropQueueFull != 3 {
		t.Fatalf("%+v", s)
	}
}

func TestNotRoCEDropped(t *testing.T) {
	needRoot(t)
	l, _ := beside(t, Config{})
	ch := receiveAll(t, l)
	for _, host := range []string{"10.9.0.5", "fd00::5"} {
		udp := func(port string, payload string) {
			c, err := net.Dial("udp", net.JoinHostPort(host, port))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte(payload)); err != nil {
				t.Fatal(err)
			}
		}
		before := l.Stats().DropNotRoCE
		udp("9999", "not roce")
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(host, "80"), 300*time.Millisecond); err == nil {
			c.Close()
			t.Fatal("TCP connection to the link succeeded")
		}
		udp("4791", "marker "+host)
		// The marker is the first packet delivered: the datagram and the
		// TCP SYN sent before it were dropped.
		pkt := next(t, ch)
		if !bytes.HasSuffix(pkt, []byte("marker "+host)) {
			t.Fatalf("first packet delivered is not the marker: %x", pkt)
		}
		if d := l.Stats().DropNotRoCE - before; d < 2 {
			t.Fatalf("%s: DropNotRoCE went up by %d, want at least 2 (UDP to 9999, TCP SYN)", host, d)
		}
	}
	select {
	case r := <-ch:
		t.Fatalf("unexpected delivery: %x %v", r.pkt, r.err)
	default:
	}
}

func TestCloseRemovesDevice(t *testing.T) {
	needRoot(t)
	before := len(tapGoroutines())
	l, err := Open(Config{Name: "gorxeclose0", Addrs: []netip.Prefix{prefix("10.9.0.5/24")}})
	if err != nil {
		t.Fatal(err)
	}
	if l.Name() != "gorxeclose0" {
		t.Fatalf("Name() = %q", l.Name())
	}
	if _, err := os.Stat("/sys/class/net/gorxeclose0"); err != nil {
		t.Fatalf("the TAP does not exist while open: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := l.Receive([][]byte{make([]byte, link.BufferSize)}, make([]int, 1))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, link.ErrClosed) {
			t.Fatalf("Receive woken by Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake Receive")
	}
	if _, err := os.Stat("/sys/class/net/gorxeclose0"); !os.IsNotExist(err) {
		t.Fatalf("the TAP still exists after Close: %v", err)
	}
	if g := tapGoroutines(); len(g) > before {
		t.Fatalf("goroutines left after Close:\n%s", g)
	}
	if err := l.Close(); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	needRoot(t)
	for _, c := range []Config{
		{MTU: 100},
		{MTU: link.MaxPacket + 1},
		{MAC: net.HardwareAddr{1, 2, 3, 4, 5, 6}}, // multicast
		{Addrs: []netip.Prefix{prefix("224.0.0.1/4")}},
		{Bridge: "no-such-bridge"},
	} {
		if l, err := Open(c); err == nil {
			l.Close()
			t.Errorf("Open(%+v) succeeded", c)
		}
	}
}

// BenchmarkSendReceive sends 1 KiB RoCE packets in batches of 64 from one
// TAP link to another over a bridge; one op is one packet.
func BenchmarkSendReceive(b *testing.B) {
	needRoot(b)
	for _, tt := range []struct{ name, a, b string }{
		{"IPv4", "10.9.0.5/24", "10.9.0.6/24"},
		{"IPv6", "fd00::5/64", "fd00::6/64"},
	} {
		b.Run(tt.name, func(bb *testing.B) {
			x, y := pair(bb, tt.a, tt.b)
			batch := make([][]byte, link.BatchSize)
			for i := range batch {
				batch[i] = rocePacket(bb, x.Addrs()[0], y.Addrs()[0], uint32(i), 1024)
			}
			rbufs := make([][]byte, link.BatchSize)
			for i := range rbufs {
				rbufs[i] = make([]byte, link.BufferSize)
			}
			sizes := make([]int, link.BatchSize)
			recv := func(n int) {
				for n > 0 {
					k, err := y.Receive(rbufs, sizes)
					if err != nil {
						bb.Fatal(err)
					}
					n -= k
				}
			}
			// Resolve before timing.
			if err := x.Send(batch[:1]); err != nil {
				bb.Fatal(err)
			}
			recv(1)
			eventually(bb, time.Second, "resolved", func() bool { return x.Stats().PacketsOut == 1 })
			bb.SetBytes(int64(len(batch[0]) - link.Headroom))
			bb.ReportAllocs()
			bb.ResetTimer()
			for sent := 0; sent < bb.N; {
				n := min(len(batch), bb.N-sent)
				if err := x.Send(batch[:n]); err != nil {
					bb.Fatal(err)
				}
				recv(n)
				sent += n
			}
			bb.StopTimer()
			bb.ReportMetric(float64(bb.N)/bb.Elapsed().Seconds(), "pkt/s")
			if s := y.Stats(); s.PacketsIn != uint64(bb.N)+1 {
				bb.Fatalf("received %d packets, want %d", s.PacketsIn, bb.N+1)
			}
		})
	}
}

// TestResolveAhead: Resolve finds an on-link address's MAC address before
// anything is sent there, queueing nothing, as the kernel resolves a RoCE
// destination when a QP moves to RTR; the link's own addresses and
// addresses off its subnets are not asked for.
func TestResolveAhead(t *testing.T) {
	needRoot(t)
	l, _ := beside(t, Config{})
	receiveAll(t, l) // the replies are read as Receive reads them
	solicits := l.Stats().Solicits
	for _, a := range []string{"10.9.0.5", "fd00::5", "10.8.0.1", "fe80::1"} {
		l.Resolve(netip.MustParseAddr(a))
	}
	if s := l.Stats().Solicits; s != solicits {
		t.Fatalf("own and off-link addresses: %d solicitations sent", s-solicits)
	}
	for _, a := range []string{"10.9.0.1", "fd00::1"} {
		dst := netip.MustParseAddr(a)
		l.Resolve(dst)
		l.Resolve(dst) // once is enough
		eventually(t, 3*time.Second, a+" resolved", func() bool {
			_, ok := l.lookup(dst)
			return ok
		})
	}
	if s := l.Stats(); s.Solicits-solicits != 2 || s.Queued != 0 {
		t.Errorf("%d solicitations, %d packets queued; want 2 and none", s.Solicits-solicits, s.Queued)
	}
}

// TestLinkLocalAddr: Config.LinkLocal puts the MAC's link-local address
// first, once, and below an MTU of 1280 (no IPv6, as on Linux) leaves it
// out rather than refusing the MTU.
func TestLinkLocalAddr(t *testing.T) {
	needRoot(t)
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 7}
	ll := netip.MustParseAddr("fe80::ff:fe00:7")
	for _, tc := range []struct {
		c    Config
		want []netip.Addr
	}{
		{Config{Addrs: []netip.Prefix{prefix("10.9.0.5/24")}}, []netip.Addr{ll, netip.MustParseAddr("10.9.0.5")}},
		{Config{Addrs: []netip.Prefix{prefix("10.9.0.5/24"), prefix("fe80::ff:fe00:7/64")}}, []netip.Addr{netip.MustParseAddr("10.9.0.5"), ll}},
		{Config{Addrs: []netip.Prefix{prefix("10.9.0.5/24")}, MTU: 1000}, []netip.Addr{netip.MustParseAddr("10.9.0.5")}},
	} {
		tc.c.MAC, tc.c.LinkLocal = mac, true
		l := open(t, tc.c)
		if got := l.Addrs(); !slices.Equal(got, tc.want) {
			t.Errorf("MTU %d, addresses %v: Addrs() = %v, want %v", tc.c.MTU, tc.c.Addrs, got, tc.want)
		}
		l.Close()
	}
}

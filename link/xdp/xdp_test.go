//go:build linux

package xdp_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/internal/xdpprog"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/netns"
	"github.com/gorxe/gorxe/link/linktest"
	"github.com/gorxe/gorxe/link/xdp"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// open opens an xdp link on ifname inside ns, closed when t ends.
func open(t *testing.T, ns *netns.NS, c xdp.Config) *xdp.Link {
	t.Helper()
	var l *xdp.Link
	if err := ns.Do(func() (err error) {
		l, err = xdp.Open(c)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestLinktest runs the link conformance suite between two namespaces on
// a veth pair, the XDP program in driver and in generic mode, at MTU 1500
// (each frame in one UMEM frame) and 9000 (multi-buffer), with one
// receive queue and with two, over IPv4 and IPv6.
func TestLinktest(t *testing.T) {
	for _, mode := range []xdpprog.Mode{xdpprog.ModeDriver, xdpprog.ModeGeneric} {
		for _, mtu := range []int{1500, link.MaxPacket} {
			for _, queues := range []int{1, 2} {
				p := netns.NewPairQueues(t, mtu, queues)
				for _, fam := range []struct {
					name string
					a, b netip.Addr
				}{{"IPv4", p.A4, p.B4}, {"IPv6", p.A6, p.B6}} {
					t.Run(mode.String()+"/mtu"+itoa(mtu)+"/queues"+itoa(queues)+"/"+fam.name, func(t *testing.T) {
						linktest.Run(t, func(t *testing.T) (link.Link, link.Link, netip.Addr, netip.Addr) {
							a := open(t, p.A, xdp.Config{Interface: p.IfA, Mode: mode})
							b := open(t, p.B, xdp.Config{Interface: p.IfB, Mode: mode})
							if ids, _ := b.Queues(); len(ids) != queues {
								t.Fatalf("bound queues %v, want %d", ids, queues)
							}
							return a, b, fam.a, fam.b
						})
					})
				}
			}
		}
	}
}

func itoa(n int) string {
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// TestSteadyStateAllocs: once running, sending a batch and receiving it
// allocates nothing.
func TestSteadyStateAllocs(t *testing.T) {
	p := netns.NewPair(t, 1500)
	a := open(t, p.A, xdp.Config{Interface: p.IfA})
	b := open(t, p.B, xdp.Config{Interface: p.IfB})
	const n = 32
	out := make([][]byte, n)
	in := make([][]byte, n)
	sizes := make([]int, n)
	for i := range out {
		out[i] = make([]byte, link.BufferSize)
		in[i] = make([]byte, link.BufferSize)
		out[i] = out[i][:link.Headroom+udpPacket(out[i][link.Headroom:], p.A4, p.B4, 64)]
	}
	round := func() {
		if err := a.Send(out); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < n; {
			k, err := b.Receive(in[got:], sizes[got:])
			if err != nil {
				t.Fatal(err)
			}
			got += k
		}
	}
	round() // warm up: the first packets find their neighbour, grow slices
	if allocs := testing.AllocsPerRun(50, round); allocs != 0 {
		t.Errorf("%.1f allocations a round of %d packets", allocs, n)
	}
}

// udpPacket writes an IPv4 packet from src to dst, UDP to the RoCE port
// with a payload of n bytes, into b and returns its length. The link
// looks no deeper than the UDP port.
func udpPacket(b []byte, src, dst netip.Addr, n int) int {
	total := 20 + 8 + n
	clear(b[:total])
	b[0], b[8], b[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(b[2:], uint16(total))
	s, d := src.As4(), dst.As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	binary.BigEndian.PutUint16(b[20:], 49152)
	binary.BigEndian.PutUint16(b[22:], 4791)
	binary.BigEndian.PutUint16(b[24:], uint16(8+n))
	return total
}

// TestTwoQueues: on an interface with two receive queues the link binds
// both, and RoCE packets that a kernel spreads over them (one UDP socket
// per source port) all arrive.
func TestTwoQueues(t *testing.T) {
	a, b := netns.New(t), netns.New(t)
	q2 := []string{"numtxqueues", "2", "numrxqueues", "2"}
	a.IP(t, append(append(append([]string{"link", "add", "xa"}, q2...), "type", "veth", "peer", "name", "xb", "netns", b.Name), q2...)...)
	for _, end := range []struct {
		ns       *netns.NS
		dev, adr string
	}{{a, "xa", "10.251.0.1/24"}, {b, "xb", "10.251.0.2/24"}} {
		end.ns.IP(t, "addr", "add", end.adr, "dev", end.dev)
		end.ns.IP(t, "link", "set", end.dev, "up")
	}
	l := open(t, b, xdp.Config{Interface: "xb"})
	if ids, _ := l.Queues(); len(ids) != 2 {
		t.Fatalf("bound queues %v, want 0 and 1", ids)
	}
	const n = 256
	if err := a.Do(func() error {
		for i := range n {
			c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(10, 251, 0, 2), Port: 4791})
			if err != nil {
				return err
			}
			c.Write([]byte(fmt.Sprintf("packet %d", i)))
			c.Close()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	bufs, sizes := make([][]byte, n), make([]int, n)
	for i := range bufs {
		bufs[i] = make([]byte, link.BufferSize)
	}
	deadline := time.Now().Add(5 * time.Second)
	got := 0
	for got < n && time.Now().Before(deadline) {
		k, err := l.TryReceive(bufs[got:], sizes[got:])
		if err != nil {
			t.Fatal(err)
		}
		if got += k; k == 0 {
			l.WaitReceiveFor(10 * time.Millisecond)
		}
	}
	ids, received := l.Queues()
	t.Logf("queues %v received %v", ids, received)
	if got != n {
		t.Fatalf("received %d of %d packets (per queue %v)", got, n, received)
	}
	if received[0] == 0 || received[1] == 0 {
		t.Errorf("the kernel put every packet on one queue (%v): the test shows nothing of the second", received)
	}
}

// TestOpenErrors: what a user gets wrong is one line that says what.
func TestOpenErrors(t *testing.T) {
	p := netns.NewPair(t, 1500)
	try := func(c xdp.Config) error {
		return p.A.Do(func() error {
			l, err := xdp.Open(c)
			if err == nil {
				l.Close()
			}
			return err
		})
	}
	for _, c := range []struct {
		name string
		cfg  xdp.Config
		want string
	}{
		{"no such interface", xdp.Config{Interface: "nonesuch0"}, `interface "nonesuch0"`},
		{"loopback", xdp.Config{Interface: "lo"}, "not Ethernet"},
		{"queue out of range", xdp.Config{Interface: p.IfA, Queues: []int{7}}, "queue 7"},
	} {
		if err := try(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	// A second link on the same interface finds the XDP hook taken.
	l := open(t, p.A, xdp.Config{Interface: p.IfA})
	if err := try(xdp.Config{Interface: p.IfA}); err == nil || !strings.Contains(err.Error(), "XDP") {
		t.Errorf("a second link on %s: %v", p.IfA, err)
	}
	l.Close()
	p.A.IP(t, "link", "set", p.IfA, "down")
	if err := try(xdp.Config{Interface: p.IfA}); err == nil || !strings.Contains(err.Error(), "is down") {
		t.Errorf("a down interface: %v", err)
	}
}

// TestLineRate: the link reports the interface's speed from the ethtool
// ioctl, in the caller's namespace (link.LineRater): veth says 10 Gb/s.
func TestLineRate(t *testing.T) {
	p := netns.NewPair(t, 1500)
	l := open(t, p.A, xdp.Config{Interface: p.IfA})
	var lr link.LineRater = l
	if got := lr.LineRate(); got != 10_000_000_000 {
		t.Fatalf("LineRate = %d, want veth's 10 Gb/s", got)
	}
}

// TestRouteChange: the link remembers the last destination's next hop
// between sends, and still sees the kernel's tables change: once A's
// route to B is gone, sends to B are dropped as having no route within
// the resolver's TTL and a tick.
func TestRouteChange(t *testing.T) {
	p := netns.NewPair(t, 1500)
	a := open(t, p.A, xdp.Config{Interface: p.IfA})
	b := open(t, p.B, xdp.Config{Interface: p.IfB})
	pkt := make([]byte, link.BufferSize)
	pkt = pkt[:link.Headroom+udpPacket(pkt[link.Headroom:], p.A4, p.B4, 64)]
	in := [][]byte{make([]byte, link.BufferSize)}
	sizes := []int{0}
	for range 3 {
		if err := a.Send([][]byte{pkt}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Receive(in, sizes); err != nil {
			t.Fatal(err)
		}
	}
	if n := linktest.Counter(a, "xdp_drop_no_route"); n != 0 {
		t.Fatalf("xdp_drop_no_route = %d with the route in place", n)
	}
	prefix := netip.PrefixFrom(p.B4, 24).Masked()
	p.A.IP(t, "route", "del", prefix.String(), "dev", p.IfA)
	deadline := time.Now().Add(3 * time.Second)
	for linktest.Counter(a, "xdp_drop_no_route") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("sends still leave 3 s after the route to B went")
		}
		if err := a.Send([][]byte{pkt}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHeldStayFirst: a packet to a destination whose earlier packets are
// still held for resolution waits behind them, even though the hop is
// known by now; sent at once, it would overtake them, and an RC
// responder NAKs what comes out of order.
func TestHeldStayFirst(t *testing.T) {
	p := netns.NewPair(t, 1500)
	a := open(t, p.A, xdp.Config{Interface: p.IfA})
	b := open(t, p.B, xdp.Config{Interface: p.IfB})
	packet := func(mark byte) []byte {
		pkt := make([]byte, link.BufferSize)
		n := udpPacket(pkt[link.Headroom:], p.A4, p.B4, 64)
		pkt[link.Headroom+28] = mark
		return pkt[:link.Headroom+n]
	}
	in := make([][]byte, 2)
	for i := range in {
		in[i] = make([]byte, link.BufferSize)
	}
	sizes := make([]int, len(in))
	receive := func(n int) []byte {
		var marks []byte
		for len(marks) < n {
			k, err := b.Receive(in[:n-len(marks)], sizes)
			if err != nil {
				t.Fatal(err)
			}
			for i := range k {
				marks = append(marks, in[i][link.Headroom+28])
			}
		}
		return marks
	}
	// B's hop resolved, and the link's recent destination.
	if err := a.Send([][]byte{packet(0)}); err != nil {
		t.Fatal(err)
	}
	receive(1)
	for range 5 {
		xdp.HoldUnwoken(a, p.B4, packet(1))
		if err := a.Send([][]byte{packet(2)}); err != nil {
			t.Fatal(err)
		}
		if got := receive(2); !slices.Equal(got, []byte{1, 2}) {
			t.Fatalf("B received %v, want the held packet 1 before 2", got)
		}
	}
}

// TestInterfaceDrops: frames the interface's driver drops instead of
// handing them to the link show as if_rx_dropped, counted from the link's
// opening. Here the link read none and its fill ring ran dry; virtio_net
// also drops there the first large frames after the program is attached.
func TestInterfaceDrops(t *testing.T) {
	p := netns.NewPair(t, 1500)
	a := open(t, p.A, xdp.Config{Interface: p.IfA})
	b := open(t, p.B, xdp.Config{Interface: p.IfB})
	if n := linktest.Counter(b, "if_rx_dropped"); n != 0 {
		t.Fatalf("if_rx_dropped = %d before anything was sent", n)
	}
	pkt := make([]byte, link.BufferSize)
	pkt = pkt[:link.Headroom+udpPacket(pkt[link.Headroom:], p.A4, p.B4, 64)]
	const n = 10000
	for range n {
		if err := a.Send([][]byte{pkt}); err != nil {
			t.Fatal(err)
		}
	}
	a.Flush()
	in := make([][]byte, 64)
	for i := range in {
		in[i] = make([]byte, link.BufferSize)
	}
	sizes := make([]int, len(in))
	got := 0
	for {
		k, err := b.TryReceive(in, sizes)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			break
		}
		got += k
	}
	if d := linktest.Counter(b, "if_rx_dropped"); got+int(d) != n || d == 0 {
		t.Errorf("%d sent, %d received, if_rx_dropped %d", n, got, d)
	}
	// A link opened later counts from its own start.
	b.Close()
	if d := linktest.Counter(open(t, p.B, xdp.Config{Interface: p.IfB}), "if_rx_dropped"); d != 0 {
		t.Errorf("if_rx_dropped = %d on a link just opened where another's frames were dropped", d)
	}
}

// TestMulticast: a link that joined a multicast group receives what the
// other sends to it, and its interface is a member of the group in the
// kernel (the address filter, IGMP or MLD); after LeaveGroup neither is.
func TestMulticast(t *testing.T) {
	p := netns.NewPair(t, 1500)
	a := open(t, p.A, xdp.Config{Interface: p.IfA})
	b := open(t, p.B, xdp.Config{Interface: p.IfB})
	for _, fam := range []struct {
		name       string
		src, group netip.Addr
		mac        string
	}{
		{"IPv4", p.A4, netip.MustParseAddr("239.1.2.3"), "01:00:5e:01:02:03"},
		{"IPv6", p.A6, netip.MustParseAddr("ff0e::1:2"), "33:33:00:01:00:02"},
	} {
		t.Run(fam.name, func(t *testing.T) {
			maddr := func() string {
				out, err := exec.Command("ip", "-n", p.B.Name, "maddr", "show", "dev", p.IfB).CombinedOutput()
				if err != nil {
					t.Fatalf("ip maddr: %v: %s", err, out)
				}
				return string(out)
			}
			if err := b.JoinGroup(fam.group); err != nil {
				t.Fatal(err)
			}
			if m := maddr(); !strings.Contains(m, fam.mac) || !strings.Contains(m, fam.group.String()) {
				t.Fatalf("%s after the join has no %s and %s:\n%s", p.IfB, fam.mac, fam.group, m)
			}
			f := wire.Frame{
				IP:      wire.IPFields{Src: fam.src, Dst: fam.group, HopLimit: 64},
				SrcPort: 49152, DstPort: wire.UDPPort,
				Headers: wire.Headers{BTH: bth.Fields{Opcode: bth.UDSendOnly, PKey: bth.DefaultPKey, DestQP: bth.MulticastQPN}},
				Payload: make([]byte, 64),
			}
			pkt, err := f.Append(make([]byte, link.Headroom))
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Send([][]byte{pkt}); err != nil {
				t.Fatal(err)
			}
			in, sizes := [][]byte{make([]byte, link.BufferSize)}, []int{0}
			if _, err := b.Receive(in, sizes); err != nil {
				t.Fatal(err)
			}
			if got := in[0][link.Headroom : link.Headroom+sizes[0]]; string(got) != string(pkt[link.Headroom:]) {
				t.Fatalf("received\n% x\nwant\n% x", got, pkt[link.Headroom:])
			}
			// A member gets what it sends to the group itself, as a
			// host's kernel loops it back; a Receive waiting wakes.
			own := wire.Frame{IP: wire.IPFields{Src: p.B4, Dst: fam.group, HopLimit: 64}, SrcPort: 49153, DstPort: wire.UDPPort, Headers: f.Headers, Payload: f.Payload}
			if fam.name == "IPv6" {
				own.IP.Src = p.B6
			}
			mine, err := own.Append(make([]byte, link.Headroom))
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				_, err := b.Receive(in, sizes)
				got <- err
			}()
			time.Sleep(50 * time.Millisecond) // Receive is waiting
			looped := linktest.Counter(b, "xdp_looped")
			if err := b.Send([][]byte{mine}); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("a Receive waiting did not wake for the link's own packet to its group")
			}
			if got := in[0][link.Headroom : link.Headroom+sizes[0]]; string(got) != string(mine[link.Headroom:]) || linktest.Counter(b, "xdp_looped") != looped+1 {
				t.Fatalf("received\n% x\nwant its own\n% x", got, mine[link.Headroom:])
			}
			if err := b.LeaveGroup(fam.group); err != nil {
				t.Fatal(err)
			}
			if m := maddr(); strings.Contains(m, fam.group.String()) {
				t.Fatalf("%s after the leave is still in %s:\n%s", p.IfB, fam.group, m)
			}
			before := linktest.Counter(b, "xdp_drop_not_for_us")
			if err := a.Send([][]byte{pkt}); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(3 * time.Second)
			for linktest.Counter(b, "xdp_drop_not_for_us") == before {
				if time.Now().After(deadline) {
					t.Fatal("a packet to the group left is neither received nor dropped")
				}
				if n, _ := b.TryReceive(in, sizes); n > 0 {
					t.Fatal("received a packet to a group left")
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	if err := b.LeaveGroup(netip.MustParseAddr("239.1.2.3")); err == nil {
		t.Error("left a group not joined")
	}
	if err := b.JoinGroup(p.B4); err == nil {
		t.Error("joined a unicast address")
	}
}

// TestLinkLocal: the link takes the interface's link-local addresses as
// GIDs, as rxe's table has its default GID, and carries RoCE between
// link-local addresses (the conformance suite); Resolve has the kernel
// resolve a neighbour nothing has been sent to yet.
func TestLinkLocal(t *testing.T) {
	p := netns.NewPair(t, 1500)
	llA, llB := netip.MustParseAddr("fe80::a"), netip.MustParseAddr("fe80::b")
	p.A.IP(t, "-6", "addr", "add", llA.String()+"/64", "dev", p.IfA, "nodad")
	p.B.IP(t, "-6", "addr", "add", llB.String()+"/64", "dev", p.IfB, "nodad")
	t.Run("Resolve", func(t *testing.T) {
		a := open(t, p.A, xdp.Config{Interface: p.IfA})
		if !slices.Contains(a.Addrs(), llA) {
			t.Fatalf("Addrs() = %v, without %v", a.Addrs(), llA)
		}
		neigh := func() string {
			out, _ := exec.Command("ip", "-n", p.A.Name, "-6", "neigh", "show", llB.String(), "dev", p.IfA).CombinedOutput()
			return string(out)
		}
		if n := neigh(); strings.Contains(n, "lladdr") {
			t.Fatalf("%v known before Resolve: %s", llB, n)
		}
		a.Resolve(llB)
		deadline := time.Now().Add(3 * time.Second)
		for !strings.Contains(neigh(), "lladdr") {
			if time.Now().After(deadline) {
				t.Fatalf("%v not resolved 3 s after Resolve: %q", llB, neigh())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if n := linktest.Counter(a, "xdp_queued_for_neighbor"); n != 0 {
			t.Errorf("xdp_queued_for_neighbor = %d, want 0: nothing was sent", n)
		}
	})
	t.Run("linktest", func(t *testing.T) {
		linktest.Run(t, func(t *testing.T) (link.Link, link.Link, netip.Addr, netip.Addr) {
			return open(t, p.A, xdp.Config{Interface: p.IfA}), open(t, p.B, xdp.Config{Interface: p.IfB}), llA, llB
		})
	})
}

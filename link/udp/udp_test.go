package udp_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/netns"
	"github.com/gorxe/gorxe/link/linktest"
	"github.com/gorxe/gorxe/link/udp"
	"github.com/gorxe/gorxe/wire"
)

// The conformance suite sends to wire.UDPPort, so each pair binds both
// links to 4791, on two loopback addresses or in two namespaces.

func TestLinktestIPv4Loopback(t *testing.T) {
	e := newEnv(t)
	a4, b4 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	linktest.Run(t, func(t *testing.T) (link.Link, link.Link, netip.Addr, netip.Addr) {
		return e.open(t, udp.Config{Addr: a4}), e.open(t, udp.Config{Addr: b4}), a4, b4
	})
}

func TestLinktestVeth(t *testing.T) {
	p := netns.NewPair(t, link.MaxPacket)
	for _, tc := range []struct {
		name   string
		a, b   netip.Addr
		skipIf bool
	}{
		{"IPv4", p.A4, p.B4, false},
		{"IPv6", p.A6, p.B6, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.skipIf {
				t.Skip("linktest builds packets with source ports 0xc000|PSN, but a kernel UDP socket sends " +
					"every packet from its bound port (link.SourcePorter): over IPv6, where the link shows the " +
					"real header, the received packets differ from the sent ones and their ICRC is invalid. " +
					"Needs linktest to build packets with the sending link's SourcePort; TestIPv6ICRC covers it here")
			}
			linktest.Run(t, func(t *testing.T) (link.Link, link.Link, netip.Addr, netip.Addr) {
				a := env{p.A}.open(t, udp.Config{Addr: tc.a})
				b := env{p.B}.open(t, udp.Config{Addr: tc.b})
				return a, b, tc.a, tc.b
			})
		})
	}
}

func TestOpen(t *testing.T) {
	e := newEnv(t)
	lo := netip.MustParseAddr("127.0.0.1")
	l := e.open(t, udp.Config{Addr: lo, Port: e.freePort(t, lo)})
	if got := l.Addrs(); len(got) != 1 || got[0] != lo {
		t.Errorf("Addrs() = %v, want [%v]", got, lo)
	}
	// Loopback's MTU is 65536: the link caps it.
	if got := l.MTU(); got != link.MaxPacket {
		t.Errorf("MTU() = %d, want %d", got, link.MaxPacket)
	}
	if l.Flags()&link.FlagNoIPv4ICRC == 0 {
		t.Errorf("Flags() = %v, want FlagNoIPv4ICRC", l.Flags())
	}
	err := e.do(func() error {
		d, err := udp.Open(udp.Config{Addr: lo, Port: l.SourcePort()})
		if err == nil {
			d.Close()
		}
		return err
	})
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("second link on %v:%d: %v, want EADDRINUSE", lo, l.SourcePort(), err)
	}
}

func TestOpenErrors(t *testing.T) {
	for _, c := range []udp.Config{
		{},
		{Addr: netip.IPv4Unspecified()},
		{Addr: netip.IPv6Unspecified()},
		{Addr: netip.MustParseAddr("224.0.0.1")},
		{Addr: netip.MustParseAddr("127.0.0.1"), MTU: 100},
		{Addr: netip.MustParseAddr("127.0.0.1"), MTU: link.MaxPacket + 1},
	} {
		if l, err := udp.Open(c); err == nil {
			l.Close()
			t.Errorf("Open(%+v) succeeded", c)
		}
	}
}

// TestIPv6ICRC checks that a packet the device builds arrives over IPv6
// byte for byte, with a valid ICRC: the socket reports every field the
// ICRC covers, and those it does not are masked.
func TestIPv6ICRC(t *testing.T) {
	for _, tc := range []uint8{0x02, 0x62, 0xb8 | 0x01} {
		p := netns.NewPair(t, 0)
		a := env{p.A}.open(t, udp.Config{Addr: p.A6})
		b := env{p.B}.open(t, udp.Config{Addr: p.B6})
		want := packets(t, a, b, 1, 8, 200, tc)
		if err := a.Send(want); err != nil {
			t.Fatal(err)
		}
		for i, got := range collect(t, b, len(want)) {
			if !bytes.Equal(got, want[i][link.Headroom:]) {
				t.Fatalf("tc %#x: received packet differs\n got %x\nwant %x", tc, got, want[i][link.Headroom:])
			}
			if err := parse(t, got).CheckICRC(); err != nil {
				t.Fatalf("tc %#x: %v", tc, err)
			}
		}
	}
}

// TestBatch sends one full batch of 1 KiB packets in a single Send and
// expects every one, in order: over loopback, and as root over a veth.
func TestBatch(t *testing.T) {
	run := func(t *testing.T, a, b *udp.Link) {
		want := packets(t, a, b, 100, link.BatchSize, 1024, 0x02)
		if err := a.Send(want); err != nil {
			t.Fatal(err)
		}
		receiveSame(t, b, want)
		if s := a.Stats(); s.Sent != link.BatchSize || s.SendErrors != 0 {
			t.Errorf("sender Stats = %+v", s)
		}
		if s := b.Stats(); s.Received != link.BatchSize || s.Truncated != 0 {
			t.Errorf("receiver Stats = %+v", s)
		}
	}
	for _, lo := range []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()} {
		t.Run("loopback/"+lo.String(), func(t *testing.T) {
			a, b := loopPair(t, newEnv(t), lo)
			run(t, a, b)
		})
	}
	t.Run("veth", func(t *testing.T) {
		p := netns.NewPair(t, 0)
		for _, fam := range [][2]netip.Addr{{p.A4, p.B4}, {p.A6, p.B6}} {
			a := env{p.A}.open(t, udp.Config{Addr: fam[0]})
			b := env{p.B}.open(t, udp.Config{Addr: fam[1]})
			run(t, a, b)
		}
	})
}

// TestSendErrors sends batches that mix packets the kernel refuses or
// nobody receives with packets for a listening peer: the peer gets all of
// its packets, from this Send and the next ones.
func TestSendErrors(t *testing.T) {
	e := newEnv(t)
	lo := netip.MustParseAddr("127.0.0.1")
	a, b := loopPair(t, e, lo)
	silent := e.freePort(t, lo) // ICMP port unreachable comes back

	var want, batch [][]byte
	add := func(f wire.Frame, good bool) {
		buf := build(t, f)
		batch = append(batch, buf)
		if good {
			want = append(want, buf)
		}
	}
	refused := 0
	for round := range 3 {
		batch = batch[:0]
		base := uint32(round * 100)
		add(frame(lo, lo, a.SourcePort(), silent, base, 64, 0), false)
		add(frame(lo, lo, a.SourcePort(), b.SourcePort(), base+1, 64, 0), true)
		if e.ns != nil {
			// A namespace with only a loopback has no route anywhere else:
			// sendmmsg fails on this datagram with ENETUNREACH.
			far := netip.MustParseAddr("192.0.2.1")
			add(frame(lo, far, a.SourcePort(), wire.UDPPort, base+2, 64, 0), false)
			refused++
		}
		add(frame(lo, lo, a.SourcePort(), b.SourcePort(), base+3, 64, 0), true)
		// Not a packet the link can send: IPv6 on an IPv4 link.
		add(frame(netip.IPv6Loopback(), netip.IPv6Loopback(), a.SourcePort(), b.SourcePort(), base+4, 64, 0), false)
		refused++
		add(frame(lo, lo, a.SourcePort(), b.SourcePort(), base+5, 64, 0), true)
		if err := a.Send(batch); err != nil {
			t.Fatalf("round %d: Send: %v", round, err)
		}
	}
	receiveSame(t, b, want)
	if s := a.Stats(); s.SendErrors != uint64(refused) || s.Sent != uint64(len(want)+3) {
		t.Errorf("Stats = %+v, want %d send errors and %d sent", s, refused, len(want)+3)
	}
}

// TestReceiveTruncated sends a datagram too large for a buffer between
// two good ones: it is dropped and counted, and the good ones arrive.
func TestReceiveTruncated(t *testing.T) {
	e := newEnv(t)
	lo := netip.MustParseAddr("127.0.0.1")
	_, b := loopPair(t, e, lo)
	c := e.listen(t, "udp4", netip.AddrPortFrom(lo, 0))
	to := netip.AddrPortFrom(lo, b.SourcePort())
	sport := uint16(c.LocalAddr().(*net.UDPAddr).Port)

	var want [][]byte
	for i, size := range []int{100, link.MaxPacket, 300} {
		buf := build(t, frame(lo, lo, sport, b.SourcePort(), uint32(i), size, 0))
		if i != 1 {
			want = append(want, buf)
		}
		sendPayload(t, c, to, buf)
	}
	receiveSame(t, b, want)
	if s := b.Stats(); s.Truncated != 1 || s.Received != 2 {
		t.Errorf("Stats = %+v, want 1 truncated, 2 received", s)
	}
}

// TestECN sends from plain sockets that mark their datagrams CE, and
// from a link, and checks the TOS byte the receiving link reports.
func TestECN(t *testing.T) {
	for _, fam := range []struct {
		name, network string
		addr          netip.Addr
		setTOS        func(*net.UDPConn, int) error
	}{
		{"IPv4", "udp4", netip.MustParseAddr("127.0.0.1"), func(c *net.UDPConn, v int) error { return ipv4.NewConn(c).SetTOS(v) }},
		{"IPv6", "udp6", netip.IPv6Loopback(), func(c *net.UDPConn, v int) error { return ipv6.NewConn(c).SetTrafficClass(v) }},
	} {
		t.Run(fam.name, func(t *testing.T) {
			e := newEnv(t)
			a, b := loopPair(t, e, fam.addr)
			c := e.listen(t, fam.network, netip.AddrPortFrom(fam.addr, 0))
			to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(fam.addr, b.SourcePort()))
			sport := uint16(c.LocalAddr().(*net.UDPAddr).Port)
			hdr := wire.IPv4Len + wire.UDPLen
			if fam.addr.Is6() {
				hdr = wire.IPv6Len + wire.UDPLen
			}
			// A router marked congestion: CE, with a DSCP.
			for i, tos := range []int{0x03, 0x63, 0x01, 0x00} {
				if err := fam.setTOS(c, tos); err != nil {
					t.Fatal(err)
				}
				buf := build(t, frame(fam.addr, fam.addr, sport, b.SourcePort(), uint32(i), 64, 0))
				if _, err := c.WriteToUDP(buf[link.Headroom+hdr:], to); err != nil {
					t.Fatal(err)
				}
				got := parse(t, collect(t, b, 1)[0])
				if got.TrafficClass() != uint8(tos) {
					t.Errorf("sent TOS %#x, received %#x", tos, got.TrafficClass())
				}
			}
			// What a link sends: the device's DSCP, ECT(0) unless it chose
			// another ECN codepoint.
			for i, tc := range []struct{ sent, want uint8 }{
				{0x00, 0x02}, {0x02, 0x02}, {0x60, 0x62}, {0x62, 0x62}, {0x01, 0x01}, {0xbb, 0xbb},
			} {
				if err := a.Send(packets(t, a, b, uint32(i), 1, 64, tc.sent)); err != nil {
					t.Fatal(err)
				}
				got := parse(t, collect(t, b, 1)[0])
				if got.TrafficClass() != tc.want {
					t.Errorf("device TOS %#x: received %#x, want %#x", tc.sent, got.TrafficClass(), tc.want)
				}
			}
		})
	}
}

// TestSynthesizedHeader checks the header a receiving link writes, field
// by field, for a packet from a link.
func TestSynthesizedHeader(t *testing.T) {
	e := newEnv(t)
	lo := netip.MustParseAddr("127.0.0.1")
	a, b := loopPair(t, e, lo)
	want := packets(t, a, b, 9, 1, 33, 0x02)
	if err := a.Send(want); err != nil {
		t.Fatal(err)
	}
	got := collect(t, b, 1)[0]
	// The sender built ID 0, DF, TTL 64 and a zero UDP checksum, as the
	// receiver writes them: the packets are identical.
	if !bytes.Equal(got, want[0][link.Headroom:]) {
		t.Fatalf("received\n %x\nwant\n %x", got, want[0][link.Headroom:])
	}
	if sum := ipv4Sum(got[:wire.IPv4Len]); sum != 0xffff {
		t.Errorf("IPv4 header checksum does not verify: sum %#x", sum)
	}
	// Over IPv4 the receiver cannot know the ID, but with the one the
	// link sends the ICRC checks.
	if err := parse(t, got).CheckICRC(); err != nil {
		t.Errorf("ICRC: %v", err)
	}
}

func ipv4Sum(h []byte) uint16 {
	var s uint32
	for i := 0; i < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

func TestCloseTwice(t *testing.T) {
	e := newEnv(t)
	lo := netip.MustParseAddr("127.0.0.1")
	l := e.open(t, udp.Config{Addr: lo, Port: e.freePort(t, lo)})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("second Close: %v, want %v", err, link.ErrClosed)
	}
}

// TestIPv6ZeroChecksum: Linux rxe sends RoCE v2 over IPv6 with a zero UDP
// checksum; the link must take such datagrams, which a plain IPv6 socket
// drops.
func TestIPv6ZeroChecksum(t *testing.T) {
	e := newEnv(t)
	addr := netip.IPv6Loopback()
	_, b := loopPair(t, e, addr)
	c := e.listen(t, "udp6", netip.AddrPortFrom(addr, 0))
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_TX, 1) // send a zero checksum, as rxe
	})
	if serr != nil {
		t.Fatal(serr)
	}
	to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, b.SourcePort()))
	sport := uint16(c.LocalAddr().(*net.UDPAddr).Port)
	buf := build(t, frame(addr, addr, sport, b.SourcePort(), 7, 64, 0))
	if _, err := c.WriteToUDP(buf[link.Headroom+wire.IPv6Len+wire.UDPLen:], to); err != nil {
		t.Fatal(err)
	}
	got := parse(t, collect(t, b, 1)[0])
	if got.BTH.PSN() != 7 {
		t.Fatalf("received PSN %d, want 7", got.BTH.PSN())
	}
	if err := got.CheckICRC(); err != nil {
		t.Fatal(err)
	}
}

// TestLinkLocal opens links on IPv6 link-local addresses, one zone given
// by interface name and one by index, as net.ParseIP's callers may, and
// sends between them: the link must bind in the zone and send to the
// peer's link-local address through it.
func TestLinkLocal(t *testing.T) {
	p := netns.NewPair(t, 0)
	llA, llB := netip.MustParseAddr("fe80::a"), netip.MustParseAddr("fe80::b")
	p.A.IP(t, "-6", "addr", "add", llA.String()+"/64", "dev", p.IfA, "nodad")
	p.B.IP(t, "-6", "addr", "add", llB.String()+"/64", "dev", p.IfB, "nodad")
	var ifB *net.Interface
	if err := p.B.Do(func() (err error) { ifB, err = net.InterfaceByName(p.IfB); return err }); err != nil {
		t.Fatal(err)
	}
	p.A.IP(t, "neigh", "replace", llB.String(), "lladdr", ifB.HardwareAddr.String(), "dev", p.IfA, "nud", "permanent")
	a := env{p.A}.open(t, udp.Config{Addr: llA.WithZone(p.IfA)})
	b := env{p.B}.open(t, udp.Config{Addr: llB.WithZone(fmt.Sprint(ifB.Index))})
	want := packets(t, a, b, 1, 4, 100, 0x02)
	if err := a.Send(want); err != nil {
		t.Fatal(err)
	}
	for i, got := range collect(t, b, len(want)) {
		sameRoCE(t, got, want[i][link.Headroom:])
		if err := parse(t, got).CheckICRC(); err != nil {
			t.Fatal(err)
		}
	}
	if s := a.Stats(); s.SendErrors != 0 {
		t.Fatalf("sender Stats = %+v", s)
	}
}

// TestSendWrongFamily: an IPv6 link refuses an IPv4 packet as an IPv4
// link refuses an IPv6 one (TestSendErrors): counted as a send error, and
// the packets around it go out.
func TestSendWrongFamily(t *testing.T) {
	e := newEnv(t)
	lo6 := netip.IPv6Loopback()
	a, b := loopPair(t, e, lo6)
	good := func(psn uint32) []byte { return build(t, frame(lo6, lo6, a.SourcePort(), b.SourcePort(), psn, 64, 0)) }
	lo4 := netip.MustParseAddr("127.0.0.1")
	want := [][]byte{good(1), good(3)}
	batch := [][]byte{want[0], build(t, frame(lo4, lo4, a.SourcePort(), b.SourcePort(), 2, 64, 0)), want[1]}
	if err := a.Send(batch); err != nil {
		t.Fatal(err)
	}
	receiveSame(t, b, want)
	if s := a.Stats(); s.SendErrors != 1 || s.Sent != 2 {
		t.Errorf("Stats = %+v, want 1 send error and 2 sent", s)
	}
}

// LoopbackPair: two links on 127.0.0.1 and 127.0.0.2 that share a port,
// and a packet from one reaches the other as it was sent.
func TestLoopbackPair(t *testing.T) {
	ls, err := udp.LoopbackPair(udp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := ls[0], ls[1]
	defer a.Close()
	defer b.Close()
	if a.SourcePort() != b.SourcePort() || a.SourcePort() == 0 {
		t.Fatalf("ports %d and %d", a.SourcePort(), b.SourcePort())
	}
	if a.Addrs()[0] != netip.MustParseAddr("127.0.0.1") || b.Addrs()[0] != netip.MustParseAddr("127.0.0.2") {
		t.Fatalf("addresses %v and %v", a.Addrs(), b.Addrs())
	}
	want := packets(t, a, b, 7, 1, 64, 0)
	if err := a.Send(want); err != nil {
		t.Fatal(err)
	}
	sameRoCE(t, collect(t, b, 1)[0], want[0][link.Headroom:])
}

// TestLoopbackMTU: an address of 127.0.0.0/8 that lo does not list is
// lo's all the same, and a link on it takes lo's MTU, as one on
// 127.0.0.1 does: two programs on one host then agree on the path MTU.
func TestLoopbackMTU(t *testing.T) {
	lo := udp.InterfaceMTU(netip.MustParseAddr("127.0.0.1"))
	if got := udp.InterfaceMTU(netip.MustParseAddr("127.0.0.2")); got != lo {
		t.Fatalf("127.0.0.2's MTU is %d, 127.0.0.1's %d", got, lo)
	}
	if got := udp.InterfaceMTU(netip.MustParseAddr("192.0.2.77")); got != 1500 {
		t.Fatalf("an address no interface has: MTU %d, want 1500", got)
	}
}

// TestAlso: a link with more addresses than one (Config.Also) takes
// packets at each of them, IPv4, IPv6 and a second link-local address,
// with headers that name the address each was sent to, and sends each
// packet from the address its header names, with its traffic class, in
// runs from its first address and from the others alike.
func TestAlso(t *testing.T) {
	p := netns.NewPair(t, 0)
	llA, llB, llA2 := netip.MustParseAddr("fe80::a"), netip.MustParseAddr("fe80::b"), netip.MustParseAddr("fe80::c")
	for _, a := range []netip.Addr{llA, llA2} {
		p.A.IP(t, "-6", "addr", "add", a.String()+"/64", "dev", p.IfA, "nodad")
	}
	p.B.IP(t, "-6", "addr", "add", llB.String()+"/64", "dev", p.IfB, "nodad")
	a := env{p.A}.open(t, udp.Config{Addr: p.A6, Also: []netip.Addr{p.A4, llA.WithZone(p.IfA), llA2.WithZone(p.IfA)}})
	b := env{p.B}.open(t, udp.Config{Addr: p.B6, Also: []netip.Addr{p.B4, llB.WithZone(p.IfB)}})
	if got, want := a.Addrs(), []netip.Addr{p.A6, p.A4, llA, llA2}; !slices.Equal(got, want) {
		t.Fatalf("Addrs() = %v, want %v", got, want)
	}
	port := a.SourcePort()
	var want [][]byte
	psn := uint32(1)
	add := func(src, dst netip.Addr, n, size int, tc uint8) {
		for range n {
			want = append(want, build(t, frame(src, dst, port, port, psn, size, tc)))
			psn++
		}
	}
	add(p.A6, p.B6, 4, 1000, 0) // a run (over IPv6, where the ICRC holds for every segment)
	add(p.A4, p.B4, 2, 100, 0x60)
	add(llA2, llB, 1, 64, 0)
	add(llA, llB, 3, 1000, 0xb8) // a run from an Also address
	add(p.A6, p.B6, 1, 64, 0)
	if err := a.Send(want); err != nil {
		t.Fatal(err)
	}
	got := collect(t, b, len(want))
	// Each address's packets keep their order; across addresses, sockets
	// of their own may reorder them.
	byPSN := func(pkt []byte) uint32 { return uint32(parse(t, pkt).BTH.PSN()) }
	slices.SortFunc(got, func(x, y []byte) int { return int(byPSN(x)) - int(byPSN(y)) })
	for i, g := range got {
		w := want[i][link.Headroom:]
		sameRoCE(t, g, w)
		if gp, wp := parse(t, g), parse(t, w); gp.TrafficClass()&^0x03 != wp.TrafficClass() {
			t.Errorf("packet %d: traffic class %#x, want %#x with ECT", i, gp.TrafficClass(), wp.TrafficClass())
		}
		if err := parse(t, g).CheckICRC(); err != nil {
			t.Errorf("packet %d (%v to %v): %v", i, parse(t, g).Src(), parse(t, g).Dst(), err)
		}
	}
	if s := a.Stats(); s.Sent != uint64(len(want)) || s.SendErrors != 0 || s.Runs != 2 {
		t.Errorf("sender Stats = %+v, want %d sent in two runs and singles", s, len(want))
	}
	// Each run reached its socket whole, and was cut by the link, the Also
	// address's as the first's.
	if s := b.Stats(); s.Joined != 2 || s.Received != uint64(len(want)) {
		t.Errorf("receiver Stats = %+v, want both runs joined and %d packets", s, len(want))
	}
	// And back, to the address each came from.
	var back [][]byte
	for _, g := range got {
		q := parse(t, g)
		back = append(back, build(t, frame(q.Dst(), q.Src(), port, port, byPSN(g), 64, 0)))
	}
	if err := b.Send(back); err != nil {
		t.Fatal(err)
	}
	if n := len(collect(t, a, len(back))); n != len(back) {
		t.Fatalf("%d of %d back", n, len(back))
	}
	// An address given twice, or one that is not this host's, is refused.
	for _, also := range [][]netip.Addr{{p.A6}, {p.A4, p.A4}, {netip.MustParseAddr("192.0.2.1")}} {
		var err error
		p.A.Do(func() error {
			var l *udp.Link
			if l, err = udp.Open(udp.Config{Addr: p.A6, Port: a.SourcePort() + 1, Also: also}); err == nil {
				l.Close()
			}
			return nil
		})
		if err == nil {
			t.Errorf("Open with Also %v: no error", also)
		}
	}
}

// TestAlsoTakesTurns checks that a link reads its sockets in turn: a
// packet to an Also address does not wait behind a backlog at the first
// address, and is handed on with its own destination.
func TestAlsoTakesTurns(t *testing.T) {
	e := newEnv(t)
	lo, lo2 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	a := e.open(t, udp.Config{Addr: lo, Port: e.freePort(t, lo), NoGSO: true})
	b := e.open(t, udp.Config{Addr: lo, Also: []netip.Addr{lo2}, Port: e.freePort(t, lo)})
	const backlog = 3 * link.BatchSize
	pkts := packets(t, a, b, 0, backlog, 64, 0)
	late := build(t, frame(lo, lo2, a.SourcePort(), b.SourcePort(), backlog, 64, 0))
	for i := 0; i < backlog; i += link.BatchSize {
		if err := a.Send(pkts[i : i+link.BatchSize]); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Send([][]byte{late}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // all of them at b's sockets
	r := newReceiver()
	got, lateAt := 0, 0
	for call := 1; got < backlog+1 && call <= 10; call++ {
		n, err := b.Receive(r.bufs, r.sizes)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			pkt := r.bufs[i][link.Headroom : link.Headroom+r.sizes[i]]
			if parse(t, pkt).Dst() == lo2 {
				sameRoCE(t, pkt, late[link.Headroom:])
				lateAt = call
			}
		}
		got += n
	}
	if got != backlog+1 {
		t.Fatalf("received %d of %d packets", got, backlog+1)
	}
	if lateAt == 0 || lateAt > 2 {
		t.Errorf("the packet to the Also address came with Receive call %d, behind a backlog of %d at the first address; want call 1 or 2", lateAt, backlog)
	}
}

// TestSendJoined sends a short packet and a shorter one behind it (a
// request and its ACK) to one peer: Send sends them as two datagrams,
// SendJoined as one, which the peer's link reads whole and cuts into the
// same two packets, the second's IPv4 ICRC computed for the ID the kernel
// gives it (1).
func TestSendJoined(t *testing.T) {
	p := netns.NewPair(t, 0)
	for _, fam := range [][2]netip.Addr{{p.A4, p.B4}, {p.A6, p.B6}} {
		t.Run(fam[0].String(), func(t *testing.T) {
			a := env{p.A}.open(t, udp.Config{Addr: fam[0]})
			b := env{p.B}.open(t, udp.Config{Addr: fam[1]})
			// want returns the pair as the peer must see it when the
			// kernel numbers their IPv4 IDs from id.
			want := func(psn uint32, step uint16) [][]byte {
				var pkts [][]byte
				for k, size := range []int{40, 0} {
					f := frame(fam[0], fam[1], a.SourcePort(), b.SourcePort(), psn+uint32(k), size, 0)
					f.IP.ID = uint16(k) * step
					pkts = append(pkts, build(t, f))
				}
				return pkts
			}
			check := func(got, want [][]byte) {
				t.Helper()
				for i := range want {
					sameRoCE(t, got[i], want[i][link.Headroom:])
				}
				if fam[0].Is6() {
					for _, g := range got {
						if err := parse(t, g).CheckICRC(); err != nil {
							t.Error(err)
						}
					}
				}
			}

			if err := a.Send(want(1, 0)); err != nil {
				t.Fatal(err)
			}
			check(collect(t, b, 2), want(1, 0))
			if sa, sb := a.Stats(), b.Stats(); sa.Sent != 2 || sa.Runs != 0 || sb.Joined != 0 {
				t.Fatalf("Send: sender Stats %+v, receiver %+v; want two datagrams", sa, sb)
			}

			if err := a.SendJoined(want(3, 0)); err != nil {
				t.Fatal(err)
			}
			check(collect(t, b, 2), want(3, 1))
			if sa, sb := a.Stats(), b.Stats(); sa.Sent != 4 || sa.Runs != 1 || sb.Joined != 1 || sb.Received != 4 {
				t.Fatalf("SendJoined: sender Stats %+v, receiver %+v; want one joined datagram", sa, sb)
			}
		})
	}
}

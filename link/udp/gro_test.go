package udp_test

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/internal/pages"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/udp"
	"github.com/gorxe/gorxe/wire"
)

// sendJoined sends the UDP payloads of pkts (each built behind
// link.Headroom, IPv4) from c to to as one UDP GSO datagram, which a
// socket with UDP_GRO on the same host receives whole: every payload but
// the last must be as long as the first.
func sendJoined(t *testing.T, c *net.UDPConn, to netip.AddrPort, pkts [][]byte) {
	t.Helper()
	var b []byte
	seg := 0
	for i, p := range pkts {
		pl := p[link.Headroom+wire.IPv4Len+wire.UDPLen:]
		if i == 0 {
			seg = len(pl)
		}
		b = append(b, pl...)
	}
	oob := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(seg))
	if _, _, err := c.WriteMsgUDPAddrPort(b, oob, to); err != nil {
		t.Fatalf("sending a joined datagram: %v", err)
	}
}

// TestReceiveJoined sends datagrams that hold several RoCE packets (UDP
// GSO from a plain socket, which the kernel hands whole to a socket with
// UDP_GRO) and checks that the link cuts them into the same packets, in
// order, whether they fit the batch or some must wait for the next call;
// and that with NoGRO the kernel cuts them instead.
func TestReceiveJoined(t *testing.T) {
	e := newEnv(t)
	lo := netip.MustParseAddr("127.0.0.1")
	c := e.listen(t, "udp4", netip.AddrPortFrom(lo, 0))
	sport := uint16(c.LocalAddr().(*net.UDPAddr).Port)
	open := func(noGRO bool) *udp.Link {
		return e.open(t, udp.Config{Addr: lo, Port: e.freePort(t, lo), NoGRO: noGRO})
	}
	mk := func(b *udp.Link, first uint32, sizes ...int) [][]byte {
		var pkts [][]byte
		for i, size := range sizes {
			pkts = append(pkts, build(t, frame(lo, lo, sport, b.SourcePort(), first+uint32(i), size, 0)))
		}
		return pkts
	}
	// receive calls TryReceive with n buffers once something waits, and
	// checks it returns want.
	receive := func(b *udp.Link, n int, want [][]byte) {
		t.Helper()
		if ready, err := b.WaitReceiveFor(timeout); !ready || err != nil {
			t.Fatalf("WaitReceiveFor = %v, %v", ready, err)
		}
		r := newReceiver()
		k, err := b.TryReceive(r.bufs[:n], r.sizes[:n])
		if err != nil || k != len(want) {
			t.Fatalf("TryReceive with %d buffers = %d, %v; want %d packets", n, k, err, len(want))
		}
		for i := range want {
			sameRoCE(t, r.bufs[i][link.Headroom:link.Headroom+r.sizes[i]], want[i][link.Headroom:])
		}
	}
	empty := func(b *udp.Link) {
		t.Helper()
		if ready, err := b.WaitReceiveFor(0); ready || err != nil {
			t.Fatalf("WaitReceiveFor with nothing left = %v, %v", ready, err)
		}
	}

	t.Run("alone", func(t *testing.T) {
		b := open(false)
		want := mk(b, 0, 1000, 1000, 1000, 300)
		sendJoined(t, c, netip.AddrPortFrom(lo, b.SourcePort()), want)
		receive(b, link.BatchSize, want)
		empty(b)
		if s := b.Stats(); s.Joined != 1 || s.Received != 4 || s.Truncated != 0 {
			t.Errorf("Stats = %+v, want 1 joined datagram, 4 packets", s)
		}
	})
	t.Run("last in the batch", func(t *testing.T) {
		b := open(false)
		plain, joined := mk(b, 10, 100), mk(b, 11, 1000, 1000, 40)
		sendPayload(t, c, netip.AddrPortFrom(lo, b.SourcePort()), plain[0])
		sendJoined(t, c, netip.AddrPortFrom(lo, b.SourcePort()), joined)
		receive(b, link.BatchSize, append(plain, joined...))
		empty(b)
	})
	t.Run("held for the next calls", func(t *testing.T) {
		b := open(false)
		before, joined, after := mk(b, 20, 100), mk(b, 21, 1000, 1000, 1000, 1000, 1000), mk(b, 26, 100)
		sendPayload(t, c, netip.AddrPortFrom(lo, b.SourcePort()), before[0])
		sendJoined(t, c, netip.AddrPortFrom(lo, b.SourcePort()), joined)
		sendPayload(t, c, netip.AddrPortFrom(lo, b.SourcePort()), after[0])
		all := append(append(append([][]byte{}, before...), joined...), after...)
		// Three datagrams in three buffers: the one after the joined
		// one is read too, so the joined one's later packets, and it,
		// wait for the next calls.
		receive(b, 3, all[:2])
		receive(b, 3, all[2:5]) // held: the wait returns at once
		receive(b, 3, all[5:])
		empty(b)
		if s := b.Stats(); s.Joined != 1 || s.Received != 7 {
			t.Errorf("Stats = %+v, want 1 joined datagram, 7 packets", s)
		}
	})
	t.Run("NoGRO", func(t *testing.T) {
		b := open(true)
		want := mk(b, 30, 1000, 1000, 300)
		sendJoined(t, c, netip.AddrPortFrom(lo, b.SourcePort()), want)
		receiveSame(t, b, want)
		if s := b.Stats(); s.Joined != 0 || s.Received != 3 {
			t.Errorf("Stats = %+v, want no joined datagram, 3 packets", s)
		}
	})
}

// TestJoinedTooLong: a joined datagram whose packets are longer than a
// buffer holds is dropped and counted, as the kernel would have cut a
// datagram that long short, and the link goes on.
func TestJoinedTooLong(t *testing.T) {
	e := newEnv(t)
	lo := netip.MustParseAddr("127.0.0.1")
	c := e.listen(t, "udp4", netip.AddrPortFrom(lo, 0))
	sport := uint16(c.LocalAddr().(*net.UDPAddr).Port)
	b := e.open(t, udp.Config{Addr: lo, Port: e.freePort(t, lo)})
	long := [][]byte{
		build(t, frame(lo, lo, sport, b.SourcePort(), 0, link.MaxPacket, 0)),
		build(t, frame(lo, lo, sport, b.SourcePort(), 1, link.MaxPacket, 0)),
	}
	sendJoined(t, c, netip.AddrPortFrom(lo, b.SourcePort()), long)
	ok := build(t, frame(lo, lo, sport, b.SourcePort(), 2, 100, 0))
	sendPayload(t, c, netip.AddrPortFrom(lo, b.SourcePort()), ok)
	got := collect(t, b, 1)
	sameRoCE(t, got[0], ok[link.Headroom:])
	if s := b.Stats(); s.Truncated != 1 || s.Received != 1 {
		t.Errorf("Stats = %+v, want 1 truncated, 1 received", s)
	}
}

// TestSpillPresent: the area a batch of joined datagrams spills into,
// megabytes of fresh memory, and a batch's worth of buffers for the
// packets it holds have every page present once the link is open, so
// that the first burst does not fault them in page by page.
func TestSpillPresent(t *testing.T) {
	e := newEnv(t)
	lo := netip.MustParseAddr("127.0.0.1")
	l := e.open(t, udp.Config{Addr: lo, Port: e.freePort(t, lo)})
	spill := udp.Spill(l)
	if len(spill) == 0 {
		t.Fatal("the socket does not join datagrams (UDP_GRO): no spill area")
	}
	present, n, err := pages.Resident(spill)
	if err != nil {
		t.Fatal(err)
	}
	if present != n {
		t.Errorf("%d of the spill area's %d pages present, want all", present, n)
	}
	free := udp.HeldFree(l)
	if len(free) < link.BatchSize {
		t.Fatalf("%d buffers ready for held packets, want a batch's worth, %d", len(free), link.BatchSize)
	}
	for i, b := range free {
		if len(b) != link.BufferSize {
			t.Fatalf("held buffer %d is %d bytes, want %d", i, len(b), link.BufferSize)
		}
		if present, n, err := pages.Resident(b); err != nil || present != n {
			t.Fatalf("held buffer %d: %d of %d pages present (%v), want all", i, present, n, err)
		}
	}
}

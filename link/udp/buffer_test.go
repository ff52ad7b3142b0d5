package udp_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/netns"
	"github.com/gorxe/gorxe/link/linktest"
	"github.com/gorxe/gorxe/link/udp"
)

// burst sends n packets from a to b at address to, link.BatchSize at a
// time, letting the kernel's softirq catch up every few hundred (so that
// no packet is lost in the loopback's backlog rather than at b's socket),
// and waits for the last to be delivered. Nothing reads b meanwhile.
func burst(t *testing.T, a, b *udp.Link, to netip.Addr, n, payload int) {
	t.Helper()
	sent := packetsTo(t, a, b, to, 0, n, payload, 0)
	for i := 0; i < n; i += link.BatchSize {
		if err := a.Send(sent[i:min(i+link.BatchSize, n)]); err != nil {
			t.Fatal(err)
		}
		if i%512 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if s := a.Stats(); s.Sent != uint64(n) {
		t.Fatalf("sent %d of %d packets: %+v", s.Sent, n, s)
	}
	time.Sleep(50 * time.Millisecond)
}

// drain receives from l until it has been empty for a while and returns
// how many packets it took.
func drain(t *testing.T, l *udp.Link) int {
	t.Helper()
	r := newReceiver()
	got := 0
	for idle := time.Now(); time.Since(idle) < 100*time.Millisecond; {
		n, err := l.TryReceive(r.bufs, r.sizes)
		if err != nil {
			t.Fatalf("TryReceive after %d packets: %v", got, err)
		}
		if n > 0 {
			got, idle = got+n, time.Now()
		}
	}
	return got
}

// TestSocketDrops checks that the datagrams the kernel drops at a full
// socket are counted, at the link's own socket or at an Also address's:
// nothing else would tell why a UC or UD message never arrived, or why an
// RC connection went back N.
func TestSocketDrops(t *testing.T) {
	netns.Skip(t) // SO_RCVBUFFORCE: a small buffer must be this small
	e := newEnv(t)
	lo, lo2 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	for _, to := range []netip.Addr{lo, lo2} {
		a := e.open(t, udp.Config{Addr: lo, Port: e.freePort(t, lo), NoGSO: true})
		b := e.open(t, udp.Config{Addr: lo, Also: []netip.Addr{lo2}, Port: e.freePort(t, lo), SocketBuffer: 16 << 10})
		const total = 200
		burst(t, a, b, to, total, 1024)
		got := drain(t, b)
		s := b.Stats()
		if s.SocketDrops == 0 || uint64(got)+s.SocketDrops != total {
			t.Fatalf("%d packets to %v into a 16 KiB buffer: received %d, socket drops %d; want some dropped and the two to add up to %d", total, to, got, s.SocketDrops, total)
		}
		if c := linktest.Counter(b, "udp_socket_drops"); c != s.SocketDrops {
			t.Errorf("udp_socket_drops = %d, Stats().SocketDrops = %d", c, s.SocketDrops)
		}
		b.Close()
		if after := b.Stats().SocketDrops; after != s.SocketDrops {
			t.Errorf("SocketDrops after Close = %d, want %d", after, s.SocketDrops)
		}
	}
}

// TestDefaultBufferHoldsABurst checks that the default socket buffer
// holds a burst of small packets that a busy reader has not yet taken,
// more than 4 MiB holds: UC and UD would lose what it drops.
func TestDefaultBufferHoldsABurst(t *testing.T) {
	netns.Skip(t) // SO_RCVBUFFORCE: beyond net.core.rmem_max
	e := newEnv(t)
	lo := netip.MustParseAddr("127.0.0.1")
	a := e.open(t, udp.Config{Addr: lo, Port: e.freePort(t, lo), NoGSO: true})
	b := e.open(t, udp.Config{Addr: lo, Port: e.freePort(t, lo)})
	const total = 40000
	burst(t, a, b, lo, total, 64)
	if got := drain(t, b); got != total {
		t.Fatalf("a burst of %d small packets: received %d, the socket dropped %d", total, got, b.Stats().SocketDrops)
	}
	if d := b.Stats().SocketDrops; d != 0 {
		t.Fatalf("socket drops = %d, want 0", d)
	}
}

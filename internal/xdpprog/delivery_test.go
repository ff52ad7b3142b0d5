package xdpprog

import (
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDelivery sends real frames into a veth with the program attached, in
// each mode, and follows them: RoCE frames reach the AF_XDP socket
// registered for the queue and not the kernel's UDP socket on the RoCE
// port; other frames reach the kernel; with the socket unregistered, RoCE
// frames reach the kernel too.
func TestDelivery(t *testing.T) {
	for _, mode := range []Mode{ModeDriver, ModeGeneric} {
		t.Run(mode.String(), func(t *testing.T) { testDelivery(t, mode) })
	}
}

func testDelivery(t *testing.T, mode Mode) {
	v := newVeth(t, 1)
	// The frames are from macA/ip4A/ip6A to macB/ip4B/ip6B: the veth end
	// with the program is B, its peer injects them.
	ip(t, "link", "set", v.Name, "address", macB.String())
	ip(t, "addr", "add", ip4B.String()+"/24", "dev", v.Name)
	ip(t, "-6", "addr", "add", ip6B.String()+"/64", "dev", v.Name, "nodad")
	peer, err := net.InterfaceByName(peerOf(v.Name))
	if err != nil {
		t.Fatal(err)
	}
	inject := packetSocket(t, peer.Index)

	roce4In := listenUDP(t, "udp4", DefaultPort)
	roce6In := listenUDP(t, "udp6", DefaultPort)
	otherIn := listenUDP(t, "udp4", DefaultPort+1)

	p := load(t, Config{Queues: 1})
	if a, err := p.Attach(v.Index, mode); err != nil || a.Mode != mode {
		t.Fatalf("Attach: %v, %v", a, err)
	}
	xsk := newXSK(t, v.Index, 0)
	if err := p.Register(0, xsk); err != nil {
		t.Fatal(err)
	}

	inject(roce4(t, DefaultPort))
	inject(roce6(t, DefaultPort))
	inject(roce4VLAN(t, 0))
	// The queue delivers in order: once this one is in, the RoCE frames
	// before it have been dealt with.
	inject(roce4(t, DefaultPort+1))
	otherIn.want(t, 1)
	roce4In.want(t, 0)
	roce6In.want(t, 0)
	// The kernel's own IPv6 frames from the peer (MLD, neighbour and
	// router solicitations) are passed too.
	s := stats(t, p)
	if s.Redirected != 3 || s.Passed < 1 || s.PassedNoSocket != 0 || s.PassedMalformed != 0 {
		t.Errorf("counters %+v, want 3 redirected, at least 1 passed", s)
	}
	// The socket's rings are never filled, so every frame that reaches it
	// is dropped for want of a buffer, and counted.
	if x := xskStats(t, xsk); x.Rx_dropped+x.Rx_fill_ring_empty_descs < 3 {
		t.Errorf("AF_XDP socket statistics %+v: fewer than 3 frames arrived", x)
	}

	if err := p.Unregister(0); err != nil {
		t.Fatal(err)
	}
	inject(roce4(t, DefaultPort))
	inject(roce6(t, DefaultPort))
	roce4In.want(t, 1)
	roce6In.want(t, 1)
	s = stats(t, p)
	if s.Redirected != 3 || s.PassedNoSocket != 2 {
		t.Errorf("counters %+v, want 3 redirected, 2 passed for want of a socket", s)
	}
}

func stats(t testing.TB, p *Program) Stats {
	t.Helper()
	s, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// packetSocket returns a function that sends a whole frame out of the
// interface ifindex through an AF_PACKET socket.
func packetSocket(t testing.TB, ifindex int) func([]byte) {
	t.Helper()
	s, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(s) })
	to := &unix.SockaddrLinklayer{Ifindex: ifindex, Halen: 6}
	return func(f []byte) {
		t.Helper()
		if err := unix.Sendto(s, f, 0, to); err != nil {
			t.Fatalf("AF_PACKET send: %v", err)
		}
	}
}

// udpListener is a kernel UDP socket.
type udpListener struct {
	c    *net.UDPConn
	name string
}

// listenUDP opens a UDP socket on port of every address of the network
// ("udp4" or "udp6"; not "udp", which Go's probe for IPv6 may turn into an
// IPv4 socket in a namespace whose loopback was down when it ran).
func listenUDP(t testing.TB, network string, port int) *udpListener {
	t.Helper()
	c, err := net.ListenUDP(network, &net.UDPAddr{Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &udpListener{c, fmt.Sprintf("%s port %d", network, port)}
}

// want checks that exactly n datagrams arrive within a second, and no more
// within a further 50 ms.
func (l *udpListener) want(t testing.TB, n int) {
	t.Helper()
	buf := make([]byte, 2048)
	deadline := time.Now().Add(time.Second)
	for i := 0; i <= n; i++ {
		if i == n {
			deadline = time.Now().Add(50 * time.Millisecond)
		}
		l.c.SetReadDeadline(deadline)
		if _, from, err := l.c.ReadFromUDP(buf); err != nil {
			if i < n {
				t.Fatalf("%s: %d datagrams, want %d: %v", l.name, i, n, err)
			}
		} else if i == n {
			t.Fatalf("%s: more than %d datagrams (one from %v)", l.name, n, from)
		}
	}
}

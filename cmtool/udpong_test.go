package cmtool_test

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gorxe/gorxe/cmtool"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/rnic/rnictest"
	"github.com/gorxe/gorxe/rsocket"
)

// udpongLine is a line of udpong's results: name, size, transfers, total,
// seconds, Gb/s, µs a transfer.
var udpongLine = regexp.MustCompile(`^(\S+) +(\S+) +(\S+) +(\S+) +\d+\.\d\ds +\d+\.\d\d +\d+\.\d\d$`)

// runUDPong runs udpong's server on s and its client on c with p, and
// returns the client's lines and the server's.
func runUDPong(t *testing.T, s, c cmtool.DatagramSocket, server netip.AddrPort, p cmtool.UDPongParams) (client, srv string) {
	t.Helper()
	sctx, stop := context.WithCancel(ctx(t))
	var sout, cout bytes.Buffer
	served := make(chan error, 1)
	go func() { served <- cmtool.UDPongServer(sctx, s, &sout) }()
	err := cmtool.UDPongClient(ctx(t), c, server, p, &cout)
	stop()
	if serr := <-served; serr != nil {
		t.Errorf("server: %v", serr)
	}
	if err != nil {
		t.Fatalf("client: %v\n%s", err, cout.String())
	}
	return cout.String(), sout.String()
}

// TestUDPong: udpong's client and server over datagram rsockets on two
// gorxe devices: the login is printed, an echoed custom test counts both
// ways, a streamed one what the server counted, each line in udpong's
// format.
func TestUDPong(t *testing.T) {
	f := mem.NewFabric()
	sd, cd := rnictest.Open(t, f, "127.0.0.2"), rnictest.Open(t, f, "127.0.0.1")
	s, err := rsocket.ListenPacket(sd, netip.MustParseAddrPort("127.0.0.2:0"), rsocket.PacketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := rsocket.ListenPacket(cd, netip.MustParseAddrPort("127.0.0.1:0"), rsocket.PacketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		p    cmtool.UDPongParams
		want string // name, size, transfers
	}{
		{cmtool.UDPongParams{Custom: true, Size: 500, Count: 300, Echo: true}, "custom 500 600"},
		{cmtool.UDPongParams{Custom: true, Size: 1000, Count: 200}, "custom 1000 200"},
	} {
		client, srv := runUDPong(t, s, c, s.LocalAddr(), tc.p)
		lines := strings.Split(strings.TrimSpace(client), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "name      bytes   xfers   total       time     Gb/sec    usec/xfer") {
			t.Fatalf("client printed\n%s", client)
		}
		m := udpongLine.FindStringSubmatch(lines[1])
		if m == nil || strings.Join(m[1:4], " ") != tc.want {
			t.Fatalf("result %q; want %s", lines[1], tc.want)
		}
		if srv != "client login from 127.0.0.1\n" {
			t.Fatalf("server printed %q", srv)
		}
	}
	if s.Dropped() != 0 {
		t.Errorf("the server dropped %d datagrams", s.Dropped())
	}
}

// TestUDPongSockets: udpong -T s, its messages over kernel UDP sockets,
// the default tests' first echoed sizes.
func TestUDPongSockets(t *testing.T) {
	open := func(addr string) cmtool.UDPSocket {
		u, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { u.Close() })
		return cmtool.UDPSocket{UDPConn: u}
	}
	s, c := open("127.0.0.2:0"), open("127.0.0.1:0")
	client, _ := runUDPong(t, s, c, s.LocalAddr().(*net.UDPAddr).AddrPort(), cmtool.UDPongParams{Custom: true, Size: 64, Count: 1000, Echo: true})
	if !strings.Contains(client, "\ncustom    64      2k      125k    ") {
		t.Fatalf("client printed\n%s", client)
	}
}

// TestUDPongSkippedSizes: udpong's own tests leave out the sizes a
// socket cannot carry (1 KiB and more where the path MTU is 1024).
func TestUDPongSkippedSizes(t *testing.T) {
	if got := (cmtool.UDPongParams{MaxSize: 1016}).SkippedSizes(); !slices.Equal(got, []int{1024, 1536}) {
		t.Errorf("skipped %v, want [1024 1536]", got)
	}
	if got := (cmtool.UDPongParams{}).SkippedSizes(); got != nil {
		t.Errorf("skipped %v with no limit", got)
	}
}

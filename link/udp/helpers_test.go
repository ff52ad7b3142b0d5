package udp_test

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/netns"
	"github.com/gorxe/gorxe/link/udp"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// timeout bounds every wait for packets.
const timeout = 10 * time.Second

// env is where a test opens its sockets: a fresh network namespace when
// the test runs as root, so nothing else on the machine holds its ports,
// or else the test process's own namespace.
type env struct {
	ns *netns.NS // nil: the process's namespace
}

// newEnv returns a fresh namespace as root, the process's own otherwise.
func newEnv(t testing.TB) env {
	if os.Geteuid() != 0 {
		return env{}
	}
	return env{ns: netns.New(t)}
}

// do runs fn inside the environment's namespace.
func (e env) do(fn func() error) error {
	if e.ns == nil {
		return fn()
	}
	return e.ns.Do(fn)
}

// open opens a link inside the environment and closes it when t ends. In
// the process's own namespace a port already taken skips the test.
func (e env) open(t testing.TB, c udp.Config) *udp.Link {
	t.Helper()
	var l *udp.Link
	err := e.do(func() (err error) { l, err = udp.Open(c); return err })
	if err != nil {
		if e.ns == nil && errors.Is(err, syscall.EADDRINUSE) {
			t.Skipf("port in use outside a test namespace (run as root to get one): %v", err)
		}
		t.Fatalf("Open(%+v): %v", c, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// listen opens a plain UDP socket inside the environment.
func (e env) listen(t testing.TB, network string, addr netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := e.do(func() (err error) {
		c, err = net.ListenUDP(network, net.UDPAddrFromAddrPort(addr))
		return err
	})
	if err != nil {
		t.Fatalf("listen %s %v: %v", network, addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// freePort returns a UDP port nobody in the environment is bound to on
// addr right now.
func (e env) freePort(t testing.TB, addr netip.Addr) uint16 {
	t.Helper()
	network := "udp4"
	if addr.Is6() {
		network = "udp6"
	}
	c := e.listen(t, network, netip.AddrPortFrom(addr, 0))
	defer c.Close()
	return uint16(c.LocalAddr().(*net.UDPAddr).Port)
}

// loopPair opens two links on one loopback address with different ports;
// packets a sends to its peer must carry the peer's port.
func loopPair(t testing.TB, e env, addr netip.Addr) (a, b *udp.Link) {
	t.Helper()
	a = e.open(t, udp.Config{Addr: addr, Port: e.freePort(t, addr)})
	b = e.open(t, udp.Config{Addr: addr, Port: e.freePort(t, addr)})
	return a, b
}

// frame returns a RoCE v2 RC SEND ONLY packet as the device builds it for
// a kernel UDP link: IPv4 ID 0 with DF, the link's source port, and the
// given traffic class.
func frame(src, dst netip.Addr, sport, dport uint16, psn uint32, payload int, tc uint8) wire.Frame {
	p := make([]byte, payload)
	for i := range p {
		p[i] = byte(psn*13 + uint32(i))
	}
	return wire.Frame{
		IP:      wire.IPFields{Src: src, Dst: dst, HopLimit: 64, DontFrag: true, TrafficClass: tc},
		SrcPort: sport, DstPort: dport,
		Headers: wire.Headers{BTH: bth.Fields{
			Opcode: bth.RCSendOnly, PKey: bth.DefaultPKey, DestQP: 0x11, PSN: bth.PSN(psn & bth.PSNMask), AckReq: true,
		}},
		Payload: p,
	}
}

// build builds f behind link.Headroom bytes of junk.
func build(t testing.TB, f wire.Frame) []byte {
	t.Helper()
	b, err := f.Append(bytes.Repeat([]byte{0xa5}, link.Headroom))
	if err != nil {
		t.Fatalf("building packet: %v", err)
	}
	return b
}

// sendPayload sends the UDP payload of pkt, an IPv4 packet built behind
// link.Headroom, from c to to.
func sendPayload(t testing.TB, c *net.UDPConn, to netip.AddrPort, pkt []byte) {
	t.Helper()
	if _, err := c.WriteToUDPAddrPort(pkt[link.Headroom+wire.IPv4Len+wire.UDPLen:], to); err != nil {
		t.Fatal(err)
	}
}

// packets builds n packets from a to b, PSNs first, first+1, ...
func packets(t testing.TB, a, b *udp.Link, first uint32, n, payload int, tc uint8) [][]byte {
	t.Helper()
	return packetsTo(t, a, b, b.Addrs()[0], first, n, payload, tc)
}

// packetsTo is packets to b at address to, one of b's.
func packetsTo(t testing.TB, a, b *udp.Link, to netip.Addr, first uint32, n, payload int, tc uint8) [][]byte {
	t.Helper()
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = build(t, frame(a.Addrs()[0], to, a.SourcePort(), b.SourcePort(), first+uint32(i), payload, tc))
	}
	return bufs
}

// receiver holds a batch of receive buffers.
type receiver struct {
	bufs  [][]byte
	sizes []int
}

func newReceiver() *receiver {
	r := &receiver{bufs: make([][]byte, link.BatchSize), sizes: make([]int, link.BatchSize)}
	for i := range r.bufs {
		r.bufs[i] = make([]byte, link.BufferSize)
	}
	return r
}

// collect receives until n packets have arrived and returns copies of
// them; after timeout it closes l and fails t.
func collect(t testing.TB, l *udp.Link, n int) [][]byte {
	t.Helper()
	type result struct {
		pkts [][]byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var got [][]byte
		r := newReceiver()
		for len(got) < n {
			k, err := l.Receive(r.bufs, r.sizes)
			if err != nil {
				done <- result{got, err}
				return
			}
			for i := range k {
				got = append(got, bytes.Clone(r.bufs[i][link.Headroom:link.Headroom+r.sizes[i]]))
			}
		}
		done <- result{got, nil}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Receive after %d of %d packets: %v", len(r.pkts), n, r.err)
		}
		return r.pkts
	case <-time.After(timeout):
		l.Close()
		r := <-done
		t.Fatalf("received %d of %d packets in %v", len(r.pkts), n, timeout)
		return nil
	}
}

// receiveSame receives len(want) packets on l and fails t unless each
// carries the RoCE packet of its place in want (built behind
// link.Headroom), as sameRoCE tells.
func receiveSame(t testing.TB, l *udp.Link, want [][]byte) {
	t.Helper()
	for i, got := range collect(t, l, len(want)) {
		sameRoCE(t, got, want[i][link.Headroom:])
	}
}

// parse parses an IP packet or fails t.
func parse(t testing.TB, b []byte) *wire.Packet {
	t.Helper()
	p := new(wire.Packet)
	if err := wire.ParseIP(p, b); err != nil {
		t.Fatalf("packet does not parse: %v\n%x", err, b)
	}
	return p
}

// sameRoCE fails t unless got carries want's addresses, destination port
// and transport bytes (BTH through ICRC): all a link that cannot show the
// sender's IPv4 header can promise.
func sameRoCE(t testing.TB, got, want []byte) {
	t.Helper()
	g, w := parse(t, got), parse(t, want)
	if g.Src() != w.Src() || g.Dst() != w.Dst() || g.SrcPort() != w.SrcPort() || g.DstPort() != w.DstPort() ||
		!bytes.Equal(g.Transport(), w.Transport()) {
		t.Fatalf("received packet differs\n got %x\nwant %x", got, want)
	}
}

package cmtool

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cm/cmtest"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/rsocket"
	"golang.org/x/sys/unix"
)

// recorder keeps what is written through it.
type recorder struct {
	io.ReadWriteCloser
	mu  *sync.Mutex
	out *bytes.Buffer
}

func (r recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.out.Write(p)
	r.mu.Unlock()
	return r.ReadWriteCloser.Write(p)
}

// TestRstreamVerifySequence: with -T v the bytes the client sends carry
// one running sequence over every test and both connections, as
// rstream's format_buf (a static counter) makes them, and the server
// checks it so: a sequence that began again on the second connection
// fails against stock rstream.
func TestRstreamVerifySequence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f := mem.NewFabric()
	_, sm := cmtest.Open(t, f, "10.0.0.2")
	_, cmgr := cmtest.Open(t, f, "10.0.0.1")
	l, err := rsocket.Listen(sm, netip.Addr{}, DefaultPort, rsocket.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := RstreamParams{Verify: true}
	lat := []rstreamTest{{"64_lat", 64, 1, 3}, {"100_lat", 100, 1, 2}}
	bw := []rstreamTest{{"64_bw", 64, 3, 1}}
	var mu sync.Mutex
	var sent bytes.Buffer
	dial := RstreamDialer(ctx, cmgr, netip.MustParseAddrPort("10.0.0.2:7471"), netip.Addr{}, false)
	recording := func(o rsocket.Options) (io.ReadWriteCloser, error) {
		c, err := dial(o)
		if err != nil {
			return nil, err
		}
		return recorder{c, &mu, &sent}, nil
	}
	done := make(chan error, 1)
	var sout, cout bytes.Buffer
	go func() { done <- rstream(p, lat, bw, nil, RstreamAcceptor(ctx, l, nil), &sout) }()
	if err := rstream(p, lat, bw, recording, nil, &cout); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the server: %v\n%s", err, sout.String())
	}
	mu.Lock()
	defer mu.Unlock()
	want := 16 + 64*3 + 16 + 100*2 + 16 + 64*3 // syncs and transfers, the client's half
	if sent.Len() != want {
		t.Fatalf("the client sent %d bytes, want %d", sent.Len(), want)
	}
	for i, b := range sent.Bytes() {
		if b != byte(i) {
			t.Fatalf("byte %d of what the client sent is %d, want %d: the sequence does not run on", i, b, byte(i))
		}
	}
}

// TestRstreamSockets: rstream -T s runs the same test over TCP sockets.
func TestRstreamSockets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	p := RstreamParams{Custom: true, Size: 3000, Count: 5, Iterations: 2, Verify: true, Sockets: true}
	done := make(chan error, 1)
	var sout, cout bytes.Buffer
	go func() { done <- Rstream(p, nil, RstreamAcceptor(ctx, nil, tl), &sout) }()
	if err := Rstream(p, RstreamDialer(ctx, nil, netip.MustParseAddrPort(tl.Addr().String()), netip.Addr{}, true), nil, &cout); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{cout.String(), sout.String()} {
		if !strings.Contains(out, "\ncustom    2.9k    5       2       58k     ") {
			t.Errorf("printed\n%s", out)
		}
	}
}

// TestRstreamTests: without -I, -C or -S, rstream's tests are its
// latency then bandwidth tests of 64 B, 4 KiB, 64 KiB and 1 MiB; with -S
// all, 33 sizes each.
func TestRstreamTests(t *testing.T) {
	p := DefaultRstreamParams()
	lat, bw := testNames(p)
	if strings.Join(lat, " ") != "64_lat 4k_lat 64k_lat 1m_lat" || strings.Join(bw, " ") != "64_bw 4k_bw 64k_bw 1m_bw" {
		t.Fatalf("tests %v and %v", lat, bw)
	}
	p.AllSizes = true
	if lat, bw := testNames(p); len(lat) != 33 || len(bw) != 33 || lat[2] != "192_lat" || bw[32] != "6m_bw" {
		t.Fatalf("-S all: %d and %d tests: %v", len(lat), len(bw), lat)
	}
}

// testNames returns the names of the tests p asks for: the latency
// tests', then the bandwidth tests'.
func testNames(p RstreamParams) (latency, bandwidth []string) {
	lat, bw := p.tests()
	for _, t := range lat {
		latency = append(latency, t.name)
	}
	for _, t := range bw {
		bandwidth = append(bandwidth, t.name)
	}
	return latency, bandwidth
}

// TestKeepAliveTCP: rstream -T s -k N sets SO_KEEPALIVE and TCP_KEEPIDLE
// N on its sockets; without -k, no keepalive (Go's default is on).
func TestKeepAliveTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			defer c.Close()
			io.Copy(io.Discard, c)
		}
	}()
	for _, every := range []time.Duration{7 * time.Second, 0} {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if err := keepAliveTCP(c, every); err != nil {
			t.Fatal(err)
		}
		raw, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var on, idle int
		var gerr error
		raw.Control(func(fd uintptr) {
			if on, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE); gerr == nil {
				idle, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
			}
		})
		c.Close()
		if gerr != nil {
			t.Fatal(gerr)
		}
		if want := every != 0; (on != 0) != want || want && idle != 7 {
			t.Errorf("-k %v: SO_KEEPALIVE %d, TCP_KEEPIDLE %d", every, on, idle)
		}
	}
}

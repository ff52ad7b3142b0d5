package cmtool_test

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/cm/cmtest"
	"github.com/gorxe/gorxe/cmtool"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/rsocket"
)

// cmtimeRow matches a step's row of cmtime's table (rdma-core 52 and
// later): its name, then six figures.
var cmtimeRow = regexp.MustCompile(`(?m)^(full connect|create id|bind addr|resolve addr|resolve route|create qp|init qp attr|init qp|rtr qp attr|rtr qp|rts qp attr|rts qp|cm connect|establish|disconnect|destroy id|destroy qp) +(\d+) +(\d+) +(\d+) +(\d+) +(\d+) +(\d+)$`)

// cmtimePair opens a server's device at 10.0.0.2 with a listener on
// rdma_cm's port 7471 and a TCP listener for cmtime's socket on loopback,
// and a client's connection manager at 10.0.0.1.
func cmtimePair(t *testing.T) (*rnic.Device, *cm.Listener, *cm.Manager, net.Listener) {
	f := mem.NewFabric()
	sdev, sm := cmtest.Open(t, f, "10.0.0.2")
	_, cmgr := cmtest.Open(t, f, "10.0.0.1")
	l, err := sm.Listen(netip.Addr{}, cmtool.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	oobl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { oobl.Close() })
	return sdev, l, cmgr, oobl
}

// TestCmtime: gorxe's cmtime client and server, synced over a TCP
// connection as cmtime since rdma-core 52: the warm-up and both tests
// run, each side prints its two tables of the 17 steps, and the client's
// connections took time to make.
func TestCmtime(t *testing.T) {
	sdev, l, cmgr, oobl := cmtimePair(t)
	p := cmtool.DefaultCmtimeParams()
	p.Connections, p.Threads = 5, 2
	var sout, cout bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- cmtool.CmtimeServer(ctx(t), sdev, l, oobl, p, &sout) }()
	oob, err := cmtool.DialCmtime(ctx(t), netip.MustParseAddrPort(oobl.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer oob.Close()
	if err := cmtool.CmtimeClient(ctx(t), cmgr, oob, netip.MustParseAddrPort("10.0.0.2:7471"), netip.Addr{}, p, &cout); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		side, out string
		lines     []string
	}{
		{"client", cout.String(), []string{"Client warmup", "Connect (5) QPs test", "qp_conn                 5", "threads                 2", "Connect (5) test - no QPs", "cm_conn                 5", "\tResolving routes", "\tDestroying IDs"}},
		{"server", sout.String(), []string{"Server warmup", "Accept (5) QPs test", "qp_conn                 5", "Accept (5) test - no QPs", "cm_conn                 5", "\tAccepting", "\tDisconnecting"}},
	} {
		for _, want := range tc.lines {
			if !strings.Contains(tc.out, want+"\n") {
				t.Errorf("the %s printed no line %q:\n%s", tc.side, want, tc.out)
			}
		}
		if rows := cmtimeRow.FindAllStringSubmatch(tc.out, -1); len(rows) != 2*17 {
			t.Errorf("the %s printed %d rows of steps, want 2 tables of 17:\n%s", tc.side, len(rows), tc.out)
		}
	}
	// The client's "cm connect" row: every connection took some time.
	for _, row := range cmtimeRow.FindAllStringSubmatch(cout.String(), -1) {
		if row[1] == "cm connect" && (row[3] == "0" || row[7] == "0") {
			t.Errorf("cm connect: total %s µs, least %s µs: no time taken", row[3], row[7])
		}
	}
}

// TestCmtimeLegacy: against a server that takes no TCP connection (a
// cmtime of rdma-core 51 or before), the client makes its connections
// once and prints that cmtime's table; the server serves them and is
// stopped.
func TestCmtimeLegacy(t *testing.T) {
	sdev, l, cmgr, oobl := cmtimePair(t) // nobody dials oobl
	p := cmtool.DefaultCmtimeParams()
	p.Connections = 4
	var sout, cout bytes.Buffer
	sctx, stop := context.WithCancel(ctx(t))
	done := make(chan error, 1)
	go func() { done <- cmtool.CmtimeServer(sctx, sdev, l, oobl, p, &sout) }()
	if err := cmtool.CmtimeClient(ctx(t), cmgr, nil, netip.MustParseAddrPort("10.0.0.2:7471"), netip.MustParseAddr("10.0.0.1"), p, &cout); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("the server, stopped: %v", err)
	}
	want := "creating id\nbinding source address\nresolving address\nresolving route\ncreating qp\nconnecting\ndisconnecting\ndestroying id\nstep              total ms     max ms     min us  us / conn\n"
	if !strings.HasPrefix(cout.String(), want) {
		t.Fatalf("the client printed\n%s\nwant it to start\n%s", cout.String(), want)
	}
	rows := regexp.MustCompile(`(?m)^(create id|bind addr|resolve addr|resolve route|create qp|connect|disconnect|destroy) *: +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`).FindAllString(cout.String(), -1)
	if len(rows) != 8 {
		t.Fatalf("%d rows of steps, want 8:\n%s", len(rows), cout.String())
	}
	if sout.Len() != 0 {
		t.Fatalf("the server printed %q; an older cmtime's server prints nothing until it is stopped", sout.String())
	}
}

// TestCmtimeSockets: cmtime -S, the baseline of TCP connections, on both
// sides.
func TestCmtimeSockets(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := cmtool.DefaultCmtimeParams()
	p.Connections, p.Threads = 6, 3
	var sout, cout bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- cmtool.CmtimeSocketServer(ctx(t), l, p, &sout) }()
	if err := cmtool.CmtimeSocketClient(ctx(t), netip.MustParseAddrPort(l.Addr().String()), p, &cout); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for side, out := range map[string]string{"client": cout.String(), "server": sout.String()} {
		if rows := cmtimeRow.FindAllString(out, -1); len(rows) != 17 || !strings.Contains(out, "cm_conn                 6\n") {
			t.Errorf("the %s printed %d rows of steps, want one table of 17 for 6 connections:\n%s", side, len(rows), out)
		}
	}
	if !strings.HasPrefix(cout.String(), "Client baseline socket setup\nCreating sockets\nConnecting sockets\nClosing sockets\nClient baseline socket results:\n") {
		t.Errorf("the client printed\n%s", cout.String())
	}
	if !strings.HasPrefix(sout.String(), "Server baseline socket setup\nAccept sockets\nClosing sockets\nServer baseline socket results:\n") {
		t.Errorf("the server printed\n%s", sout.String())
	}
}

// TestRstream: gorxe's rstream client and server over rsockets, a custom
// test with the data verified (-T v), and the default latency and
// bandwidth tests' list: each side prints rstream's header and a line a
// test, the same names.
func TestRstream(t *testing.T) {
	for _, p := range []cmtool.RstreamParams{
		{Custom: true, Size: 5000, Count: 20, Iterations: 3, Verify: true},
		{Custom: true, Size: 100, Count: 1, Iterations: 50, BufferSize: 4096},
		// Keepalives every millisecond change nothing the test sees.
		{Custom: true, Size: 3000, Count: 10, Iterations: 20, Verify: true, KeepAlive: time.Millisecond},
		// riostream's: riowrites into the peer's mapped memory.
		{Custom: true, Size: 70000, Count: 5, Iterations: 3, Verify: true, IOMapped: true},
		{Custom: true, Size: 64, Count: 1, Iterations: 300, IOMapped: true},
	} {
		f := mem.NewFabric()
		_, sm := cmtest.Open(t, f, "10.0.0.2")
		_, cmgr := cmtest.Open(t, f, "10.0.0.1")
		l, err := rsocket.Listen(sm, netip.Addr{}, cmtool.DefaultPort, rsocket.Options{}) // Rstream sizes each connection
		if err != nil {
			t.Fatal(err)
		}
		var sout, cout bytes.Buffer
		done := make(chan error, 1)
		go func() { done <- cmtool.Rstream(p, nil, cmtool.RstreamAcceptor(ctx(t), l, nil), &sout) }()
		dial := cmtool.RstreamDialer(ctx(t), cmgr, netip.MustParseAddrPort("10.0.0.2:7471"), netip.Addr{}, false)
		cerr := cmtool.Rstream(p, dial, nil, &cout)
		if serr := <-done; cerr != nil || serr != nil {
			t.Fatalf("%+v: the client: %v; the server: %v", p, cerr, serr)
		}
		l.Close()
		row := regexp.MustCompile(`^custom +[0-9.]+k? +[0-9]+ +[0-9]+ +[0-9.]+[km]? +[0-9.]+s +[0-9.]+ +[0-9.]+$`)
		for side, out := range map[string]string{"client": cout.String(), "server": sout.String()} {
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 2 || lines[0] != "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer" || !row.MatchString(lines[1]) {
				t.Errorf("%+v: the %s printed\n%s", p, side, out)
			}
		}
	}
}

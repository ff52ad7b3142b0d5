package main

import (
	"bytes"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestSplitQperfArgs(t *testing.T) {
	q, g := splitQperfArgs([]string{"host", "--ip", "10.0.0.1", "-cm1", "--link=udp", "rc_bw", "--trace", "--time", "3", "--ip_port", "9"})
	if want := []string{"host", "-cm1", "rc_bw", "--time", "3", "--ip_port", "9"}; !slices.Equal(q, want) {
		t.Errorf("qperf's args %q, want %q", q, want)
	}
	if want := []string{"--ip", "10.0.0.1", "--link=udp", "--trace"}; !slices.Equal(g, want) {
		t.Errorf("gorxe's args %q, want %q", g, want)
	}
}

func TestQperfCommandLine(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run([]string{"qperf", "-V"}, &out, &errs); code != exitOK || out.String() != "qperf 0.4.11\n" {
		t.Fatalf("-V: %d %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{"qperf", "-zz"}, &out, &errs); code != exitUsage || !strings.Contains(out.String(), "-zz: bad option") {
		t.Fatalf("-zz: %d %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{"qperf", "--help"}, &out, &errs); code != exitOK || !strings.Contains(out.String(), "rc_rdma_write_poll_lat") || !strings.Contains(out.String(), "--link") {
		t.Fatalf("--help: %d %q", code, out.String())
	}
	if code := run([]string{"qperf", "--link", "mem", "host", "rc_bw"}, &out, &errs); code != exitUsage {
		t.Fatalf("--link mem: %d", code)
	}
	// A server's link flags are checked before it waits for a client.
	for _, args := range [][]string{{"--link", "xdp"}, {"--link", "tap"}, {"--link", "tap", "--ip", "10.0.0.1"}} {
		errs.Reset()
		if code := run(append([]string{"qperf"}, args...), &out, &errs); code != exitUsage || !strings.Contains(errs.String(), "needs --") {
			t.Fatalf("%v: %d %q", args, code, errs.String())
		}
	}
}

// TestQperfLoopback runs gorxe qperf's server and client as a user types
// them on one host: the server reached at 127.0.0.3, the client from
// 127.0.0.1, each over the udp link; the client's quit ends the server.
func TestQperfLoopback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	const roce = "24791" // not 4791, which another test may hold
	var sout, serr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"qperf", "-lp", port, "--roce-port", roce}, &sout, &serr) }()
	var out, errs bytes.Buffer
	code := run([]string{"qperf", "127.0.0.3", "-lp", port, "--roce-port", roce, "-cm1", "-t", "1", "-m", "4K", "rc_rdma_write_bw", "rc_lat", "quit"}, &out, &errs)
	if code != exitOK {
		t.Fatalf("client: exit %d\n%s%s", code, out.String(), errs.String())
	}
	re := regexp.MustCompile(`^rc_rdma_write_bw:\n    bw  =  [0-9.]+ [KMG]B/sec\nrc_lat:\n    latency  =  [0-9.]+ us\nquit:\n$`)
	if !re.MatchString(out.String()) {
		t.Fatalf("client's output:\n%s", out.String())
	}
	select {
	case code := <-done:
		if code != exitOK || sout.Len() != 0 {
			t.Fatalf("server: exit %d\n%s%s", code, sout.String(), serr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop on quit")
	}
}

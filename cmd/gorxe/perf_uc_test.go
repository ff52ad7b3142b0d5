package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/qp"
)

// TestPerfUC runs the four tests perftest runs on UC with -c UC on the
// in-memory link, every byte checked, the banner saying UC; and send_bw
// over a lossy fabric, which ends at once with what arrived.
func TestPerfUC(t *testing.T) {
	for _, test := range []string{"write_bw", "send_bw", "write_lat", "send_lat"} {
		var out, errOut bytes.Buffer
		args := []string{test, "-c", "UC", "--link", "mem", "-n", "100", "--check"}
		if code := run(args, &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut.String())
		}
		if !strings.Contains(out.String(), " Connection type : UC") || !strings.Contains(out.String(), "data check: ok") {
			t.Errorf("%v printed\n%s", args, out.String())
		}
	}
	var out, errOut bytes.Buffer
	args := []string{"send_bw", "-c", "UC", "--link", "mem", "-n", "1000", "-s", "4096", "--fault", "drop=0.01,seed=3", "--json"}
	start := time.Now()
	if code := run(args, &out, &errOut); code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errOut.String())
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("%v took %v", args, el)
	}
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil || m["iters"] != float64(1000) {
		t.Errorf("%v: %v, %v", args, m, err)
	}
}

// TestPerfSocketBuffer runs a server whose udp socket has room for a
// packet or two (--socket-buffer 4K): a UC send_bw loses what the socket
// dropped and says so on stderr, where nothing else would tell why
// messages are missing; an RC write_bw resends it, every byte checked,
// and --counters counts the drops.
func TestPerfSocketBuffer(t *testing.T) {
	drops := regexp.MustCompile(`the udp link's socket dropped (\d+) datagrams`)
	srv, cli := pingpongPair(t, "send_bw", []string{"--ip", "127.0.0.1", "-c", "UC", "--socket-buffer", "4K", "-n", "2000"}, []string{"-c", "UC", "-n", "2000"})
	if srv.code != 0 || cli.code != 0 || !drops.MatchString(srv.errOut) {
		t.Errorf("UC send_bw into a 4K socket buffer: server exit %d, client exit %d; want both 0 and the server to name its drops\nserver: %s\nstderr: %s\nclient stderr: %s", srv.code, cli.code, srv.out, srv.errOut, cli.errOut)
	}
	srv, cli = pingpongPair(t, "write_bw", []string{"--ip", "127.0.0.1", "--socket-buffer", "4K", "-s", "4096", "-n", "300", "--check", "--counters", "-W", "hw_counters/udp_socket_drops"}, []string{"-s", "4096", "-n", "300", "--check"})
	counted := regexp.MustCompile(`(?m)^udp_socket_drops [1-9]\d*$`)
	watched := regexp.MustCompile(`\n\thw_counters/udp_socket_drops=[1-9]\d*\n\n`)
	if srv.code != 0 || cli.code != 0 || !strings.Contains(srv.out, "data check: ok") || !counted.MatchString(srv.out) || !watched.MatchString(srv.out) || drops.MatchString(srv.errOut) {
		t.Errorf("RC write_bw into a 4K socket buffer: server exit %d, client exit %d; want both 0, the data checked, drops counted (--counters, -W) and no note\nserver: %s\nstderr: %s\nclient stderr: %s", srv.code, cli.code, srv.out, srv.errOut, cli.errOut)
	}
	var out, errOut bytes.Buffer
	// The mem link has no counters of its own.
	if code := run([]string{"write_bw", "--link", "mem", "-W", "hw_counters/udp_socket_drops"}, &out, &errOut); code != exitError || !strings.Contains(errOut.String(), "Unable to access performance counters") {
		t.Errorf("-W hw_counters/udp_socket_drops --link mem: exit %d, stderr %q", code, errOut.String())
	}
	errOut.Reset()
	if code := run([]string{"write_bw", "--socket-buffer", "1K"}, &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), "from 4K to 1G") {
		t.Errorf("--socket-buffer 1K: exit %d, stderr %q", code, errOut.String())
	}
}

// TestPrintLinkDrops: each link's count of packets the kernel dropped
// before gorxe read them is named on stderr, and nothing is said of none.
func TestPrintLinkDrops(t *testing.T) {
	for _, c := range []struct {
		counter string
		says    string
	}{
		{"udp_socket_drops", "send_bw: the udp link's socket dropped 7 datagrams, its receive buffer full (--socket-buffer); UC and UD resend nothing\n"},
		{"if_tx_dropped", "send_bw: the tap link's TAP dropped 7 frames, its queue full (gorxe read too slowly); UC and UD resend nothing\n"},
		{"if_rx_dropped", "send_bw: the xdp link's interface dropped 7 frames on receive (its driver's, or the AF_XDP rings full); UC and UD resend nothing\n"},
		{"tap_drop_not_for_us", ""},
	} {
		var w bytes.Buffer
		printLinkDrops(&w, "send_bw", []qp.NamedCounter{{Name: "tap_frames_in", Value: 9}, {Name: c.counter, Value: 7}})
		if w.String() != c.says {
			t.Errorf("%s: said %q, want %q", c.counter, w.String(), c.says)
		}
		w.Reset()
		printLinkDrops(&w, "send_bw", []qp.NamedCounter{{Name: c.counter, Value: 0}})
		if w.Len() != 0 {
			t.Errorf("%s = 0: said %q", c.counter, w.String())
		}
	}
}

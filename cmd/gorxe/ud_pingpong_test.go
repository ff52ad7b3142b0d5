package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// udLines matches ibv_ud_pingpong's output: rc_pingpong's, but for the
// colon before the local GID.
func udLines(size, iters int) *regexp.Regexp {
	return regexp.MustCompile(`^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}: GID ::ffff:127\.0\.0\.[12]
  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:127\.0\.0\.[12]
` + strconv.Itoa(2*size*iters) + ` bytes in \d+\.\d\d seconds = \d+\.\d\d Mbit/sec
` + strconv.Itoa(iters) + ` iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter
$`)
}

// TestUDPingpong runs gorxe ud_pingpong both sides over the udp link:
// ibv_ud_pingpong's defaults (1024 bytes), -c, events, and a message of
// the MTU of a 9000-byte link.
func TestUDPingpong(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		size, iters int
	}{
		{[]string{"-n", "200", "--link-mtu", "1500"}, 1024, 200},
		{[]string{"-s", "4096", "-n50", "-c", "--link-mtu", "9000"}, 4096, 50},
		{[]string{"--size=1000", "--iters=30", "-ec", "--rx-depth", "2", "-l3", "-d", "rxe0", "--link-mtu", "1500"}, 1000, 30},
	} {
		srv, cli := pingpongPair(t, "ud_pingpong", append([]string{"-g", "1"}, tc.args...), tc.args)
		for who, r := range map[string]ran{"server": srv, "client": cli} {
			if r.code != 0 || !udLines(tc.size, tc.iters).MatchString(r.out) || r.errOut != "" {
				t.Errorf("%v: %s: exit %d\n%s\nstderr: %s", tc.args, who, r.code, r.out, r.errOut)
			}
		}
	}
}

// TestUDPingpongUsage: ud_pingpong takes ud_pingpong.c's options (no -m,
// none of rc_pingpong's later ones), answers to ibv_ud_pingpong, and
// refuses a message longer than the port's MTU with its words.
func TestUDPingpongUsage(t *testing.T) {
	for _, opt := range []string{"-m1024", "-o", "-P", "-N", "-U", "-t", "-j", "-O"} {
		var out, errOut bytes.Buffer
		if code := run([]string{"ud_pingpong", opt, "-g", "0"}, &out, &errOut); code != exitUsage ||
			!strings.Contains(errOut.String(), "invalid option") {
			t.Errorf("ud_pingpong %s: exit %d, stderr %q; want usage error", opt, code, errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"ibv_ud_pingpong", "-h"}, &out, &errOut); code != exitOK ||
		!strings.Contains(out.String(), "UD SEND ping-pong with rdma-core's ibv_ud_pingpong") ||
		!strings.Contains(out.String(), "message size in bytes (1024)") {
		t.Errorf("ibv_ud_pingpong -h: exit %d\n%s", code, out.String())
	}
	out.Reset()
	errOut.Reset()
	args := []string{"ud_pingpong", "--roce-port", freePort(t, "udp"), "-p", freePort(t, "tcp"), "--ip", "127.0.0.1", "--link-mtu", "1500", "-s", "1025"}
	if code := run(args, &out, &errOut); code != exitError || !strings.Contains(errOut.String(), "Requested size larger than port MTU (1024)") {
		t.Errorf("-s 1025 on a 1500-byte link: exit %d, stderr %q", code, errOut.String())
	}
}

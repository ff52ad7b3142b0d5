package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestUCPingpong runs gorxe uc_pingpong both sides over the udp link: the
// run and the lines are ibv_uc_pingpong's, which are ibv_rc_pingpong's.
func TestUCPingpong(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		size, iters int
	}{
		{[]string{"-n", "200"}, 4096, 200},
		{[]string{"-s", "65536", "-n50", "-c", "-m", "4096", "--link-mtu", "9000"}, 65536, 50},
		{[]string{"--size=1000", "--iters=30", "-ec", "--rx-depth", "2", "-l3", "-d", "rxe0"}, 1000, 30},
	} {
		srv, cli := pingpongPair(t, "uc_pingpong", append([]string{"-g", "1"}, tc.args...), tc.args)
		for who, r := range map[string]ran{"server": srv, "client": cli} {
			if r.code != 0 || !rcLines(tc.size, tc.iters).MatchString(r.out) || r.errOut != "" {
				t.Errorf("%v: %s: exit %d\n%s\nstderr: %s", tc.args, who, r.code, r.out, r.errOut)
			}
		}
	}
}

// TestUCPingpongUsage: uc_pingpong takes uc_pingpong.c's options, not the
// ones rc_pingpong has grown since, and answers to ibv_uc_pingpong.
func TestUCPingpongUsage(t *testing.T) {
	for _, opt := range []string{"-o", "-P", "-N", "-U", "-t", "-j", "-O"} {
		var out, errOut bytes.Buffer
		if code := run([]string{"uc_pingpong", opt, "-g", "0"}, &out, &errOut); code != exitUsage ||
			!strings.Contains(errOut.String(), "invalid option") {
			t.Errorf("uc_pingpong %s: exit %d, stderr %q; want usage error", opt, code, errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"ibv_uc_pingpong", "-h"}, &out, &errOut); code != exitOK ||
		!strings.Contains(out.String(), "UC SEND ping-pong with rdma-core's ibv_uc_pingpong") {
		t.Errorf("ibv_uc_pingpong -h: exit %d\n%s", code, out.String())
	}
}

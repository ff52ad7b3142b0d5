package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// srqLines matches ibv_srq_pingpong's output for n QPs, size and iters
// filled in: a local address line per QP, a remote one per QP, then
// rc_pingpong's two result lines.
func srqLines(n, size, iters int) *regexp.Regexp {
	addr := func(which string) string {
		return strings.Repeat(`  `+which+` LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:127\.0\.0\.[12]
`, n)
	}
	return regexp.MustCompile(`^` + addr("local address: ") + addr("remote address:") +
		strconv.Itoa(2*size*iters) + ` bytes in \d+\.\d\d seconds = \d+\.\d\d Mbit/sec
` + strconv.Itoa(iters) + ` iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter
$`)
}

// TestSRQPingpong runs gorxe srq_pingpong both sides over the udp link:
// ibv_srq_pingpong's run and lines, -q QPs on each side.
func TestSRQPingpong(t *testing.T) {
	for _, tc := range []struct {
		args            []string
		qps, size, iter int
	}{
		{[]string{"-n", "200"}, 16, 4096, 200},
		{[]string{"-q", "4", "-r", "4", "-s", "65536", "-n50", "-c", "-m", "4096", "--link-mtu", "9000"}, 4, 65536, 50},
		{[]string{"--num-qp=2", "--size=1000", "--iters=30", "-eco", "-l3", "-d", "rxe0"}, 2, 1000, 30},
	} {
		srv, cli := pingpongPair(t, "srq_pingpong", append([]string{"-g", "1"}, tc.args...), tc.args)
		for who, r := range map[string]ran{"server": srv, "client": cli} {
			if r.code != 0 || !srqLines(tc.qps, tc.size, tc.iter).MatchString(r.out) || r.errOut != "" {
				t.Errorf("%v: %s: exit %d\n%s\nstderr: %s", tc.args, who, r.code, r.out, r.errOut)
			}
		}
	}
}

// TestSRQPingpongUsage: srq_pingpong takes srq_pingpong.c's options, its
// checks on -q, and answers to ibv_srq_pingpong.
func TestSRQPingpongUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-P"}, "invalid option"},
		{[]string{"-N"}, "invalid option"},
		{[]string{"-t"}, "invalid option"},
		{[]string{"-q", "0"}, "-q 0: want at least one QP"},
		{[]string{"-q", "17", "-r", "16"}, "rx_depth 16 is too small for 17 QPs"},
		{[]string{"-q", "256"}, "num_qp 256 must be less than 256"},
	} {
		var out, errOut bytes.Buffer
		if code := run(append([]string{"srq_pingpong", "-g", "0"}, tc.args...), &out, &errOut); code != exitUsage ||
			!strings.Contains(errOut.String(), tc.want) {
			t.Errorf("srq_pingpong %v: exit %d, stderr %q; want usage error with %q", tc.args, code, errOut.String(), tc.want)
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"ibv_srq_pingpong", "-h"}, &out, &errOut); code != exitOK ||
		!strings.Contains(out.String(), "RC SEND ping-pong with rdma-core's ibv_srq_pingpong") || !strings.Contains(out.String(), "--num-qp") {
		t.Errorf("ibv_srq_pingpong -h: exit %d\n%s", code, out.String())
	}
}

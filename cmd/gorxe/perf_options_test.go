package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gorxe/gorxe/internal/xsk"
)

// TestPerfRateLimit: --rate_limit holds write_bw's client to the rate in
// bursts of --burst_size, as perftest's SW limiter; the bursts start on
// the clock, so the run cannot be faster than its bursts' times allow.
func TestPerfRateLimit(t *testing.T) {
	for _, c := range []struct {
		args   []string
		mbps   float64 // the most the run can report
		stderr string
	}{
		// 64 KiB at 0.1 Gb/s: 190 messages a second, bursts of 10 every
		// 52.4 ms; 200 messages take 19 gaps at least.
		{[]string{"--rate_limit", "0.1", "--rate_limit_type", "SW", "--burst_size", "10", "-n", "200"}, 200.0 * 65536 / (1 << 20) / (19 * 10.0 / 190), ""},
		// 5 MiB/s: 80 a second, bursts of the tx depth (16) every 0.2 s.
		{[]string{"--rate_limit", "5", "--rate_units", "M", "--rate_limit_type", "SW", "-t", "16", "-n", "80"}, 80.0 * 65536 / (1 << 20) / (4 * 16.0 / 80), "Setting burst size to tx depth = 16"},
		// 160 messages a second in bursts of 20: HW, asked for by default,
		// is refused and SW takes its place.
		{[]string{"--rate_limit", "10", "--rate_units", "M", "--burst_size", "20", "-n", "100"}, 100.0 * 65536 / (1 << 20) / (4 * 20.0 / 160), "providing SW rate limit"},
	} {
		args := append([]string{"write_bw", "--link", "mem", "--json"}, c.args...)
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut.String())
		}
		var m struct {
			Avg float64 `json:"bw_avg_MBps"`
		}
		if err := json.Unmarshal(out.Bytes(), &m); err != nil {
			t.Fatalf("%v: %v in %q", args, err, out.String())
		}
		if m.Avg > c.mbps*1.001 || m.Avg < c.mbps/4 {
			t.Errorf("%v: %.2f MB/s, want at most %.2f (and not far below)", args, m.Avg, c.mbps)
		}
		if !strings.Contains(errOut.String(), c.stderr) {
			t.Errorf("%v: stderr %q, want %q", args, errOut.String(), c.stderr)
		}
	}
}

// TestPerfRateLimitUnpaced: perftest's fallback from HW to SW happens for
// a latency test and a -b run too, which its SW limiter does not pace:
// they run, unpaced.
func TestPerfRateLimitUnpaced(t *testing.T) {
	for _, args := range [][]string{
		{"write_lat", "--link", "mem", "-n", "100", "--rate_limit", "2.5", "--json"},
		{"write_bw", "--link", "mem", "-n", "100", "-b", "--rate_limit", "2.5", "--json"},
		{"read_bw", "--link", "mem", "-n", "100", "-b", "--rate_limit", "1", "--rate_units", "M", "--rate_limit_type", "SW", "--json"},
	} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 0 {
			t.Errorf("%v: exit %d: %s", args, code, errOut.String())
		}
	}
}

// TestPerfUsageErrors: command lines a perftest tool refuses as it
// starts, after its flags parse (the rate limiter's, --reversed's, the
// link's and the test's own checks), and those the parser refuses: exit
// status 2 with what is wrong, mostly in perftest's words. The parser's
// table of refused flags is TestPerfCommandLineErrors'.
func TestPerfUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args string
		want string
	}{
		{"write_bw -m 1000", "the MTU is 256, 512, 1024, 2048 or 4096"},
		{"atomic_bw -A SWAP", `atomic type "SWAP": want FETCH_AND_ADD or CMP_AND_SWAP`},
		{"write_bw --fault drop=7", "probability outside 0..1"},
		{"write_bw --link tap", "--link tap needs --ip"},
		{"read_lat --link mem somehost", "a SERVER needs --link udp, tap or xdp, not mem"},
		{"write_bw --link xdp", "--link xdp needs --dev IFACE"},
		{"write_bw --link xdp -R somehost", "--link xdp needs --dev IFACE"},
		{"write_bw --link xdp --dev lo --ip 10.0.0.1", "--link xdp takes its addresses from --dev lo"},
		{"write_bw --link tap --ip 10.0.0.1", "--link tap needs --ip ADDR/PREFIX"}, // tap needs a prefix
		{"send_bw --bogus", "unrecognized option '--bogus'"},
		{"write_bw --burst_size 8", "Can't enable burst mode when rate limiter is off"},
		{"write_bw --rate_limit 0", "Rate limit must be non-negative floating point number"},
		{"write_bw --rate_limit fast", "Rate limit must be non-negative floating point number"},
		{"write_bw --rate_limit NaN", "Rate limit must be non-negative floating point number"},
		{"write_bw --rate_limit 1 --rate_units k", "Invalid rate limit units"},
		{"write_bw --rate_limit_type LOW", "Invalid rate limit type flag"},
		{"write_bw --rate_limit 7", "Unknown rate limit value"},
		{"write_bw --rate_limit 10 --rate_units p", "pps rate limit units is not supported when setting HW rate limit"},
		{"write_bw --rate_limit 10 --rate_limit_type HW", "The QP failed to accept HW rate limit"},
		{"write_bw --rate_limit_type HW", "The QP failed to accept HW rate limit"},
		{"write_bw --rate_limit 1 --rate_limit_type PP", "Packet Pacing is only supported for Raw Ethernet"},
		{"write_bw --rate_limit 1 --rate_limit_type SW --typical_pkt_size 64", "Typical packet size only supports PP rate limiter"},
		{"write_bw --rate_limit_type SW", "needs a --rate_limit"},
		{"write_bw --rate_limit 1 --rate_limit_type SW --run_infinitely", "run_infinitely does not support rate limit"},
		{"write_bw --rate_limit 10 -R --link udp", "HW rate limit isn't supported yet with rdma_cm"},
		{"atomic_bw --rate_limit 1 --rate_limit_type SW", "SW Rate limiter can't be executed"},
		{"write_lat --rate_limit 1 --rate_limit_type SW", "SW Rate limiter can't be executed"},
		{"send_bw -b --rate_limit 1 --rate_limit_type SW", "SW Rate limiter can't be executed"},
		{"write_bw -a --rate_limit 1 --rate_units M --rate_limit_type SW", "less than one 8388608-byte message a second"},
		{"write_bw --reversed -R --link udp", "--reversed with -R or -z"},
		{"send_bw --reversed -z --link udp", "--reversed with -R or -z"},
	} {
		args := strings.Fields(c.args)
		if !strings.Contains(c.args, "--link") {
			args = append(args, "--link", "mem")
		}
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%s: exit %d, stderr %q, want %q", c.args, code, errOut.String(), c.want)
		}
	}
}

// TestPerfVerifier: -w and -y (perftest's --limit_bw and --limit_msgrate)
// make the exit status 1, with perftest's words, when the run reports
// less; with -a, one size that reaches the limit is enough, as in
// perftest. A latency test has no bandwidth to check.
func TestPerfVerifier(t *testing.T) {
	for _, c := range []struct {
		args   string
		code   int
		stderr string
	}{
		{"write_bw -n 100 -s 4096 -w 0.001", exitOK, ""},
		{"write_bw -n 100 -s 4096 -w 1e9", exitError, "Error: BW result is below bw limit"},
		{"write_bw -n 100 -s 4096 --report_gbits -w 1e6", exitError, "Error: BW result is below bw limit"},
		{"send_bw -n 100 -s 4096 -y 1e6", exitError, "Error: Msg rate is below msg_rate limit"},
		{"read_bw -n 100 -s 4096 -w 0.001 -y 0.000001 --json", exitOK, ""},
		{"write_bw -n 5 -a -w 1e9", exitError, "below bw limit"},
		{"write_bw -n 100 -b -w 1e9", exitError, "below bw limit"},
		{"write_lat -n 100 -w 1e9", exitOK, ""},
		{"write_bw -w -1", exitUsage, "Invalid Minimum BW Limit"},
		{"write_bw -y -1", exitUsage, "Invalid Minimum msgRate Limit"},
		{"write_bw -w lots", exitUsage, "not a number"},
	} {
		args := append(strings.Fields(c.args), "--link", "mem")
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != c.code || !strings.Contains(errOut.String(), c.stderr) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and %q", c.args, code, errOut.String(), c.code, c.stderr)
		}
	}
	// -a: 2-byte messages fall short of 10 MB/s (5 M a second), 8 MiB ones reach it.
	var out, errOut bytes.Buffer
	if code := run([]string{"write_bw", "-n", "5", "-a", "-w", "10", "--link", "mem"}, &out, &errOut); code != exitOK {
		t.Errorf("-a -w 10: exit %d: %s", code, errOut.String())
	}
}

// TestPerfLatencyGap: --latency_gap N makes each side of write_lat spin N
// µs before each post, so every round trip holds two gaps and the
// reported latency, half of it, at least one.
func TestPerfLatencyGap(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"write_lat", "--link", "mem", "-n", "50", "--latency_gap", "2000", "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var m struct {
		Min float64 `json:"t_min_us"`
	}
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatalf("%v in %q", err, out.String())
	}
	if m.Min < 2000 {
		t.Errorf("t_min %.1f µs, want at least the 2000 µs gap", m.Min)
	}
	for _, c := range []struct{ args, want string }{
		{"write_bw --latency_gap 10", "Latency gap feature is only for latency tests"},
		{"write_lat --latency_gap -1", "non-negative"},
	} {
		var out, errOut bytes.Buffer
		if code := run(append(strings.Fields(c.args), "--link", "mem"), &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%s: exit %d, stderr %q, want %q", c.args, code, errOut.String(), c.want)
		}
	}
}

// TestPerfReportBoth: with -b, --report-both prints each side's own line
// after the summed one, under "Local results" and "Remote results", as
// perftest does; without -b it prints nothing more.
func TestPerfReportBoth(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"write_bw", "--link", "mem", "-n", "100", "-s", "4096", "-b", "--report-both"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	s := out.String()
	local, remote := strings.Index(s, "\n Local results: \n"), strings.Index(s, "\n Remote results: \n")
	if local < 0 || remote < local {
		t.Fatalf("no Local and Remote results, in order, in:\n%s", s)
	}
	// Three lines of 4096-byte results: the sum, the local, the remote.
	var avgs []float64
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 5 && f[0] == "4096" {
			var avg float64
			if _, err := fmt.Sscan(f[3], &avg); err != nil {
				t.Fatal(err)
			}
			avgs = append(avgs, avg)
		}
	}
	if len(avgs) != 3 || math.Abs(avgs[0]-(avgs[1]+avgs[2])) > 0.02 {
		t.Errorf("averages %v: want the sum, then its two parts", avgs)
	}
	out.Reset()
	if code := run([]string{"write_bw", "--link", "mem", "-n", "100", "-s", "4096", "--report-both"}, &out, &errOut); code != 0 || strings.Contains(out.String(), "results:") {
		t.Errorf("one-way run: exit %d, output:\n%s", code, out.String())
	}
}

// TestCounterWatchLinkNames: -W takes every name a link's counters may
// have (checked against the link's own once it is open), the xdp link's
// AF_XDP socket counters among them.
func TestCounterWatchLinkNames(t *testing.T) {
	names := []string{"udp_socket_drops", "tap_drop_queue_full", "if_tx_dropped", "xdp_looped", "if_rx_dropped"}
	for _, c := range (&xsk.Stats{}).Named() {
		names = append(names, c.Name)
	}
	for _, n := range names {
		if _, err := parseCounterWatch("hw_counters/" + n); err != nil {
			t.Errorf("-W hw_counters/%s: %v", n, err)
		}
	}
}

// TestPerfReportCounters: -W prints, after each result line, how much the
// named counters grew over that run, as perftest's counters_print; a
// counter gorxe's device has not is refused.
func TestPerfReportCounters(t *testing.T) {
	var out, errOut bytes.Buffer
	args := []string{"write_bw", "--link", "mem", "-n", "5", "-m", "1024", "-a", "-W", "hw_counters/sent_pkts,hw_counters/rdma_sends"}
	if code := run(args, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	s := out.String()
	// 8 MiB at MTU 1024 is 8192 packets a message, 5 messages; a probe
	// sent again on a slow machine (the race detector's) may add one.
	sent := -1
	if m := regexp.MustCompile(`\n 8388608 .*\n\thw_counters/sent_pkts=(\d+)\n\thw_counters/rdma_sends=0\n\n`).FindStringSubmatch(s); m != nil {
		sent, _ = strconv.Atoi(m[1])
	}
	if sent < 40960 || sent > 40960+40 {
		t.Errorf("no 8 MiB line followed by its counters (40960 packets sent) in:\n%s", s)
	}
	if n := strings.Count(s, "\thw_counters/sent_pkts="); n != 23 {
		t.Errorf("%d counter blocks, want one for each of the 23 sizes", n)
	}
	for _, bad := range []string{"counters/port_xmit_data", "hw_counters/nosuch", "sent_pkts", "hw_counters/../x", "hw_counters/ud_sent"} {
		errOut.Reset()
		if code := run([]string{"write_bw", "--link", "mem", "-W", bad}, &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), "Unable to access performance counters") {
			t.Errorf("-W %s: exit %d, stderr %q", bad, code, errOut.String())
		}
	}
}

// TestPerfUseSRQ: --use-srq runs the send tests on a shared receive
// queue, says so in the banner, and is refused for the others in
// perftest's words.
func TestPerfUseSRQ(t *testing.T) {
	for _, args := range [][]string{
		{"send_bw", "--link", "mem", "--use-srq", "-q", "3", "--check", "-n", "300"},
		{"send_lat", "--link", "mem", "--use-srq", "-c", "UD", "--check", "-n", "300"},
	} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut.String())
		}
		for _, want := range []string{"Using SRQ      : ON", "data check: ok"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: no %q in\n%s", args, want, out.String())
			}
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"write_bw", "--link", "mem", "--use-srq"}, &out, &errOut); code == 0 ||
		!strings.Contains(errOut.String(), "Using SRQ only avavilible in SEND / SEND_IMM tests.") {
		t.Errorf("write_bw --use-srq: exit %d, stderr %q", code, errOut.String())
	}
}

// TestPerfPortMTU: as perftest's set_mtu, a side takes its port's active
// MTU when -m is not given, and lowers a larger -m to it, saying so in
// perftest's words (the active MTU by its enum value, 3 for 1024) just
// before its banner; the run then goes on at the smaller of both sides' MTUs.
// The udp link's --link-mtu is the port's interface MTU here: 1500 carries
// 1024, the loopback's 65536 carries 4096. Before, a -m above what the link
// carries sent packets the link could not carry, and no send completed.
func TestPerfPortMTU(t *testing.T) {
	const note = "Requested mtu is higher than active mtu \nChanging to active mtu - 3\n"
	for _, tc := range []struct {
		server, client []string
		mtus           [2]string // the server's banner, the client's
		notes          [2]bool
	}{
		{[]string{"-m", "4096", "--link-mtu", "1500"}, []string{"-m", "4096", "--link-mtu", "1500"}, [2]string{"1024", "1024"}, [2]bool{true, true}},
		{nil, nil, [2]string{"4096", "4096"}, [2]bool{}},
		{[]string{"-m", "2048"}, []string{"--link-mtu", "1500"}, [2]string{"2048", "1024"}, [2]bool{}},
		{[]string{"--link-mtu", "1500"}, []string{"-m", "4096"}, [2]string{"1024", "4096"}, [2]bool{}},
	} {
		args := []string{"-n", "20", "-s", "10000", "--check"}
		srv, cli := pingpongPair(t, "write_bw", append([]string{"--ip", "127.0.0.1"}, append(args, tc.server...)...), append(slices.Clone(args), tc.client...))
		for i, r := range []ran{srv, cli} {
			ok := r.code == 0 && strings.Contains(r.out, "data check: ok") &&
				strings.Contains(r.out, " Mtu             : "+tc.mtus[i]+"[B]\n") &&
				strings.Contains(r.out, note+"----") == tc.notes[i] && strings.Contains(r.out, "Requested mtu") == tc.notes[i]
			if !ok {
				t.Errorf("server %v, client %v: side %d: exit %d, want Mtu %s and the note %v\n%s\nstderr: %s", tc.server, tc.client, i, r.code, tc.mtus[i], tc.notes[i], r.out, r.errOut)
			}
		}
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/trace"
)

// freePort returns a port of network ("tcp" or "udp") free on 127.0.0.1
// a moment ago.
func freePort(t *testing.T, network string) string {
	t.Helper()
	var addr net.Addr
	switch network {
	case "tcp":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = ln.Addr()
		ln.Close()
	default:
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = c.LocalAddr()
		c.Close()
	}
	_, port, _ := net.SplitHostPort(addr.String())
	return port
}

type ran struct {
	code        int
	out, errOut string
}

// rcPingpongPair runs "gorxe rc_pingpong" as a server on 127.0.0.1 (its
// arguments say how it finds that address: --ip, or -g) and a client on
// 127.0.0.2 (--ip) over the udp link, in this process.
func rcPingpongPair(t *testing.T, serverArgs, clientArgs []string) (server, client ran) {
	t.Helper()
	return pingpongPair(t, "rc_pingpong", serverArgs, clientArgs)
}

// pingpongPair is rcPingpongPair for the command tool (rc_pingpong,
// uc_pingpong, or any tool whose -p is its TCP port and whose operand is
// the server's host, as perftest's).
func pingpongPair(t *testing.T, tool string, serverArgs, clientArgs []string) (server, client ran) {
	t.Helper()
	tcp, roce := freePort(t, "tcp"), freePort(t, "udp")
	common := []string{tool, "--roce-port", roce, "-p", tcp, "--give-up", "5s"}
	done := make(chan ran, 1)
	go func() {
		var out, errOut bytes.Buffer
		code := run(append(slices.Clone(common), serverArgs...), &out, &errOut)
		done <- ran{code, out.String(), errOut.String()}
	}()
	var out, errOut bytes.Buffer
	// The client retries while the server does not listen yet; the host
	// comes first, as ibv_rc_pingpong's getopt allows.
	args := append(append(slices.Clone(common), "127.0.0.1", "--ip", "127.0.0.2"), clientArgs...)
	code := run(args, &out, &errOut)
	client = ran{code, out.String(), errOut.String()}
	select {
	case server = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("the server did not finish; client: %+v", client)
	}
	return server, client
}

// rcLines matches ibv_rc_pingpong's output, size and iters filled in.
func rcLines(size, iters int) *regexp.Regexp {
	return regexp.MustCompile(`^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:127\.0\.0\.[12]
  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:127\.0\.0\.[12]
` + strconv.Itoa(2*size*iters) + ` bytes in \d+\.\d\d seconds = \d+\.\d\d Mbit/sec
` + strconv.Itoa(iters) + ` iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter
$`)
}

func TestRCPingpong(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		size, iters int
	}{
		{[]string{"-n", "200"}, 4096, 200},
		{[]string{"-s", "65536", "-n50", "-c", "-m", "4096", "--link-mtu", "9000"}, 65536, 50},
		{[]string{"--size=1000", "--iters=30", "-ec", "--rx-depth", "2", "-oPN", "-l3", "-d", "rxe0", "--new_s"}, 1000, 30},
		{[]string{"-n", "20", "--cc", "none"}, 4096, 20},
		{[]string{"-n", "20", "--cc-profile", "paper"}, 4096, 20},
		{[]string{"-n", "20", "--line-rate", "10G", "--pacing-burst", "4K", "--cc-param", "rpg_time_reset=1000"}, 4096, 20},
	} {
		// The server's address is the GID -g 1 names on lo, as rxe's
		// table on lo would have it: 0 the default GID, 1 127.0.0.1.
		srv, cli := rcPingpongPair(t, append([]string{"-g", "1"}, tc.args...), tc.args)
		for who, r := range map[string]ran{"server": srv, "client": cli} {
			if r.code != 0 || !rcLines(tc.size, tc.iters).MatchString(r.out) || r.errOut != "" {
				t.Errorf("%v: %s: exit %d\n%s\nstderr: %s", tc.args, who, r.code, r.out, r.errOut)
			}
		}
	}
}

// TestRCPingpongTraceJSON: --trace-json writes each side's events as
// JSON Lines: its QP's way to RTS, then the ERR of its end.
func TestRCPingpongTraceJSON(t *testing.T) {
	dir := t.TempDir()
	files := []string{filepath.Join(dir, "server.jsonl"), filepath.Join(dir, "client.jsonl")}
	srv, cli := rcPingpongPair(t, []string{"-g", "1", "-n", "10", "--trace-json", files[0]}, []string{"-n", "10", "--trace-json", files[1]})
	if srv.code != 0 || cli.code != 0 {
		t.Fatalf("exit %d and %d\nstderr: %s\n%s", srv.code, cli.code, srv.errOut, cli.errOut)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var states []string
		for line := range strings.Lines(string(b)) {
			var ev trace.Event
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("%s: %q: %v", f, line, err)
			}
			if ev.Device != "gorxe0" || ev.QP == 0 {
				t.Errorf("%s: %q: not gorxe0's QP", f, line)
			}
			if ev.Kind == trace.State {
				states = append(states, ev.To)
			}
		}
		if want := []string{"INIT", "RTR", "RTS"}; len(states) < 3 || !slices.Equal(states[:3], want) {
			t.Errorf("%s: the QP went through %v, want %v first\n%s", f, states, want, b)
		}
	}
}

// TestRCPingpongCheckFails: a server with -c against a client without it
// finds no mark at the start of any page, prints ibv_rc_pingpong's line
// for each, and (unlike ibv_rc_pingpong) exits 1.
func TestRCPingpongCheckFails(t *testing.T) {
	srv, cli := rcPingpongPair(t, []string{"--ip", "127.0.0.1", "-s", "10000", "-n", "5", "-c"}, []string{"-s", "10000", "-n", "5"})
	if cli.code != 0 {
		t.Errorf("client: exit %d: %s", cli.code, cli.errOut)
	}
	pages := 0
	for _, l := range strings.Split(srv.out, "\n") {
		if strings.HasPrefix(l, "invalid data in page ") {
			pages++
		}
	}
	if srv.code != exitError || pages == 0 || !strings.Contains(srv.errOut, "-c:") {
		t.Errorf("server: exit %d, %d bad pages\n%s\nstderr: %s", srv.code, pages, srv.out, srv.errOut)
	}
}

func TestRCPingpongUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{}, exitUsage, "no GID: RoCE needs one: give -g INDEX"},
		{[]string{"-g", "0", "--link", "mem"}, exitUsage, "--link mem"},
		{[]string{"-g", "0", "--link", "tap"}, exitUsage, "--link tap needs --ip"},
		{[]string{"-g", "1", "--link", "xdp"}, exitUsage, "--link xdp needs --dev IFACE"},
		{[]string{"-g", "1", "-t"}, exitUsage, "-t: the device isn't completion timestamp capable"},
		{[]string{"-g", "1", "--ts"}, exitUsage, "-t: the device isn't completion timestamp capable"},
		{[]string{"-g", "1", "-j"}, exitUsage, "-j: the device doesn't support dm allocation"},
		{[]string{"-g", "1", "-oO"}, exitUsage, "-O: implicit ODP"},
		{[]string{"-g", "1", "-P"}, exitUsage, "prefetch is valid only with on-demand memory region"},
		{[]string{"-g", "1", "-U", "-o"}, exitUsage, "CoCo unprotected memory cannot be used with ODP"},
		{[]string{"-g", "1", "-m", "1000"}, exitUsage, "-m 1000"},
		{[]string{"-g", "1", "-p", "70000"}, exitUsage, "-p 70000"},
		{[]string{"-g", "1", "-i", "2"}, exitUsage, "IB port 2"},
		{[]string{"-g", "1", "-l", "16"}, exitUsage, "-l 16"},
		{[]string{"-g", "1", "-r", "0"}, exitUsage, "rx depth 0"},
		{[]string{"-g", "1", "-s", "junk"}, exitUsage, "not a number"},
		{[]string{"-g", "1", "-x", "1"}, exitUsage, "invalid option"},
		{[]string{"-g", "1", "a", "b"}, exitUsage, `one HOST at most, got ["a" "b"]`},
		{[]string{"-g", "1", "--roce-port", "0"}, exitUsage, "not a UDP port"},
		{[]string{"-g", "1", "--give-up", "0"}, exitUsage, "want a positive duration"},
		{[]string{"-g", "1", "--cc", "cubic"}, exitUsage, "want dcqcn"},
		{[]string{"-g", "1", "--cc-profile", "x"}, exitUsage, "want connectx"},
		{[]string{"-g", "1", "--cc", "none", "--cc-profile", "paper"}, exitUsage, "congestion control is off"},
		{[]string{"-g", "1", "--cc", "none", "--line-rate", "1G"}, exitUsage, "congestion control is off"},
		{[]string{"-g", "1", "--cc-param", "rpg_ai_rate"}, exitUsage, "NAME=VALUE"},
	} {
		var out, errOut bytes.Buffer
		code := run(append([]string{"rc_pingpong"}, tc.args...), &out, &errOut)
		if code != tc.code || !strings.Contains(errOut.String(), tc.want) || out.Len() != 0 {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want exit %d and %q", tc.args, code, errOut.String(), out.String(), tc.code, tc.want)
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"help", "rc_pingpong"}, &out, &errOut); code != exitOK ||
		!strings.Contains(out.String(), "ibv_rc_pingpong options gorxe refuses:") || !strings.Contains(out.String(), "-g, --gid-idx VALUE") {
		t.Errorf("gorxe help rc_pingpong: exit %d\n%s", code, out.String())
	}
	if code := run([]string{"ibv_rc_pingpong", "-t"}, &out, &errOut); code != exitUsage {
		t.Errorf("gorxe ibv_rc_pingpong -t: exit %d, want the alias to run rc_pingpong", code)
	}
}

// TestRCPingpongOpenErrors: settings only the open device can refuse
// fail with exit 1 before any exchange.
func TestRCPingpongOpenErrors(t *testing.T) {
	roce := freePort(t, "udp")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ip", "127.0.0.1", "-g", "0"}, "-g 0 names GID 0 of lo, but --ip 127.0.0.1 is GID 1 (gorxe show_gids lo); give one of them"},
		// An address of lo's range that lo does not list takes the slot
		// after what show_gids lists, which the error says.
		{[]string{"--ip", "127.0.0.2", "-g", "1"}, "127.0.0.2 takes the next); give one of them"},
		{[]string{"--ip", "127.0.0.1", "-m", "4096", "--link-mtu", "1500"}, "path MTU 4096 is more than gorxe0's link carries (1024)"},
		{[]string{"-g", "99", "127.0.0.1"}, "GID index 99: lo's table has"},
		{[]string{"--ip", "127.0.0.1", "--trace-json", "/nonexistent/events.jsonl"}, "--trace-json: open /nonexistent/events.jsonl"},
	} {
		var out, errOut bytes.Buffer
		args := append([]string{"rc_pingpong", "--roce-port", roce, "-p", freePort(t, "tcp")}, tc.args...)
		if code := run(args, &out, &errOut); code != exitError || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 and %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

package main

import (
	"bytes"
	"flag"
	"io"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
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

// rcPingpongPair runs "gorxe rc_pingpong" as a server on 127.0.0.1 and a
// client on 127.0.0.2 over the udp link, in this process, each with its
// extra arguments.
func rcPingpongPair(t *testing.T, serverArgs, clientArgs []string) (server, client ran) {
	t.Helper()
	tcp, roce := freePort(t, "tcp"), freePort(t, "udp")
	common := []string{"rc_pingpong", "--roce-port", roce, "-p", tcp, "-g", "0", "--give-up", "5s"}
	done := make(chan ran, 1)
	go func() {
		var out, errOut bytes.Buffer
		code := run(append(append(slices.Clone(common), "--ip", "127.0.0.1"), serverArgs...), &out, &errOut)
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
		{[]string{"-s", "65536", "-n", "50", "-c", "-m", "4096", "--link-mtu", "9000"}, 65536, 50},
		{[]string{"--size=1000", "--iters=30", "--events", "--chk", "--rx-depth", "2", "-o", "-P", "-N", "-l", "3"}, 1000, 30},
	} {
		srv, cli := rcPingpongPair(t, tc.args, tc.args)
		for who, r := range map[string]ran{"server": srv, "client": cli} {
			if r.code != 0 || !rcLines(tc.size, tc.iters).MatchString(r.out) || r.errOut != "" {
				t.Errorf("%v: %s: exit %d\n%s\nstderr: %s", tc.args, who, r.code, r.out, r.errOut)
			}
		}
	}
}

// TestRCPingpongCheckFails: a server with -c against a client without it
// finds no mark at the start of any page, prints ibv_rc_pingpong's line
// for each, and (unlike ibv_rc_pingpong) exits 1.
func TestRCPingpongCheckFails(t *testing.T) {
	srv, cli := rcPingpongPair(t, []string{"-s", "10000", "-n", "5", "-c"}, []string{"-s", "10000", "-n", "5"})
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
		{[]string{"--ip", "127.0.0.1"}, exitUsage, "RoCE needs one (-g)"},
		{[]string{"-g", "0"}, exitUsage, "--link udp needs --ip"},
		{[]string{"-g", "0", "--link", "mem"}, exitUsage, "--link mem"},
		{[]string{"-g", "0", "--ip", "127.0.0.1", "-t"}, exitUsage, "-t: the device isn't completion timestamp capable"},
		{[]string{"-g", "0", "--ip", "127.0.0.1", "-j"}, exitUsage, "-j: the device doesn't support dm allocation"},
		{[]string{"-g", "0", "--ip", "127.0.0.1", "-O"}, exitUsage, "-O: implicit ODP"},
		{[]string{"-g", "0", "--ip", "127.0.0.1", "-P"}, exitUsage, "prefetch is valid only with on-demand memory region"},
		{[]string{"-g", "0", "--ip", "127.0.0.1", "-o", "-j"}, exitUsage, "DM memory region can't be on demand"},
		{[]string{"-g", "0", "--ip", "127.0.0.1", "-U", "-o"}, exitUsage, "CoCo unprotected memory cannot be used with ODP"},
		{[]string{"-g", "0", "--ip", "127.0.0.1", "-m", "1000"}, exitUsage, "-m 1000"},
		{[]string{"-g", "0", "--ip", "127.0.0.1", "-p", "70000"}, exitUsage, "-p 70000"},
		{[]string{"-g", "0", "--ip", "127.0.0.1", "-i", "2"}, exitUsage, "IB port 2"},
		{[]string{"-g", "0", "--ip", "127.0.0.1", "-l", "16"}, exitUsage, "-l 16"},
		{[]string{"-g", "0", "--ip", "127.0.0.1", "-r", "0"}, exitUsage, "rx depth 0"},
		{[]string{"-g", "0", "--ip", "127.0.0.1", "-s", "junk"}, exitUsage, `invalid value "junk" for flag -s`},
		{[]string{"-g", "0", "--ip", "127.0.0.1", "a", "b"}, exitUsage, `one HOST at most, got ["a" "b"]`},
		{[]string{"-g", "1", "--ip", "127.0.0.1", "--roce-port", "0"}, exitUsage, "--roce-port 0: not a UDP port"},
	} {
		var out, errOut bytes.Buffer
		code := run(append([]string{"rc_pingpong"}, tc.args...), &out, &errOut)
		if code != tc.code || !strings.Contains(errOut.String(), tc.want) || out.Len() != 0 {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want exit %d and %q", tc.args, code, errOut.String(), out.String(), tc.code, tc.want)
		}
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
		{[]string{"-g", "1"}, "can't read sgid of index 1"},
		{[]string{"-g", "0", "-d", "rxe0"}, "IB device rxe0 not found"},
		{[]string{"-g", "0", "-m", "4096", "--link-mtu", "1500"}, "path MTU 4096 is more than gorxe0's link carries (1024)"},
	} {
		var out, errOut bytes.Buffer
		args := append([]string{"rc_pingpong", "--ip", "127.0.0.1", "--roce-port", roce, "-p", freePort(t, "tcp")}, tc.args...)
		if code := run(args, &out, &errOut); code != exitError || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 and %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args []string
		pos  []string
		n    int
	}{
		{[]string{"-n", "5", "host"}, []string{"host"}, 5},
		{[]string{"host", "-n", "5"}, []string{"host"}, 5},
		{[]string{"a", "-n", "5", "b"}, []string{"a", "b"}, 5},
		{[]string{"-n", "5", "--", "-n", "6"}, []string{"-n", "6"}, 5},
		{[]string{"a", "--", "-n"}, []string{"a", "-n"}, 0},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		n := fs.Int("n", 0, "")
		pos, err := parseInterspersed(fs, tc.args)
		if err != nil || !slices.Equal(pos, tc.pos) || *n != tc.n {
			t.Errorf("%q: %q, -n %d, %v; want %q, -n %d", tc.args, pos, *n, err, tc.pos, tc.n)
		}
	}
}

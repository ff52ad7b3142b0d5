//go:build linux

package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

var allTests = []string{"write_bw", "read_bw", "send_bw", "atomic_bw", "write_lat", "read_lat", "send_lat"}

// testArgs returns the gorxe arguments that make a short run of test.
func testArgs(test string, mtu int) []string {
	args := []string{test, "--check", "--json", "-m", fmt.Sprint(mtu), "--give-up", "20s"}
	switch {
	case strings.HasSuffix(test, "_lat"):
		args = append(args, "-n", "200")
	case test == "atomic_bw":
		args = append(args, "-n", "500")
	default:
		args = append(args, "-n", "200", "-s", "65536")
	}
	return args
}

// TestUDPLink runs every test between two namespaces joined by a veth,
// over the udp link, IPv4 and IPv6, path MTU 1024 and 4096.
func TestUDPLink(t *testing.T) {
	needRoot(t)
	a, b := newNS(t, "a"), newNS(t, "b")
	vethPair(t, a, b, 9000)
	for _, v := range []struct{ name, client, server, serverAddr string }{
		{"IPv4", "10.77.0.1", "10.77.0.2", "10.77.0.2"},
		{"IPv6", "fd77::1", "fd77::2", "fd77::2"},
	} {
		for _, mtu := range []int{1024, 4096} {
			for _, test := range allTests {
				t.Run(fmt.Sprintf("%s/mtu%d/%s", v.name, mtu, test), func(t *testing.T) {
					base := testArgs(test, mtu)
					srv := append(append([]string{}, base...), "--link", "udp", "--ip", v.server)
					cli := append(append([]string{}, base...), "--link", "udp", "--ip", v.client, v.serverAddr)
					pair(t, b, a, srv, cli)
				})
			}
		}
	}
	// Sizes from 1 byte to 8 MiB.
	t.Run("sizes", func(t *testing.T) {
		run := func(args ...string) {
			args = append(args, "--check", "--link", "udp")
			srv := append(append([]string{}, args...), "--ip", "10.77.0.2")
			cli := append(append([]string{}, args...), "--ip", "10.77.0.1", "10.77.0.2")
			pair(t, b, a, srv, cli)
		}
		for _, s := range []string{"1", "4097", "8388608"} {
			run("write_bw", "--json", "-n", "20", "-s", s, "-m", "4096")
		}
		run("read_bw", "-a", "-n", "5", "-m", "4096")
	})
}

// TestXDPLink runs every test between two namespaces joined by a veth,
// over the xdp link on each end (its addresses are the veth's, its next
// hops' MACs the kernel's neighbour table's), IPv4 and IPv6, path MTU
// 1024 and 4096 (which takes two UMEM frames a packet), with sizes from
// 1 byte to 8 MiB, and between the veths' link-local addresses (-x 0,
// the default GID, as on rxe), and checks that the sockets took every
// RoCE packet.
func TestXDPLink(t *testing.T) {
	needRoot(t)
	a, b := newNS(t, "a"), newNS(t, "b")
	vethPair(t, a, b, 9000)
	for _, v := range []struct {
		name, serverAddr string
		mtus             []int
		flags            []string
	}{
		{"IPv4", "10.77.0.2", []int{1024, 4096}, nil},
		{"IPv6", "fd77::2", []int{1024, 4096}, []string{"--ipv6"}},
		{"link-local", "10.77.0.2", []int{4096}, []string{"-x", "0"}},
	} {
		if v.name == "link-local" {
			linkLocalReady(t, a, "va")
			linkLocalReady(t, b, "vb")
		}
		for _, mtu := range v.mtus {
			for _, test := range allTests {
				t.Run(fmt.Sprintf("%s/mtu%d/%s", v.name, mtu, test), func(t *testing.T) {
					base := append(testArgs(test, mtu), v.flags...)
					ll := v.name == "link-local"
					if ll {
						// perftest's text, which has the address lines.
						base = slices.DeleteFunc(base, func(a string) bool { return a == "--json" })
					}
					srv := append(append([]string{}, base...), "--link", "xdp", "--dev", "vb")
					cli := append(append([]string{}, base...), "--link", "xdp", "--dev", "va", v.serverAddr)
					server, client := pair(t, b, a, srv, cli)
					if ll {
						checkLinkLocalGIDs(t, server, client)
					}
				})
			}
		}
	}
	// The sockets, not the kernel, took the RoCE packets, every IPv4 ICRC
	// checked; and a packet with a bad ICRC, which the udp link cannot
	// detect over IPv4, is dropped and counted.
	t.Run("counters", func(t *testing.T) {
		base := append(testArgs("write_bw", 4096), "--counters", "--link", "xdp")
		server := start(t, b, append(append([]string{}, base...), "--dev", "vb")...)
		time.Sleep(300 * time.Millisecond) // the server's device opens before it listens
		// An RC SEND Only to QP 0x11 with a wrong ICRC, from a kernel UDP
		// socket in a: the XDP program steers it to the server's socket.
		bad := `\x04\x00\xff\xff\x00\x00\x00\x11\x80\x00\x00\x01hello, RDMA!\xde\xad\xbe\xef`
		sh(t, "ip", "netns", "exec", a.name, "bash", "-c", "printf '"+bad+"' > /dev/udp/10.77.0.2/4791")
		client := start(t, a, append(append([]string{}, base...), "--dev", "va", "10.77.0.2")...)
		for _, g := range []*gorxe{client, server} {
			if err := g.wait(t, 60*time.Second); err != nil {
				t.Fatalf("%v: %v\n%s\n%s", g.cmd.Args[3:], err, g.out.String(), g.errOut.String())
			}
		}
		sc, cc := jsonCounters(t, server), jsonCounters(t, client)
		// 200 WRITEs of 64 KiB at path MTU 4096: 3200 packets.
		if sc["xdp_redirected"] < 3200 || sc["xsk_rx_packets"] < 3200 || sc["rcvd_pkts"] < 3200 || cc["xdp_redirected"] == 0 {
			t.Errorf("server: %d redirected, %d off its sockets, %d to its QPs; client: %d redirected",
				sc["xdp_redirected"], sc["xsk_rx_packets"], sc["rcvd_pkts"], cc["xdp_redirected"])
		}
		// Each side says on stderr where its program runs and how its
		// sockets bind: veth has driver mode, and no zero-copy (refused
		// "operation not supported", or "device or resource busy" while
		// the kernel still releases an earlier subtest's socket on the
		// queue).
		for _, g := range []*gorxe{server, client} {
			if !xdpLogLine.MatchString(g.errOut.String()) {
				t.Errorf("%v: no line on how the xdp link attached in its stderr:\n%s", g.cmd.Args[3:], g.errOut.String())
			}
		}
		if sc["icrc_errors"] != 1 || cc["icrc_errors"] != 0 {
			t.Errorf("icrc_errors: server %d, want the bad packet's 1; client %d, want 0", sc["icrc_errors"], cc["icrc_errors"])
		}
	})
	// The xdp link against the udp link on the other host, both ways.
	for _, test := range []string{"write_bw", "read_bw", "send_lat"} {
		t.Run("udp-peer/"+test, func(t *testing.T) {
			base := testArgs(test, 4096)
			pair(t, b, a, append(append([]string{}, base...), "--link", "xdp", "--dev", "vb"),
				append(append([]string{}, base...), "--link", "udp", "--ip", "10.77.0.1", "10.77.0.2"))
			pair(t, b, a, append(append([]string{}, base...), "--link", "udp", "--ip", "10.77.0.2"),
				append(append([]string{}, base...), "--link", "xdp", "--dev", "va", "10.77.0.2"))
		})
	}
	t.Run("sizes", func(t *testing.T) {
		run := func(args ...string) {
			args = append(args, "--check", "--link", "xdp")
			srv := append(append([]string{}, args...), "--dev", "vb")
			cli := append(append([]string{}, args...), "--dev", "va", "10.77.0.2")
			pair(t, b, a, srv, cli)
		}
		for _, s := range []string{"1", "4097", "8388608"} {
			run("write_bw", "--json", "-n", "20", "-s", s, "-m", "4096")
		}
		run("read_bw", "-a", "-n", "5", "-m", "4096")
	})
}

// xdpLogLine is the line a tool on the xdp link prints about its
// attachment on a veth.
var xdpLogLine = regexp.MustCompile(`(?m)^gorxe: xdp: v[ab] in driver mode; \d+ queue\(s\), copy sockets \(zero-copy refused: [^)]+\), multi-buffer true$`)

// TestTAPLink runs every test between two gorxe hosts on TAP devices
// attached to one bridge, IPv4 and IPv6, path MTU 1024 and 4096, and
// between their link-local addresses (-x 0, the default GID, as on rxe).
// The out-of-band TCP exchange uses the namespace's loopback.
func TestTAPLink(t *testing.T) {
	needRoot(t)
	br := bridgeNS(t, 9000)
	n := 0
	for _, v := range []struct {
		name           string
		client, server string
		mtus           []int
		flags          []string
	}{
		{"IPv4", "10.78.0.1/24", "10.78.0.2/24", []int{1024, 4096}, nil},
		{"IPv6", "fd78::1/64", "fd78::2/64", []int{1024, 4096}, nil},
		{"link-local", "10.78.0.1/24", "10.78.0.2/24", []int{4096}, []string{"-x", "0"}},
	} {
		for _, mtu := range v.mtus {
			for _, test := range allTests {
				n++
				t.Run(fmt.Sprintf("%s/mtu%d/%s", v.name, mtu, test), func(t *testing.T) {
					base := append(testArgs(test, mtu), "--link", "tap", "--bridge", "br0", "--link-mtu", "9000", "-p", fmt.Sprint(18515+n))
					if v.flags != nil {
						// perftest's text, which has the address lines.
						base = slices.DeleteFunc(base, func(a string) bool { return a == "--json" })
						base = append(base, v.flags...)
					}
					srv := append(append([]string{}, base...), "--ip", v.server, "--tap", fmt.Sprintf("gxs%d", n))
					cli := append(append([]string{}, base...), "--ip", v.client, "--tap", fmt.Sprintf("gxc%d", n), "127.0.0.1")
					server, client := pair(t, br, br, srv, cli)
					if v.flags != nil {
						checkLinkLocalGIDs(t, server, client)
					}
				})
			}
		}
	}
}

// linkLocalReady waits until dev in n has its link-local address, made
// when the device came up, and the address is past duplicate address
// detection: before, the kernel answers no neighbour solicitation for it.
func linkLocalReady(t *testing.T, n *netns, dev string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		out := n.ip(t, "-6", "addr", "show", "dev", dev, "scope", "link")
		if strings.Contains(out, "inet6 fe80:") && !strings.Contains(out, "tentative") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has no usable link-local address 5 s after it came up:\n%s", dev, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkLinkLocalGIDs checks that both sides' address lines, perftest's,
// name link-local GIDs: fe80 printed as 254:128.
func checkLinkLocalGIDs(t *testing.T, sides ...*gorxe) {
	t.Helper()
	for _, g := range sides {
		if n := strings.Count(g.out.String(), " GID: 254:128:00:00:00:00:00:00:"); n != 2 {
			t.Errorf("%v: %d link-local GIDs in the address lines, want 2\n%s", g.cmd.Args[3:], n, g.out.String())
		}
	}
}

// TestPingTAPHost: a gorxe host on a TAP device answers ping and ping -6.
func TestPingTAPHost(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("ping"); err != nil {
		t.Fatal("ping is not installed: make test installs iputils-ping")
	}
	br := bridgeNS(t, 1500)
	srv := start(t, br, "write_bw", "--link", "tap", "--bridge", "br0", "--tap", "gxping", "--ip", "10.78.0.7/24", "-p", "18600")
	srv6 := start(t, br, "write_bw", "--link", "tap", "--bridge", "br0", "--tap", "gxping6", "--ip", "fd78::7/64", "-p", "18601")
	time.Sleep(300 * time.Millisecond)
	for _, c := range [][]string{
		{"ping", "-c", "3", "-W", "2", "10.78.0.7"},
		{"ping", "-6", "-c", "3", "-W", "2", "fd78::7"},
	} {
		out, err := br.cmd(context.Background(), c...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), " 0% packet loss") {
			t.Errorf("%v: %v\n%s", c, err, out)
		}
	}
	for _, g := range []*gorxe{srv, srv6} {
		g.cmd.Process.Signal(syscall.SIGTERM)
	}
}

// TestCaptureDecodes captures the udp link's traffic on the veth: tshark
// finds no malformed packet and gorxe decode verifies every ICRC.
//
// The link sends runs of packets as one datagram for the kernel to cut
// (UDP GSO). A veth would carry the datagram uncut, so the test has the
// kernel cut it before the veth, as it does for a NIC without
// segmentation offload: the capture then shows the packets a peer gets,
// with the IPv4 IDs the kernel numbered, which their ICRCs must cover.
func TestCaptureDecodes(t *testing.T) {
	needRoot(t)
	a, b := newNS(t, "a"), newNS(t, "b")
	vethPair(t, a, b, 9000)
	a.ip(t, "link", "set", "va", "gso_max_segs", "1")
	b.ip(t, "link", "set", "vb", "gso_max_segs", "1")
	file := captureTests(t, a, b, b, "vb")
	// RPC-over-RDMA's heuristic takes a short SEND's payload (send_lat's)
	// for a header of its own and finds it malformed.
	out := stdout(t, "tshark", "-r", file, "-d", "udp.port==4791,infiniband", "--disable-protocol", "rpcordma", "-Y", "_ws.malformed || _ws.expert.severity == error")
	if strings.TrimSpace(out) != "" {
		t.Errorf("tshark finds malformed packets:\n%s", out)
	}
	if n := strings.Count(stdout(t, "tshark", "-r", file), "\n"); n < 100 {
		t.Fatalf("only %d packets captured", n)
	}
	ids := strings.Fields(stdout(t, "tshark", "-r", file, "-T", "fields", "-e", "ip.id"))
	if slices.IndexFunc(ids, func(id string) bool { return id != "0x0000" }) < 0 {
		t.Errorf("every IPv4 ID is 0: the link sent no run of packets as one datagram")
	}
	if sum := decodeSummary(t, file); sum.RoCE < 100 || sum.BadICRC != 0 || sum.Bad != 0 || sum.GSO != 0 {
		t.Fatalf("decode summary %+v", sum)
	}
}

// TestCaptureUncutGSO captures on the sending host's veth, which carries
// the udp link's GSO datagrams uncut: gorxe decode finds the packets in
// them and verifies every ICRC.
func TestCaptureUncutGSO(t *testing.T) {
	needRoot(t)
	a, b := newNS(t, "a"), newNS(t, "b")
	vethPair(t, a, b, 9000)
	file := captureTests(t, a, b, a, "va")
	if sum := decodeSummary(t, file); sum.RoCE < 100 || sum.BadICRC != 0 || sum.Bad != 0 || sum.GSO == 0 {
		t.Fatalf("decode summary %+v, want uncut GSO datagrams and no bad packet", sum)
	}
}

// captureTests runs write_bw, read_bw, send_bw and atomic_bw, and
// write_lat and send_lat asleep (-e), over the udp link between a
// (client) and b (server), capturing with tshark on dev in ns, and
// returns the capture file.
func captureTests(t *testing.T, a, b, ns *netns, dev string) string {
	t.Helper()
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Fatal("tshark is not installed: make test installs it")
	}
	file := filepath.Join(t.TempDir(), "roce.pcap")
	capture := ns.cmd(context.Background(), "tshark", "-i", dev, "-w", file, "-f", "udp port 4791", "-q")
	if err := capture.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // tshark starts slowly
	for _, run := range [][]string{
		{"write_bw", "-s", "5000"}, {"read_bw", "-s", "5000"}, {"send_bw", "-s", "5000"}, {"atomic_bw", "-s", "8"},
		// Sides asleep on their CQs have the udp link join each answer
		// and the ACK behind it into one datagram (link.Joiner).
		{"write_lat", "-s", "2", "-e"}, {"send_lat", "-s", "2", "-e"},
	} {
		args := slices.Concat(run, []string{"-n", "50", "--link", "udp", "--json"})
		pair(t, b, a, slices.Concat(args, []string{"--ip", "10.77.0.2"}), slices.Concat(args, []string{"--ip", "10.77.0.1", "10.77.0.2"}))
	}
	time.Sleep(500 * time.Millisecond)
	capture.Process.Signal(syscall.SIGINT)
	capture.Wait()
	return file
}

// decodeSum is the summary gorxe decode --json ends with.
type decodeSum struct {
	RoCE    int `json:"roce_packets"`
	BadICRC int `json:"bad_icrc"`
	Bad     int `json:"malformed"`
	GSO     int `json:"gso_datagrams"`
}

// decodeSummary returns gorxe decode's summary of a capture file.
func decodeSummary(t *testing.T, file string) decodeSum {
	t.Helper()
	var out struct {
		Summary decodeSum `json:"summary"`
	}
	lines := strings.Split(strings.TrimSpace(stdout(t, gorxeBin, "decode", "--json", file)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &out); err != nil {
		t.Fatal(err)
	}
	return out.Summary
}

// TestKilledPeer: when one side is killed mid-test, the other exits with
// an error, promptly and saying why, instead of hanging.
func TestKilledPeer(t *testing.T) {
	needRoot(t)
	a, b := newNS(t, "a"), newNS(t, "b")
	vethPair(t, a, b, 1500)
	for _, victim := range []string{"client", "server"} {
		for _, test := range []string{"write_bw", "send_bw"} {
			t.Run(victim+"/"+test, func(t *testing.T) {
				args := []string{test, "-n", "100000000", "-s", "4096", "--give-up", "3s", "--link", "udp"}
				srv := start(t, b, append(append([]string{}, args...), "--ip", "10.77.0.2")...)
				time.Sleep(200 * time.Millisecond)
				cli := start(t, a, append(append([]string{}, args...), "--ip", "10.77.0.1", "10.77.0.2")...)
				time.Sleep(1500 * time.Millisecond)
				dead, alive := cli, srv
				if victim == "server" {
					dead, alive = srv, cli
				}
				dead.cmd.Process.Signal(syscall.SIGKILL)
				start := time.Now()
				err := alive.wait(t, 30*time.Second)
				if err == nil {
					t.Fatalf("the survivor exited 0:\n%s", alive.out.String())
				}
				if el := time.Since(start); el > 15*time.Second {
					t.Errorf("the survivor took %v to notice", el)
				}
				if alive.errOut.Len() == 0 {
					t.Errorf("the survivor said nothing on stderr")
				}
				t.Logf("survivor (%v): %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(alive.errOut.String()))
			})
		}
	}
}

// TestECNOverTAP: on the tap link the device reads CE from the IP header
// it receives. The client's --tclass 3 sends every packet CE-marked, as if
// a switch had marked it; the server answers with CNPs, which the
// client's reaction point takes, and the run completes with its data
// checked. The server's packets leave ECT(0), and none comes back marked.
func TestECNOverTAP(t *testing.T) {
	needRoot(t)
	br := bridgeNS(t, 9000)
	base := append(testArgs("write_bw", 1024), "--link", "tap", "--bridge", "br0", "--link-mtu", "9000", "-p", "18600", "--counters")
	srv := append(append([]string{}, base...), "--ip", "10.78.0.2/24", "--tap", "gxsecn")
	cli := append(append([]string{}, base...), "--ip", "10.78.0.1/24", "--tap", "gxcecn", "--tclass", "3", "127.0.0.1")
	server, client := pair(t, br, br, srv, cli)
	sc, cc := jsonCounters(t, server), jsonCounters(t, client)
	if sc["np_ecn_marked_roce_packets"] < 200 || sc["np_cnp_sent"] == 0 || cc["rp_cnp_handled"] == 0 ||
		cc["rp_cnp_handled"] > sc["np_cnp_sent"] || cc["np_ecn_marked_roce_packets"] != 0 {
		t.Fatalf("server: %d marked, %d CNPs sent; client: %d CNPs handled, %d marked\nserver:\n%s\nclient:\n%s",
			sc["np_ecn_marked_roce_packets"], sc["np_cnp_sent"], cc["rp_cnp_handled"], cc["np_ecn_marked_roce_packets"], server.out.String(), client.out.String())
	}
}

// jsonCounters returns the counters a gorxe run with --json --counters
// printed on its last line.
func jsonCounters(t *testing.T, g *gorxe) map[string]uint64 {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(g.out.String()), "\n")
	var m struct{ Counters map[string]uint64 }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil || m.Counters == nil {
		t.Fatalf("%v: no counters on the last line (%v):\n%s", g.cmd.Args[3:], err, g.out.String())
	}
	return m.Counters
}

//go:build linux

package test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// TestRCPingpong runs gorxe rc_pingpong between two namespaces joined by
// a veth over the udp and xdp links, IPv4 and IPv6, and between two gorxe
// hosts on TAP devices on one bridge, with -c, and checks both sides'
// output against ibv_rc_pingpong's lines.
func TestRCPingpong(t *testing.T) { pingpongs(t, "rc_pingpong", 18600, 1) }

// TestUCPingpong is TestRCPingpong for gorxe uc_pingpong, whose run and
// lines are ibv_uc_pingpong's, those of ibv_rc_pingpong over UC QPs. A
// veth loses nothing, so every message arrives.
func TestUCPingpong(t *testing.T) { pingpongs(t, "uc_pingpong", 18620, 1) }

// TestUDPingpong is TestRCPingpong for gorxe ud_pingpong: UD SENDs of
// the veth's MTU (9000 bytes: 4096), no -m (ud_pingpong has none), and
// ibv_ud_pingpong's colon before the local GID.
func TestUDPingpong(t *testing.T) { pingpongs(t, "ud_pingpong", 18640, 1) }

// TestSRQPingpong is TestRCPingpong for gorxe srq_pingpong: ibv_srq_pingpong's
// exchange of 256 addresses each way, and its run on 16 QPs a side (-q's
// default) that share one receive queue, with an address line for each.
func TestSRQPingpong(t *testing.T) { pingpongs(t, "srq_pingpong", 18660, 16) }

// pingpongs runs the ping-pong tool on each link, on TCP ports from port;
// each side prints an address line for each of its qps QPs.
func pingpongs(t *testing.T, tool string, port, qps int) {
	needRoot(t)
	a, b := newNS(t, "a"), newNS(t, "b")
	vethPair(t, a, b, 9000)
	br := bridgeNS(t, 9000)
	size, sep := 10000, ","
	flags := []string{tool, "-c", "-n", "300", "-s", fmt.Sprint(size), "-m", "4096", "--give-up", "20s"}
	if tool == "ud_pingpong" {
		size, sep = 4096, ":"
		flags = []string{tool, "-c", "-n", "300", "-s", fmt.Sprint(size), "--give-up", "20s"}
	}
	for i, v := range []struct {
		name           string
		srvNS, cliNS   *netns
		link           []string
		server, client string
		host           string
		gid            string    // the GIDs' form in the output
		devs           [2]string // the xdp link's --dev, server's and client's
	}{
		// As with rxe, -g 1 is the veth's IPv4 address (0 is its
		// default GID, fe80:: from its MAC), and no --ip is needed.
		{"udp/IPv4", b, a, []string{"--link", "udp", "-g", "1"}, "", "", "10.77.0.2", `::ffff:10\.77\.0\.[12]`, [2]string{}},
		{"udp/IPv6", b, a, []string{"--link", "udp"}, "fd77::2", "fd77::1", "fd77::2", `fd77::[12]`, [2]string{}},
		// On the xdp link too -g indexes the interface's table, as rxe's.
		{"xdp/IPv4", b, a, []string{"--link", "xdp", "-g", "1"}, "", "", "10.77.0.2", `::ffff:10\.77\.0\.[12]`, [2]string{"vb", "va"}},
		{"xdp/IPv6", b, a, []string{"--link", "xdp", "-g", "2"}, "", "", "fd77::2", `fd77::[12]`, [2]string{"vb", "va"}},
		// The tap link is a host with a table laid out alike: 0 its
		// link-local address (fe80:: from gorxe's MAC), 1 its --ip.
		{"tap/IPv4", br, br, []string{"--link", "tap", "--bridge", "br0", "--link-mtu", "9000", "-g", "1"}, "10.78.0.2/24", "10.78.0.1/24", "127.0.0.1", `::ffff:10\.78\.0\.[12]`, [2]string{}},
		{"tap/link-local", br, br, []string{"--link", "tap", "--bridge", "br0", "--link-mtu", "9000", "-g", "0"}, "10.78.0.2/24", "10.78.0.1/24", "127.0.0.1", `fe80::[0-9a-f:]+`, [2]string{}},
	} {
		t.Run(v.name, func(t *testing.T) {
			base := append(append([]string{}, flags...), v.link...)
			base = append(base, "-p", fmt.Sprint(port+i))
			srv, cli := append([]string{}, base...), append([]string{}, base...)
			if v.server != "" {
				srv, cli = append(srv, "--ip", v.server), append(cli, "--ip", v.client)
			}
			if v.devs[0] != "" {
				srv, cli = append(srv, "--dev", v.devs[0]), append(cli, "--dev", v.devs[1])
			}
			if v.link[1] == "tap" {
				srv = append(srv, "--tap", fmt.Sprintf("gxps%d", i))
				cli = append(cli, "--tap", fmt.Sprintf("gxpc%d", i))
			}
			server, client := pair(t, v.srvNS, v.cliNS, srv, append(cli, v.host))
			addr := func(which, sep string) string {
				return strings.Repeat(`  `+which+` LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}`+sep+` GID `+v.gid+"\n", qps)
			}
			want := regexp.MustCompile(`^` + addr("local address: ", sep) + addr("remote address:", ",") +
				fmt.Sprint(2*size*300) + ` bytes in \d+\.\d\d seconds = \d+\.\d\d Mbit/sec
300 iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter
$`)
			for _, g := range []*gorxe{server, client} {
				if !want.MatchString(g.out.String()) {
					t.Errorf("%v printed\n%s\nwant ibv_%s's lines", g.cmd.Args[3:], g.out.String(), tool)
				}
			}
		})
	}
}

package main

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/rnic"
)

// The table of the interop VM's eth0 as rxe showed it (show_gids on the
// VM, with fd09::2 added): the MAC's link-local, the IPv4 address, then
// the IPv6 one. The interface also holds its EUI-64 link-local address,
// which the default GID already is.
func TestBuildGIDTable(t *testing.T) {
	mac, _ := net.ParseMAC("52:54:00:00:00:02")
	addrs := []netip.Addr{
		netip.MustParseAddr("fd09::2"),
		netip.MustParseAddr("10.9.0.2"),
		netip.MustParseAddr("fe80::5054:ff:fe00:2"),
		netip.MustParseAddr("10.9.0.3"),
	}
	tab := buildGIDTable("eth0", mac, addrs)
	want := []string{
		"fe80:0000:0000:0000:5054:00ff:fe00:0002",
		"0000:0000:0000:0000:0000:ffff:0a09:0002",
		"0000:0000:0000:0000:0000:ffff:0a09:0003",
		"fd09:0000:0000:0000:0000:0000:0000:0002",
	}
	if len(tab) != len(want) {
		t.Fatalf("table %v, want %d entries", tab, len(want))
	}
	for i, w := range want {
		if got := gidString(tab[i].GID); got != w || !tab[i].Usable || tab[i].Iface != "eth0" {
			t.Errorf("GID %d: %s usable=%v on %s, want %s", i, got, tab[i].Usable, tab[i].Iface, w)
		}
	}
	if a := tab[0].addr(); a.Zone() != "eth0" || !a.IsLinkLocalUnicast() {
		t.Errorf("the link-local GID binds as %v, want a zone", a)
	}
	if a := tab[1].addr(); a != netip.MustParseAddr("10.9.0.2") {
		t.Errorf("the IPv4 GID binds as %v", a)
	}

	// perftest picks the first IPv4 GID (-x 1, as on rxe), or with
	// --ipv6 the global IPv6 one; an address the peer reached wins
	// among equals.
	for _, tc := range []struct {
		ipv6   bool
		prefer string
		want   int
	}{
		{false, "", 1},
		{true, "", 3},
		{false, "10.9.0.3", 2},
		{false, "fd09::2", 1}, // not of the family perftest prefers
		{true, "fd09::2", 3},
	} {
		var p netip.Addr
		if tc.prefer != "" {
			p = netip.MustParseAddr(tc.prefer)
		}
		if got := bestGID(tab, tc.ipv6, p); got != tc.want {
			t.Errorf("bestGID(ipv6=%v, prefer %s) = %d, want %d", tc.ipv6, tc.prefer, got, tc.want)
		}
	}
}

// An interface without IPv6 still has the default GID at index 0, as on
// rxe, but gorxe cannot send from it: -x 0 is an error.
func TestPickGIDUnusable(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:0a:09:00:01")
	tab := buildGIDTable("br0", mac, []netip.Addr{netip.MustParseAddr("10.9.0.1")})
	if len(tab) != 2 || tab[0].Usable {
		t.Fatalf("table %+v", tab)
	}
	if _, _, err := pickGID(tab, 0, false, netip.Addr{}); err == nil || !strings.Contains(err.Error(), "does not hold") {
		t.Errorf("-x 0: %v", err)
	}
	if _, _, err := pickGID(tab, 5, false, netip.Addr{}); err == nil || !strings.Contains(err.Error(), "has 2 GIDs") {
		t.Errorf("-x 5: %v", err)
	}
	if e, i, err := pickGID(tab, -1, true, netip.Addr{}); err != nil || i != 1 || e.addr() != netip.MustParseAddr("10.9.0.1") {
		t.Errorf("no -x, --ipv6 on an IPv4-only interface: %v %d %v", e, i, err)
	}
	if e, i, err := pickGID(tab, 1, false, netip.Addr{}); err != nil || i != 1 || !e.Usable {
		t.Errorf("-x 1: %v %d %v", e, i, err)
	}
}

// show_gids prints the loopback interface's table in the script's
// format: header, rows, count.
func TestShowGids(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"show_gids", "lo"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[0], "DEV\tPORT\tINDEX\tGID") || !strings.HasPrefix(lines[1], "---\t----") {
		t.Fatalf("output:\n%s", out.String())
	}
	if lines[len(lines)-1] != "n_gids_found="+strconv.Itoa(len(lines)-3) {
		t.Errorf("last line %q for %d rows", lines[len(lines)-1], len(lines)-3)
	}
	if !strings.Contains(out.String(), "gorxe_lo\t1\t1\t0000:0000:0000:0000:0000:ffff:7f00:0001\t127.0.0.1  \tv2\tlo") {
		t.Errorf("no IPv4 row for 127.0.0.1 at index 1:\n%s", out.String())
	}
	if code := run([]string{"show_gids", "nosuchif0"}, &out, &errOut); code != exitError {
		t.Errorf("show_gids nosuchif0: exit %d", code)
	}
}

// TestLocalGIDs: an address an interface holds names that interface's
// table; one of the loopback range that no interface lists (Linux takes
// all of 127.0.0.0/8 as local) takes the next slot of lo's table; any
// other address is refused.
func TestLocalGIDs(t *testing.T) {
	iface, held, err := localGIDs(netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(held, func(e gidEntry) bool { return e.GID == netip.MustParseAddr("::ffff:127.0.0.1") }); i < 0 || !held[i].Usable {
		t.Fatalf("127.0.0.1: %s's table %v does not hold it", iface, held)
	}
	name, t2, err := localGIDs(netip.MustParseAddr("127.0.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	if name != iface || len(t2) != len(held)+1 || !slices.Equal(t2[:len(held)], held) {
		t.Fatalf("127.0.0.2: %s %v, want %s's table %v and one more", name, t2, iface, held)
	}
	if last := t2[len(t2)-1]; last != (gidEntry{GID: netip.MustParseAddr("::ffff:127.0.0.2"), Iface: iface, Usable: true}) {
		t.Errorf("127.0.0.2's entry: %+v", last)
	}
	for _, a := range []string{"192.0.2.250", "fd00::fe:1", "::2"} {
		if _, _, err := localGIDs(netip.MustParseAddr(a)); err == nil || !strings.Contains(err.Error(), "no interface holds "+a) {
			t.Errorf("%s: %v, want no interface holds it", a, err)
		}
	}
}

// TestPerfLoopbackPair: a perftest server and client on one host over the
// udp link, each on an address of the loopback range of its own, as a
// user without root runs them as two processes: given with --ip, or the
// server's taken from where the client reached it (127.0.0.2) and the
// client's from its route there (127.0.0.1).
func TestPerfLoopbackPair(t *testing.T) {
	for _, tc := range []struct {
		server, client []string
		gids           [2]string // the server's, the client's
	}{
		{[]string{"--ip", "127.0.0.2"}, []string{"--ip", "127.0.0.3", "127.0.0.2"}, [2]string{"127:00:00:02", "127:00:00:03"}},
		{nil, []string{"127.0.0.2"}, [2]string{"127:00:00:02", "127:00:00:01"}},
	} {
		common := []string{"write_bw", "--roce-port", freePort(t, "udp"), "-p", freePort(t, "tcp"), "-n", "20", "-s", "10000", "--check", "--give-up", "5s"}
		done := make(chan ran, 1)
		go func() {
			var out, errOut bytes.Buffer
			code := run(append(slices.Clone(common), tc.server...), &out, &errOut)
			done <- ran{code, out.String(), errOut.String()}
		}()
		var out, errOut bytes.Buffer
		code := run(append(slices.Clone(common), tc.client...), &out, &errOut)
		cli := ran{code, out.String(), errOut.String()}
		var srv ran
		select {
		case srv = <-done:
		case <-time.After(time.Minute):
			t.Fatalf("%v: the server did not finish; client: %+v", tc.client, cli)
		}
		for who, r := range map[string]ran{"server": srv, "client": cli} {
			ok := r.code == 0 && strings.Contains(r.out, "data check: ok")
			for _, g := range tc.gids {
				ok = ok && strings.Contains(r.out, " GID: 00:00:00:00:00:00:00:00:00:00:255:255:"+g+"\n")
			}
			if !ok {
				t.Errorf("%v / %v: %s: exit %d\n%s\nstderr: %s", tc.server, tc.client, who, r.code, r.out, r.errOut)
			}
		}
	}
}

// TestPerfReversed: with --reversed on both sides the listening side runs
// the test's client and the dialling side its server, and each prints as
// perftest's machine does: read_lat's latency table on the side that
// listened, "Waiting for client to connect" on the one that dialled.
func TestPerfReversed(t *testing.T) {
	args := []string{"--reversed", "-n", "50", "--check"}
	listened, dialled := pingpongPair(t, "read_lat", append([]string{"--ip", "127.0.0.1"}, args...), args)
	const table, waiting = "t_typical[usec]", "Waiting for client to connect"
	for _, c := range []struct {
		who            string
		r              ran
		table, waiting bool
	}{
		{"listened (the test's client)", listened, true, false},
		{"dialled (the test's server)", dialled, false, true},
	} {
		if c.r.code != 0 || !strings.Contains(c.r.out, "data check: ok") ||
			strings.Contains(c.r.out, table) != c.table || strings.Contains(c.r.out, waiting) != c.waiting {
			t.Errorf("%s: exit %d, want the latency table %v and %q %v\n%s\nstderr: %s", c.who, c.r.code, c.table, waiting, c.waiting, c.r.out, c.r.errOut)
		}
	}
}

// TestNoSuchInterface checks that a command given an interface the host
// does not have says so at once, in the words a user reads (not the net
// package's "route ip+net: ..."), and exits 1: servers included, which
// would otherwise wait for a client before they open the interface.
func TestNoSuchInterface(t *testing.T) {
	for _, args := range [][]string{
		{"show_gids", "gorxe-nosuch"},
		{"write_bw", "--link", "xdp", "--dev", "gorxe-nosuch", "-p", "18791"},
		{"write_bw", "--link", "xdp", "--dev", "gorxe-nosuch", "10.0.0.1"},
		{"rc_pingpong", "-g", "1", "--link", "xdp", "--dev", "gorxe-nosuch", "-p", "18792"},
		{"rping", "-s", "--link", "xdp", "--dev", "gorxe-nosuch"},
	} {
		var out, errOut bytes.Buffer
		done := make(chan int)
		go func() { done <- run(args, &out, &errOut) }()
		select {
		case code := <-done:
			if got := errOut.String(); code != exitError || !strings.Contains(got, "gorxe-nosuch") || !strings.Contains(got, ": no such network interface\n") || strings.Contains(got, "route ip+net") {
				t.Errorf("%v: exit %d, stderr %q; want 1 and the interface named as missing", args, code, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%v: still running after 10 s", args)
		}
	}
}

// A tap link's device lists its link-local address, then --ip, as rxe's
// table on an interface with that address: -x and -g index it so, and
// without them the --ip address is taken, or with --ipv6 the link-local
// one when --ip is IPv4, as perftest picks on rxe.
func TestTapGID(t *testing.T) {
	ll, ip := link.LinkLocal([]byte{2, 0, 0, 0, 0, 5}), netip.MustParseAddr("10.9.0.5")
	lk, err := mem.NewFabric().NewLink(ll, ip)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := rnic.Open(rnic.Config{Link: lk})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, tc := range []struct {
		index int
		ipv6  bool
		want  int
	}{{-1, false, 1}, {-1, true, 0}, {0, false, 0}, {1, false, 1}, {0, true, 0}} {
		if got, err := tapGID(dev, tc.index, tc.ipv6, ip); err != nil || got != tc.want {
			t.Errorf("tapGID(%d, ipv6 %v) = %d, %v; want %d", tc.index, tc.ipv6, got, err, tc.want)
		}
	}
	_, err = tapGID(dev, 2, false, ip)
	if want := "GID index 2: the tap link's device has 2 GIDs (0 fe80::ff:fe00:5, 1 10.9.0.5)"; err == nil || err.Error() != want {
		t.Errorf("-x 2: %v, want %q", err, want)
	}
}

// An address given as a host keeps its zone, which a link-local one
// needs and the resolver drops; resolveHost (rping's) unmaps.
func TestLookupHost(t *testing.T) {
	for _, host := range []string{"fe80::2%eth0", "10.0.0.2", "fd00::2"} {
		ips, err := lookupHost(context.Background(), host)
		if err != nil || len(ips) != 1 || ips[0].String() != host {
			t.Errorf("lookupHost(%s) = %v, %v", host, ips, err)
		}
	}
	if a, err := resolveHost("::ffff:10.0.0.2"); err != nil || a != netip.MustParseAddr("10.0.0.2") {
		t.Errorf("resolveHost(::ffff:10.0.0.2) = %v, %v", a, err)
	}
	if _, err := lookupHost(context.Background(), "no-such-host.invalid"); err == nil {
		t.Error("lookupHost(no-such-host.invalid) succeeded")
	}
}

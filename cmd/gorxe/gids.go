package main

// The GID table of an interface, laid out as the kernel lays out the table
// of an rxe (or any RoCE) device on it, so that perftest's -x N and
// ibv_rc_pingpong's -g N mean on gorxe what they mean on rxe. The kernel's
// RDMA core (drivers/infiniband/core/roce_gid_mgmt.c) fills the table of a
// RoCE port this way:
//
//   - index 0 is the port's default GID: fe80::/64 with the interface
//     identifier made from the netdev's MAC (EUI-64), whether or not the
//     interface holds that address;
//   - then the interface's IPv4 addresses, IPv4-mapped (::ffff:a.b.c.d),
//     in the interface's order;
//   - then its IPv6 addresses, in its order, skipping the one the default
//     GID already holds.
//
// rxe is RoCE v2 only, so there is one entry per address (a ConnectX port
// lists each twice, v1 then v2). Addresses added later take the next free
// slot, so on a long-lived host the order can differ; gorxe's table is
// the one rxe would have had if the addresses were there when it was
// created.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/rnic"
)

// gidEntry is one row of a GID table.
type gidEntry struct {
	GID   netip.Addr // 16 bytes, IPv4-mapped for IPv4
	Iface string
	// Usable says that the interface holds the address, so a udp link
	// can bind to it. The default GID may be unusable: an interface
	// without IPv6, or with a link-local address not made from its MAC.
	Usable bool
}

// addr returns the entry's address for binding: IPv4 unmapped, link-local
// IPv6 with the interface as its zone.
func (e gidEntry) addr() netip.Addr {
	a := e.GID.Unmap()
	if a.Is6() && a.IsLinkLocalUnicast() {
		a = a.WithZone(e.Iface)
	}
	return a
}

// buildGIDTable lays out the table of an interface called name with this
// MAC and these addresses (in the interface's order).
func buildGIDTable(name string, mac net.HardwareAddr, addrs []netip.Addr) []gidEntry {
	def := link.LinkLocal(mac)
	t := []gidEntry{{GID: def, Iface: name}}
	have := func(g netip.Addr) int {
		return slices.IndexFunc(t, func(e gidEntry) bool { return e.GID == g })
	}
	for _, want4 := range []bool{true, false} {
		for _, a := range addrs {
			if a.Unmap().Is4() != want4 {
				continue
			}
			g := netip.AddrFrom16(a.As16())
			if i := have(g); i >= 0 {
				t[i].Usable = true
				continue
			}
			t = append(t, gidEntry{GID: g, Iface: name, Usable: true})
		}
	}
	return t
}

// otherAddrs returns the addresses of t's usable entries but e's, for
// binding (gidEntry.addr).
func otherAddrs(t []gidEntry, e gidEntry) []netip.Addr {
	var as []netip.Addr
	for _, o := range t {
		if o.Usable && o.GID != e.GID {
			as = append(as, o.addr())
		}
	}
	return as
}

// interfaceGIDs returns the GID table of the interface called name.
func interfaceGIDs(name string) ([]gidEntry, error) {
	ifi, err := interfaceByName(name)
	if err != nil {
		return nil, err
	}
	return ifaceTable(ifi)
}

// interfaceByName is net.InterfaceByName with the error a user reads:
// "no such network interface", not the net package's "route ip+net: no
// such network interface".
func interfaceByName(name string) (*net.Interface, error) {
	ifi, err := net.InterfaceByName(name)
	if op := (*net.OpError)(nil); errors.As(err, &op) {
		err = op.Err
	}
	return ifi, err
}

func ifaceTable(ifi *net.Interface) ([]gidEntry, error) {
	ifas, err := ifi.Addrs()
	if err != nil {
		return nil, fmt.Errorf("%s: %v", ifi.Name, err)
	}
	var addrs []netip.Addr
	for _, ifa := range ifas {
		if p, err := netip.ParsePrefix(ifa.String()); err == nil {
			addrs = append(addrs, p.Addr().WithZone(""))
		}
	}
	return buildGIDTable(ifi.Name, ifi.HardwareAddr, addrs), nil
}

// localGIDs returns the name and GID table of the interface that holds
// addr. An address of the loopback range that no interface lists (Linux
// takes all of 127.0.0.0/8 as this host's, lo holding 127.0.0.1/8) is
// added at the end of lo's table, the slot it would take had it been
// added to lo, so that two programs on one host can each have one of
// their own (--ip 127.0.0.2, --ip 127.0.0.3).
func localGIDs(addr netip.Addr) (string, []gidEntry, error) {
	ifis, err := net.Interfaces()
	if err != nil {
		return "", nil, err
	}
	want := addr.Unmap().WithZone("")
	var loop *net.Interface // the loopback interface whose range holds want
	for i, ifi := range ifis {
		ifas, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, ifa := range ifas {
			p, err := netip.ParsePrefix(ifa.String())
			if err != nil {
				continue
			}
			if p.Addr() == want {
				t, err := ifaceTable(&ifis[i])
				return ifi.Name, t, err
			}
			if ifi.Flags&net.FlagLoopback != 0 && ifi.Flags&net.FlagUp != 0 && want.IsLoopback() && p.Contains(want) {
				loop = &ifis[i]
			}
		}
	}
	if loop == nil {
		return "", nil, fmt.Errorf("no interface holds %s", want)
	}
	t, err := ifaceTable(loop)
	if err != nil {
		return "", nil, err
	}
	return loop.Name, append(t, gidEntry{GID: netip.AddrFrom16(want.As16()), Iface: loop.Name, Usable: true}), nil
}

// soleInterfaceGIDs returns the GID table of the interface a server that
// has no address to learn from a client (-R on the udp link, rping -s)
// binds to: the host's only interface that could carry RoCE (up, not the
// loopback, holding an address other than a link-local one), as
// perftest's -d names the one RDMA device, bound to one interface, that
// such a host has. When several could, it takes the one the default
// route leaves by, as rxe0 is most often bound to the host's main
// interface, and returns a note that says so, for a user who wants
// another. With none, or several and no default route through one of
// them, it says which, for the user to choose.
func soleInterfaceGIDs() (table []gidEntry, note string, err error) {
	ifis, err := net.Interfaces()
	if err != nil {
		return nil, "", err
	}
	var names []string
	var tables [][]gidEntry
	for i, ifi := range ifis {
		if ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagLoopback != 0 {
			continue
		}
		t, err := ifaceTable(&ifis[i])
		if err != nil {
			continue
		}
		if slices.ContainsFunc(t, func(e gidEntry) bool { return e.Usable && !e.GID.Unmap().IsLinkLocalUnicast() }) {
			names = append(names, ifi.Name)
			tables = append(tables, t)
		}
	}
	switch len(names) {
	case 0:
		return nil, "", fmt.Errorf("no interface but the loopback has an address")
	case 1:
		return tables[0], "", nil
	}
	several := fmt.Sprintf("%d interfaces have addresses (%s)", len(names), strings.Join(names, ", "))
	// The default route's source address, found as a client finds its
	// route to a server: by the kernel's choice for a documentation
	// address (RFC 5737, RFC 3849), to which nothing is sent.
	for _, probe := range []string{"192.0.2.1", "2001:db8::1"} {
		src, err := routeSource(probe)
		if err != nil {
			continue
		}
		g := netip.AddrFrom16(src.As16())
		for i, t := range tables {
			if slices.ContainsFunc(t, func(e gidEntry) bool { return e.GID == g }) {
				return t, fmt.Sprintf("%s: taking %s, which the default route leaves by; give --ip for another", several, names[i]), nil
			}
		}
	}
	return nil, "", errors.New(several)
}

// gidsHint says where a user finds entry i of iface's table t: show_gids,
// or for an address of lo's range that lo does not list (localGIDs), the
// slot after what show_gids lists.
func gidsHint(iface string, t []gidEntry, i int) string {
	if own, err := interfaceGIDs(iface); err == nil && i >= len(own) && i < len(t) {
		return fmt.Sprintf("gorxe show_gids %s lists %d; %v takes the next", iface, len(own), t[i].GID.Unmap())
	}
	return "gorxe show_gids " + iface
}

// bestGID returns the index perftest picks without -x
// (perftest_communication.c, get_best_gid_index and compute_gid_score):
// the first entry with the highest score, where an address of the wanted
// family (IPv4 unless ipv6) scores 2 and one that is not link-local 1
// more (every entry is RoCE v2, which scores the same for all). gorxe
// passes over entries it cannot bind to. prefer, when valid and in the
// table with the best score, is taken over the first: the address the
// peer reached gorxe on, or the route to the peer chose.
func bestGID(t []gidEntry, ipv6 bool, prefer netip.Addr) int {
	score := func(e gidEntry) int {
		if !e.Usable {
			return -1
		}
		s := 0
		a := e.GID.Unmap()
		if a.Is4() != ipv6 {
			s += 2
		}
		if !a.IsLinkLocalUnicast() {
			s++
		}
		return s
	}
	best, bestScore := -1, -1
	for i, e := range t {
		if s := score(e); s > bestScore {
			best, bestScore = i, s
		}
	}
	if prefer.IsValid() {
		p := netip.AddrFrom16(prefer.As16())
		for i, e := range t {
			if e.GID == p && score(e) == bestScore {
				return i
			}
		}
	}
	return best
}

// pickGID returns the entry of t that -x (index, or -1) names, or the
// one chosen as perftest chooses.
func pickGID(t []gidEntry, index int, ipv6 bool, prefer netip.Addr) (gidEntry, int, error) {
	if index < 0 {
		index = bestGID(t, ipv6, prefer)
		if index < 0 {
			return gidEntry{}, 0, fmt.Errorf("%s has no address gorxe can use as a GID", t[0].Iface)
		}
		return t[index], index, nil
	}
	if index >= len(t) {
		return gidEntry{}, 0, fmt.Errorf("GID index %d: %s's table has %d GIDs (gorxe show_gids %s)", index, t[0].Iface, len(t), t[0].Iface)
	}
	e := t[index]
	if !e.Usable {
		return gidEntry{}, 0, fmt.Errorf("GID index %d (%s) is the port's default GID, but %s does not hold that address, so gorxe cannot send from it", index, e.GID, e.Iface)
	}
	return e, index, nil
}

// gidString writes a GID as the kernel's sysfs gids files do: eight
// groups of four hex digits.
func gidString(g netip.Addr) string {
	b := g.As16()
	parts := make([]string, 8)
	for i := range parts {
		parts[i] = fmt.Sprintf("%02x%02x", b[2*i], b[2*i+1])
	}
	return strings.Join(parts, ":")
}

// The show_gids script's format (mlnx-tools; also shipped by some
// rdma-core packagings): a header, one line per GID, and the count.
const gidTableHeader = "DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV\n" +
	"---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---\n"

// printGIDRows prints the lines of table t of device dev and returns how
// many it printed.
func printGIDRows(w io.Writer, dev string, t []gidEntry) int {
	for i, e := range t {
		if a := e.GID.Unmap(); a.Is4() {
			fmt.Fprintf(w, "%s\t1\t%d\t%s\t%s  \tv2\t%s\n", dev, i, gidString(e.GID), a, e.Iface)
		} else {
			fmt.Fprintf(w, "%s\t1\t%d\t%s\t\t\tv2\t%s\n", dev, i, gidString(e.GID), e.Iface)
		}
	}
	return len(t)
}

// runShowGids is "gorxe show_gids [IFACE]": the GID table gorxe would use
// on each interface (or on IFACE), as show_gids prints rxe's. Interfaces
// are named as rxe devices are when rdma link add makes them: the table
// of eth0 belongs to the gorxe device of eth0.
func runShowGids(args []string, stdout, stderr io.Writer) int {
	if len(args) > 1 || len(args) == 1 && strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, "Usage: gorxe show_gids [IFACE]\n\nPrints the GID table gorxe uses on each network interface (or on IFACE),\nlaid out as kernel rxe lays out its own and in the format of show_gids, so\nthat perftest's -x N and ibv_rc_pingpong's -g N mean on gorxe what they mean\non rxe.")
		if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
			return exitOK
		}
		return exitUsage
	}
	var ifis []net.Interface
	if len(args) == 1 {
		ifi, err := interfaceByName(args[0])
		if err != nil {
			fmt.Fprintf(stderr, "gorxe show_gids: %s: %v\n", args[0], err)
			return exitError
		}
		ifis = []net.Interface{*ifi}
	} else {
		var err error
		if ifis, err = net.Interfaces(); err != nil {
			fmt.Fprintf(stderr, "gorxe show_gids: %v\n", err)
			return exitError
		}
	}
	fmt.Fprint(stdout, gidTableHeader)
	n := 0
	for _, ifi := range ifis {
		if ifi.Flags&net.FlagUp == 0 {
			continue
		}
		t, err := ifaceTable(&ifi)
		if err != nil {
			fmt.Fprintf(stderr, "gorxe show_gids: %v\n", err)
			return exitError
		}
		n += printGIDRows(stdout, "gorxe_"+ifi.Name, t)
	}
	fmt.Fprintf(stdout, "n_gids_found=%d\n", n)
	return exitOK
}

// tapGID returns the index in dev's table (a tap link's: its link-local
// address, then --ip, as rxe's table on an interface holding that
// address) of the GID -x or -g names, or, for index -1, of the one
// perftest would choose, --ip when it is among the best.
func tapGID(dev *rnic.Device, index int, ipv6 bool, ip netip.Addr) (int, error) {
	gids := dev.GIDs()
	t := make([]gidEntry, len(gids))
	for i, g := range gids {
		t[i] = gidEntry{GID: g, Usable: true}
	}
	if index >= len(t) {
		var list []string
		for i, g := range gids {
			list = append(list, fmt.Sprintf("%d %v", i, g.Unmap()))
		}
		return 0, fmt.Errorf("GID index %d: the tap link's device has %d GIDs (%s)", index, len(t), strings.Join(list, ", "))
	}
	_, i, err := pickGID(t, index, ipv6, ip)
	return i, err
}

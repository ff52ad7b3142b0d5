//go:build linux

package neigh

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link/internal/netns"
)

// resolverIn opens a resolver for ns's interface ifname, from inside ns.
func resolverIn(t *testing.T, ns *netns.NS, ifname string) *Resolver {
	t.Helper()
	var r *Resolver
	if err := ns.Do(func() error {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		r, err = New(ifc.Index)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// wait asks r for dst until it resolves, for up to 3 s; fresh says the
// kernel has no entry for dst's next hop yet, so the first answer must be
// "not yet".
func wait(t *testing.T, r *Resolver, dst netip.Addr, fresh bool) [6]byte {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	asked := 0
	for time.Now().Before(deadline) {
		mac, ok, err := r.Lookup(dst)
		if err != nil {
			t.Fatalf("Lookup(%v): %v", dst, err)
		}
		if ok {
			if fresh && asked == 0 {
				t.Errorf("Lookup(%v) resolved at once, though the kernel had no entry", dst)
			}
			return mac
		}
		asked++
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("Lookup(%v) did not resolve in 3 s", dst)
	return [6]byte{}
}

// TestResolve: with no neighbour entry, a lookup prompts the kernel's
// ARP (IPv4) or neighbour discovery (IPv6) and then finds the peer's MAC;
// an off-link destination resolves to its gateway's, even when the
// kernel would rather route the destination through another interface; a
// destination no route of the interface covers, the host's own address,
// and a hop that never answers, are errors.
func TestResolve(t *testing.T) {
	p := netns.NewPair(t, 0)
	// Forget the static entries NewPair made, and let the kernel give up
	// on a silent hop in a tenth of a second.
	for _, c := range []struct {
		ns     *netns.NS
		ifname string
		peers  []netip.Addr
	}{{p.A, p.IfA, []netip.Addr{p.B4, p.B6}}, {p.B, p.IfB, []netip.Addr{p.A4, p.A6}}} {
		for _, a := range c.peers {
			c.ns.IP(t, "neigh", "del", a.String(), "dev", c.ifname)
		}
	}
	// Neighbour discovery speaks from link-local addresses, which real
	// interfaces have and NewPair's do not.
	p.A.IP(t, "-6", "addr", "add", "fe80::a/64", "dev", p.IfA, "nodad")
	p.B.IP(t, "-6", "addr", "add", "fe80::b/64", "dev", p.IfB, "nodad")
	netns.Run(t, "ip", "netns", "exec", p.A.Name, "sysctl", "-qw",
		"net.ipv4.neigh."+p.IfA+".mcast_solicit=2", "net.ipv4.neigh."+p.IfA+".retrans_time_ms=50")
	gw := netip.MustParseAddr("10.250.0.0")
	p.A.IP(t, "route", "add", gw.String()+"/24", "via", p.B4.String())
	// A second interface that the kernel prefers for B's addresses, as
	// when the host has an address on each of two ports of a bridge: the
	// resolver's interface reaches them all the same.
	p.A.IP(t, "link", "add", "other0", "type", "veth", "peer", "name", "other1")
	p.A.IP(t, "link", "set", "other1", "up")
	p.A.IP(t, "link", "set", "other0", "up")
	p.A.IP(t, "route", "add", p.B4.String()+"/32", "dev", "other0")
	p.A.IP(t, "-6", "route", "add", p.B6.String()+"/128", "dev", "other0")
	r := resolverIn(t, p.A, p.IfA)

	var macB [6]byte
	if err := p.B.Do(func() error {
		ifc, err := net.InterfaceByName(p.IfB)
		copy(macB[:], ifc.HardwareAddr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for i, dst := range []netip.Addr{p.B4, p.B6, netip.MustParseAddr("10.250.0.9")} {
		// The last goes through B4, resolved by then.
		if got := wait(t, r, dst, i < 2); got != macB {
			t.Errorf("%v: %x, want B's %x", dst, got, macB)
		}
		// Cached: the next lookup needs no kernel.
		if got, ok, err := r.Lookup(dst); !ok || err != nil || got != macB {
			t.Errorf("%v again: %x %v %v", dst, got, ok, err)
		}
	}
	for _, dst := range []string{"127.0.0.1", "10.251.0.1", "fd00:ffff::1", p.A4.String(), p.A6.String()} {
		if _, _, err := r.Lookup(netip.MustParseAddr(dst)); !errors.Is(err, ErrNoRoute) {
			t.Errorf("%s: %v, want ErrNoRoute", dst, err)
		}
	}
	silent := p.B4.Next() // on the subnet, nobody's
	deadline := time.Now().Add(3 * time.Second)
	for {
		_, ok, err := r.Lookup(silent)
		if errors.Is(err, ErrUnresolved) {
			break
		}
		if ok || err != nil || time.Now().After(deadline) {
			t.Fatalf("a silent hop: ok %v, err %v; want ErrUnresolved within 3 s", ok, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Package neigh finds the Ethernet address to send an IP packet to from
// an interface the kernel owns, the way the kernel's own stack would: the
// route's next hop for the destination (its gateway when the route has
// one), then the kernel's neighbour table's entry for that hop, asking
// the kernel to resolve it (ARP or neighbour discovery) when it has no
// usable entry.
//
// It is for links that send whole frames on an interface whose IP stack
// stays the kernel's (the AF_XDP link): they answer no ARP themselves,
// and the kernel's table is the one the rest of the host uses.
package neigh

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrNoRoute is returned for a destination the kernel routes through
// another interface, or not at all.
var ErrNoRoute = errors.New("neigh: no route through the interface")

// ErrUnresolved is returned for a next hop the kernel could not resolve:
// its neighbour entry failed.
var ErrUnresolved = errors.New("neigh: the next hop does not answer ARP or neighbour discovery")

// Resolver looks up next hops and their Ethernet addresses for one
// interface, and caches what it found for TTL.
type Resolver struct {
	ifindex int
	h       *netlink.Handle
	ttl     time.Duration
	now     func() time.Time

	mu    sync.Mutex
	cache map[netip.Addr]entry
}

type entry struct {
	hop     netip.Addr
	mac     [6]byte
	ok      bool      // mac is known
	expires time.Time // when to ask the kernel again
	asked   time.Time // when resolution was last prompted
}

// TTL is how long a resolved address is used before the kernel's table
// is read again: short against the kernel's own (30 s reachable, then
// stale and probed), so that a changed neighbour is seen soon.
const TTL = time.Second

// retry is how often a destination still being resolved is looked up
// again, and resolution prompted again.
const retry = 10 * time.Millisecond

// New returns a resolver for the interface with index ifindex, in the
// network namespace of the calling thread.
func New(ifindex int) (*Resolver, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("neigh: netlink: %w", err)
	}
	return &Resolver{ifindex: ifindex, h: h, ttl: TTL, now: time.Now, cache: make(map[netip.Addr]entry)}, nil
}

// Close releases the resolver's netlink socket.
func (r *Resolver) Close() { r.h.Close() }

// Lookup returns the Ethernet address to send a packet to dst with. When
// the next hop is not resolved yet it prompts the kernel to resolve it
// and returns ok false and no error: the caller holds the packet (or
// drops it) and asks again. An error means the packet cannot go: no route
// through the interface, or a hop that does not answer.
func (r *Resolver) Lookup(dst netip.Addr) (mac [6]byte, ok bool, err error) {
	dst = dst.Unmap()
	now := r.now()
	r.mu.Lock()
	e, found := r.cache[dst]
	r.mu.Unlock()
	if found && e.ok && now.Before(e.expires) {
		return e.mac, true, nil
	}
	if found && !e.ok && now.Sub(e.asked) < retry {
		return mac, false, nil
	}
	e, err = r.resolve(dst, now)
	if err != nil {
		r.mu.Lock()
		delete(r.cache, dst)
		r.mu.Unlock()
		return mac, false, err
	}
	r.mu.Lock()
	r.cache[dst] = e
	r.mu.Unlock()
	return e.mac, e.ok, nil
}

// resolve asks the kernel for dst's next hop and the hop's neighbour
// entry, and prompts resolution if the entry is missing or unusable.
func (r *Resolver) resolve(dst netip.Addr, now time.Time) (entry, error) {
	hop, err := r.nextHop(dst)
	if err != nil {
		return entry{}, err
	}
	e := entry{hop: hop, expires: now.Add(r.ttl)}
	n, err := r.neighbour(hop)
	if err != nil {
		return entry{}, err
	}
	switch {
	case n == nil || n.State == netlink.NUD_NONE || n.State&netlink.NUD_INCOMPLETE != 0:
		// Unknown, or being resolved: prompt the kernel (again).
	case n.State&netlink.NUD_FAILED != 0:
		// The kernel gave up on it; prompting starts a new round, as the
		// kernel's own next packet would, but this packet cannot wait.
		r.prompt(hop)
		return entry{}, fmt.Errorf("%w: %v", ErrUnresolved, hop)
	case n.State&netlink.NUD_NOARP != 0 || len(n.HardwareAddr) != 6:
		// A point-to-point or NOARP interface: no link-layer address.
		return entry{}, fmt.Errorf("neigh: %v has no Ethernet address (state %#x)", hop, n.State)
	default:
		// REACHABLE, STALE, DELAY, PROBE or PERMANENT: usable, as the
		// kernel uses a stale entry while it re-probes.
		e.mac, e.ok = [6]byte(n.HardwareAddr), true
		if n.State&netlink.NUD_STALE != 0 {
			r.prompt(hop) // have the kernel confirm it, as its own use would
		}
		return e, nil
	}
	r.prompt(hop)
	e.asked = now
	return e, nil
}

// nextHop returns the address whose Ethernet address a packet to dst
// goes to: dst itself on a directly connected subnet, else the route's
// gateway. The route is the one the kernel would use for a packet that
// must leave through the resolver's interface (ip route get fibmatch DST
// oif IFACE), as for a socket bound to it: the interface may share a
// subnet with another, whose route the kernel prefers when it may choose
// (an address of the host on each of two ports of one bridge). A
// destination no route of the interface covers, or that is local, is
// ErrNoRoute: with an output interface and no route the kernel would
// assume the destination on link, which the FIB match does not.
func (r *Resolver) nextHop(dst netip.Addr) (netip.Addr, error) {
	routes, err := r.h.RouteGetWithOptions(net.IP(dst.AsSlice()), &netlink.RouteGetOptions{OifIndex: r.ifindex, FIBMatch: true})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: %v: %v", ErrNoRoute, dst, err)
	}
	for _, rt := range routes {
		if rt.Type != unix.RTN_UNICAST {
			continue // local, broadcast, unreachable ...
		}
		gw, link := rt.Gw, rt.LinkIndex
		for _, nh := range rt.MultiPath {
			if nh.LinkIndex == r.ifindex {
				gw, link = nh.Gw, nh.LinkIndex
				break
			}
		}
		if link != r.ifindex {
			continue
		}
		if a, ok := netip.AddrFromSlice(gw); ok && !a.IsUnspecified() {
			return a.Unmap(), nil
		}
		return dst, nil
	}
	return netip.Addr{}, fmt.Errorf("%w: %v", ErrNoRoute, dst)
}

// neighbour returns the kernel's entry for hop on the interface, or nil.
func (r *Resolver) neighbour(hop netip.Addr) (*netlink.Neigh, error) {
	family := netlink.FAMILY_V4
	if hop.Is6() {
		family = netlink.FAMILY_V6
	}
	ns, err := r.h.NeighList(r.ifindex, family)
	if err != nil {
		return nil, fmt.Errorf("neigh: listing neighbours: %w", err)
	}
	for i := range ns {
		if a, ok := netip.AddrFromSlice(ns[i].IP); ok && a.Unmap() == hop {
			return &ns[i], nil
		}
	}
	return nil, nil
}

// prompt has the kernel resolve hop as it would for a packet of its own:
// an RTM_NEWNEIGH with NTF_USE, which runs neigh_event_send, creating the
// entry if need be and sending the ARP request or neighbour solicitation.
// It is fire and forget: Lookup sees the result in the table.
func (r *Resolver) prompt(hop netip.Addr) {
	family := netlink.FAMILY_V4
	if hop.Is6() {
		family = netlink.FAMILY_V6
	}
	r.h.NeighSet(&netlink.Neigh{LinkIndex: r.ifindex, Family: family, IP: net.IP(hop.AsSlice()), Flags: netlink.NTF_USE})
}

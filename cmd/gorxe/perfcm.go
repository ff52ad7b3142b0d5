package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/perftest"
)

// openRemoteCM is openRemote with -R or -z: no TCP; the exchange goes
// over an rdma_cm connection on -p's port (perftest's comm QP), so the
// device and its connection manager come first on both sides. The
// server's device takes --ip, or else --bind_source_ip, the address it
// listens on (a server without either has no address to learn from a
// client on the udp link).
func openRemoteCM(ctx context.Context, r *perfRun, name string, stdout io.Writer, quiet bool, ep *endpoint,
	fail func(error) (*endpoint, error)) (*endpoint, error) {
	var bind netip.Addr
	if r.bindIP != "" {
		a, err := netip.ParseAddr(r.bindIP)
		if err != nil {
			return fail(fmt.Errorf("--bind_source_ip %s: %v", r.bindIP, err))
		}
		bind = a.Unmap()
	}
	early := r.link.kind == "tap" || r.link.kind == "xdp" || r.link.ip != ""
	var peer netip.Addr
	switch {
	case r.server != "":
		ips, err := lookupHost(ctx, r.server)
		if err != nil {
			return fail(err)
		}
		peer = ips[0].Unmap()
		if r.ipv6 {
			for _, a := range ips {
				if a.Unmap().Is6() {
					peer = a
					break
				}
			}
		}
		// rdma_cm sends from the GID of the route's source address,
		// whatever GID perftest's own choice would take: a peer is
		// reached from a GID of its family, --ipv6 or not.
		r.ipv6 = peer.Is6()
		reached := bind
		if !reached.IsValid() && !early {
			if reached, err = routeSource(peer.String()); err != nil {
				return fail(err)
			}
		}
		if err := ep.openDevice(r, name, reached); err != nil {
			return fail(err)
		}
	case early || bind.IsValid():
		if err := ep.openDevice(r, name, bind); err != nil {
			return fail(err)
		}
	default:
		// No client to learn an address from: the host's only
		// interface with one, as rxe0 is bound to one.
		t, note, err := soleInterfaceGIDs()
		if note != "" {
			fmt.Fprintf(r.link.log, "%s: %s\n", name, note)
		}
		if err != nil {
			return fail(fmt.Errorf("-R and -z on the udp link: the server needs its address, and %v: give it with --ip or --bind_source_ip", err))
		}
		e, _, err := pickGID(t, r.gidIndex, r.ipv6, netip.Addr{})
		if err != nil {
			return fail(err)
		}
		// Reached at any address of the interface, as the kernel's
		// rdma_cm listening on every address is.
		r.link.also = otherAddrs(t, e)
		if err := ep.openDevice(r, name, e.addr()); err != nil {
			return fail(err)
		}
	}
	var err error
	if ep.cm, err = cm.New(ep.dev, cm.Config{}); err != nil {
		return fail(err)
	}
	if r.server == "" {
		if !quiet {
			fmt.Fprintln(stdout, "\n************************************\n* Waiting for client to connect... *\n************************************")
		}
		if ep.conn, err = perftest.ListenCM(ctx, ep.cm, bind, uint16(r.tcpPort), r.p.RetryCount); err != nil {
			return fail(err)
		}
		return ep, nil
	}
	if ep.conn, err = perftest.DialCM(ctx, ep.cm, netip.AddrPortFrom(peer, uint16(r.tcpPort)), bind, r.p.RetryCount); err != nil {
		return fail(err)
	}
	return ep, nil
}

// lookupHost resolves a host's name or address. An address stands for
// itself with its zone (fe80::2%eth0), which the resolver drops.
func lookupHost(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err == nil && len(ips) == 0 {
		err = errors.New("no address")
	}
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %v", host, err)
	}
	return ips, nil
}

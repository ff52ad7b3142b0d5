package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/internal/getopt"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/rping"
	"github.com/gorxe/gorxe/wire"
)

// rpingRun is an rping command line, parsed.
type rpingRun struct {
	p          rping.Params
	link       linkFlags
	server     bool
	client     bool
	addr       string // -a
	source     string // -I
	port       int    // -p
	tos        int    // -t
	persistent bool   // -P
	selfQP     bool   // -q
	help       bool
}

type rpingOption = toolOption[rpingRun]

// rpingOptions returns rping's options (rping.c's "a:I:Pp:C:S:t:scvVdq")
// and gorxe's, in the order -h lists them.
func rpingOptions() []rpingOption {
	str, num, flag := setString[rpingRun], setInt[rpingRun], setTrue[rpingRun]
	const (
		no  = getopt.NoArg
		req = getopt.RequiredArg
	)
	opts := []rpingOption{
		{'s', "", no, honoured, false, "server side", flag(func(r *rpingRun) *bool { return &r.server })},
		{'c', "", no, honoured, false, "client side", flag(func(r *rpingRun) *bool { return &r.client })},
		{'a', "", req, honoured, false, "address: the server's (client), the one to listen on (server)", str(func(r *rpingRun) *string { return &r.addr })},
		{'I', "", req, honoured, false, "source address to bind to for client", str(func(r *rpingRun) *string { return &r.source })},
		{'p', "", req, honoured, false, "port (7174)", num(func(r *rpingRun) *int { return &r.port })},
		{'C', "", req, honoured, false, "ping count times (0, the default: forever)", num(func(r *rpingRun) *int { return &r.p.Count })},
		{'S', "", req, honoured, false, "ping data size (64)", num(func(r *rpingRun) *int { return &r.p.Size })},
		{'v', "", no, honoured, false, "display ping data to stdout", flag(func(r *rpingRun) *bool { return &r.p.Verbose })},
		{'V', "", no, honoured, false, "validate ping data", flag(func(r *rpingRun) *bool { return &r.p.Validate })},
		{'d', "", no, honoured, false, "debug printfs", flag(func(r *rpingRun) *bool { return &r.p.Debug })},
		{'P', "", no, honoured, false, "persistent server mode allowing multiple connections", flag(func(r *rpingRun) *bool { return &r.persistent })},
		{'t', "", req, honoured, false, "type of service: the IP traffic class of the connection", num(func(r *rpingRun) *int { return &r.tos })},
		{'q', "", no, accepted, false, "self-created, self-modified QP: gorxe's connection manager moves the QP either way", flag(func(r *rpingRun) *bool { return &r.selfQP })},
		{'h', "help", no, honoured, true, "print this help", flag(func(r *rpingRun) *bool { return &r.help })},
		{0, "give-up", req, honoured, true, "once connected, fail when no completion comes for this long: the peer is taken for gone (10s; rping learns of a dead peer from the kernel's DREQ, which a killed gorxe does not send)", setPositiveDuration(func(r *rpingRun) *time.Duration { return &r.p.GiveUp })},
	}
	return append(opts, linkOptions(func(r *rpingRun) *linkFlags { return &r.link },
		"how packets travel: udp (a kernel UDP socket, the default), tap (a TAP device on which gorxe is a whole host) or xdp (AF_XDP on --dev's interface, root)",
		"this host's address, ADDR or ADDR/PREFIX; tap needs the prefix (udp default: -a on the server, the route to -a's host on the client)")...)
}

// parseRping parses an rping command line.
func parseRping(args []string) (*rpingRun, error) {
	r := &rpingRun{port: rping.DefaultPort, link: linkFlags{port: wire.UDPPort}}
	r.p.Size, r.p.GiveUp = rping.DefaultSize, 10*time.Second
	operands, err := parseOptions(rpingOptions(), r, args, false)
	if err != nil || r.help {
		return r, err
	}
	if len(operands) > 0 {
		return r, fmt.Errorf("unexpected operands %q", operands)
	}
	r.link.kind = cmp.Or(r.link.kind, "udp")
	switch {
	case r.server == r.client:
		return r, errors.New("give -s (server) or -c (client)")
	case r.client && r.addr == "":
		return r, errors.New("-c needs -a, the server's address")
	case r.port <= 0 || r.port > 65535:
		return r, fmt.Errorf("-p %d: not a port", r.port)
	case r.tos < 0 || r.tos > 255:
		return r, fmt.Errorf("-t %d: a type of service is 0 to 255", r.tos)
	case r.link.kind == "mem":
		return r, errors.New("--link mem: rping's peer is another process: use --link udp, tap or xdp")
	}
	r.p.TrafficClass = uint8(r.tos)
	if err := r.p.Check(); err != nil {
		return r, err
	}
	if err := r.link.validateKind(); err != nil {
		return r, err
	}
	return r, r.link.validateCC()
}

func rpingUsage(w io.Writer, name string) {
	fmt.Fprintf(w, "Usage:\n  %s -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n", name)
	fmt.Fprintf(w, "  %s -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]\n\n", name)
	fmt.Fprintf(w, "librdmacm's rping: the client SENDs its buffer's address, the server RDMA READs\n")
	fmt.Fprintf(w, "it and RDMA WRITEs it back, over a connection made with rdma_cm (no TCP); either\n")
	fmt.Fprintf(w, "side may be stock rping on rxe or a RoCE NIC.\n")
	printOptions(w, rpingOptions(), "rping")
}

func runRping(args []string, stdout, stderr io.Writer) int {
	const name = "gorxe rping"
	r, err := parseRping(args)
	if err != nil {
		return badCommandLine(stderr, name, err)
	}
	r.link.log = stderr
	if r.help {
		rpingUsage(stdout, name)
		return exitOK
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fail := func(err error) int {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitError
	}
	peer, err := resolveHost(r.addr)
	if err != nil {
		return fail(err)
	}
	var local string
	if !r.client && peer.IsValid() && !peer.IsUnspecified() {
		local = peer.String() // -a: the address the server listens on
	}
	if local == "" {
		if local, r.link.also, err = cmLocal(r.link, r.source, peer, r.client); err != nil {
			return fail(err)
		}
	}
	closeTraceJSON, err := r.link.openTraceJSON(name, stderr)
	if err != nil {
		return fail(err)
	}
	defer closeTraceJSON()
	dev, m, err := openCM(r.link, local, r.p.Debug)
	if err != nil {
		return fail(err)
	}
	defer dev.Close()
	defer m.Close()
	if r.client {
		src := netip.Addr{}
		if r.source != "" {
			src = netip.MustParseAddr(r.source)
		}
		if err := rping.Client(ctx, m, dev, netip.AddrPortFrom(peer, uint16(r.port)), src, r.p, stdout); err != nil {
			return fail(err)
		}
		fmt.Fprintln(stderr, "client DISCONNECT EVENT...")
		return exitOK
	}
	var at netip.Addr
	if peer.IsValid() && !peer.IsUnspecified() {
		at = peer
	}
	l, err := m.Listen(at, uint16(r.port))
	if err != nil {
		return fail(err)
	}
	defer l.Close()
	for {
		if err := rping.Server(ctx, dev, l, r.p, stdout, stderr); err != nil {
			if !r.persistent || ctx.Err() != nil {
				return fail(err)
			}
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
		}
		if !r.persistent {
			return exitOK
		}
	}
}

// resolveHost returns the address of a host name or literal, "" as the
// zero Addr.
func resolveHost(host string) (netip.Addr, error) {
	if host == "" {
		return netip.Addr{}, nil
	}
	ips, err := lookupHost(context.Background(), host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("getaddrinfo failed - invalid hostname or IP address: %s", host)
	}
	return ips[0].Unmap(), nil
}

// openCM opens the link lf names on local (the udp and tap links'
// address), the device, and its connection manager, which traces its
// messages to stderr with trace.
func openCM(lf linkFlags, local string, trace bool) (*rnic.Device, *cm.Manager, error) {
	if lf.kind != "xdp" {
		lf.ip = cmp.Or(lf.ip, local)
		if err := lf.validate(); err != nil {
			return nil, nil, err
		}
	}
	dev, err := lf.openDevice(rnic.Config{})
	if err != nil {
		return nil, nil, err
	}
	mc := cm.Config{}
	if trace {
		mc.Trace = linesTo(os.Stderr)
	}
	m, err := cm.New(dev, mc)
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	return dev, m, nil
}

// cmLocal returns the address the device of an rdma_cm tool takes on the
// udp or tap link: --ip, else the source address given, else (a client)
// the kernel's route's to the peer, else (a server on the udp link) the
// address perftest would choose of the host's only interface with one,
// and the interface's other addresses as also (udp.Config.Also), so that
// the server is reached at any of them, as the kernel's rdma_cm listening
// on every address is. A server with none of them is refused. An
// unspecified address given as the source (-b 0.0.0.0) or as a server's
// peer (rping -s -a ::) asks for an address of its family first: the
// interface's IPv6 one for ::, its IPv4 one for 0.0.0.0.
func cmLocal(lf linkFlags, source string, peer netip.Addr, client bool) (local string, also []netip.Addr, err error) {
	ipv6 := false
	if a, err := netip.ParseAddr(source); err == nil && a.IsUnspecified() {
		source, ipv6 = "", a.Is6()
	}
	if !client && peer.IsUnspecified() {
		ipv6 = peer.Is6()
	}
	switch {
	case lf.ip != "" || lf.kind == "xdp":
		return lf.ip, nil, nil
	case source != "":
		return source, nil, nil
	case client:
		a, err := routeSource(peer.String())
		if err != nil {
			return "", nil, err
		}
		return a.String(), nil, nil
	case lf.kind == "tap":
		return "", nil, lf.validate() // the tap link needs its --ip
	}
	t, note, err := soleInterfaceGIDs()
	if note != "" && lf.log != nil {
		fmt.Fprintf(lf.log, "gorxe: %s\n", note)
	}
	if err == nil {
		var e gidEntry
		if e, _, err = pickGID(t, -1, ipv6, netip.Addr{}); err == nil {
			return e.addr().String(), otherAddrs(t, e), nil
		}
	}
	return "", nil, fmt.Errorf("a server on the udp link takes the addresses of one interface, and %v: give one of this host's addresses with --ip", err)
}

package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorxe/gorxe/internal/getopt"
	"github.com/gorxe/gorxe/pingpong"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire"
)

// pingpongTool is one of rdma-core's ping-pong examples that gorxe runs:
// ibv_rc_pingpong; ibv_uc_pingpong, which is the same program with a UC
// QP and without the options rc_pingpong has grown since (uc_pingpong.c:
// "p:d:i:s:m:r:n:l:eg:"); ibv_ud_pingpong, the same with a UD QP
// (ud_pingpong.c: "p:d:i:s:r:n:l:eg:c", no -m); or ibv_srq_pingpong,
// rc_pingpong's run on -q RC QPs that share one receive queue
// (srq_pingpong.c: "p:d:i:s:m:q:r:n:l:eog:c").
type pingpongTool struct {
	name    string  // gorxe's command: rc_pingpong
	service string  // RC
	typ     qp.Type // the QP's
	srq     bool    // -q QPs on one SRQ
	// opts are the tool's short options, of rc_pingpong's (and -q);
	// all of rc_pingpong's when empty.
	opts string
	size int // -s's default
}

var (
	rcTool  = &pingpongTool{name: "rc_pingpong", service: "RC", typ: qp.TypeRC, size: 4096}
	ucTool  = &pingpongTool{name: "uc_pingpong", service: "UC", typ: qp.TypeUC, opts: "pdismrnleg", size: 4096}
	udTool  = &pingpongTool{name: "ud_pingpong", service: "UD", typ: qp.TypeUD, opts: "pdisrnlegc", size: pingpong.DefaultUDSize}
	srqTool = &pingpongTool{name: "srq_pingpong", service: "RC", typ: qp.TypeRC, srq: true, opts: "pdismqrnleogc", size: 4096}
)

// peer returns rdma-core's name of the tool: ibv_rc_pingpong.
func (t *pingpongTool) peer() string { return "ibv_" + t.name }

// rcRun is an ibv_rc_pingpong (or ibv_uc_pingpong) command line, parsed.
type rcRun struct {
	tool    *pingpongTool
	p       pingpong.Params
	link    linkFlags
	host    string // the operand: the server (client role)
	tcpPort int    // -p
	device  string // -d: the name gorxe's device takes
	ibPort  int    // -i
	// gidIndex is -g, an index into the interface's GID table laid out
	// as rxe lays out its own (gids.go; udp link), or into the device's
	// (tap link); -1 when not given.
	gidIndex int
	mtu      int // -m, in bytes
	sl       int // -l

	odp, iodp, prefetch, ccUnprotected bool
	help                               bool
}

// rcOption is one row of the option table: ibv_rc_pingpong's own
// (rc_pingpong.c, main's long_options and
// "p:d:i:s:m:r:n:l:eg:oOPtcjNU"), or gorxe's.
type rcOption = toolOption[rcRun]

// rcOptions returns the tool's option table, in the order -h lists it.
func rcOptions(tool *pingpongTool) []rcOption {
	str, num, flag := setString[rcRun], setInt[rcRun], setTrue[rcRun]
	const (
		no  = getopt.NoArg
		req = getopt.RequiredArg
	)
	opts := []rcOption{
		{'p', "port", req, honoured, false, "TCP port of the exchange (18515)", num(func(r *rcRun) *int { return &r.tcpPort })},
		{'d', "ib-dev", req, accepted, false, "the name gorxe's device takes (gorxe0)", str(func(r *rcRun) *string { return &r.device })},
		{'i', "ib-port", req, honoured, false, "port of the device: 1, gorxe's only one", num(func(r *rcRun) *int { return &r.ibPort })},
		{'s', "size", req, honoured, false, fmt.Sprintf("message size in bytes (%d)", tool.size), num(func(r *rcRun) *int { return &r.p.Size })},
		{'m', "mtu", req, honoured, false, "path MTU: 256, 512, 1024, 2048 or 4096 (1024; not negotiated)", num(func(r *rcRun) *int { return &r.mtu })},
		{'q', "num-qp", req, honoured, false, "QPs sharing the SRQ (16)", num(func(r *rcRun) *int { return &r.p.NumQP })},
		{'r', "rx-depth", req, honoured, false, "receives posted at a time (500)", num(func(r *rcRun) *int { return &r.p.RxDepth })},
		{'n', "iters", req, honoured, false, "messages each way (1000)", num(func(r *rcRun) *int { return &r.p.Iters })},
		{'e', "events", no, honoured, false, "sleep on the CQ instead of polling it", flag(func(r *rcRun) *bool { return &r.p.Events })},
		{'g', "gid-idx", req, honoured, false, "GID index, as rxe's table on the interface has it (gorxe show_gids); on the tap link, 0 is its link-local address and 1 its --ip, as on rxe", num(func(r *rcRun) *int { return &r.gidIndex })},
		{'c', "chk", no, honoured, false, "validate the received buffer (gorxe: every byte, on both sides, exit 1 if bad)", flag(func(r *rcRun) *bool { return &r.p.Check })},
		{'l', "sl", req, accepted, false, "service level, 0-15: a RoCE v2 packet has no field for it, and rxe ignores it too", num(func(r *rcRun) *int { return &r.sl })},
		{'o', "odp", no, accepted, false, "on-demand paging: gorxe's memory regions are Go memory, never pinned", flag(func(r *rcRun) *bool { return &r.odp })},
		{'P', "prefetch", no, accepted, false, "prefetch the ODP region (with -o): nothing to fetch", flag(func(r *rcRun) *bool { return &r.prefetch })},
		{'N', "new_send", no, accepted, false, "post sends with ibv_wr_*: the same work requests", func(*rcRun, string) error { return nil }},
		{'U', "allow-cc-unprotected", no, accepted, false, "CoCo guests' shared memory (rdma-core after v44): plain Go memory", flag(func(r *rcRun) *bool { return &r.ccUnprotected })},
		{'O', "iodp", no, refused, false, "-O: implicit ODP registers the whole address space; gorxe registers Go byte slices", nil},
		{'t', "ts", no, refused, false, "-t: the device isn't completion timestamp capable (gorxe's completions carry no clock, as rxe's)", nil},
		{'j', "dm", no, refused, false, "-j: the device doesn't support dm allocation (gorxe, as rxe, has no device memory)", nil},

		// gorxe's own options.
		{0, "give-up", req, honoured, true, "fail when the peer's address or a completion takes longer than this (10s; " + tool.peer() + " waits forever)", setPositiveDuration(func(r *rcRun) *time.Duration { return &r.p.GiveUp })},
		{'h', "help", no, honoured, true, "print this help", flag(func(r *rcRun) *bool { return &r.help })},
	}
	if !tool.srq {
		opts = slices.DeleteFunc(opts, func(o rcOption) bool { return o.short == 'q' })
	}
	if tool.opts != "" {
		opts = slices.DeleteFunc(opts, func(o rcOption) bool {
			return !o.gorxe && !strings.ContainsRune(tool.opts, rune(o.short)) && !(o.short == 'c' && tool.typ == qp.TypeUC)
		})
	}
	for i := range opts {
		switch o := &opts[i]; {
		case o.short == 's' && tool.typ == qp.TypeUD:
			o.help += ", at most the port's MTU"
		case o.short == 'c' && tool.srq:
			o.help = "validate the received buffer (the server, as ibv_srq_pingpong; gorxe: every byte, exit 1 if bad)"
		case o.short == 'c' && tool.typ == qp.TypeUC:
			// uc_pingpong has no -c: gorxe's, for a gorxe peer.
			o.gorxe = true
			o.help = "validate every byte received, on both sides, exit 1 if bad (a gorxe peer's; stock ibv_uc_pingpong has no -c)"
		}
	}
	// gorxe's own options that choose the link.
	return append(opts, linkOptions(func(r *rcRun) *linkFlags { return &r.link },
		"how packets travel: udp (a kernel UDP socket, the default), tap (a TAP device on which gorxe is a whole host) or xdp (AF_XDP on --dev's interface, root)",
		"this host's address, ADDR or ADDR/PREFIX; tap needs the prefix (udp default: the address -g names)")...)
}

// parseRC parses the tool's command line. As getopt_long, a repeated
// option takes its last value.
func parseRC(tool *pingpongTool, args []string) (*rcRun, error) {
	r := &rcRun{
		tool:     tool,
		p:        pingpong.DefaultParams(),
		tcpPort:  pingpong.DefaultPort,
		ibPort:   1,
		gidIndex: -1,
		mtu:      1024,
		link:     linkFlags{port: wire.UDPPort},
	}
	r.p.GiveUp = 10 * time.Second
	r.p.Type, r.p.Size = tool.typ, tool.size
	if tool.srq {
		r.p.NumQP = pingpong.DefaultNumQP
	}
	table := rcOptions(tool)
	operands, err := parseOptions(table, r, args, false)
	if err != nil || r.help {
		return r, err
	}
	switch len(operands) {
	case 0:
	case 1:
		r.host = operands[0]
	default:
		return r, fmt.Errorf("one HOST at most, got %q", operands)
	}
	r.link.kind = cmp.Or(r.link.kind, "udp")
	return r, r.check()
}

// check refuses what ibv_rc_pingpong refuses after parsing, and what
// gorxe cannot do with the values given.
func (r *rcRun) check() error {
	switch {
	case r.tcpPort < 0 || r.tcpPort > 65535:
		return fmt.Errorf("-p %d: not a TCP port", r.tcpPort)
	case r.ibPort < 1 || r.ibPort > 255:
		return fmt.Errorf("-i %d: not a port number", r.ibPort)
	case r.sl < 0 || r.sl > 15:
		return fmt.Errorf("-l %d: an SL is 0 to 15", r.sl)
	case r.gidIndex < -1:
		return fmt.Errorf("-g %d: not a GID index", r.gidIndex)
	case r.tool.srq && r.p.NumQP < 1:
		// srq_pingpong takes -q 0 and then waits for completions
		// forever.
		return fmt.Errorf("-q %d: want at least one QP", r.p.NumQP)
	// ibv_rc_pingpong's own checks (-j's are moot: it is refused).
	case r.ccUnprotected && r.odp:
		return errors.New("CoCo unprotected memory cannot be used with ODP")
	case !r.odp && r.prefetch:
		return errors.New("prefetch is valid only with on-demand memory region")
	case r.link.kind == "mem":
		return fmt.Errorf("--link mem: %s's peer is another process: use --link udp or tap", r.tool.peer())
	}
	if err := r.link.validateKind(); err != nil {
		return err
	}
	if err := r.link.validateCC(); err != nil {
		return err
	}
	if err := r.link.validateEarly(); err != nil {
		return err
	}
	if r.link.kind == "xdp" && r.gidIndex < 0 {
		return fmt.Errorf("no GID: RoCE needs one: give -g INDEX (gorxe show_gids %s)", cmp.Or(r.link.dev, "IFACE"))
	}
	if r.link.kind == "udp" && r.link.ip == "" && r.gidIndex < 0 {
		// ibv_rc_pingpong then sends a zero GID and connects without a
		// GRH, which no RoCE device can do.
		return errors.New("no GID: RoCE needs one: give -g INDEX (gorxe show_gids lists them) or --ip")
	}
	if r.p.MTU = qp.MTUFromBytes(r.mtu); r.p.MTU == 0 {
		return fmt.Errorf("-m %d: the MTU is 256, 512, 1024, 2048 or 4096", r.mtu)
	}
	r.p.Port, r.p.SL = uint8(r.ibPort), uint8(r.sl)
	r.p.GIDIndex = 0 // the device's: its one address on the udp link; tap and xdp pick theirs at openDevice
	return r.p.Validate()
}

// rcUsage prints -h.
func rcUsage(w io.Writer, tool *pingpongTool, name string) {
	peer := tool.peer()
	fmt.Fprintf(w, "Usage:\n  %s [options]          start a server and wait for connection\n  %s [options] HOST     connect to server at HOST\n\n", name, name)
	fmt.Fprintf(w, "%s SEND ping-pong with rdma-core's %s's command line, exchange and\n", tool.service, peer)
	fmt.Fprintf(w, "output; either side may be stock %s on rxe or a RoCE NIC. As there,\n", peer)
	fmt.Fprintf(w, "-g is needed: RoCE cannot go without a GID (or give gorxe's --ip).\n")
	if tool.typ == qp.TypeUD {
		fmt.Fprintf(w, "Messages are UD SENDs with Q_Key 0x11111111 of at most the port's MTU, received behind a\n40-byte GRH area.\n")
	}
	if tool.typ != qp.TypeRC {
		fmt.Fprintf(w, "A lost message is not sent again: the side waiting for it gives up after --give-up.\n")
	}
	if tool.srq {
		fmt.Fprintf(w, "-q QPs on each side receive from one shared receive queue; -n counts the messages\nof all of them.\n")
	}
	printOptions(w, rcOptions(tool), peer)
}

func runRCPingpong(args []string, stdout, stderr io.Writer) int {
	return runPingpong(rcTool, args, stdout, stderr)
}

func runUCPingpong(args []string, stdout, stderr io.Writer) int {
	return runPingpong(ucTool, args, stdout, stderr)
}

func runUDPingpong(args []string, stdout, stderr io.Writer) int {
	return runPingpong(udTool, args, stdout, stderr)
}

func runSRQPingpong(args []string, stdout, stderr io.Writer) int {
	return runPingpong(srqTool, args, stdout, stderr)
}

func runPingpong(tool *pingpongTool, args []string, stdout, stderr io.Writer) int {
	name := "gorxe " + tool.name
	r, err := parseRC(tool, args)
	if err != nil {
		return badCommandLine(stderr, name, err)
	}
	r.link.log = stderr
	if r.help {
		rcUsage(stdout, tool, name)
		return exitOK
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var dev *rnic.Device
	fail := func(err error) int {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		if dev != nil {
			c := dev.Counters()
			printLinkDrops(stderr, name, c.Named())
		}
		return exitError
	}
	closeTraceJSON, err := r.link.openTraceJSON(name, stderr)
	if err != nil {
		return fail(err)
	}
	defer closeTraceJSON()
	var res *pingpong.Result
	if r.host != "" {
		dev, err = r.openDevice(routeTo(r.host))
		if err != nil {
			return fail(err)
		}
		defer dev.Close()
		res, err = pingpong.Client(ctx, dev, r.p, net.JoinHostPort(r.host, strconv.Itoa(r.tcpPort)), stdout)
		if err != nil {
			return fail(err)
		}
	} else {
		ln, err := new(net.ListenConfig).Listen(ctx, "tcp", net.JoinHostPort("", strconv.Itoa(r.tcpPort)))
		if err != nil {
			return fail(fmt.Errorf("couldn't listen to port %d: %w", r.tcpPort, err))
		}
		if r.link.kind == "tap" || r.link.kind == "xdp" || r.link.ip != "" {
			// The address is known: set up, print, then wait, as
			// ibv_rc_pingpong does.
			dev, err = r.openDevice(nil)
			if err != nil {
				ln.Close()
				return fail(err)
			}
			defer dev.Close()
			res, err = pingpong.Server(ctx, dev, r.p, ln, stdout)
			if err != nil {
				return fail(err)
			}
		} else {
			// The interface the client reaches this host on holds the
			// GID -g names.
			c, err := pingpong.Accept(ctx, ln)
			if err != nil {
				return fail(err)
			}
			reached := func() (netip.Addr, error) { return c.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap(), nil }
			dev, err = r.openDevice(reached)
			if err != nil {
				c.Close()
				return fail(err)
			}
			defer dev.Close()
			res, err = pingpong.ServerConn(ctx, dev, r.p, c, stdout)
			if err != nil {
				return fail(err)
			}
		}
	}
	if len(res.BadPages) > 0 {
		return fail(fmt.Errorf("-c: %d of the pages received differ from what the client sent", len(res.BadPages)))
	}
	return exitOK
}

// routeTo returns a function that finds the source address the kernel
// picks for host.
func routeTo(host string) func() (netip.Addr, error) {
	return func() (netip.Addr, error) { return routeSource(host) }
}

// openDevice opens the link and the device. On the udp link the address
// is --ip, or else the GID -g names in the GID table of the interface
// that holds the address local returns (the route to the server, or the
// address the client reached); with both, they must agree.
func (r *rcRun) openDevice(local func() (netip.Addr, error)) (*rnic.Device, error) {
	lf := r.link
	if lf.kind == "udp" && (r.gidIndex >= 0 || lf.ip == "") {
		var at netip.Addr
		switch {
		case lf.ip != "":
			a, err := lf.ipAddr()
			if err != nil {
				return nil, err
			}
			at = a
		default: // -g given (check)
			a, err := local()
			if err != nil {
				return nil, err
			}
			at = a
		}
		iface, table, err := localGIDs(at)
		if err != nil {
			return nil, fmt.Errorf("%v: gorxe's udp link needs an address of this host", err)
		}
		if lf.ip != "" {
			if i := slices.IndexFunc(table, func(e gidEntry) bool { return e.GID == netip.AddrFrom16(at.As16()) }); i != r.gidIndex {
				return nil, fmt.Errorf("-g %d names GID %d of %s, but --ip %s is GID %d (%s); give one of them", r.gidIndex, r.gidIndex, iface, lf.ip, i, gidsHint(iface, table, i))
			}
		} else {
			e, _, err := pickGID(table, r.gidIndex, false, netip.Addr{})
			if err != nil {
				return nil, err
			}
			lf.ip = e.addr().String()
		}
	}
	var gid netip.Addr // the xdp link's: -g's in its interface's table
	if lf.kind == "xdp" {
		table, err := interfaceGIDs(lf.dev)
		if err != nil {
			return nil, fmt.Errorf("--dev %s: %v", lf.dev, err)
		}
		e, _, err := pickGID(table, r.gidIndex, false, netip.Addr{})
		if err != nil {
			return nil, err
		}
		gid = e.GID.Unmap()
	}
	dev, err := lf.openDevice(rnic.Config{Name: cmp.Or(r.device, "gorxe0")})
	if err != nil {
		return nil, err
	}
	if lf.kind == "tap" {
		ip, err := lf.ipAddr() // parsed already when the link opened
		if err == nil {
			r.p.GIDIndex, err = tapGID(dev, r.gidIndex, false, ip)
		}
		if err != nil {
			dev.Close()
			return nil, err
		}
	}
	if lf.kind == "xdp" {
		// The device holds the interface's addresses, in the order
		// the interface lists them.
		if r.p.GIDIndex = dev.GIDIndex(gid); r.p.GIDIndex < 0 {
			dev.Close()
			return nil, fmt.Errorf("-g %d of %s (%v) is the port's default GID, but %s does not hold that address: choose another (gorxe show_gids %s)", r.gidIndex, lf.dev, gid, lf.dev, lf.dev)
		}
	}
	return dev, nil
}

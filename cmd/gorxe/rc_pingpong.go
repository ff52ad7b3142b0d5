package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/gorxe/gorxe/pingpong"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// rcPingpongArgs are ibv_rc_pingpong's options as its command line sets
// them, before they are checked; the zero-argument ones are booleans.
type rcPingpongArgs struct {
	port, ibPort, size, mtu, rxDepth, iters, sl, gidIdx int
	ibDev                                               string
	events, odp, iodp, prefetch, ts, chk, dm, newSend   bool
	ccUnprotected                                       bool
}

// rcPingpongOption is one of ibv_rc_pingpong's options: its short and
// long names as its getopt_long table has them (rc_pingpong.c, main), the
// variable it sets, and its help. The variable's value before parsing is
// the default.
type rcPingpongOption struct {
	short, long string
	v           any // *int, *string or *bool
	usage       string
}

// options lists ibv_rc_pingpong's options, in its usage's order, with
// what gorxe does with each.
func (a *rcPingpongArgs) options() []rcPingpongOption {
	return []rcPingpongOption{
		{"p", "port", &a.port, "listen on/connect to TCP `port`"},
		{"d", "ib-dev", &a.ibDev, "use IB device `dev` (gorxe's is gorxe0)"},
		{"i", "ib-port", &a.ibPort, "use `port` of the IB device (gorxe has port 1 only)"},
		{"s", "size", &a.size, "`size` of message to exchange"},
		{"m", "mtu", &a.mtu, "path MTU: 256, 512, 1024, 2048 or 4096 (not negotiated)"},
		{"r", "rx-depth", &a.rxDepth, "number of receives to post at a time"},
		{"n", "iters", &a.iters, "number of exchanges"},
		{"l", "sl", &a.sl, "service level value (0-15; RoCE v2 packets carry none, as rxe ignores it)"},
		{"e", "events", &a.events, "sleep on CQ events (default poll)"},
		{"g", "gid-idx", &a.gidIdx, "local port gid `index` (required on RoCE; gorxe's GIDs are its link's addresses, index 0 first)"},
		{"o", "odp", &a.odp, "use on demand paging (gorxe's memory regions are unpinned Go memory: always so)"},
		{"O", "iodp", &a.iodp, "use implicit on demand paging (not supported)"},
		{"P", "prefetch", &a.prefetch, "prefetch an ODP MR (nothing to do in gorxe)"},
		{"t", "ts", &a.ts, "get CQE with timestamp (not supported: gorxe's CQs, as rxe's, have no clock)"},
		{"c", "chk", &a.chk, "validate received buffer"},
		{"j", "dm", &a.dm, "use device memory (not supported: gorxe, as rxe, has none)"},
		{"N", "new_send", &a.newSend, "use new post send WR API (the same work requests)"},
		{"U", "allow-cc-unprotected", &a.ccUnprotected, "allow allocation of unprotected/shared memory on CoCo guests (plain Go memory)"},
	}
}

// register defines each option on fs under its short and its long name.
func (o rcPingpongOption) register(fs *flag.FlagSet) {
	for _, name := range []string{o.short, o.long} {
		usage := o.usage
		if name == o.long {
			usage = "same as -" + o.short
		}
		switch v := o.v.(type) {
		case *int:
			fs.IntVar(v, name, *v, usage)
		case *string:
			fs.StringVar(v, name, *v, usage)
		case *bool:
			fs.BoolVar(v, name, *v, usage)
		}
	}
}

// check turns the options into Params, refusing what ibv_rc_pingpong
// refuses and what gorxe cannot do.
func (a *rcPingpongArgs) check() (pingpong.Params, error) {
	p := pingpong.DefaultParams()
	switch {
	case a.port < 0 || a.port > 65535:
		return p, fmt.Errorf("-p %d: not a TCP port", a.port)
	case a.ibPort < 1 || a.ibPort > 255:
		return p, fmt.Errorf("-i %d: not a port number", a.ibPort)
	case a.sl < 0 || a.sl > 15:
		return p, fmt.Errorf("-l %d: an SL is 0 to 15", a.sl)
	case a.size < 0 || a.rxDepth < 0 || a.iters < 0:
		return p, fmt.Errorf("-s, -r and -n cannot be negative")
	case a.gidIdx < -1:
		return p, fmt.Errorf("-g %d: not a GID index", a.gidIdx)
	// ibv_rc_pingpong's own checks.
	case a.odp && a.dm:
		return p, errors.New("DM memory region can't be on demand")
	case a.ccUnprotected && (a.odp || a.iodp):
		return p, errors.New("CoCo unprotected memory cannot be used with ODP")
	case a.ccUnprotected && a.dm:
		return p, errors.New("CoCo unprotected memory cannot be used with device memory")
	case !a.odp && !a.iodp && a.prefetch:
		return p, errors.New("prefetch is valid only with on-demand memory region")
	// What gorxe cannot do; rxe cannot either, and ibv_rc_pingpong on it
	// fails the same way.
	case a.iodp:
		return p, errors.New("-O: implicit ODP registers the whole address space, which gorxe, registering Go byte slices, cannot")
	case a.ts:
		return p, errors.New("-t: the device isn't completion timestamp capable (gorxe's completions carry no clock)")
	case a.dm:
		return p, errors.New("-j: the device doesn't support dm allocation (gorxe has no device memory)")
	}
	p.MTU = qp.MTUFromBytes(a.mtu)
	if p.MTU == 0 {
		return p, fmt.Errorf("-m %d: the MTU is 256, 512, 1024, 2048 or 4096", a.mtu)
	}
	p.Size, p.RxDepth, p.Iters = a.size, a.rxDepth, a.iters
	p.Port, p.SL, p.GIDIndex = uint8(a.ibPort), uint8(a.sl), a.gidIdx
	p.Events, p.Check = a.events, a.chk
	return p, p.Validate()
}

// parseInterspersed parses args with fs, letting options follow
// arguments as getopt_long does ("HOST -n 10"), and returns the
// arguments. "--" ends the options.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func runRCPingpong(args []string, stdout, stderr io.Writer) int {
	const name = "gorxe rc_pingpong"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	a := rcPingpongArgs{port: pingpong.DefaultPort, ibPort: 1, size: 4096, mtu: 1024, rxDepth: 500, iters: 1000, gidIdx: -1}
	for _, o := range a.options() {
		o.register(fs)
	}
	var lf linkFlags
	lf.register(fs) // its UDP port is --roce-port: --port is rc_pingpong's TCP port
	lf.kind = "udp"
	fs.Lookup("link").DefValue = "udp"
	giveUp := fs.Duration("give-up", 10*time.Second, "fail when the peer's address or a completion takes longer than this (gorxe; ibv_rc_pingpong waits forever)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage:\n  %s [flags]          start a server and wait for connection\n  %s [flags] HOST     connect to server at HOST\n\n"+
			"Speaks rdma-core's ibv_rc_pingpong: run it against ibv_rc_pingpong (both need -g) or\nanother gorxe rc_pingpong, over --link udp or tap with --ip.\n\n", name, name)
		fs.PrintDefaults()
	}
	hosts, err := parseInterspersed(fs, args)
	if err != nil {
		if err == flag.ErrHelp {
			return exitOK
		}
		return exitUsage
	}
	if len(hosts) > 1 {
		fmt.Fprintf(stderr, "%s: one HOST at most, got %q\n", name, hosts)
		return exitUsage
	}
	p, err := a.check()
	if err == nil && lf.kind == "mem" {
		err = errors.New("--link mem: ibv_rc_pingpong's peer is another process: use --link udp or tap, with --ip")
	}
	if err == nil {
		err = lf.validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitUsage
	}
	p.GiveUp = *giveUp

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fail := func(err error) int {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitError
	}
	l, err := lf.open()
	if err != nil {
		return fail(err)
	}
	cfg := rnic.Config{Link: l, Port: uint16(lf.port)}
	if lf.trace {
		cfg.Trace = traceTo(stderr)
	}
	dev, err := rnic.Open(cfg)
	if err != nil {
		l.Close()
		return fail(err)
	}
	defer dev.Close()
	if a.ibDev != "" && a.ibDev != dev.Name() {
		return fail(fmt.Errorf("IB device %s not found (gorxe's is %s)", a.ibDev, dev.Name()))
	}
	var r *pingpong.Result
	if len(hosts) == 1 {
		r, err = pingpong.Client(ctx, dev, p, net.JoinHostPort(hosts[0], strconv.Itoa(a.port)), stdout)
	} else {
		var ln net.Listener
		ln, err = new(net.ListenConfig).Listen(ctx, "tcp", net.JoinHostPort("", strconv.Itoa(a.port)))
		if err != nil {
			return fail(fmt.Errorf("couldn't listen to port %d: %w", a.port, err))
		}
		r, err = pingpong.Server(ctx, dev, p, ln, stdout)
	}
	if err != nil {
		return fail(err)
	}
	if len(r.BadPages) > 0 {
		return fail(fmt.Errorf("-c: %d of the pages received differ from what the client sent", len(r.BadPages)))
	}
	return exitOK
}

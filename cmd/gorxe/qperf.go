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
	"strings"
	"syscall"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/qperf"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire"
)

// qperfRun is a qperf command line: qperf's own options, which are not
// getopt's (-cm1, -vvs), and gorxe's, typed in full as --name VALUE or
// --name=VALUE.
type qperfRun struct {
	link  linkFlags
	trace bool // --cm-trace
	help  bool // gorxe's -h for the link options
}

// splitQperfArgs takes gorxe's own options out of a qperf command line.
func splitQperfArgs(args []string) (qperfArgs, gorxeArgs []string) {
	own := map[string]bool{"cm-trace": false}
	for _, o := range linkOptions(func(r *qperfRun) *linkFlags { return &r.link }, "", "") {
		own[o.long] = o.arg != 0
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, _, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		takes, ok := own[name]
		if !strings.HasPrefix(a, "--") || !ok {
			qperfArgs = append(qperfArgs, a)
			continue
		}
		gorxeArgs = append(gorxeArgs, a)
		if takes && !hasValue && i+1 < len(args) {
			i++
			gorxeArgs = append(gorxeArgs, args[i])
		}
	}
	return qperfArgs, gorxeArgs
}

func qperfOptions() []toolOption[qperfRun] {
	opts := []toolOption[qperfRun]{
		{0, "cm-trace", 0, honoured, true, "print every connection-manager message to stderr", setTrue(func(r *qperfRun) *bool { return &r.trace })},
	}
	return append(opts, linkOptions(func(r *qperfRun) *linkFlags { return &r.link },
		"how packets travel: udp (a kernel UDP socket, the default), tap (a TAP device on which gorxe is a whole host) or xdp (AF_XDP on --dev's interface, root)",
		"this host's address, ADDR or ADDR/PREFIX; tap needs the prefix (udp default: the address the TCP connection to the peer runs from)")...)
}

func qperfUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  gorxe qperf [-lp PORT]                                  the server
  gorxe qperf SERVER -cm1 [OPTIONS] TEST ...              the client

qperf's RDMA tests over RC, against stock qperf (0.4) on kernel rxe or a RoCE
NIC, or gorxe's: rc_bw, rc_bi_bw, rc_lat, rc_rdma_read_bw, rc_rdma_read_lat,
rc_rdma_write_bw, rc_rdma_write_lat, rc_rdma_write_poll_lat,
rc_compare_swap_mr, rc_fetch_add_mr, ver_rc_compare_swap, ver_rc_fetch_add;
the kernel's tcp_bw, tcp_lat, udp_bw and udp_lat; and conf and quit. On RoCE
qperf connects its QPs with rdma_cm: give -cm1.

qperf's options, as qperf takes them (gorxe qperf --help options lists them
all): -cm1, -m SIZE, -t TIME, -n COUNT (rc_bw), -oo VAR:INIT:LAST:INCR, -to,
-ws, -lp, -e, -ub, -uu, -un, -v, -vv and their kinds, -D, -V; and with
loc_/rem_ halves those that have them, -sb and -ip for the socket tests.
Those of connecting without rdma_cm (-mt, -sl, -sr, -i, -ap) and -f are taken
and reported unused, as qperf reports them.
`)
	printOptions(w, qperfOptions(), "qperf")
}

func runQperf(args []string, stdout, stderr io.Writer) int {
	const name = "gorxe qperf"
	qargs, gargs := splitQperfArgs(args)
	r := &qperfRun{link: linkFlags{port: wire.UDPPort}}
	if operands, err := parseOptions(qperfOptions(), r, gargs, false); err != nil {
		return badCommandLine(stderr, name, err)
	} else if len(operands) > 0 {
		return badCommandLine(stderr, name, fmt.Errorf("unexpected operands %q", operands))
	}
	c, err := qperf.Parse(qargs)
	if err != nil {
		fmt.Fprintln(stdout, strings.TrimPrefix(err.Error(), qperf.ErrUsage.Error()+": "))
		return exitUsage
	}
	switch {
	case c.HelpWanted:
		if c.Help == "main" || c.Help == "options" || c.Help == "tests" {
			qperfUsage(stdout)
			return exitOK
		}
		fmt.Fprintf(stdout, "cannot find help category %s; try: qperf --help categories\n", c.Help)
		return exitUsage
	case c.Version:
		fmt.Fprintf(stdout, "qperf %d.%d.%d\n", qperf.VerMajor, qperf.VerMinor, qperf.VerInc)
		return exitOK
	}
	r.link.kind = cmp.Or(r.link.kind, "udp")
	if r.link.kind == "mem" {
		return badCommandLine(stderr, name, errors.New("--link mem: qperf's peer is another process: use --link udp, tap or xdp"))
	}
	if err := r.link.validateKind(); err != nil {
		return badCommandLine(stderr, name, err)
	}
	if err := r.link.validateCC(); err != nil {
		return badCommandLine(stderr, name, err)
	}
	// Checked now: a server opens its device only when a client comes.
	if err := r.link.validateEarly(); err != nil {
		return badCommandLine(stderr, name, err)
	}
	r.link.log = stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	closeTraceJSON, err := r.link.openTraceJSON(name, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitError
	}
	defer closeTraceJSON()
	env := qperf.Env{Stdout: stdout, Stderr: stderr, Open: func(local netip.Addr) (*rnic.Device, *cm.Manager, error) {
		return openCM(r.link, local.String(), r.trace)
	}}
	if c.Server {
		if err := qperf.Server(ctx, c, env); err != nil {
			fmt.Fprintln(stdout, err)
			return exitError
		}
		return exitOK
	}
	if qperf.Client(ctx, c, env) != nil {
		return exitError
	}
	return exitOK
}

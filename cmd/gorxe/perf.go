package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"syscall"
	"time"

	"github.com/gorxe/gorxe/perftest"
	"github.com/gorxe/gorxe/qp"
)

// perfCommand returns the subcommand that runs perftest's test t.
func perfCommand(t perftest.Test) command {
	verb := map[perftest.Test]string{
		perftest.WriteBW: "RDMA WRITE bandwidth", perftest.ReadBW: "RDMA READ bandwidth",
		perftest.SendBW: "SEND bandwidth", perftest.AtomicBW: "atomic operation rate",
		perftest.WriteLat: "RDMA WRITE latency", perftest.ReadLat: "RDMA READ latency", perftest.SendLat: "SEND latency",
		perftest.AtomicLat: "atomic operation latency",
	}[t]
	return command{
		name:    string(t),
		args:    "[perftest's options] [SERVER]",
		summary: "measure " + verb + " as ib_" + string(t) + " does, with its command line (also: gorxe ib_" + string(t) + ")",
		run: func(args []string, stdout, stderr io.Writer) int {
			return runPerf(t, args, stdout, stderr)
		},
	}
}

func runPerf(t perftest.Test, args []string, stdout, stderr io.Writer) int {
	name := "gorxe " + string(t)
	r, err := parsePerf(t, args)
	if err != nil {
		return badCommandLine(stderr, name, err)
	}
	r.link.log = stderr
	switch {
	case r.help:
		perfUsage(stdout, name, t)
		return exitOK
	case r.version:
		fmt.Fprintf(stdout, "Version: %s\n", perftest.Version)
		return exitOK
	}
	if err := r.link.validateKind(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitUsage
	}
	if r.server != "" && r.link.kind == "mem" {
		fmt.Fprintf(stderr, "%s: a SERVER needs --link udp, tap or xdp, not mem\n", name)
		return exitUsage
	}
	if r.p.CommRDMACM && r.link.kind == "mem" {
		fmt.Fprintf(stderr, "%s: -R and -z connect to a peer: --link udp, tap or xdp, not mem\n", name)
		return exitUsage
	}
	if err := r.link.validateEarly(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitUsage
	}
	f, err := perftest.ParseFaults(r.faults)
	if err != nil {
		fmt.Fprintf(stderr, "%s: --fault: %v\n", name, err)
		return exitUsage
	}
	p, err := r.params()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitUsage
	}
	fmt.Fprint(stderr, p.Notes())
	if p.CPUUtil && p.Duration == 0 {
		fmt.Fprintln(stderr, " CPU Utilization works only with Duration mode.") // perftest's note; the run goes on
	}
	if err := r.resolveRateLimit(&p, stderr); err != nil {
		return badCommandLine(stderr, name, err)
	}
	if err := p.Validate(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitUsage
	}
	if r.link.kind == "mem" {
		// Across hosts RunRemote does it with the MTU both sides agree on.
		note, err := p.FitUD()
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return exitError
		}
		fmt.Fprint(stderr, note)
	}
	device := cmp.Or(r.device, "gorxe0")
	quiet := r.json || r.output != "" // no banner, no table: one JSON object or one number
	gidIndex := max(r.gidIndex, 0)

	if r.cpuProfile != "" {
		stopProfile, err := startCPUProfile(r.cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "%s: --cpuprofile: %v\n", name, err)
			return exitError
		}
		defer stopProfile()
	}

	if r.exectrace != "" {
		stopTrace, err := startTrace(r.exectrace)
		if err != nil {
			fmt.Fprintf(stderr, "%s: --exectrace: %v\n", name, err)
			return exitError
		}
		defer stopTrace()
	}
	closeTraceJSON, err := r.link.openTraceJSON(name, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitError
	}
	defer closeTraceJSON()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// run returns each size's result as it comes, and an error; final
	// returns the counters at the end.
	var run func(yield func(*perftest.Result, *perftest.Params)) error
	var final func() []qp.NamedCounter
	if r.link.kind == "mem" {
		if r.watch != nil {
			if err := r.watch.check(nil); err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", name, err)
				return exitError
			}
		}
		if !quiet {
			perftest.PrintBanner(stdout, &p, perftest.BannerInfo{Device: device, GIDIndex: gidIndex, InProcess: true})
		}
		var total []qp.NamedCounter
		final = func() []qp.NamedCounter { return total }
		run = func(yield func(*perftest.Result, *perftest.Params)) error {
			for _, size := range p.Sizes() {
				ps := p
				ps.Size, ps.AllSize = size, false
				res, err := perftest.RunLocal(ctx, ps, f)
				if len(res) > 0 {
					yield(&res[0], &ps)
					total = addCounters(total, res[0].Client.Named(), res[0].Server.Named())
				}
				if err != nil {
					return fmt.Errorf("size %d: %w", size, err)
				}
			}
			return nil
		}
	} else {
		if r.faults != "" {
			fmt.Fprintf(stderr, "%s: --fault needs --link mem\n", name)
			return exitUsage
		}
		ep, err := openRemote(ctx, r, device, stdout, quiet)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return exitError
		}
		defer ep.close()
		gidIndex = ep.gidIndex
		// perftest's set_mtu, before its banner: the port's active MTU
		// unless -m asks for less.
		mtu, note := perftest.PortMTU(qp.MTUFromBytes(r.mtu), ep.dev.MTU())
		p.MTU = mtu
		if quiet {
			fmt.Fprint(stderr, note)
		} else {
			fmt.Fprint(stdout, note)
			perftest.PrintBanner(stdout, &p, perftest.BannerInfo{Device: ep.dev.Name(), GIDIndex: ep.gidIndex, Server: r.testServer()})
		}
		final = func() []qp.NamedCounter { c := ep.dev.Counters(); return c.Named() }
		if r.watch != nil {
			if err := r.watch.check(final()); err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", name, err)
				return exitError
			}
			r.watch.reset(final())
		}
		run = func(yield func(*perftest.Result, *perftest.Params)) error {
			opt := perftest.RemoteOptions{Dev: ep.dev, Conn: ep.conn, GIDIndex: ep.devGID, Warn: stderr}
			if !quiet {
				// As perftest, before the run: a passive server's first
				// result comes only at its end.
				opt.Addresses = func(local, remote []perftest.Info) {
					perftest.PrintAllAddresses(stdout, &p, local, remote)
				}
			}
			res, err := perftest.RunRemote(ctx, p, opt)
			for i := range res {
				ps := p
				ps.Size, ps.AllSize = resultSize(&res[i], p.Sizes()[min(i, len(p.Sizes())-1)]), false
				yield(&res[i], &ps)
			}
			return err
		}
	}
	first := true
	reports := p.Reports(r.testServer() && r.link.kind != "mem")
	emit := func(res *perftest.Result, ps *perftest.Params) {
		r.verify.Report(ps, res.BW)
		switch {
		case r.json:
			perftest.WriteJSON(stdout, perftest.ToJSON(res, ps, nil))
		case r.output != "":
			perftest.PrintOutput(stdout, ps, res, r.output)
		default:
			if first {
				if r.link.kind == "mem" {
					perftest.PrintAddresses(stdout, ps, res.Local, res.Remote)
				}
				if reports {
					perftest.PrintReportHeader(stdout, ps)
				}
				first = false
			}
			if res.BW != nil || res.Lat != nil {
				perftest.PrintReport(stdout, ps, res)
			}
			if r.reportBoth {
				perftest.PrintBothReports(stdout, ps, res)
			}
		}
		if r.watch != nil && !r.json && (res.BW != nil || res.Lat != nil) {
			if r.link.kind == "mem" {
				// Each size runs on devices of its own: count from zero.
				r.watch.reset(nil)
				r.watch.print(stdout, res.Client.Named())
			} else {
				r.watch.print(stdout, final())
			}
		}
		if r.outJSON && (res.BW != nil || res.Lat != nil) {
			if err := writeOutJSON(r, ps, res, gidIndex); err != nil {
				fmt.Fprintf(stderr, "%s: --out_json: %v\n", name, err)
			}
		}
	}
	p.OnReport = func(res *perftest.Result) { emit(res, &p) }
	err = run(emit)
	failed := err != nil
	if err != nil {
		if r.json {
			perftest.WriteJSON(stdout, perftest.ToJSON(nil, &p, err))
		}
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
	}
	// A full socket or queue is the one place a packet can be lost
	// between two gorxe on one host; RC resends, UC and UD do not.
	if unreliable := p.Connection == qp.TypeUC || p.Connection == qp.TypeUD; err != nil || unreliable {
		printLinkDrops(stderr, name, final())
	}
	if !quiet {
		if reports {
			fmt.Fprintln(stdout, "---------------------------------------------------------------------------------------")
		}
		if p.Check {
			fmt.Fprintf(stdout, " data check: %s\n", map[bool]string{true: "FAILED", false: "ok"}[failed])
		}
	}
	if r.counters {
		printCounters(stdout, final(), r.json)
	}
	if err == nil && !p.Test.IsLatency() {
		if err := r.verify.Err(); err != nil {
			fmt.Fprintln(stderr, err)
			failed = true
		}
	}
	if err == nil && r.waitDestroy > 0 {
		w := stdout
		if r.json {
			w = stderr // stdout holds JSON only
		}
		waitDestroy(ctx, w, r.waitDestroy)
	}
	if failed {
		return exitError
	}
	return exitOK
}

// waitDestroy is --wait_destroy: as perftest's destroy_ctx, it says so
// and waits the seconds given before the QPs and the device go (a signal
// ends the wait), so that the peer, or a look at the counters, still
// finds them.
func waitDestroy(ctx context.Context, w io.Writer, seconds int) {
	fmt.Fprintf(w, " Waiting %d seconds before releasing resources...\n", seconds)
	t := time.NewTimer(time.Duration(seconds) * time.Second)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func init() {
	for _, t := range perftest.Tests {
		commands = append(commands, perfCommand(t))
	}
}

// params returns the test's parameters as the command line gives them,
// with perftest's defaults filled in.
func (r *perfRun) params() (perftest.Params, error) {
	p := r.p
	if r.mtu != 0 {
		p.MTU = qp.MTUFromBytes(r.mtu)
		if p.MTU == 0 {
			return p, fmt.Errorf("-m %d: the MTU is 256, 512, 1024, 2048 or 4096", r.mtu)
		}
	}
	p.Atomic = strings.ToUpper(p.Atomic)
	p.Timeout = uint8(r.timeout)
	p.Defaults()
	return p, nil
}

// resultSize returns the message size of res, or def when it has no
// table line: on UD the size RunRemote ran may be the MTU the sides
// agreed on rather than the one asked for.
func resultSize(res *perftest.Result, def int) int {
	switch {
	case res.BW != nil:
		return res.BW.Size
	case res.Lat != nil:
		return res.Lat.Size
	}
	return def
}

// addCounters returns the sum of the counter lists, which name the same
// counters in the same order (rnic.Counters.Named); a nil list counts as
// zeros.
func addCounters(lists ...[]qp.NamedCounter) []qp.NamedCounter {
	var sum []qp.NamedCounter
	for _, l := range lists {
		if sum == nil {
			sum = append(sum, l...)
			continue
		}
		for i := range l {
			sum[i].Value += l[i].Value
		}
	}
	return sum
}

// linkDrops are the link counters that count packets the kernel dropped
// before gorxe read them, and what to say of them.
var linkDrops = []struct{ counter, says string }{
	{"udp_socket_drops", "the udp link's socket dropped %d datagrams, its receive buffer full (--socket-buffer)"},
	{"if_tx_dropped", "the tap link's TAP dropped %d frames, its queue full (gorxe read too slowly)"},
	{"if_rx_dropped", "the xdp link's interface dropped %d frames on receive (its driver's, or the AF_XDP rings full)"},
}

// printLinkDrops says on w that the link dropped packets gorxe never
// read, if its counters c count any.
func printLinkDrops(w io.Writer, name string, c []qp.NamedCounter) {
	for _, n := range c {
		for _, d := range linkDrops {
			if n.Name == d.counter && n.Value > 0 {
				fmt.Fprintf(w, "%s: "+d.says+"; UC and UD resend nothing\n", name, n.Value)
			}
		}
	}
}

// printCounters prints --counters' output: one NAME VALUE line each, as
// rxe's hw_counters directory reads with grep . or as one JSON object
// {"counters":{NAME:VALUE,...}}.
func printCounters(w io.Writer, c []qp.NamedCounter, asJSON bool) {
	if asJSON {
		m := make(map[string]uint64, len(c))
		for _, n := range c {
			m[n.Name] = n.Value
		}
		b, _ := json.Marshal(map[string]any{"counters": m})
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	for _, n := range c {
		fmt.Fprintf(w, "%s %d\n", n.Name, n.Value)
	}
}

// startCPUProfile starts writing a CPU profile to path and returns the
// function that finishes it.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func startTrace(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		trace.Stop()
		f.Close()
	}, nil
}

// writeOutJSON writes perftest's --out_json file for result res, as
// perftest rewrites it with every report.
func writeOutJSON(r *perfRun, p *perftest.Params, res *perftest.Result, gidIndex int) error {
	f, err := os.Create(cmp.Or(r.outJSONFile, perftest.DefaultOutJSONFile))
	if err != nil {
		return err
	}
	info := perftest.OutJSONInfo{Device: cmp.Or(r.device, "gorxe0"), LinkType: "Ethernet", GIDIndex: gidIndex, Server: r.testServer()}
	if err := perftest.WriteOutJSON(f, p, info, res); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

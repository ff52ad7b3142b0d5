package main

import (
	"context"
	"encoding/json"
	"flag"
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
	}[t]
	return command{
		name:    string(t),
		args:    "[-s SIZE] [-n ITERS] [-m MTU] [-a] [-e] [--check] [--json] [--link mem|udp|tap --ip ADDR[/PREFIX]] [SERVER]",
		summary: "measure " + verb + " as ib_" + string(t) + " does",
		run: func(args []string, stdout, stderr io.Writer) int {
			return runPerf(t, args, stdout, stderr)
		},
	}
}

func runPerf(t perftest.Test, args []string, stdout, stderr io.Writer) int {
	name := "gorxe " + string(t)
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	p := perftest.Params{Test: t}
	fs.IntVar(&p.Size, "s", 0, "message size in bytes (perftest: -s)")
	fs.IntVar(&p.Size, "size", 0, "same as -s")
	fs.IntVar(&p.Iters, "n", 0, "number of messages (perftest: -n)")
	fs.IntVar(&p.Iters, "iters", 0, "same as -n")
	mtu := fs.Int("m", 1024, "path MTU: 256, 512, 1024, 2048 or 4096 (perftest: -m)")
	fs.BoolVar(&p.AllSize, "a", false, "run every size from 2 bytes to 8 MiB (perftest: -a)")
	fs.IntVar(&p.TxDepth, "t", 0, "send work requests in flight (perftest: -t; 128, or 1 for latency)")
	fs.IntVar(&p.RxDepth, "r", 0, "receive work requests posted (perftest: -r; 512)")
	fs.IntVar(&p.CQMod, "Q", 0, "signal one send in this many (perftest: -Q; 100)")
	fs.StringVar(&p.Atomic, "A", perftest.FetchAndAdd, "atomic operation: FETCH_AND_ADD or CMP_AND_SWAP (perftest: -A)")
	timeout := fs.Uint("u", 14, "local ACK timeout exponent: 4.096 us x 2^u (perftest: -u)")
	fs.BoolVar(&p.Events, "e", false, "sleep on CQ events, never busy poll; write_lat sends WRITE with immediate and waits for its receive completion (perftest: -e; both sides)")
	fs.BoolVar(&p.Events, "events", false, "same as -e")
	fs.BoolVar(&p.Check, "check", false, "fill the buffers with a pattern and verify every byte (and atomic result) that arrived")
	faults := fs.String("fault", "", "faults the in-memory fabric applies to both directions, e.g. drop=0.01,drop-every=256,reorder=8,dup=0.01,corrupt=0.001,delay=100us,ecn=0.1,seed=1")
	var lf linkFlags
	lf.register(fs)
	tcpPort := fs.Int("p", 18515, "TCP port of the out-of-band exchange (perftest: -p)")
	gidIndex := fs.Int("x", 0, "GID index: which of the device's addresses to use (perftest: -x)")
	jsonOut := fs.Bool("json", false, "print each result as one JSON object")
	counters := fs.Bool("counters", false, "at exit, print the device's counters as NAME VALUE lines, named as rxe's hw_counters (gorxe; with --link mem, both devices' summed)")
	fs.IntVar(&p.Window, "window", 0, "requester window in PSNs (gorxe; default 256)")
	fs.DurationVar(&p.GiveUp, "give-up", 10*time.Second, "fail when no completion arrives for this long (gorxe; perftest waits forever)")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the run to this file, for go tool pprof (gorxe)")
	traceOut := fs.String("exectrace", "", "write a Go execution trace of the run to this file, for go tool trace (gorxe)")
	// perftest flags that name hardware, accepted and ignored as perftest
	// itself ignores what does not apply.
	fs.String("d", "", "device name (ignored)")
	fs.Bool("F", false, "do not fail on CPU frequency warnings (ignored)")
	fs.Int("i", 1, "IB port (ignored)")
	fs.Bool("R", false, "rdma_cm (not supported: gorxe uses perftest's TCP exchange)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s [flags] [SERVER]\n\nMeasures as rdma-core's ib_%s does. With --link mem both sides run in this\nprocess; with udp or tap, run it without SERVER on one host (the server) and\nwith the server's address on the other (the client), or against perftest.\n\n", name, t)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return exitOK
		}
		return exitUsage
	}
	if err := lf.validate(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitUsage
	}
	if fs.NArg() > 1 || fs.NArg() == 1 && lf.kind == "mem" {
		fmt.Fprintf(stderr, "%s: unexpected argument %q (a SERVER needs --link udp or tap)\n", name, fs.Arg(fs.NArg()-1))
		return exitUsage
	}
	p.MTU = qp.MTUFromBytes(*mtu)
	if p.MTU == 0 {
		fmt.Fprintf(stderr, "%s: -m %d: the MTU is 256, 512, 1024, 2048 or 4096\n", name, *mtu)
		return exitUsage
	}
	p.Atomic = strings.ToUpper(p.Atomic)
	p.Timeout = uint8(min(*timeout, 31))
	f, err := perftest.ParseFaults(*faults)
	if err != nil {
		fmt.Fprintf(stderr, "%s: --fault: %v\n", name, err)
		return exitUsage
	}
	p.Defaults()
	if err := p.Validate(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitUsage
	}

	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "%s: --cpuprofile: %v\n", name, err)
			return exitError
		}
		defer stopProfile()
	}

	if *traceOut != "" {
		stopTrace, err := startTrace(*traceOut)
		if err != nil {
			fmt.Fprintf(stderr, "%s: --exectrace: %v\n", name, err)
			return exitError
		}
		defer stopTrace()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if !*jsonOut {
		perftest.PrintBanner(stdout, &p, "gorxe0", lf.kind)
	}
	// run returns each size's result as it comes, and an error; final
	// returns the counters at the end.
	var run func(yield func(*perftest.Result, *perftest.Params)) error
	var final func() []qp.NamedCounter
	if lf.kind == "mem" {
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
		if *faults != "" {
			fmt.Fprintf(stderr, "%s: --fault needs --link mem\n", name)
			return exitUsage
		}
		dev, conn, err := openRemote(ctx, &lf, &p, fs.Arg(0), *tcpPort, stdout, *jsonOut)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return exitError
		}
		defer dev.Close()
		defer conn.Close()
		final = func() []qp.NamedCounter { c := dev.Counters(); return c.Named() }
		run = func(yield func(*perftest.Result, *perftest.Params)) error {
			res, err := perftest.RunRemote(ctx, p, perftest.RemoteOptions{Dev: dev, Conn: conn, GIDIndex: *gidIndex})
			for i := range res {
				ps := p
				ps.Size, ps.AllSize = p.Sizes()[i], false
				yield(&res[i], &ps)
			}
			return err
		}
	}
	first := true
	err = run(func(r *perftest.Result, ps *perftest.Params) {
		if *jsonOut {
			perftest.WriteJSON(stdout, perftest.ToJSON(r, ps, nil))
		} else {
			if first {
				perftest.PrintAddresses(stdout, r.Local, r.Remote)
				perftest.PrintHeader(stdout, t)
				first = false
			}
			if r.BW != nil || r.Lat != nil {
				perftest.PrintResult(stdout, r)
			}
		}
	})
	failed := err != nil
	if err != nil {
		if *jsonOut {
			perftest.WriteJSON(stdout, perftest.ToJSON(nil, &p, err))
		}
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
	}
	if !*jsonOut {
		fmt.Fprintln(stdout, "---------------------------------------------------------------------------------------")
		if p.Check {
			fmt.Fprintf(stdout, " data check: %s\n", map[bool]string{true: "FAILED", false: "ok"}[failed])
		}
	}
	if *counters {
		printCounters(stdout, final(), *jsonOut)
	}
	if failed {
		return exitError
	}
	return exitOK
}

func init() {
	for _, t := range perftest.Tests {
		commands = append(commands, perfCommand(t))
	}
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

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gorxe/gorxe/congestion"
	"github.com/gorxe/gorxe/link/mem/fabric"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/sim"
)

const simUsage = `usage: gorxe sim [flags] SCENARIO
       gorxe sim --list

Runs gorxe's own transport and DCQCN on a simulated RoCE fabric in virtual
time: every host is a gorxe device (real QPs, real go-back-N, real DCQCN
reaction and notification points) on a port of an output-queued switch with
RED/ECN marking, tail drop and optional PFC, all on one event queue. A run
is exact and repeatable: the same flags and seed write the same CSV, byte
for byte. It prints the scenario's figures and, with --out, writes
flows.csv, queues.csv (or sweep.csv) and plot.png (or .svg) into a
directory.

Sizes in bytes take K and M as 1000 and 1000000 (the DCQCN paper's KB),
--size as perftest's -s (K = 1024). Rates take G and M (40G, 100Mb/s).

Flags:
`

// runSim is the sim subcommand.
func runSim(args []string, stdout, stderr io.Writer) int {
	o := sim.Defaults()
	flags := flag.NewFlagSet("sim", flag.ContinueOnError)
	flags.SetOutput(stderr)
	list := flags.Bool("list", false, "list the scenarios and exit")
	out := flags.String("out", "", "write the CSV and the plot into `DIR`")
	format := flags.String("plot", "png", "the plot's format: png or svg")
	// Options that a flag sets only when given, over the scenario's
	// defaults; applied after them.
	var set []func(o *sim.Options)
	opt := func(name, help string, parse func(v string, o *sim.Options) error) {
		flags.Func(name, help, func(v string) error {
			var probe sim.Options
			if err := parse(v, &probe); err != nil {
				return err
			}
			set = append(set, func(o *sim.Options) { parse(v, o) })
			return nil
		})
	}
	opt("rate", "every link's `rate` (default 40G)", func(v string, o *sim.Options) error {
		r, err := parseRate(v)
		o.Rate = uint64(r)
		return err
	})
	opt("delay", "every link's one-way propagation `delay` (default 1us)", durationInto(func(o *sim.Options) *time.Duration { return &o.Delay }))
	opt("buffer", "each egress queue's buffer in `bytes` (default 32M)", sizeInto(1000, func(o *sim.Options) *int { return &o.Buffer }))
	opt("kmin", "RED's Kmin in `bytes` (default 5K)", sizeInto(1000, func(o *sim.Options) *int { return &o.ECN.Kmin }))
	opt("kmax", "RED's Kmax in `bytes` (default 200K)", sizeInto(1000, func(o *sim.Options) *int { return &o.ECN.Kmax }))
	opt("pmax", "RED's marking `probability` at Kmax (default 0.01)", func(v string, o *sim.Options) error {
		return parseFloat(v, &o.ECN.Pmax)
	})
	noECN := flags.Bool("no-ecn", false, "mark nothing (RED off)")
	opt("pfc", "turn PFC on with `XOFF,XON` thresholds in bytes per ingress port (parking-lot: 300K,280K); none turns it off", func(v string, o *sim.Options) error {
		if v == "none" || v == "off" {
			o.PFC = nil
			return nil
		}
		xoff, xon, ok := strings.Cut(v, ",")
		p := &fabric.PFC{}
		if !ok {
			return fmt.Errorf("want XOFF,XON, as 300K,280K")
		}
		if err := errors.Join(sizeInto(1000, func(*sim.Options) *int { return &p.XOFF })(xoff, o),
			sizeInto(1000, func(*sim.Options) *int { return &p.XON })(xon, o)); err != nil {
			return err
		}
		o.PFC = p
		return nil
	})
	opt("loss", "the `share` of packets lost leaving each egress queue: 0.004 or 1/256", func(v string, o *sim.Options) error {
		if num, den, ok := strings.Cut(v, "/"); ok {
			var n, d float64
			if err := errors.Join(parseFloat(num, &n), parseFloat(den, &d)); err != nil || d == 0 {
				return fmt.Errorf("%q is not a fraction", v)
			}
			o.Loss = n / d
			return nil
		}
		return parseFloat(v, &o.Loss)
	})
	opt("cc", "congestion control: `dcqcn` or none (default dcqcn)", func(v string, o *sim.Options) error {
		m, err := rnic.ParseCCMode(v)
		o.CC = m
		return err
	})
	profile := "paper"
	flags.Func("cc-profile", "DCQCN's parameters: `paper` (default) or connectx", func(v string) error {
		if _, err := congestion.Profile(v); err != nil {
			return err
		}
		profile = v
		return nil
	})
	var params []string
	flags.Func("cc-param", "set DCQCN parameters by NVIDIA's names over the profile, `name=value[,name=value...]` (rpg_time_reset=55,rpg_ai_rate=40); repeatable", func(v string) error {
		for _, kv := range strings.Split(v, ",") {
			name, value, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("%q: want name=value", kv)
			}
			p := congestion.Paper()
			if err := p.Set(name, value); err != nil {
				return err
			}
			params = append(params, kv)
		}
		return nil
	})
	opt("burst", "DCQCN's pacing burst in `bytes` (default 8K)", sizeInto(1024, func(o *sim.Options) *int { return &o.Burst }))
	opt("size", "each flow's WRITE size in `bytes` (default 64K, K = 1024)", sizeInto(1024, func(o *sim.Options) *int { return &o.Size }))
	opt("depth", "WRITEs each flow keeps posted (default 16)", intInto(func(o *sim.Options) *int { return &o.Depth }))
	opt("seed", "the marking and loss random numbers' `seed` (default 1)", func(v string, o *sim.Options) error {
		n, err := strconv.ParseUint(v, 0, 64)
		o.Seed = n
		return err
	})
	opt("duration", "the run's virtual `time` (default 200ms; join-leave 300ms)", durationInto(func(o *sim.Options) *time.Duration { return &o.Duration }))
	opt("settle", "what the figures skip at the start, virtual `time` (default 50ms)", durationInto(func(o *sim.Options) *time.Duration { return &o.Settle }))
	opt("sample", "the sampling `interval` (default 10us)", durationInto(func(o *sim.Options) *time.Duration { return &o.Sample }))
	opt("window", "the `length` of the windows Jain's index is taken over (default 5ms)", durationInto(func(o *sim.Options) *time.Duration { return &o.Window }))
	opt("n", "senders, for incast (default 16)", intInto(func(o *sim.Options) *int { return &o.N }))
	opt("sweep", "the `Ns` of incast-sweep, comma-separated (default 2,4,8,16,32,64)", func(v string, o *sim.Options) error {
		o.Sweep = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("%q is not a number of senders", f)
			}
			o.Sweep = append(o.Sweep, n)
		}
		return nil
	})
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), simUsage)
		flags.PrintDefaults()
		fmt.Fprintln(flags.Output(), "\nScenarios:")
		printScenarios(flags.Output())
	}
	// Flags may come before the scenario's name and after it.
	var names []string
	for {
		if err := flags.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK
			}
			return exitUsage
		}
		if flags.NArg() == 0 {
			break
		}
		names = append(names, flags.Arg(0))
		args = flags.Args()[1:]
	}
	if *list {
		printScenarios(stdout)
		return exitOK
	}
	if len(names) != 1 {
		fmt.Fprintln(stderr, "gorxe sim: name one scenario (gorxe sim --list)")
		return exitUsage
	}
	if *format != "png" && *format != "svg" {
		fmt.Fprintf(stderr, "gorxe sim: --plot %s: want png or svg\n", *format)
		return exitUsage
	}
	sc, err := sim.Lookup(names[0])
	if err != nil {
		fmt.Fprintf(stderr, "gorxe sim: %v\n", err)
		return exitUsage
	}
	if sc.Defaults != nil {
		sc.Defaults(&o)
	}
	o.Params, _ = congestion.Profile(profile)
	for _, p := range params {
		name, value, _ := strings.Cut(p, "=")
		if err := o.Params.Set(name, value); err != nil {
			fmt.Fprintf(stderr, "gorxe sim: --cc-param %s: %v\n", p, err)
			return exitUsage
		}
	}
	for _, s := range set {
		s(&o)
	}
	if *noECN {
		o.ECN = fabric.RED{}
	}
	wall := time.Now()
	r, err := sim.Run(sc.Name, o)
	if err != nil {
		fmt.Fprintf(stderr, "gorxe sim: %s: %v\n", sc.Name, err)
		return exitError
	}
	elapsed := time.Since(wall)
	fmt.Fprintln(stdout, r.Title)
	for _, l := range r.Lines {
		fmt.Fprintln(stdout, l)
	}
	if o.CC == rnic.CCDCQCN {
		fmt.Fprintf(stdout, "DCQCN: %s\n", o.Params)
	}
	simulated := o.Duration
	if r.Recorder == nil {
		simulated *= time.Duration(len(o.Sweep))
	}
	fmt.Fprintf(stdout, "simulated %v in %v of wall time: %.3f simulated seconds per wall second\n",
		simulated, elapsed.Round(time.Millisecond), simulated.Seconds()/elapsed.Seconds())
	if *out != "" {
		names, err := r.WriteFiles(*out, *format)
		if err != nil {
			fmt.Fprintf(stderr, "gorxe sim: %v\n", err)
			return exitError
		}
		for i := range names {
			names[i] = filepath.Base(names[i])
		}
		fmt.Fprintf(stdout, "wrote %s in %s\n", strings.Join(names, ", "), *out)
	}
	return exitOK
}

func printScenarios(w io.Writer) {
	for _, s := range sim.Scenarios() {
		fmt.Fprintf(w, "  %-17s %s\n", s.Name, s.Summary)
	}
}

// parseRate takes 40G, 40Gb/s, 40Gbps, 100M... (a bare number is Gb/s).
func parseRate(v string) (congestion.Rate, error) {
	r, err := congestion.ParseRate(withRateUnit(v), congestion.GbitPerSecond)
	if err == nil && r == 0 {
		err = fmt.Errorf("a zero rate")
	}
	return r, err
}

func parseFloat(v string, f *float64) error {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return fmt.Errorf("%q is not a number", v)
	}
	*f = x
	return nil
}

// sizeInto parses a size with an optional K or M suffix of unit k.
func sizeInto(k int, field func(o *sim.Options) *int) func(string, *sim.Options) error {
	return func(v string, o *sim.Options) error {
		mul := 1
		switch {
		case strings.HasSuffix(v, "K"), strings.HasSuffix(v, "k"):
			mul, v = k, v[:len(v)-1]
		case strings.HasSuffix(v, "M"), strings.HasSuffix(v, "m"):
			mul, v = k*k, v[:len(v)-1]
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a size", v)
		}
		*field(o) = n * mul
		return nil
	}
}

func intInto(field func(o *sim.Options) *int) func(string, *sim.Options) error {
	return func(v string, o *sim.Options) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%q is not a number", v)
		}
		*field(o) = n
		return nil
	}
}

func durationInto(field func(o *sim.Options) *time.Duration) func(string, *sim.Options) error {
	return func(v string, o *sim.Options) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		*field(o) = d
		return nil
	}
}

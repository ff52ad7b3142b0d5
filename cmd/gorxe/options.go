package main

// The option tables of the tools gorxe stands in for (perftest's tests,
// ibv_rc_pingpong): each row is one of the tool's options, honoured,
// accepted (it changes nothing gorxe does differently) or refused with a
// one-line reason, or one of gorxe's own, which are long options typed in
// full so that every prefix of one of the tool's still means what it
// means to the tool.

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/gorxe/gorxe/internal/getopt"
)

// disposition says what gorxe does with one of a tool's options.
type disposition int

const (
	honoured disposition = iota // gorxe does what the tool does
	accepted                    // accepted; it changes nothing gorxe does (e.g. -F, -d's real device)
	refused                     // a clear error: gorxe cannot do it (yet)
)

// errRefused marks an option gorxe refuses.
var errRefused = errors.New("not supported")

// refusal reports whether err is an option gorxe refuses, rather than a
// malformed command line.
func refusal(err error) bool { return errors.Is(err, errRefused) }

// badCommandLine reports a command line the tool named name cannot run,
// and how to see its options unless gorxe refused one of them on
// purpose, and returns the exit status of a usage error.
func badCommandLine(stderr io.Writer, name string, err error) int {
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	if !refusal(err) {
		fmt.Fprintf(stderr, "Run \"%s -h\" for the options.\n", name)
	}
	return exitUsage
}

// toolOption is one row of a tool's option table; R is the parsed command
// line its set fills in.
type toolOption[R any] struct {
	short byte
	long  string
	arg   getopt.HasArg
	what  disposition
	gorxe bool   // an option of gorxe's, not the tool's
	help  string // for -h; for a refused option, why
	set   func(r *R, v string) error
}

// parseOptions parses args against table into r and returns the operands.
// With once, an option given twice is refused, as perftest refuses it.
func parseOptions[R any](table []toolOption[R], r *R, args []string, once bool) ([]string, error) {
	seen := make(map[*toolOption[R]]bool)
	opts := make([]getopt.Option, len(table))
	for i := range table {
		o := &table[i]
		opts[i] = getopt.Option{Short: o.short, Long: o.long, Arg: o.arg, Exact: o.gorxe, Set: func(v string) error {
			if once && seen[o] && !o.gorxe {
				return fmt.Errorf("duplicated argument (perftest refuses it too)")
			}
			seen[o] = true
			if o.what == refused {
				return fmt.Errorf("%w: %s", errRefused, o.help)
			}
			return o.set(r, v)
		}}
	}
	return getopt.Parse(opts, args)
}

// optionSection prints the rows of table that keep selects, under title,
// for -h.
func optionSection[R any](w io.Writer, table []toolOption[R], title string, keep func(o *toolOption[R]) bool) {
	if !slices.ContainsFunc(table, func(o toolOption[R]) bool { return keep(&o) }) {
		return // an empty section (uc_pingpong refuses nothing)
	}
	fmt.Fprintf(w, "\n%s\n", title)
	for i := range table {
		o := &table[i]
		if !keep(o) {
			continue
		}
		name := "    "
		if o.short != 0 {
			name = "-" + string(o.short) + ", "
		}
		name += "--" + o.long
		if o.arg == getopt.RequiredArg {
			name += " VALUE"
		}
		fmt.Fprintf(w, "  %-30s %s\n", name, o.help)
	}
}

// printOptions prints table's four sections for -h: the tool's options
// gorxe honours, accepts and refuses, then gorxe's own.
func printOptions[R any](w io.Writer, table []toolOption[R], tool string) {
	optionSection(w, table, tool+" options gorxe honours:", func(o *toolOption[R]) bool { return !o.gorxe && o.what == honoured })
	optionSection(w, table, tool+" options gorxe accepts, which change nothing in gorxe:", func(o *toolOption[R]) bool { return o.what == accepted })
	optionSection(w, table, tool+" options gorxe refuses:", func(o *toolOption[R]) bool { return o.what == refused })
	optionSection(w, table, "gorxe's own options:", func(o *toolOption[R]) bool { return o.gorxe })
}

// setString, setInt and setTrue make an option's set from the field of R
// it fills: a string as given, an integer as perftest's strtol reads it
// (parseInt), true for a flag.
func setString[R any](f func(*R) *string) func(*R, string) error {
	return func(r *R, v string) error { *f(r) = v; return nil }
}

func setInt[R any](f func(*R) *int) func(*R, string) error {
	return func(r *R, v string) error { return parseInt(v, f(r)) }
}

// setIntIn is setInt for a value perftest's parser takes only in lo..hi
// (CHECK_VALUE_IN_RANGE), refused with its words: an explicit -t 0 must
// not quietly become the default depth.
func setIntIn[R any](lo, hi int, name string, f func(*R) *int) func(*R, string) error {
	return func(r *R, v string) error {
		if err := parseInt(v, f(r)); err != nil {
			return err
		}
		if n := *f(r); n < lo || n > hi {
			return fmt.Errorf("%s should be between %d and %d", name, lo, hi)
		}
		return nil
	}
}

func setTrue[R any](f func(*R) *bool) func(*R, string) error {
	return func(r *R, _ string) error { *f(r) = true; return nil }
}

// linkOptions returns gorxe's own options that choose how a tool's
// device reaches the network, filling the linkFlags lf returns.
// kindHelp and ipHelp say which links the tool takes and where its address
// comes from without --ip.
func linkOptions[R any](lf func(*R) *linkFlags, kindHelp, ipHelp string) []toolOption[R] {
	const (
		no  = getopt.NoArg
		req = getopt.RequiredArg
	)
	return []toolOption[R]{
		{0, "link", req, honoured, true, kindHelp, setString(func(r *R) *string { return &lf(r).kind })},
		{0, "ip", req, honoured, true, ipHelp, setString(func(r *R) *string { return &lf(r).ip })},
		{0, "tap", req, honoured, true, "name of the TAP device to create (tap link)", setString(func(r *R) *string { return &lf(r).tapName })},
		{0, "bridge", req, honoured, true, "attach the TAP device to this bridge (tap link)", setString(func(r *R) *string { return &lf(r).bridge })},
		{0, "dev", req, honoured, true, "the network interface the xdp link runs on; its addresses are the GIDs", setString(func(r *R) *string { return &lf(r).dev })},
		{0, "queue", req, honoured, true, "xdp link: the receive queue to bind, or all (the default): RoCE flows spread over every queue", func(r *R, v string) error { return lf(r).setQueue(v) }},
		{0, "busy-poll", req, honoured, true, "xdp link: how long the device keeps polling its rings after a batch before it sleeps, sparing the sender a wake-up per batch (default 200us where Go has two CPUs or more, else 0); 0 or off for never", func(r *R, v string) error { return lf(r).setBusyPoll(v) }},
		{0, "xdp-mode", req, honoured, true, "xdp link: where the XDP program runs: auto (driver, else generic), driver or generic", func(r *R, v string) error { return lf(r).setXDPMode(v) }},
		{0, "roce-port", req, honoured, true, "UDP port of RoCE v2 (4791)", func(r *R, v string) error {
			var n int
			if err := parseInt(v, &n); err != nil {
				return err
			}
			if n <= 0 || n > 65535 {
				return fmt.Errorf("not a UDP port")
			}
			lf(r).port = uint(n)
			return nil
		}},
		{0, "link-mtu", req, honoured, true, "the link's IP MTU (tap: 1500; udp: the interface's); path MTU 4096 needs at least 4180", setInt(func(r *R) *int { return &lf(r).mtu })},
		{0, "no-gso", no, honoured, true, "udp link: one datagram per packet, no UDP GSO", setTrue(func(r *R) *bool { return &lf(r).noGSO })},
		{0, "socket-buffer", req, honoured, true, "udp link: the socket's send and receive buffer (64M); what arrives while a smaller one is full is dropped", func(r *R, v string) error { return lf(r).setSocketBuffer(v) }},
		{0, "trace", no, honoured, true, "print every QP state change and transport event to stderr", setTrue(func(r *R) *bool { return &lf(r).trace })},
		{0, "trace-json", req, honoured, true, "write every QP state change and transport event to this file as JSON Lines", setString(func(r *R) *string { return &lf(r).traceJSON })},
		{0, "cc", req, honoured, true, ccHelp, func(r *R, v string) error { return lf(r).setCC(v) }},
		{0, "cc-profile", req, honoured, true, ccProfileHelp, func(r *R, v string) error { return lf(r).setCCProfile(v) }},
		{0, "cc-param", req, honoured, true, ccParamHelp, func(r *R, v string) error { return lf(r).setCCParam(v) }},
		{0, "line-rate", req, honoured, true, lineRateHelp, func(r *R, v string) error { return lf(r).setLineRate(v) }},
		{0, "pacing-burst", req, honoured, true, burstHelp, func(r *R, v string) error { return lf(r).setPacingBurst(v) }},
	}
}

// setPositiveDuration sets a duration given as Go writes one ("30s"),
// refusing zero and negative ones.
func setPositiveDuration[R any](f func(*R) *time.Duration) func(*R, string) error {
	return func(r *R, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("want a positive duration such as 30s")
		}
		*f(r) = d
		return nil
	}
}

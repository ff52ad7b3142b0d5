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

// Package getopt parses command lines as glibc's getopt_long does, the
// parser behind perftest, rdma-core's examples and most of the C tools an
// RDMA user types: options and operands in any order (the arguments are
// permuted, so "ib_write_bw 10.0.0.2 -s 4K" works), clusters of short
// options ("-aF"), values attached to a short option ("-D5", "-s65536") or
// following it ("-s 65536"), long options with "=" or a separate value
// ("--size=4K", "--size 4K"), and any unambiguous prefix of a long option
// ("--report_gbit" for --report_gbits). "--" ends the options; "-" alone
// is an operand.
//
// Go's flag package stops at the first operand and knows none of these
// forms, so a perftest command line that works with the C tool fails with
// it. Errors read as getopt's own messages.
package getopt

import (
	"fmt"
	"strings"
)

// HasArg says whether an option takes a value, as getopt_long's has_arg.
type HasArg int

const (
	// NoArg options take no value: "-a", "--all".
	NoArg HasArg = iota
	// RequiredArg options take one: "-s 8", "-s8", "--size 8",
	// "--size=8".
	RequiredArg
	// OptionalArg options take a value only when it is attached:
	// "-c5" or "--chk=5", never "-c 5" (as getopt's "c::").
	OptionalArg
)

// An Option is one option a command accepts.
type Option struct {
	Short byte   // the short name, 0 if none
	Long  string // the long name without "--", "" if none
	Arg   HasArg
	// Exact options are selected by their whole long name only, never by
	// a prefix: a tool's own options added to another tool's table take
	// no prefix away from it.
	Exact bool
	// Set is called for every occurrence, with the value ("" for an
	// option without one). An error it returns stops the parse.
	Set func(value string) error
}

// Name returns the option's name as a user would type it: "-s/--size".
func (o *Option) Name() string {
	switch {
	case o.Short != 0 && o.Long != "":
		return "-" + string(o.Short) + "/--" + o.Long
	case o.Short != 0:
		return "-" + string(o.Short)
	}
	return "--" + o.Long
}

// Error is a command-line error: an unknown or ambiguous option, a missing
// or unwanted value, or a value an option's Set refused.
type Error struct {
	Option string // the option as typed, e.g. "--size" or "-s"
	Msg    string
	Err    error // the error Set returned, if it was that
}

func (e *Error) Error() string { return e.Msg }

func (e *Error) Unwrap() error { return e.Err }

// Parse parses args (without the program's name) against opts, calling
// each option's Set in the order the options appear, and returns the
// operands in their order.
func Parse(opts []Option, args []string) (operands []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(operands, args[i+1:]...), nil
		case strings.HasPrefix(a, "--"):
			used, err := parseLong(opts, a[2:], args[i+1:])
			if err != nil {
				return operands, err
			}
			i += used
		case len(a) > 1 && a[0] == '-':
			used, err := parseShort(opts, a[1:], args[i+1:])
			if err != nil {
				return operands, err
			}
			i += used
		default:
			operands = append(operands, a)
		}
	}
	return operands, nil
}

// parseLong handles "--name" or "--name=value" (body is what follows
// "--"), taking a RequiredArg's value from rest when it is not attached.
// It returns how many of rest it used.
func parseLong(opts []Option, body string, rest []string) (int, error) {
	name, value, hasValue := strings.Cut(body, "=")
	o, err := lookupLong(opts, name)
	if err != nil {
		return 0, err
	}
	typed := "--" + o.Long
	switch o.Arg {
	case NoArg:
		if hasValue {
			return 0, &Error{Option: typed, Msg: fmt.Sprintf("option '%s' doesn't allow an argument", typed)}
		}
		return 0, set(o, typed, "")
	case RequiredArg:
		if hasValue {
			return 0, set(o, typed, value)
		}
		if len(rest) == 0 {
			return 0, &Error{Option: typed, Msg: fmt.Sprintf("option '%s' requires an argument", typed)}
		}
		return 1, set(o, typed, rest[0])
	}
	return 0, set(o, typed, value)
}

// lookupLong finds the option called name, or the only one whose name
// starts with name. Prefixes shared by several options are ambiguous,
// unless an option's name is exactly name.
func lookupLong(opts []Option, name string) (*Option, error) {
	var matches []*Option
	for i := range opts {
		o := &opts[i]
		if o.Long == "" {
			continue
		}
		if o.Long == name {
			return o, nil
		}
		if name != "" && !o.Exact && strings.HasPrefix(o.Long, name) {
			matches = append(matches, o)
		}
	}
	switch len(matches) {
	case 0:
		return nil, &Error{Option: "--" + name, Msg: fmt.Sprintf("unrecognized option '--%s'", name)}
	case 1:
		return matches[0], nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "option '--%s' is ambiguous; possibilities:", name)
	for _, o := range matches {
		fmt.Fprintf(&b, " '--%s'", o.Long)
	}
	return nil, &Error{Option: "--" + name, Msg: b.String()}
}

// parseShort handles a cluster of short options (body is what follows
// "-"): each takes no value, until one that does takes the rest of the
// cluster, or, if it is the last, the next argument.
func parseShort(opts []Option, body string, rest []string) (int, error) {
	for j := 0; j < len(body); j++ {
		c := body[j]
		o := lookupShort(opts, c)
		typed := "-" + string(c)
		if o == nil {
			return 0, &Error{Option: typed, Msg: fmt.Sprintf("invalid option -- '%c'", c)}
		}
		attached := body[j+1:]
		switch o.Arg {
		case NoArg:
			if err := set(o, typed, ""); err != nil {
				return 0, err
			}
			continue
		case OptionalArg:
			return 0, set(o, typed, attached)
		}
		if attached != "" {
			return 0, set(o, typed, attached)
		}
		if len(rest) == 0 {
			return 0, &Error{Option: typed, Msg: fmt.Sprintf("option requires an argument -- '%c'", c)}
		}
		return 1, set(o, typed, rest[0])
	}
	return 0, nil
}

func lookupShort(opts []Option, c byte) *Option {
	for i := range opts {
		if opts[i].Short == c {
			return &opts[i]
		}
	}
	return nil
}

// set calls o.Set, wrapping its error with the option's name.
func set(o *Option, typed, value string) error {
	if o.Set == nil {
		return nil
	}
	if err := o.Set(value); err != nil {
		msg := fmt.Sprintf("%s %s: %v", typed, value, err)
		if o.Arg == NoArg {
			msg = fmt.Sprintf("%s: %v", typed, err)
		}
		return &Error{Option: typed, Msg: msg, Err: err}
	}
	return nil
}

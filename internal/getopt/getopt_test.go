package getopt

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// record returns options that append "NAME=VALUE" to *got for each
// occurrence, in the shape of perftest's table (a few of its options).
func record(got *[]string) []Option {
	opt := func(short byte, long string, arg HasArg) Option {
		name := long
		if name == "" {
			name = string(short)
		}
		return Option{Short: short, Long: long, Arg: arg, Set: func(v string) error {
			*got = append(*got, name+"="+v)
			return nil
		}}
	}
	return []Option{
		opt('s', "size", RequiredArg),
		opt('D', "duration", RequiredArg),
		opt('a', "all", NoArg),
		opt('F', "CPU-freq", NoArg),
		opt('b', "bidirectional", NoArg),
		opt('d', "ib-dev", RequiredArg),
		opt('c', "chk", OptionalArg),
		opt(0, "report_gbits", NoArg),
		opt(0, "report-both", NoArg),
		opt(0, "report-counters", RequiredArg),
		opt(0, "run_infinitely", NoArg),
		opt(0, "ipv6", NoArg),
		opt(0, "ipv6-addr", NoArg),
		opt(0, "ip", RequiredArg),
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args     string
		want     string // the Set calls, space-separated
		operands string
	}{
		{"-s 4096", "size=4096", ""},
		{"-s4096", "size=4096", ""},
		{"--size 4096", "size=4096", ""},
		{"--size=4096", "size=4096", ""},
		{"--size=", "size=", ""},
		{"-aF", "all= CPU-freq=", ""},
		{"-aFs 8", "all= CPU-freq= size=8", ""},
		{"-aFs8", "all= CPU-freq= size=8", ""},
		{"-D5", "duration=5", ""},
		{"10.0.0.2 -d mlx5_0 --report_gbits", "ib-dev=mlx5_0 report_gbits=", "10.0.0.2"},
		{"-d rxe0 host -F", "ib-dev=rxe0 CPU-freq=", "host"},
		{"--report_gbit", "report_gbits=", ""},
		{"--report_", "report_gbits=", ""},
		{"--run", "run_infinitely=", ""},
		{"--bi", "bidirectional=", ""},
		{"--ip 10.0.0.1", "ip=10.0.0.1", ""}, // exact beats the prefix of ipv6
		{"--ipv6", "ipv6=", ""},
		{"-s -1", "size=-1", ""}, // a required value is taken as it comes
		{"-- -a", "", "-a"},
		{"- -a", "all=", "-"},
		{"a b -a c", "all=", "a b c"},
		{"-c", "chk=", ""},
		{"-c5", "chk=5", ""},
		{"-c 5", "chk=", "5"}, // an optional value must be attached
		{"--chk=5", "chk=5", ""},
		{"-s 1 -s 2", "size=1 size=2", ""}, // repeats are the caller's to refuse
	} {
		t.Run(tc.args, func(t *testing.T) {
			var got []string
			ops, err := Parse(record(&got), strings.Fields(tc.args))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Errorf("set %q, want %q", g, tc.want)
			}
			if g := strings.Join(ops, " "); g != tc.operands {
				t.Errorf("operands %q, want %q", g, tc.operands)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"-z", "invalid option -- 'z'"},
		{"-az", "invalid option -- 'z'"},
		{"-s", "option requires an argument -- 's'"},
		{"--size", "option '--size' requires an argument"},
		{"--all=1", "option '--all' doesn't allow an argument"},
		{"--nope", "unrecognized option '--nope'"},
		{"--report", "option '--report' is ambiguous; possibilities: '--report_gbits' '--report-both' '--report-counters'"},
		{"--ipv", "option '--ipv' is ambiguous; possibilities: '--ipv6' '--ipv6-addr'"},
		{"--", ""},
	} {
		t.Run(tc.args, func(t *testing.T) {
			var got []string
			_, err := Parse(record(&got), strings.Fields(tc.args))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Error() != tc.want {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// A value Set refuses stops the parse, names the option, and keeps the
// cause for errors.Is.
func TestSetError(t *testing.T) {
	bad := errors.New("not a size")
	var seen []string
	opts := []Option{
		{Short: 's', Long: "size", Arg: RequiredArg, Set: func(v string) error {
			seen = append(seen, v)
			return bad
		}},
		{Short: 'a', Set: func(string) error { seen = append(seen, "a"); return nil }},
	}
	_, err := Parse(opts, []string{"--si=x", "-a"})
	if !errors.Is(err, bad) || err.Error() != "--size x: not a size" {
		t.Fatalf("error %v", err)
	}
	if !slices.Equal(seen, []string{"x"}) {
		t.Errorf("Set calls %v: the parse went on after an error", seen)
	}
}

func TestExact(t *testing.T) {
	var got []string
	opts := append(record(&got), Option{Long: "give-up", Arg: RequiredArg, Exact: true, Set: func(v string) error {
		got = append(got, "give-up="+v)
		return nil
	}})
	if _, err := Parse(opts, []string{"--give-up=3s", "--give-up", "4s"}); err != nil || strings.Join(got, " ") != "give-up=3s give-up=4s" {
		t.Fatalf("exact name: %v %v", got, err)
	}
	if _, err := Parse(opts, []string{"--give"}); err == nil || err.Error() != "unrecognized option '--give'" {
		t.Errorf("a prefix of an exact option: %v", err)
	}
}

func TestName(t *testing.T) {
	for _, tc := range []struct {
		o    Option
		want string
	}{
		{Option{Short: 's', Long: "size"}, "-s/--size"},
		{Option{Short: 's'}, "-s"},
		{Option{Long: "size"}, "--size"},
	} {
		if got := tc.o.Name(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.o, got, tc.want)
		}
	}
}

func ExampleParse() {
	var size, server string
	var all bool
	opts := []Option{
		{Short: 's', Long: "size", Arg: RequiredArg, Set: func(v string) error { size = v; return nil }},
		{Short: 'a', Long: "all", Set: func(string) error { all = true; return nil }},
	}
	ops, err := Parse(opts, []string{"10.0.0.2", "-as4K"})
	if err != nil {
		fmt.Println(err)
		return
	}
	server = ops[0]
	fmt.Println(server, size, all)
	// Output: 10.0.0.2 4K true
}

// A refused option without a value reads "-a: why", not "-a : why".
func TestSetErrorNoValue(t *testing.T) {
	opts := []Option{{Short: 'a', Long: "all", Set: func(string) error { return errors.New("no") }}}
	for _, args := range [][]string{{"-a"}, {"--all"}} {
		_, err := Parse(opts, args)
		if want := args[0] + ": no"; err == nil || err.Error() != want {
			t.Errorf("%v: error %v, want %q", args, err, want)
		}
	}
}

// Command instrdiff prints the instructions a run spent per unit of work
// (a round trip, a message), in total and by function, from two callgrind
// profiles of the same command that differ only in how much work it did:
// what the larger run spent beyond the smaller, divided by the units it
// did beyond it. Start-up, the exchange and the report cancel out. It
// reads the summaries callgrind_annotate prints (--auto=no), so that it
// need not parse callgrind's own format. test/bench/instr.sh runs it.
//
//	instrdiff -units 4000 -top 25 small.annotate large.annotate
package main

import (
	"bufio"
	"cmp"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	units := flag.Float64("units", 0, "the units of work the larger run did beyond the smaller")
	top := flag.Int("top", 25, "the functions to list")
	flag.Parse()
	if flag.NArg() != 2 || *units <= 0 {
		fmt.Fprintln(os.Stderr, "usage: instrdiff -units N [-top K] SMALL LARGE (callgrind_annotate --auto=no outputs)")
		os.Exit(2)
	}
	var profiles [2]map[string]int64
	for i, name := range flag.Args() {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "instrdiff:", err)
			os.Exit(1)
		}
		profiles[i], err = parse(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "instrdiff: %s: %v\n", name, err)
			os.Exit(1)
		}
	}
	total, rows := diff(profiles[0], profiles[1], *units)
	fmt.Printf("%.0f instructions per unit\n", total)
	for _, r := range rows[:min(*top, len(rows))] {
		fmt.Printf("%8.0f  %s\n", r.per, r.fn)
	}
}

// line is a row of callgrind_annotate's function summary:
// "  1,234,567 ( 2.57%)  /path/file.go:pkg.Func [/bin]".
var line = regexp.MustCompile(`^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.+?)(?:\s+\[[^\]]*\])?$`)

// parse returns the instructions of each function of a summary, by
// function name (the file left out), and the program's total as
// "PROGRAM TOTALS".
func parse(r io.Reader) (map[string]int64, error) {
	m := make(map[string]int64)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		g := line.FindStringSubmatch(sc.Text())
		if g == nil {
			continue
		}
		n, err := strconv.ParseInt(strings.ReplaceAll(g[1], ",", ""), 10, 64)
		if err != nil {
			return nil, err
		}
		fn := g[2]
		if i := strings.LastIndex(fn, ".go:"); i >= 0 {
			fn = fn[i+len(".go:"):]
		} else if i := strings.Index(fn, ":"); i >= 0 && !strings.HasPrefix(fn, "PROGRAM") {
			fn = fn[i+1:]
		}
		m[fn] += n
	}
	if _, ok := m["PROGRAM TOTALS"]; !ok {
		return nil, fmt.Errorf("no PROGRAM TOTALS line: not a callgrind_annotate summary")
	}
	return m, sc.Err()
}

type row struct {
	fn  string
	per float64
}

// diff returns the total per unit, and each function's instructions per
// unit, most first.
func diff(small, large map[string]int64, units float64) (float64, []row) {
	total := float64(large["PROGRAM TOTALS"]-small["PROGRAM TOTALS"]) / units
	var rows []row
	for fn, n := range large {
		if fn == "PROGRAM TOTALS" {
			continue
		}
		if per := float64(n-small[fn]) / units; per >= 0.5 {
			rows = append(rows, row{fn, per})
		}
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Or(cmp.Compare(b.per, a.per), strings.Compare(a.fn, b.fn)) })
	return total, rows
}

package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// counterWatch is perftest's -W (--report-counters): a list of the
// port's counter files, relative to
// /sys/class/infiniband/DEV/ports/PORT/, whose growth perftest prints
// after each report line ("\tNAME=DELTA", then an empty line). gorxe's
// device has rxe's hw_counters (and its own), so the names it takes are
// hw_counters/NAME for the names --counters prints.
type counterWatch struct {
	names []string // as given, hw_counters/NAME
	prev  map[string]uint64
}

// parseCounterWatch reads -W's comma-separated list. A name gorxe's
// device has no counter for is refused, as perftest refuses a file it
// cannot open.
func parseCounterWatch(list string) (*counterWatch, error) {
	known := map[string]bool{}
	var all []string
	var c rnic.Counters
	for _, n := range c.Named() {
		known[n.Name] = true
		all = append(all, n.Name)
	}
	w := &counterWatch{}
	for _, name := range strings.Split(list, ",") {
		if n, ok := strings.CutPrefix(name, "hw_counters/"); !ok || !known[n] {
			return nil, fmt.Errorf("Unable to access performance counters: %q (gorxe's are hw_counters/NAME, NAME one of %s)", name, strings.Join(all, ", "))
		}
		w.names = append(w.names, name)
	}
	return w, nil
}

// reset takes now as the values the next print counts from.
func (w *counterWatch) reset(now []qp.NamedCounter) { w.prev = byPath(now) }

// byPath returns the counters' values by their -W names, hw_counters/NAME.
func byPath(counters []qp.NamedCounter) map[string]uint64 {
	m := make(map[string]uint64, len(counters))
	for _, n := range counters {
		m["hw_counters/"+n.Name] = n.Value
	}
	return m
}

// print prints how much each watched counter grew since the last print
// (or reset), as perftest's counters_print, and takes now as the new
// base.
func (w *counterWatch) print(out io.Writer, now []qp.NamedCounter) {
	cur := byPath(now)
	for _, name := range w.names {
		fmt.Fprintf(out, "\t%s=%d\n", name, cur[name]-w.prev[name])
	}
	fmt.Fprintln(out)
	w.prev = cur
}

package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// counterWatch is perftest's -W (--report-counters): a list of the
// port's counter files, relative to
// /sys/class/infiniband/DEV/ports/PORT/, whose growth perftest prints
// after each report line ("\tNAME=DELTA", then an empty line). gorxe's
// device has rxe's hw_counters (and its own, and its link's), so the
// names it takes are hw_counters/NAME for the names --counters prints.
type counterWatch struct {
	names []string // as given, hw_counters/NAME
	prev  map[string]uint64
}

// linkCounterPrefixes begin the names of the links' own counters
// (link.Counterer), which a device has only once its link is open.
var linkCounterPrefixes = []string{"udp_", "tap_", "xdp_", "xsk_", "if_"}

// parseCounterWatch reads -W's comma-separated list. A name gorxe's
// device has no counter for is refused, as perftest refuses a file it
// cannot open; a link's counter waits for check, once the link is open.
func parseCounterWatch(list string) (*counterWatch, error) {
	w := &counterWatch{}
	for _, name := range strings.Split(list, ",") {
		n, ok := strings.CutPrefix(name, "hw_counters/")
		if !ok || !deviceCounter(n) && !slices.ContainsFunc(linkCounterPrefixes, func(p string) bool { return strings.HasPrefix(n, p) }) {
			return nil, unknownCounter(name, nil)
		}
		w.names = append(w.names, name)
	}
	return w, nil
}

// check refuses a watched name that is neither the device's counter nor
// one of now, the counters of a device whose link is open (nil for the
// mem link, which has none of its own).
func (w *counterWatch) check(now []qp.NamedCounter) error {
	have := byPath(now)
	for _, name := range w.names {
		if _, ok := have[name]; !ok && !deviceCounter(strings.TrimPrefix(name, "hw_counters/")) {
			return unknownCounter(name, now)
		}
	}
	return nil
}

// deviceCounter reports whether every device has a counter called name.
func deviceCounter(name string) bool {
	var c rnic.Counters
	return slices.ContainsFunc(c.Named(), func(n qp.NamedCounter) bool { return n.Name == name })
}

// unknownCounter is perftest's refusal of a counter file it cannot open,
// with the names gorxe has: the device's, and the link's of now.
func unknownCounter(name string, now []qp.NamedCounter) error {
	var all []string
	var c rnic.Counters
	for _, n := range append(c.Named(), now...) {
		if !slices.Contains(all, n.Name) {
			all = append(all, n.Name)
		}
	}
	return fmt.Errorf("Unable to access performance counters: %q (gorxe's are hw_counters/NAME, NAME one of %s)", name, strings.Join(all, ", "))
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

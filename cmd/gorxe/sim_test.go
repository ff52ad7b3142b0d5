package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSim runs a short incast from the command line, flags on both sides
// of the scenario's name, twice: it prints its figures, writes its CSV
// and plot, and the same seed writes the same files byte for byte.
func TestSim(t *testing.T) {
	var outs [2]string
	for i := range outs {
		outs[i] = t.TempDir()
		var stdout, stderr bytes.Buffer
		args := []string{"sim", "--duration", "10ms", "--settle", "2ms", "--window", "2ms", "--out", outs[i], "--plot", "svg",
			"incast", "--n", "3", "--rate", "10G", "--kmax", "100K", "--cc-param", "rpg_ai_rate=20,rpg_hai_rate=100"}
		if code := run(args, &stdout, &stderr); code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		got := stdout.String()
		for _, want := range []string{"3:1 incast: 10 Gb/s links", "RED 5000/100000/0.01", "bottleneck:", "Jain's index over 2ms windows",
			"rpg_ai_rate=20 rpg_hai_rate=100 ", "simulated 10ms in", "wrote flows.csv, queues.csv, plot.svg"} {
			if !strings.Contains(got, want) {
				t.Errorf("no %q in:\n%s", want, got)
			}
		}
	}
	for _, name := range []string{"flows.csv", "queues.csv", "plot.svg"} {
		a, err := os.ReadFile(filepath.Join(outs[0], name))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(outs[1], name))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s: %d and %d bytes, not the same", name, len(a), len(b))
		}
	}
}

// TestSimErrors: bad command lines say what is wrong and exit 2.
func TestSimErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sim"}, "name one scenario"},
		{[]string{"sim", "a", "b"}, "name one scenario"},
		{[]string{"sim", "nonesuch"}, "no scenario \"nonesuch\"; there are two-flows"},
		{[]string{"sim", "--rate", "fast", "incast"}, "invalid value \"fast\" for flag -rate"},
		{[]string{"sim", "--pfc", "300K", "incast"}, "want XOFF,XON"},
		{[]string{"sim", "--loss", "1/0", "incast"}, "not a fraction"},
		{[]string{"sim", "--cc", "reno", "incast"}, "want dcqcn or none"},
		{[]string{"sim", "--cc-param", "rpg_bogus=1", "incast"}, "no parameter"},
		{[]string{"sim", "--plot", "gif", "incast"}, "want png or svg"},
		{[]string{"sim", "--sweep", "2,x", "incast-sweep"}, "not a number of senders"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(c.args, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"sim", "--n", "0", "incast"}, &stdout, &stderr); code != exitError || !strings.Contains(stderr.String(), "senders") {
		t.Errorf("--n 0: exit %d, %q", code, stderr.String())
	}
}

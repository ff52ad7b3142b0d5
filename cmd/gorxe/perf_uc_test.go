package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestPerfUC runs the four tests perftest runs on UC with -c UC on the
// in-memory link, every byte checked, the banner saying UC; and send_bw
// over a lossy fabric, which ends at once with what arrived.
func TestPerfUC(t *testing.T) {
	for _, test := range []string{"write_bw", "send_bw", "write_lat", "send_lat"} {
		var out, errOut bytes.Buffer
		args := []string{test, "-c", "UC", "--link", "mem", "-n", "100", "--check"}
		if code := run(args, &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut.String())
		}
		if !strings.Contains(out.String(), " Connection type : UC") || !strings.Contains(out.String(), "data check: ok") {
			t.Errorf("%v printed\n%s", args, out.String())
		}
	}
	var out, errOut bytes.Buffer
	args := []string{"send_bw", "-c", "UC", "--link", "mem", "-n", "1000", "-s", "4096", "--fault", "drop=0.01,seed=3", "--json"}
	start := time.Now()
	if code := run(args, &out, &errOut); code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errOut.String())
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("%v took %v", args, el)
	}
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil || m["iters"] != float64(1000) {
		t.Errorf("%v: %v, %v", args, m, err)
	}
}

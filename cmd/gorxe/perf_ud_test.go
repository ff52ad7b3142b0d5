package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// TestPerfUD runs send_bw and send_lat -c UD on the in-memory link, every
// byte checked, the banner saying UD. send_bw's default size, 64 KiB, is
// cut to the MTU with perftest's note; a larger -s is refused with its
// words; the other tests refuse UD.
func TestPerfUD(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		size     string
		wantNote bool
	}{
		{[]string{"send_bw", "-n", "100"}, "1024", true},
		{[]string{"send_bw", "-n", "100", "-s", "1000", "-q", "2"}, "1000", false},
		{[]string{"send_lat", "-n", "100", "-s", "1024"}, "1024", false},
	} {
		var out, errOut bytes.Buffer
		args := append(slices.Clone(tc.args), "-c", "UD", "--link", "mem", "--check")
		if code := run(args, &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut.String())
		}
		if !strings.Contains(out.String(), " Connection type : UD") || !strings.Contains(out.String(), "data check: ok") ||
			!strings.Contains(out.String(), "\n "+tc.size+" ") {
			t.Errorf("%v printed\n%s", args, out.String())
		}
		if note := " Max msg size in UD is MTU 1024\n Changing to this MTU\n"; tc.wantNote != (errOut.String() == note) {
			t.Errorf("%v: stderr %q", args, errOut.String())
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"send_bw", "-c", "UD", "--link", "mem", "-s", "2048"}, exitError, "Max message size in UD cannot be greater than MTU"},
		{[]string{"write_bw", "-c", "UD"}, exitUsage, "UD connection only possible in SEND verb"},
		{[]string{"atomic_lat", "-c", "UD"}, exitUsage, "UD connection only possible in SEND verb"},
	} {
		var out, errOut bytes.Buffer
		if code := run(tc.args, &out, &errOut); code != tc.code || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut.String(), tc.code, tc.want)
		}
	}
}

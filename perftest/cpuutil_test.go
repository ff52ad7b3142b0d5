package perftest

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorxe/gorxe/link/mem"
)

// withProcStat points readCPUStat at a file of the test's, holding line.
func withProcStat(t *testing.T, line string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stat")
	if err := os.WriteFile(path, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	old := procStat
	procStat = path
	t.Cleanup(func() { procStat = old })
	return path
}

func TestCPUStat(t *testing.T) {
	withProcStat(t, "cpu  100 5 40 900 7 0 3 0 0 0\ncpu0 50 2 20 450 3 0 1 0 0 0\n")
	from := readCPUStat()
	if from != (cpuStat{user: 100, idle: 900, ok: true}) {
		t.Fatalf("read %+v", from)
	}
	to := cpuStat{user: 400, idle: 1000, ok: true}
	if got := cpuUtil(from, to); math.Abs(got-75) > 1e-9 {
		t.Errorf("300 ticks of user time and 100 idle: %v%%, want 75", got)
	}
	for _, c := range []struct{ from, to cpuStat }{
		{from, from},    // no time passed
		{cpuStat{}, to}, // a reading failed
		{to, from},      // counters went back
		{from, cpuStat{user: 99, idle: 2000, ok: true}},
	} {
		if got := cpuUtil(c.from, c.to); got != 0 {
			t.Errorf("%+v to %+v: %v, want 0", c.from, c.to, got)
		}
	}
	for _, bad := range []string{"", "intr 5 6\n", "cpu 1 2\n", "cpu a b c d\n"} {
		withProcStat(t, bad)
		if s := readCPUStat(); s.ok {
			t.Errorf("%q read as %+v", bad, s)
		}
	}
	procStat = filepath.Join(t.TempDir(), "none")
	if s := readCPUStat(); s.ok {
		t.Errorf("a missing file read as %+v", s)
	}
}

// TestCPUUtilTimedRun: with CPUUtil a timed run reads the CPU times as its
// sample window opens and closes, and reports the use between them, in
// the table's extra column and in --out_json.
func TestCPUUtilTimedRun(t *testing.T) {
	for _, tt := range []Test{WriteBW, SendLat} {
		t.Run(string(tt), func(t *testing.T) {
			path := withProcStat(t, "cpu  100 0 0 1000\n")
			synctest.Test(t, func(t *testing.T) {
				// The window is 0.5 s to 1.5 s: at 1 s, 200 ticks of user
				// time and 100 idle have passed.
				go func() {
					time.Sleep(time.Second)
					os.WriteFile(path, []byte("cpu  300 0 0 1100\n"), 0o644)
				}()
				p := timedParams(tt)
				p.CPUUtil = true
				res := runLocal(t, p, mem.Faults{Delay: delay})
				got := 0.0
				if res.BW != nil {
					got = res.BW.CPUUtil
				} else {
					got = res.Lat.CPUUtil
				}
				if math.Abs(got-200.0/3) > 1e-9 {
					t.Fatalf("CPU use %v, want 66.67", got)
				}
				p.Defaults()
				var out bytes.Buffer
				PrintReportHeader(&out, &p)
				PrintReport(&out, &p, &res)
				lines := strings.Split(out.String(), "\n")
				if !strings.HasSuffix(lines[0], "    CPU_Util[%]") || !strings.HasSuffix(lines[1], "\t    66.67") {
					t.Errorf("table:\n%s", out.String())
				}
				out.Reset()
				if err := WriteOutJSON(&out, &p, OutJSONInfo{}, &res); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(out.String(), ",\n\"CPU_util\": 66.67\n}") {
					t.Errorf("--out_json:\n%s", out.String())
				}
			})
		})
	}
	// Without -D there is no column.
	p := Params{Test: WriteBW, CPUUtil: true}
	var out bytes.Buffer
	PrintReportHeader(&out, &p)
	if strings.Contains(out.String(), "CPU_Util") {
		t.Errorf("a counted run's header: %q", out.String())
	}
}

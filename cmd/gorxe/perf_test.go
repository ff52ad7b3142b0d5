package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPerfJSON(t *testing.T) {
	for _, c := range []struct {
		args []string
		keys []string
	}{
		{[]string{"write_bw", "--link", "mem", "-n", "100", "-s", "4096", "--check", "--json"}, []string{"bw_avg_MBps", "bw_peak_MBps", "msg_rate_Mpps"}},
		{[]string{"read_bw", "--link", "mem", "-n", "100", "-s", "20000", "-m", "4096", "--check", "--json", "--fault", "drop=0.02"}, []string{"bw_avg_MBps"}},
		{[]string{"send_bw", "--link", "mem", "-n", "100", "-s", "8192", "--check", "--json", "--fault", "reorder=4"}, []string{"bw_avg_MBps"}},
		{[]string{"atomic_bw", "--link", "mem", "-n", "100", "-A", "CMP_AND_SWAP", "--check", "--json"}, []string{"bw_avg_MBps"}},
		{[]string{"write_lat", "--link", "mem", "-n", "100", "--check", "--json"}, []string{"t_typical_us", "p99_us", "p99_9_us"}},
		{[]string{"read_lat", "--link", "mem", "-n", "100", "-s", "64", "--check", "--json"}, []string{"t_avg_us"}},
		{[]string{"send_lat", "--link", "mem", "-n", "100", "--check", "--json"}, []string{"t_min_us", "t_max_us"}},
	} {
		var out, errOut bytes.Buffer
		if code := run(c.args, &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, errOut.String())
		}
		var m map[string]any
		if err := json.Unmarshal(out.Bytes(), &m); err != nil {
			t.Fatalf("%v: %v in %q", c.args, err, out.String())
		}
		for _, k := range append(c.keys, "test", "size", "iters") {
			if _, ok := m[k]; !ok {
				t.Errorf("%v: no %q in %v", c.args, k, m)
			}
		}
		if m["check"] != "ok" || m["test"] != c.args[0] || m["iters"] != float64(100) {
			t.Errorf("%v: %v", c.args, m)
		}
		// Every test sends at least a packet a message; the allocations
		// per packet are the two counts' quotient.
		allocs, _ := m["allocs"].(float64)
		packets, _ := m["packets"].(float64)
		if per, _ := m["allocs_per_packet"].(float64); packets < 100 || per != allocs/packets {
			t.Errorf("%v: allocs %v, packets %v, allocs_per_packet %v", c.args, m["allocs"], m["packets"], m["allocs_per_packet"])
		}
	}
}

func TestPerfTable(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"write_bw", "--link", "mem", "-n", "5", "-a", "--check", "-d", "rxe0", "-x", "1", "-F"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	s := out.String()
	for _, want := range []string{"RDMA_Write BW Test", "#bytes     #iterations    BW peak[MB/sec]", " local address: LID 0000 QPN", " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:00:00:01", " 8388608    5 ", "data check: ok"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if n := strings.Count(s, "\n 2 ") + strings.Count(s, "\n 4 "); n != 2 {
		t.Errorf("-a should start at 2 bytes:\n%s", s)
	}
}

// TestPerfWaitDestroy: --wait_destroy N says so after the results, in
// perftest's words, and waits N seconds before the command ends.
func TestPerfWaitDestroy(t *testing.T) {
	var out, errOut bytes.Buffer
	start := time.Now()
	if code := run([]string{"send_lat", "--link", "mem", "-n", "5", "--wait_destroy", "1"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	const line = "---------------------------------------------------------------------------------------\n Waiting 1 seconds before releasing resources...\n"
	if !strings.HasSuffix(out.String(), line) {
		t.Errorf("output does not end with %q:\n%s", line, out.String())
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("the command ended %v after it began, before its second's wait", d)
	}
}

// TestPerfCPUProfile: --cpuprofile leaves a profile behind, and a
// path it cannot create is an error before the test runs.
func TestPerfCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	var out, errOut bytes.Buffer
	if code := run([]string{"write_bw", "--link", "mem", "-n", "2000", "--json", "--cpuprofile", path}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A profile is a gzipped protocol buffer.
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("the profile is not gzipped: %v", err)
	}
	if b, err := io.ReadAll(zr); err != nil || len(b) == 0 {
		t.Fatalf("the profile holds %d bytes: %v", len(b), err)
	}
	errOut.Reset()
	bad := filepath.Join(t.TempDir(), "no", "such", "dir", "cpu.pprof")
	if code := run([]string{"write_bw", "--link", "mem", "-n", "10", "--cpuprofile", bad}, &out, &errOut); code != exitError || !strings.Contains(errOut.String(), "--cpuprofile") {
		t.Errorf("an uncreatable profile: exit %d, stderr %q", code, errOut.String())
	}
}

// TestPerfGivesUp: when the network drops everything, the test fails with
// exit status 1 and says why, instead of hanging.
func TestPerfGivesUp(t *testing.T) {
	for _, test := range []string{"write_bw", "send_bw", "write_lat", "read_lat"} {
		var out, errOut bytes.Buffer
		code := run([]string{test, "--link", "mem", "-n", "10", "--fault", "drop=1", "--give-up", "300ms", "--json"}, &out, &errOut)
		if code != exitError || !strings.Contains(errOut.String(), "no progress") {
			t.Errorf("%s: exit %d, stderr %q", test, code, errOut.String())
		}
	}
}

// TestPerfCounters: --counters prints the devices' counters at exit, as
// lines and as a JSON object after the result's.
func TestPerfCounters(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"send_lat", "--link", "mem", "-n", "100", "--counters"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	// 100 SENDs each way and their ACKs, on two devices: at least 400
	// packets (a loaded machine may make a tail-loss probe fire, a
	// duplicate more), 200 SENDs retired and 200 receives completed
	// (rxe's rdma_sends and rdma_recvs), no bad ICRC.
	got := map[string]uint64{}
	for _, line := range strings.Split(out.String(), "\n") {
		var name string
		var v uint64
		if n, _ := fmt.Sscanf(line, "%s %d", &name, &v); n == 2 {
			got[name] = v
		}
	}
	for _, name := range []string{"sent_pkts", "rdma_sends", "rdma_recvs", "tail_probes", "retransmit_timeouts", "icrc_errors", "rp_cnp_ignored", "pkey_violations"} {
		if _, ok := got[name]; !ok {
			t.Errorf("output lacks counter %s:\n%s", name, out.String())
		}
	}
	if got["sent_pkts"] < 400 || got["rdma_sends"] != 200 || got["rdma_recvs"] != 200 || got["icrc_errors"] != 0 {
		t.Errorf("sent_pkts %d (want at least 400), rdma_sends %d and rdma_recvs %d (want 200), icrc_errors %d (want 0)",
			got["sent_pkts"], got["rdma_sends"], got["rdma_recvs"], got["icrc_errors"])
	}
	out.Reset()
	if code := run([]string{"send_lat", "--link", "mem", "-n", "100", "--counters", "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var m struct{ Counters map[string]uint64 }
	if len(lines) != 2 || json.Unmarshal([]byte(lines[1]), &m) != nil || m.Counters["rdma_sends"] != 200 {
		t.Errorf("want a result line and a counters line with rdma_sends 200, got:\n%s", out.String())
	}
}

// TestPerfECN: write_bw over a fabric that marks 5% of the packets CE
// completes and checks every byte. With DCQCN (the default) the server's
// notification point answers marks with CNPs, which the client's reaction
// point handles, every one; with --cc none the marks are counted and no
// CNP is sent.
func TestPerfECN(t *testing.T) {
	for _, cc := range []string{"dcqcn", "none"} {
		var out, errOut bytes.Buffer
		args := []string{"write_bw", "--link", "mem", "-s", "65536", "-n", "100", "--check", "--fault", "ecn=0.05,seed=5", "--counters", "--cc", cc}
		if code := run(args, &out, &errOut); code != 0 {
			t.Fatalf("--cc %s: exit %d: %s", cc, code, errOut.String())
		}
		got := map[string]uint64{}
		for _, line := range strings.Split(out.String(), "\n") {
			var name string
			var v uint64
			if n, _ := fmt.Sscanf(line, "%s %d", &name, &v); n == 2 {
				got[name] = v
			}
		}
		marked, sent, handled, ignored := got["np_ecn_marked_roce_packets"], got["np_cnp_sent"], got["rp_cnp_handled"], got["rp_cnp_ignored"]
		if !strings.Contains(out.String(), "data check: ok") || marked == 0 {
			t.Fatalf("--cc %s: no data check, or no marks:\n%s", cc, out.String())
		}
		if cc == "dcqcn" && (sent == 0 || handled != sent || ignored != 0 || got["rp_rate_decreases"] == 0) ||
			cc == "none" && (sent != 0 || handled != 0) {
			t.Errorf("--cc %s: %d marked, %d CNPs sent, %d handled, %d ignored\n%s", cc, marked, sent, handled, ignored, out.String())
		}
	}
}

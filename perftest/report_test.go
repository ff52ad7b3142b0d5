package perftest

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// golden returns testdata/report/name.txt, which testdata/report/golden.c
// printed with perftest's own format strings.
func golden(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/report/" + name + ".txt")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// gbps returns the MB/s (2^20 bytes) that are v Gb/s.
func gbps(v float64) float64 { return v * 125e6 / (1 << 20) }

// TestReportTables prints each table as perftest would print the same
// numbers (golden.c names the format string of each case).
func TestReportTables(t *testing.T) {
	for _, c := range []struct {
		name   string
		p      Params
		header bool
		r      Result
	}{
		{"bw_mb", Params{Test: WriteBW}, true,
			Result{BW: &BWResult{Size: 65536, Iters: 5000, AvgMBps: 1187.456, MsgRate: 0.0189993}}},
		{"bw_peak", Params{Test: ReadBW}, false,
			Result{BW: &BWResult{Size: 8388608, Iters: 1234567890, PeakMBps: 2543.219, AvgMBps: 2498.004, MsgRate: 0.000312}}},
		{"bw_gb", Params{Test: SendBW, ReportGbits: true}, true,
			Result{BW: &BWResult{Size: 65536, Iters: 5000, AvgMBps: gbps(9.961), MsgRate: 0.0189993}}},
		{"bw_gb_ext", Params{Test: WriteBW, ReportGbits: true}, false,
			Result{BW: &BWResult{Size: 2, Iters: 1000, AvgMBps: gbps(0.0123457), MsgRate: 0.771605}}},
		{"lat", Params{Test: WriteLat}, true,
			Result{Lat: &LatResult{Size: 2, Iters: 1000, Min: 1.234, Max: 9.871, Typical: 1.503, Avg: 1.6249, Stdev: 0.351, P99: 3.214, P999: 8.762}}},
		{"lat_hist", Params{Test: ReadLat, Unsorted: true, Histogram: true}, false,
			Result{Lat: &LatResult{Size: 2, Iters: 7, Min: 1.234, Max: 9.871, Typical: 1.503, Avg: 1.6249, Stdev: 0.351, P99: 3.214, P999: 8.762,
				Samples: []time.Duration{1500, 1250, 2000, 1000, 5000, 1, 1234567 * time.Microsecond}}}},
		{"lat_dur", Params{Test: SendLat, Duration: 5 * time.Second}, true,
			Result{Lat: &LatResult{Size: 2, Iters: 123456, Avg: 4.0512, TPS: 123456.784, Timed: true}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			if c.header {
				PrintReportHeader(&b, &c.p)
			}
			c.r.Test = c.p.Test
			PrintReport(&b, &c.p, &c.r)
			if want := golden(t, c.name); b.String() != want {
				t.Fatalf("got\n%q\nwant\n%q", b.String(), want)
			}
		})
	}
}

// TestReportCycles: -C prints the same table in cycles, at the MHz
// perftest reads from /proc/cpuinfo.
func TestReportCycles(t *testing.T) {
	saved := cpuMHz
	defer func() { cpuMHz = saved }()
	cpuMHz = func() float64 { return 2000 }
	p := Params{Test: WriteLat, Cycles: true, Unsorted: true}
	r := Result{Test: WriteLat, Lat: &LatResult{Size: 2, Iters: 5, Min: 1, Max: 2, Typical: 1.5, Avg: 1.25, Stdev: 0.5, P99: 2, P999: 2,
		Samples: []time.Duration{3000}}}
	var b bytes.Buffer
	PrintReport(&b, &p, &r)
	// A 3 µs round trip is 1.5 µs each way: 3000 cycles at 2 GHz.
	want := "#, cycles\n1, 3000\n" + rule + "\n" + resultFmtLat + "\n" +
		" 2       5          2000.00        4000.00      3000.00  \t       2500.00     \t1000.00\t\t4000.00 \t\t4000.00\n"
	if b.String() != want {
		t.Fatalf("got\n%q\nwant\n%q", b.String(), want)
	}
}

func TestParseCPUMHz(t *testing.T) {
	info := "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu MHz\t\t: 2400.123\n\nprocessor\t: 1\ncpu MHz\t\t: 3100.000\n"
	if v, ok := parseCPUMHz(info); !ok || v != 2400.123 {
		t.Fatalf("%v %v, want the first: 2400.123", v, ok)
	}
	for _, bad := range []string{"", "processor\t: 0\nBogoMIPS\t: 50.00\n", "cpu MHz\t\t: fast\n", "cpu MHz 2400\n"} {
		if v, ok := parseCPUMHz(bad); ok {
			t.Errorf("%q: %v", bad, v)
		}
	}
	if v := cpuMHz(); v <= 0 {
		t.Fatalf("cpuMHz() = %v", v)
	}
}

// TestOutJSON: --out_json's file is valid JSON, shaped as perftest 6.2x
// writes it: test_info's keys in write_test_info_to_file's order, results'
// numbers formatted as golden.c's.
func TestOutJSON(t *testing.T) {
	info := OutJSONInfo{Device: "gorxe0", LinkType: "Ethernet", GIDIndex: 3}
	for _, c := range []struct {
		name string
		p    Params
		info OutJSONInfo
		r    Result
		test string
		keys []string // test_info's keys, in order
	}{
		{"json_bw", Params{Test: WriteBW, PostList: 4}, info,
			Result{BW: &BWResult{Size: 65536, Iters: 5000, AvgMBps: 1187.456, MsgRate: 0.0189993}},
			"RDMA_Write_Post_List_BW_Test",
			[]string{"test", "Dual_port", "Device", "Number_of_qps", "Transport_type", "Connection_type", "Using_SRQ", "PCIe_relax_order",
				"ibv_wr_API", "TX_depth", "Post_List", "CQ_Moderation", "Mtu", "Link_type", "GID_index", "Max_inline_data", "rdma_cm_QPs",
				"Use_ROCm_memory", "Use_MUSA_memory", "Data_ex_method"}},
		{"json_bw_ext", Params{Test: AtomicBW, ReportGbits: true}, info,
			Result{BW: &BWResult{Size: 2, Iters: 1000, AvgMBps: gbps(0.0123457), MsgRate: 0.771605}},
			"Atomic_FETCH_AND_ADD_BW_Test",
			[]string{"test", "Dual_port", "Device", "Number_of_qps", "Transport_type", "Connection_type", "Using_SRQ", "PCIe_relax_order",
				"ibv_wr_API", "TX_depth", "CQ_Moderation", "Mtu", "Link_type", "GID_index", "Outstand_reads", "rdma_cm_QPs",
				"Use_ROCm_memory", "Use_MUSA_memory", "Data_ex_method"}},
		{"json_lat", Params{Test: SendLat, Events: true}, OutJSONInfo{Device: "gorxe0", LinkType: "Ethernet", Server: true},
			Result{Lat: &LatResult{Size: 2, Iters: 1000, Min: 1.234, Max: 9.871, Typical: 1.503, Avg: 1.6249, Stdev: 0.351, P99: 3.214, P999: 8.762}},
			"Send_Latency_Test",
			[]string{"test", "Test with events", "Dual_port", "Device", "Number_of_qps", "Transport_type", "Connection_type", "Using_SRQ",
				"PCIe_relax_order", "ibv_wr_API", "RX_depth", "Mtu", "Link_type", "GID_index", "Max_inline_data", "rdma_cm_QPs",
				"Use_ROCm_memory", "Use_MUSA_memory", "Data_ex_method"}},
		{"json_lat_dur", Params{Test: ReadLat, Duration: 5 * time.Second}, info,
			Result{Lat: &LatResult{Size: 2, Iters: 123456, Avg: 4.0512, TPS: 123456.784, Timed: true}},
			"RDMA_Read_Latency_Test",
			[]string{"test", "Dual_port", "Device", "Number_of_qps", "Transport_type", "Connection_type", "Using_SRQ", "PCIe_relax_order",
				"ibv_wr_API", "TX_depth", "Mtu", "Link_type", "GID_index", "Outstand_reads", "rdma_cm_QPs",
				"Use_ROCm_memory", "Use_MUSA_memory", "Data_ex_method"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.p.Defaults()
			var b bytes.Buffer
			c.r.Test = c.p.Test
			if err := WriteOutJSON(&b, &c.p, c.info, &c.r); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			var doc struct {
				TestInfo map[string]any `json:"test_info"`
				Results  map[string]any `json:"results"`
			}
			if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, out)
			}
			if doc.TestInfo["test"] != c.test || doc.TestInfo["Device"] != "gorxe0" {
				t.Errorf("test_info %v", doc.TestInfo)
			}
			// The keys, in order: each on a line of its own.
			info := out[strings.Index(out, "\"test_info\""):strings.Index(out, "\"results\"")]
			var keys []string
			for _, line := range strings.Split(info, "\n")[1:] {
				if k, _, ok := strings.Cut(strings.TrimSpace(line), "\": "); ok {
					keys = append(keys, strings.TrimPrefix(k, "\""))
				}
			}
			if strings.Join(keys, ",") != strings.Join(c.keys, ",") {
				t.Errorf("test_info keys\n%v\nwant\n%v", keys, c.keys)
			}
			if !strings.HasPrefix(out, "{\n\"test_info\": {\n") {
				t.Errorf("starts %q", out[:20])
			}
			if results := out[strings.Index(out, "\"results\""):]; results != golden(t, c.name)+"}\n" {
				t.Errorf("results\n%q\nwant\n%q", results, golden(t, c.name)+"}\n")
			}
		})
	}
}

// TestBanner: the banner names a post list in its title and line, and
// shows -I's inline size, where perftest's ctx_print_test_info does.
func TestBanner(t *testing.T) {
	p := Params{Test: WriteBW, PostList: 8, Inline: 64}
	p.Defaults()
	var b bytes.Buffer
	PrintBanner(&b, &p, BannerInfo{Device: "gorxe0"})
	for _, want := range []string{"                    RDMA_Write Post List BW Test\n", " Post List       : 8\n",
		" CQ Moderation   : 8\n", " Max inline data : 64[B]\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
	p = Params{Test: ReadBW}
	p.Defaults()
	b.Reset()
	PrintBanner(&b, &p, BannerInfo{Device: "gorxe0"})
	if s := b.String(); strings.Contains(s, "Max inline") || !strings.Contains(s, " Outstand reads  : 128\n") {
		t.Errorf("READ banner:\n%s", s)
	}
}

// TestReportUnits: a client's report to its peer is in its own unit, and
// a server prints what it got as it came, as perftest's do.
func TestReportUnits(t *testing.T) {
	gb := Params{ReportGbits: true}
	mb := Params{}
	r := BWResult{Size: 65536, Iters: 10, PeakMBps: 0, AvgMBps: gbps(9.5), MsgRate: 0.02}
	rep := reportOf(&gb, &r)
	if d := rep.AvgMBps - 9.5; d > 1e-9 || d < -1e-9 {
		t.Fatalf("a Gb/s client reports %v, want 9.5", rep.AvgMBps)
	}
	got := resultOf(&mb, rep)
	var b bytes.Buffer
	PrintReport(&b, &mb, &Result{Test: WriteBW, BW: &got})
	if !strings.Contains(b.String(), " 9.50   \t\t") {
		t.Fatalf("an MB/s server prints %q, want the client's 9.50", b.String())
	}
}

package perftest

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

const rule = "---------------------------------------------------------------------------------------"

// BannerInfo is what perftest's banner shows beyond the parameters.
type BannerInfo struct {
	Device   string // -d: the device's name
	GIDIndex int    // -x: the index of the GID the side uses
	// Server says the side is the server: it shows the TX depth only
	// when it sends too (-b), and the RX depth of a send test only then.
	// A client shows the RX depth only with -b.
	Server bool
	// InProcess says both sides run in this process (--link mem): one
	// banner shows both, TX depth and RX depth alike, and the exchange
	// is "in-process".
	InProcess bool
}

// PrintBanner prints perftest's header, as ctx_print_test_info at 6.06
// prints it on rxe: the test's name and its settings. Its lines for
// PCIe relaxed ordering and the ibv_wr* API say what is true of gorxe,
// which has no PCIe and, as rxe for perftest, posts with ibv_post_send.
func PrintBanner(w io.Writer, p *Params, b BannerInfo) {
	kind := "Latency"
	if !p.Test.IsLatency() {
		kind = "BW"
		if p.PostList > 1 {
			kind = "Post List " + kind
		}
		if p.Duplex {
			kind = "Bidirectional " + kind
		}
	}
	if p.Test.IsAtomic() {
		kind = p.Atomic + " " + kind
	}
	sends := p.sends(b.Server) || b.InProcess
	receives := b.Server || p.Duplex || b.InProcess
	fmt.Fprintln(w, rule)
	fmt.Fprintf(w, "                    %s %s Test\n", p.verbName(), kind)
	if p.Events {
		fmt.Fprintf(w, " Test with events. Using %s_comp0\n", b.Device)
	}
	fmt.Fprintf(w, " Dual-port       : OFF\t\tDevice         : %s\n", b.Device)
	fmt.Fprintf(w, " Number of qps   : %d\t\tTransport type : IB\n", p.qps())
	fmt.Fprintf(w, " Connection type : %s\t\tUsing SRQ      : %s\n", p.ConnectionName(), onOff(p.UseSRQ))
	fmt.Fprintf(w, " PCIe relax order: Unsupported\n")
	fmt.Fprintf(w, " ibv_wr* API     : OFF\n")
	if sends {
		fmt.Fprintf(w, " TX depth        : %d\n", p.TxDepth)
	}
	if p.PostList > 1 {
		fmt.Fprintf(w, " Post List       : %d\n", p.PostList)
	}
	if p.RecvPostList > 1 {
		fmt.Fprintf(w, " Recv Post List  : %d\n", p.RecvPostList)
	}
	if p.recvVerb() && receives {
		fmt.Fprintf(w, " RX depth        : %d\n", p.RxDepth)
	}
	if !p.Test.IsLatency() {
		fmt.Fprintf(w, " CQ Moderation   : %d\n", min(p.CQMod, p.TxDepth))
	}
	fmt.Fprintf(w, " Mtu             : %d[B]\n", p.MTU.Bytes())
	fmt.Fprintf(w, " Link type       : Ethernet\n")
	fmt.Fprintf(w, " GID index       : %d\n", b.GIDIndex)
	if p.Test.readsOrAtomics() {
		fmt.Fprintf(w, " Outstand reads  : %d\n", p.outReads())
	} else {
		fmt.Fprintf(w, " Max inline data : %d[B]\n", p.Inline)
	}
	printCMBanner(w, p, b)
	fmt.Fprintln(w, rule)
}

// verbName is the test's verb as perftest's testsStr names it: with
// WithImm, RDMA_Write_imm and Send_imm.
func (p *Params) verbName() string {
	verb := p.Test.Verb()
	if p.WithImm && (verb == "RDMA_Write" || verb == "Send") {
		verb += "_imm"
	}
	return verb
}

// PrintAddresses prints the local and remote address lines of perftest.
func PrintAddresses(w io.Writer, p *Params, local, remote Info) {
	PrintAllAddresses(w, p, []Info{local}, []Info{remote})
}

// PrintAllAddresses prints the address lines of every QP as perftest's
// ctx_print_pingpong_data does, with C's printf formats (%#06x and the
// like: the width counts the 0x, and 0 has none): a READ test's lines
// show the side's out_reads, its rkey and its address, a WRITE test's
// (not with immediate) the rkey and address, the others, and every test
// on rdma_cm (-R, -z), neither.
func PrintAllAddresses(w io.Writer, p *Params, locals, remotes []Info) {
	type line struct {
		name string
		i    Info
	}
	var lines []line
	for _, i := range locals {
		lines = append(lines, line{"local", i})
	}
	for _, i := range remotes {
		lines = append(lines, line{"remote", i})
	}
	for _, x := range lines {
		fmt.Fprintf(w, " %s address: LID %s QPN %s PSN %s", x.name, cHex(0, 4), cHex(uint64(x.i.QPN), 6), cHex(uint64(x.i.PSN), 6))
		switch {
		case p.RDMACM || p.CommRDMACM:
			// perftest prints these lines with its exchange's parameters,
			// which are a SEND test's on rdma_cm (create_comm_struct).
		case p.Test == ReadBW || p.Test == ReadLat:
			fmt.Fprintf(w, " OUT %s", cHex(uint64(x.i.OutReads), 4))
			fallthrough
		case (p.Test == WriteBW || p.Test == WriteLat) && !p.WithImm:
			fmt.Fprintf(w, " RKey %s VAddr %s", cHex(uint64(x.i.RKey), 8), cHex(x.i.VAddr, 16))
		}
		fmt.Fprintln(w)
		g := x.i.GID.As16()
		parts := make([]string, 16)
		for j, b := range g {
			parts[j] = fmt.Sprintf("%02d", b)
		}
		fmt.Fprintf(w, " GID: %s\n", strings.Join(parts, ":"))
	}
	fmt.Fprintln(w, rule)
}

// cHex formats v as C's printf("%#0*x", width, v) does: zero-padded to
// width characters, the 0x included, and without the 0x when v is 0.
func cHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, v)
	}
	return fmt.Sprintf("0x%0*x", max(width-2, 0), v)
}

// PrintHeader prints the column names of t's result table, as
// PrintReportHeader does for a test with perftest's default options.
func PrintHeader(w io.Writer, t Test) { PrintReportHeader(w, &Params{Test: t}) }

// PrintResult prints one line of the result table, as PrintReport does
// for a test with perftest's default options.
func PrintResult(w io.Writer, r *Result) { PrintReport(w, &Params{Test: r.Test}, r) }

// perftest's table headers and result lines, its RESULT_FMT* and
// REPORT_FMT* (perftest_parameters.h at v4.5-0.17, which reports 6.06;
// 6.2x says MiB/sec where 6.06 says MB/sec, and puts two more spaces
// before the message rate), the latter as Go formats. Each line ends with
// RESULT_EXT or REPORT_EXT, a newline.
const (
	// RESULT_FMT
	resultFmt = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
	// RESULT_FMT_G, with --report_gbits
	resultFmtG = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	// RESULT_FMT_LAT
	resultFmtLat = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	// RESULT_FMT_LAT_DUR, of a timed latency test
	resultFmtLatDur = " #bytes        #iterations       t_avg[usec]    tps average"

	// REPORT_FMT: " %-7lu    %-10" PRIu64 "       %-7.2lf            %-7.2lf\t\t   %-7.6lf"
	reportFmt = " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f"
	// REPORT_FMT_EXT, in Gb/s below 0.1 (print_full_bw_report's inc_accuracy)
	reportFmtExt = " %-7d    %d           %-7.6f            %-7.6f            %-7.6f"
	// REPORT_FMT_LAT
	reportFmtLat = " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f"
	// REPORT_FMT_LAT_DUR
	reportFmtLatDur = " %-7d       %d            %-7.2f        %-7.2f"

	// RESULT_EXT_CPU_UTIL and REPORT_EXT_CPU_UTIL, the ends of a header
	// and of a line with --cpu_util
	resultExtCPUUtil = "    CPU_Util[%]"
	reportExtCPUUtil = "\t    %-3.2f"
)

// reportEnd returns the end of a result line: a newline, or with
// --cpu_util the CPU's use first.
func reportEnd(p *Params, cpu float64) string {
	if p.cpuUtilOn() {
		return fmt.Sprintf(reportExtCPUUtil+"\n", cpu)
	}
	return "\n"
}

// PrintReportHeader prints the column names of p's result table, as
// perftest prints them before the run: MB/sec or, with ReportGbits,
// Gb/sec; for a timed latency test the shorter RESULT_FMT_LAT_DUR table.
func PrintReportHeader(w io.Writer, p *Params) {
	h := reportHeader(p.Test, p.ReportGbits, p.Duration > 0)
	if p.cpuUtilOn() {
		h += resultExtCPUUtil
	}
	fmt.Fprintln(w, h)
}

func reportHeader(t Test, gbits, timed bool) string {
	switch {
	case t.IsLatency() && timed:
		return resultFmtLatDur
	case t.IsLatency():
		return resultFmtLat
	case gbits:
		return resultFmtG
	}
	return resultFmt
}

// PrintReport prints one line of p's result table as perftest's
// print_full_bw_report, print_report_lat and print_report_lat_duration
// do. Bandwidth is in p's unit (ReportGbits), with six decimals in Gb/s
// below 0.1 (inc_accuracy); no peak is a peak of 0.00. For a latency test
// it first prints the samples -U and -H ask for, then the table's header
// again, and with Cycles it reports CPU cycles (under the same header,
// as perftest does).
func PrintReport(w io.Writer, p *Params, r *Result) {
	if l := r.Lat; l != nil {
		printLat(w, p, l)
		return
	}
	b := r.BW
	if b == nil {
		return
	}
	u := bwUnit(p)
	peak, avg := b.PeakMBps*u, b.AvgMBps*u
	f := reportFmt
	if p.ReportGbits && avg < 0.1 {
		f = reportFmtExt
	}
	fmt.Fprintf(w, f+"%s", b.Size, b.Iters, peak, avg, b.MsgRate, reportEnd(p, b.CPUUtil))
}

// PrintBothReports prints, for a -b run, each side's own line under a
// table of its own, "Local results" and then "Remote results", as
// perftest's --report-both does after the summed line. Without both
// sides' reports (not a -b run) it prints nothing.
func PrintBothReports(w io.Writer, p *Params, r *Result) {
	if r.OwnBW == nil || r.PeerBW == nil {
		return
	}
	for _, side := range []struct {
		name string
		bw   *BWResult
	}{{"Local", r.OwnBW}, {"Remote", r.PeerBW}} {
		fmt.Fprintf(w, "%s\n\n %s results: \n%s\n", rule, side.name, rule)
		PrintReportHeader(w, p)
		PrintReport(w, p, &Result{Test: r.Test, BW: side.bw})
	}
}

// latMeasureTail is perftest's LAT_MEASURE_TAIL: print_report_lat leaves
// the largest two samples out after sorting.
const latMeasureTail = 2

func printLat(w io.Writer, p *Params, l *LatResult) {
	if l.Timed {
		fmt.Fprintf(w, reportFmtLatDur+"%s", l.Size, l.Iters, l.Avg, l.TPS, reportEnd(p, l.CPUUtil))
		return
	}
	scale, units := 1.0, "usec"
	if p.Cycles {
		scale, units = cpuMHz(), "cycles"
	}
	// Samples are round trips; the ping-pongs report half of one.
	perSample := scale / 1e3
	if !p.Test.oneSided() {
		perSample /= 2
	}
	printSamples := func(d []time.Duration) {
		fmt.Fprintf(w, "#, %s\n", units)
		for i, v := range d {
			fmt.Fprintf(w, "%d, %s\n", i+1, cFormatG(float64(v)*perSample))
		}
	}
	if p.Unsorted {
		printSamples(l.Samples)
	}
	if p.Histogram {
		sorted := slices.Clone(l.Samples)
		slices.Sort(sorted)
		printSamples(sorted[:max(len(sorted)-latMeasureTail, 0)])
	}
	if p.Unsorted || p.Histogram {
		fmt.Fprint(w, rule+"\n"+resultFmtLat+"\n")
	}
	fmt.Fprintf(w, reportFmtLat+"\n", l.Size, l.Iters, l.Min*scale, l.Max*scale, l.Typical*scale,
		l.Avg*scale, l.Stdev*scale, l.P99*scale, l.P999*scale)
}

// cFormatG formats v as C's printf("%g") does: six significant digits,
// trailing zeros dropped, an exponent below 1e-4 and from 1e6.
func cFormatG(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// cpuMHz is the CPU frequency with which -C turns microseconds into
// cycles. perftest counts cycles (get_cycles) and divides by
// get_cpu_mhz(), which takes the first "cpu MHz" line of /proc/cpuinfo
// (and its own measurement of the cycle counter where the two differ by
// more than 2%); gorxe measures nanoseconds, and prints ns × MHz/1000
// with the MHz read from /proc/cpuinfo as perftest reads it. Where there
// is no such line (arm64), it uses 1000 MHz: cycles are nanoseconds.
var cpuMHz = sync.OnceValue(func() float64 {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 1000
	}
	if mhz, ok := parseCPUMHz(string(b)); ok {
		return mhz
	}
	return 1000
})

// parseCPUMHz returns the first "cpu MHz : N" of a /proc/cpuinfo, read as
// sscanf(buf, "cpu MHz : %lf") reads each line.
func parseCPUMHz(cpuinfo string) (float64, bool) {
	for _, line := range strings.Split(cpuinfo, "\n") {
		rest, ok := strings.CutPrefix(line, "cpu MHz")
		if !ok {
			continue
		}
		rest = strings.TrimLeft(rest, " \t")
		if rest, ok = strings.CutPrefix(rest, ":"); !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil && v > 0 {
			return v, true
		}
	}
	return 0, false
}

// JSON is the --json form of a result: one object per size.
type JSON struct {
	Test    Test    `json:"test"`
	Size    int     `json:"size"`
	Iters   int     `json:"iters"`
	PeakMBs float64 `json:"bw_peak_MBps,omitempty"`
	AvgMBs  float64 `json:"bw_avg_MBps,omitempty"`
	MsgRate float64 `json:"msg_rate_Mpps,omitempty"`
	MinUs   float64 `json:"t_min_us,omitempty"`
	MaxUs   float64 `json:"t_max_us,omitempty"`
	TypUs   float64 `json:"t_typical_us,omitempty"`
	AvgUs   float64 `json:"t_avg_us,omitempty"`
	StdUs   float64 `json:"t_stdev_us,omitempty"`
	P99Us   float64 `json:"p99_us,omitempty"`
	P999Us  float64 `json:"p99_9_us,omitempty"`
	TPS     float64 `json:"tps,omitempty"` // a timed latency test's transactions per second
	Check   string  `json:"check"`         // "ok", "failed" or "off"
	Error   string  `json:"error,omitempty"`
	// Retransmissions and drops of the run, from the client's and the
	// server's counters.
	Retransmits uint64 `json:"retransmits"`
	ICRCErrors  uint64 `json:"icrc_errors"`
	// CPUUtil is --cpu_util's figure, in percent, of a run that has it.
	CPUUtil *float64 `json:"cpu_util,omitempty"`
	// Heap allocations of this process per packet its devices sent or
	// received during the run itself: 0 in the steady state. Allocs and
	// Packets are the two counts, so that the steady state can be told
	// from a run's fixed cost: the difference of two runs of different
	// lengths.
	AllocsPerPacket *float64 `json:"allocs_per_packet,omitempty"`
	Allocs          uint64   `json:"allocs"`
	Packets         uint64   `json:"packets"`
}

// ToJSON converts a result; err is the run's error, if any.
func ToJSON(r *Result, p *Params, err error) JSON {
	j := JSON{Test: p.Test, Size: p.Size, Iters: p.Iters, Check: "off"}
	if r != nil {
		j.Test = r.Test
		if b := r.BW; b != nil {
			j.Size, j.Iters, j.PeakMBs, j.AvgMBs, j.MsgRate = b.Size, b.Iters, b.PeakMBps, b.AvgMBps, b.MsgRate
		}
		if l := r.Lat; l != nil {
			j.Size, j.Iters = l.Size, l.Iters
			j.MinUs, j.MaxUs, j.TypUs, j.AvgUs, j.StdUs, j.P99Us, j.P999Us = l.Min, l.Max, l.Typical, l.Avg, l.Stdev, l.P99, l.P999
			j.TPS = l.TPS
		}
		if p.cpuUtilOn() {
			cpu := r.cpuUtil()
			j.CPUUtil = &cpu
		}
		j.Retransmits = r.Client.CompleterRetryErr + r.Server.CompleterRetryErr
		j.ICRCErrors = r.Client.ICRCErrors + r.Server.ICRCErrors
		if r.Packets > 0 {
			a := float64(r.Allocs) / float64(r.Packets)
			j.AllocsPerPacket = &a
		}
		j.Allocs, j.Packets = r.Allocs, r.Packets
		if r.Checked {
			j.Check = "ok"
		}
	}
	if err != nil {
		j.Error = err.Error()
		if p.Check {
			j.Check = "failed"
		}
	}
	return j
}

// WriteJSON writes j as one line.
func WriteJSON(w io.Writer, j JSON) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// DefaultOutJSONFile is where perftest's --out_json writes without
// --out_json_file: perftest_out.json in the working directory.
const DefaultOutJSONFile = "perftest_out.json"

// OutJSONInfo is what perftest's --out_json file says of the run beside
// Params: the device, the link layer (perftest's link_layer_str:
// "Ethernet" for RoCE), the GID index and which side wrote it.
type OutJSONInfo struct {
	Device   string
	LinkType string
	GIDIndex int
	Server   bool
}

// WriteOutJSON writes r in the shape of perftest's --out_json file, as
// perftest 6.2x writes it (write_test_info_to_file, then
// write_bw_report_to_file, write_report_lat_to_file or
// write_report_lat_duration_to_file): a "test_info" object of the
// banner's settings and a "results" object of the table's numbers, in
// the table's units. (6.06 writes the same keys unquoted, which no JSON
// parser reads.) perftest rewrites the file with each report: the last
// size's, or an infinite run's last report, is the one that stays.
func WriteOutJSON(w io.Writer, p *Params, info OutJSONInfo, r *Result) error {
	var b strings.Builder
	b.WriteString("{\n")
	writeTestInfo(&b, p, info)
	b.WriteString("\"results\": {\n")
	switch {
	case r.BW != nil:
		u := bwUnit(p)
		peak, avg := r.BW.PeakMBps*u, r.BW.AvgMBps*u
		f := "\"MsgSize\": %d,\n\"n_iterations\": %d,\n\"BW_peak\": %.2f,\n\"BW_average\": %.2f,\n\"MsgRate\": %.6f" // REPORT_FMT_JSON
		if p.ReportGbits && avg < 0.1 {
			f = "\"MsgSize\": %d,\n\"n_iterations\": %d,\n\"BW_peak\": %.6f,\n\"BW_average\": %.6f,\n\"MsgRate\": %.6f" // REPORT_FMT_EXT_JSON
		}
		fmt.Fprintf(&b, f, r.BW.Size, r.BW.Iters, peak, avg, r.BW.MsgRate)
	case r.Lat != nil && r.Lat.Timed:
		l := r.Lat
		fmt.Fprintf(&b, "\"MsgSize\": %d,\n\"n_iterations\": %d,\n\"t_avg\": %.2f,\n\"tps_average\": %.2f", // REPORT_FMT_LAT_DUR_JSON
			l.Size, l.Iters, l.Avg, l.TPS)
	case r.Lat != nil:
		l, scale := r.Lat, 1.0
		if p.Cycles {
			scale = cpuMHz()
		}
		fmt.Fprintf(&b, "\"MsgSize\": %d,\n\"n_iterations\": %d,\n\"t_min\": %.2f,\n\"t_max\": %.2f,\n\"t_typical\": %.2f,\n\"t_avg\": %.2f,\n"+
			"\"t_stdev\": %.2f,\n\"percentile_99\": %.2f,\n\"percentile_99.9\": %.2f", // REPORT_FMT_LAT_JSON
			l.Size, l.Iters, l.Min*scale, l.Max*scale, l.Typical*scale, l.Avg*scale, l.Stdev*scale, l.P99*scale, l.P999*scale)
	}
	if p.cpuUtilOn() {
		fmt.Fprintf(&b, ",\n\"CPU_util\": %.2f", r.cpuUtil()) // REPORT_EXT_CPU_UTIL_JSON
	}
	b.WriteString("\n}\n}\n") // REPORT_EXT_JSON, then the two objects' ends
	_, err := io.WriteString(w, b.String())
	return err
}

// writeTestInfo is perftest's write_test_info_to_file for a gorxe run:
// its test_info block, from p and the side.
func writeTestInfo(b *strings.Builder, p *Params, info OutJSONInfo) {
	kind := "Latency_"
	if !p.Test.IsLatency() {
		kind = "BW_"
		if p.PostList > 1 {
			kind = "Post_List_" + kind
		}
		if p.Duplex {
			kind = "Bidirectional_" + kind
		}
	}
	if p.Test.IsAtomic() {
		kind = p.Atomic + "_" + kind
	}
	fmt.Fprintf(b, "\"test_info\": {\n\"test\": \"%s_%sTest\",\n", p.verbName(), kind)
	if p.Events {
		fmt.Fprintf(b, "\"Test with events\": \"Using_%s_comp%d\",\n", info.Device, 0)
	}
	fmt.Fprintf(b, "\"Dual_port\": \"OFF\",\n\"Device\": \"%s\",\n", info.Device)
	fmt.Fprintf(b, "\"Number_of_qps\": %d,\n\"Transport_type\": \"IB\",\n", p.qps())
	fmt.Fprintf(b, "\"Connection_type\": \"%s\",\n\"Using_SRQ\": \"%s\",\n", p.ConnectionName(), onOff(p.UseSRQ))
	// As the banner: a perftest built without HAVE_RO writes the first,
	// and perftest posts with ibv_post_send on rxe.
	fmt.Fprintf(b, " \"PCIe_relax_order\": \"Unsupported\",\n")
	fmt.Fprintf(b, "\"ibv_wr_API\": \"OFF\",\n")
	if p.sends(info.Server) {
		fmt.Fprintf(b, "\"TX_depth\": %d,\n", p.TxDepth)
	}
	if p.PostList > 1 {
		fmt.Fprintf(b, "\"Post_List\": %d,\n", p.PostList)
	}
	if p.RecvPostList > 1 {
		// perftest writes the name without its quotes, which no JSON
		// reader takes; gorxe quotes it.
		fmt.Fprintf(b, "\"Recv_Post_List\": %d,\n", p.RecvPostList)
	}
	if p.recvVerb() && (info.Server || p.Duplex) {
		fmt.Fprintf(b, "\"RX_depth\": %d,\n", p.RxDepth)
	}
	if !p.Test.IsLatency() {
		fmt.Fprintf(b, "\"CQ_Moderation\": %d,\n", min(p.CQMod, p.TxDepth))
	}
	fmt.Fprintf(b, "\"Mtu\": %d,\n\"Link_type\": \"%s\",\n", p.MTU.Bytes(), info.LinkType)
	fmt.Fprintf(b, "\"GID_index\": %d,\n", info.GIDIndex)
	if p.Test.readsOrAtomics() {
		fmt.Fprintf(b, "\"Outstand_reads\": %d,\n", p.outReads())
	} else {
		fmt.Fprintf(b, "\"Max_inline_data\": %d,\n", p.Inline)
	}
	fmt.Fprintf(b, "\"rdma_cm_QPs\": \"OFF\",\n")
	fmt.Fprintf(b, "\"Use_ROCm_memory\": \"OFF\",\n\"Use_MUSA_memory\": \"OFF\",\n")
	fmt.Fprintf(b, "\"Data_ex_method\": \"Ethernet\"\n},\n")
}

// Values of perftest's --output: print only this one number of a
// result, as "%lf\n", and nothing else (no banner, no table).
const (
	OutputBandwidth   = "bandwidth"    // the average bandwidth, in the table's unit
	OutputMessageRate = "message_rate" // the average message rate, Mpps
	OutputLatency     = "latency"      // the average latency, in the table's unit
)

// CheckOutput reports an --output value perftest refuses for test t
// (perftest_parameters.c, force_dependencies).
func CheckOutput(t Test, what string) error {
	switch {
	case what != OutputBandwidth && what != OutputMessageRate && what != OutputLatency:
		return fmt.Errorf("invalid verbosity level output flag %q: use bandwidth, latency or message_rate", what)
	case !t.IsLatency() && what == OutputLatency:
		return fmt.Errorf("output verbosity level for BW can be: bandwidth, message_rate")
	case t.IsLatency() && what != OutputLatency:
		return fmt.Errorf("output verbosity level for LAT can be: latency")
	}
	return nil
}

// PrintOutput prints what --output asks of r, as perftest prints it
// (print_report_bw, print_report_lat, print_report_lat_duration).
func PrintOutput(w io.Writer, p *Params, r *Result, what string) {
	switch {
	case r.BW != nil && what == OutputBandwidth:
		fmt.Fprintf(w, "%f\n", r.BW.AvgMBps*bwUnit(p))
	case r.BW != nil && what == OutputMessageRate:
		fmt.Fprintf(w, "%f\n", r.BW.MsgRate)
	case r.Lat != nil && what == OutputLatency:
		avg := r.Lat.Avg
		if p.Cycles {
			avg *= cpuMHz()
		}
		fmt.Fprintf(w, "%f\n", avg)
	}
}

// cpuUtil returns --cpu_util's figure of r's table line, bandwidth or
// latency.
func (r *Result) cpuUtil() float64 {
	switch {
	case r.BW != nil:
		return r.BW.CPUUtil
	case r.Lat != nil:
		return r.Lat.CPUUtil
	}
	return 0
}

// Verifier is perftest's result verifier, -w (--limit_bw) and -y
// (--limit_msgrate): the least average bandwidth, in the report's unit
// (MB/sec, or Gb/sec with ReportGbits), and the least message rate, in
// Mpps, a bandwidth run must report. As perftest's, a limit is met if one
// report of the run meets it (with -a, one size), and a run that reports
// no bandwidth meets none. perftest checks -y only when -w is given too;
// gorxe checks each limit given.
type Verifier struct {
	MinBW, MinMsgRate     float64
	CheckBW, CheckMsgRate bool

	bwMet, msgRateMet bool
}

// Report takes one bandwidth report, of p's run.
func (v *Verifier) Report(p *Params, b *BWResult) {
	if b == nil {
		return
	}
	v.bwMet = v.bwMet || b.AvgMBps*bwUnit(p) >= v.MinBW
	v.msgRateMet = v.msgRateMet || b.MsgRate >= v.MinMsgRate
}

// Err returns perftest's words for a limit no report met, or nil.
func (v *Verifier) Err() error {
	switch {
	case v.CheckBW && !v.bwMet:
		return fmt.Errorf("Error: BW result is below bw limit (%g)", v.MinBW)
	case v.CheckMsgRate && !v.msgRateMet:
		return fmt.Errorf("Error: Msg rate is below msg_rate limit (%g Mpps)", v.MinMsgRate)
	}
	return nil
}

// onOff returns perftest's word for a setting: "ON" or "OFF".
func onOff(on bool) string {
	if on {
		return "ON"
	}
	return "OFF"
}

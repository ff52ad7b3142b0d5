package main

// perftest's command line, as its parser (perftest_parameters.c, parser())
// reads it: every option of perftest's table, parsed by getopt_long's
// rules, each one honoured, accepted (it changes nothing that gorxe does
// differently), or refused with a one-line reason. gorxe's own options
// are long options whose names perftest does not use, and only their whole
// names select them, so that every prefix of a perftest option still means
// what it means to perftest.

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorxe/gorxe/internal/getopt"
	"github.com/gorxe/gorxe/perftest"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire"
)

// perfRun is a perftest command line, parsed.
type perfRun struct {
	test    perftest.Test
	p       perftest.Params
	link    linkFlags
	server  string // the operand: the server's name or address (client role)
	tcpPort int    // -p: the out-of-band TCP port
	device  string // -d: the name gorxe's device takes
	ibPort  int    // -i
	// gidIndex is -x, an index into the interface's GID table laid out as
	// rxe lays out its own (gids.go); -1 lets gorxe choose as perftest
	// chooses.
	gidIndex int
	ipv6     bool   // --ipv6: prefer an IPv6 GID
	bindIP   string // --bind_source_ip: the out-of-band socket's source
	mtu      int    // -m, in bytes
	timeout  uint
	tos      int // --tos, -1 if not given

	// --rate_limit as given (perftest's HW limiter takes only the rates
	// of its table, by their text), --rate_limit_type, --typical_pkt_size.
	rateLimit      string
	rateLimitType  string
	typicalPktSize int

	watch      *counterWatch     // -W
	verify     perftest.Verifier // -w, -y
	reportBoth bool              // --report-both

	waitDestroy int // --wait_destroy: seconds to wait before letting go of the device

	outJSON     bool   // --out_json
	outJSONFile string // --out_json_file
	output      string // --output: print only this number

	// gorxe's own
	json       bool
	counters   bool
	faults     string
	cpuProfile string
	exectrace  string

	help, version bool
}

// testServer reports whether this side runs the server's part of the
// test: the side without a server name, or with --reversed the one with
// it (perftest's machine, which decides its output too).
func (r *perfRun) testServer() bool { return (r.server == "") != r.p.Reversed }

// perfOption is one row of perftest's option table, or one of gorxe's.
type perfOption = toolOption[perfRun]

// perfOptions returns the option table. Its order is the order -h lists
// the options in.
func perfOptions() []perfOption {
	str, num, numIn, flag := setString[perfRun], setInt[perfRun], setIntIn[perfRun], setTrue[perfRun]
	noop := func(*perfRun, string) error { return nil }
	const (
		no  = getopt.NoArg
		req = getopt.RequiredArg
	)
	opts := []perfOption{
		// What perftest's tests measure and how much.
		{'s', "size", req, honoured, false, "message size in bytes; K and M suffixes (-s 4K) as perftest reads them", func(r *perfRun, v string) error {
			n, err := parseSize(v)
			r.p.Size = n
			return err
		}},
		{'n', "iters", req, honoured, false, "messages (at least 5)", func(r *perfRun, v string) error {
			if err := parseInt(v, &r.p.Iters); err != nil {
				return err
			}
			if r.p.Iters < 5 || r.p.Iters > 100000000 {
				return fmt.Errorf("iteration num must be 5..100000000")
			}
			return nil
		}},
		{'a', "all", no, honoured, false, "every size from 2 bytes to 8 MiB", flag(func(r *perfRun) *bool { return &r.p.AllSize })},
		{'m', "mtu", req, honoured, false, "path MTU in bytes: 256 ... 4096, at most the port's active MTU (the default; 1024 with --link mem); the smaller of both sides' is used", num(func(r *perfRun) *int { return &r.mtu })},
		{'t', "tx-depth", req, honoured, false, "send work requests in flight (128; 1 for latency tests)", numIn(1, 15000, "Tx depth", func(r *perfRun) *int { return &r.p.TxDepth })},
		{'r', "rx-depth", req, honoured, false, "receives posted (send tests; 512)", numIn(1, 16384, "Rx depth", func(r *perfRun) *int { return &r.p.RxDepth })},
		{'Q', "cq-mod", req, honoured, false, "one signaled send in this many (100)", numIn(1, 1024, "CQ moderation", func(r *perfRun) *int { return &r.p.CQMod })},
		{'A', "atomic_type", req, honoured, false, "FETCH_AND_ADD or CMP_AND_SWAP (atomic tests)", func(r *perfRun, v string) error {
			if !r.test.IsAtomic() {
				return fmt.Errorf("only the atomic tests have an atomic type")
			}
			r.p.Atomic = v
			return nil
		}},
		{'u', "qp-timeout", req, honoured, false, "local ACK timeout exponent: 4.096 us x 2^u (14)", func(r *perfRun, v string) error {
			var n int
			if err := parseInt(v, &n); err != nil {
				return err
			}
			if n < 0 || n > 31 {
				return fmt.Errorf("the timeout exponent is 0..31")
			}
			r.timeout = uint(n)
			return nil
		}},
		{'e', "events", no, honoured, false, "sleep on CQ events, never busy poll (both sides)", flag(func(r *perfRun) *bool { return &r.p.Events })},

		// Where the test runs.
		{'p', "port", req, honoured, false, "TCP port of the out-of-band exchange (18515)", numIn(0, 65535, "Port", func(r *perfRun) *int { return &r.tcpPort })},
		{'d', "ib-dev", req, honoured, false, "the device's name: gorxe has one device per process and gives it this name (rxe0, mlx5_0 ...)", str(func(r *perfRun) *string { return &r.device })},
		{'i', "ib-port", req, honoured, false, "the device's port: gorxe's device has one, port 1", func(r *perfRun, v string) error {
			if err := parseInt(v, &r.ibPort); err != nil {
				return err
			}
			if r.ibPort != 1 {
				return fmt.Errorf("gorxe's device has one port, port 1")
			}
			return nil
		}},
		{'x', "gid-index", req, honoured, false, "GID index, in the interface's GID table as rxe lays it out (gorxe show_gids); on the tap link, 0 is its link-local address and 1 its --ip, as on rxe", func(r *perfRun, v string) error {
			if err := parseInt(v, &r.gidIndex); err != nil {
				return err
			}
			if r.gidIndex < 0 || r.gidIndex > 255 {
				return fmt.Errorf("the GID index is 0..255")
			}
			return nil
		}},
		{0, "ipv6", no, honoured, false, "without -x, choose an IPv6 GID rather than an IPv4 one", flag(func(r *perfRun) *bool { return &r.ipv6 })},
		{0, "ipv6-addr", no, honoured, false, "the server's name is an IPv6 address (gorxe takes either kind anyway)", noop},
		{0, "bind_source_ip", req, honoured, false, "source address of the out-of-band TCP connection", str(func(r *perfRun) *string { return &r.bindIP })},
		{'c', "connection", req, honoured, false, "transport: RC, UC for write and send tests, or UD for send tests (XRC, DC and SRD are not supported)", func(r *perfRun, v string) error {
			switch v {
			case "RC":
				r.p.Connection = qp.TypeRC
				return nil
			case "UC":
				if r.test.IsAtomic() || r.test == perftest.ReadBW || r.test == perftest.ReadLat {
					return errors.New("UC connection not possible in READ/ATOMIC verbs") // perftest's words
				}
				r.p.Connection = qp.TypeUC
				return nil
			case "UD":
				if r.test != perftest.SendBW && r.test != perftest.SendLat {
					return errors.New("UD connection only possible in SEND verb") // perftest's words
				}
				r.p.Connection = qp.TypeUD
				return nil
			case "XRC", "DC", "SRD":
				return fmt.Errorf("%w: %s transport is not in soft-RoCE either; gorxe has RC queue pairs", errRefused, v)
			}
			return fmt.Errorf("unknown connection type %q: RC, UC, UD, XRC, DC or SRD", v)
		}},
		{'F', "CPU-freq", no, accepted, false, "do not fail on CPU frequency warnings (gorxe has none)", noop},
		{'V', "version", no, honoured, false, "print the perftest version gorxe speaks", flag(func(r *perfRun) *bool { return &r.version })},
		{'h', "help", no, honoured, false, "this list", flag(func(r *perfRun) *bool { return &r.help })},

		// Accepted: they change only what perftest does on its own host,
		// in ways that have no counterpart in gorxe.
		{'X', "vector", req, accepted, false, "completion vector", noop},
		{'S', "sl", req, accepted, false, "service level (no wire effect on RoCE v2)", noop},
		{'W', "report-counters", req, honoured, false, "after each result, print how much these counters grew: hw_counters/NAME,... (the names --counters prints)", func(r *perfRun, v string) error {
			w, err := parseCounterWatch(v)
			r.watch = w
			return err
		}},
		{0, "use_old_post_send", no, accepted, false, "the older post-send verbs", noop},
		{0, "no_ddp", no, accepted, false, "no out-of-order receive WRs (a ConnectX-7 capability; gorxe, like rxe, has none)", noop},
		{0, "use_hugepages", no, accepted, false, "buffers on huge pages (gorxe's are Go memory)", noop},
		{0, "odp", no, accepted, false, "on-demand paging (gorxe's memory is always resident)", noop},
		{0, "use-null-mr", no, accepted, false, "a null memory region (ibv_alloc_null_mr), which drops what is written to it", noop},
		{0, "wait_destroy", req, honoured, false, "seconds to wait after the run before releasing the QPs and the device", numIn(0, math.MaxUint32, "wait_destroy", func(r *perfRun) *int { return &r.waitDestroy })},
		{0, "cqe_poll", req, accepted, false, "completions polled per call (gorxe polls in batches of its own)", noop},
		{0, "disable_dynamic_polling", no, accepted, false, "keep --cqe_poll's batch fixed", noop},
		{0, "no_lock", no, accepted, false, "no locks in posting and polling (a parent domain)", noop},
		{0, "no_enhanced_reorder", no, accepted, false, "as --no_ddp", noop},
		{0, "disable_pcie_relaxed", no, accepted, false, "no PCIe relaxed ordering (gorxe has no PCIe)", noop},
		{0, "pin_cores", req, accepted, false, "CPU affinity (set it with taskset)", noop},
		{0, "numa_node", req, accepted, false, "the NUMA node to run on (set it with numactl)", noop},
		{0, "disable_numa", no, accepted, false, "no NUMA binding", noop},
		{0, "dlid", req, accepted, false, "destination LID (no meaning on RoCE)", noop},
		{0, "pkey_index", req, honoured, false, "P_Key index: gorxe's table has one entry, index 0", func(r *perfRun, v string) error {
			var n int
			if err := parseInt(v, &n); err != nil {
				return err
			}
			if n != 0 {
				return fmt.Errorf("gorxe's P_Key table has one entry, index 0 (0xffff)")
			}
			return nil
		}},

		// Refused, each with the reason.
		{'O', "dualport", no, refused, false, "gorxe's device has one port", nil},
		{0, "report-per-port", no, refused, false, "gorxe's device has one port", nil},
		{'g', "mcg", no, refused, false, "perftest's multicast is not supported: its default MGID (ff01:0:0:2:c985::) is interface-local, which RoCE v2 cannot carry between hosts; gorxe mckey sends to IPv4 groups", nil},
		{'M', "MGID", req, refused, false, "perftest's multicast (-g) is not supported; gorxe mckey sends to IPv4 groups", nil},
		{0, "connectionless", no, refused, false, "connectionless UD runs need perftest's multicast (-g), which gorxe does not support", nil},
		{0, "data_validation", no, refused, false, "perftest 6.29's data validation is not supported: use gorxe's --check", nil},
		{0, "data_validation_debug", no, refused, false, "perftest 6.29's data validation is not supported: use gorxe's --check", nil},
		{0, "dont_xchg_versions", no, refused, false, "perftest itself cannot run without the version exchange", nil},
		{0, "payload_file_path", req, refused, false, "payload files are not supported", nil},
		{0, "mmap", req, refused, false, "memory from a file is not supported", nil},
		{0, "mmap-offset", req, refused, false, "memory from a file is not supported", nil},
		{0, "use_cuda", req, refused, false, "GPU memory is not supported", nil},
		{0, "use_rocm", req, refused, false, "GPU memory is not supported", nil},
		{'B', "source_mac", req, refused, false, "raw Ethernet tests only", nil},
		{'E', "dest_mac", req, refused, false, "raw Ethernet tests only", nil},
		{'J', "dest_ip", req, refused, false, "raw Ethernet tests only", nil},
		{'j', "source_ip", req, refused, false, "raw Ethernet tests only (the out-of-band socket's source is --bind_source_ip)", nil},
		{'K', "dest_port", req, refused, false, "raw Ethernet tests only", nil},
		{'k', "source_port", req, refused, false, "raw Ethernet tests only", nil},
		{'Z', "server", no, refused, false, "raw Ethernet tests only: the role follows from the server's name", nil},
		{'P', "client", no, refused, false, "raw Ethernet tests only: the role follows from the server's name", nil},
		{'v', "mac_fwd", no, refused, false, "raw Ethernet tests only", nil},
		{'L', "hop_limit", req, refused, false, "--hop_limit (with -R) is not supported: gorxe's rdma_cm paths have hop limit 64", nil},

		// Timed runs and what is printed.
		{'D', "duration", req, honoured, false, "run for this many seconds instead of -n messages (both sides)", func(r *perfRun, v string) error {
			var n int
			if err := parseInt(v, &n); err != nil {
				return err
			}
			if n <= 0 {
				return fmt.Errorf("the duration must be positive")
			}
			r.p.Duration = time.Duration(n) * time.Second
			return nil
		}},
		{'f', "margin", req, honoured, false, "seconds at each end of a -D run that are not measured (a quarter of -D)", func(r *perfRun, v string) error {
			var n int
			if err := parseInt(v, &n); err != nil {
				return err
			}
			switch {
			case n < 0:
				return fmt.Errorf("the margin must not be negative")
			case n == 0:
				r.p.Margin = perftest.NoMargin
			default:
				r.p.Margin = time.Duration(n) * time.Second
			}
			return nil
		}},
		{0, "run_infinitely", no, honoured, false, "run until stopped, printing a report every -D seconds (5)", flag(func(r *perfRun) *bool { return &r.p.Infinite })},
		{0, "perform_warm_up", no, honoured, false, "send tx-depth messages before the measured run", flag(func(r *perfRun) *bool { return &r.p.WarmUp })},
		{'N', "noPeak", no, honoured, false, "do not measure the peak bandwidth", flag(func(r *perfRun) *bool { return &r.p.NoPeak })},
		{0, "report_gbits", no, honoured, false, "report bandwidth in Gb/s", flag(func(r *perfRun) *bool { return &r.p.ReportGbits })},
		{'H', "report-histogrm", no, honoured, false, "print every latency sample, sorted", flag(func(r *perfRun) *bool { return &r.p.Histogram })},
		{'U', "report-unsorted", no, honoured, false, "print every latency sample, in the order taken", flag(func(r *perfRun) *bool { return &r.p.Unsorted })},
		{'C', "report-cycles", no, honoured, false, "report latency in CPU cycles (from the CPU's MHz)", flag(func(r *perfRun) *bool { return &r.p.Cycles })},
		{'I', "inline_size", req, honoured, false, "send messages of at most this many bytes inline", num(func(r *perfRun) *int { return &r.p.Inline })},
		{'l', "post_list", req, honoured, false, "work requests posted per call", func(r *perfRun, v string) error {
			if err := parseInt(v, &r.p.PostList); err != nil {
				return err
			}
			if r.p.PostList < 1 {
				return fmt.Errorf("Send Post List size must be positive")
			}
			return nil
		}},
		{0, "recv_post_list", req, honoured, false, "receives posted per call (bandwidth tests; -n a multiple of it)", func(r *perfRun, v string) error {
			if err := parseInt(v, &r.p.RecvPostList); err != nil {
				return err
			}
			if r.p.RecvPostList < 1 {
				return fmt.Errorf("Receive Post List size must be positive")
			}
			return nil
		}},
		{0, "tclass", req, honoured, false, "traffic class (IP TOS byte) of every packet", func(r *perfRun, v string) error {
			var n int
			if err := parseInt(v, &n); err != nil {
				return err
			}
			if n < 0 || n > 255 {
				return fmt.Errorf("the traffic class is 0..255")
			}
			r.p.TrafficClass = uint8(n)
			return nil
		}},
		{0, "flow_label", req, honoured, false, "GRH flow label of each QP, in turn from a list (fl0,fl1,...): its IPv6 flow label, and its UDP source port (not on the udp link, whose packets leave from 4791)", func(r *perfRun, v string) error {
			var labels []uint32
			for _, f := range strings.Split(v, ",") {
				var n int
				if err := parseInt(f, &n); err != nil {
					return err
				}
				if n < 0 || n > perftest.MaxFlowLabel {
					return fmt.Errorf("a flow label is 20 bits, 0..%d", perftest.MaxFlowLabel)
				}
				labels = append(labels, uint32(n))
			}
			r.p.FlowLabels = labels
			return nil
		}},
		{0, "out_json", no, honoured, false, "also write the results as perftest's JSON, to perftest_out.json or --out_json_file", flag(func(r *perfRun) *bool { return &r.outJSON })},
		{0, "out_json_file", req, honoured, false, "the file --out_json writes", str(func(r *perfRun) *string { return &r.outJSONFile })},
		{0, "output", req, honoured, false, "print only one number: bandwidth or message_rate (bandwidth tests), latency (latency tests)", func(r *perfRun, v string) error {
			if err := perftest.CheckOutput(r.test, v); err != nil {
				return err
			}
			r.output = v
			return nil
		}},
		{'q', "qp", req, honoured, false, "queue pairs (bandwidth tests), posted to in turn", numIn(1, perftest.MaxQPs, "num of Qps", func(r *perfRun) *int { return &r.p.NumQPs })},
		{'R', "rdma_cm", no, honoured, false, "connect the QPs with rdma_cm, and exchange over rdma_cm instead of TCP, on -p's port", func(r *perfRun, _ string) error {
			r.p.RDMACM, r.p.CommRDMACM = true, true
			return nil
		}},
		{'z', "comm_rdma_cm", no, honoured, false, "exchange over rdma_cm instead of TCP, on -p's port; the QPs are connected from the keys", flag(func(r *perfRun) *bool { return &r.p.CommRDMACM })},
		{'T', "tos", req, honoured, false, "type of service of the rdma_cm QPs (with -R): their traffic class", func(r *perfRun, v string) error {
			var n int
			if err := parseInt(v, &n); err != nil {
				return err
			}
			if n < 0 || n > 256 {
				return fmt.Errorf("TOS should be between 0 and 256") // perftest's range
			}
			r.tos = n
			return nil
		}},
		{'w', "limit_bw", req, honoured, false, "fail (exit 1) unless the average bandwidth reaches this, in the report's unit", func(r *perfRun, v string) error {
			return parseLimit(v, "Invalid Minimum BW Limit", &r.verify.MinBW, &r.verify.CheckBW)
		}},
		{'y', "limit_msgrate", req, honoured, false, "fail (exit 1) unless the message rate reaches this many Mpps", func(r *perfRun, v string) error {
			return parseLimit(v, "Invalid Minimum msgRate Limit", &r.verify.MinMsgRate, &r.verify.CheckMsgRate)
		}},
		{0, "retry_count", req, honoured, false, "retry count of the QPs rdma_cm connects: -R's test QPs, for timeouts and RNR NAKs, and the exchange's QP (-R, -z), for timeouts (7; 0 is none, above 7 is 7)", func(r *perfRun, v string) error {
			n, err := parseNonNegative(v, "Retry Count")
			if err != nil {
				return err
			}
			r.p.RetryCount = n
			if n == 0 {
				r.p.RetryCount = perftest.NoRetries
			}
			return nil
		}},
		{0, "cpu_util", no, honoured, false, "with -D, report the machine's CPU use over the sample window (user time against user and idle, /proc/stat)", flag(func(r *perfRun) *bool { return &r.p.CPUUtil })},
		{0, "latency_gap", req, honoured, false, "write_lat: spin this many microseconds before each post (each side; the latency includes it)", func(r *perfRun, v string) error {
			n, err := parseNonNegative(v, "Latency gap time")
			if err != nil {
				return err
			}
			r.p.LatencyGap = time.Duration(n) * time.Microsecond
			return nil
		}},
		{0, "rate_limit", req, honoured, false, "hold the sender to this rate, in --rate_units (a one-way bandwidth test's client; perftest's SW limiter)", func(r *perfRun, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f > 0) || math.IsInf(f, 0) {
				return fmt.Errorf("Rate limit must be non-negative floating point number") // perftest's words
			}
			r.p.RateLimit.Rate, r.rateLimit = f, v
			return nil
		}},
		{0, "rate_units", req, honoured, false, "what --rate_limit counts: g (Gb/s, the default), M (MiB/s) or p (messages a second)", func(r *perfRun, v string) error {
			switch v {
			case "g", "M", "p":
				r.p.RateLimit.Unit = perftest.RateUnit(v[0])
				return nil
			}
			return fmt.Errorf("Invalid rate limit units. Please use M,g or p") // perftest's words
		}},
		{0, "rate_limit_type", req, honoured, false, "SW paces the posts; HW and PP (a RoCE NIC's static rate, raw Ethernet's packet pacing) are refused as perftest refuses them on RoCE", func(r *perfRun, v string) error {
			switch v {
			case "SW", "HW", "PP":
				r.rateLimitType = v
				return nil
			}
			return fmt.Errorf("Invalid rate limit type flag. Please use HW, SW or PP.") // perftest's words
		}},
		{0, "burst_size", req, honoured, false, "messages a rate-limited burst (tx depth)", numIn(0, math.MaxInt32, "Burst size", func(r *perfRun) *int { return &r.p.RateLimit.Burst })},
		{0, "typical_pkt_size", req, honoured, false, "packet size of packet pacing (PP, raw Ethernet only)", numIn(0, 0xFFFF, "Typical pkt size", func(r *perfRun) *int { return &r.typicalPktSize })},
		{'b', "bidirectional", no, honoured, false, "both sides send (bandwidth tests); each prints the sum", flag(func(r *perfRun) *bool { return &r.p.Duplex })},
		{0, "reversed", no, honoured, false, "the sides swap roles: the server sends and the client receives (give it to both sides)", flag(func(r *perfRun) *bool { return &r.p.Reversed })},
		{0, "report-both", no, honoured, false, "with -b, also print each side's own results (Local, Remote)", flag(func(r *perfRun) *bool { return &r.reportBoth })},
		{'o', "outs", req, honoured, false, "outstanding READs and atomics offered to the peer (READ and atomic tests)", num(func(r *perfRun) *int { return &r.p.OutReads })},
		{0, "write_with_imm", no, honoured, false, "RDMA WRITE with immediate (write_bw, write_lat; a perftest peer needs 6.20 or later)", flag(func(r *perfRun) *bool { return &r.p.WithImm })},
		{0, "send_with_imm", no, honoured, false, "SEND with immediate (send tests; both sides)", flag(func(r *perfRun) *bool { return &r.p.WithImm })},
		{0, "mr_per_qp", no, honoured, false, "one memory region per QP", flag(func(r *perfRun) *bool { return &r.p.MRPerQP })},
		{0, "use-srq", no, honoured, false, "the receiving side's QPs share one receive queue of rx-depth receives (send tests)", flag(func(r *perfRun) *bool { return &r.p.UseSRQ })},

		// gorxe's own options.
		{0, "check", no, honoured, true, "fill the buffers with a pattern and verify every byte (and atomic result) that arrived", flag(func(r *perfRun) *bool { return &r.p.Check })},
		{0, "json", no, honoured, true, "print each result as one JSON object of gorxe's", flag(func(r *perfRun) *bool { return &r.json })},
		{0, "counters", no, honoured, true, "at exit, print the device's counters, named as rxe's hw_counters", flag(func(r *perfRun) *bool { return &r.counters })},
		{0, "fault", req, honoured, true, "faults of the in-memory fabric, e.g. drop=0.01,reorder=8,dup=0.01,corrupt=0.001,delay=100us,ecn=0.1,seed=1", str(func(r *perfRun) *string { return &r.faults })},
		{0, "window", req, honoured, true, "requester window in PSNs (256)", num(func(r *perfRun) *int { return &r.p.Window })},
		{0, "give-up", req, honoured, true, "fail when no completion arrives for this long (10s; perftest waits forever)", setPositiveDuration(func(r *perfRun) *time.Duration { return &r.p.GiveUp })},
		{0, "cpuprofile", req, honoured, true, "write a Go CPU profile of the run to this file", str(func(r *perfRun) *string { return &r.cpuProfile })},
		{0, "exectrace", req, honoured, true, "write a Go execution trace of the run to this file", str(func(r *perfRun) *string { return &r.exectrace })},
	}
	// gorxe's own options that choose the link.
	return append(opts, linkOptions(func(r *perfRun) *linkFlags { return &r.link },
		"how packets travel: udp (a kernel UDP socket, the default), tap (a TAP device on which gorxe is a whole host), xdp (AF_XDP on --dev's interface, root), mem (both sides of the test in this process, no network)",
		"this host's address for the udp and tap links, ADDR or ADDR/PREFIX; tap needs the prefix (udp default: the address -x names, or the kernel's route to the server)")...)
}

// otherPerftestOptions are the rest of perftest's long options (HEAD's
// table, perftest_parameters.c): raw Ethernet, accelerator memory and
// vendor extensions. They are all refused, and all listed, so that a
// prefix of a long option means in gorxe what it means in perftest.
var otherPerftestOptions = []struct {
	names  string
	arg    getopt.HasArg
	reason string
}{
	{"force-link remote_mac local_mac remote_ip local_ip remote_port local_port ethertype flows flows_burst reply_every vlan_pcp", getopt.RequiredArg, "raw Ethernet tests only"},
	{"use_rss tcp vlan_en raw_ipv6 promiscuous sniffer raw_mcast", getopt.NoArg, "raw Ethernet tests only"},
	{"use_cuda_bus_id cuda_mem_type use_musa use_musa_bus_id use_neuron use_hl use_mlu use_opencl opencl_platform_id use_ib_dm_dmabuf gpu_touch", getopt.RequiredArg, "accelerator memory is not supported"},
	{"use_cuda_dmabuf use_cuda_pcie_mapping use_data_direct use_musa_dmabuf use_musa_pcie_mapping use_rocm_dmabuf use_neuron_dmabuf use_mlu_dmabuf", getopt.NoArg, "accelerator memory is not supported"},
	{"aes_block_size kek_path credentials_path data_enc_keys_number data_enc_key_app_path log_dci_streams log_active_dci_streams congest_type tph_mem cpu_id ph", getopt.RequiredArg, "a vendor extension gorxe does not have"},
	{"aes_xts encrypt_on_tx sig_before use_ooo unsolicited_write sig_offload", getopt.NoArg, "a vendor extension gorxe does not have"},
}

// parsePerf parses a perftest command line for test t. Like perftest it
// refuses an option given twice.
func parsePerf(t perftest.Test, args []string) (*perfRun, error) {
	r := &perfRun{
		test:     t,
		p:        perftest.Params{Test: t},
		tcpPort:  perftest.DefaultPort,
		ibPort:   1,
		gidIndex: -1,
		timeout:  14,
		tos:      -1,
		link:     linkFlags{port: wire.UDPPort},
	}
	table := perfOptions()
	for _, g := range otherPerftestOptions {
		for _, name := range strings.Fields(g.names) {
			table = append(table, perfOption{long: name, arg: g.arg, what: refused, help: g.reason})
		}
	}
	operands, err := parseOptions(table, r, args, true)
	if err != nil {
		return r, err
	}
	if r.help || r.version {
		return r, nil
	}
	switch len(operands) {
	case 0:
	case 1:
		r.server = operands[0]
	default:
		return r, fmt.Errorf("invalid command line: one server name at most, got %q", operands)
	}
	if r.link.kind == "" {
		r.link.kind = "udp" // as perftest: a server without a name waits for a client
	}
	if r.tos >= 0 {
		if !r.p.RDMACM {
			return r, fmt.Errorf("%w: TOS only valid for rdma_cm based QP and RawEth QP", errRefused) // perftest's words
		}
		if r.tos > 255 {
			return r, fmt.Errorf("--tos %d: the traffic class is one byte", r.tos)
		}
		r.p.TrafficClass = uint8(r.tos)
	}
	if err := r.link.validateCC(); err != nil {
		return r, err
	}
	r.p.CC, r.p.CCParams, r.p.LineRate, r.p.PacingBurst = r.link.cc, r.link.ccParams, r.link.lineRate, r.link.burst
	return r, nil
}

// parseInt reads an integer as perftest's CHECK_VALUE does (strtol with
// base 0: 0x10 is 16, 010 is 8), refusing trailing garbage.
func parseInt(v string, dst *int) error {
	n, err := strconv.ParseInt(cNumber(v), 0, 64)
	if err != nil || strings.Contains(v, "_") {
		return fmt.Errorf("not a number")
	}
	*dst = int(n)
	return nil
}

// cNumber makes a C integer literal one Go reads the same way: strtol's
// leading-zero octal ("010") is Go's "0o10".
func cNumber(v string) string {
	s := strings.TrimPrefix(strings.TrimPrefix(v, "-"), "+")
	if len(s) > 1 && s[0] == '0' && s[1] >= '0' && s[1] <= '7' {
		return v[:len(v)-len(s)] + "0o" + s[1:]
	}
	return v
}

// parseSize reads -s as perftest does: a number (base 0), optionally
// followed by K (KiB) or M (MiB); gorxe also takes G. perftest refuses
// sizes below 1.
func parseSize(v string) (int, error) {
	factor := 1
	switch {
	case strings.HasSuffix(v, "K"):
		factor, v = 1<<10, v[:len(v)-1]
	case strings.HasSuffix(v, "M"):
		factor, v = 1<<20, v[:len(v)-1]
	case strings.HasSuffix(v, "G"):
		factor, v = 1<<30, v[:len(v)-1]
	}
	var n int
	if err := parseInt(v, &n); err != nil {
		return 0, err
	}
	if n < 1 || n > (1<<31-1)/factor {
		return 0, fmt.Errorf("message size must be 1..%d", 1<<31-1)
	}
	return n * factor, nil
}

// perfUsage prints -h: the synopsis, then the options by what gorxe does
// with them.
func perfUsage(w io.Writer, name string, t perftest.Test) {
	fmt.Fprintf(w, "Usage: %s [options] [SERVER]\n\n", name)
	fmt.Fprintf(w, "Measures as perftest's ib_%s does, with perftest's command line. Run it\n", t)
	fmt.Fprintf(w, "without SERVER on one host (the server) and with the server's address on the\n")
	fmt.Fprintf(w, "other (the client); either side may be stock perftest. With --link mem, both\n")
	fmt.Fprintf(w, "sides run in this process over an in-memory fabric, with no network.\n")
	printOptions(w, perfOptions(), "perftest")
}

// parseNonNegative reads an integer that perftest's
// CHECK_VALUE_NON_NEGATIVE takes, refusing a negative one as what's.
func parseNonNegative(v, what string) (int, error) {
	var n int
	if err := parseInt(v, &n); err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("%s must be non-negative", what)
	}
	return n, nil
}

// parseLimit reads a limit of -w or -y into limit and turns check on.
// perftest refuses a negative one with refusal.
func parseLimit(v, refusal string, limit *float64, check *bool) error {
	f, err := strconv.ParseFloat(v, 64)
	switch {
	case err != nil || math.IsNaN(f) || math.IsInf(f, 0):
		return fmt.Errorf("not a number")
	case f < 0:
		return errors.New(refusal)
	}
	*limit, *check = f, true
	return nil
}

// hwRates are the --rate_limit values perftest's HW limiter takes, as its
// RATE_VALUES table writes them (ibv_rate's, in Gb/s).
var hwRates = strings.Fields("2.5 5 10 14 20 25 28 30 40 50 56 60 80 100 112 120 168 200 300 400 600")

// resolveRateLimit settles the rate limiter of p, to which Defaults has
// given its tx depth, as perftest's force_dependencies and QP set-up do:
// --rate_limit alone asks for the HW limiter, which perftest tries and
// then, on a RoCE device (any device whose link layer is not InfiniBand),
// replaces by the SW one, saying so; asked for by name, HW fails there,
// and PP is raw Ethernet's. The SW limiter runs in run_iter_bw only, so a
// latency test or a -b run keeps the flags and runs unlimited, as
// perftest's does. Notes go to stderr.
func (r *perfRun) resolveRateLimit(p *perftest.Params, stderr io.Writer) error {
	l := &p.RateLimit
	kind := r.rateLimitType
	if kind == "" && l.On() {
		kind = "HW" // "if not specified, choose HW rate limiter as default"
	}
	switch {
	case kind != "" && p.Infinite:
		return fmt.Errorf("run_infinitely does not support rate limit feature yet")
	case l.Burst > 0 && kind == "":
		return fmt.Errorf("Can't enable burst mode when rate limiter is off")
	case r.typicalPktSize != 0 && kind != "PP":
		return fmt.Errorf("Typical packet size only supports PP rate limiter")
	case kind == "":
		return nil
	}
	if l.Burst == 0 && kind == "SW" {
		fmt.Fprintf(stderr, " Setting burst size to tx depth = %d\n", p.TxDepth)
	}
	switch kind {
	case "PP":
		return fmt.Errorf("%w: Packet Pacing is only supported for Raw Ethernet", errRefused)
	case "SW":
		if p.Test.IsLatency() || p.Test.IsAtomic() || p.Duplex && p.Test == perftest.SendBW {
			return fmt.Errorf("SW Rate limiter can't be executed on non-BW, ATOMIC or bidirectional SEND / SEND_IMM tests")
		}
		if !l.On() {
			return fmt.Errorf("--rate_limit_type SW needs a --rate_limit")
		}
	case "HW":
		switch {
		case p.RDMACM:
			return fmt.Errorf("HW rate limit isn't supported yet with rdma_cm scenarios")
		case l.On() && l.Unit == perftest.RatePPS:
			return fmt.Errorf("Failed: pps rate limit units is not supported when setting HW rate limit")
		case l.On() && !slices.Contains(hwRates, r.rateLimit):
			return fmt.Errorf("The input value for hw rate limit is not supported: Failed: Unknown rate limit value (HW takes %s Gbps)", strings.Join(hwRates, ", "))
		case r.rateLimitType == "HW":
			return fmt.Errorf("%w: The QP failed to accept HW rate limit (a static rate is InfiniBand's; gorxe's link layer is Ethernet, as every RoCE device's)", errRefused)
		}
		fmt.Fprintf(stderr, "The QP failed to accept HW rate limit, providing SW rate limit\n")
	}
	if p.Test.IsLatency() || p.Duplex {
		*l = perftest.RateLimit{} // perftest's run_iter_lat and run_iter_bi do not pace
	}
	return nil
}

package qperf

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/trace"
)

// The bytes of a request as qperf 0.4.11 encodes rc_bw's for its server
// with -cm1 and the defaults: every field little endian, in order.
func TestRequestLayout(t *testing.T) {
	r := Request{VerMaj: 0, VerMin: 4, VerInc: 11, Index: 13, MsgSize: 65536, Time: 2, Timeout: 5, UseCM: 1, ID: "rxe0:1"}
	b := r.Marshal()
	if len(b) != 200 {
		t.Fatalf("%d bytes, qperf's REQ is 200", len(b))
	}
	want := map[int][]byte{
		0:  {0, 0, 4, 0, 11, 0, 13, 0}, // versions and the index
		24: {0, 0, 1, 0},               // msg_size 65536 after access_recv, affinity, alt_port, flip
		60: {2, 0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0},
		72: []byte("rxe0:1\x00"),
	}
	for off, w := range want {
		if got := b[off : off+len(w)]; !bytes.Equal(got, w) {
			t.Errorf("bytes at %d = % x, want % x", off, got, w)
		}
	}
	got, err := ParseRequest(b)
	if err != nil || got != r {
		t.Fatalf("ParseRequest = %+v, %v; want %+v", got, err, r)
	}
	if Tests[r.Index] != "rc_bw" || testIndex("ver_rc_fetch_add") != 32 || testIndex("rc_rdma_write_poll_lat") != 21 {
		t.Fatalf("the test table is not qperf's: rc_bw at %d", testIndex("rc_bw"))
	}
}

func TestVersionMismatch(t *testing.T) {
	old := Request{VerMaj: 0, VerMin: 3, VerInc: 7}
	_, err := ParseRequest(old.Marshal())
	if !errors.Is(err, ErrVersion) || err.Error() != "upgrade qperf on client from 0.3.7 to 0.4.11" {
		t.Fatalf("err = %v", err)
	}
	newer := Request{VerMaj: 1}
	if _, err := ParseRequest(newer.Marshal()); err == nil || err.Error() != "upgrade qperf on server from 0.4.11 to 1.0.0" {
		t.Fatalf("err = %v", err)
	}
	same := Request{VerMaj: 0, VerMin: 4, VerInc: 9} // the incremental version may differ
	if _, err := ParseRequest(same.Marshal()); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseRequest(make([]byte, 10)); err == nil {
		t.Fatal("a short request was taken")
	}
}

func TestNodeAndStat(t *testing.T) {
	n := Node{VAddr: 0x7f0012345000, QPN: 0x11, PSN: 0xabcdef, RKey: 0x1234, RdAtomic: 128}
	b := n.Marshal()
	if len(b) != 40 || b[0] != 0x00 || b[1] != 0x50 || b[12] != 0x11 || b[24] != 0x34 || b[32] != 128 {
		t.Fatalf("node % x", b)
	}
	if got, err := ParseNode(b); err != nil || got != n {
		t.Fatalf("ParseNode = %+v, %v", got, err)
	}
	s := Stat{CPUs: 2, Ticks: 100, MaxCQEs: 7, R: UStat{Bytes: 1 << 40, Msgs: 3, Errs: 1}}
	s.Start[tReal], s.End[tSteal] = 5, 9
	sb := s.Marshal()
	if len(sb) != 256 || sb[4] != 100 || sb[12] != 5 || sb[12+17*8] != 9 {
		t.Fatalf("stat % x", sb[:24])
	}
	if got, err := ParseStat(sb); err != nil || got != s {
		t.Fatalf("ParseStat = %+v, %v", got, err)
	}
	c := Conf{Node: "host", CPU: "2 Cores: AMD EPYC 2.1GHz", OS: "Linux 6.1", Qperf: "0.4.11"}
	cb := c.Marshal()
	if got, err := ParseConf(cb); len(cb) != 256 || err != nil || got != c || cb[64] != '2' {
		t.Fatalf("conf round trip: %+v, %v", got, err)
	}
}

// FuzzMessages feeds the peer's messages, of any length and content, to
// every parser: each returns an error for a message of the wrong length
// and never panics; a message of the right length parses and, but for
// the strings' padding, marshals back to itself.
func FuzzMessages(f *testing.F) {
	n := Node{VAddr: 0x7f0012345000, QPN: 0x11, PSN: 0xabcdef, RKey: 0x1234, RdAtomic: 128}
	f.Add(n.Marshal())
	f.Add((&Stat{CPUs: 2, Ticks: 100}).Marshal())
	f.Add((&Request{VerMaj: VerMajor, VerMin: VerMinor, ID: "x"}).Marshal())
	f.Add([]byte{})
	f.Add(make([]byte, 39))
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := ParseRequest(b); (err == nil) != (len(b) == reqLen) && !errors.Is(err, ErrVersion) {
			t.Fatalf("ParseRequest of %d bytes: %v", len(b), err)
		} else if err == nil && len(r.Marshal()) != reqLen {
			t.Fatal("a request marshals to another length")
		}
		if n, err := ParseNode(b); (err == nil) != (len(b) == nodeLen) {
			t.Fatalf("ParseNode of %d bytes: %v", len(b), err)
		} else if err == nil && !bytes.Equal(n.Marshal()[:36], b[:36]) {
			t.Fatalf("node % x marshals to % x", b, n.Marshal())
		}
		if s, err := ParseStat(b); (err == nil) != (len(b) == statLen) {
			t.Fatalf("ParseStat of %d bytes: %v", len(b), err)
		} else if err == nil && !bytes.Equal(s.Marshal()[:252], b[:252]) {
			t.Fatal("a stat does not marshal back to itself")
		}
		if _, err := ParseConf(b); (err == nil) != (len(b) == confLen) {
			t.Fatalf("ParseConf of %d bytes: %v", len(b), err)
		}
	})
}

func TestParse(t *testing.T) {
	c, err := Parse(nil)
	if err != nil || !c.Server || c.ListenPort != DefaultPort {
		t.Fatalf("no arguments: %+v, %v", c, err)
	}
	if c, err = Parse([]string{"-lp", "5000", "-D"}); err != nil || !c.Server || c.ListenPort != 5000 || !c.Debug {
		t.Fatalf("-lp -D: %+v, %v", c, err)
	}
	c, err = Parse([]string{"-cm1", "host", "-m", "4K", "rc_bw", "-t", "1m", "rc_lat", "-vvu", "-rto", "9"})
	if err != nil || c.Server || c.Host != "host" || strings.Join(c.Tests, ",") != "rc_bw,rc_lat" {
		t.Fatalf("client: %+v, %v", c, err)
	}
	if p := c.p; p.loc[parMsgSize].n != 4096 || p.rem[parUseCM].n != 1 || p.loc[parTime].n != 60 || p.loc[parTimeout].n != 0 || p.rem[parTimeout].n != 9 || c.Verbose.Used != 2 {
		t.Fatalf("parameters: %+v %+v", c.p.loc, c.p.rem)
	}
	if c, err = Parse([]string{"h", "-P", "1", "rc_bw"}); err != nil || len(c.Warnings) != 1 || c.p.loc[parPollMode].n != 1 {
		t.Fatalf("renamed -P: %+v, %v", c, err)
	}
	if c, err = Parse([]string{"h", "-oo", "msg_size:1:64K:*16", "rc_bw"}); err != nil || len(c.loops) != 1 {
		t.Fatalf("-oo: %v", err)
	}
	var sizes []uint32
	c.runs(func() error { sizes = append(sizes, c.p.loc[parMsgSize].n); return nil })
	if len(sizes) != 5 || sizes[0] != 1 || sizes[4] != 65536 {
		t.Fatalf("the loop ran %v", sizes)
	}
	for _, bad := range [][]string{
		{"host", "rc_bogus"}, {"-zz"}, {"-m"}, {"host", "-m", "4Q", "rc_bw"}, {"-cm1"}, {"rc_bw"}, {"host"},
		{"host", "-sl", "16", "rc_bw"}, {"host", "-oo", "msg_size:1:2:*1", "rc_bw"}, {"host", "-oo", "nosuch:1:2:1", "rc_bw"},
		{"host", "-t", "-1", "rc_bw"}, {"-lp", "70000"},
	} {
		if _, err := Parse(bad); !errors.Is(err, ErrUsage) {
			t.Errorf("Parse(%q) = %v, want a usage error", bad, err)
		}
	}
}

func TestShow(t *testing.T) {
	c := &Command{Precision: 3}
	s := &shower{c: c}
	s.band('a', "bw", 2.3648e9)
	s.time('a', "latency", 26.84e-6)
	s.rate('a', "msg_rate", 21004)
	s.size('a', "msg_size", 65536)
	s.size('a', "big", 1536*1024)
	s.long('a', "msgs", 1234567)
	s.long('a', "few", 12345)
	s.str('a', "loc_node", "vm")
	var b bytes.Buffer
	s.flush(&b)
	want := `    bw        =    2.36 GB/sec
    latency   =    26.8 us
    msg_rate  =      21 K/sec
    msg_size  =      64 KiB (65,536)
    big       =    1.57 MB
    msgs      =    1.23 million
    few       =  12,345 
    loc_node  =  vm
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	c.UnifyUnits, c.Bits = true, true
	s.band('a', "bw", 2.3648e9)
	s.flush(&b)
	if !strings.HasSuffix(b.String(), "    bw  =  18918400000 bits/sec\n") {
		t.Fatalf("-uu -ub: %q", b.String())
	}
	if got := formatPrecision(0.000123456, 3); got != "0" {
		t.Fatalf("formatPrecision = %q", got)
	}
}

// memOpener opens devices on a fabric by address, one at a time at each.
func memOpener(t *testing.T, f *mem.Fabric) Opener { return memOpenerConfig(t, f, rnic.Config{}) }

// memOpenerConfig is memOpener with a device configuration.
func memOpenerConfig(t *testing.T, f *mem.Fabric, cfg rnic.Config) Opener {
	return func(local netip.Addr) (*rnic.Device, *cm.Manager, error) {
		l, err := f.NewLink(local)
		if err != nil {
			return nil, nil, err
		}
		cfg.Link = l
		dev, err := rnic.Open(cfg)
		if err != nil {
			l.Close()
			return nil, nil, err
		}
		m, err := cm.New(dev, cm.Config{})
		if err != nil {
			dev.Close()
			return nil, nil, err
		}
		return dev, m, nil
	}
}

// startServer runs a server on 127.0.0.2 and returns its port.
func startServer(t *testing.T, f *mem.Fabric, args ...string) (int, *bytes.Buffer) {
	c, err := Parse(append([]string{"-lp", "1"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	c.ListenPort = 0
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Server(ctx, c, Env{Open: memOpener(t, f), Stdout: &out, Stderr: &out, Listening: func(a net.Addr) { addr <- a }})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case a := <-addr:
		return a.(*net.TCPAddr).Port, &out.b
	case err := <-done:
		t.Fatalf("server: %v", err)
	}
	return 0, nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func runClient(t *testing.T, f *mem.Fabric, port int, args ...string) (string, string, error) {
	t.Helper()
	c, err := Parse(append([]string{"127.0.0.2", "-lp", strconv.Itoa(port), "-ws", "0"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = Client(ctx, c, Env{Open: memOpener(t, f), Stdout: &out, Stderr: &errs})
	return out.String(), errs.String(), err
}

// Every RC test between a gorxe client and a gorxe server: each prints
// its figure, and the counts behind it are the ones the test implies.
func TestRCTests(t *testing.T) {
	f := mem.NewFabric()
	port, _ := startServer(t, f)
	tests := []string{"rc_bw", "rc_bi_bw", "rc_lat", "rc_rdma_read_bw", "rc_rdma_read_lat", "rc_rdma_write_bw",
		"rc_rdma_write_lat", "rc_rdma_write_poll_lat", "rc_compare_swap_mr", "rc_fetch_add_mr", "ver_rc_compare_swap", "ver_rc_fetch_add"}
	out, errs, err := runClient(t, f, port, append([]string{"-cm1", "-t", "1", "-vvs"}, tests...)...)
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out, errs)
	}
	figure := map[string]string{"rc_bw": "bw", "rc_bi_bw": "bw", "rc_lat": "latency", "rc_rdma_read_bw": "bw",
		"rc_rdma_read_lat": "latency", "rc_rdma_write_bw": "bw", "rc_rdma_write_lat": "latency", "rc_rdma_write_poll_lat": "latency",
		"rc_compare_swap_mr": "msg_rate", "rc_fetch_add_mr": "msg_rate", "ver_rc_compare_swap": "msg_rate", "ver_rc_fetch_add": "msg_rate"}
	for _, test := range tests {
		re := regexp.MustCompile(`(?m)^` + test + `:\n    ` + figure[test] + ` +=  +[0-9.,]+ [A-Za-z/]+\n`)
		if !re.MatchString(out) {
			t.Errorf("no %s figure for %s in\n%s", figure[test], test, out)
		}
	}
	// rc_bw: the server received what the client sent, no errors.
	if !regexp.MustCompile(`(?s)rc_bw:.*send_errors += +0|rc_bw:\n    bw[^\n]*\n    msg_rate`).MatchString(out) {
		t.Errorf("rc_bw's report:\n%s", out)
	}
	if regexp.MustCompile(`errors +=  +[1-9]`).MatchString(out) || errs != "" {
		t.Errorf("errors:\n%s%s", out, errs)
	}
}

// A run keeps one device per local address for its life, as a NIC
// outlives the tests that use it: the client's tests and the server's
// requests each open one device, and each test's QP has a number of its
// own (a capture of several tests then tells their connections apart).
func TestOneDevicePerRun(t *testing.T) {
	f := mem.NewFabric()
	var mu sync.Mutex
	opens := map[string]int{}
	qpns := map[string][]uint32{}
	opener := func(side string) Opener {
		return func(local netip.Addr) (*rnic.Device, *cm.Manager, error) {
			mu.Lock()
			opens[side]++
			mu.Unlock()
			return memOpenerConfig(t, f, rnic.Config{Trace: func(e trace.Event) {
				if e.Kind == trace.State && e.To == "RTS" && e.QP != 1 {
					mu.Lock()
					qpns[side] = append(qpns[side], e.QP)
					mu.Unlock()
				}
			}})(local)
		}
	}
	c, err := Parse([]string{"-lp", "1"})
	if err != nil {
		t.Fatal(err)
	}
	c.ListenPort = 0
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan net.Addr, 1)
	done := make(chan error, 1)
	var sout syncBuffer
	go func() {
		done <- Server(ctx, c, Env{Open: opener("server"), Stdout: &sout, Stderr: &sout, Listening: func(a net.Addr) { addr <- a }})
	}()
	defer func() {
		cancel()
		<-done
	}()
	port := (<-addr).(*net.TCPAddr).Port
	for range 2 {
		c, err := Parse([]string{"127.0.0.2", "-lp", strconv.Itoa(port), "-ws", "0", "-cm1", "-n", "100", "rc_bw", "rc_bw"})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cctx, ccancel := context.WithTimeout(ctx, 60*time.Second)
		err = Client(cctx, c, Env{Open: opener("client"), Stdout: &out, Stderr: &out})
		ccancel()
		if err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if opens["client"] != 2 || opens["server"] != 1 {
		t.Errorf("devices opened: %v, want a client's 2 (one per run) and the server's 1", opens)
	}
	for _, side := range []string{"client", "server"} {
		seen := map[uint32]bool{}
		for _, q := range qpns[side] {
			seen[q] = true
		}
		if len(qpns[side]) != 4 || side == "server" && len(seen) != 4 || side == "client" && len(seen) != 2 {
			t.Errorf("%s's QPs in RTS: %#x; want 4 tests, each on a QP of its own within a device", side, qpns[side])
		}
	}
}

// -n counts rc_bw's messages: the server reports receiving exactly them.
func TestNoMsgs(t *testing.T) {
	f := mem.NewFabric()
	port, _ := startServer(t, f)
	out, errs, err := runClient(t, f, port, "-cm1", "-n", "5000", "-m", "1k", "-vvs", "rc_bw")
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out, errs)
	}
	for _, want := range []string{"send_msgs     =  5,000", "recv_msgs     =  5,000", "recv_bytes    =      5 MB"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	out, _, err = runClient(t, f, port, "-cm1", "-n", "5", "rc_lat")
	if err == nil || !strings.Contains(out, "would never end") {
		t.Fatalf("-n with rc_lat: %v\n%s", err, out)
	}
}

// Without -cm1 both sides refuse, each with the reason; an unknown
// test index and a test gorxe does not run get qperf's error, on the
// client's side as "server: ...".
func TestRefusals(t *testing.T) {
	f := mem.NewFabric()
	port, _ := startServer(t, f)
	out, _, err := runClient(t, f, port, "rc_bw")
	if err == nil || !strings.Contains(out, "use -cm1") {
		t.Fatalf("without -cm1: %v\n%s", err, out)
	}
	out, errs, err := runClient(t, f, port, "sctp_bw")
	if err == nil || !strings.Contains(out+errs, "not this one") {
		t.Fatalf("sctp_bw: %v\n%s%s", err, out, errs)
	}
	// A stock client without -cm1 reaches the server's refusal.
	conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.2", itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := Request{VerMaj: 0, VerMin: 4, VerInc: 11, Index: uint16(testIndex("rc_bw")), MsgSize: 65536, Time: 1, Timeout: 5}
	ct := newCtl(conn.(*net.TCPConn), 5, "server")
	if err := ct.send(req.Marshal(), "request data"); err != nil {
		t.Fatal(err)
	}
	_, err = ct.recv(4, "RDMA CM TCP IPv4 server port")
	var pe *PeerError
	if !errors.As(err, &pe) || !strings.Contains(pe.Msg, "use -cm1") {
		t.Fatalf("the server's answer to a request without rdma_cm: %v", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// conf and quit: the server answers with its host and stops on quit.
func TestConfAndQuit(t *testing.T) {
	f := mem.NewFabric()
	port, _ := startServer(t, f)
	out, _, err := runClient(t, f, port, "conf", "quit")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "rem_qperf  =  0.4.11") || !strings.Contains(out, "quit:") {
		t.Fatalf("conf:\n%s", out)
	}
	if _, _, err := runClient(t, f, port, "conf"); err == nil {
		t.Fatal("the server still answers after quit")
	}
}

// qperf's TCP and UDP tests, between the hosts' kernels: each prints its
// figures, the UDP bandwidth test both the sent and the received.
func TestSocketTests(t *testing.T) {
	f := mem.NewFabric()
	port, _ := startServer(t, f)
	out, errs, err := runClient(t, f, port, "-t", "1", "-vvs", "tcp_bw", "tcp_lat", "udp_bw", "udp_lat", "-sb", "256K")
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out, errs)
	}
	for _, want := range []string{
		`(?m)^tcp_bw:\n    bw +=  +[0-9.,]+ [KMG]B/sec\n`,
		`(?m)^tcp_lat:\n    latency +=  +[0-9.,]+ us\n`,
		`(?m)^udp_bw:\n    send_bw +=  +[0-9.,]+ [KMG]B/sec\n    recv_bw +=  +[0-9.,]+ [KMG]B/sec\n`,
		`(?m)^udp_lat:\n    latency +=  +[0-9.,]+ us\n`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("no %s in\n%s", want, out)
		}
	}
	// The UDP tests' clients may count sends or receives refused at the
	// end (ICMP port unreachable: the server's socket closed at the end
	// of its time, a moment before the client's, which goes on until its
	// own), as qperf counts them: a few, where an error in every round
	// trip would be as many as the messages.
	udp := regexp.MustCompile(`(?s)udp_bw:\n.*`)
	if strings.Contains(out, "warning") || regexp.MustCompile(`errors +=  +[1-9]`).MatchString(udp.ReplaceAllString(out, "")) {
		t.Errorf("warnings or errors:\n%s", out)
	}
	figure := func(name string) int {
		m := regexp.MustCompile(`(?s)udp_lat:\n.*?` + name + ` += +([0-9,]+) *\n`).FindStringSubmatch(out)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
		return n
	}
	if errs, msgs := figure("loc_recv_errors"), figure("loc_recv_msgs"); msgs == 0 || errs*20 > msgs {
		t.Errorf("udp_lat: %d receive errors in %d messages:\n%s", errs, msgs, out)
	}
}

// Options apply to the tests after them, as qperf runs each test when
// its parser meets it: the first tcp_lat runs with 1-byte messages and
// shows no parameters, the second with 100 bytes, shown by -vu.
func TestOptionsApplyInOrder(t *testing.T) {
	f := mem.NewFabric()
	port, _ := startServer(t, f)
	out, errs, err := runClient(t, f, port, "-t", "1", "tcp_lat", "-m", "100", "-vu", "tcp_lat")
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out, errs)
	}
	blocks := strings.Split(out, "tcp_lat:\n")
	if len(blocks) != 3 || strings.Contains(blocks[1], "msg_size") || !regexp.MustCompile(`msg_size +=  +100 bytes`).MatchString(blocks[2]) {
		t.Fatalf("output:\n%s", out)
	}
}

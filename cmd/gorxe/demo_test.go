package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// runDemoArgs runs "gorxe demo args..." and returns its exit status and
// output.
func runDemoArgs(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"demo"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// checkNoLeak fails the test if goroutines started after before outlive
// a short grace period.
func checkNoLeak(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before the demo:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

// packetLine matches a packet line of the demo's output.
var packetLine = regexp.MustCompile(`(?m)^  [AB] -> [AB]  `)

func TestDemo(t *testing.T) {
	before := runtime.NumGoroutine()
	code, out, errOut := runDemoArgs(t)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q\n%s", code, errOut, out)
	}
	checkNoLeak(t, before)
	for i, s := range demoScenes {
		if h := fmt.Sprintf("=== Scene %d: %s ===\n", i+1, s.title); !strings.Contains(out, h) {
			t.Errorf("no header %q", h)
		}
	}
	// Key lines, in the order they must appear: each is searched for after
	// the one before it.
	want := []string{
		`\[A qp 0x11\] state RESET -> INIT`,
		`\[B qp 0x11\] state RTR -> RTS`,
		`A -> B  RC_SEND_ONLY +qp=0x11 psn=1193046 ackreq payload=11 pad=1 "hello, RDMA"`,
		`B -> A  RC_ACKNOWLEDGE +qp=0x11 psn=1193046 aeth\(ACK credits=31 msn=1\)`,
		`=> B's receive buffer holds "hello, RDMA"`,
		`A -> B  RC_RDMA_WRITE_FIRST +qp=0x11 psn=1193047 reth\(va=0x[0-9a-f]+ rkey=0x[0-9a-f]{8} len=3000\) payload=1024\n`,
		`A -> B  RC_RDMA_WRITE_MIDDLE +qp=0x11 psn=1193048 payload=1024\n`,
		`A -> B  RC_RDMA_WRITE_LAST +qp=0x11 psn=1193049 ackreq payload=952\n`,
		`B -> A  RC_ACKNOWLEDGE +qp=0x11 psn=1193049 aeth\(ACK credits=31 msn=2\)`,
		`A -> B  RC_RDMA_READ_REQUEST +qp=0x11 psn=1193050 ackreq reth\(va=0x[0-9a-f]+ rkey=0x[0-9a-f]{8} len=3000\)\n`,
		`B -> A  RC_RDMA_READ_RESPONSE_FIRST +qp=0x11 psn=1193050 aeth\(ACK credits=31 msn=3\) payload=1024`,
		`B -> A  RC_RDMA_READ_RESPONSE_MIDDLE +qp=0x11 psn=1193051 payload=1024`,
		`B -> A  RC_RDMA_READ_RESPONSE_LAST +qp=0x11 psn=1193052 aeth\(ACK credits=31 msn=3\) payload=952`,
		`A -> B  RC_FETCH_ADD +qp=0x11 psn=1193053 ackreq atomiceth\(va=0x[0-9a-f]+ rkey=0x[0-9a-f]{8} add=5\)`,
		`B -> A  RC_ATOMIC_ACKNOWLEDGE +qp=0x11 psn=1193053 aeth\(ACK credits=31 msn=4\) orig=100\n`,
		`=> FETCH_AND_ADD 5: A's local result \(the original value\) 100, B's word now 105`,
		`A -> B  RC_COMPARE_SWAP +qp=0x11 psn=1193054 ackreq atomiceth\(va=0x[0-9a-f]+ rkey=0x[0-9a-f]{8} compare=105 swap=7\)`,
		`B -> A  RC_ATOMIC_ACKNOWLEDGE +qp=0x11 psn=1193054 aeth\(ACK credits=31 msn=5\) orig=105\n`,
		`=> COMPARE_AND_SWAP compare=105 swap=7: A's local result \(the original value\) 105, B's word now 7`,
		`A -> B  RC_RDMA_WRITE_MIDDLE +qp=0x11 psn=1193057 payload=1024   \*\* dropped by the fabric \*\*\n`,
		`A -> B  RC_RDMA_WRITE_LAST +qp=0x11 psn=1193059 ackreq payload=904\n`,
		`\[B qp 0x11\] NAK PSN sequence error for RC_RDMA_WRITE_MIDDLE PSN 1193058, expected 1193057\n`,
		`B -> A  RC_ACKNOWLEDGE +qp=0x11 psn=1193057 aeth\(NAK PSN_SEQ_ERROR msn=5\)`,
		`\[A qp 0x11\] NAK PSN sequence error received at PSN 1193057\n`,
		`\[A qp 0x11\] go back to PSN 1193057: NAK\n`,
		`A -> B  RC_RDMA_WRITE_MIDDLE +qp=0x11 psn=1193057 payload=1024\n`,
		`A -> B  RC_RDMA_WRITE_LAST +qp=0x11 psn=1193059 ackreq payload=904\n`,
		`B -> A  RC_ACKNOWLEDGE +qp=0x11 psn=1193059 aeth\(ACK credits=31 msn=6\)`,
		`=> A rcvd_seq_err=1 `,
		`=> A completer_retry_err=1 `,
		`=> A retransmit_timeouts=0 `,
		`=> B out_of_seq_request=2 `,
		`=> B duplicate_request=0 `,
		`A -> B  RC_RDMA_WRITE_ONLY +qp=0x11 psn=1193060 ackreq reth\(va=0x[0-9a-f]+ rkey=0x[0-9a-f]{8} len=1000\) payload=1000\n`,
		`\[B qp 0x11\] ECN CE at PSN 1193060: CNP to QP 0x11\n`,
		`B -> A  CNP +qp=0x11 psn=0 becn\n`,
		`B -> A  RC_ACKNOWLEDGE +qp=0x11 psn=1193060 aeth\(ACK credits=31 msn=7\)`,
		`\[A qp 0x11\] CNP received: rate 50\.05 Gb/s, target 100\.00 Gb/s, alpha 0\.999\n`,
		`=> A's QP now sends at most 50.049Gb/s`,
		`=> B np_ecn_marked_roce_packets=1 `,
		`=> B np_cnp_sent=1 `,
		`=> A rp_cnp_handled=1 `,
		`=> A rp_cnp_ignored=0 `,
		`=> all 7 scenes passed; 27 packets, 1 dropped by the fabric\n`,
	}
	rest := out
	for _, w := range want {
		loc := regexp.MustCompile(w).FindStringIndex(rest)
		if loc == nil {
			t.Fatalf("no line matching %q after the lines before it in\n%s", w, out)
		}
		rest = rest[loc[1]:]
	}
	if n := len(packetLine.FindAllString(out, -1)); n != 27 {
		t.Errorf("%d packet lines, want 27", n)
	}
}

// TestDemoNoCC: with --cc none the congestion scene's mark is counted and
// draws no CNP; --cc-profile paper cuts by the paper's rule, to half.
func TestDemoNoCC(t *testing.T) {
	code, out, errOut := runDemoArgs(t, "--cc", "none")
	if code != exitOK || errOut != "" {
		t.Fatalf("--cc none: exit %d, stderr %q\n%s", code, errOut, out)
	}
	if strings.Contains(out, "B -> A  CNP") || !strings.Contains(out, "=> B np_ecn_marked_roce_packets=1 ") ||
		!strings.Contains(out, "=> B np_cnp_sent=0 ") || !strings.Contains(out, "all 7 scenes passed; 26 packets") {
		t.Errorf("--cc none:\n%s", out)
	}
	code, out, errOut = runDemoArgs(t, "--cc-profile", "paper")
	if code != exitOK || !strings.Contains(out, "CNP received: rate 50.00 Gb/s, target 100.00 Gb/s, alpha 1.000") {
		t.Errorf("--cc-profile paper: exit %d, stderr %q\n%s", code, errOut, out)
	}
	if code, _, errOut := runDemoArgs(t, "--cc", "none", "--cc-profile", "paper"); code != exitUsage || !strings.Contains(errOut, "congestion control is off") {
		t.Errorf("--cc none --cc-profile paper: exit %d, stderr %q", code, errOut)
	}
}

// TestDemoDeterministic: two runs print the same, but for the addresses
// and keys.
func TestDemoDeterministic(t *testing.T) {
	mask := regexp.MustCompile(`(va|rkey)=0x[0-9a-f]+`)
	var outs [2]string
	for i := range outs {
		code, out, errOut := runDemoArgs(t)
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		outs[i] = mask.ReplaceAllString(out, "$1=X")
	}
	if outs[0] != outs[1] {
		t.Errorf("the runs differ: %s", firstDiff(outs[0], outs[1]))
	}
}

func TestDemoQuiet(t *testing.T) {
	code, out, errOut := runDemoArgs(t, "--quiet")
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if packetLine.MatchString(out) || strings.Contains(out, "[A qp") {
		t.Errorf("--quiet printed packets or events:\n%s", out)
	}
	for i, s := range demoScenes {
		if h := fmt.Sprintf("=== Scene %d: %s ===\n", i+1, s.title); !strings.Contains(out, h) {
			t.Errorf("no header %q", h)
		}
	}
	for _, w := range []string{`=> B's receive buffer holds "hello, RDMA"`, "=> all 7 scenes passed"} {
		if !strings.Contains(out, w) {
			t.Errorf("no result %q in\n%s", w, out)
		}
	}
}

// TestDemoPcap: the capture holds every packet the demo printed, and
// decode reads each with a good ICRC.
func TestDemoPcap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo.pcap")
	code, out, errOut := runDemoArgs(t, "--pcap", path)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	printed := len(packetLine.FindAllString(out, -1))
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var decoded bytes.Buffer
	sum, err := decode(&decoded, f, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := (summary{RoCE: printed}); !reflect.DeepEqual(sum, want) {
		t.Errorf("decode: %+v, want %+v", sum, want)
	}
	if n := strings.Count(decoded.String(), "RC_ACKNOWLEDGE"); n != 5 {
		t.Errorf("%d ACKs in the capture, want 5 (4 ACKs and a NAK)", n)
	}
	// The CNP B sent decodes as one: opcode 0x81, BECN, DSCP 48 as
	// ConnectX sends it, the ICRC good.
	cnp := regexp.MustCompile(`(?m)^.* 10\.0\.0\.2 -> 10\.0\.0\.1 .* CNP +qp=0x000011 psn=0 .*becn=1 dscp=48 payload=0 icrc=ok$`)
	if n := len(cnp.FindAllString(decoded.String(), -1)); n != 1 || strings.Count(decoded.String(), "CNP") != 1 {
		t.Errorf("the capture decodes to %d CNPs from B to A, want 1:\n%s", n, decoded.String())
	}
}

// TestDemoFailure: a scene that fails ends the demo with exit status 1, a
// message naming the scene, and nothing left running.
func TestDemoFailure(t *testing.T) {
	saved := demoScenes
	t.Cleanup(func() { demoScenes = saved })
	demoScenes = []demoScene{
		saved[0],
		{"Broken", "A scene that fails.", func(*demo) error { return errors.New("the check failed") }},
		saved[1],
	}
	before := runtime.NumGoroutine()
	code, out, errOut := runDemoArgs(t)
	if code != exitError {
		t.Fatalf("exit %d, want %d", code, exitError)
	}
	if want := "gorxe demo: scene 2 (Broken): the check failed\n"; errOut != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
	if strings.Contains(out, "Scene 3") || strings.Contains(out, "passed") {
		t.Errorf("the demo went on after the failure:\n%s", out)
	}
	checkNoLeak(t, before)
}

func TestDemoUsage(t *testing.T) {
	if code, _, errOut := runDemoArgs(t, "extra"); code != exitUsage || !strings.Contains(errOut, `no scene "extra"`) {
		t.Errorf("unknown scene: exit %d, stderr %q", code, errOut)
	}
	if code, _, _ := runDemoArgs(t, "--bogus"); code != exitUsage {
		t.Errorf("unknown flag: exit %d", code)
	}
	if code, out, _ := runDemoArgs(t, "-h"); code != exitOK || out != "" {
		t.Errorf("-h: exit %d, stdout %q", code, out)
	}
	var stdout bytes.Buffer
	if code := run([]string{"help", "demo"}, &stdout, io.Discard); code != exitOK || !strings.Contains(stdout.String(), "--pcap FILE") {
		t.Errorf("help demo: exit %d, %q", code, stdout.String())
	}
	bad := filepath.Join(t.TempDir(), "no", "such", "dir", "demo.pcap")
	if code, _, errOut := runDemoArgs(t, "--pcap", bad); code != exitError || !strings.Contains(errOut, bad) {
		t.Errorf("unwritable pcap: exit %d, stderr %q", code, errOut)
	}
}

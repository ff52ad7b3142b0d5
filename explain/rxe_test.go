package explain

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/internal/capture"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire/aeth"
)

// isRxe reports whether addr is kernel rxe's in the interop captures: the
// VM's --ip addresses, or, in the link-local cases (GID 0), the address
// made from the MAC address interop.sh gives it, 52:54:00:00:00:02.
func isRxe(addr string) bool {
	return addr == "10.9.0.2" || addr == "fd09::2" || addr == "fe80::5054:ff:fe00:2"
}

// counters reads a file of "name value" lines: an interop case's
// counters.N.txt (each of rxe's hw_counters and its change over the
// case) or its net.N.txt (what the network dropped, out of the capture's
// sight).
func counters(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		m[name] = n
	}
	return m
}

// naksInCapture counts the NAK packets each address sent, read straight
// from the capture.
func naksInCapture(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	naks := map[string]int{}
	if _, err := capture.Read(f, func(p *capture.Packet) error {
		if p.Err == nil && p.P.AETH != nil && p.P.AETH.Syndrome().Type() == aeth.TypeNAK {
			naks[p.Src]++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return naks
}

// TestRxeLossCounters explains captures of gorxe against kernel rxe under
// 1% loss (testdata/interop/loss, taken by the interop harness on the
// bridge between them, with netem dropping 1% of what rxe sends) and
// checks explain's account against the capture and against rxe's own
// hw_counters for the same run (checkRxeCase). With GORXE_INTEROP_RUN
// set to a directory the harness left (test/interop/interop.sh does so
// after its run), it checks every case there instead.
func TestRxeLossCounters(t *testing.T) {
	dir, exact := os.Getenv("GORXE_INTEROP_RUN"), false
	if dir == "" {
		dir, exact = "../testdata/interop/loss", true
	}
	files, err := filepath.Glob(filepath.Join(dir, "counters.*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no counters.N.txt in %s", dir)
	}
	for _, f := range files {
		n := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "counters."), ".txt")
		pcap := filepath.Join(dir, "case."+n+".pcap")
		if _, err := os.Stat(pcap); err != nil {
			continue // a VM's final dump, or a case without a capture
		}
		net := filepath.Join(dir, "net."+n+".txt")
		t.Run("case"+n, func(t *testing.T) { checkRxeCase(t, pcap, counters(t, f), counters(t, net), exact) })
	}
}

// checkRxeCase checks explain's account of one interop capture:
//   - the NAKs explain counts for each address are the NAK packets the
//     capture holds;
//   - rxe's rcvd_seq_err counts the NAKs gorxe sent, but for a NAK of the
//     PSN rxe's completer expects already, which it does not count, and a
//     NAK the VM's TAP dropped (below): at most, and with exact (for the
//     stored captures, where nothing was dropped), equal;
//   - the go-back runs explain infers for rxe's requester (after a NAK or
//     a timeout) are rxe's completer_retry_err, but for those whose first
//     copy netem dropped before the capture point with nothing behind it
//     (the capture holds only the resend, a new request to explain): at
//     most, and at least less netem's drops; with exact, equal;
//   - the duplicate requests explain sees reach rxe are rxe's
//     duplicate_request, unless rxe failed to send (send_err), which
//     leaves it skipping the PSN check of the next request. The capture
//     is taken on the bridge, before the VM's TAP, and what the TAP drops
//     (net's vmtap0_tx_dropped: its queue was full, the VM too slow to
//     take it) is in the capture and never reached rxe: a dropped
//     duplicate is one rxe did not count, and a dropped first copy makes
//     its resend, a duplicate to explain, new to rxe. A QP in RTS
//     answers a duplicate (C9-105: an ACK, or the READ's responses
//     again); one that nothing of rxe's on the connection ever followed
//     may have met a QP that had left RTS, which drops it uncounted (a
//     tail-loss probe crossing the disconnection, as rdma_disconnect
//     moves the QP to ERR before its DREQ leaves). A QP that sent a
//     fatal NAK went to the error state (rxe's responder also does when
//     its CQ overflows: a stock qperf server stops polling at its test's
//     end while the client's posted SENDs go on arriving), and drops
//     what comes after uncounted. So rxe counts at most explain's
//     duplicates, and at least those less what the TAP dropped, those
//     never answered and those on a connection rxe's QP failed;
//   - the packets explain counts as retransmitted are those a plain
//     count of reused PSNs finds (with exact: for the stored captures,
//     which hold one connection each).
func checkRxeCase(t *testing.T, pcap string, hw, net map[string]int, exact bool) {
	r := read(t, pcap)
	inCapture := naksInCapture(t, pcap)
	naks := map[string]int{}
	for _, c := range r.Conns {
		for side, e := range c.Ends {
			for _, k := range c.Summary.NAKs[side] {
				naks[e.Addr] += k
			}
		}
	}
	gorxeNAKs := 0
	for addr, n := range inCapture {
		if naks[addr] != n {
			t.Errorf("%s: explain counts %d NAKs, the capture holds %d", addr, naks[addr], n)
		}
		if !isRxe(addr) {
			gorxeNAKs += n
		}
	}
	if seq := hw["rcvd_seq_err"]; seq > gorxeNAKs || exact && seq != gorxeNAKs {
		t.Errorf("gorxe sent %d NAKs, rxe's rcvd_seq_err is %d", gorxeNAKs, seq)
	}
	// A connection on which rxe sent a fatal NAK: its responder went to
	// the error state, where it drops requests uncounted.
	failed := map[int]bool{}
	for i, c := range r.Conns {
		for side, e := range c.Ends {
			for name := range c.Summary.NAKs[side] {
				failed[i] = failed[i] || isRxe(e.Addr) && name != "PSN sequence error"
			}
		}
	}
	var resends, duplicates, unanswered, uncounted int
	for i, p := range r.Packets {
		for _, e := range p.Events {
			switch {
			case (e.Kind == trace.GoBack || e.Kind == trace.Probe) && isRxe(p.Src):
				resends++
			case e.Kind == trace.Duplicate && isRxe(p.Dst):
				duplicates++
				switch {
				case failed[p.Conn]:
					uncounted++
				case !answered(r.Packets[i+1:], p):
					unanswered++
				}
			}
		}
	}
	// A request of rxe's that netem dropped before the capture point and
	// that nothing after it made gorxe miss (the last one outstanding) is
	// resent at rxe's timeout, and the capture holds the resend alone,
	// a first transmission to anyone reading it: each of netem's drops
	// may hide one go-back.
	if retry := hw["completer_retry_err"]; resends > retry || retry > resends+net["netem_dropped"] || exact && resends != retry {
		t.Errorf("explain infers %d go-backs of rxe's requester, rxe's completer_retry_err is %d (netem dropped %d of rxe's packets before the capture)", resends, retry, net["netem_dropped"])
	}
	dropped := net["vmtap0_tx_dropped"]
	if dup := hw["duplicate_request"]; (dup > duplicates || dup < duplicates-dropped-unanswered-uncounted) && hw["send_err"] == 0 {
		t.Errorf("explain sees %d duplicates reach rxe (%d never answered, %d on a connection rxe's QP failed), rxe's duplicate_request is %d (the VM's TAP dropped %d frames of the capture)",
			duplicates, unanswered, uncounted, dup, dropped)
	}
	if exact {
		if len(r.Conns) != 1 {
			t.Fatalf("%d connections, want 1", len(r.Conns))
		}
		if want := retransmittedInCapture(t, pcap); r.Conns[0].Summary.Retransmissions != want {
			t.Errorf("explain counts %v retransmitted packets, the capture holds %v", r.Conns[0].Summary.Retransmissions, want)
		}
	}
	t.Logf("NAKs %v, rxe go-backs %d, duplicates at rxe %d (%d never answered); rxe: rcvd_seq_err %d completer_retry_err %d duplicate_request %d send_err %d; TAP dropped %d",
		inCapture, resends, duplicates, unanswered, hw["rcvd_seq_err"], hw["completer_retry_err"], hw["duplicate_request"], hw["send_err"], dropped)
}

// answered reports whether any of later, the packets after p in the
// capture, is one of p's receiver's on p's connection.
func answered(later []Packet, p Packet) bool {
	for _, q := range later {
		if q.Conn == p.Conn && q.Src == p.Dst {
			return true
		}
	}
	return false
}

// retransmittedInCapture counts, for the capture's one connection, the
// request packets each end sent at a PSN it had used already, in the
// order of the connection's ends (the first to send first): a request
// uses its PSN, and a READ as many more as its responses take at the
// path MTU, which the largest payload in the capture shows.
func retransmittedInCapture(t *testing.T, path string) [2]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pkts []capture.Packet
	mtu := 0
	if _, err := capture.Read(strings.NewReader(string(b)), func(p *capture.Packet) error {
		if p.Err == nil {
			pkts = append(pkts, *p)
			mtu = max(mtu, len(p.P.Payload))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var out [2]int
	var first string
	next := map[string]uint32{} // by sender: the PSN after the highest used
	for _, p := range pkts {
		op := p.P.BTH.Opcode()
		if isResponse(op) || p.P.DETH != nil || op == 0x81 {
			continue
		}
		if first == "" {
			first = p.Src
		}
		side := 0
		if p.Src != first {
			side = 1
		}
		psn := uint32(p.P.BTH.PSN())
		span := 1
		if k, _ := classify(op); k == opRead {
			span = max(1, (int(p.P.RETH.DMALen())+mtu-1)/mtu)
		}
		n, seen := next[p.Src]
		if seen && psnDiff(psn, n) < 0 {
			out[side]++
		}
		if !seen || psnDiff(psnAdd(psn, span), n) > 0 {
			next[p.Src] = psnAdd(psn, span)
		}
	}
	return out
}

// TestHiddenTimeout explains an interop capture in which netem, in the
// VM, dropped the last of rxe's READ requests before the capture point
// (testdata/interop/hidden-timeout): gorxe never saw it, so nothing
// answered, and rxe resent it at its ACK timeout, 70 ms later. The capture
// holds the resend alone, a new READ to explain; rxe counts a go-back
// (completer_retry_err 1) that no reading of the capture can find, which
// checkRxeCase allows for each of netem's drops. The stored capture starts
// at a READ, before any packet shows the path MTU: explain takes it from
// the READ's responses, later in the capture, and, given the READ alone
// (case27-first-read.pcap), says it cannot tell.
func TestHiddenTimeout(t *testing.T) {
	dir := "../testdata/interop/hidden-timeout"
	pcap := filepath.Join(dir, "case27-trixie-read_bw-udp-loss.pcap")
	hw, net := counters(t, filepath.Join(dir, "case27-rxe-hw_counters.txt")), counters(t, filepath.Join(dir, "case27-net.txt"))
	checkRxeCase(t, pcap, hw, net, false)
	r := read(t, pcap)
	var gap time.Duration
	resend := -1
	for i := 1; i < len(r.Packets); i++ {
		if d := r.Packets[i].Time - r.Packets[i-1].Time; d > gap {
			gap, resend = d, i
		}
	}
	if p := r.Packets[resend]; gap < 60*time.Millisecond || !strings.Contains(p.Text, "RDMA READ of 65536 bytes") || len(p.Events) != 0 {
		t.Errorf("the longest silence, %v, ends at packet %d: %q %v; want rxe's resent READ after about 70 ms, explained as a new one", gap, p.Index, p.Text, p.Events)
	}
	if hw["completer_retry_err"] != 1 || net["netem_dropped"] != 1 {
		t.Errorf("counters %v, %v: want the one go-back and the one drop the capture does not show", hw, net)
	}
	for i, want := range []string{
		"it takes PSNs 13492338 to 13492353, the 16 READ responses the responder will send",
		"READ response 1 of 16 for the READ at PSN 13492338",
	} {
		if !strings.Contains(r.Packets[i].Text, want) {
			t.Errorf("packet %d: %q, want %q in it", i+1, r.Packets[i].Text, want)
		}
	}
	first := read(t, filepath.Join(dir, "case27-first-read.pcap"))
	if want := "it takes a PSN for each READ response the responder will send, from 13492338 on: 64 at a path MTU of 1024, 16 at 4096 (no packet has shown the path MTU yet)"; len(first.Packets) != 1 || !strings.Contains(first.Packets[0].Text, want) {
		t.Errorf("the READ alone: %+v, want %q", first.Packets, want)
	}
}

// TestReordered explains an interop capture in which the bridge's capture
// saw gorxe's ACK of one of rxe's WRITEs before the WRITE itself
// (testdata/interop/reordered, packets 119 and 120, 9 µs apart): the
// bridge forwards a frame to its port before its own capture takes a
// copy, and gorxe answered on the other CPU first. The WRITE is the
// original, not a resend: rxe resent nothing (completer_retry_err 0).
func TestReordered(t *testing.T) {
	dir := "../testdata/interop/reordered"
	pcap := filepath.Join(dir, "case138-bookworm-write_bw-tap.pcap")
	checkRxeCase(t, pcap, counters(t, filepath.Join(dir, "case138-rxe-hw_counters.txt")), counters(t, filepath.Join(dir, "case138-net.txt")), true)
	r := read(t, pcap)
	p := r.Packets[120-1]
	if !strings.Contains(p.Text, "after its answer (the ACK of packet 119") || p.Anomaly != "" || len(p.Events) != 0 {
		t.Errorf("packet 120: %q %q %v, want the original WRITE, seen after its ACK", p.Text, p.Anomaly, p.Events)
	}
	if s := r.Conns[0].Summary; s.Retransmissions != [2]int{} || s.Messages[0]+s.Messages[1] != 200 {
		t.Errorf("summary %+v, want 200 messages and nothing resent", s)
	}
}

// TestReorderedLate: the same on a loaded host, where the bridge queued
// its copy of rxe's SEND 2.7 ms behind gorxe's ACK of it
// (testdata/interop/reordered, case 119 of a fresh-clone CI run's
// bookworm matrix, packets 78 and 79). Read as a resend, rxe would have
// gone back twice in the case; its completer_retry_err is 1, the
// resend of packet 98.
func TestReorderedLate(t *testing.T) {
	dir := "../testdata/interop/reordered"
	pcap := filepath.Join(dir, "case119-bookworm-send_lat-tap-fe80.pcap")
	checkRxeCase(t, pcap, counters(t, filepath.Join(dir, "case119-rxe-hw_counters.txt")), counters(t, filepath.Join(dir, "case119-net.txt")), true)
	r := read(t, pcap)
	if p := r.Packets[79-1]; !strings.Contains(p.Text, "after its answer (the ACK of packet 78") || len(p.Events) != 0 {
		t.Errorf("packet 79: %q %v, want the original SEND, seen after its ACK", p.Text, p.Events)
	}
	if p := r.Packets[98-1]; !strings.Contains(p.Text, "Retransmission") {
		t.Errorf("packet 98: %q, want rxe's resend", p.Text)
	}
}

// TestMTUAhead explains the start of an interop capture in which netem
// dropped rxe's second READ before the capture point
// (testdata/interop/mtu-ahead): the first two READs the capture holds
// are 32 PSNs apart, one READ of 32 responses at a path MTU of 2048 or
// two of 16 at 4096, and no packet before the first responses shows
// which. explain takes the MTU the capture shows later (4096): the third
// READ is a new request the responder discards after its NAK, not a
// resend, and rxe's one go-back is the NAK's.
func TestMTUAhead(t *testing.T) {
	dir := "../testdata/interop/mtu-ahead"
	pcap := filepath.Join(dir, "case280-bookworm-read_bw-tap-loss.pcap")
	checkRxeCase(t, pcap, counters(t, filepath.Join(dir, "case280-rxe-hw_counters.txt")), counters(t, filepath.Join(dir, "case280-net.txt")), false)
	r := read(t, pcap)
	for _, c := range []struct {
		pkt  int
		want string
	}{
		{1, "it takes PSNs 5798906 to 5798921, the 16 READ responses"},
		{2, "PSN 5798938 arrives while 5798922 is expected (5798922 is lost before the capture point)"},
		{3, "PSN 5798954 is dropped"},
	} {
		if p := r.Packets[c.pkt-1]; !strings.Contains(p.Text, c.want) || strings.Contains(p.Text, "Retransmission") {
			t.Errorf("packet %d: %q, want %q in it", c.pkt, p.Text, c.want)
		}
	}
}

// TestRetryInRetry explains an interop capture in which rxe's requester,
// slowed by the VM, went back at its ACK timer five times while the
// answers were on their way (testdata/interop/retry-in-retry). During the
// run that began at packet 353, a READ response replayed for an earlier
// run's duplicate came ahead of the rest of its READ (packet 362): an
// implied NAK, but the run had still to resend that READ and had had no
// answer, so rxe's completer started no second retry (started_retry) and
// its requester resent the READ at packet 370 in its turn. explain must
// count the five go-backs rxe counts, not a sixth at packet 370.
func TestRetryInRetry(t *testing.T) {
	dir := "../testdata/interop/retry-in-retry"
	pcap := filepath.Join(dir, "case23-bookworm-read_bw-udp6.pcap")
	hw, net := counters(t, filepath.Join(dir, "case23-rxe-hw_counters.txt")), counters(t, filepath.Join(dir, "case23-net.txt"))
	checkRxeCase(t, pcap, hw, net, false)
	r := read(t, pcap)
	for _, c := range []struct {
		pkt  int
		want string
	}{
		{362, "the go-back run it began at packet 353"},
		{370, "the run resends it in its turn, not a new go-back"},
	} {
		if p := r.Packets[c.pkt-1]; !strings.Contains(p.Text, c.want) {
			t.Errorf("packet %d: %q, want %q in it", c.pkt, p.Text, c.want)
		}
	}
	if e := r.Packets[370-1].Events; len(e) != 1 || e[0].Kind != trace.Duplicate {
		t.Errorf("packet 370's events %v, want only the duplicate at gorxe", e)
	}
}

// TestLateNAK explains an interop capture in which rxe, far behind in a
// slow VM, sent the NAK it owed for a request out of sequence after it
// had taken the PSN the NAK names (testdata/interop/late-nak): explain's
// account must match rxe's counters, the 257 duplicate requests among
// them.
func TestLateNAK(t *testing.T) {
	dir := "../testdata/interop/late-nak"
	checkRxeCase(t, filepath.Join(dir, "case22-trixie-write_bw-tap-ipv6.pcap"), counters(t, filepath.Join(dir, "case22-rxe-hw_counters.txt")), nil, true)
	r := read(t, filepath.Join(dir, "case22-trixie-write_bw-tap-ipv6.pcap"))
	for _, p := range r.Packets {
		if p.Lost {
			t.Errorf("packet %d (PSN %d) is called lost; the NAK that names it is rxe's late answer to packet 52", p.Index, p.PSN)
		}
		if p.Index == 312 && !strings.Contains(p.Text, "answer to packet 52") {
			t.Errorf("packet 312, rxe's NAK: %q does not say it answers packet 52", p.Text)
		}
	}
}

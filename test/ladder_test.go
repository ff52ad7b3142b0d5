//go:build linux

package test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gorxe/gorxe/explain"
	"github.com/gorxe/gorxe/scene"
	"github.com/gorxe/gorxe/trace"
)

// ladderReport is what explain would make of a lossy RDMA WRITE, by hand:
// A (10.0.0.1, QP 0x11) WRITEs 5 packets to B (10.0.0.2, QP 0x12); the 3rd
// is lost, B NAKs the 4th (a PSN sequence error), A goes back and sends
// the 3rd to the 5th again, B ACKs. Then a SEND is lost with nothing after
// it, so A's ACK timer fires 67 ms later and A sends it again. A second
// connection (QP 0x13 to QP 0x14) has a WRITE marked ECN CE, the CNP it
// brings back and A's rate cut.
func ladderReport() *explain.Report {
	const a, b = "10.0.0.1", "10.0.0.2"
	const us = time.Microsecond
	write := func(i int, t time.Duration, op string, psn uint32, anomaly string) explain.Packet {
		fields := "ack=0 se=0 mig=0 pad=0 payload=1024 icrc=ok"
		if op == "RC_RDMA_WRITE_FIRST" {
			fields = "ack=0 se=0 mig=0 pad=0 reth(va=0x7f3a5c00a000 rkey=0x00000276 len=5000) payload=1024 icrc=ok"
		}
		if op == "RC_RDMA_WRITE_LAST" {
			fields = "ack=1 se=0 mig=0 pad=0 payload=904 icrc=ok"
		}
		return explain.Packet{Index: i, Time: t, Src: a, Dst: b, Opcode: op, DestQP: 0x12, PSN: psn, Fields: fields, Conn: 0, Anomaly: anomaly,
			Text: fmt.Sprintf("A's WRITE packet with PSN %d, for B's QP 0x12.", psn)}
	}
	state := func(next, unacked uint32, outstanding int, recovery string, expected, msn uint32, nak string) []explain.EndState {
		return []explain.EndState{
			{End: a + " QP 0x11", NextPSN: next, Unacked: unacked, Outstanding: outstanding, Recovery: recovery},
			{End: b + " QP 0x12", ExpectedPSN: expected, MSN: msn, NAKState: nak},
		}
	}
	waiting := "sequence error NAK sent, waiting for PSN 102"
	p := []explain.Packet{
		write(1, 10*us, "RC_RDMA_WRITE_FIRST", 100, ""),
		write(2, 12*us, "RC_RDMA_WRITE_MIDDLE", 101, ""),
		write(3, 14*us, "RC_RDMA_WRITE_MIDDLE", 102, "lost"),
		write(4, 16*us, "RC_RDMA_WRITE_MIDDLE", 103, "out of sequence"),
		write(5, 18*us, "RC_RDMA_WRITE_LAST", 104, "out of sequence"),
		{Index: 6, Time: 20 * us, Src: b, Dst: a, Opcode: "RC_ACKNOWLEDGE", DestQP: 0x11, PSN: 102, Conn: 0, Anomaly: "nak",
			Fields: "ack=0 se=0 mig=0 pad=0 aeth(NAK PSN_SEQ_ERROR msn=0) payload=0 icrc=ok",
			Text:   "B NAKs PSN 102: it is still waiting for it, so A must send again from there (go-back-N)."},
		write(7, 23*us, "RC_RDMA_WRITE_MIDDLE", 102, "retransmission"),
		write(8, 25*us, "RC_RDMA_WRITE_MIDDLE", 103, "retransmission"),
		write(9, 27*us, "RC_RDMA_WRITE_LAST", 104, "retransmission"),
		{Index: 10, Time: 29 * us, Src: b, Dst: a, Opcode: "RC_ACKNOWLEDGE", DestQP: 0x11, PSN: 104, Conn: 0,
			Fields: "ack=0 se=0 mig=0 pad=0 aeth(ACK credits=31 msn=1) payload=0 icrc=ok", Text: "B acknowledges the WRITE, up to PSN 104."},
		{Index: 11, Time: 40 * us, Src: a, Dst: b, Opcode: "RC_SEND_ONLY", DestQP: 0x12, PSN: 105, Conn: 0, Anomaly: "lost", Lost: true,
			Fields: "ack=1 se=0 mig=0 pad=0 payload=11 icrc=ok", Text: "A SENDs 11 bytes; B never gets them."},
		{Index: 12, Time: 67*time.Millisecond + 50*us, Src: a, Dst: b, Opcode: "RC_SEND_ONLY", DestQP: 0x12, PSN: 105, Conn: 0, Anomaly: "timeout",
			Fields: "ack=1 se=0 mig=0 pad=0 payload=11 icrc=ok", Text: "With no answer for 67 ms, A's ACK timer fires and it sends PSN 105 again."},
		{Index: 13, Time: 67*time.Millisecond + 52*us, Src: b, Dst: a, Opcode: "RC_ACKNOWLEDGE", DestQP: 0x11, PSN: 105, Conn: 0,
			Fields: "ack=0 se=0 mig=0 pad=0 aeth(ACK credits=31 msn=2) payload=0 icrc=ok", Text: "B acknowledges the SEND."},
		{Index: 14, Time: 68 * time.Millisecond, Src: a, Dst: b, Opcode: "RC_RDMA_WRITE_ONLY", DestQP: 0x14, PSN: 500, Conn: 1,
			Fields: "ack=1 se=0 mig=0 pad=0 reth(va=0x7f3a5c010000 rkey=0x00000280 len=1000) payload=1000 icrc=ok", Text: "A WRITEs 1000 bytes on its second QP; a switch marks it ECN CE."},
		{Index: 15, Time: 68*time.Millisecond + 3*us, Src: b, Dst: a, Opcode: "CNP", DestQP: 0x13, Conn: 1, Anomaly: "cnp",
			Fields: "ack=0 se=0 mig=0 pad=0 becn=1 payload=16 icrc=ok", Text: "B tells A's QP 0x13 that its packets meet congestion."},
		{Index: 16, Time: 68*time.Millisecond + 5*us, Src: b, Dst: a, Opcode: "RC_ACKNOWLEDGE", DestQP: 0x13, PSN: 500, Conn: 1,
			Fields: "ack=0 se=0 mig=0 pad=0 aeth(ACK credits=31 msn=1) payload=0 icrc=ok", Text: "B acknowledges the WRITE."},
	}
	afters := map[int][]explain.EndState{
		1: state(101, 100, 1, "", 101, 0, ""), 2: state(102, 100, 2, "", 102, 0, ""), 3: state(103, 100, 3, "", 102, 0, ""),
		4: state(104, 100, 4, "", 102, 0, waiting), 5: state(105, 100, 5, "", 102, 0, waiting),
		6: state(105, 102, 3, "go back to PSN 102", 102, 0, waiting),
		7: state(105, 102, 3, "go back to PSN 102", 103, 0, ""), 8: state(105, 102, 3, "go back to PSN 102", 104, 0, ""),
		9: state(105, 102, 3, "go back to PSN 102", 105, 1, ""), 10: state(105, 105, 0, "", 105, 1, ""),
	}
	for i, s := range afters {
		if p[i-1].Src == b { // the sender's side first
			s[0], s[1] = s[1], s[0]
		}
		p[i-1].After = s
	}
	p[2].Lost = true
	p[3].Events = []trace.Event{{Time: p[3].Time, QP: 0x12, Kind: trace.NAKSent, PSN: 103, Expected: 102, Syndrome: "PSN sequence error", Opcode: "RC_RDMA_WRITE_MIDDLE"}}
	p[4].Events = []trace.Event{{Time: p[4].Time, QP: 0x12, Kind: trace.Dropped, PSN: 104, Opcode: "RC_RDMA_WRITE_LAST", Reason: "out of sequence, NAK already sent"}}
	p[5].Events = []trace.Event{
		{Time: p[5].Time, QP: 0x11, Kind: trace.NAKReceived, PSN: 102, Syndrome: "PSN sequence error"},
		{Time: p[5].Time, QP: 0x11, Kind: trace.GoBack, PSN: 102, Reason: "NAK"},
	}
	return &explain.Report{
		Lanes:   []string{a, b},
		Packets: p,
		Conns: []explain.Connection{
			{Service: "RC", Ends: [2]explain.End{{Addr: a, QPN: 0x11}, {Addr: b, QPN: 0x12}}, Summary: explain.Summary{
				Packets: [2]int{9, 4}, Messages: [2]int{2, 0}, Bytes: [2]int64{5011, 0}, Retransmissions: [2]int{4, 0},
				NAKs: [2]map[string]int{nil, {"PSN sequence error": 1}}, Timeouts: [2]int{1, 0}, Duration: 67*time.Millisecond + 42*us,
				Goodput: [2]float64{596e3, 0}}},
			{Service: "RC", Ends: [2]explain.End{{Addr: a, QPN: 0x13}, {Addr: b, QPN: 0x14}}, Summary: explain.Summary{
				Packets: [2]int{1, 2}, Messages: [2]int{1, 0}, Bytes: [2]int64{1000, 0}, CNPs: [2]int{0, 1}, Duration: 5 * us,
				Goodput: [2]float64{1.6e9, 0}}},
		},
		Events: []trace.Event{
			{Time: 0, Device: "A", QP: 0x11, Kind: trace.State, From: "RTR", To: "RTS"},
			{Time: 67*time.Millisecond + 40*us, Device: "A", QP: 0x11, Kind: trace.Timeout, PSN: 105},
			{Time: 67*time.Millisecond + 41*us, Device: "A", QP: 0x11, Kind: trace.GoBack, PSN: 105, Reason: "timeout"},
			{Time: 68*time.Millisecond + 4*us, Device: "A", QP: 0x13, Kind: trace.CNPReceived, Rate: 5e9, TargetRate: 10e9, Alpha: 1},
			{Time: 68*time.Millisecond + 60*us, Device: "A", QP: 0x13, Kind: trace.RateChange, Rate: 7.5e9, TargetRate: 10e9, Alpha: 0.94},
			{Time: 68*time.Millisecond + 120*us, Device: "A", QP: 0x13, Kind: trace.RateChange, Rate: 8.75e9, TargetRate: 10e9, Alpha: 0.88},
		},
		Devices: map[string]string{"A": a, "B": b},
		Counts:  explain.Counts{RoCE: len(p)},
	}
}

// chromium returns the path of Debian's chromium. make test installs it
// as root (make deps); without root, where it installs nothing, a missing
// chromium skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("chromium is not installed (make test installs it when run as root)")
	}
	t.Fatal("chromium is not installed: make test installs it")
	return ""
}

// browser starts a headless chromium for the test, with a window big
// enough for the whole diagram, and returns its context and a func that
// fails the test if the page wrote an error or a warning to the console
// or threw an exception nothing caught, so far.
func browser(t *testing.T) (ctx context.Context, checkConsole func()) {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(chromium(t)), chromedp.WindowSize(1440, 1200)}
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // chromium refuses to run its sandbox as root
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	ctx, cancelBrowser := chromedp.NewContext(ctx, chromedp.WithAllocatorOptions(opts...))
	t.Cleanup(cancelBrowser)

	// The console's messages come in order, on their own: a marker the
	// test logs tells when every message before it has been seen.
	const marker = "gorxe test: console read up to here"
	var mu sync.Mutex
	var problems []string
	seen := make(chan struct{})
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			switch {
			case err != nil:
				return
			case m.Type == chromedp.ConsoleLog && m.Text == marker:
				seen <- struct{}{}
			case m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException():
				mu.Lock()
				problems = append(problems, m.String())
				mu.Unlock()
			}
		}
	}()
	return ctx, func() {
		t.Helper()
		eval[chromedp.Void](t, ctx, `console.log("`+marker+`")`)
		select {
		case <-seen:
		case <-ctx.Done():
			t.Fatal("the console's messages did not come")
		}
		mu.Lock()
		defer mu.Unlock()
		if len(problems) > 0 {
			t.Errorf("the page wrote to the console:\n%s", strings.Join(problems, "\n"))
		}
	}
}

// eval runs a JavaScript expression in the page and returns its value.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}

func do(t *testing.T, ctx context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

// writeLadder writes the report's page to a file of the test's.
func writeLadder(t *testing.T, r *explain.Report) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "ladder.html")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := explain.WriteHTML(f, r, "gorxe explain: a lost WRITE packet"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return file
}

// selected returns the capture index of the selected packet, or 0.
func selected(t *testing.T, ctx context.Context) int {
	t.Helper()
	return eval[int](t, ctx, `(e => e ? Number(e.dataset.index) : 0)(document.querySelector('.pkt.selected'))`)
}

// TestLadderHTML opens explain's ladder diagram of a lossy transfer in
// headless Chromium and uses it as a reader would: it checks that every
// packet has its arrow, clicks one and reads the details, jumps to the
// anomalies, steps with the keyboard, filters by QP, and that the page
// said nothing to the console. It writes a screenshot to the test's
// directory, and to $GORXE_SCREENSHOT when that is set (the README's).
func TestLadderHTML(t *testing.T) {
	r := ladderReport()
	file := writeLadder(t, r)
	ctx, checkConsole := browser(t)
	do(t, ctx, chromedp.Navigate("file://"+file), chromedp.WaitVisible(chromedp.CSS("#ladder .pkt")))

	if n := eval[int](t, ctx, `document.querySelectorAll('.pkt').length`); n != len(r.Packets) {
		t.Errorf("%d .pkt elements, want one a packet: %d", n, len(r.Packets))
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#ladder .note').length`); n < 6 {
		t.Errorf("%d notes beside the lanes, want the 4 packets' events and the 6 device events", n)
	}
	if gap := eval[string](t, ctx, `[...document.querySelectorAll('.gap')].map(g => g.textContent).join()`); !strings.Contains(gap, "ms") {
		t.Errorf("the 67 ms without packets shows as %q, want a gap in ms", gap)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#rate-chart .series').length`); n != 1 {
		t.Errorf("the rate chart has %d lines, want 1 (A's QP 0x13)", n)
	}

	// "next anomaly" from nothing selected goes to the first one: the
	// lost packet.
	do(t, ctx, chromedp.Click(chromedp.ID("next-anomaly")))
	if got := selected(t, ctx); got != 3 {
		t.Errorf("next anomaly selected packet %d, want 3", got)
	}
	do(t, ctx, chromedp.Click(chromedp.ID("next-anomaly")))
	if got := selected(t, ctx); got != 4 {
		t.Errorf("next anomaly again selected packet %d, want 4", got)
	}

	// Clicking the 4th packet's arrow shows its fields, its text, its
	// event and both ends' state after it.
	do(t, ctx, chromedp.Click(chromedp.ID("prev-anomaly")))
	do(t, ctx, chromedp.Click(chromedp.CSS(`.pkt[data-index="4"] .shaft`)))
	details := eval[string](t, ctx, `document.getElementById('details').textContent`)
	p := r.Packets[3]
	for _, want := range []string{p.Fields, p.Text, p.Events[0].String(), p.After[0].End, p.After[1].End, p.After[1].NAKState} {
		if !strings.Contains(details, want) {
			t.Errorf("after a click on packet 4, #details has no %q:\n%s", want, details)
		}
	}
	if got := selected(t, ctx); got != 4 {
		t.Errorf("the click selected packet %d, want 4", got)
	}

	// n and p step through the packets.
	do(t, ctx, chromedp.KeyEvent("n"))
	if got := selected(t, ctx); got != 5 {
		t.Errorf("n selected packet %d, want 5", got)
	}
	do(t, ctx, chromedp.KeyEvent("nn"), chromedp.KeyEvent("p"))
	if got := selected(t, ctx); got != 6 {
		t.Errorf("n, n, p selected packet %d, want 6", got)
	}
	details = eval[string](t, ctx, `document.getElementById('details').textContent`)
	for _, e := range r.Packets[5].Events {
		if !strings.Contains(details, e.String()) {
			t.Errorf("packet 6's details have no %q, as trace prints it:\n%s", e.String(), details)
		}
	}

	screenshot(t, ctx)

	// The zoom buttons change the space between packets.
	spacing := func() float64 {
		return eval[float64](t, ctx, `(r => r[1].getBBox().y - r[0].getBBox().y)(document.querySelectorAll('.pkt .hit'))`)
	}
	before := spacing()
	do(t, ctx, chromedp.Click(chromedp.ID("zoom-in")))
	if after := spacing(); after <= before {
		t.Errorf("zoom in: packets %v pixels apart, %v before", after, before)
	}
	do(t, ctx, chromedp.Click(chromedp.ID("zoom-out")))

	// Filtering on the second connection leaves its 3 packets alone, and
	// on the packets to QP 0x14 the one WRITE.
	for _, f := range []struct{ value, want string }{{"c:1", "[14 15 16]"}, {fmt.Sprint("q:", 0x14), "[14]"}, {"all", fmt.Sprint(indexes(r))}} {
		eval[bool](t, ctx, `(s => { s.value = '`+f.value+`'; return s.dispatchEvent(new Event('change')); })(document.getElementById('qp-filter'))`)
		shown := eval[[]int](t, ctx, `[...document.querySelectorAll('.pkt')].map(g => Number(g.dataset.index))`)
		if fmt.Sprint(shown) != f.want {
			t.Errorf("filtered on %s, the diagram shows packets %v, want %s", f.value, shown, f.want)
		}
	}

	checkConsole()
}

// TestLadderHTMLEvents: the page writes each kind of transport event as
// trace's String does (the script has its own copy of it).
func TestLadderHTMLEvents(t *testing.T) {
	const ms = time.Millisecond
	events := []trace.Event{
		{Kind: trace.State, From: "RTS", To: "ERR", Reason: "retry count exceeded"},
		{Kind: trace.NAKSent, PSN: 12, Expected: 10, Syndrome: "PSN sequence error", Opcode: "RC_RDMA_WRITE_MIDDLE"},
		{Kind: trace.NAKSent, PSN: 12, Expected: 12, Syndrome: "remote access error", Opcode: "RC_RDMA_WRITE_ONLY", Reason: "bad rkey"},
		{Kind: trace.RNRNAKSent, PSN: 7, Wait: 655360 * time.Microsecond, Opcode: "RC_SEND_ONLY"},
		{Kind: trace.Duplicate, PSN: 5, Expected: 9, Opcode: "RC_RDMA_READ_REQUEST", Reason: "replayed"},
		{Kind: trace.Dropped, PSN: 3, Opcode: "UC_SEND_MIDDLE", Reason: "UC gap"},
		{Kind: trace.CNPSent, PSN: 44, DestQP: 0x13},
		{Kind: trace.NAKReceived, PSN: 10, Syndrome: "PSN sequence error"},
		{Kind: trace.RNRNAKReceived, PSN: 7, Wait: 10 * time.Microsecond},
		{Kind: trace.ImpliedNAK, PSN: 20, WRID: 1<<64 - 1},
		{Kind: trace.GoBack, PSN: 10, Reason: "NAK"},
		{Kind: trace.Timeout, PSN: 105},
		{Kind: trace.Probe, PSN: 30, Wait: 1500 * time.Microsecond},
		{Kind: trace.RNRWaitOver, PSN: 7},
		{Kind: trace.WRFailed, WRID: 42, Opcode: "RDMA_WRITE", Status: "IBV_WC_RETRY_EXC_ERR", Reason: "7 retries"},
		{Kind: trace.CNPReceived, Rate: 5e9, TargetRate: 10e9, Alpha: 1},
		{Kind: trace.RateChange, Rate: 812.5e6, TargetRate: 1e9, Alpha: 0.0625},
		{Kind: trace.Error, Reason: "CQ full"},
	}
	for i := range events {
		events[i].Time = time.Duration(i) * ms
		events[i].Device, events[i].QP = "A", 0x11
	}
	r := &explain.Report{Lanes: []string{"10.0.0.1", "10.0.0.2"}, Events: events, Devices: map[string]string{"A": "10.0.0.1"}}
	ctx, checkConsole := browser(t)
	do(t, ctx, chromedp.Navigate("file://"+writeLadder(t, r)), chromedp.WaitVisible(chromedp.CSS("#ladder .note")))
	titles := eval[[]string](t, ctx, `[...document.querySelectorAll('#ladder .note title')].map(t => t.textContent)`)
	if len(titles) != len(events) {
		t.Fatalf("%d notes, want %d: %q", len(titles), len(events), titles)
	}
	for i, e := range events {
		if want := "A QP 0x11: " + e.String() + " ("; !strings.HasPrefix(titles[i], want) {
			t.Errorf("the page says\n\t%s\nwant\n\t%s...", titles[i], want)
		}
	}
	checkConsole()
}

// TestLadderHTMLEmpty: the page of an empty report opens without an error.
func TestLadderHTMLEmpty(t *testing.T) {
	ctx, checkConsole := browser(t)
	do(t, ctx, chromedp.Navigate("file://"+writeLadder(t, &explain.Report{})), chromedp.WaitVisible(chromedp.ID("legend")))
	if text := eval[string](t, ctx, `document.getElementById('counts').textContent`); !strings.HasPrefix(text, "0 RoCE packets") {
		t.Errorf("the page of an empty report says %q", text)
	}
	checkConsole()
}

// indexes returns the capture indexes of the report's packets.
func indexes(r *explain.Report) []int {
	var n []int
	for _, p := range r.Packets {
		n = append(n, p.Index)
	}
	return n
}

// repeated returns a report of n copies of r's packets and device events
// one after the other, each copy 100 ms after the one before.
func repeated(r *explain.Report, n int) *explain.Report {
	big := *r
	big.Packets, big.Events = nil, nil
	for k := range n {
		shift := time.Duration(k) * 100 * time.Millisecond
		for _, p := range r.Packets {
			p.Index += k * len(r.Packets)
			p.Time += shift
			big.Packets = append(big.Packets, p)
		}
		for _, e := range r.Events {
			e.Time += shift
			big.Events = append(big.Events, e)
		}
	}
	big.Counts.RoCE = len(big.Packets)
	return &big
}

// TestLadderHTMLLarge opens the diagram of 20,000 packets: it draws only
// the packets in view, draws the last ones when scrolled to the end, and
// jumps to the last anomaly. It says how big the page is and how long it
// took to open, and asserts no time.
func TestLadderHTMLLarge(t *testing.T) {
	r := repeated(ladderReport(), 1250)
	file := writeLadder(t, r)
	if fi, err := os.Stat(file); err == nil {
		t.Logf("%d packets: a page of %.1f MB", len(r.Packets), float64(fi.Size())/1e6)
	}
	ctx, checkConsole := browser(t)
	start := time.Now()
	do(t, ctx, chromedp.Navigate("file://"+file), chromedp.WaitVisible(chromedp.CSS("#ladder .pkt")))
	t.Logf("opened and drawn in %v", time.Since(start).Round(time.Millisecond))

	if n := eval[int](t, ctx, `document.querySelectorAll('.pkt').length`); n == 0 || n > 500 {
		t.Errorf("%d .pkt elements for %d packets, want only those in view (a few dozen)", n, len(r.Packets))
	}
	eval[int](t, ctx, `(d => d.scrollTop = d.scrollHeight)(document.getElementById('diagram'))`)
	do(t, ctx, chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`.pkt[data-index="%d"]`, len(r.Packets)))))
	eval[int](t, ctx, `document.getElementById('diagram').scrollTop = 0`)
	do(t, ctx, chromedp.KeyEvent("A")) // the previous anomaly, from nothing selected: the last one
	if got, want := selected(t, ctx), len(r.Packets)-1; got != want {
		t.Errorf("A selected packet %d, want the last anomaly, %d (the last CNP)", got, want)
	}
	checkConsole()
}

// screenshot writes the page as it is to the test's directory and to
// $GORXE_SCREENSHOT when that is set.
func screenshot(t *testing.T, ctx context.Context) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{filepath.Join(t.TempDir(), "ladder.png")}
	if f := os.Getenv("GORXE_SCREENSHOT"); f != "" {
		files = append(files, f)
	}
	for _, f := range files {
		if err := os.WriteFile(f, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", f)
	}
}

// TestLadderHTMLScene opens the ladder diagram of a real scene, gorxe
// demo's loss: every packet of its capture has its arrow, the lost one is
// drawn lost, clicking the NAK shows its fields as decode prints them and
// both ends' state, and the page says nothing to the console. With
// $GORXE_SCENE_SCREENSHOT set, the screenshot goes there (the README's).
func TestLadderHTMLScene(t *testing.T) {
	s, _ := scene.Find("loss")
	r, ctx, checkConsole := scenePage(t, s)
	if n := eval[int](t, ctx, `document.querySelectorAll('.pkt').length`); n != len(r.Packets) {
		t.Errorf("%d .pkt elements, want one a packet: %d", n, len(r.Packets))
	}
	var lost, nak *explain.Packet
	for k := range r.Packets {
		p := &r.Packets[k]
		if p.Lost && lost == nil {
			lost = p
		}
		if p.Anomaly == "nak" && nak == nil {
			nak = p
		}
	}
	if lost == nil || nak == nil {
		t.Fatalf("the scene has no lost packet (%v) or no NAK (%v)", lost, nak)
	}
	if n := eval[int](t, ctx, fmt.Sprintf(`document.querySelectorAll('.pkt[data-index="%d"] .lost-mark, .pkt[data-index="%d"].lost').length`, lost.Index, lost.Index)); n == 0 {
		t.Errorf("packet %d is not drawn lost", lost.Index)
	}
	do(t, ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`.pkt[data-index="%d"] .hit`, nak.Index))))
	details := eval[string](t, ctx, `document.getElementById('details').textContent`)
	for _, want := range []string{nak.Fields, nak.After[0].End, nak.After[1].End, "PSN sequence error"} {
		if !strings.Contains(details, want) {
			t.Errorf("the details of the NAK lack %q:\n%s", want, details)
		}
	}
	// B, the NAK's sender, has sent no request: its requester's cells are
	// dashes; A's next PSN is a number.
	row := eval[[]string](t, ctx, `[...document.querySelectorAll('#details tr')].map(tr => [...tr.children].map(c => c.textContent)).find(r => r[0] === 'next PSN')`)
	if want := fmt.Sprint(nak.After[1].NextPSN); len(row) != 3 || row[1] != "–" || row[2] != want {
		t.Errorf("the next-PSN row of the NAK's details is %q, want [next PSN – %s]", row, want)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if f := os.Getenv("GORXE_SCENE_SCREENSHOT"); f != "" {
		if err := os.WriteFile(f, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	checkConsole()
}

// TestLadderHTMLEveryScene opens each scene's page, as "gorxe demo SCENE
// --html" writes it: one arrow a packet, none of them lost but the ones
// explain calls lost, and no console message.
func TestLadderHTMLEveryScene(t *testing.T) {
	for _, s := range scene.Scenes {
		t.Run(s.Name, func(t *testing.T) {
			r, ctx, checkConsole := scenePage(t, &s)
			if n := eval[int](t, ctx, `document.querySelectorAll('.pkt').length`); n != len(r.Packets) {
				t.Errorf("%d .pkt elements, want one a packet: %d", n, len(r.Packets))
			}
			lost := 0
			for _, p := range r.Packets {
				if p.Lost {
					lost++
				}
			}
			if n := eval[int](t, ctx, `document.querySelectorAll('.pkt.lost').length`); n != lost {
				t.Errorf("%d packets drawn lost, explain says %d", n, lost)
			}
			checkConsole()
		})
	}
}

// scenePage plays s with the default seed and opens its ladder page, as
// "gorxe demo SCENE --html" writes it, in the browser: the scene's report,
// the browser's context, and browser's console check.
func scenePage(t *testing.T, s *scene.Scene) (*explain.Report, context.Context, func()) {
	t.Helper()
	res, err := s.Play(scene.DefaultSeed)
	if err != nil || res.Err != nil {
		t.Fatalf("the scene: %v, %v", err, res.Err)
	}
	file := filepath.Join(t.TempDir(), s.Name+".html")
	var page bytes.Buffer
	if err := explain.WriteHTML(&page, res.Report, "gorxe demo "+s.Name+": "+s.Title); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, page.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, checkConsole := browser(t)
	do(t, ctx, chromedp.Navigate("file://"+file), chromedp.WaitVisible(chromedp.CSS("#ladder .pkt")))
	return res.Report, ctx, checkConsole
}

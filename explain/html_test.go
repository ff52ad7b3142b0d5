package explain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/trace"
)

// sampleReport is a small report with one of each part: two lanes, a
// connection, a lost packet, a NAK with its events and states, a device's
// events and a text that tries to close the script element.
func sampleReport() *Report {
	after := []EndState{
		{End: "10.0.0.1 QP 0x11", RequesterKnown: true, NextPSN: 104, Unacked: 100, Outstanding: 4},
		{End: "10.0.0.2 QP 0x12", ResponderKnown: true, ExpectedPSN: 102, MSN: 0, NAKState: "sequence error NAK sent, waiting for PSN 102"},
	}
	return &Report{
		Lanes: []string{"10.0.0.1", "10.0.0.2"},
		Packets: []Packet{
			{Index: 1, Time: 0, Src: "10.0.0.1", Dst: "10.0.0.2", Opcode: "RC_RDMA_WRITE_FIRST", DestQP: 0x12, PSN: 100,
				Fields: "ack=0 se=0 mig=0 pad=0 reth(va=0x7f0000001000 rkey=0x00000276 len=5000) payload=1024 icrc=ok",
				Text:   "The first packet of a 5000-byte RDMA WRITE.", After: after},
			{Index: 2, Time: 3 * time.Microsecond, Src: "10.0.0.1", Dst: "10.0.0.2", Opcode: "RC_RDMA_WRITE_MIDDLE", DestQP: 0x12, PSN: 101,
				Fields: "ack=0 se=0 mig=0 pad=0 payload=1024 icrc=ok", Text: "Lost.", Anomaly: "lost", Lost: true},
			{Index: 3, Time: 5 * time.Microsecond, Src: "10.0.0.2", Dst: "10.0.0.1", Opcode: "RC_ACKNOWLEDGE", DestQP: 0x11, PSN: 101,
				Fields:  "ack=0 se=0 mig=0 pad=0 aeth(NAK PSN_SEQ_ERROR msn=0) payload=0 icrc=ok",
				Text:    `</script><script>alert(1)</script> & <!-- a comment -->`,
				Anomaly: "nak",
				Events: []trace.Event{
					{Time: 5 * time.Microsecond, QP: 0x11, Kind: trace.NAKReceived, PSN: 101, Syndrome: "PSN sequence error"},
					{Time: 5 * time.Microsecond, QP: 0x11, Kind: trace.GoBack, PSN: 101, Reason: "NAK </script>"},
				},
				After: after},
		},
		Conns: []Connection{{
			Service: "RC",
			Ends:    [2]End{{Addr: "10.0.0.1", QPN: 0x11}, {Addr: "10.0.0.2", QPN: 0x12}},
			Summary: Summary{Packets: [2]int{2, 1}, NAKs: [2]map[string]int{nil, {"PSN sequence error": 1}}, Duration: 5 * time.Microsecond},
		}},
		Events: []trace.Event{
			{Time: 0, Device: "A", QP: 0x11, Kind: trace.State, From: "RTR", To: "RTS"},
			{Time: 4 * time.Microsecond, Device: "A", QP: 0x11, Kind: trace.RateChange, Rate: 5e9, TargetRate: 10e9, Alpha: 0.5},
		},
		Devices: map[string]string{"A": "10.0.0.1", "B": "10.0.0.2"},
		Counts:  Counts{RoCE: 3},
	}
}

func writeHTML(t testing.TB, r *Report, title string) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteHTML(&b, r, title); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// embedded returns the text of the page's report element.
func embedded(t *testing.T, page string) string {
	t.Helper()
	const open = `<script type="application/json" id="report">`
	_, rest, ok := strings.Cut(page, open)
	if !ok {
		t.Fatal("no report element in the page")
	}
	data, _, ok := strings.Cut(rest, "</script>")
	if !ok {
		t.Fatal("the report element is not closed")
	}
	return data
}

func TestHTMLEmbedsReport(t *testing.T) {
	r := sampleReport()
	page := writeHTML(t, r, "loss & recovery")
	var got Report
	if err := json.Unmarshal([]byte(embedded(t, page)), &got); err != nil {
		t.Fatalf("the embedded report does not decode: %v", err)
	}
	if !reflect.DeepEqual(&got, r) {
		t.Errorf("the embedded report decodes to\n%+v\nwant\n%+v", got, *r)
	}
	if !strings.Contains(page, "<title>loss &amp; recovery</title>") {
		t.Error("the title is not in the page, escaped")
	}
}

// TestHTMLEscapes: a text that closes the script element stays inside it,
// and so does every other string of the report.
func TestHTMLEscapes(t *testing.T) {
	page := writeHTML(t, sampleReport(), `</title><script>alert(2)</script>`)
	if strings.Contains(page, "alert(1)</script>") || strings.Contains(page, "<script>alert") {
		t.Error("a text of the report or the title got out as a script element")
	}
	if n := strings.Count(strings.ToLower(page), "<script"); n != 2 {
		t.Errorf("%d script elements, want 2 (the report and the program)", n)
	}
	if strings.Contains(embedded(t, page), "<") {
		t.Error("the embedded report has a '<'")
	}
}

// TestHTMLSelfContained: the page refers to nothing outside itself.
func TestHTMLSelfContained(t *testing.T) {
	page := strings.ToLower(writeHTML(t, sampleReport(), "demo"))
	for _, s := range []string{"http://", "https://", "//cdn", "@import", "url(", " src="} {
		if strings.Contains(page, s) {
			i := strings.Index(page, s)
			t.Errorf("the page has %q: ...%s...", s, page[max(0, i-60):min(len(page), i+60)])
		}
	}
}

// TestHTMLAssets: the script and the style cannot end their elements early.
func TestHTMLAssets(t *testing.T) {
	if strings.Contains(strings.ToLower(ladderJS), "</script") {
		t.Error("ladder.js has </script")
	}
	if strings.Contains(strings.ToLower(ladderCSS), "</style") {
		t.Error("ladder.css has </style")
	}
}

func TestHTMLEmpty(t *testing.T) {
	for _, r := range []*Report{nil, {}} {
		page := writeHTML(t, r, "")
		var got Report
		if err := json.Unmarshal([]byte(embedded(t, page)), &got); err != nil {
			t.Fatalf("the embedded report does not decode: %v", err)
		}
		if !strings.HasSuffix(page, "</html>\n") {
			t.Error("the page is not complete")
		}
	}
}

// largeReport is a transfer of n packets between two lanes with what
// explain gives a lossy one: every packet with its fields, text and
// states, an anomaly and events every 100 packets, a device's rate
// changes.
func largeReport(n int) *Report {
	r := &Report{Lanes: []string{"192.168.10.1", "192.168.10.2"}, Counts: Counts{RoCE: n}}
	r.Conns = []Connection{{Service: "RC", Ends: [2]End{{Addr: "192.168.10.1", QPN: 0x11}, {Addr: "192.168.10.2", QPN: 0x11}}}}
	for i := range n {
		p := Packet{
			Index: i + 1, Time: time.Duration(i) * 900 * time.Nanosecond, Src: "192.168.10.1", Dst: "192.168.10.2",
			Opcode: "RC_RDMA_WRITE_MIDDLE", DestQP: 0x11, PSN: uint32(1000 + i),
			Fields: "ack=0 se=0 mig=0 pad=0 payload=4096 icrc=ok",
			Text:   fmt.Sprintf("A middle packet of the RDMA WRITE: 4096 bytes more, PSN %d as the responder expects.", 1000+i),
			After: []EndState{
				{End: "192.168.10.1 QP 0x11", RequesterKnown: true, NextPSN: uint32(1001 + i), Unacked: uint32(1000 + i - i%64), Outstanding: i%64 + 1},
				{End: "192.168.10.2 QP 0x11", ResponderKnown: true, ExpectedPSN: uint32(1001 + i), MSN: uint32(i / 64)},
			},
		}
		if i%64 == 63 {
			p.Src, p.Dst, p.Opcode, p.Fields = p.Dst, p.Src, "RC_ACKNOWLEDGE", "ack=0 se=0 mig=0 pad=0 aeth(ACK credits=31 msn=1) payload=0 icrc=ok"
		}
		if i%100 == 50 {
			p.Anomaly = "retransmission"
			p.Events = []trace.Event{{Time: p.Time, QP: 0x11, Kind: trace.GoBack, PSN: p.PSN, Reason: "NAK"}}
		}
		r.Packets = append(r.Packets, p)
		if i%500 == 0 {
			r.Events = append(r.Events, trace.Event{Time: p.Time, Device: "A", QP: 0x11, Kind: trace.RateChange, Rate: float64(10e9 - i*1e5), TargetRate: 10e9, Alpha: 0.2})
		}
	}
	return r
}

// TestHTMLLarge writes a 20,000-packet report and says how big the page
// is; BenchmarkWriteHTML says how long it takes.
func TestHTMLLarge(t *testing.T) {
	const n = 20000
	start := time.Now()
	page := writeHTML(t, largeReport(n), "large")
	t.Logf("%d packets: %d bytes (%.0f a packet) in %v", n, len(page), float64(len(page))/n, time.Since(start))
	if len(page) > 1000*n {
		t.Errorf("%d bytes for %d packets: more than 1000 a packet", len(page), n)
	}
}

func BenchmarkWriteHTML(b *testing.B) {
	r := largeReport(20000)
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		if err := WriteHTML(&buf, r, "large"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "bytes/page")
}

package trace

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// examples are an event of every kind, with every field the kind sets and
// no other, and the text String renders it as.
var examples = []struct {
	ev   Event
	text string
}{
	{Event{Kind: State, From: "RTR", To: "RTS"}, "state RTR -> RTS"},
	{Event{Kind: State, From: "RTS", To: "ERR", Reason: "a work request failed"}, "state RTS -> ERR: a work request failed"},
	{Event{Kind: NAKSent, PSN: 12, Expected: 10, Syndrome: PSNSequenceError, Opcode: "RC_SEND_ONLY"},
		"NAK PSN sequence error for RC_SEND_ONLY PSN 12, expected 10"},
	{Event{Kind: NAKSent, PSN: 10, Expected: 10, Syndrome: InvalidRequest, Opcode: "RC_RDMA_WRITE_FIRST", Reason: "opcode out of sequence"},
		"NAK invalid request for RC_RDMA_WRITE_FIRST PSN 10: opcode out of sequence"},
	{Event{Kind: RNRNAKSent, PSN: 7, Wait: 640 * time.Microsecond, Opcode: "RC_SEND_ONLY"},
		"RNR NAK for RC_SEND_ONLY PSN 7: no receive posted, timer 640µs"},
	{Event{Kind: Duplicate, PSN: 5, Expected: 9, Opcode: "RC_RDMA_READ_REQUEST", Reason: DuplicateReplayed},
		"duplicate RC_RDMA_READ_REQUEST PSN 5, expected 9: replayed from the saved READ state"},
	{Event{Kind: Dropped, PSN: 3, Opcode: "UD_SEND_ONLY", Reason: "Q_Key not the QP's"}, "dropped UD_SEND_ONLY PSN 3: Q_Key not the QP's"},
	{Event{Kind: CNPSent, PSN: 4, DestQP: 0x12}, "ECN CE at PSN 4: CNP to QP 0x12"},
	{Event{Kind: NAKReceived, PSN: 8, Syndrome: RemoteAccessError}, "NAK remote access error received at PSN 8"},
	{Event{Kind: RNRNAKReceived, PSN: 8, Wait: 1280 * time.Microsecond}, "RNR NAK at PSN 8: peer has no receive posted, wait 1.28ms"},
	{Event{Kind: ImpliedNAK, PSN: 20, WRID: 3}, "implied NAK: answers to work request 3 lost from PSN 20"},
	{Event{Kind: GoBack, PSN: 20, Reason: GoBackImpliedNAK}, "go back to PSN 20: implied NAK"},
	{Event{Kind: Timeout, PSN: 21}, "local ACK timeout at PSN 21"},
	{Event{Kind: Probe, PSN: 30, Wait: 2 * time.Millisecond}, "no ACK for 2ms: probing with PSN 30"},
	{Event{Kind: Probe, PSN: 30, Reason: ProbeConfirm}, "probing with PSN 30: a resend answered: are the packets sent before it arriving?"},
	{Event{Kind: ProbeSpurious, PSN: 30, Wait: 9 * time.Millisecond}, "probe with PSN 30 was not needed (answered twice): probes now wait 9ms"},
	{Event{Kind: GoBackUndone, PSN: 40, Expected: 300}, "go-back undone: PSN 40 answered before it was sent again; resuming at PSN 300"},
	{Event{Kind: RNRWaitOver, PSN: 8}, "RNR wait over, resending from PSN 8"},
	{Event{Kind: WRFailed, WRID: 9, Opcode: "RDMA_WRITE", Status: "transport retry counter exceeded"},
		"work request 9 (RDMA_WRITE) failed: transport retry counter exceeded"},
	{Event{Kind: CNPReceived, Rate: 50.049e9, TargetRate: 100e9, Alpha: 0.999}, "CNP received: rate 50.05 Gb/s, target 100.00 Gb/s, alpha 0.999"},
	{Event{Kind: CNPReceived, Rate: 40e6, TargetRate: 100e6, Alpha: 0.5, Reason: "no cut now"},
		"CNP received: rate 40.00 Mb/s, target 100.00 Mb/s, alpha 0.500: no cut now"},
	{Event{Kind: RateChange, Rate: 25.416e9, TargetRate: 100e9, Alpha: 0.979}, "DCQCN rate 25.42 Gb/s, target 100.00 Gb/s, alpha 0.979"},
	{Event{Kind: Error, Reason: "CNP not sent: no route"}, "error: CNP not sent: no route"},
}

// stamped returns ev as a device reports it: with a time, the device's
// name and the QP's number.
func stamped(ev Event) Event {
	ev.Time, ev.Device, ev.QP = 1234567*time.Nanosecond, "gorxe0", 0x11
	return ev
}

func TestExamplesCoverEveryKind(t *testing.T) {
	var seen [kinds]bool
	for _, x := range examples {
		seen[x.ev.Kind] = true
	}
	for k := State; k < kinds; k++ {
		if !seen[k] {
			t.Errorf("no example of %v", k)
		}
	}
}

func TestString(t *testing.T) {
	for _, x := range examples {
		if got := stamped(x.ev).String(); got != x.text {
			t.Errorf("%v: %q, want %q", x.ev.Kind, got, x.text)
		}
	}
}

// TestJSONRoundTrip: an event's JSON is valid, holds the fields its kind
// sets and no other, and decodes with encoding/json into the same event.
func TestJSONRoundTrip(t *testing.T) {
	for _, x := range examples {
		ev := stamped(x.ev)
		// The fields the kind does not set hold junk, which must not
		// reach the JSON.
		full := ev
		fill := func(f *uint32) {
			if *f == 0 {
				*f = 99
			}
		}
		fill(&full.PSN)
		fill(&full.Expected)
		fill(&full.DestQP)
		for _, s := range []*string{&full.From, &full.To, &full.Syndrome, &full.Opcode, &full.Status} {
			if *s == "" {
				*s = "junk"
			}
		}
		if full.WRID == 0 {
			full.WRID = 99
		}
		if full.Wait == 0 && !ev.Kind.has(fWait) { // a Probe's may be 0
			full.Wait = time.Second
		}
		if full.Rate == 0 {
			full.Rate, full.TargetRate, full.Alpha = 1, 2, 0.5
		}
		b := full.AppendJSON([]byte("prefix "))
		line, ok := strings.CutPrefix(string(b), "prefix ")
		if !ok || !json.Valid([]byte(line)) {
			t.Errorf("%v: AppendJSON wrote %q: not a JSON object after what was there", ev.Kind, b)
			continue
		}
		var got Event
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Errorf("%v: %s: %v", ev.Kind, line, err)
			continue
		}
		if got != ev {
			t.Errorf("%v: %s decodes as\n%+v, want\n%+v", ev.Kind, line, got, ev)
		}
		if m, err := json.Marshal(full); err != nil || string(m) != line {
			t.Errorf("%v: json.Marshal gives %s, %v; want AppendJSON's %s", ev.Kind, m, err, line)
		}
	}
}

func TestJSONFields(t *testing.T) {
	got := string(stamped(Event{Kind: NAKSent, PSN: 12, Expected: 10, Syndrome: PSNSequenceError, Opcode: "RC_SEND_ONLY"}).AppendJSON(nil))
	want := `{"time":1234567,"device":"gorxe0","qp":17,"kind":"nak_sent","psn":12,"expected":10,"syndrome":"PSN sequence error","opcode":"RC_SEND_ONLY"}`
	if got != want {
		t.Errorf("AppendJSON:\n%s\nwant\n%s", got, want)
	}
}

// TestJSONEscapes: a reason with quotes, a backslash and control
// characters is a valid JSON string that decodes to itself.
func TestJSONEscapes(t *testing.T) {
	reason := "a \"quoted\" \\ path\n\ttab \x01\x1f\x7f é"
	ev := stamped(Event{Kind: Error, Reason: reason})
	ev.Device = "dev\"0"
	b := ev.AppendJSON(nil)
	if !json.Valid(b) {
		t.Fatalf("%s is not valid JSON", b)
	}
	var got Event
	if err := json.Unmarshal(b, &got); err != nil || got != ev {
		t.Fatalf("%s decodes as %+v, %v; want %+v", b, got, err, ev)
	}
	if strings.ContainsAny(string(b), "\n\t\x01") {
		t.Errorf("%q holds a raw control character", b)
	}
}

func TestParseKind(t *testing.T) {
	for k := State; k < kinds; k++ {
		name := k.String()
		if got, ok := ParseKind(name); !ok || got != k {
			t.Errorf("ParseKind(%q) = %v, %v; want %v", name, got, ok, k)
		}
		text, err := k.MarshalText()
		if err != nil || string(text) != name {
			t.Errorf("%v.MarshalText() = %q, %v", k, text, err)
		}
		var u Kind
		if err := u.UnmarshalText(text); err != nil || u != k {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", text, u, err, k)
		}
	}
	for _, name := range []string{"", "kind(0)", "NAK_SENT", "nak"} {
		if k, ok := ParseKind(name); ok {
			t.Errorf("ParseKind(%q) = %v, true; want false", name, k)
		}
		var u Kind
		if err := u.UnmarshalText([]byte(name)); err == nil {
			t.Errorf("UnmarshalText(%q) = %v, want an error", name, u)
		}
	}
	if s := Kind(0).String(); s != "kind(0)" {
		t.Errorf("Kind(0).String() = %q", s)
	}
	if s := kinds.String(); s != "kind(20)" {
		t.Errorf("an unknown kind's String is %q", s)
	}
	var ev Event
	if err := json.Unmarshal([]byte(`{"kind":"warp_drive"}`), &ev); err == nil {
		t.Errorf("an event of an unknown kind decodes as %+v", ev)
	}
}

// TestAppendAllocatesNothing: String aside, rendering an event into a
// reused buffer allocates nothing, so a trace writer can keep up without
// garbage.
func TestAppendAllocatesNothing(t *testing.T) {
	ev := stamped(examples[2].ev)
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() { buf = ev.AppendJSON(buf[:0]) }); n != 0 {
		t.Errorf("AppendJSON allocates %.0f times", n)
	}
}

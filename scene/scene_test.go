package scene

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gorxe/gorxe/trace"
)

// play plays the scene name with seed, failing the test on any error.
func play(t *testing.T, name string, seed uint64) *Result {
	t.Helper()
	s, ok := Find(name)
	if !ok {
		t.Fatalf("no scene %q", name)
	}
	res, err := s.Play(seed)
	if err != nil {
		t.Fatal(err)
	}
	if res.Err != nil {
		var b bytes.Buffer
		res.WriteText(&b)
		t.Fatalf("%s: %v\n%s", name, res.Err, b.String())
	}
	return res
}

// TestScenesPass plays every scene with the default seed and two others:
// each one's checks hold.
func TestScenesPass(t *testing.T) {
	for _, s := range Scenes {
		for _, seed := range []uint64{DefaultSeed, 2, 99} {
			t.Run(fmt.Sprintf("%s/%d", s.Name, seed), func(t *testing.T) { play(t, s.Name, seed) })
		}
	}
}

// TestDeterministic plays each scene twice with a seed: the text, the
// capture and the events are the same bytes. Another seed changes them.
func TestDeterministic(t *testing.T) {
	for _, s := range Scenes {
		t.Run(s.Name, func(t *testing.T) {
			var texts, pcaps, events [2][]byte
			for k := range 2 {
				res := play(t, s.Name, 7)
				var b, e bytes.Buffer
				res.WriteText(&b)
				res.WriteEvents(&e)
				texts[k], pcaps[k], events[k] = b.Bytes(), res.Pcap, e.Bytes()
			}
			if !bytes.Equal(texts[0], texts[1]) {
				t.Errorf("the text differs between two runs:\n%s\n----\n%s", texts[0], texts[1])
			}
			if !bytes.Equal(pcaps[0], pcaps[1]) {
				t.Errorf("the capture differs between two runs")
			}
			if !bytes.Equal(events[0], events[1]) {
				t.Errorf("the events differ between two runs")
			}
			other := play(t, s.Name, 8)
			if bytes.Equal(other.Pcap, pcaps[0]) {
				t.Errorf("seeds 7 and 8 give the same capture")
			}
		})
	}
}

// wireEvent is an event both a device and a capture show: its kind, its
// QP and its PSN. A probe and a go-back are one kind, a resend: on the
// wire a probe of a lone packet is a go-back to it.
type wireEvent struct {
	kind string
	qp   uint32
	psn  uint32
}

func wireEvents(evs []trace.Event) []wireEvent {
	var out []wireEvent
	for _, e := range evs {
		k := e.Kind.String()
		switch e.Kind {
		case trace.GoBack, trace.Probe:
			k = "resend"
		case trace.NAKSent, trace.RNRNAKSent, trace.Duplicate, trace.NAKReceived, trace.RNRNAKReceived:
		case trace.CNPSent, trace.CNPReceived:
			e.PSN = 0 // a CNP carries no PSN of the packet it answers
		default:
			continue
		}
		out = append(out, wireEvent{k, e.QP, e.PSN})
	}
	slices.SortStableFunc(out, func(a, b wireEvent) int {
		if a.kind != b.kind {
			return cmp(a.kind, b.kind)
		}
		if a.qp != b.qp {
			return cmp(a.qp, b.qp)
		}
		return cmp(a.psn, b.psn)
	})
	return out
}

func cmp[T int | uint32 | string](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestExplainMatchesDevices checks, for every scene, that what explain
// infers from the scene's capture alone (NAKs sent and received, RNR
// NAKs, duplicates, resends, CNPs) is what the devices report, event for
// event.
func TestExplainMatchesDevices(t *testing.T) {
	for _, s := range Scenes {
		for _, seed := range []uint64{DefaultSeed, 2, 3} {
			t.Run(fmt.Sprintf("%s/%d", s.Name, seed), func(t *testing.T) {
				res := play(t, s.Name, seed)
				var inferred []trace.Event
				for _, p := range res.Report.Packets {
					inferred = append(inferred, p.Events...)
				}
				dev, exp := wireEvents(res.Events), wireEvents(inferred)
				if !slices.Equal(dev, exp) {
					var b bytes.Buffer
					res.WriteText(&b)
					t.Errorf("the devices report %v\nexplain infers    %v\n%s", dev, exp, b.String())
				}
			})
		}
	}
}

// TestLostREP checks the handshake scene's story as explain tells it
// from the capture: the first REP is lost, the REQ is sent again on the
// timer, the REP again on B's timer and in answer to the REQ, the RTU in
// answer to a REP, and the SEND that follows starts at the PSN B's REP
// named.
func TestLostREP(t *testing.T) {
	res := play(t, "cm-lost-rep", DefaultSeed)
	var told []string
	for _, p := range res.Report.Packets {
		if p.Opcode != "UD_SEND_ONLY" {
			continue
		}
		switch {
		case p.Lost:
			told = append(told, "lost")
		case strings.Contains(p.Text, "in answer to the REQ"):
			told = append(told, "REP answers REQ")
		case strings.Contains(p.Text, "in answer to the REP"):
			told = append(told, "RTU answers REP")
		case strings.Contains(p.Text, "The same REQ again") && strings.Contains(p.Text, "response timeout"):
			told = append(told, "REQ on timer")
		case strings.Contains(p.Text, "The same REP again") && strings.Contains(p.Text, "response timeout"):
			told = append(told, "REP on timer")
		default:
			told = append(told, strings.Fields(p.Text)[1])
		}
	}
	want := []string{"REQ:", "lost", "REQ on timer", "REP on timer", "REP answers REQ", "RTU", "RTU answers REP"}
	if !slices.Equal(told, want) {
		t.Errorf("the handshake told as %q, want %q", told, want)
	}
	var rep, first string
	for _, p := range res.Report.Packets {
		if rep == "" && strings.HasPrefix(p.Text, "CM REP") {
			rep = p.Text
		}
		if first == "" && p.Opcode == "RC_SEND_FIRST" {
			first = fmt.Sprint(p.PSN)
		}
	}
	if first == "" || !strings.Contains(rep, "expects, "+first+",") {
		t.Errorf("A's SEND starts at PSN %s; B's REP: %q", first, rep)
	}
}

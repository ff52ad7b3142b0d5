package rc

import (
	"testing"
	"time"

	"github.com/gorxe/gorxe/wire/bth"
)

// TestProbeTimeoutCoversTail: round trips of 1 ms with one of 8 ms among
// them, as a one-CPU host's hiccups come: the probe timeout stays past
// the slow one for a while after it, where srtt plus four mean
// deviations forgets it within a dozen samples, and comes back down as
// the slow one fades; hiccups a hundred round trips apart stay covered.
func TestProbeTimeoutCoversTail(t *testing.T) {
	q, _ := newTestQP(t)
	q.attr.Timeout = 14 // local ACK timeout 67 ms
	port := q.port.(*fakePort)
	tm := &q.tm
	sample := func(d time.Duration) {
		tm.rttPending, tm.rttPSN, tm.rttSent = true, 1, port.Now()
		port.advance(d)
		tm.onAcked(bth.PSN(2))
	}
	for range 100 {
		sample(time.Millisecond)
	}
	if d := tm.probeTimeout(); d != 4*time.Millisecond {
		t.Fatalf("after steady 1 ms round trips, probe timeout %v, want 4ms", d)
	}
	sample(8 * time.Millisecond)
	for range 20 {
		sample(time.Millisecond)
	}
	if d := tm.probeTimeout(); d < 10*time.Millisecond {
		t.Errorf("20 samples after an 8 ms round trip, probe timeout %v: another would fire it", d)
	}
	for range 1500 {
		sample(time.Millisecond)
	}
	if d := tm.probeTimeout(); d > 4500*time.Microsecond {
		t.Errorf("1500 samples later, probe timeout %v, want about 4 ms again", d)
	}

	// Hiccups one in a hundred, as in make bench-vm's VMs: the timeout
	// before each one is past it, though a hundred samples have passed.
	for i := range 10 {
		sample(8 * time.Millisecond)
		for range 99 {
			sample(time.Millisecond)
		}
		if d := tm.probeTimeout(); d <= 8*time.Millisecond {
			t.Errorf("99 samples after hiccup %d of 8 ms, probe timeout %v: the next one would fire it", i+1, d)
		}
	}
}

// TestSpuriousProbeFloor: each probe found spurious sets the least probe
// timeout to twice its answer's delay or twice what it was, whichever is
// longer, never past half the local ACK timeout; the watch ends at an
// answer to a later PSN, after which a repeated answer proves nothing.
func TestSpuriousProbeFloor(t *testing.T) {
	q, _ := newTestQP(t)
	q.attr.Timeout = 14 // local ACK timeout 67.1 ms
	port := q.port.(*fakePort)
	tm := &q.tm
	half := time.Duration(4096<<14) / 2
	tm.srtt, tm.rttMax = 20*time.Microsecond, 20*time.Microsecond
	if d := tm.probeTimeout(); d != time.Millisecond {
		t.Fatalf("probe timeout %v, want the 1ms floor", d)
	}
	spurious := func(late time.Duration) {
		tm.probed, tm.probedSince, tm.watch = 100, port.Now(), watchAnswer
		port.advance(late)
		tm.onAcked(101)
		tm.onDuplicateAck(100)
	}
	for _, c := range []struct {
		late, want time.Duration
	}{
		{3 * time.Millisecond, 6 * time.Millisecond}, // twice the delay
		{time.Millisecond, 12 * time.Millisecond},    // twice the floor
		{20 * time.Millisecond, half},                // half the ACK timeout
		{time.Millisecond, half},                     // and no more
	} {
		spurious(c.late)
		if d := tm.probeTimeout(); d != c.want {
			t.Errorf("after a probe answered %v late, probe timeout %v, want %v", c.late, d, c.want)
		}
	}
	if q.stats.SpuriousProbes != 4 {
		t.Errorf("%d spurious probes counted, want 4", q.stats.SpuriousProbes)
	}

	tm.probeFloor = 0
	tm.probed, tm.probedSince, tm.watch = 200, port.Now(), watchAnswer
	tm.onAcked(201)
	tm.onAcked(202) // PSN 201's answer: the probe's came with the first
	tm.onDuplicateAck(201)
	if d := tm.probeTimeout(); d != time.Millisecond || q.stats.SpuriousProbes != 4 {
		t.Errorf("a repeated answer after a later PSN's counted as spurious: timeout %v", d)
	}
}

// TestFirstAnswerBoundsRoundTrip: with no round trip measured, the first
// answer sets the estimate to the time since the QP first sent, which
// arms the probe; the first clean sample then replaces that bound rather
// than averaging with it, and later answers leave it alone.
func TestFirstAnswerBoundsRoundTrip(t *testing.T) {
	q, _ := newTestQP(t)
	q.attr.Timeout = 14
	port := q.port.(*fakePort)
	tm := &q.tm
	tm.onAnswer() // nothing sent yet: nothing to bound
	if tm.srtt != 0 {
		t.Fatalf("an answer before any packet set srtt %v", tm.srtt)
	}
	tm.unsettled = true
	tm.settle() // the first packets leave
	port.advance(3 * time.Millisecond)
	tm.onAnswer()
	if tm.srtt != 3*time.Millisecond || tm.probeTimeout() != 12*time.Millisecond {
		t.Fatalf("after a first answer 3ms on: srtt %v, probe timeout %v; want 3ms, 12ms", tm.srtt, tm.probeTimeout())
	}
	port.advance(time.Millisecond)
	tm.onAnswer()
	if tm.srtt != 3*time.Millisecond {
		t.Errorf("a second answer moved the bound to %v", tm.srtt)
	}
	tm.rttPending, tm.rttPSN, tm.rttSent = true, 1, port.Now()
	port.advance(200 * time.Microsecond)
	tm.onAcked(2)
	if tm.srtt != 200*time.Microsecond || tm.rttMax != 200*time.Microsecond {
		t.Errorf("the first clean sample of 200µs gave srtt %v, rttMax %v; want both 200µs", tm.srtt, tm.rttMax)
	}
	tm.rttPending, tm.rttPSN, tm.rttSent = true, 3, port.Now()
	port.advance(400 * time.Microsecond)
	tm.onAcked(4)
	if tm.srtt != 225*time.Microsecond {
		t.Errorf("the second sample of 400µs gave srtt %v; want 225µs (an eighth of the way)", tm.srtt)
	}
}

// TestProbeBackoff: a go-back of a probe's that the responder answers
// only after a probe timeout doubles the probe timeout, each such one
// again, up to half the local ACK timeout; one answered within the
// timeout ends the backoff, and so does a clean round-trip sample.
func TestProbeBackoff(t *testing.T) {
	q, _ := newTestQP(t)
	q.attr.Timeout = 14 // local ACK timeout 67.1 ms
	port := q.port.(*fakePort)
	tm := &q.tm
	tm.srtt, tm.rttMax = 100*time.Microsecond, 100*time.Microsecond
	late := func(d time.Duration) {
		tm.goBackAt = port.Now()
		port.advance(d)
		tm.onAcked(bth.PSN(2))
	}
	for i, want := range []time.Duration{2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond} {
		late(10 * time.Millisecond)
		if d := tm.probeTimeout(); d != want {
			t.Fatalf("after %d late answers to go-backs, probe timeout %v, want %v", i+1, d, want)
		}
	}
	late(100 * time.Microsecond) // answered within the timeout
	if d := tm.probeTimeout(); d != time.Millisecond {
		t.Fatalf("after a go-back answered at once, probe timeout %v, want 1ms", d)
	}
	tm.backoff = maxProbeBackoff
	if d := tm.probeTimeout(); d != time.Duration(4096<<14)/2 {
		t.Fatalf("at most backoff, probe timeout %v, want half the ACK timeout", d)
	}
	tm.rttPending, tm.rttPSN, tm.rttSent = true, 1, port.Now()
	port.advance(100 * time.Microsecond)
	tm.onAcked(bth.PSN(2))
	if d := tm.probeTimeout(); d != time.Millisecond {
		t.Fatalf("after a clean sample, probe timeout %v, want 1ms", d)
	}
}

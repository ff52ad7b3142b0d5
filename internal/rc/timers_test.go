package rc

import (
	"testing"
	"time"

	"github.com/gorxe/gorxe/trace"
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

// TestProbeBackoff: each go-back of a probe's doubles the probe timeout,
// up to half the local ACK timeout, and answers do not end the backoff
// (they may answer packets queued before the go-back, which says nothing
// of how long the responder takes now); a clean round-trip sample does.
func TestProbeBackoff(t *testing.T) {
	q, _ := newTestQP(t)
	q.attr.Timeout = 14 // local ACK timeout 67.1 ms
	port := q.port.(*fakePort)
	tm := &q.tm
	tm.srtt, tm.rttMax = 100*time.Microsecond, 100*time.Microsecond
	goBack := func() {
		tm.probeState = probeSent
		tm.expiredProbe(port.Now())
		port.advance(100 * time.Microsecond)
		tm.onAcked(bth.PSN(2)) // an answer at once
	}
	for i, want := range []time.Duration{2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond} {
		goBack()
		if d := tm.probeTimeout(); d != want {
			t.Fatalf("after %d go-backs of probes, probe timeout %v, want %v", i+1, d, want)
		}
	}
	if q.stats.CompleterRetryErr != 3 {
		t.Fatalf("%d go-backs counted, want 3", q.stats.CompleterRetryErr)
	}
	tm.backoff = maxProbeBackoff - 1
	goBack()
	goBack()
	if d := tm.probeTimeout(); d != time.Duration(4096<<14)/2 || tm.backoff != maxProbeBackoff {
		t.Fatalf("at most backoff (%d), probe timeout %v, want half the ACK timeout", tm.backoff, d)
	}
	tm.rttPending, tm.rttPSN, tm.rttSent = true, 1, port.Now()
	port.advance(100 * time.Microsecond)
	tm.onAcked(bth.PSN(2))
	if d := tm.probeTimeout(); d != time.Millisecond {
		t.Fatalf("after a clean sample, probe timeout %v, want 1ms", d)
	}
}

// TestGoBackVoidsSample: a go-back voids the round-trip sample under way
// if it sends the sampled packet again, not if it starts past it; a
// probe voids it whatever PSN it resends.
func TestGoBackVoidsSample(t *testing.T) {
	q, _ := newTestQP(t)
	tm := &q.tm
	for _, c := range []struct {
		from    bth.PSN
		why     string
		pending bool
	}{
		{9, trace.GoBackNAK, false},
		{10, trace.GoBackNAK, false},
		{11, trace.GoBackNAK, true},
		{11, trace.GoBackTimeout, true},
		{20, trace.GoBackProbe, false},
	} {
		tm.rttPending, tm.rttPSN = true, 10
		tm.onRetransmit(c.from, c.why)
		if tm.rttPending != c.pending {
			t.Errorf("sample of PSN 10, go-back from %d (%s): pending %v, want %v", c.from, c.why, tm.rttPending, c.pending)
		}
	}
}

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
// the slow one fades.
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
	for range 500 {
		sample(time.Millisecond)
	}
	if d := tm.probeTimeout(); d > 4500*time.Microsecond {
		t.Errorf("500 samples later, probe timeout %v, want about 4 ms again", d)
	}
}

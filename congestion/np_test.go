package congestion

import (
	"testing"
	"time"
)

func newNP(t *testing.T, p Params) *NotificationPoint {
	t.Helper()
	n, err := NewNotificationPoint(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestNPPaper is the paper's NP rule (dcqcn.md §1.2, uet-htsim's
// DCQCNSink): a marked packet with no CNP in the last 50 µs gets one at
// once; marks within the 50 µs get one CNP at its end; an interval with
// no mark sends none.
func TestNPPaper(t *testing.T) {
	n := newNP(t, Paper())
	if !n.OnECNMarked(us(0)) {
		t.Fatal("the first mark got no CNP")
	}
	if n.Deadline() != 0 {
		t.Fatal("a deadline with nothing deferred")
	}
	for _, at := range []float64{1, 20, 49.999} {
		if n.OnECNMarked(us(at)) {
			t.Fatalf("a second CNP at %v µs, within 50", at)
		}
	}
	if d := n.Deadline(); d != us(50) {
		t.Fatalf("deferred CNP due at %v, want 50µs", time.Duration(d-epoch))
	}
	if n.Advance(us(49.999)) {
		t.Fatal("the deferred CNP went early")
	}
	if !n.Advance(us(50)) || n.Advance(us(50)) || n.Deadline() != 0 {
		t.Fatal("not exactly one deferred CNP at 50 µs")
	}
	// The next interval runs [50, 100): a mark at 60 waits for 100.
	if n.OnECNMarked(us(60)) || n.Deadline() != us(100) {
		t.Fatalf("a mark at 60 µs: deadline %v", time.Duration(n.Deadline()-epoch))
	}
	if !n.Advance(us(100)) {
		t.Fatal("no CNP at 100 µs")
	}
	// An interval with no mark: nothing at 150; a mark at 170 gets one at once.
	if n.Advance(us(150)) || n.Deadline() != 0 {
		t.Fatal("a CNP for an interval with no mark")
	}
	if !n.OnECNMarked(us(170)) {
		t.Fatal("a mark after a quiet interval waited")
	}
	c := n.Counters()
	if c.NPECNMarkedRoCEPackets != 6 || c.NPCNPSent != 4 || c.NPMarksCoalesced != 4 {
		t.Fatalf("counters %+v: want 6 marks, 4 CNPs, 4 coalesced", c)
	}
}

// TestNPConnectX: ConnectX's interval (2 µs) drops the marks within it;
// no CNP is deferred.
func TestNPConnectX(t *testing.T) {
	n := newNP(t, ConnectX())
	var sent []float64
	for _, at := range []float64{0, 0.5, 1.9, 2, 2.1, 3, 4.5, 10} {
		if n.OnECNMarked(us(at)) {
			sent = append(sent, at)
		}
		if n.Deadline() != 0 || n.Advance(us(at+100)) {
			t.Fatalf("a deferred CNP after a mark at %v µs", at)
		}
	}
	want := []float64{0, 2, 4.5, 10}
	if len(sent) != len(want) {
		t.Fatalf("CNPs at %v µs, want %v", sent, want)
	}
	for i := range want {
		if sent[i] != want[i] {
			t.Fatalf("CNPs at %v µs, want %v", sent, want)
		}
	}
}

// TestNPNoMinTime: min_time_between_cnps 0 (mlx5's debugfs default)
// answers every marked packet.
func TestNPNoMinTime(t *testing.T) {
	p := ConnectX()
	p.MinTimeBetweenCNPs = 0
	n := newNP(t, p)
	for i := range 5 {
		if !n.OnECNMarked(us(0)) {
			t.Fatalf("mark %d at the same instant got no CNP", i)
		}
	}
}

func TestNPOff(t *testing.T) {
	var n NotificationPoint
	if n.OnECNMarked(us(0)) || n.Advance(us(100)) || n.Enabled() || n.Deadline() != 0 {
		t.Fatal("an off notification point sent a CNP")
	}
	if c := n.Counters(); c.NPECNMarkedRoCEPackets != 1 || c.NPCNPSent != 0 {
		t.Fatalf("off NP counters %+v", c)
	}
	if _, err := NewNotificationPoint(Params{Variant: 9}); err == nil {
		t.Error("a notification point with a bad variant")
	}
}

func TestCountersAdd(t *testing.T) {
	a := Counters{NPCNPSent: 1, NPECNMarkedRoCEPackets: 2, RPCNPHandled: 3, RPCNPIgnored: 4, RateDecreases: 5, TimerIncreases: 6, ByteIncreases: 7, NPMarksCoalesced: 8}
	b := a
	b.Add(&a)
	for i, nc := range b.Named() {
		if nc.Value != 2*uint64(i+1) {
			t.Errorf("%s = %d, want %d", nc.Name, nc.Value, 2*(i+1))
		}
	}
	if n := b.Named(); n[0].Name != "np_cnp_sent" || n[1].Name != "np_ecn_marked_roce_packets" || n[2].Name != "rp_cnp_handled" || n[3].Name != "rp_cnp_ignored" {
		t.Errorf("mlx5's names: %v", n[:4])
	}
}

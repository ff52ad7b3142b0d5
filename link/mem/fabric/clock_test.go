package fabric

import (
	"testing"
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
)

func timeNs(ns int64) time.Duration { return time.Duration(ns) }

// TestClockOrder: events run in time order, equal times in the order they
// were scheduled, and the clock reads each event's time as it runs.
func TestClockOrder(t *testing.T) {
	c := NewClock()
	var got []string
	rec := func(name string) Handler {
		return HandlerFunc(func(now monotime.Time, arg any) {
			got = append(got, name+"@"+time.Duration(now).String())
			if now != c.Now() {
				t.Errorf("%s: handler at %d, clock at %d", name, now, c.Now())
			}
		})
	}
	c.After(30, rec("c"), nil)
	c.After(10, rec("a1"), nil)
	c.After(20, rec("b"), nil)
	c.After(10, rec("a2"), nil)
	c.After(10, HandlerFunc(func(now monotime.Time, _ any) {
		got = append(got, "a3")
		c.After(0, rec("a4"), nil) // at the same time, after those already due
		c.At(0, rec("a5"), nil)    // in the past: now
	}), nil)
	c.RunUntil(25)
	want := []string{"a1@11ns", "a2@11ns", "a3", "a4@11ns", "a5@11ns", "b@21ns"}
	if len(got) != len(want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ran %v, want %v", got, want)
		}
	}
	if c.Now() != 25 || c.Pending() != 1 {
		t.Fatalf("after RunUntil(25): now %d, %d pending", c.Now(), c.Pending())
	}
	if next, ok := c.Next(); !ok || next != 31 {
		t.Fatalf("Next = %d, %v; want 31", next, ok)
	}
	if !c.Step() || c.Step() {
		t.Fatal("Step: want one event left")
	}
}

// TestClockHeap: many events at random times come out sorted by (time,
// order of scheduling).
func TestClockHeap(t *testing.T) {
	c := NewClock()
	type ev struct {
		at  monotime.Time
		seq int
	}
	var got []ev
	x := uint32(1)
	for i := range 5000 {
		x = x*1664525 + 1013904223
		at := monotime.Time(x>>20) % 300
		c.At(at, HandlerFunc(func(now monotime.Time, _ any) { got = append(got, ev{now, i}) }), nil)
	}
	for c.Step() {
	}
	if len(got) != 5000 {
		t.Fatalf("ran %d events", len(got))
	}
	for i := 1; i < len(got); i++ {
		a, b := got[i-1], got[i]
		if a.at > b.at || a.at == b.at && a.seq > b.seq {
			t.Fatalf("event %d (%v) before %v", i, a, b)
		}
	}
}

func BenchmarkClock(b *testing.B) {
	c := NewClock()
	h := HandlerFunc(func(monotime.Time, any) {})
	for range 1000 {
		c.After(time.Microsecond, h, nil)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.Step()
		c.After(time.Duration(i%1000)*time.Nanosecond, h, nil)
	}
}

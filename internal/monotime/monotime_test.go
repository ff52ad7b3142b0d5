package monotime

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestArithmetic(t *testing.T) {
	a := Time(100)
	b := a.Add(50 * time.Nanosecond)
	if b != 150 || b.Sub(a) != 50 || !a.Before(b) || !b.After(a) || a.After(b) {
		t.Fatalf("a=%d b=%d: arithmetic broken", a, b)
	}
	if !Time(0).IsZero() || a.IsZero() {
		t.Fatal("IsZero")
	}
	for _, c := range []struct{ a, b, want Time }{{0, 5, 5}, {5, 0, 5}, {3, 5, 3}, {5, 3, 3}, {0, 0, 0}} {
		if got := Min(c.a, c.b); got != c.want {
			t.Errorf("Min(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// TestClockFollowsFakeTime: inside a synctest bubble the clock advances
// exactly as the bubble's fake time does.
func TestClockFollowsFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewClock()
		t0 := c.Now()
		if t0.IsZero() {
			t.Fatal("Now returned the zero Time")
		}
		time.Sleep(3 * time.Millisecond)
		if d := c.Now().Sub(t0); d != 3*time.Millisecond {
			t.Fatalf("after a 3 ms sleep the clock moved %v", d)
		}
		if u := c.Until(t0.Add(5 * time.Millisecond)); u != 2*time.Millisecond {
			t.Fatalf("Until = %v, want 2ms", u)
		}
	})
}

func TestClockFrom(t *testing.T) {
	virtual := 5 * time.Microsecond
	c := NewClockFrom(func() time.Duration { return virtual })
	if got := c.Now(); got != Time(virtual)+1 {
		t.Fatalf("Now = %d, want %d", got, Time(virtual)+1)
	}
	t0 := c.Now()
	if t0.SinceEpoch() != virtual {
		t.Fatalf("SinceEpoch = %v, want %v", t0.SinceEpoch(), virtual)
	}
	virtual += time.Millisecond
	if d := c.Now().Sub(t0); d != time.Millisecond {
		t.Fatalf("the source moved 1ms, the clock %v", d)
	}
	if u := c.Until(t0); u != -time.Millisecond {
		t.Fatalf("Until = %v, want -1ms", u)
	}
}

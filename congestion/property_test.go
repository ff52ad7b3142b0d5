package congestion

import (
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
)

var lineRates = []Rate{
	GbitPerSecond, 10 * GbitPerSecond, 25 * GbitPerSecond, 40 * GbitPerSecond,
	100 * GbitPerSecond, 400 * GbitPerSecond,
}

// checkInvariants fails t if r's state is out of bounds: rpg_min_rate ≤
// RC ≤ RT ≤ the ceiling, α in [0, 1], a deadline in the future.
func checkInvariants(t *testing.T, r *ReactionPoint, where string) {
	t.Helper()
	if r.rc > r.rt || r.rt > r.max || r.max > r.line {
		t.Fatalf("%s: RC %d RT %d max %d line %d", where, r.rc, r.rt, r.max, r.line)
	}
	if r.started && r.rc < r.min {
		t.Fatalf("%s: RC %d below the floor %d", where, r.rc, r.min)
	}
	if a := r.State().Alpha; a < 0 || a > 1 || r.alpha > r.alphaMax {
		t.Fatalf("%s: α %v (%d)", where, a, r.alpha)
	}
	if d := r.Deadline(); d != 0 && d <= r.now {
		t.Fatalf("%s: deadline %d not after now %d", where, d, r.now)
	}
}

// TestRandomEvents drives a reaction point with random CNPs, sends and
// pauses, for both profiles and several line rates, and checks after every
// event: the bounds hold; a CNP never raises RC; time alone never lowers
// RC but by a cut a CNP left pending; and a twin whose every timer is run
// on time (Advance at each Deadline) is in the same state.
func TestRandomEvents(t *testing.T) {
	for _, prof := range []Params{Paper(), ConnectX()} {
		for i, line := range lineRates {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(prof.Variant)))
			lazy, eager := newRP(t, prof, line), newRP(t, prof, line)
			now := epoch
			for ev := range 20000 {
				// Pauses from nothing to a few ms, mostly short.
				switch rng.IntN(10) {
				case 0:
					now += monotime.Time(rng.Int64N(int64(5 * time.Millisecond)))
				case 1, 2, 3:
					now += monotime.Time(rng.Int64N(int64(60 * time.Microsecond)))
				default:
					now += monotime.Time(rng.Int64N(int64(2 * time.Microsecond)))
				}
				for d := eager.Deadline(); d != 0 && d <= now; d = eager.Deadline() {
					eager.Advance(d)
					checkInvariants(t, eager, "eager advance")
				}
				pending, rc := lazy.pending, lazy.rc
				lazy.Advance(now)
				if !pending && lazy.rc < rc {
					t.Fatalf("%v %v event %d: time alone lowered RC %d → %d", prof.Variant, line, ev, rc, lazy.rc)
				}
				switch k := rng.IntN(100); {
				case k < 3:
					rc := lazy.rc
					lazy.OnCNP(now)
					eager.OnCNP(now)
					if lazy.rc > rc {
						t.Fatalf("%v %v event %d: a CNP raised RC %d → %d", prof.Variant, line, ev, rc, lazy.rc)
					}
				case k < 90:
					n := 64 + rng.IntN(9000)
					if k < 5 {
						n = rng.IntN(32 << 20) // a whole message at once
					}
					lazy.OnPacketSent(now, n)
					eager.OnPacketSent(now, n)
				default:
					if a, b := lazy.TimeUntilSend(now), eager.TimeUntilSend(now); a != b {
						t.Fatalf("%v %v event %d: TimeUntilSend %d lazily, %d eagerly", prof.Variant, line, ev, a, b)
					}
				}
				checkInvariants(t, lazy, "lazy")
				checkInvariants(t, eager, "eager")
				if lazy.State() != eager.State() || lazy.pacer != eager.pacer {
					t.Fatalf("%v %v event %d: lazily %+v %+v, eagerly %+v %+v", prof.Variant, line, ev,
						lazy.State(), lazy.pacer, eager.State(), eager.pacer)
				}
			}
			if c := lazy.Counters(); c.RateDecreases == 0 || c.TimerIncreases == 0 || c.ByteIncreases == 0 {
				t.Errorf("%v %v: the run missed a kind of event: %+v", prof.Variant, line, c)
			}
		}
	}
}

// TestRecoveryTakesLenGapIncreases: after one cut from the line rate RT
// is the line rate (the paper clamps RT to the RC before the cut, which
// was the line; ConnectX does not clamp), so each increase event, of the
// timer or of the byte counter in any order, takes RC = ⌈(RC + L)/2⌉ and
// halves the gap g = L − RC, rounding down: RC reaches L after exactly
// bits.Len(g) events, not one fewer, and nothing is due after.
func TestRecoveryTakesLenGapIncreases(t *testing.T) {
	for _, prof := range []Params{Paper(), ConnectX()} {
		for i, line := range lineRates {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			r := newRP(t, prof, line)
			r.OnCNP(epoch)
			gap := r.line - r.rc
			want := bits.Len64(gap)
			events := 0
			now := epoch
			for r.rc < r.line {
				if events == want {
					t.Fatalf("%v %v: RC %d, short of %d after %d events", prof.Variant, line, r.rc, r.line, events)
				}
				if rng.IntN(2) == 0 {
					now = r.Deadline()
					r.Advance(now)
				} else {
					r.OnPacketSent(now, int(r.byteReset))
				}
				events++
				if g := r.line - r.rc; g != gap>>events {
					t.Fatalf("%v %v: gap %d after %d events, want %d", prof.Variant, line, g, events, gap>>events)
				}
			}
			if events != want || r.Deadline() != 0 || r.rt != r.line {
				t.Errorf("%v %v: line rate after %d events (want %d), deadline %d", prof.Variant, line, events, want, r.Deadline())
			}
		}
	}
}

// TestNoAllocs: the per-packet calls, a CNP and the NP allocate nothing.
func TestNoAllocs(t *testing.T) {
	r := newRP(t, ConnectX(), 100*GbitPerSecond)
	n, _ := NewNotificationPoint(ConnectX())
	now := epoch
	allocs := testing.AllocsPerRun(1000, func() {
		now += 100
		if now%100_000 == 0 {
			r.OnCNP(now)
		}
		if r.HasPacingBudget(now) {
			r.OnPacketSent(now, 4096)
		} else {
			_ = r.TimeUntilSend(now)
		}
		n.OnECNMarked(now)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per packet", allocs)
	}
}

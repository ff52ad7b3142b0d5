package congestion

import (
	"errors"
	"math/bits"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
)

// epoch is the instant the tests' first CNP comes: any nonzero time.
const epoch = monotime.Time(time.Millisecond)

// us returns the instant epoch + n µs.
func us(n float64) monotime.Time { return epoch + monotime.Time(n*float64(time.Microsecond)) }

// newRP returns a reaction point on a line of the given rate, with a
// 64 KB burst, or fails the test.
func newRP(t testing.TB, p Params, line Rate) *ReactionPoint {
	t.Helper()
	r, err := NewReactionPoint(Config{Params: p, LineRate: line, Burst: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// step is one expected state of a vector: after the events up to at, RC
// and RT.
type step struct {
	at     monotime.Time
	rc, rt Rate
}

// checkAt advances r to s.at and compares its rates.
func checkAt(t *testing.T, r *ReactionPoint, i int, s step) {
	t.Helper()
	r.Advance(s.at)
	if st := r.State(); st.Rate != s.rc || st.TargetRate != s.rt {
		t.Errorf("step %d (t=%v): RC %v RT %v, want RC %v RT %v", i, time.Duration(s.at-epoch), st.Rate, st.TargetRate, s.rc, s.rt)
	}
}

// TestPaperOneCNPThenTimer is dcqcn.md §1.5's first vector, verbatim:
// the paper's RP at line rate L with α = 1 takes one CNP, then only timer
// events. The cut is RC = L(1 − α/2) = L/2 with RT = L (clamped to RC
// before the cut), then each expiry RC = (RT + RC)/2: five of fast
// recovery (T = 0..4 < F), then additive increase with RT + R_AI clamped
// at L.
func TestPaperOneCNPThenTimer(t *testing.T) {
	G := GbitPerSecond
	for _, c := range []struct {
		line  Rate
		rates []float64 // Gb/s: the cut, then each 55 µs expiry
	}{
		{100 * G, []float64{50, 75, 87.5, 93.75, 96.875, 98.4375, 99.21875, 99.609375, 99.8046875}},
		{40 * G, []float64{20, 30, 35, 37.5, 38.75, 39.375, 39.6875, 39.84375}},
	} {
		r := newRP(t, Paper(), c.line)
		r.OnCNP(us(0))
		for k, g := range c.rates {
			checkAt(t, r, k, step{us(55 * float64(k)), Rate(g * 1e9), c.line})
			if st := r.State(); st.TimerStage != uint32(k) || st.Alpha > 1 {
				t.Errorf("%v step %d: T = %d, α = %v; want T = %d", c.line, k, st.TimerStage, st.Alpha, k)
			}
		}
	}
}

// TestPaperConsecutiveCNPs: CNPs every 50 µs (the paper's NP interval)
// from 100 Gb/s. α is 1 and stays 1 — (1 − g)·1 + g = 1, and K = 55 µs
// never passes without a CNP — so every cut halves RC, with RT = the RC
// before it: 50, 25, 12.5, 6.25, 3.125, 1.5625 Gb/s, 781.25, 390.625,
// 195.3125 Mb/s, then 97.65625 is below the 100 Mb/s floor: 100, and
// 100 from then on.
func TestPaperConsecutiveCNPs(t *testing.T) {
	r := newRP(t, Paper(), 100*GbitPerSecond)
	want := []Rate{50e9, 25e9, 12.5e9, 6.25e9, 3.125e9, 1.5625e9, 781.25e6, 390.625e6, 195.3125e6, 100e6, 100e6, 100e6}
	prev := Rate(100e9)
	for k, w := range want {
		r.OnCNP(us(50 * float64(k)))
		st := r.State()
		if st.Rate != w || st.TargetRate != prev || st.Alpha != 1 {
			t.Errorf("CNP %d: RC %v RT %v α %v, want RC %v RT %v α 1", k, st.Rate, st.TargetRate, st.Alpha, w, prev)
		}
		prev = w
	}
	if c := r.Counters(); c.RPCNPHandled != 12 || c.RateDecreases != 12 || c.TimerIncreases != 0 {
		t.Errorf("counters %+v: want 12 CNPs handled, 12 cuts, no increase", c)
	}
}

// TestPaperAlphaBetweenCNPs: CNPs 60 µs apart, so K = 55 µs passes
// between them and α decays once before each later cut (and the rate
// timer, also 55 µs, fires once: fast recovery). From 100 Gb/s:
//
//	t=0    cut: RC = 100·(1 − 1/2) = 50 Gb/s, RT = 100; α = 255/256·1 + 1/256 = 1
//	t=55   α = 255/256; FR: RC = (100 + 50)/2 = 75
//	t=60   RT = 75; RC = 75·(1 − (255/256)/2) = 75 − 37.353515625 = 37.646484375
//	       α = (255/256)² + 1/256 = 65281/65536
//	t=115  α = 65281/65536·255/256; FR: RC = ⌈(75 + 37.646484375)/2⌉ = 56323242188 b/s
//	       (the half rounds up)
//	t=120  RT = 56323242188; RC = RT − ⌊RT·α/2⌋ = 28380776013 b/s
//
// The values match an exact-rational model of the paper's equations; α
// is kept to 32 fractional bits, which is exact for these steps.
func TestPaperAlphaBetweenCNPs(t *testing.T) {
	r := newRP(t, Paper(), 100*GbitPerSecond)
	for i, c := range []struct {
		at     float64
		rc, rt Rate
		alpha  float64
	}{
		{0, 50e9, 100e9, 1},
		{60, 37646484375, 75e9, 65281.0 / 65536},
		{120, 28380776013, 56323242188, 4261674241.0 / (1 << 32)},
	} {
		r.OnCNP(us(c.at))
		if st := r.State(); st.Rate != c.rc || st.TargetRate != c.rt || st.Alpha != c.alpha {
			t.Errorf("CNP %d at %vµs: RC %d RT %d α %v, want %d %d %v", i, c.at, st.Rate, st.TargetRate, st.Alpha, c.rc, c.rt, c.alpha)
		}
	}
}

// TestPaperAlphaHalfLife: after one CNP α = 1, then decays by 255/256
// every K = 55 µs: (255/256)^n ≥ 1/2 while n ≤ ln 2 / −ln(255/256) =
// 177.1, so α is above one half after 177 periods (9.735 ms) and below it
// after 178 (dcqcn.md §1.5: 177.1 periods, 9.74 ms).
func TestPaperAlphaHalfLife(t *testing.T) {
	r := newRP(t, Paper(), 40*GbitPerSecond)
	r.OnCNP(us(0))
	r.Advance(us(177 * 55))
	if a := r.State().Alpha; a <= 0.5 || a > 0.5003 {
		t.Errorf("α after 177 periods = %v, want just above 0.5 (0.50019)", a)
	}
	r.Advance(us(178 * 55))
	if a := r.State().Alpha; a >= 0.5 || a < 0.4980 {
		t.Errorf("α after 178 periods = %v, want just below 0.5 (0.49824)", a)
	}
}

// TestPaperIncreaseStages walks the paper's three increase stages, with
// the byte counter and the timer, at 40 Gb/s (B = 10 MB, T = 55 µs,
// F = 5, R_AI = 40 Mb/s, R_HAI = 200 Mb/s):
//
//	t=0    CNP: RC = 20 Gb/s, RT = 40
//	t=50   CNP (no timer yet): RT = 20, RC = 10, α still 1
//	t=60   six 10 MB byte events, T = 0 and BC = 0..5 before each:
//	       BC 0..4 < F: fast recovery, RC = (20 + RC)/2: 15, 17.5, 18.75, 19.375, 19.6875
//	       BC = 5 ≥ F: additive, RT = 20.04, RC = 19.86375
//	then timer expiries every 55 µs from the cut at 50, BC = 6:
//	t=105  T=0: max(T, BC) = 6 ≥ F: additive, RT = 20.08, RC = 19.971875
//	t=160  T=1: additive, RT = 20.12, RC = 20.0459375
//	t=215  T=2: RT = 20.16, RC = 20.10296875
//	t=270  T=3: RT = 20.2,  RC = 20.151484375
//	t=325  T=4: RT = 20.24, RC = ⌈20.195742187.5⌉ = 20195742188 b/s
//	t=380  T=5: min = 5, not > F: additive, RT = 20.28, RC = 20237871094
//	t=435  T=6: min(T, BC) = 6 > F: hyper, i = 1: RT = 20.48, RC = 20358935547
//	t=490  T=7: min = 6 (BC holds): i = 1 again: RT = 20.68, RC = 20519467774
//	t=500  10 MB more, T=8, BC=6: hyper, i = 1: RT = 20.88, RC = 20699733887
//	t=545  T=8, BC=7: i = 2: RT = 20.88 + 2·0.2 = 21.28, RC = 20989866944
//	t=600  T=9: min = 7 still: i = 2: RT = 21.68, RC = 21334933472
func TestPaperIncreaseStages(t *testing.T) {
	r := newRP(t, Paper(), 40*GbitPerSecond)
	r.OnCNP(us(0))
	r.OnCNP(us(50))
	checkAt(t, r, 0, step{us(50), 10e9, 20e9})
	for i, w := range []step{
		{us(60), 15e9, 20e9}, {us(60), 17.5e9, 20e9}, {us(60), 18.75e9, 20e9},
		{us(60), 19.375e9, 20e9}, {us(60), 19.6875e9, 20e9}, {us(60), 19.86375e9, 20.04e9},
	} {
		r.OnPacketSent(w.at, 10_000_000)
		checkAt(t, r, i+1, w)
	}
	if st := r.State(); st.ByteStage != 6 || st.TimerStage != 0 || st.ByteCount != 0 {
		t.Fatalf("after 60 MB: BC %d T %d count %d, want 6 0 0", st.ByteStage, st.TimerStage, st.ByteCount)
	}
	for i, w := range []step{
		{us(105), 19.971875e9, 20.08e9}, {us(160), 20.0459375e9, 20.12e9},
		{us(215), 20.10296875e9, 20.16e9}, {us(270), 20.151484375e9, 20.2e9},
		{us(325), 20195742188, 20.24e9}, {us(380), 20237871094, 20.28e9},
		{us(435), 20358935547, 20.48e9}, {us(490), 20519467774, 20.68e9},
	} {
		checkAt(t, r, i+7, w)
	}
	r.OnPacketSent(us(500), 10_000_000)
	checkAt(t, r, 15, step{us(500), 20699733887, 20.88e9})
	checkAt(t, r, 16, step{us(545), 20989866944, 21.28e9})
	checkAt(t, r, 17, step{us(600), 21334933472, 21.68e9})
}

// TestConnectXFirstCut is dcqcn.md §1.5's vector, verbatim: the first
// CNP at 100000 Mb/s sets α = initial_alpha_value = 1023 and cuts
// min(100000·1023 >> 11, 100000·(100 − 50)/100) = min(49951, 50000):
// RC = 50049 Mb/s. RT stays at the line rate: no increase came before the
// cut, so clamp_tgt_rate_after_time_inc does not clamp.
func TestConnectXFirstCut(t *testing.T) {
	r := newRP(t, ConnectX(), 100*GbitPerSecond)
	r.OnCNP(us(0))
	if st := r.State(); st.Rate != 50049*MbitPerSecond || st.TargetRate != 100*GbitPerSecond || r.alpha != 1023 {
		t.Errorf("RC %v RT %v α %d, want 50049Mb/s 100Gb/s 1023", st.Rate, st.TargetRate, r.alpha)
	}
}

// TestConnectXAlpha is dcqcn.md §1.5's integer α, verbatim: every 1 µs
// α = ⌊1019·α/1024⌋, plus 1024 − 1019 = 5 if a CNP came in the period,
// capped at 1023. From 1023 with no CNP: 1018, 1013, … 973; from 0
// (initial_alpha_value 0) with a CNP in every period: 5, 9, 13, … 41.
func TestConnectXAlpha(t *testing.T) {
	r := newRP(t, ConnectX(), 100*GbitPerSecond)
	r.OnCNP(us(0))
	for k, w := range []uint64{1018, 1013, 1008, 1003, 998, 993, 988, 983, 978, 973} {
		r.Advance(us(float64(k + 1)))
		if r.alpha != w {
			t.Errorf("no CNP, period %d: α %d, want %d", k+1, r.alpha, w)
		}
	}

	p := ConnectX()
	p.InitialAlphaValue = 0
	r = newRP(t, p, 100*GbitPerSecond)
	r.OnCNP(us(0)) // sets α = 0; the first CNP raises no flag
	for k, w := range []uint64{5, 9, 13, 17, 21, 25, 29, 33, 37, 41} {
		r.OnCNP(us(float64(k) + 0.5))
		r.Advance(us(float64(k + 1)))
		if r.alpha != w {
			t.Errorf("a CNP each period, period %d: α %d, want %d", k+1, r.alpha, w)
		}
	}
}

// TestConnectXAlphaHalfLife: the integer α decays faster than the real
// (1019/1024)^n of dcqcn.md's 141.6 periods, since each step floors:
// ⌊1019·α/1024⌋ = α − ⌈5α/1024⌉ takes 5 while α > 819.2, 4 while
// α > 614.4, 3 while α > 409.6. From 1023: 41 steps of 5 reach 818, 51
// of 4 reach 614, and 34 of 3 reach 512 after 126 periods; the 127th
// takes it to 509, below half of 1023.
func TestConnectXAlphaHalfLife(t *testing.T) {
	r := newRP(t, ConnectX(), 100*GbitPerSecond)
	r.OnCNP(us(0))
	for _, c := range []struct {
		n     float64
		alpha uint64
	}{{41, 818}, {92, 614}, {126, 512}, {127, 509}} {
		r.Advance(us(c.n))
		if r.alpha != c.alpha {
			t.Errorf("after %v periods α = %d, want %d", c.n, r.alpha, c.alpha)
		}
	}
}

// TestConnectXConsecutiveCNPs: a CNP every microsecond from 100 Gb/s.
// The first cuts at once (50049); the ones after fall in its 4 µs
// monitor period and make one cut at its end, which opens the next
// period, and so on: a cut every 4 µs. α: the first CNP raises no flag,
// so at 1 µs α = ⌊1023·1019/1024⌋ = 1018; after that a CNP comes every
// period and α = ⌊1018·1019/1024⌋ + 5 = 1018 holds. Each cut
// RC −= RC·1018 >> 11:
//
//	t=4   50049 − 24877 = 25172
//	t=8   25172 − 12512 = 12660
//	t=12  12660 − 6292 = 6368
//	t=16  6368 − 3165 = 3203
//	t=20  3203 − 1592 = 1611
//
// RT stays at 100000: no increase comes between the cuts.
func TestConnectXConsecutiveCNPs(t *testing.T) {
	r := newRP(t, ConnectX(), 100*GbitPerSecond)
	want := map[int]Rate{0: 50049, 4: 25172, 8: 12660, 12: 6368, 16: 3203, 20: 1611}
	rc := Rate(0)
	for k := 0; k <= 20; k++ {
		r.OnCNP(us(float64(k)))
		if w, ok := want[k]; ok {
			rc = w * MbitPerSecond
		}
		if st := r.State(); st.Rate != rc || st.TargetRate != 100*GbitPerSecond {
			t.Errorf("CNP at %d µs: RC %v RT %v, want %v 100Gb/s", k, st.Rate, st.TargetRate, rc)
		}
		if k > 0 && r.alpha != 1018 {
			t.Errorf("CNP at %d µs: α %d, want 1018", k, r.alpha)
		}
	}
	if d := r.Deadline(); d != us(24) {
		t.Errorf("deadline %v, want the cut due at 24 µs", time.Duration(d-epoch))
	}
	if c := r.Counters(); c.RPCNPHandled != 21 || c.RateDecreases != 6 {
		t.Errorf("counters %+v: want 21 CNPs handled, 6 cuts", c)
	}
}

// TestConnectXRecovery: after the first cut (RC 50049, RT 100000) only
// the 300 µs timer: the first expiry (T = 0 < F = 1) is fast recovery,
// the rest additive (RT + 5 Mb/s stays clamped at the line). Each takes
// RC = ⌈(RC + 100000)/2⌉, so the gap to the line halves, rounding down:
// 49951, 24975, 12487, … 1, 0: line rate after bits.Len(49951) = 16
// expiries, and not before.
func TestConnectXRecovery(t *testing.T) {
	r := newRP(t, ConnectX(), 100*GbitPerSecond)
	r.OnCNP(us(0))
	want := []Rate{75025, 87513, 93757, 96879, 98440, 99220, 99610, 99805, 99903, 99952, 99976, 99988, 99994, 99997, 99999, 100000}
	if len(want) != bits.Len(49951) {
		t.Fatal("vector length")
	}
	for k, w := range want {
		d := r.Deadline()
		if d != us(300*float64(k+1)) {
			t.Errorf("expiry %d: deadline %v, want %v", k+1, time.Duration(d-epoch), 300*time.Microsecond*time.Duration(k+1))
		}
		checkAt(t, r, k, step{d, w * MbitPerSecond, 100 * GbitPerSecond})
	}
	if d := r.Deadline(); d != 0 {
		t.Errorf("at the line rate the deadline is %v, want none", time.Duration(d-epoch))
	}
	// At the line rate the timer still counts its expiries (they decide
	// the target clamp at the next cut), and counts none before it is due.
	r.Advance(us(300*1000 - 1))
	if st, c := r.State(), r.Counters(); st.TimerStage != 999 || c.TimerIncreases != 999 {
		t.Errorf("just before the 1000th expiry: T %d, %d counted", st.TimerStage, c.TimerIncreases)
	}
	r.Advance(us(300 * 1000))
	if st := r.State(); st.TimerStage != 1000 || st.Rate != 100*GbitPerSecond {
		t.Errorf("at the 1000th expiry: T %d, RC %v", st.TimerStage, st.Rate)
	}
}

// TestConnectXBytesAndTimer: the byte counter (32767·64 = 2097088 bytes)
// and the 300 µs timer together, with the target clamp after an increase
// and all three stages (F = 1, R_AI = 5, R_HAI = 50 Mb/s):
//
//	t=0    CNP: RC 50049, RT 100000
//	t=10   byte event (T 0, BC 0): fast recovery, RC = ⌈150049/2⌉ = 75025
//	t=20   CNP, past the monitor period: an increase came (BC = 1), so RT = 75025;
//	       α has decayed 20 times by 5: 923; RC = 75025 − ⌊75025·923/2048⌋ = 41213
//	t=30..32  three byte events: BC 0: FR, RC 58119; BC 1 ≥ F: additive,
//	       RT 75030, RC 66575; BC 2: additive (min(T, BC) = 0), RT 75035, RC 70805
//	t=320  timer, T 0, BC 3: additive, RT 75040, RC 72923
//	t=620  timer, T 1: min(T, BC) = 1, not > F: additive, RT 75045, RC 73984
//	t=621  byte event, T 2, BC 3: min = 2 > F: hyper, RT 75095, RC 74540
//	t=920  timer, T 2, BC 4: hyper, RT 75145, RC 74843
//	t=1220 timer, T 3: hyper, RT 75195, RC 75019
func TestConnectXBytesAndTimer(t *testing.T) {
	const B = 32767 * 64
	M := MbitPerSecond
	r := newRP(t, ConnectX(), 100*GbitPerSecond)
	r.OnCNP(us(0))
	r.OnPacketSent(us(10), B)
	checkAt(t, r, 0, step{us(10), 75025 * M, 100000 * M})
	r.OnCNP(us(20))
	checkAt(t, r, 1, step{us(20), 41213 * M, 75025 * M})
	for i, w := range []step{{us(30), 58119 * M, 75025 * M}, {us(31), 66575 * M, 75030 * M}, {us(32), 70805 * M, 75035 * M}} {
		r.OnPacketSent(w.at, B)
		checkAt(t, r, i+2, w)
	}
	checkAt(t, r, 5, step{us(320), 72923 * M, 75040 * M})
	checkAt(t, r, 6, step{us(620), 73984 * M, 75045 * M})
	r.OnPacketSent(us(621), B)
	checkAt(t, r, 7, step{us(621), 74540 * M, 75095 * M})
	checkAt(t, r, 8, step{us(920), 74843 * M, 75145 * M})
	checkAt(t, r, 9, step{us(1220), 75019 * M, 75195 * M})
	if st := r.State(); st.TimerStage != 4 || st.ByteStage != 4 {
		t.Errorf("stages T %d BC %d, want 4 4", st.TimerStage, st.ByteStage)
	}
	if c := r.Counters(); c.ByteIncreases != 5 || c.TimerIncreases != 4 || c.RateDecreases != 2 {
		t.Errorf("counters %+v: want 5 byte events, 4 timer expiries, 2 cuts", c)
	}
}

// TestByteCounterWaitsForCNP: before the first CNP no timer runs and the
// byte counter does not count (the flow is at line rate and has nothing
// to recover); a part of B carries over from one call to the next.
func TestByteCounterWaitsForCNP(t *testing.T) {
	r := newRP(t, ConnectX(), 100*GbitPerSecond)
	r.OnPacketSent(us(0), 10<<20)
	if st := r.State(); st.ByteCount != 0 || st.ByteStage != 0 || st.Started || r.Deadline() != 0 {
		t.Fatalf("before any CNP: %+v, deadline %v", st, r.Deadline())
	}
	r.OnCNP(us(1))
	r.OnPacketSent(us(2), 1_000_000)
	r.OnPacketSent(us(3), 1_000_000)
	if st := r.State(); st.ByteCount != 2_000_000 || st.ByteStage != 0 {
		t.Fatalf("after 2 MB: count %d stage %d, want 2000000 0", st.ByteCount, st.ByteStage)
	}
	r.OnPacketSent(us(4), 100_000)
	if st := r.State(); st.ByteCount != 2_100_000-32767*64 || st.ByteStage != 1 {
		t.Fatalf("after 2.1 MB: count %d stage %d, want %d 1", st.ByteCount, st.ByteStage, 2_100_000-32767*64)
	}
}

// TestMinRate: cuts never take RC below rpg_min_rate, and a cut at the
// floor leaves it there. ConnectX with α held at 1023 and every CNP
// cutting (monitor period zero), rpg_min_rate 100 Mb/s: each cut takes
// ⌊RC·1023/2048⌋, so from 1 Gb/s 1000 → 501 → 251 → 126 → 64, floored:
// 100, and 100 from then on.
//
// The integer cut has a floor of its own: ⌊2·1023/2048⌋ = 0, so at the
// default rpg_min_rate of 1 Mb/s cuts stall at 2 Mb/s (3 → 2 → 2).
func TestMinRate(t *testing.T) {
	p := ConnectX()
	p.RateReduceMonitorPeriod = 0
	p.DCETCPRTT = time.Hour // α holds at 1023
	p.RPGMinRate = 100 * MbitPerSecond
	r := newRP(t, p, GbitPerSecond)
	for k, w := range []Rate{501, 251, 126, 100, 100, 100} {
		r.OnCNP(us(float64(k)))
		if got := r.State().Rate; got != w*MbitPerSecond {
			t.Errorf("cut %d: RC %v, want %vMb/s", k+1, got, w)
		}
	}
	p.RPGMinRate = MbitPerSecond
	r = newRP(t, p, 3*MbitPerSecond)
	for k := range 3 {
		r.OnCNP(us(float64(k)))
		if got := r.State().Rate; got != 2*MbitPerSecond {
			t.Errorf("from 3 Mb/s, cut %d: RC %v, want 2Mb/s", k+1, got)
		}
	}
	// The paper's floor is in TestPaperConsecutiveCNPs; here one set by hand.
	p = Paper()
	p.RPGMinRate = 30 * GbitPerSecond
	r = newRP(t, p, 40*GbitPerSecond)
	r.OnCNP(us(0))
	if got := r.State().Rate; got != 30*GbitPerSecond {
		t.Errorf("paper, floor 30 Gb/s: a cut from 40 gave %v", got)
	}
}

// TestMonitorPeriodFoldsCNPs: CNPs within a monitor period make one cut
// at its end, none if none came; the next CNP after a quiet period cuts
// at once.
func TestMonitorPeriodFoldsCNPs(t *testing.T) {
	p := ConnectX()
	p.DCETCPRTT = time.Hour // α holds at 1023
	r := newRP(t, p, 100*GbitPerSecond)
	r.OnCNP(us(0)) // cut: 50049
	r.OnCNP(us(1)) // folded
	r.OnCNP(us(2)) // folded
	r.Advance(us(3.999))
	if r.State().Rate != 50049*MbitPerSecond || r.Deadline() != us(4) {
		t.Fatalf("inside the period: RC %v deadline %v", r.State().Rate, time.Duration(r.Deadline()-epoch))
	}
	r.Advance(us(4)) // one cut for both: 50049 − ⌊51200127/2048⌋ = 50049 − 25000
	if got := r.State().Rate; got != 25049*MbitPerSecond {
		t.Fatalf("at the period's end RC %v, want 25049Mb/s", got)
	}
	r.Advance(us(100)) // the period [4, 8) passes with no CNP: no cut
	if got := r.State().Rate; got != 25049*MbitPerSecond {
		t.Fatalf("after a quiet period RC %v, want 25049Mb/s", got)
	}
	r.OnCNP(us(100)) // at once: 25049 − ⌊25625127/2048⌋ = 25049 − 12512
	if got := r.State().Rate; got != 12537*MbitPerSecond {
		t.Fatalf("a CNP after a quiet period: RC %v, want 12537Mb/s", got)
	}
	// The period opened at 100 ends at 104: a CNP at that instant cuts at
	// once: 12537 − ⌊12537·1023/2048⌋ = 12537 − 6262.
	r.OnCNP(us(104))
	if got := r.State().Rate; got != 6275*MbitPerSecond || r.Deadline() == us(104) {
		t.Fatalf("a CNP as the period ends: RC %v, deadline %v", got, time.Duration(r.Deadline()-epoch))
	}
	if c := r.Counters(); c.RPCNPHandled != 5 || c.RateDecreases != 4 {
		t.Errorf("counters %+v: want 5 CNPs, 4 cuts", c)
	}
}

// TestCeilingTimerStopsAtPendingCut: with α = 0 a cut takes nothing, so
// RC stays at the line while a cut is pending; the timer's expiries at
// the ceiling are counted up to the cut, which restarts the timer, and
// from it. rpg_time_reset 1 µs: a CNP at 0 cuts nothing and opens the
// period [0, 4); a CNP at 1 leaves a cut pending at 4. Up to 10 µs:
// expiries at 1, 2, 3, 4 (the timer runs before the cut at the same
// instant), the cut at 4, expiries at 5 … 10: T = 6, 10 expiries.
func TestCeilingTimerStopsAtPendingCut(t *testing.T) {
	p := ConnectX()
	p.InitialAlphaValue = 0
	p.RPGTimeReset = time.Microsecond
	p.DCETCPRTT = time.Hour
	r := newRP(t, p, 100*GbitPerSecond)
	r.OnCNP(us(0))
	r.OnCNP(us(1))
	r.Advance(us(10))
	if st, c := r.State(), r.Counters(); st.Rate != 100*GbitPerSecond || st.TimerStage != 6 || c.TimerIncreases != 10 || c.RateDecreases != 2 {
		t.Fatalf("RC %v T %d; %d expiries, %d cuts; want 100Gb/s 6, 10, 2", st.Rate, st.TimerStage, c.TimerIncreases, c.RateDecreases)
	}
}

// TestMinDecFac: rpg_min_dec_fac bounds one cut to leave at least that
// share of RC (NVIDIA: "new_cur_rate >= min_dec_fac% of old_cur_rate";
// 100 prevents cuts). With rpg_gd 10 the cut would be RC·α =
// ⌊100000·1023/1024⌋ = 99902 Mb/s; the bound leaves 25, 50 or 100 %.
func TestMinDecFac(t *testing.T) {
	for _, c := range []struct {
		fac uint8
		rc  Rate
	}{{0, 98}, {25, 25000}, {50, 50000}, {100, 100000}} {
		p := ConnectX()
		p.RPGGD = 10
		p.RPGMinDecFac = c.fac
		r := newRP(t, p, 100*GbitPerSecond)
		r.OnCNP(us(0))
		if got := r.State().Rate; got != c.rc*MbitPerSecond {
			t.Errorf("rpg_min_dec_fac %d: RC %v, want %vMb/s", c.fac, got, c.rc)
		}
	}
}

// TestRateToSetOnFirstCNP: with rate_to_set_on_first_cnp the first CNP
// sets RC = RT = that rate and cuts nothing; the next cuts as usual.
func TestRateToSetOnFirstCNP(t *testing.T) {
	p := ConnectX()
	p.RateToSetOnFirstCNP = 85 * GbitPerSecond
	r := newRP(t, p, 100*GbitPerSecond)
	r.OnCNP(us(0))
	if st := r.State(); st.Rate != 85*GbitPerSecond || st.TargetRate != 85*GbitPerSecond {
		t.Fatalf("first CNP: %v %v, want 85Gb/s both", st.Rate, st.TargetRate)
	}
	r.OnCNP(us(10)) // α 1023 − 5·10 = 973: 85000 − ⌊85000·973/2048⌋ = 44617
	if got := r.State().Rate; got != 44617*MbitPerSecond {
		t.Fatalf("second CNP: RC %v, want 44617Mb/s", got)
	}
}

// TestRPGMaxRate: rpg_max_rate below the line caps RC and RT, and the
// pacer holds the flow to it from the start.
func TestRPGMaxRate(t *testing.T) {
	p := ConnectX()
	p.RPGMaxRate = 10 * GbitPerSecond
	r := newRP(t, p, 100*GbitPerSecond)
	if r.State().Rate != 10*GbitPerSecond {
		t.Fatalf("start at %v, want the 10 Gb/s cap", r.State().Rate)
	}
	if !r.HasPacingBudget(us(0)) {
		t.Fatal("a fresh pacer has a burst")
	}
	r.OnPacketSent(us(0), 64<<10)
	if r.HasPacingBudget(us(0)) {
		t.Fatal("after a whole burst the pacer lets nothing more go")
	}
	// 64 KiB at 10 Gb/s: 65536·8/1e10 s = 52428.8 ns, up to the next ns.
	if w := r.TimeUntilSend(us(0)); w != us(0)+52429 {
		t.Fatalf("wake at %v, want 52.429µs", time.Duration(w-epoch))
	}
}

// TestOff: the zero ReactionPoint paces nothing and counts CNPs as
// ignored.
func TestOff(t *testing.T) {
	var r ReactionPoint
	r.OnCNP(us(0))
	r.OnPacketSent(us(0), 1<<30)
	if !r.HasPacingBudget(us(0)) || r.TimeUntilSend(us(0)) != us(0) || r.Enabled() || r.Deadline() != 0 {
		t.Fatal("an off reaction point held the flow back")
	}
	if c := r.Counters(); c.RPCNPIgnored != 1 || c.RPCNPHandled != 0 {
		t.Fatalf("off RP counters %+v, want one CNP ignored", c)
	}
}

// TestTimeGoesForward: a call with a time before one already seen acts
// at the later time; nothing runs backwards.
func TestTimeGoesForward(t *testing.T) {
	r := newRP(t, ConnectX(), 100*GbitPerSecond)
	r.OnCNP(us(0))
	r.Advance(us(300)) // fast recovery: 75025
	r.OnCNP(us(10))    // late: taken at 300, after the increase, so RT clamps
	if st := r.State(); st.TargetRate != 75025*MbitPerSecond || st.Rate >= 75025*MbitPerSecond {
		t.Fatalf("a late CNP: %+v", st)
	}
}

func TestNewReactionPointRejects(t *testing.T) {
	p := ConnectX()
	for _, c := range []struct {
		c    Config
		want string
	}{
		{Config{Params: p, LineRate: 0, Burst: 1}, "line rate"},
		{Config{Params: p, LineRate: 2 * MaxLineRate, Burst: 1}, "line rate"},
		{Config{Params: p, LineRate: 1500 * KbitPerSecond, Burst: 1}, "whole Mb/s"},
		{Config{Params: p, LineRate: GbitPerSecond, Burst: 0}, "burst"},
		{Config{Params: p, LineRate: GbitPerSecond, Burst: MaxBurst + 1}, "burst"},
		{Config{Params: Paper(), LineRate: 10 * MbitPerSecond, Burst: 1}, "rpg_min_rate"},
		{Config{Params: func() Params { q := p; q.RPGGD = 99; return q }(), LineRate: GbitPerSecond, Burst: 1}, "rpg_gd"},
	} {
		if _, err := NewReactionPoint(c.c); err == nil || !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error about %s", c.c, err, c.want)
		}
	}
}

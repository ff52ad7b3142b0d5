package congestion

import (
	"math"
	"testing"
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
)

// steady returns a reaction point cut once to half of 40 Gb/s (paper,
// α = 1), whose timer and byte counter never raise the rate again.
func steady(t testing.TB, burst int) *ReactionPoint {
	t.Helper()
	p := Paper()
	p.RPGTimeReset = maxPeriod
	p.RPGByteReset = math.MaxUint32
	r, err := NewReactionPoint(Config{Params: p, LineRate: 40 * GbitPerSecond, Burst: burst})
	if err != nil {
		t.Fatal(err)
	}
	r.OnCNP(epoch)
	if r.Rate() != 20*GbitPerSecond {
		t.Fatalf("rate %v after the cut", r.Rate())
	}
	return r
}

// greedy runs a sender that always has packets of size pkt to send: it
// sends while the pacer lets it, then sleeps until TimeUntilSend. It
// returns the bytes sent before end and the number of wake-ups.
func greedy(r *ReactionPoint, start, end monotime.Time, pkt int) (sent, wakes int) {
	for now := start; now < end; now = r.TimeUntilSend(now) {
		wakes++
		for r.HasPacingBudget(now) {
			r.OnPacketSent(now, pkt)
			sent += pkt
		}
	}
	return sent, wakes
}

// TestPacerHoldsRate: a greedy sender at 20 Gb/s for 10 ms sends the
// rate's worth, plus the burst it starts with, minus at most the last
// burst it has not yet earned: 25 MB ± 64 KiB.
func TestPacerHoldsRate(t *testing.T) {
	const burst = 64 << 10
	r := steady(t, burst)
	sent, wakes := greedy(r, epoch, epoch+monotime.Time(10*time.Millisecond), 4096)
	want := 20e9 / 8 * 0.010
	if d := float64(sent) - want; d < -burst || d > burst+4096 {
		t.Errorf("sent %d bytes in 10 ms at 20 Gb/s, want %.0f ± a burst", sent, want)
	}
	// Bursts, not packets: a wake-up per 64 KiB (16 packets), about 26 µs
	// apart, not one per 1.6 µs packet.
	if per := float64(sent) / float64(wakes); per < burst || per > burst+4096 {
		t.Errorf("%d wake-ups for %d bytes: %.0f bytes each, want a burst", wakes, sent, per)
	}
}

// TestPacerPacketByPacket: with a burst of one packet the sender wakes
// once a packet, 4096·8/20e9 s = 1.6384 µs apart.
func TestPacerPacketByPacket(t *testing.T) {
	r := steady(t, 4096)
	now := epoch
	r.OnPacketSent(now, 4096)
	for i := range 5 {
		next := r.TimeUntilSend(now)
		if next-now != 1639 { // 1638.4 ns, up to the next ns
			t.Fatalf("packet %d: next send %v later, want 1.639µs", i, time.Duration(next-now))
		}
		if !r.HasPacingBudget(next) {
			t.Fatalf("packet %d: no budget at the wake time", i)
		}
		now = next
		r.OnPacketSent(now, 4096)
		if r.HasPacingBudget(now) {
			t.Fatalf("packet %d: budget left after a burst of one packet", i)
		}
	}
}

// TestPacerLineRate: at the line rate the pacer lets everything go, before
// and after congestion.
func TestPacerLineRate(t *testing.T) {
	r := newRP(t, ConnectX(), 100*GbitPerSecond)
	for i := range 1000 {
		now := epoch + monotime.Time(i)
		if !r.HasPacingBudget(now) || r.TimeUntilSend(now) != now {
			t.Fatal("held back at the line rate")
		}
		r.OnPacketSent(now, 1<<20)
	}
	r.OnCNP(epoch + 1000)
	if !r.HasPacingBudget(epoch + 1000) {
		t.Fatal("entering pacing without a burst")
	}
	r.OnPacketSent(epoch+1000, 1<<20)
	if r.HasPacingBudget(epoch + 1000) {
		t.Fatal("paced after the cut, yet a 1 MiB send left credit")
	}
	r.Advance(epoch + 1000 + monotime.Time(300*time.Microsecond*16))
	if r.Rate() != 100*GbitPerSecond || !r.HasPacingBudget(epoch+1000+monotime.Time(300*time.Microsecond*16)) {
		t.Fatalf("recovered to %v but still paced", r.Rate())
	}
}

// TestTimeUntilSendStopsAtDeadline: when the rate rises before the next
// burst would be earned, TimeUntilSend wakes the sender at the rise; the
// credit earned until then is kept, and the rest is earned at the new
// rate.
func TestTimeUntilSendStopsAtDeadline(t *testing.T) {
	const burst = 1 << 20
	r, err := NewReactionPoint(Config{Params: Paper(), LineRate: 40 * GbitPerSecond, Burst: burst})
	if err != nil {
		t.Fatal(err)
	}
	r.OnCNP(epoch) // 20 Gb/s; fast recovery to 30 at 55 µs
	r.OnPacketSent(epoch, burst)
	// 1 MiB at 20 Gb/s takes 419 µs; the timer comes at 55.
	if w := r.TimeUntilSend(epoch); w != us(55) {
		t.Fatalf("wake at %v, want the increase at 55µs", time.Duration(w-epoch))
	}
	// By 55 µs 20e9·55e-6 = 1.1e6 bits, 137500 bytes, are earned at 20 Gb/s.
	if !r.HasPacingBudget(us(55)) || r.Rate() != 30*GbitPerSecond {
		t.Fatalf("at 55 µs: rate %v, budget %v", r.Rate(), r.HasPacingBudget(us(55)))
	}
	r.OnPacketSent(us(55), 137500)
	if r.HasPacingBudget(us(55)) {
		t.Fatal("more credit than 55 µs at 20 Gb/s earn")
	}
	// The next increase, at 110 µs, comes before a whole burst at 30 Gb/s
	// (279.6 µs): wake there, with 55 µs at 30 Gb/s earned: 206250 bytes.
	if w := r.TimeUntilSend(us(55)); w != us(110) {
		t.Fatalf("after the increase, wake at %v, want the next at 110µs", time.Duration(w-epoch))
	}
	if r.OnPacketSent(us(110), 206250-1); !r.HasPacingBudget(us(110)) || r.Rate() != 35*GbitPerSecond {
		t.Fatalf("at 110 µs: rate %v, less credit than 55 µs at 30 Gb/s", r.Rate())
	}
	if r.OnPacketSent(us(110), 1); r.HasPacingBudget(us(110)) {
		t.Fatal("more credit than 55 µs at 30 Gb/s")
	}
}

// TestPacingLazyEqualsEager: a sender paced by a reaction point that is
// only looked at when the sender acts sends at exactly the same instants
// as one whose timers are all run on time, through cuts, recovery and the
// byte counter: rate changes found late are paced as if found on time.
func TestPacingLazyEqualsEager(t *testing.T) {
	for _, prof := range []Params{Paper(), ConnectX()} {
		lazy, eager := newRP(t, prof, 40*GbitPerSecond), newRP(t, prof, 40*GbitPerSecond)
		var sends []monotime.Time
		cnps := []monotime.Time{us(10), us(12), us(200), us(203), us(900)}
		run := func(r *ReactionPoint, eagerly bool) []monotime.Time {
			var at []monotime.Time
			now, end := epoch, us(3000)
			for now < end {
				for len(cnps) > 0 && cnps[0] <= now {
					r.OnCNP(cnps[0])
					cnps = cnps[1:]
				}
				// One packet at a time, as a 40 Gb/s link serialises
				// them: the pacer alone does not bound the line rate.
				next := r.TimeUntilSend(now)
				if next == now && r.HasPacingBudget(now) {
					r.OnPacketSent(now, 4096)
					at = append(at, now)
					next = now + 819 // 4096·8/40e9 s
				}
				if len(cnps) > 0 && cnps[0] < next {
					next = cnps[0]
				}
				if eagerly {
					for d := r.Deadline(); d != 0 && d < next; d = r.Deadline() {
						r.Advance(d)
					}
				}
				now = next
			}
			return at
		}
		saved := cnps
		sends = run(eager, true)
		cnps = saved
		got := run(lazy, false)
		if len(got) != len(sends) {
			t.Fatalf("%v: %d sends lazily, %d eagerly", prof.Variant, len(got), len(sends))
		}
		for i := range got {
			if got[i] != sends[i] {
				t.Fatalf("%v: send %d at %v lazily, %v eagerly", prof.Variant, i, got[i], sends[i])
			}
		}
		lazy.Advance(us(5000)) // the eager one may have run past the end
		eager.Advance(us(5000))
		if lazy.State() != eager.State() {
			t.Fatalf("%v: states differ:\n%+v\n%+v", prof.Variant, lazy.State(), eager.State())
		}
		if c := lazy.Counters(); c.RateDecreases < 3 || c.TimerIncreases == 0 {
			t.Fatalf("%v: the run did not exercise cuts and increases: %+v", prof.Variant, c)
		}
	}
}

func TestPacerSpendBounds(t *testing.T) {
	var p pacer
	p.burst = 10 * nanobitsPerByte
	p.bps = 8e9 // a byte a nanosecond
	p.fill(1)
	p.spend(0)
	p.spend(-5)
	if p.credit != p.burst {
		t.Fatal("an empty send spent credit")
	}
	p.spend(maxPacket + 1)
	if p.credit != minCredit {
		t.Fatalf("an absurd send left credit %d", p.credit)
	}
	if w := p.wake(1); w <= 1 {
		t.Fatalf("wake %d", w)
	}
	p.accrue(math.MaxInt64) // a long sleep fills the bucket, no more
	if p.credit != p.burst {
		t.Fatalf("after a long sleep credit %d, want the burst", p.credit)
	}
	p.bps = 0
	p.spend(1)
	if p.wake(5) != math.MaxInt64 {
		t.Fatal("at rate zero the pacer promised a wake-up")
	}
}

// TestPacingBudget: the budget is the credit in whole bytes, rounded up,
// so that a packet as long as the budget is the last of its burst and the
// next one waits; at the line rate and off it is unbounded.
func TestPacingBudget(t *testing.T) {
	const burst = 10000
	r := steady(t, burst)
	now := epoch
	if b := r.PacingBudget(now); b != burst {
		t.Fatalf("a fresh burst's budget is %d bytes, want %d", b, burst)
	}
	r.OnPacketSent(now, 4000)
	if b := r.PacingBudget(now); b != burst-4000 {
		t.Fatalf("after 4000 bytes the budget is %d, want %d", b, burst-4000)
	}
	r.OnPacketSent(now, 5999)
	if b := r.PacingBudget(now); b != 1 || !r.HasPacingBudget(now) {
		t.Fatalf("one byte of credit left: budget %d, HasPacingBudget %v", b, r.HasPacingBudget(now))
	}
	r.OnPacketSent(now, 1500) // overdraws
	if b := r.PacingBudget(now); b != 0 || r.HasPacingBudget(now) {
		t.Fatalf("overdrawn: budget %d, HasPacingBudget %v", b, r.HasPacingBudget(now))
	}
	// 20 Gb/s earns 2.5 bytes a nanosecond: in 602 ns, the 1499 bytes of
	// debt and 6 of credit.
	if b := r.PacingBudget(now + 602); b != 6 {
		t.Fatalf("602 ns later the budget is %d, want 6", b)
	}
	var off ReactionPoint
	line, err := NewReactionPoint(Config{Params: ConnectX(), LineRate: 40 * GbitPerSecond, Burst: burst})
	if err != nil {
		t.Fatal(err)
	}
	if off.PacingBudget(now) != math.MaxInt || line.PacingBudget(now) != math.MaxInt {
		t.Fatal("the off and the line-rate reaction points bound the budget")
	}
}

// TestPacerBurstTime: with Config.BurstTime the bucket holds at most
// what the rate earns in that time, and at least MinBurst: a greedy
// sender's bursts shrink with its rate, and it still holds the rate.
func TestPacerBurstTime(t *testing.T) {
	for _, c := range []struct {
		line      Rate
		wantBurst int // bytes a wake-up sends, about
	}{
		{80 * GbitPerSecond, 64 << 10}, // 40 Gb/s earn 250 KB in 50 µs: the 64 KiB depth
		{2 * GbitPerSecond, 6250},      // 1 Gb/s: 6250 bytes in 50 µs
		{60 * MbitPerSecond, MinBurst}, // 30 Mb/s: 187 bytes; the floor
	} {
		p := Paper()
		p.RPGTimeReset = maxPeriod
		p.RPGByteReset = math.MaxUint32
		p.RPGMinRate = MbitPerSecond
		r, err := NewReactionPoint(Config{Params: p, LineRate: c.line, Burst: 64 << 10, BurstTime: 50 * time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		r.OnCNP(epoch) // to half the line rate
		rate := float64(r.Rate())
		const pkt = 100 // small, so that a burst is counted to 100 bytes
		d := 200 * time.Millisecond
		sent, wakes := greedy(r, epoch, epoch+monotime.Time(d), pkt)
		want := rate / 8 * d.Seconds()
		if dev := float64(sent) - want; dev < -float64(c.wantBurst) || dev > float64(c.wantBurst+pkt) {
			t.Errorf("%v: sent %d bytes in %v, want %.0f ± a burst", r.Rate(), sent, d, want)
		}
		if per := float64(sent) / float64(wakes); per < float64(c.wantBurst)*0.95 || per > float64(c.wantBurst+pkt)*1.05 {
			t.Errorf("%v: %.0f bytes a wake-up, want about %d", r.Rate(), per, c.wantBurst)
		}
	}
	if _, err := NewReactionPoint(Config{Params: Paper(), LineRate: GbitPerSecond, Burst: 1, BurstTime: -1}); err == nil {
		t.Error("a negative burst time was taken")
	}
}

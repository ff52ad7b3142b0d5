package perftest

import (
	"math/rand/v2"
	"testing"
	"time"
)

// bruteLeast is print_report_bw's own search: every post against every
// later completion.
func bruteLeast(posts, done []stamp) (time.Duration, bool) {
	best, found := time.Duration(0), false
	for _, p := range posts {
		for _, c := range done {
			if p.n >= c.n {
				continue
			}
			if s := time.Duration(float64(c.t-p.t) / float64(c.n-p.n)); !found || s < best {
				best, found = s, true
			}
		}
	}
	return best, found
}

// TestLeastIsPerftestsSearch: the hull search finds what trying every
// pair finds, on random runs with bunched completions, posts of several
// messages, and stamps the clock did not tell apart.
func TestLeastIsPerftestsSearch(t *testing.T) {
	for seed := range uint64(500) {
		r := rand.New(rand.NewPCG(seed, 1))
		n := 1 + r.IntN(400)
		postList, cqMod := 1+r.IntN(4), 1+r.IntN(8)
		depth := postList * (1 + r.IntN(32))
		var posts, done []stamp
		now := time.Duration(0)
		tick := func() {
			if r.IntN(3) > 0 { // a third of the stamps share an instant
				now += time.Duration(r.IntN(2000))
			}
		}
		sent, completed := 0, 0
		for completed < n {
			for sent < n && sent-completed+postList <= depth && r.IntN(4) > 0 {
				tick()
				posts = append(posts, stamp{sent, now})
				sent += postList
			}
			if sent == completed {
				continue
			}
			// Reap a bunch of completions at one instant.
			k := min(cqMod*(1+r.IntN(4)), sent-completed)
			tick()
			completed += k
			done = append(done, stamp{completed, now})
		}
		got, gok := least(posts, done)
		want, wok := bruteLeast(posts, done)
		if gok != wok || got-want > 1 || want-got > 1 {
			t.Fatalf("seed %d: %v %v, want %v %v (%d posts, %d completions)", seed, got, gok, want, wok, len(posts), len(done))
		}
	}
}

// TestPeakBoundedByTheWire: four QPs, 128 messages outstanding on each,
// on a wire that completes one message every 10 µs, reaped 64 at a time
// by a program that is sometimes away: however the reaps bunch up, the
// peak is at most the wire's rate. (It used to be taken over each 128 completions reaped, so
// two reaps a microsecond apart made a peak a hundred times the wire.)
func TestPeakBoundedByTheWire(t *testing.T) {
	const (
		qps, depth, per, size = 4, 128, 10 * time.Microsecond, 65536
		total                 = 4000
	)
	start := time.Unix(0, 0)
	m := newPeakMeter(total, 1, 64, start)
	sent, completed := 0, 0
	now := start
	for completed < total {
		for sent < total && sent-completed < qps*depth {
			m.posted(sent, now)
			sent++
		}
		// The program reaps up to 64 at once, a microsecond after it
		// reaped the last, once the wire has finished them; every 512
		// it is away 3 ms, and then reaps what waited back to back.
		if completed%512 == 0 {
			now = now.Add(3 * time.Millisecond)
		}
		k := min(64, sent-completed)
		now = now.Add(time.Microsecond)
		if done := start.Add(time.Duration(completed+k) * per); done.After(now) {
			now = done
		}
		completed += k
		m.completed(completed, now)
	}
	wire := float64(size) / per.Seconds() / (1 << 20)
	avg := float64(size) * total / now.Sub(start).Seconds() / (1 << 20)
	got := m.mbps(size)
	if got > wire*1.0001 || got < avg*0.9999 {
		t.Errorf("peak %.1f MB/s: want between the average %.1f and the wire's %.1f", got, avg, wire)
	}
}

// TestPeakNoCompletion: a meter nothing completed on reports no peak.
func TestPeakNoCompletion(t *testing.T) {
	m := newPeakMeter(1, 1, 1, time.Unix(0, 0))
	m.posted(0, time.Unix(0, 0))
	if got := m.mbps(4096); got != 0 {
		t.Errorf("peak %v, want 0", got)
	}
}

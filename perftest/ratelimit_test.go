package perftest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorxe/gorxe/link/mem"
)

func TestRateLimitMsgsPerSecond(t *testing.T) {
	for _, c := range []struct {
		l    RateLimit
		size int
		want int
	}{
		{RateLimit{Rate: 10}, 65536, 19073},                  // 10e9 / (65536*8), cut
		{RateLimit{Rate: 10, Unit: RateGbps}, 65536, 19073},  // the default unit, named
		{RateLimit{Rate: 100, Unit: RateMiBps}, 65536, 1600}, // 100 MiB/s of 64 KiB
		{RateLimit{Rate: 0.5, Unit: RateMiBps}, 1 << 20, 0},  // half a message a second
		{RateLimit{Rate: 2.7, Unit: RatePPS}, 64, 2},         // cut, as perftest's int
		{RateLimit{Rate: 1e30, Unit: RatePPS}, 64, 1 << 40},  // no overflow
	} {
		if got := c.l.MsgsPerSecond(c.size); got != c.want {
			t.Errorf("%v of %d-byte messages: %d a second, want %d", c.l, c.size, got, c.want)
		}
	}
}

// TestRateLimitBursts: a rate-limited write_bw posts its messages in
// bursts of Burst, one burst every Burst/rate, each on time, so the run
// takes as long as the rate says; its unsignaled messages (CQMod) wait
// between bursts without holding the next one up.
func TestRateLimitBursts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 500 messages a second in bursts of 10: a burst every 20 ms,
		// twice the fabric's round trip.
		p := Params{Test: WriteBW, Size: 1024, Iters: 200, TxDepth: 16, CQMod: 4, Timeout: 12,
			RateLimit: RateLimit{Rate: 500, Unit: RatePPS, Burst: 10}}
		var mu sync.Mutex
		var at []time.Duration
		start := time.Now()
		p.onPost = func(n int) {
			mu.Lock()
			defer mu.Unlock()
			for range n {
				at = append(at, time.Since(start))
			}
		}
		b := runLocal(t, p, mem.Faults{Delay: delay}).BW
		mu.Lock()
		defer mu.Unlock()
		if len(at) != p.Iters {
			t.Fatalf("%d messages posted, want %d", len(at), p.Iters)
		}
		// The client's clock starts after the connection is set up.
		base := at[0]
		for k, a := range at {
			if want := time.Duration(k/10) * 20 * time.Millisecond; a-base != want {
				t.Fatalf("message %d posted %v after the first, want %v (burst %d)", k, a-base, want, k/10)
			}
		}
		// The last burst opens at 380 ms and completes a round trip later.
		if want := 380*time.Millisecond + 2*delay; b.Elapsed < want || b.Elapsed > want+time.Millisecond {
			t.Errorf("the run took %v, want %v", b.Elapsed, want)
		}
		if b.PeakMBps < b.AvgMBps {
			t.Errorf("peak %v below the average %v", b.PeakMBps, b.AvgMBps)
		}
	})
}

// TestRateLimitTimed: a timed run (-D) with a rate limit reports the rate
// it was held to.
func TestRateLimitTimed(t *testing.T) {
	for _, tt := range []Test{WriteBW, ReadBW, SendBW, AtomicBW} {
		t.Run(string(tt), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := timedParams(tt)
				if tt == AtomicBW {
					p.Size = 8
				}
				// A burst every 20 ms, twice the round trip: 200 messages
				// a second, where the window alone allows 800.
				p.RateLimit = RateLimit{Rate: 200, Unit: RatePPS, Burst: 4}
				b := runLocal(t, p, mem.Faults{Delay: delay}).BW
				if b.Iters < 200-4 || b.Iters > 200+4 {
					t.Errorf("%d messages in the sample window, want 200 (give or take the burst at either end)", b.Iters)
				}
			})
		})
	}
}

// TestRateLimitGapsLongerThanGiveUp: bursts further apart than the
// watchdog's give-up time, with an unsignaled message outstanding between
// them, are no stall.
func TestRateLimitGapsLongerThanGiveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := Params{Test: WriteBW, Size: 64, Iters: 12, TxDepth: 8, CQMod: 3, Timeout: 12, GiveUp: time.Second,
			RateLimit: RateLimit{Rate: 1, Unit: RatePPS, Burst: 4}} // a burst every 4 s
		b := runLocal(t, p, mem.Faults{Delay: delay}).BW
		if want := 8*time.Second + 2*delay; b.Elapsed < want || b.Elapsed > want+time.Millisecond {
			t.Errorf("the run took %v, want %v", b.Elapsed, want)
		}
	})
}

// TestRateLimitStillGivesUp: a rate-limited sender whose peer has gone
// still gives up.
func TestRateLimitStillGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := Params{Test: WriteBW, Size: 64, Iters: 40, TxDepth: 8, CQMod: 1, Timeout: 31, GiveUp: time.Second,
			RateLimit: RateLimit{Rate: 100, Unit: RatePPS, Burst: 4}}
		start := time.Now()
		f := mem.Faults{Delay: delay, DropFunc: func([]byte, uint64) bool { return time.Since(start) > 50*time.Millisecond }}
		_, err := RunLocal(context.Background(), p, f)
		if !errors.Is(err, ErrStalled) {
			t.Fatalf("err %v, want ErrStalled", err)
		}
	})
}

func TestRateLimitValidate(t *testing.T) {
	for _, c := range []struct {
		p    Params
		want string
	}{
		{Params{Test: WriteBW, RateLimit: RateLimit{Burst: 8}}, "Can't enable burst mode when rate limiter is off"},
		{Params{Test: WriteBW, RateLimit: RateLimit{Rate: -1}}, "must be positive"},
		{Params{Test: WriteBW, RateLimit: RateLimit{Rate: 1, Unit: 'k'}}, "use M, g or p"},
		{Params{Test: WriteBW, Infinite: true, RateLimit: RateLimit{Rate: 1}}, "run_infinitely does not support rate limit"},
		{Params{Test: WriteLat, RateLimit: RateLimit{Rate: 1}}, "one-way bandwidth test only (not write_lat)"},
		{Params{Test: ReadBW, Duplex: true, RateLimit: RateLimit{Rate: 1}}, "(not read_bw -b)"},
		{Params{Test: WriteBW, AllSize: true, RateLimit: RateLimit{Rate: 4, Unit: RateMiBps}}, "less than one 8388608-byte message a second"},
	} {
		p := c.p
		p.Defaults()
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.p.RateLimit, err, c.want)
		}
	}
	p := Params{Test: SendBW, Connection: 0, RateLimit: RateLimit{Rate: 8, Unit: RateMiBps, Burst: 1}}
	p.Defaults()
	if err := p.Validate(); err != nil {
		t.Errorf("8 MiB/s of 64 KiB SENDs: %v", err)
	}
}

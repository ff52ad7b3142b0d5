package perftest

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// RateUnit is what a RateLimit's Rate counts: perftest's --rate_units.
type RateUnit byte

// The units, by --rate_units' letters.
const (
	RateGbps  RateUnit = 'g' // 10^9 bits of messages a second (the default)
	RateMiBps RateUnit = 'M' // 2^20 bytes of messages a second
	RatePPS   RateUnit = 'p' // messages a second
)

// RateLimit is perftest's software rate limiter (--rate_limit,
// --rate_units, --burst_size): the sending side of a one-way bandwidth
// test posts Burst messages at a time, and opens a burst every
// Burst/rate, each burst's time counted from the one before (a late burst
// is caught up), as run_iter_bw paces its posts. Only posting is paced:
// the packets of a burst leave as fast as the QP sends them.
type RateLimit struct {
	Rate  float64  // in Unit; zero turns the limiter off
	Unit  RateUnit // RateGbps when zero
	Burst int      // messages a burst; zero means TxDepth, as perftest's default
}

// On reports whether the limiter paces anything.
func (l RateLimit) On() bool { return l.Rate > 0 }

func (l RateLimit) unit() RateUnit {
	if l.Unit == 0 {
		return RateGbps
	}
	return l.Unit
}

// MsgsPerSecond returns the messages of size bytes a second the limit
// allows, cut to a whole number as perftest's rate_limit_pps is.
func (l RateLimit) MsgsPerSecond(size int) int {
	var pps float64
	switch l.unit() {
	case RateMiBps:
		pps = l.Rate / float64(size) * (1 << 20)
	case RatePPS:
		pps = l.Rate
	default:
		pps = l.Rate / float64(size*8) * 1e9
	}
	if pps >= 1<<40 {
		return 1 << 40
	}
	return int(pps)
}

// String names the limit as perftest's flags would give it.
func (l RateLimit) String() string {
	name := map[RateUnit]string{RateGbps: "Gb/s", RateMiBps: "MiB/s", RatePPS: "messages/s"}[l.unit()]
	return fmt.Sprintf("%g %s", l.Rate, name)
}

// validate checks the limit of p, whose Burst Defaults has filled in.
func (l RateLimit) validate(p *Params) error {
	switch u := l.unit(); {
	case u != RateGbps && u != RateMiBps && u != RatePPS:
		return fmt.Errorf("rate limit units %q: use M, g or p", string(u))
	case l.Rate < 0:
		return fmt.Errorf("the rate limit must be positive")
	case l.Burst < 0:
		return fmt.Errorf("the burst size must not be negative")
	case !l.On() && l.Burst > 0:
		return fmt.Errorf("Can't enable burst mode when rate limiter is off") // perftest's words
	case !l.On():
		return nil
	case p.Infinite:
		return fmt.Errorf("run_infinitely does not support rate limit feature yet") // perftest's words
	case p.Test.IsLatency() || p.Duplex:
		return fmt.Errorf("the rate limiter paces the sender of a one-way bandwidth test only (not %s%s)", p.Test, map[bool]string{true: " -b"}[p.Duplex])
	}
	sizes := p.Sizes()
	if top := sizes[len(sizes)-1]; l.MsgsPerSecond(top) < 1 {
		return fmt.Errorf("the rate limit of %v is less than one %d-byte message a second", l, top)
	}
	return nil
}

// burstPacer is a RateLimit at work in one run of bw: whether a burst is
// open, how much of it is posted, and when the next one opens (on
// perftest's clock).
type burstPacer struct {
	gap     time.Duration
	burst   int
	next    time.Duration
	sending bool
	sent    int
}

// newBurstPacer returns p's pacer for its messages (p.Size bytes), its
// first burst due now, or nil if p has no rate limit.
func newBurstPacer(p *Params) *burstPacer {
	l := p.RateLimit
	if !l.On() {
		return nil
	}
	burst := l.Burst
	if burst == 0 {
		burst = p.TxDepth
	}
	pps := max(l.MsgsPerSecond(p.Size), 1)
	return &burstPacer{
		gap:   time.Duration(float64(burst) / float64(pps) * float64(time.Second)),
		burst: burst,
		next:  clock(),
	}
}

// open reports whether the sender may post: a burst is open, or its time
// has come and open opens it. A nil pacer always lets it.
func (b *burstPacer) open() bool {
	if b == nil || b.sending {
		return true
	}
	if b.next > clock() {
		return false
	}
	b.next += b.gap
	b.sending, b.sent = true, 0
	return true
}

// waiting reports whether the sender waits for the next burst.
func (b *burstPacer) waiting() bool { return b != nil && !b.sending }

// more reports whether the open burst takes another post.
func (b *burstPacer) more() bool { return b == nil || b.sending }

// posted counts n messages posted in the open burst, closing it once it
// has its burst.
func (b *burstPacer) posted(n int) {
	if b == nil {
		return
	}
	b.sent += n
	if b.sent >= b.burst {
		b.sending = false
	}
}

// errBurstDue ends a wait for completions when the next burst is due.
var errBurstDue = errors.New("perftest: the rate limiter's next burst is due")

// wait runs wait, bounded, between bursts, by the time the next one
// opens; it then returns errBurstDue. With nothing outstanding (none) it
// only sleeps until then. A wait between bursts lasts at most half of
// GiveUp, and counts as progress for the run's watchdog when it ends: a
// sender between bursts may hold messages that complete only with a later
// signaled one (CQMod), and waits for the limiter, not for its peer. A nil
// pacer, or one with a burst open, waits as wait does.
func (b *burstPacer) wait(ctx context.Context, p *Params, none bool, wait func(context.Context) (int, error)) (int, error) {
	if b == nil || b.sending {
		return wait(ctx)
	}
	due := b.next - clock()
	if due <= 0 {
		return 0, errBurstDue
	}
	dctx, cancel := context.WithTimeoutCause(ctx, min(due, p.GiveUp/2), errBurstDue)
	defer cancel()
	var n int
	var err error
	if none {
		<-dctx.Done()
		err = context.Cause(dctx)
	} else {
		n, err = wait(dctx)
	}
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(dctx), errBurstDue) {
		p.progressed()
		return 0, errBurstDue
	}
	return n, err
}

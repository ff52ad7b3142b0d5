package congestion

import (
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
)

// Config is what a reaction point needs besides its Params.
type Config struct {
	Params Params
	// LineRate is the port's rate: the flow starts there (DCQCN has no
	// slow start) and never goes above it. While the rate is the line
	// rate the pacer lets everything through.
	LineRate Rate
	// Burst is the pacer's bucket depth in bytes: at a reduced rate the
	// flow goes out in bursts of about this much, and a paced sender is
	// woken once a burst. One MTU paces packet by packet.
	Burst int
	// BurstTime, when not zero, bounds the bucket by time as well: it
	// holds at most what the current rate earns in BurstTime, and at
	// least MinBurst bytes. A slow flow's bursts then stay short on its
	// path (64 KiB is 17 ms at 30 Mb/s, a queue's worth on a slow link)
	// while a fast one's are Burst.
	BurstTime time.Duration
}

// Limits on Config.
const (
	MaxLineRate  = 100_000 * GbitPerSecond
	MaxBurst     = 64 << 20
	MaxBurstTime = time.Second
	// MinBurst is the least a bucket bounded by BurstTime holds: one
	// packet of the largest path MTU, 4096 bytes of payload.
	MinBurst = 4096
)

// ReactionPoint is DCQCN's reaction point for one flow (one QP's sends):
// the rate it may send at, cut by CNPs and raised again by a timer and a
// byte counter, and a pacer that holds the flow to that rate.
//
// Events come in as calls, each with the time it happens: OnCNP,
// OnPacketSent. Decisions go out as HasPacingBudget and TimeUntilSend.
// The timers are not goroutines: every call first runs, in time order,
// whatever timer expired before its time, so the state after a call does
// not depend on how often the caller looked in between. A simulator that
// wants the rate's exact course calls Advance at each Deadline.
//
// The zero ReactionPoint is off: it paces nothing and counts every CNP as
// ignored (rp_cnp_ignored), as a NIC with congestion control disabled.
// A ReactionPoint is not safe for concurrent use: its QP's owner drives
// it.
type ReactionPoint struct {
	on bool

	// Derived from Config. Rates are in units of unit bits per second
	// (1 in the paper variant, 1 Mb/s in the ConnectX one); α is a fixed
	// point fraction with alphaBits bits (32, or the firmware's 10).
	variant                  Variant
	unit                     uint64
	line, max, min           uint64
	firstRate, ai, hai       uint64
	g, gInc                  uint64
	alphaBits, cutShift      uint
	alphaMax, alphaInit      uint64
	minDecFac                uint64
	clamp, clampATI          bool
	threshold                uint32
	byteReset                uint64
	alphaPeriod, monitor, tr time.Duration

	// started: a CNP has come; the timers and the byte counter run.
	started bool
	now     monotime.Time // what the timers have been run up to

	rc, rt uint64 // current and target rate
	alpha  uint64

	alphaAt  monotime.Time // the alpha timer's next expiry
	alphaCNP bool          // ConnectX: a CNP came in this alpha period

	periodEnd monotime.Time // end of the monitor period the last cut opened
	pending   bool          // a CNP came within it: cut at its end

	incAt monotime.Time // the rate-increase timer's next expiry
	t, bc uint32        // increase events since the last cut: timer, bytes
	bytes uint64        // bytes sent since the last byte-counter event

	pacer pacer
	fresh bool // the pacer has never run: fill it at its first use

	c Counters
}

// NewReactionPoint returns a reaction point sending at c.LineRate, or an
// error naming what is wrong with c.
func NewReactionPoint(c Config) (*ReactionPoint, error) {
	p := c.Params
	if err := p.Validate(); err != nil {
		return nil, err
	}
	switch {
	case c.LineRate == 0 || c.LineRate > MaxLineRate:
		return nil, fmt.Errorf("%w: line rate %v: must be positive and at most %v", ErrParams, c.LineRate, MaxLineRate)
	case p.Variant == VariantConnectX && c.LineRate%MbitPerSecond != 0:
		return nil, fmt.Errorf("%w: line rate %v: the connectx variant counts rates in whole Mb/s", ErrParams, c.LineRate)
	case p.RPGMinRate > c.LineRate:
		return nil, fmt.Errorf("%w: rpg_min_rate %v above the line rate %v", ErrParams, p.RPGMinRate, c.LineRate)
	case p.RateToSetOnFirstCNP > c.LineRate:
		return nil, fmt.Errorf("%w: rate_to_set_on_first_cnp %v above the line rate %v", ErrParams, p.RateToSetOnFirstCNP, c.LineRate)
	case c.Burst <= 0 || c.Burst > MaxBurst:
		return nil, fmt.Errorf("%w: burst %d bytes: must be 1..%d", ErrParams, c.Burst, MaxBurst)
	case c.BurstTime < 0 || c.BurstTime > MaxBurstTime:
		return nil, fmt.Errorf("%w: burst time %v: must be 0 to %v", ErrParams, c.BurstTime, MaxBurstTime)
	}
	r := &ReactionPoint{
		on:          true,
		variant:     p.Variant,
		unit:        1,
		alphaBits:   32,
		alphaMax:    1 << 32,
		g:           uint64(p.DCETCPG),
		minDecFac:   uint64(p.RPGMinDecFac),
		clamp:       p.ClampTgtRate,
		clampATI:    p.ClampTgtRateAfterTimeInc,
		threshold:   uint32(p.RPGThreshold),
		byteReset:   uint64(p.RPGByteReset) * 64,
		alphaPeriod: p.DCETCPRTT,
		monitor:     p.RateReduceMonitorPeriod,
		tr:          p.RPGTimeReset,
		fresh:       true,
	}
	if p.Variant == VariantConnectX {
		r.unit, r.alphaBits, r.alphaMax = uint64(MbitPerSecond), 10, 1023
	}
	r.gInc = (1024 - r.g) << (r.alphaBits - 10)
	r.alphaInit = uint64(p.InitialAlphaValue) << (r.alphaBits - 10)
	r.cutShift = uint(p.RPGGD) + r.alphaBits - 10
	r.line = uint64(c.LineRate) / r.unit
	r.max = r.line
	if m := uint64(p.RPGMaxRate) / r.unit; m != 0 && m < r.max {
		r.max = m
	}
	r.min = uint64(p.RPGMinRate) / r.unit
	if r.min > r.max {
		return nil, fmt.Errorf("%w: rpg_min_rate %v above rpg_max_rate %v", ErrParams, p.RPGMinRate, p.RPGMaxRate)
	}
	r.firstRate = min(uint64(p.RateToSetOnFirstCNP)/r.unit, r.max)
	r.ai = uint64(p.RPGAIRate) / r.unit
	r.hai = uint64(p.RPGHAIRate) / r.unit
	r.pacer.depth = int64(c.Burst) * nanobitsPerByte
	r.pacer.window = uint64(c.BurstTime)
	r.rc, r.rt = r.max, r.max
	r.pacer.setRate(r.rc * r.unit)
	return r, nil
}

// OnCNP takes a CNP for this flow, received at now. The first one sets α
// to initial_alpha_value and starts the timers. A CNP cuts the rate at
// once unless a cut happened less than rate_reduce_monitor_period ago;
// then the cut waits for that period's end, and takes every CNP within
// it as one.
func (r *ReactionPoint) OnCNP(now monotime.Time) {
	if !r.on {
		r.c.RPCNPIgnored++
		return
	}
	now = r.at(now)
	r.advance(now)
	r.c.RPCNPHandled++
	first := !r.started
	if first {
		r.started, r.now = true, now
		r.alpha, r.alphaCNP = r.alphaInit, false
		r.alphaAt = now.Add(r.alphaPeriod)
	} else if r.variant == VariantConnectX {
		r.alphaCNP = true
	}
	switch {
	case first && r.firstRate != 0:
		r.rt = r.firstRate
		r.setRate(now, r.firstRate)
		r.resetIncrease(now)
		r.periodEnd, r.pending = now.Add(r.monitor), false
	case r.monitor > 0 && now < r.periodEnd:
		r.pending = true
	default:
		r.cut(now)
	}
	if r.variant == VariantPaper {
		// The paper updates α on every CNP, after the cut, and restarts
		// the alpha timer: α decays only after K without a CNP.
		r.alpha = min(r.alpha*r.g>>10+r.gInc, r.alphaMax)
		r.alphaAt = now.Add(r.alphaPeriod)
	}
}

// OnPacketSent notes n bytes sent at now: the pacer spends them, and the
// byte counter counts them once a CNP has started it.
func (r *ReactionPoint) OnPacketSent(now monotime.Time, n int) {
	if !r.on {
		return
	}
	now = r.at(now)
	r.advance(now)
	if r.rc < r.line {
		r.paceAt(now)
		r.pacer.spend(n)
	}
	if !r.started || n <= 0 {
		return
	}
	r.bytes += uint64(n)
	for r.bytes >= r.byteReset {
		r.bytes -= r.byteReset
		r.c.ByteIncreases++
		r.increase(now, &r.bc)
	}
}

// HasPacingBudget reports whether the flow may send at now. At the line
// rate it always may; below it, while the pacer has credit, which one
// packet may overdraw.
func (r *ReactionPoint) HasPacingBudget(now monotime.Time) bool {
	if !r.on {
		return true
	}
	now = r.at(now)
	r.advance(now)
	if r.rc >= r.line {
		return true
	}
	r.paceAt(now)
	return r.pacer.credit > 0
}

// PacingBudget returns how many bytes the flow may send at now before the
// pacer holds it: while HasPacingBudget, at least 1 (the packet that
// overdraws the credit still goes), else 0; math.MaxInt when nothing is
// paced (at the line rate, or off). A sender that knows its next packet
// is n bytes long learns from PacingBudget(now) <= n that it is the last
// of its burst, and may ask for an acknowledgement on it.
func (r *ReactionPoint) PacingBudget(now monotime.Time) int {
	if !r.HasPacingBudget(now) {
		return 0
	}
	if !r.on || r.rc >= r.line {
		return math.MaxInt
	}
	return int((r.pacer.credit + nanobitsPerByte - 1) / nanobitsPerByte)
}

// TimeUntilSend returns when the flow may next send: now if it may send
// now, else when the pacer will have built up a whole burst at the
// current rate, or the next Deadline if that comes first (the rate may
// rise there: ask again).
func (r *ReactionPoint) TimeUntilSend(now monotime.Time) monotime.Time {
	if !r.HasPacingBudget(now) {
		now = r.at(now)
		w := r.pacer.wake(now)
		if d := r.Deadline(); d != 0 && d < w {
			w = d
		}
		return w
	}
	return now
}

// Deadline returns when the rate next changes by itself (a rate-increase
// timer expiry below the line rate, or a cut waiting for its monitor
// period to end), or the zero Time if it will not. α's own timer is not a
// deadline: it changes no rate, and runs lazily.
func (r *ReactionPoint) Deadline() monotime.Time {
	if !r.started {
		return 0
	}
	var d monotime.Time
	if r.pending {
		d = r.periodEnd
	}
	if r.rc < r.max {
		d = monotime.Min(d, r.incAt)
	}
	return d
}

// Advance runs the timers that expire up to now.
func (r *ReactionPoint) Advance(now monotime.Time) {
	if r.on {
		r.advance(r.at(now))
	}
}

// Rate returns the current rate, RC.
func (r *ReactionPoint) Rate() Rate { return Rate(r.rc * r.unit) }

// Enabled reports whether r reacts to CNPs (it is not the zero, off,
// ReactionPoint).
func (r *ReactionPoint) Enabled() bool { return r.on }

// State is a reaction point's state, for tests, traces and plots.
type State struct {
	Rate       Rate    // RC, the current rate
	TargetRate Rate    // RT
	Alpha      float64 // α, in [0, 1]
	TimerStage uint32  // the paper's T: rate-increase timer expiries since the last cut
	ByteStage  uint32  // the paper's BC: byte-counter events since the last cut
	ByteCount  uint64  // bytes counted toward the next byte-counter event
	Started    bool    // a CNP has come: the timers run
}

// State returns r's state as of the last call that took a time; call
// Advance first for the state at a given time.
func (r *ReactionPoint) State() State {
	return State{
		Rate:       Rate(r.rc * r.unit),
		TargetRate: Rate(r.rt * r.unit),
		Alpha:      float64(r.alpha) / float64(uint64(1)<<r.alphaBits),
		TimerStage: r.t,
		ByteStage:  r.bc,
		ByteCount:  r.bytes,
		Started:    r.started,
	}
}

// Counters returns r's counters; the NP's are zero.
func (r *ReactionPoint) Counters() Counters { return r.c }

// at returns now, or the time r has already run to if now is before it:
// time does not go backwards inside a reaction point.
func (r *ReactionPoint) at(now monotime.Time) monotime.Time {
	if now < r.now {
		return r.now
	}
	return now
}

// The timers, in the order they run when they expire at the same instant:
// α first (HPCC's model delays its decrease by 1 ns for this), then the
// rate increase (the timer armed earliest), then a deferred cut, which
// restarts the increase timer.
const (
	evAlpha = iota
	evIncrease
	evDecrease
)

// advance runs, in time order, every timer that expires up to now.
func (r *ReactionPoint) advance(now monotime.Time) {
	if !r.started || now <= r.now {
		return
	}
	for {
		at, ev := r.alphaAt, evAlpha
		if r.incAt < at {
			at, ev = r.incAt, evIncrease
		}
		if r.pending && r.periodEnd < at {
			at, ev = r.periodEnd, evDecrease
		}
		if at > now {
			break
		}
		switch ev {
		case evAlpha:
			r.expiredAlpha(now)
		case evIncrease:
			r.expiredIncrease(now)
		case evDecrease:
			r.cut(at)
		}
	}
	r.now = now
}

// expiredAlpha updates α at the end of an alpha period: it decays by
// (1 − g), and in the ConnectX variant rises by g if a CNP came in the
// period. Once α is 0 with no CNP, every later expiry up to now is a
// no-op, and is skipped at once.
func (r *ReactionPoint) expiredAlpha(now monotime.Time) {
	if r.alpha == 0 && !r.alphaCNP {
		n := (now-r.alphaAt)/monotime.Time(r.alphaPeriod) + 1
		r.alphaAt += n * monotime.Time(r.alphaPeriod)
		return
	}
	a := r.alpha * r.g >> 10
	if r.alphaCNP {
		a = min(a+r.gInc, r.alphaMax)
	}
	r.alpha, r.alphaCNP = a, false
	r.alphaAt = r.alphaAt.Add(r.alphaPeriod)
}

// expiredIncrease raises the rate at a rate-increase timer expiry. At the
// ceiling an increase changes nothing but the stage, so every expiry up
// to now (or up to a pending cut, which resets the stage) is taken at
// once.
func (r *ReactionPoint) expiredIncrease(now monotime.Time) {
	if r.rc == r.max && r.rt == r.max {
		limit := now
		if r.pending && r.periodEnd < limit {
			limit = r.periodEnd
		}
		n := (limit-r.incAt)/monotime.Time(r.tr) + 1
		r.incAt += n * monotime.Time(r.tr)
		r.t = satAdd(r.t, uint64(n))
		r.c.TimerIncreases += uint64(n)
		return
	}
	at := r.incAt
	r.incAt = at.Add(r.tr)
	r.c.TimerIncreases++
	r.increase(at, &r.t)
}

// increase is one rate-increase event at time at, from the timer or the
// byte counter, whose stage counter is stage. T and BC are the counts of
// earlier events since the last cut (this one is counted after):
//
//	min(T, BC) > F    hyper increase:    RT += R_HAI (ConnectX), or (min(T, BC) − F)·R_HAI (paper)
//	max(T, BC) ≥ F    additive increase: RT += R_AI
//	otherwise         fast recovery:     RT unchanged
//
// then RC = (RC + RT)/2, rounded up so that RC reaches RT. With F = 5 the
// paper's timer alone gives 5 fast recovery steps, then additive ones;
// with ConnectX's F = 1, one, as isekai's model of the firmware.
func (r *ReactionPoint) increase(at monotime.Time, stage *uint32) {
	lo, hi := min(r.t, r.bc), max(r.t, r.bc)
	var inc uint64
	switch {
	case lo > r.threshold:
		inc = r.hai
		if r.variant == VariantPaper {
			if i := uint64(lo - r.threshold); inc > (r.max-r.rt)/i {
				inc = r.max // saturates below
			} else {
				inc *= i
			}
		}
	case hi >= r.threshold:
		inc = r.ai
	}
	if inc >= r.max-r.rt {
		r.rt = r.max
	} else {
		r.rt += inc
	}
	r.setRate(at, (r.rc+r.rt+1)/2)
	*stage = satAdd(*stage, 1)
}

// cut is a rate decrease at time at:
//
//	RT = RC                  if clamp_tgt_rate, or an increase came since the last cut
//	                         (by bytes; or by the timer, with clamp_tgt_rate_after_time_inc)
//	RC = RC − min(RC·α/Gd, RC·(100 − rpg_min_dec_fac)/100), at least rpg_min_rate
//
// which with α in [0, 1] and Gd = 2 is the paper's RC·(1 − α/2). It resets
// the increase stages and the byte counter, restarts the increase timer,
// and opens a monitor period.
func (r *ReactionPoint) cut(at monotime.Time) {
	if r.clamp || r.bc > 0 || (r.clampATI && r.t > 0) {
		r.rt = r.rc
	}
	d := mulShift(r.rc, r.alpha, r.cutShift)
	if limit := r.rc * (100 - r.minDecFac) / 100; d > limit {
		d = limit
	}
	r.setRate(at, max(r.rc-d, r.min))
	r.resetIncrease(at)
	r.periodEnd, r.pending = at.Add(r.monitor), false
	r.c.RateDecreases++
}

// resetIncrease restarts the rate increase from a cut at time at.
func (r *ReactionPoint) resetIncrease(at monotime.Time) {
	r.t, r.bc, r.bytes = 0, 0, 0
	r.incAt = at.Add(r.tr)
}

// setRate changes RC at time at. The pacer first earns its credit at the
// old rate up to at, so that a rate change found late (a timer run by a
// later call) paces exactly as one found on time; entering pacing from
// the line rate starts with a full burst.
func (r *ReactionPoint) setRate(at monotime.Time, rc uint64) {
	wasPaced := r.rc < r.line
	if wasPaced {
		r.paceAt(at)
	}
	r.rc = rc
	r.pacer.setRate(rc * r.unit)
	if !wasPaced && rc < r.line {
		r.pacer.fill(at)
		r.fresh = false
	}
}

// paceAt brings the pacer's credit up to now.
func (r *ReactionPoint) paceAt(now monotime.Time) {
	if r.fresh {
		r.pacer.fill(now)
		r.fresh = false
		return
	}
	r.pacer.accrue(now)
}

// mulShift returns a·b >> s, saturated to 64 bits.
func mulShift(a, b uint64, s uint) uint64 {
	hi, lo := bits.Mul64(a, b)
	if s >= 64 {
		return hi >> (s - 64)
	}
	if hi>>s != 0 {
		return ^uint64(0)
	}
	return hi<<(64-s) | lo>>s
}

// satAdd returns a+n, saturated at the largest uint32.
func satAdd(a uint32, n uint64) uint32 {
	if n >= uint64(^uint32(0)-a) {
		return ^uint32(0)
	}
	return a + uint32(n)
}

package perftest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// errTimeUp is the cause of a timed run's context once its time is up
// (perftest's END_STATE): a wait returns it, and the run stops there
// without an error.
var errTimeUp = errors.New("perftest: the run's time is up")

// phase is where a timed run is: perftest's duration_param->state.
type phase int32

const (
	phaseStart  phase = iota // START_STATE: the first margin, not counted
	phaseSample              // SAMPLE_STATE: what completes now counts
	phaseStop                // STOP_SAMPLE_STATE: the last margin, not counted
	phaseEnd                 // END_STATE: the run stops
)

// runTimer moves a timed run (-D) through its phases as perftest's SIGALRM
// handler, catch_alarm, does: START for the margin, SAMPLE for the
// duration less both margins, STOP_SAMPLE for the margin, then END. A
// margin of zero passes its phase at once (catch_alarm(0)). The run counts
// the messages that complete in SAMPLE and reports them over the sample
// window, whose two ends the timer records (tposted[0], tcompleted[0]).
type runTimer struct {
	phase  atomic.Int32
	margin time.Duration
	window time.Duration
	end    context.CancelCauseFunc

	mu             sync.Mutex
	timer          *time.Timer
	opened, closed time.Duration // clock() when SAMPLE began and ended
	armed, done    bool

	// With --cpu_util, the machine's CPU times when SAMPLE began and
	// ended (get_cpu_stats in catch_alarm).
	cpuUtil bool
	cpu     [2]cpuStat
}

// newRunTimer returns the timer of a timed run of p, not yet started, and
// a context that ends with errTimeUp when the timer reaches END.
func newRunTimer(ctx context.Context, p *Params) (*runTimer, context.Context) {
	ctx, end := context.WithCancelCause(ctx)
	m := p.margin()
	return &runTimer{margin: m, window: p.period() - 2*m, end: end, cpuUtil: p.cpuUtilOn()}, ctx
}

// start starts the clock: run_iter_bw and run_iter_lat* start it when
// they begin, run_iter_bw_server and run_iter_lat_send at the first
// message they receive (set_on_first_rx_packet). It does nothing the
// second time.
func (t *runTimer) start() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.armed || t.done {
		return
	}
	t.armed = true
	if t.margin > 0 {
		t.timer = time.AfterFunc(t.margin, t.advance)
		return
	}
	t.advanceLocked()
}

// started reports whether start ran.
func (t *runTimer) started() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.armed
}

// advance is catch_alarm: the alarm for the current phase went off.
func (t *runTimer) advance() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advanceLocked()
}

func (t *runTimer) advanceLocked() {
	for !t.done {
		var wait time.Duration
		switch phase(t.phase.Load()) {
		case phaseStart:
			if t.cpuUtil {
				t.cpu[0] = readCPUStat()
			}
			t.opened = clock()
			t.phase.Store(int32(phaseSample))
			wait = t.window
		case phaseSample:
			t.closed = clock()
			if t.cpuUtil {
				t.cpu[1] = readCPUStat()
			}
			t.phase.Store(int32(phaseStop))
			wait = t.margin
		default:
			t.phase.Store(int32(phaseEnd))
			t.done = true
			t.end(errTimeUp)
			return
		}
		if wait > 0 {
			t.timer = time.AfterFunc(wait, t.advance)
			return
		}
	}
}

// sampling reports whether what completes now counts.
func (t *runTimer) sampling() bool { return phase(t.phase.Load()) == phaseSample }

// ended reports whether the run's time is up.
func (t *runTimer) ended() bool { return phase(t.phase.Load()) == phaseEnd }

// sample returns how long the sample window lasted: tcompleted[0] -
// tposted[0], which perftest divides the counted messages by.
func (t *runTimer) sample() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed - t.opened
}

// bwResult is the report of a timed bandwidth run that counted n
// size-byte messages in the sample window, with the CPU's use over it
// (--cpu_util).
func (t *runTimer) bwResult(size int, n uint64) BWResult {
	r := bwResult(size, n, t.sample(), 0)
	r.CPUUtil = t.cpuUse()
	return r
}

// cpuUse returns the CPU's use over the sample window, in percent, as
// --cpu_util reports it; 0 without --cpu_util.
func (t *runTimer) cpuUse() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return cpuUtil(t.cpu[0], t.cpu[1])
}

// release stops the timer and ends its context, whatever its phase.
func (t *runTimer) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer != nil {
		t.timer.Stop()
	}
	t.done = true
	t.end(context.Canceled)
}

// timeUp reports whether err says that the run's time is up, the end of a
// timed run rather than a failure.
func timeUp(err error) bool { return errors.Is(err, errTimeUp) }

// stoppedByCaller reports whether a --run_infinitely run ended because
// the caller's context did, its only normal end, rather than because it
// stalled (the watchdog's ErrStalled) or failed. ctx is the run's context
// (Params.watch's), err what the run returned.
func stoppedByCaller(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() != nil && !errors.Is(context.Cause(ctx), ErrStalled)
}

// interrupted returns the error that ends a timed run whose context
// ended before its time was up (the caller's end, or the watchdog's), and
// nil while it runs or once its time is up. The run's loops ask it on
// every turn: a wait that finds what it waits for at once never looks at
// its context.
func interrupted(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	if cause := context.Cause(ctx); !timeUp(cause) {
		return fmt.Errorf("perftest: %w", cause)
	}
	return nil
}

// endInfinite is how a --run_infinitely run whose context ended ends:
// without an error if the caller ended it, with the cause if not.
func endInfinite(ctx context.Context) error {
	cause := context.Cause(ctx)
	if stoppedByCaller(ctx, cause) {
		return nil
	}
	return fmt.Errorf("perftest: %w", cause)
}

// interval is --run_infinitely's report: every period, perftest's print
// thread (print_bw_infinite_mode) reports the messages completed since
// its last report over the time since then, and starts again.
type interval struct {
	period time.Duration
	size   int
	since  time.Duration // clock() at the last report, or at the start
	done   uint64        // messages completed then
	emit   func(BWResult)
}

// newInterval starts an interval of p's period now, reporting to emit.
func newInterval(p *Params, emit func(BWResult)) *interval {
	if emit == nil {
		emit = func(BWResult) {}
	}
	return &interval{period: p.period(), size: p.Size, since: clock(), emit: emit}
}

// tick reports, if a period has passed, the done messages completed so
// far.
func (iv *interval) tick(done uint64) {
	now := clock()
	el := now - iv.since
	if el < iv.period {
		return
	}
	iv.emit(bwResult(iv.size, done-iv.done, el, 0))
	iv.since, iv.done = now, done
}

// errReportDue ends a wait of an infinite run whose report is due.
var errReportDue = errors.New("perftest: an infinite run's report is due")

// wait runs wait, which waits for completions until its context ends,
// bounded by the time the next report is due, so that a run that sees
// nothing complete still reports, as perftest's print thread does (a
// send_bw server whose client is gone prints zeros). It then returns
// errReportDue. A nil interval waits as wait does.
func (iv *interval) wait(ctx context.Context, wait func(context.Context) (int, error)) (int, error) {
	if iv == nil {
		return wait(ctx)
	}
	due := iv.since + iv.period - clock()
	if due <= 0 {
		return 0, errReportDue
	}
	dctx, cancel := context.WithTimeoutCause(ctx, due, errReportDue)
	defer cancel()
	n, err := wait(dctx)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(dctx), errReportDue) {
		return 0, errReportDue
	}
	return n, err
}

// bwResult is a bandwidth report of n messages of size bytes in el.
func bwResult(size int, n uint64, el time.Duration, peak float64) BWResult {
	r := BWResult{Size: size, Iters: int(n), Elapsed: el, PeakMBps: peak}
	if s := el.Seconds(); s > 0 {
		r.AvgMBps = float64(size) * float64(n) / s / (1 << 20)
		r.MsgRate = float64(n) / s / 1e6
	}
	return r
}

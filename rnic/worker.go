package rnic

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire"
)

// worker runs the timers of a set of QPs (hashed by QPN) and the work
// they ask for with Schedule; received packets and posted work requests
// are processed by the goroutines that bring them. It is the
// qp.Scheduler of its QPs.
type worker struct {
	dev *Device

	// wakeAt is when the worker's timer fires, a monotime.Time. A QP
	// whose new deadline comes earlier lowers it, and kicks the worker
	// unless scanning says the worker is reading its QPs' deadlines: it
	// then takes the lowered wakeAt as its own when the scan is over.
	wakeAt   atomic.Int64
	scanning atomic.Bool
	turns    atomic.Uint64 // turns taken, for tests and benchmarks

	// scanned, when set (by tests), runs once the scan has read every
	// QP's deadline, before it clears scanning.
	scanned func()

	mu    sync.Mutex
	qps   map[*QP]struct{}
	ready map[qp.Runner]struct{} // QPs that asked to run
	kick  chan struct{}

	// Owned by the worker goroutine.
	runList []qp.Runner
	all     []*QP
	pkt     wire.Packet
}

func newWorker(d *Device) *worker {
	w := &worker{
		dev:   d,
		qps:   make(map[*QP]struct{}),
		ready: make(map[qp.Runner]struct{}),
		kick:  make(chan struct{}, 1),
	}
	w.wakeAt.Store(math.MaxInt64) // no timer armed: the first one kicks
	return w
}

func (w *worker) add(q *QP) {
	w.mu.Lock()
	w.qps[q] = struct{}{}
	w.mu.Unlock()
}

func (w *worker) remove(q *QP) {
	w.mu.Lock()
	delete(w.qps, q)
	delete(w.ready, q.e)
	w.mu.Unlock()
}

func (w *worker) run() {
	defer w.dev.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-w.kick:
		case <-timer.C:
		case <-w.dev.done:
			return
		}
		w.turns.Add(1)
		w.runReady()
		timer.Reset(w.scan())
	}
}

// scan returns how long the worker may sleep before a QP's timer is due,
// and leaves that time in wakeAt. A QP that arms a timer while the scan
// reads the deadlines, just after the scan looked at it, lowers wakeAt
// and does not kick (Timer): scan takes the lowered time once it has
// cleared scanning. The QPs' Timer calls do not then kick the worker for
// every timer they arm during its scan, each kick bringing another scan:
// with a QP posting every few microseconds, such kicks kept the worker
// waking in a chain. Without the lowering, a timer armed during the scan
// would be compared with the wake time of the turn now ending, found no
// earlier, and missed until some other wake.
func (w *worker) scan() time.Duration {
	w.scanning.Store(true)
	w.wakeAt.Store(math.MaxInt64)
	w.lower(w.nextDeadline())
	if w.scanned != nil {
		w.scanned()
	}
	w.scanning.Store(false)
	// A Timer that saw scanning set lowered wakeAt before the Store above,
	// so this Load sees its time; one that did not has kicked the worker.
	at := w.wakeAt.Load()
	if at == math.MaxInt64 {
		return time.Hour
	}
	return max(w.dev.clock.Until(monotime.Time(at)), 0)
}

// lower sets wakeAt to at if at is earlier, and reports whether it did.
func (w *worker) lower(at int64) bool {
	for {
		cur := w.wakeAt.Load()
		if at >= cur {
			return false
		}
		if w.wakeAt.CompareAndSwap(cur, at) {
			return true
		}
	}
}

// runReady runs the QPs that asked to, and those whose timers are due.
func (w *worker) runReady() {
	now := w.dev.clock.Now()
	w.mu.Lock()
	for q := range w.ready {
		w.runList = append(w.runList, q)
	}
	clear(w.ready)
	w.mu.Unlock()
	// Deadline takes the QP's lock, and Schedule takes w.mu with it held:
	// never hold w.mu while asking a QP.
	for _, q := range w.snapshot() {
		if d := q.e.Deadline(); !d.IsZero() && !now.Before(d) {
			w.runList = append(w.runList, q.e)
		}
	}
	for _, q := range w.runList {
		q.Run()
	}
	clear(w.runList)
	w.runList = w.runList[:0]
}

// snapshot returns the worker's QPs, in a slice the worker reuses.
func (w *worker) snapshot() []*QP {
	w.mu.Lock()
	w.all = w.all[:0]
	for q := range w.qps {
		w.all = append(w.all, q)
	}
	w.mu.Unlock()
	return w.all
}

// nextDeadline returns the earliest of its QPs' deadlines, or
// math.MaxInt64 when none has a timer armed.
func (w *worker) nextDeadline() int64 {
	next := int64(math.MaxInt64)
	for _, q := range w.snapshot() {
		if d := q.e.Deadline(); !d.IsZero() {
			next = min(next, int64(d))
		}
	}
	return next
}

// Timer wakes the worker when r's new deadline comes before the worker's
// own. It may be called from any goroutine, with r's lock held.
func (w *worker) Timer(r qp.Runner, at monotime.Time) {
	if w.lower(int64(at)) && !w.scanning.Load() {
		w.wake()
	}
}

// wake makes the worker take a turn, if it is not about to already.
func (w *worker) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Schedule marks r to run on the worker's next turn. It may be called from
// any goroutine, with r's lock held.
func (w *worker) Schedule(r qp.Runner) {
	w.mu.Lock()
	w.ready[r] = struct{}{}
	w.mu.Unlock()
	w.wake()
}

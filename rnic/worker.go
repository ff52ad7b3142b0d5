package rnic

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorxe/gorxe/internal/rc"
	"github.com/gorxe/gorxe/wire"
)

// worker runs the timers of a set of QPs (hashed by QPN) and the work
// they ask for with Schedule; received packets and posted work requests
// are processed by the goroutines that bring them. It is the
// rc.Scheduler of its QPs.
type worker struct {
	dev   *Device
	turns atomic.Uint64 // turns taken, for tests and benchmarks

	mu     sync.Mutex
	ready  map[rc.Runner]struct{} // QPs that asked to run
	order  []rc.Runner            // the same, in the order they asked
	timers timerHeap              // when to look at which QP (timerheap.go)
	wakeAt int64                  // when the worker wakes, a monotime.Time
	kick   chan struct{}

	// On a Loop (Config.Loop), the worker's turns are the loop's events:
	// turnAt is the time of the next one (math.MaxInt64 for none), turnGen
	// its generation, which an earlier turn's scheduling supersedes.
	loop    Loop
	turnAt  int64
	turnGen uint64

	// Owned by the worker goroutine.
	runList []rc.Runner
	due     []*timerEntry
	pkt     wire.Packet
}

func newWorker(d *Device) *worker {
	return &worker{
		dev:    d,
		ready:  make(map[rc.Runner]struct{}),
		kick:   make(chan struct{}, 1),
		wakeAt: math.MaxInt64, // no timer armed: the first one kicks
		loop:   d.cfg.Loop,
		turnAt: math.MaxInt64,
	}
}

// add takes q, made with a qpPort whose timer entry q.timer is, among
// the worker's QPs.
func (w *worker) add(q *QP) { q.timer.q = q.e }

func (w *worker) remove(q *QP) {
	w.mu.Lock()
	q.timer.at.Store(removed) // its items are dropped as they come up
	if _, ok := w.ready[q.e]; ok {
		delete(w.ready, q.e)
		w.order = slices.DeleteFunc(w.order, func(r rc.Runner) bool { return r == q.e })
	}
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
		timer.Reset(w.sleep())
	}
}

// runReady runs the QPs that asked to, and those whose timers are due.
func (w *worker) runReady() {
	now := w.dev.clock.Now()
	w.mu.Lock()
	w.runList = append(w.runList, w.order...) // in order: a simulated run must not depend on a map's
	clear(w.ready)
	clear(w.order)
	w.order = w.order[:0]
	w.mu.Unlock()
	// Run takes the QP's lock, and Schedule takes w.mu with it held:
	// never hold w.mu while running a QP. What waits on the link is taken
	// in before a UC or UD QP sends more.
	for _, q := range w.runList {
		if unreliable(q) {
			w.dev.receiveFirst()
		}
		q.Run()
	}
	clear(w.runList)
	w.runList = w.runList[:0]
	w.runTimers(now)
}

// wake makes the worker take a turn, if it is not about to already.
func (w *worker) wake() {
	if w.loop != nil {
		w.turnOnLoop(int64(w.dev.clock.Now()))
		return
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Schedule marks r to run on the worker's next turn. It may be called from
// any goroutine, with r's lock held.
func (w *worker) Schedule(r rc.Runner) {
	w.mu.Lock()
	if _, ok := w.ready[r]; !ok {
		w.ready[r] = struct{}{}
		w.order = append(w.order, r)
	}
	w.mu.Unlock()
	w.wake()
}

// turnOnLoop has the loop run the worker's turn at at, unless a turn
// comes no later. A turn runs the QPs that asked to and the timers due,
// then schedules the next turn, at the earliest timer.
func (w *worker) turnOnLoop(at int64) {
	if at >= w.turnAt {
		return
	}
	w.turnAt = at
	w.turnGen++
	gen := w.turnGen
	w.loop.At(time.Duration(at-1), func() {
		if gen != w.turnGen {
			return // an earlier turn took this one's place
		}
		w.turnAt = math.MaxInt64
		select {
		case <-w.dev.done:
			return // closed: its QPs stop where they are
		default:
		}
		w.turns.Add(1)
		w.runReady()
		if next := w.rearm(); next != math.MaxInt64 {
			w.turnOnLoop(next)
		}
	})
}

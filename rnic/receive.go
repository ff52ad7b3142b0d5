package rnic

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/internal/pages"
	"github.com/gorxe/gorxe/internal/rc"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// receiver is the device's receive path: the buffers a batch lands in and
// what processing it needs. Whoever holds mu owns it: the receive
// goroutine, or a program's goroutine inside Device.Poll. Because a batch
// is read from the link and processed under the same lock, two batches are
// never processed out of the order the link delivered them.
type receiver struct {
	mu       sync.Mutex
	bufs     [][]byte
	sizes    []int
	p        wire.Packet
	owing    []*QP // QPs the batches since the last flushAcks left owing an ACK
	noV4ICRC bool
	poller   link.Poller // the link, if it can receive without blocking

	// wakes holds back the wake-ups of the device's CQs while the
	// receive goroutine or a driving waiter processes a batch (see
	// receiveLoop).
	wakes cq.Batch
	// driving says a goroutine waiting on a CQ is in Drive, and
	// drivenBatch that it processes a batch, whose wake-ups are its own
	// (Wake); timed is the link, if its waits can give up.
	driving, drivenBatch atomic.Bool
	timed                link.TimedPoller

	// Where the batches were processed (Counters.RxBatches): on the
	// device's own goroutine, or its Loop's turns, woken or polling
	// (busyPolled), in a program's Poll, in a CQ waiter's Drive.
	ownBatches, busyPolledBatches, polledBatches, drivenBatches atomic.Uint64
	// caughtUp counts the batches of those own ones that the timer
	// worker read when its timers fired late (catchUp).
	caughtUp atomic.Uint64

	// backlog says the last batch read filled half its buffers or more,
	// so more are likely waiting on the link (receiveFirst); helped
	// counts the batches a sender read before it sent
	// (rx_batches_before_tx).
	backlog atomic.Bool
	helped  atomic.Uint64
	// lastRead is when a batch was last read and processed, by anyone (a
	// monotime.Time): a sender that finds it old looks at the link itself
	// (receiveFirst), as the goroutine that should have may not have run.
	lastRead atomic.Int64

	// lastPoll is when a program last called Poll (a monotime.Time), 0
	// after Flush, noted every markEvery calls (polls counts them);
	// resume wakes a receive goroutine that stood aside for a polling
	// program, on Flush, or for a waiter whose Drive found the link
	// quiet.
	lastPoll atomic.Int64
	// lastDrive is when a waiter's Drive last ended, 0 after Flush.
	lastDrive atomic.Int64
	polls     atomic.Uint32
	resume    chan struct{}

	// backstop sends the ACKs Poll left owed once the program has stopped
	// polling for Config.PollGrace without calling Flush; armed says it is set.
	backstop *time.Timer
	armed    atomic.Bool

	// turnDue says a receiveTurn is scheduled on the device's Loop.
	turnDue bool

	// aside times the receive goroutine's standing aside; one timer for
	// the device's life, so that waiting allocates nothing.
	aside *time.Timer
}

func (r *receiver) init(d *Device, l link.Link) {
	r.bufs = make([][]byte, link.BatchSize)
	for i := range r.bufs {
		r.bufs[i] = getBuffer()
		pages.Populate(r.bufs[i]) // the first batch writes them all
	}
	r.sizes = make([]int, link.BatchSize)
	r.noV4ICRC = l.Flags()&link.FlagNoIPv4ICRC != 0
	r.poller, _ = l.(link.Poller)
	r.timed, _ = l.(link.TimedPoller)
	r.resume = make(chan struct{}, 1)
	r.backstop = time.AfterFunc(time.Hour, d.runLeftovers)
	r.backstop.Stop()
	r.aside = time.NewTimer(time.Hour)
	r.aside.Stop()
}

// runLeftovers is the backstop: it sends the ACKs Poll left owed when the
// program that polled has gone quiet, and otherwise looks again when it
// would have.
func (d *Device) runLeftovers() {
	r := &d.rx
	if left := d.graceLeft(); left > 0 {
		r.backstop.Reset(left)
		return
	}
	r.armed.Store(false)
	select {
	case <-d.done:
		return
	default:
	}
	d.forgetPolls()
	r.mu.Lock()
	defer r.mu.Unlock()
	d.flushAcks()
	d.tx.flush()
}

// programPolls reports whether a program has polled the device (Poll) or
// waited on it (Drive) since the device last found it quiet: the link's
// sends then wait for its next poll or wait, or the backstop. It reads
// no clock, as it runs at every send; deferredSend looks at the time.
func (d *Device) programPolls() bool {
	r := &d.rx
	return r.lastPoll.Load() != 0 || r.lastDrive.Load() != 0 || r.driving.Load()
}

// busyPolled reports whether a program busy polls the device (Poll),
// rather than sleeping on a CQ or leaving the link to the receive
// goroutine.
func (d *Device) busyPolled() bool { return d.rx.lastPoll.Load() != 0 }

// deferredSend follows a send the link deferred: if the backstop is not
// set, it sets it for when the program's grace runs out, to flush what a
// program that stops polling without Flush leaves behind; if the grace
// has run out already, the program is gone, and it flushes at once.
func (d *Device) deferredSend() {
	r := &d.rx
	if r.armed.Load() {
		return
	}
	if left := d.graceLeft(); left > 0 {
		if r.armed.CompareAndSwap(false, true) {
			r.backstop.Reset(left)
		}
		return
	}
	d.forgetPolls()
	d.tx.flush()
}

// forgetPolls clears the marks of a program's polls and waits that are a
// grace old or more, so that sends go at once again; a mark made since
// stays.
func (d *Device) forgetPolls() {
	r := &d.rx
	now := d.clock.Now()
	for _, m := range []*atomic.Int64{&r.lastPoll, &r.lastDrive} {
		if last := m.Load(); last != 0 && now.Sub(monotime.Time(last)) >= d.pollGrace {
			m.CompareAndSwap(last, 0)
		}
	}
}

// graceLeft returns how much longer the link stays with the program that
// last called Poll or Drive: 0 once it has been quiet for Config.PollGrace
// (driveGrace after a Drive), or called Flush.
func (d *Device) graceLeft() time.Duration {
	r := &d.rx
	if r.driving.Load() {
		// The receive goroutine, standing aside, looks again this much
		// later: a waiter drives for as long as it waits, and the
		// goroutine's every look is a thread woken. A Drive lasts at
		// most driveWait, and nothing tells the goroutine when it ends:
		// looking again later than that would leave the link unread for
		// as long, if the waiter stopped waiting (with a long
		// Config.PollGrace, for a minute).
		return min(driveWait+d.driveGrace(), d.pollGrace)
	}
	now := d.clock.Now()
	left := time.Duration(0)
	if last := r.lastPoll.Load(); last != 0 {
		left = d.pollGrace - now.Sub(monotime.Time(last))
	}
	if last := r.lastDrive.Load(); last != 0 {
		left = max(left, d.driveGrace()-now.Sub(monotime.Time(last)))
	}
	return max(left, 0)
}

// driveGrace is how long the receive goroutine stays aside after a
// waiter's Drive: long enough for a program that answers what it waited
// for to post and wait again, which on a loaded two-CPU machine takes tens
// of microseconds; short, because a program that sleeps may do anything
// else next, and the packets that come meanwhile (a peer's READ, an ACK)
// wait until the receive goroutine takes the link back.
func (d *Device) driveGrace() time.Duration { return min(200*time.Microsecond, d.pollGrace) }

// markPolled records that a program is polling now.
func (d *Device) markPolled() { d.rx.lastPoll.Store(int64(d.clock.Now())) }

// Poll reads the clock to note that a program polls (markPolled) only
// every markEvery calls, and after a batch of markBatch packets or more:
// a clock read costs as much as the rest of an empty poll in Go (65 ns on
// the development VM), and a program that busy polls calls Poll many
// times a microsecond, far more often than once in a PollGrace.
const (
	markEvery = 8
	markBatch = 8
)

// DefaultPollGrace is Config.PollGrace when it is zero. A program that
// busy polls calls Poll far more often; one that stopped without Flush
// gets its packets handled by the receive goroutine again after this long.
const DefaultPollGrace = time.Millisecond

// standAside waits while a program is busy polling, so that the receive
// goroutine does not take packets (and the CPU) from it. It returns false
// when the device is closing.
func (d *Device) standAside() bool {
	r := &d.rx
	for {
		left := d.graceLeft()
		if left == 0 {
			return true
		}
		r.aside.Reset(left) // since Go 1.23 no stale tick survives a Reset or Stop
		select {
		case <-r.aside.C:
		case <-r.resume:
			r.aside.Stop()
		case <-d.done:
			r.aside.Stop()
			return false
		}
	}
}

// receiveLoop receives batches from the link and processes them on this
// goroutine: a packet is handled where it arrives, without waking another
// goroutine. On a link.Poller it waits for the link to be readable and
// then takes the receive lock to read, so that a program busy polling
// (Device.Poll) and this goroutine take turns; while a program polls, it
// stands aside.
func (d *Device) receiveLoop() {
	defer d.wg.Done()
	r := &d.rx
	full := false // the last batch filled every buffer: more are likely waiting
	for {
		var n int
		var err error
		polled := false // the batch came while busy polling, not a wake-up
		if r.poller != nil {
			// Wait for the link only when it may be empty: the wait costs
			// a system call of its own. Read under the lock, so that this
			// batch cannot pass one a polling program read before it.
			if !full && d.busyPoll > 0 {
				n, err = d.pollAwhile()
				polled = n > 0 || err != nil
			}
			if !polled {
				if !full {
					d.yieldBeforeWait()
					if r.poller.WaitReceive() != nil {
						return
					}
				}
				if !d.standAside() {
					return
				}
				r.mu.Lock()
				n, err = r.poller.TryReceive(r.bufs, r.sizes)
			}
			full = n == len(r.bufs)
		} else {
			n, err = d.link.Receive(r.bufs, r.sizes)
			r.mu.Lock()
		}
		switch {
		case n > 0 && polled:
			r.busyPolledBatches.Add(1)
		case n > 0:
			r.ownBatches.Add(1)
		}
		r.wakes.Begin()
		d.process(n)
		woke := r.wakes.End()
		if !woke {
			d.flushAcks()
			d.tx.flush()
		}
		r.mu.Unlock()
		if woke {
			// Let a goroutine the batch completed a wait for run on
			// this thread now, rather than hang off this P while this
			// goroutine goes back to wait for the link (in poll(2),
			// holding the P) until another thread takes it. If it
			// answers at once, the ACKs its QP owes leave behind the
			// answer, in the same sendmmsg, as they do behind a busy
			// polling program's (Poll).
			runtime.Gosched()
			r.mu.Lock()
			d.flushAcks()
			d.tx.flush()
			r.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// yieldBeforeWait lets the goroutines that are ready run before this one
// sleeps in the link, where Go runs goroutines on one P (GOMAXPROCS 1, a
// one-CPU machine). A wait in poll(2) keeps the only P while it blocks:
// what the last batch made ready (the bursts of a READ's responses that
// the worker sends after the first, a program its completions woke) would
// wait until the runtime's monitor takes the P back, 20 µs to 10 ms
// later, at the price of a thread woken to look for work, on every wait.
// One Gosched may come back before the worker has run (the scheduler
// looks at its global queue first now and then), so it yields again, a
// few times at most, while a QP waits for the worker's turn.
func (d *Device) yieldBeforeWait() {
	if runtime.GOMAXPROCS(0) != 1 {
		return
	}
	for range 4 {
		runtime.Gosched()
		if d.workReady() == 0 {
			return
		}
	}
}

// workReady returns how many QPs wait in the workers' lists for a turn
// they asked for (worker.Schedule).
func (d *Device) workReady() int {
	n := 0
	for _, w := range d.workers {
		w.mu.Lock()
		n += len(w.order)
		w.mu.Unlock()
	}
	return n
}

// DefaultBusyPoll is Config.BusyPoll when it is zero and Go runs
// goroutines on two CPUs or more: long enough to span the gaps between a
// streaming peer's batches on a loaded machine (docs/performance.md has
// the durations tried).
const DefaultBusyPoll = 200 * time.Microsecond

// busyPollFor returns how long the receive goroutine of a device opened
// with cfg polls its link before it sleeps (Config.BusyPoll), where Go
// runs goroutines on procs CPUs: 0 for never.
func busyPollFor(cfg Config, procs int) time.Duration {
	switch {
	case cfg.BusyPoll < 0 || cfg.Loop != nil || cfg.Link.Flags()&link.FlagCheapPoll == 0:
		return 0
	case cfg.BusyPoll > 0:
		return cfg.BusyPoll
	case procs < 2:
		return 0
	}
	return DefaultBusyPoll
}

// busyPollCheck is how many empty polls pollAwhile makes between two
// looks at the clock, at each of which it lets other goroutines run: a
// clock read costs as much as an empty poll of a ring.
const busyPollCheck = 16

// pollAwhile polls the link for up to Config.BusyPoll, while no program
// polls or waits on the device, and returns the first batch it finds with
// d.rx.mu held; or 0 and no error, without the lock, if none came.
func (d *Device) pollAwhile() (int, error) {
	r := &d.rx
	var until monotime.Time
	for i := 0; ; i++ {
		if d.programPolls() {
			if d.graceLeft() > 0 {
				return 0, nil // the program's turn: stand aside
			}
			d.forgetPolls() // marks of a program long gone
		}
		if i%busyPollCheck == 0 {
			now := d.clock.Now()
			select {
			case <-d.done:
				return 0, nil
			default:
			}
			switch {
			case i == 0:
				until = now.Add(d.busyPoll)
			case !now.Before(until):
				return 0, nil
			default:
				runtime.Gosched()
			}
		}
		r.mu.Lock()
		n, err := r.poller.TryReceive(r.bufs, r.sizes)
		if n > 0 || err != nil {
			return n, err
		}
		r.mu.Unlock()
	}
}

// notified is the link's call (link.Notifier) on a device that runs on a
// Loop: a packet is waiting. The device takes it in a turn of its own on
// the loop, at the same time, after what the loop runs at that time
// already, and not inside the network's event that delivered it.
func (d *Device) notified() {
	r := &d.rx
	if r.turnDue {
		return
	}
	r.turnDue = true
	d.cfg.Loop.At(d.cfg.Loop.Now(), d.receiveTurn)
}

// receiveTurn processes, on a Loop, the packets waiting on the link, as
// the receive goroutine would, in batches: the ACKs a batch calls for
// leave at its end.
func (d *Device) receiveTurn() {
	r := &d.rx
	r.turnDue = false
	select {
	case <-d.done:
		return
	default:
	}
	r.mu.Lock()
	n := d.ownBatch()
	d.flushAcks()
	r.mu.Unlock()
	if n == len(r.bufs) {
		d.notified() // more may be waiting
	}
}

// ownBatch reads a batch from the link (a link.Poller) without waiting,
// processes it on the device's own account (rx_batches_own) and wakes the
// waiters of the CQs it completed at its end; it returns the batch's
// size. d.rx.mu must be held.
func (d *Device) ownBatch() int {
	r := &d.rx
	n, _ := r.poller.TryReceive(r.bufs, r.sizes)
	if n > 0 {
		r.ownBatches.Add(1)
	}
	r.wakes.Begin()
	d.process(n)
	r.wakes.End()
	return n
}

// catchUp processes the packets waiting on the link on the caller's
// goroutine (the timer worker's), up to catchUpBatches batches, and sends
// the ACKs they call for. The worker calls it when its timers fire late,
// before it runs them: see stallLate.
func (d *Device) catchUp() {
	r := &d.rx
	if r.poller == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for range catchUpBatches {
		n := d.ownBatch()
		if n == 0 {
			break
		}
		r.caughtUp.Add(1)
		if n < len(r.bufs) {
			break
		}
	}
	d.flushAcks()
	d.tx.flush()
}

// receiveFirst processes the packets waiting on the link, on the
// caller's goroutine, while the batches it reads come back at least half
// full: a UC or UD QP's sends wait behind the device's receive work, as
// kernel rxe's do (its receive runs in softirq, before the tasks that
// send). UC and UD have no flow control, and building a packet costs less
// than taking one in: without it, two gorxe streaming UC at each other on
// shared CPUs each sent faster than they received, and their sockets
// overflowed with what UC and UD never send again. takeInFirst says when.
// The caller holds no QP's lock, nor the receive lock: the device runs no
// program code in its receive path.
func (d *Device) receiveFirst() {
	r := &d.rx
	first, stale := d.takeInFirst(d.clock.Now())
	if !first {
		return
	}
	r.mu.Lock() // behind whoever reads now, the receive goroutine or a polling program
	read := false
	for range receiveFirstBatches {
		if !stale && !r.backlog.Load() {
			break // whoever held the lock caught up
		}
		stale = false
		if d.ownBatch() > 0 {
			r.helped.Add(1)
			read = true
		}
	}
	if read {
		d.flushAcks()
		d.tx.flush()
	}
	r.mu.Unlock()
}

// takeInFirst reports whether a UC or UD sender reads the link before it
// sends (receiveFirst), at time now, and whether because the link went
// unread (stale) rather than because the last batch was half full or
// more. It does not when the last batch was smaller, as the batches of a
// ping-pong or a light stream are: taking the lock and reading an empty
// link before every send cost a duplex UD send_bw of 64-byte messages a
// fifth of its rate, with nothing to gain. But the last batch says nothing
// when nobody has read the link for receiveFirstStale: the goroutine that
// should have, woken, may be waiting for a CPU the senders keep busy (two
// programs asleep on completion channels, `send_bw -c UC -b -e`, lost
// thousands of datagrams so, in almost every run), or the link is idle;
// the sender then reads one batch to see, at most once a
// receiveFirstStale. Not where a program polls the device: its polls read
// the link, and a sender's reads between them made the batches smaller
// and a duplex UD send_bw of 64-byte messages a third slower.
func (d *Device) takeInFirst(now monotime.Time) (first, stale bool) {
	r := &d.rx
	switch {
	case r.poller == nil || d.cfg.Loop != nil:
		return false, false
	case r.backlog.Load():
		return true, false
	case r.lastPoll.Load() != 0 || now.Sub(monotime.Time(r.lastRead.Load())) < receiveFirstStale:
		return false, false
	}
	return true, true
}

// receiveFirstBatches bounds what one sender reads in receiveFirst
// before it sends again.
const receiveFirstBatches = 8

// receiveFirstStale is how long the link may go unread before a UC or UD
// sender reads it itself (takeInFirst): short against the time a socket's
// buffer takes to fill (64 MiB at 10 Gb/s: 50 ms), long against a busy
// receive goroutine's turn, so that a sender on an idle link reads it at
// most ten thousand times a second. 500 µs left drops in every run of
// the duplex UC test above.
const receiveFirstStale = 100 * time.Microsecond

// unreliable reports whether r, a QP its worker runs, is a UC or UD QP
// of a program (receiveFirst): the connection manager's QP 1 sends its
// few MADs as they come.
func unreliable(r rc.Runner) bool {
	switch e := r.(type) {
	case *rc.UD:
		return e.Num() != GSIQPN
	case *rc.QP:
		return e.Service() == bth.ServiceUC
	}
	return false
}

// catchUpBatches bounds a catch-up: the answers a late timer waits for
// came during the stall, and the link delivers in order, so they are in
// the first batches; the receive goroutine takes the rest.
const catchUpBatches = 4

// Poll processes, on the caller's goroutine, the packets waiting on the
// link, and reports whether there were any. A program that waits for a
// completion or a peer's write calls it in its wait loop, as a NIC
// driver busy polls: the packet that ends the wait is then handled by the
// goroutine that waits for it, with no wake-up between them.
//
// The ACKs that the batch's requests call for do not go at once: they go
// at the next Poll, behind the next PostSend on the same QP, or at Flush.
// So a program that sees a peer's message and answers it at once sends its
// answer first, and the ACK after it. A program that stops polling calls
// Flush; if it does not, the device sends them itself a little after the
// last Poll.
//
// Poll does nothing when the link cannot receive without blocking
// (CanPoll). If the receive goroutine is processing a batch, Poll waits
// for it to finish; from then on the receive goroutine leaves the link to
// the polling program until it stops polling.
func (d *Device) Poll() bool {
	r := &d.rx
	if r.poller == nil {
		return false
	}
	if r.polls.Add(1)%markEvery == 0 || r.lastPoll.Load() == 0 {
		d.markPolled()
	}
	r.mu.Lock() // wait out the receive goroutine's batch; it stands aside after
	defer r.mu.Unlock()
	d.flushAcks()
	d.tx.flush() // what the program posted since its last poll, and those ACKs
	n, _ := r.poller.TryReceive(r.bufs, r.sizes)
	if n == 0 {
		return false
	}
	r.polledBatches.Add(1)
	d.process(n)
	if len(r.owing) > 0 && r.armed.CompareAndSwap(false, true) {
		r.backstop.Reset(d.pollGrace)
	}
	if n >= markBatch {
		d.markPolled() // a batch can take a while to answer
	}
	return true
}

// driveWait is how long Drive waits for the link before it gives up and
// its caller sleeps on the CQ instead, leaving the link to the receive
// goroutine. What else a waiter must notice ends the wait sooner (Wake),
// so this is only how long a quiet link keeps a waiter there: longer than
// a round trip on a loaded machine, and longer than a kernel's tick (10 ms
// at 100 Hz). A wait that gives up before the next tick costs more than
// a packet's wake-up: the kernel arms its timer for the wait and cancels
// it when the packet comes, and on a virtual machine each reprograms the
// CPU's timer. A raw UDP ping-pong whose sides wait in poll(2) took 15-19
// µs a round trip with no timeout, or one of 5 ms or more, and 29-52 µs
// with one of 1 or 2 ms (docs/performance.md, 2026-12-07).
var driveWait = 20 * time.Millisecond // a variable for tests

// Drive implements cq.Driver: the goroutine waiting on one of the
// device's CQs waits for the link itself, in poll(2), and processes the
// batch that wakes it as Poll does, so that the completion it waits for
// needs no other goroutine woken, nor a thread: one thread wakes per
// packet, as for a program that sleeps in the Go runtime's poller for its
// socket. The receive goroutine stands aside meanwhile, as it does for a
// busy-polling program; waiters of other CQs are woken at the batch's
// end. The ACKs the batch calls for stay owed, to leave behind the answer
// the waiter may post at once (PostSend), or at the next Drive or Poll,
// or the backstop's, driveGrace later; after that the receive goroutine
// takes the link back.
//
// It returns false, having done nothing, when the link's waits cannot
// give up (the mem link), another goroutine drives, or nothing arrived
// for driveWait; true when Wake ended the wait.
func (d *Device) Drive() bool {
	r := &d.rx
	if r.timed == nil || !r.driving.CompareAndSwap(false, true) {
		return false
	}
	quiet := false
	defer func() {
		r.lastDrive.Store(int64(d.clock.Now())) // the receive goroutine stays aside for driveGrace more
		r.driving.Store(false)
		if quiet {
			// The waiter sleeps on its CQ now: the receive goroutine
			// looks at the link again without waiting for its timer.
			r.resumeAside()
		}
	}()
	r.mu.Lock()
	d.flushAcks() // nobody will post them before this wait ends
	d.tx.flush()
	r.mu.Unlock()
	d.yieldBeforeWait()
	ready, err := r.timed.WaitReceiveFor(driveWait)
	if err != nil || !ready {
		quiet = true
		return false
	}
	r.mu.Lock()
	n, _ := r.poller.TryReceive(r.bufs, r.sizes)
	if n > 0 {
		r.drivenBatches.Add(1)
	}
	r.drivenBatch.Store(true)
	r.wakes.Begin()
	d.process(n)
	if len(r.owing) > 0 && r.armed.CompareAndSwap(false, true) {
		r.backstop.Reset(d.driveGrace())
	}
	r.wakes.End()
	r.drivenBatch.Store(false)
	r.mu.Unlock()
	return true
}

// resumeAside wakes the receive goroutine if it stands aside, to look at
// the link again at once.
func (r *receiver) resumeAside() {
	select {
	case r.resume <- struct{}{}:
	default:
	}
}

// Wake implements cq.Driver: it ends the Drive under way, or the next
// one. The wake-ups of the Drive's own batch wake nobody: its waiter
// looks at its CQ when the batch ends, and a kick left for the next
// Drive would end that one for nothing.
func (d *Device) Wake() {
	r := &d.rx
	if r.timed != nil && !r.drivenBatch.Load() {
		r.timed.WakeReceive()
	}
}

// Flush sends the ACKs Poll left owed. It tells the device that the
// program has stopped polling, so the receive goroutine takes the link
// back at once.
func (d *Device) Flush() {
	r := &d.rx
	if r.lastPoll.Swap(0)|r.lastDrive.Swap(0) != 0 {
		r.resumeAside()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	d.flushAcks()
	d.tx.flush()
}

// CanPoll reports whether Poll can do anything: whether the device's link
// can receive without blocking.
func (d *Device) CanPoll() bool { return d.rx.poller != nil }

// CanDrive reports whether Drive can wait for the link: whether the
// link's waits can give up (link.TimedPoller).
func (d *Device) CanDrive() bool { return d.rx.timed != nil }

// process hands the first n packets of the receive buffers to their QPs,
// dropping what is not a valid RoCE v2 packet for one of this device's
// QPs, and notes each QP that it left owing an ACK, for flushAcks. d.rx.mu
// must be held.
func (d *Device) process(n int) {
	r := &d.rx
	p := &r.p
	if backlog := n >= len(r.bufs)/2; r.backlog.Load() != backlog {
		r.backlog.Store(backlog)
	}
	r.lastRead.Store(int64(d.clock.Now()))
	for i := range n {
		pkt := r.bufs[i][link.Headroom : link.Headroom+r.sizes[i]]
		if err := wire.ParseIP(p, pkt); err != nil || p.DstPort() != d.cfg.Port {
			d.countUnparsed(err)
			continue
		}
		d.rcvd.Add(1)
		if !(r.noV4ICRC && p.IPVersion() == 4) && p.CheckICRCInPlace() != nil { // the buffer is the device's
			d.icrcErrors.Add(1)
			continue
		}
		if p.IsCNP() {
			d.handleCNP(p, pkt)
			continue
		}
		if p.BTH.DestQP() == bth.MulticastQPN {
			d.receiveMcast(p, pkt)
			continue
		}
		q := d.lookup(p.BTH.DestQP())
		if q == nil {
			d.noQP.Add(1)
			continue
		}
		if !d.admit(q, p) {
			continue
		}
		if d.cfg.PacketTrace != nil {
			d.cfg.PacketTrace(Received, pkt)
		}
		if q.e.HandlePacket(p) && !slices.Contains(r.owing, q) {
			r.owing = append(r.owing, q)
		}
	}
}

// flushAcks has each QP that the batches since it last ran left owing an
// ACK send it, once: one ACK covers all the requests a QP got in them (or
// none, if a PostSend sent it already). d.rx.mu must be held.
func (d *Device) flushAcks() {
	r := &d.rx
	for _, q := range r.owing {
		q.e.FlushAck()
	}
	clear(r.owing)
	r.owing = r.owing[:0]
}

// forget takes q, which is being destroyed, from the QPs owing an ACK,
// sending its ACK first: it is owed for work that was done.
func (r *receiver) forget(q *QP) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i := slices.Index(r.owing, q); i >= 0 {
		r.owing = slices.Delete(r.owing, i, i+1)
		q.e.FlushAck()
	}
}

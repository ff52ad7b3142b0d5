package rnic

import "time"

// WorkerTurns returns how many turns the device's workers have taken, so
// that a benchmark can report how often they wake.
func (d *Device) WorkerTurns() uint64 {
	var n uint64
	for _, w := range d.workers {
		n += w.turns.Load()
	}
	return n
}

// Drives returns how many batches goroutines waiting on the device's CQs
// processed themselves (Drive).
func (d *Device) Drives() uint64 { return d.rx.drivenBatches.Load() }

// CatchUp reads and processes what waits on the link, as the timer worker
// does before it runs timers that fired late.
func (d *Device) CatchUp() { d.catchUp() }

// BusyPollFor is busyPollFor: how long the receive goroutine of a device
// opened with cfg busy polls, where Go runs on procs CPUs.
var BusyPollFor = busyPollFor

// WorkReady is workReady: how many QPs wait in the device's workers'
// lists for a turn they asked for.
func (d *Device) WorkReady() int { return d.workReady() }

// SetDriveWait sets how long a Drive waits for the link, until the test
// ends.
func SetDriveWait(t interface{ Cleanup(func()) }, d time.Duration) {
	old := driveWait
	driveWait = d
	t.Cleanup(func() { driveWait = old })
}

// SetPopulateMax sets the largest region RegMR makes present, until the
// test ends.
func SetPopulateMax(t interface{ Cleanup(func()) }, n uint64) {
	old := populateMax
	populateMax = n
	t.Cleanup(func() { populateMax = old })
}

// TakesInFirst reports whether the QP's sends wait for the device to take
// in what waits on the link (receiveFirst).
func (q *QP) TakesInFirst() bool { return q.unreliable }

// TakeInFirstAfter is takeInFirst when the link was last read sinceRead
// ago and its last batch was half full or more (backlog), or not.
func (d *Device) TakeInFirstAfter(sinceRead time.Duration, backlog bool) (first, stale bool) {
	d.rx.mu.Lock() // the receive goroutine processes no batch meanwhile
	defer d.rx.mu.Unlock()
	now := d.clock.Now()
	d.rx.backlog.Store(backlog)
	d.rx.lastRead.Store(int64(now.Add(-sinceRead)))
	return d.takeInFirst(now)
}

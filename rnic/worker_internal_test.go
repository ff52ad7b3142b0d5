package rnic

import (
	"testing"
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
)

// TestWorkerTimers: a QP that arms a timer earlier than the worker's wake
// time kicks the worker, one later does not; while the worker scans its
// QPs' deadlines, timers armed just behind the scan do not kick it (each
// kick would bring another scan), yet the worker sleeps no later than the
// earliest of them.
func TestWorkerTimers(t *testing.T) {
	d := &Device{clock: monotime.NewClock()}
	w := newWorker(d)
	kicked := func() bool {
		select {
		case <-w.kick:
			return true
		default:
			return false
		}
	}
	if got := w.scan(); got != time.Hour {
		t.Fatalf("with no timer armed the worker sleeps %v, want an hour", got)
	}
	now := d.clock.Now()
	w.Timer(nil, now.Add(time.Second))
	if !kicked() {
		t.Error("the first timer armed did not kick the worker")
	}
	w.Timer(nil, now.Add(2*time.Second))
	if kicked() {
		t.Error("a timer later than the worker's wake time kicked it")
	}

	earliest := now.Add(20 * time.Millisecond)
	w.scanned = func() {
		for i := range 100 {
			w.Timer(nil, now.Add(time.Duration(150-i)*time.Millisecond))
		}
		w.Timer(nil, earliest)
	}
	sleep := w.scan()
	if kicked() {
		t.Error("timers armed during the scan kicked the worker")
	}
	if got := monotime.Time(w.wakeAt.Load()); got != earliest {
		t.Errorf("after the scan the worker wakes at %v, want the earliest timer armed during it, %v", got, earliest)
	}
	if sleep > 20*time.Millisecond {
		t.Errorf("the worker sleeps %v, past the earliest timer (20ms from the start)", sleep)
	}

	w.scanned = nil
	w.Timer(nil, now.Add(5*time.Millisecond))
	if !kicked() {
		t.Error("a timer earlier than the worker's wake time, after the scan, did not kick it")
	}
}

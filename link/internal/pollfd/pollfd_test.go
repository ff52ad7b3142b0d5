//go:build linux

package pollfd

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/link"
)

// pipe returns the read end of a new pipe as an FD, and its write end.
func pipe(t *testing.T) (*FD, int) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	f, err := New(p[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(); unix.Close(p[1]) })
	return f, p[1]
}

func waitFor(f *FD) <-chan error {
	done := make(chan error, 1)
	go func() { done <- f.Wait(unix.POLLIN) }()
	return done
}

func TestWaitAndRead(t *testing.T) {
	f, w := pipe(t)
	var b [8]byte
	if _, err := f.Read(b[:]); err != unix.EAGAIN {
		t.Fatalf("Read of an empty pipe: %v, want EAGAIN", err)
	}
	done := waitFor(f)
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v with nothing to read", err)
	case <-time.After(50 * time.Millisecond):
	}
	// A Read while Wait blocks must not queue behind it.
	if _, err := f.Read(b[:]); err != unix.EAGAIN {
		t.Fatalf("Read during a Wait: %v, want EAGAIN", err)
	}
	unix.Write(w, []byte("x"))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait still blocked after a write")
	}
	if err := f.Wait(unix.POLLIN); err != nil { // the byte is still there
		t.Fatalf("Wait with a byte waiting: %v", err)
	}
	if n, err := f.Read(b[:]); n != 1 || err != nil || b[0] != 'x' {
		t.Fatalf("Read = %d, %v, %q", n, err, b[:n])
	}
}

func TestCloseWakesWait(t *testing.T) {
	f, _ := pipe(t)
	done := waitFor(f)
	time.Sleep(20 * time.Millisecond)
	if err := f.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, link.ErrClosed) {
			t.Fatalf("Wait after Close: %v, want link.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake Wait")
	}
	var b [1]byte
	if _, err := f.Read(b[:]); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	if _, err := f.Write(b[:]); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	if err := f.Do(func(int) { t.Error("Do ran after Close") }); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Do after Close: %v", err)
	}
	if err := f.Wait(unix.POLLIN); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	if err := f.Close(); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

// TestKick: a Kick ends a Wait with nothing to read as if the descriptor
// were ready, once: the next Wait blocks again.
func TestKick(t *testing.T) {
	f, _ := pipe(t)
	done := waitFor(f)
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v with nothing to read", err)
	case <-time.After(50 * time.Millisecond):
	}
	f.Kick()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait after Kick: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait still blocked after a Kick")
	}
	if ready, err := f.WaitFor(unix.POLLIN, 0); ready || err != nil {
		t.Fatalf("WaitFor after the kick was seen = %v, %v; want false, nil", ready, err)
	}
	f.Kick() // with no Wait under way: the next one to read returns at once
	if ready, err := f.WaitFor(unix.POLLOUT, 0); ready || err != nil {
		t.Fatalf("WaitFor(POLLOUT) on a pipe's read end after a Kick = %v, %v; want false, nil", ready, err)
	}
	if ready, err := f.WaitFor(unix.POLLIN, 1000); !ready || err != nil {
		t.Fatalf("WaitFor after a Kick = %v, %v; want true, nil", ready, err)
	}
	f.Close()
	f.Kick() // after Close: nothing, and no panic
}

// TestWaitReadFor checks a wait on several descriptors: it ends when any
// is readable or f is kicked, times out when none is, and ends with
// link.ErrClosed when any of them closes.
func TestWaitReadFor(t *testing.T) {
	f, fw := pipe(t)
	g, gw := pipe(t)
	h, _ := pipe(t)
	others := []*FD{g, h}
	wait := func() <-chan error {
		done := make(chan error, 1)
		go func() {
			ready, err := f.WaitReadFor(others, -1)
			if err == nil && !ready {
				err = errors.New("not ready")
			}
			done <- err
		}()
		return done
	}
	ended := func(what string, done <-chan error, want error) {
		t.Helper()
		select {
		case err := <-done:
			if !errors.Is(err, want) {
				t.Fatalf("%s: the wait returned %v, want %v", what, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the wait still blocked", what)
		}
	}
	if ready, err := f.WaitReadFor(others, 20); ready || err != nil {
		t.Fatalf("nothing to read: WaitReadFor = %v, %v; want a timeout", ready, err)
	}
	// A link's receive goroutine waits every time it runs dry.
	if n := testing.AllocsPerRun(100, func() { f.WaitReadFor(others, 0) }); n != 0 {
		t.Errorf("WaitReadFor allocates %v times a call", n)
	}
	var b [8]byte
	for _, c := range []struct {
		name   string
		w      int
		reader *FD
	}{{"a byte for the first", fw, f}, {"a byte for another", gw, g}} {
		done := wait()
		time.Sleep(20 * time.Millisecond)
		unix.Write(c.w, []byte("x"))
		ended(c.name, done, nil)
		if n, err := c.reader.Read(b[:]); n != 1 || err != nil {
			t.Fatalf("%s: Read = %d, %v", c.name, n, err)
		}
	}
	done := wait()
	time.Sleep(20 * time.Millisecond)
	f.Kick()
	ended("a kick", done, nil)
	done = wait()
	time.Sleep(20 * time.Millisecond)
	h.Close() // waits for the wait to let go of it
	ended("another closing", done, link.ErrClosed)
	if _, err := f.WaitReadFor(others, -1); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("a wait with a closed descriptor among others: %v, want link.ErrClosed", err)
	}
}

// TestWake checks that a Wake ends the WaitWakeable under way, or the
// next one, and only it: a WaitReadFor beside it goes on waiting, so that
// it cannot take the Wake (the device's receive goroutine waits so beside
// a waiter's Drive).
func TestWake(t *testing.T) {
	f, fw := pipe(t)
	plain := make(chan error, 1)
	go func() {
		_, err := f.WaitReadFor(nil, -1)
		plain <- err
	}()
	wakeable := make(chan bool, 1)
	go func() {
		ready, err := f.WaitWakeable(nil, -1)
		if err != nil {
			t.Error(err)
		}
		wakeable <- ready
	}()
	time.Sleep(20 * time.Millisecond) // both asleep in poll(2), mostly
	f.Wake()
	select {
	case ready := <-wakeable:
		if !ready {
			t.Fatal("WaitWakeable after a Wake reported nothing ready")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitWakeable still blocked after a Wake")
	}
	select {
	case err := <-plain:
		t.Fatalf("WaitReadFor returned (%v) on a Wake", err)
	case <-time.After(50 * time.Millisecond):
	}
	if ready, err := f.WaitWakeable(nil, 0); ready || err != nil {
		t.Fatalf("WaitWakeable after the wake was seen = %v, %v; want false, nil", ready, err)
	}
	f.Wake() // with no WaitWakeable under way: the next one returns at once
	if ready, err := f.WaitReadFor(nil, 0); ready || err != nil {
		t.Fatalf("WaitReadFor after a Wake = %v, %v; want false, nil", ready, err)
	}
	if ready, err := f.WaitWakeable(nil, 1000); !ready || err != nil {
		t.Fatalf("WaitWakeable after a Wake = %v, %v; want true, nil", ready, err)
	}
	unix.Write(fw, []byte{1})
	if err := <-plain; err != nil {
		t.Fatalf("WaitReadFor when readable: %v", err)
	}
	f.Close()
	f.Wake() // after Close: nothing, and no panic
}

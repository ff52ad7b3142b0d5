//go:build linux

package tap

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link"
)

// rxBufs is one batch of receive buffers, as a device hands a link.
type rxBufs struct {
	bufs  [][]byte
	sizes []int
}

func newRxBufs() *rxBufs {
	r := &rxBufs{bufs: make([][]byte, link.BatchSize), sizes: make([]int, link.BatchSize)}
	for i := range r.bufs {
		r.bufs[i] = make([]byte, link.BufferSize)
	}
	return r
}

// quietPair is pair over IPv4 on a bridge without IPv6 of its own, whose
// autoconfiguration traffic would reach b at moments a test of waiting
// cannot foresee.
func quietPair(t *testing.T) (a, b *Link) {
	br := newBridge(t)
	writeFile(t, "/proc/sys/net/ipv6/conf/"+br+"/disable_ipv6", "1")
	a = open(t, Config{Bridge: br, Addrs: []netip.Prefix{prefix("10.9.0.5/24")}})
	b = open(t, Config{Bridge: br, Addrs: []netip.Prefix{prefix("10.9.0.6/24")}})
	return a, b
}

// pollN calls TryReceive on l until it has returned n packets, and returns
// them.
func pollN(t *testing.T, l *Link, r *rxBufs, n int) [][]byte {
	t.Helper()
	var got [][]byte
	for deadline := time.Now().Add(5 * time.Second); len(got) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("TryReceive returned %d of %d packets in 5s", len(got), n)
		}
		k, err := l.TryReceive(r.bufs, r.sizes)
		if err != nil {
			t.Fatalf("TryReceive: %v", err)
		}
		for i := range k {
			got = append(got, bytes.Clone(r.bufs[i][link.Headroom:link.Headroom+r.sizes[i]]))
		}
	}
	return got
}

// TestTryReceive checks the non-blocking receive: nothing waiting answers
// 0 at once; ARP on the way is answered, so that the sender's queued
// packets follow; and the RoCE packets come back whole and in order, over
// several calls.
func TestTryReceive(t *testing.T) {
	needRoot(t)
	a, b := pair(t, "10.9.0.5/24", "10.9.0.6/24")
	r := newRxBufs()
	if n, err := b.TryReceive(r.bufs, r.sizes); n != 0 || err != nil {
		t.Fatalf("TryReceive with nothing waiting = %d, %v; want 0, nil", n, err)
	}
	const total = 100 // more than one batch
	var sent [][]byte
	for i := range total {
		sent = append(sent, rocePacket(t, a.Addrs()[0], b.Addrs()[0], uint32(i), 200))
	}
	for i := 0; i < total; i += link.BatchSize {
		if err := a.Send(sent[i:min(i+link.BatchSize, total)]); err != nil {
			t.Fatal(err)
		}
	}
	got := pollN(t, b, r, total)
	for i := range sent {
		if !bytes.Equal(got[i], sent[i][link.Headroom:]) {
			t.Fatalf("packet %d:\n got %x\nwant %x", i, got[i], sent[i][link.Headroom:])
		}
	}
	if s := b.Stats(); s.ARP == 0 {
		t.Fatalf("b answered no ARP request while polled: %+v", s)
	}
	if n, err := b.TryReceive(r.bufs, r.sizes); n != 0 || err != nil {
		t.Fatalf("TryReceive after draining = %d, %v; want 0, nil", n, err)
	}
	b.Close()
	if _, err := b.TryReceive(r.bufs, r.sizes); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("TryReceive after Close: %v, want link.ErrClosed", err)
	}
}

// TestWaitReceive checks that WaitReceive returns at once for a frame
// already waiting, and leaves it there; blocks while none is, including
// after another goroutine drained the TAP; wakes for one that arrives;
// and returns ErrClosed when the link closes under it.
func TestWaitReceive(t *testing.T) {
	needRoot(t)
	a, b := quietPair(t)
	r := newRxBufs()
	aAddr, bAddr := a.Addrs()[0], b.Addrs()[0]
	psn := uint32(0)
	send := func() {
		t.Helper()
		psn++
		if err := a.Send([][]byte{rocePacket(t, aAddr, bAddr, psn, 64)}); err != nil {
			t.Fatal(err)
		}
	}
	wait := func() <-chan error {
		done := make(chan error, 1)
		go func() { done <- b.WaitReceive() }()
		return done
	}
	expect := func(done <-chan error, want error, what string) {
		t.Helper()
		select {
		case err := <-done:
			if !errors.Is(err, want) {
				t.Fatalf("%s: WaitReceive = %v, want %v", what, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: WaitReceive still blocked after 5s", what)
		}
	}
	blocked := func(done <-chan error, what string) {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("WaitReceive returned %v %s", err, what)
		case <-time.After(50 * time.Millisecond):
		}
	}

	// The first packet waits for ARP, which the polled b answers.
	if _, err := b.TryReceive(r.bufs, r.sizes); err != nil { // b is polled now: the housekeeper leaves the TAP alone
		t.Fatal(err)
	}
	send()
	pollN(t, b, r, 1)

	// A packet already waiting, twice: the wait leaves it there.
	send()
	time.Sleep(10 * time.Millisecond)
	expect(wait(), nil, "frame waiting")
	expect(wait(), nil, "frame still waiting")
	pollN(t, b, r, 1)

	// Nothing waiting: it blocks past the housekeeper's tick, then wakes
	// for the next arrival.
	done := wait()
	time.Sleep(idleTick + 20*time.Millisecond)
	blocked(done, "on an empty TAP")

	// A poll while the wait is under way answers at once: the wait must
	// not hold the TAP's file against it (a RawConn.Read would: it holds
	// the file's read lock while it waits).
	polled := make(chan int, 1)
	go func() { n, _ := b.TryReceive(r.bufs, r.sizes); polled <- n }()
	select {
	case n := <-polled:
		if n != 0 {
			t.Fatalf("TryReceive on an empty TAP = %d packets", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("TryReceive blocked behind WaitReceive")
	}
	blocked(done, "after a poll")
	send()
	expect(done, nil, "frame arriving")
	pollN(t, b, r, 1)

	// Close wakes a waiter.
	done = wait()
	blocked(done, "on a drained TAP")
	b.Close()
	expect(done, link.ErrClosed, "Close")
}

// TestWaitReceiveStash checks the hand-over from the housekeeper: packets
// it read while nobody received wait in the stash, where the TAP's
// readiness does not announce them, so WaitReceive must report them and
// TryReceive return them first, in order.
func TestWaitReceiveStash(t *testing.T) {
	needRoot(t)
	a, b := quietPair(t)
	aAddr, bAddr := a.Addrs()[0], b.Addrs()[0]
	var sent [][]byte
	for i := range 3 {
		sent = append(sent, rocePacket(t, aAddr, bAddr, uint32(i), 100))
	}
	if err := a.Send(sent); err != nil { // the housekeeper answers the ARP
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the housekeeper stashed 3 packets", func() bool {
		b.rmu.Lock()
		defer b.rmu.Unlock()
		return len(b.stash) == 3
	})
	// Take the other frames waiting (announcements, ARP), so that only
	// the stash can end the wait.
	b.rmu.Lock()
	b.drain(make([]byte, link.BufferSize))
	b.rmu.Unlock()
	done := make(chan error, 1)
	go func() { done <- b.WaitReceive() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WaitReceive = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitReceive blocked with packets in the stash")
	}
	late := rocePacket(t, aAddr, bAddr, 3, 100)
	if err := a.Send([][]byte{late}); err != nil {
		t.Fatal(err)
	}
	got := pollN(t, b, newRxBufs(), 4)
	for i, want := range append(sent, late) {
		if !bytes.Equal(got[i], want[link.Headroom:]) {
			t.Fatalf("packet %d:\n got %x\nwant %x", i, got[i], want[link.Headroom:])
		}
	}
}

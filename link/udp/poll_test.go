package udp_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/netns"
	"github.com/gorxe/gorxe/link/udp"
)

// TestTryReceive checks the non-blocking receive: nothing waiting answers
// 0 at once, and what is waiting comes back as whole packets, the same as
// Receive returns them, including over several calls.
func TestTryReceive(t *testing.T) {
	e := newEnv(t)
	a, b := loopPair(t, e, netip.MustParseAddr("127.0.0.1"))
	r := newReceiver()
	if n, err := b.TryReceive(r.bufs, r.sizes); n != 0 || err != nil {
		t.Fatalf("TryReceive on an empty socket = %d, %v; want 0, nil", n, err)
	}
	const total = 100 // more than one batch
	sent := packets(t, a, b, 7, total, 512, 0)
	for i := 0; i < total; i += link.BatchSize {
		if err := a.Send(sent[i:min(i+link.BatchSize, total)]); err != nil {
			t.Fatal(err)
		}
	}
	// Loopback delivers within the send, but a loaded kernel may leave
	// some of it to ksoftirqd: give it time, so that every packet is
	// waiting before the first TryReceive.
	time.Sleep(50 * time.Millisecond)
	got := 0
	var calls []int // what each call that found packets returned
	for deadline := time.Now().Add(timeout); got < total && time.Now().Before(deadline); {
		n, err := b.TryReceive(r.bufs, r.sizes)
		if err != nil {
			t.Fatalf("TryReceive: %v", err)
		}
		for i := range n {
			sameRoCE(t, r.bufs[i][link.Headroom:link.Headroom+r.sizes[i]], sent[got+i][link.Headroom:])
		}
		got += n
		if n > 0 {
			calls = append(calls, n)
		}
	}
	if got != total {
		t.Fatalf("TryReceive returned %d of %d packets", got, total)
	}
	// After an empty poll it asks for 8, then twice what the last call
	// filled: 8, 16, 32 and the 44 left, not 13 calls of 8.
	if len(calls) > 5 || calls[0] > 8 {
		t.Errorf("TryReceive returned the %d waiting packets %v at a time; want 8 first, then growing batches", total, calls)
	}
	if n, err := b.TryReceive(r.bufs, r.sizes); n != 0 || err != nil {
		t.Fatalf("TryReceive after draining = %d, %v; want 0, nil", n, err)
	}
	b.Close()
	if _, err := b.TryReceive(r.bufs, r.sizes); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("TryReceive after Close: %v, want link.ErrClosed", err)
	}
}

// TestWaitReceive checks that WaitReceive returns at once for a datagram
// already waiting, even one a drained socket got after a wait began
// elsewhere; blocks while none is; wakes for one that arrives; and
// returns ErrClosed when the link closes under it.
func TestWaitReceive(t *testing.T) {
	e := newEnv(t)
	a, b := loopPair(t, e, netip.MustParseAddr("127.0.0.1"))
	r := newReceiver()
	send := func(psn uint32) {
		t.Helper()
		if err := a.Send(packets(t, a, b, psn, 1, 64, 0)); err != nil {
			t.Fatal(err)
		}
	}
	wait := func() <-chan error {
		done := make(chan error, 1)
		go func() { done <- b.WaitReceive() }()
		return done
	}
	blocked := func(done <-chan error, what string) {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("WaitReceive returned %v %s", err, what)
		case <-time.After(50 * time.Millisecond):
		}
	}
	takeOne := func() {
		t.Helper()
		if n, _ := b.TryReceive(r.bufs, r.sizes); n != 1 {
			t.Fatalf("TryReceive got %d packets, want 1", n)
		}
	}
	expect := func(done <-chan error, want error, what string) {
		t.Helper()
		select {
		case err := <-done:
			if !errors.Is(err, want) {
				t.Fatalf("%s: WaitReceive = %v, want %v", what, err, want)
			}
		case <-time.After(timeout):
			t.Fatalf("%s: WaitReceive still blocked after %v", what, timeout)
		}
	}

	// A datagram that is already waiting, twice: the wait leaves it there.
	send(1)
	time.Sleep(10 * time.Millisecond)
	expect(wait(), nil, "datagram waiting")
	expect(wait(), nil, "datagram still waiting")
	takeOne()

	// Nothing waiting: it blocks, then wakes for the next arrival.
	done := wait()
	blocked(done, "on an empty socket")
	send(2)
	expect(done, nil, "datagram arriving")

	// Another goroutine drains the socket; a wait that starts after it
	// must not miss the next datagram, nor return for the drained one.
	takeOne()
	done = wait()
	blocked(done, "for a drained socket")
	send(3)
	expect(done, nil, "datagram after a drain")

	// Close wakes a waiter.
	takeOne()
	done = wait()
	time.Sleep(20 * time.Millisecond)
	b.Close()
	expect(done, link.ErrClosed, "Close")
}

// TestSendWaitsForBuffer checks that a send the socket's buffer cannot take
// waits for room instead of losing packets: the link polls for it itself,
// its socket being outside the Go runtime's poller. A rate limit on the
// namespace's loopback keeps sent packets charged to the small buffer.
func TestSendWaitsForBuffer(t *testing.T) {
	netns.Skip(t)
	e := newEnv(t)
	netns.Run(t, "tc", "-n", e.ns.Name, "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "40mbit", "burst", "16kb", "limit", "4mb")
	lo := netip.MustParseAddr("127.0.0.1")
	a := e.open(t, udp.Config{Addr: lo, Port: e.freePort(t, lo), SocketBuffer: 8 << 10, NoGSO: true})
	b := e.open(t, udp.Config{Addr: lo, Port: e.freePort(t, lo)})
	const total = 512 // 512 KiB: 64 times the buffer, about 100 ms at the rate
	sent := packets(t, a, b, 0, total, 1024, 0)
	got := make(chan [][]byte, 1)
	go func() { got <- collect(t, b, total) }()
	if err := a.Send(sent); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.Sent != total || s.SendErrors != 0 {
		t.Fatalf("sending %d packets through a full buffer: %+v", total, s)
	}
	// The shaper hands packets to the loopback from the sender's CPU or
	// from the one its timer fires on, and the two CPUs' receive queues
	// can deliver them out of order (seen once in a CI run: packet 433
	// came in as the 436th). What must hold is that every packet arrives,
	// once; collect has waited for all of them.
	byTransport := make(map[string][]byte, total)
	for _, p := range sent {
		p = p[link.Headroom:]
		byTransport[string(parse(t, p).Transport())] = p
	}
	for i, p := range <-got {
		k := string(parse(t, p).Transport())
		want, ok := byTransport[k]
		if !ok {
			t.Fatalf("received packet %d was not sent, or came twice: %x", i, p)
		}
		delete(byTransport, k)
		sameRoCE(t, p, want)
	}
}

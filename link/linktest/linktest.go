// Package linktest is a conformance suite for link.Link implementations.
// Each implementation's tests call Run with a function that makes a pair
// of connected links; the suite sends real RoCE v2 packets between them and
// checks what the link.Link contract promises: packets arrive whole and
// byte-identical, batches arrive complete and in order, both directions
// work at once, every size from the smallest RoCE packet to the MTU goes
// through, and Close ends Send and Receive.
//
// The suite assumes a link without faults: a link that may lose packets
// under load (a kernel socket with a small buffer) should be given enough
// buffer for a few hundred small packets.
package linktest

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// Timeout bounds every wait for packets, so a lost packet fails the test
// instead of hanging it.
const Timeout = 10 * time.Second

// NewPair makes two links that reach each other: a packet a sends to bAddr
// arrives at b, and one b sends to aAddr arrives at a. It should close both
// links in t.Cleanup; the suite closes some of them itself first, and
// ignores the error of a second Close.
type NewPair func(t *testing.T) (a, b link.Link, aAddr, bAddr netip.Addr)

// Counter returns the value of l's counter called name, or 0 if it has
// none.
func Counter(l link.Counterer, name string) uint64 {
	for _, c := range l.Counters() {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}

// Run runs the conformance suite, each subtest on a fresh pair of links.
func Run(t *testing.T, newPair NewPair) {
	tests := []struct {
		name string
		fn   func(*testing.T, NewPair)
	}{
		{"OnePacket", testOnePacket},
		{"Batch", testBatch},
		{"BothDirections", testBothDirections},
		{"Sizes", testSizes},
		{"SendCopies", testSendCopies},
		{"Headroom", testHeadroom},
		{"ReceiveOneAtATime", testReceiveOneAtATime},
		{"ReceiveAfterClose", testReceiveAfterClose},
		{"CloseWakesReceive", testCloseWakesReceive},
		{"SendAfterClose", testSendAfterClose},
		{"Addrs", testAddrs},
		{"Deferred", testDeferred},
		{"WakeReceive", testWakeReceive},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newPair) })
	}
}

// frame returns a RoCE v2 RC SEND ONLY packet from src to dst whose PSN and
// payload bytes are derived from psn, so each packet of a test is unique.
func frame(from link.Link, src, dst netip.Addr, psn uint32, payload int) wire.Frame {
	sport := 0xc000 | uint16(psn&0x3fff)
	if sp, ok := from.(link.SourcePorter); ok {
		sport = sp.SourcePort() // the port the kernel will send from, which the ICRC covers
	}
	p := make([]byte, payload)
	for i := range p {
		p[i] = byte(psn*7 + uint32(i))
	}
	return wire.Frame{
		IP:      wire.IPFields{Src: src, Dst: dst, HopLimit: 64, DontFrag: true, TrafficClass: 0x02},
		SrcPort: sport, DstPort: wire.UDPPort,
		Headers: wire.Headers{BTH: bth.Fields{
			Opcode: bth.RCSendOnly, PKey: bth.DefaultPKey, DestQP: 0x11, PSN: bth.PSN(psn & bth.PSNMask), AckReq: true,
		}},
		Payload: p,
	}
}

// packet builds the frame into a buffer with link.Headroom bytes of
// headroom, filled with junk the link may overwrite.
func packet(t testing.TB, from link.Link, src, dst netip.Addr, psn uint32, payload int) []byte {
	t.Helper()
	f := frame(from, src, dst, psn, payload)
	buf := bytes.Repeat([]byte{0xa5}, link.Headroom)
	buf, err := f.Append(buf)
	if err != nil {
		t.Fatalf("building packet: %v", err)
	}
	return buf
}

// packets builds n packets with PSNs first, first+1, ...
func packets(t testing.TB, from link.Link, src, dst netip.Addr, first uint32, n, payload int) [][]byte {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = packet(t, from, src, dst, first+uint32(i), payload)
	}
	return bufs
}

// send sends bufs in batches of link.BatchSize.
func send(t testing.TB, l link.Link, bufs [][]byte) {
	t.Helper()
	if err := sendAll(l, bufs); err != nil {
		t.Fatalf("Send: %v", err)
	}
}

// receiveN receives on l until n packets have arrived and returns copies
// of them. If they do not arrive within Timeout it closes l, which must
// wake Receive, and returns what it got with an error.
func receiveN(l link.Link, n int) ([][]byte, error) {
	type result struct {
		pkts [][]byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var got [][]byte
		bufs := make([][]byte, link.BatchSize)
		for i := range bufs {
			bufs[i] = make([]byte, link.BufferSize)
		}
		sizes := make([]int, link.BatchSize)
		for len(got) < n {
			k, err := l.Receive(bufs, sizes)
			if err != nil {
				done <- result{got, fmt.Errorf("Receive after %d of %d packets: %w", len(got), n, err)}
				return
			}
			if k <= 0 || k > len(bufs) {
				done <- result{got, fmt.Errorf("Receive returned %d packets into %d buffers", k, len(bufs))}
				return
			}
			for i := range k {
				if sizes[i] < 0 || link.Headroom+sizes[i] > len(bufs[i]) {
					done <- result{got, fmt.Errorf("Receive set size %d", sizes[i])}
					return
				}
				got = append(got, bytes.Clone(bufs[i][link.Headroom:link.Headroom+sizes[i]]))
			}
		}
		done <- result{got, nil}
	}()
	select {
	case r := <-done:
		return r.pkts, r.err
	case <-time.After(Timeout):
		l.Close()
		r := <-done
		return r.pkts, fmt.Errorf("received %d of %d packets in %v", len(r.pkts), n, Timeout)
	}
}

// collect is receiveN that fails the test on error.
func collect(t testing.TB, l link.Link, n int) [][]byte {
	t.Helper()
	pkts, err := receiveN(l, n)
	if err != nil {
		t.Fatal(err)
	}
	return pkts
}

// check reports whether got is the packet want (both without headroom),
// and that it parses and, where the link lets it, passes the ICRC check.
func check(t testing.TB, flags link.Flags, got, want []byte) {
	t.Helper()
	var p, w wire.Packet
	if err := wire.ParseIP(&w, want); err != nil {
		t.Fatalf("test packet does not parse: %v", err)
	}
	if err := wire.ParseIP(&p, got); err != nil {
		t.Fatalf("received packet does not parse: %v\n got %x\nwant %x", err, got, want)
	}
	v4 := p.IPVersion() == 4
	if flags&link.FlagNoIPv4ICRC != 0 && v4 {
		// The link cannot show the IPv4 header the sender wrote; what it
		// can show must still match.
		if p.Src() != w.Src() || p.Dst() != w.Dst() || p.DstPort() != w.DstPort() ||
			!bytes.Equal(p.Transport(), w.Transport()) {
			t.Fatalf("received packet differs\n got %x\nwant %x", got, want)
		}
		return
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("received packet differs\n got %x\nwant %x", got, want)
	}
	if err := p.CheckICRC(); err != nil {
		t.Fatalf("received packet: %v", err)
	}
}

// checkAll checks that got holds exactly the packets of want, in order.
func checkAll(t testing.TB, flags link.Flags, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("received %d packets, want %d", len(got), len(want))
	}
	for i := range want {
		check(t, flags, got[i], want[i][link.Headroom:])
	}
}

func testOnePacket(t *testing.T, newPair NewPair) {
	a, b, aAddr, bAddr := newPair(t)
	want := [][]byte{packet(t, a, aAddr, bAddr, 1, 256)}
	send(t, a, want)
	checkAll(t, b.Flags(), collect(t, b, 1), want)
}

func testBatch(t *testing.T, newPair NewPair) {
	a, b, aAddr, bAddr := newPair(t)
	want := packets(t, a, aAddr, bAddr, 100, link.BatchSize, 512)
	send(t, a, want)
	checkAll(t, b.Flags(), collect(t, b, len(want)), want)

	// Several batches back to back stay in order too.
	want = packets(t, a, aAddr, bAddr, 1000, 4*link.BatchSize, 64)
	send(t, a, want)
	checkAll(t, b.Flags(), collect(t, b, len(want)), want)
}

// testDeferred checks a link.Deferrer: what SendDeferred leaves queued
// goes out, in order, at Flush or behind the next Send, however much it
// is; Flush after Close is an error, not a panic. Links that are not
// Deferrers pass.
func testDeferred(t *testing.T, newPair NewPair) {
	a, b, aAddr, bAddr := newPair(t)
	df, ok := a.(link.Deferrer)
	if !ok {
		return
	}
	deferAll := func(bufs [][]byte) {
		t.Helper()
		for len(bufs) > 0 {
			n := min(len(bufs), link.BatchSize)
			if err := df.SendDeferred(bufs[:n]); err != nil {
				t.Fatalf("SendDeferred: %v", err)
			}
			bufs = bufs[n:]
		}
	}
	// A few packets, then Flush.
	want := packets(t, a, aAddr, bAddr, 1, 3, 100)
	deferAll(want)
	if err := df.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	checkAll(t, b.Flags(), collect(t, b, len(want)), want)

	// More than a link may leave queued, then Flush.
	want = packets(t, a, aAddr, bAddr, 100, 16*link.BatchSize, 64)
	deferAll(want)
	if err := df.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	checkAll(t, b.Flags(), collect(t, b, len(want)), want)

	// Deferred packets go out ahead of a later Send's, with no Flush.
	deferred := packets(t, a, aAddr, bAddr, 5000, 2, 200)
	sent := packets(t, a, aAddr, bAddr, 6000, 2, 200)
	deferAll(deferred)
	send(t, a, sent)
	checkAll(t, b.Flags(), collect(t, b, 4), append(deferred, sent...))

	a.Close()
	if err := df.Flush(); err == nil {
		t.Errorf("Flush after Close: no error")
	}
}

func testBothDirections(t *testing.T, newPair NewPair) {
	a, b, aAddr, bAddr := newPair(t)
	const n = 8 * link.BatchSize
	toB := packets(t, a, aAddr, bAddr, 0, n, 128)
	toA := packets(t, b, bAddr, aAddr, 1<<20, n, 128)
	type result struct {
		pkts [][]byte
		err  error
	}
	atA, atB := make(chan result, 1), make(chan result, 1)
	go func() { p, err := receiveN(b, n); atB <- result{p, err} }()
	go func() { p, err := receiveN(a, n); atA <- result{p, err} }()
	sent := make(chan error, 2)
	go func() { sent <- sendAll(a, toB) }()
	go func() { sent <- sendAll(b, toA) }()
	for range 2 {
		if err := <-sent; err != nil {
			t.Errorf("Send: %v", err)
		}
	}
	ra, rb := <-atA, <-atB
	if ra.err != nil || rb.err != nil {
		t.Fatalf("receiving at a: %v; at b: %v", ra.err, rb.err)
	}
	checkAll(t, b.Flags(), rb.pkts, toB)
	checkAll(t, a.Flags(), ra.pkts, toA)
}

func sendAll(l link.Link, bufs [][]byte) error {
	for len(bufs) > 0 {
		n := min(len(bufs), link.BatchSize)
		if err := l.Send(bufs[:n]); err != nil {
			return err
		}
		bufs = bufs[n:]
	}
	return nil
}

func testSizes(t *testing.T, newPair NewPair) {
	a, b, aAddr, bAddr := newPair(t)
	mtu := min(a.MTU(), b.MTU())
	empty := frame(a, aAddr, bAddr, 0, 0)
	overhead := empty.Len() // the smallest RoCE v2 packet: SEND ONLY, no payload
	if mtu < overhead {
		t.Fatalf("MTU %d is below the smallest RoCE v2 packet, %d bytes", mtu, overhead)
	}
	largest := (mtu - overhead) &^ 3
	var payloads []int
	for n := range 9 {
		payloads = append(payloads, n)
	}
	for _, n := range []int{63, 64, 65, 256, 1024, 1500 - overhead, 2048, 4096, largest - 1, largest} {
		if n > 8 && n <= largest {
			payloads = append(payloads, n)
		}
	}
	var want [][]byte
	for i, n := range payloads {
		want = append(want, packet(t, a, aAddr, bAddr, uint32(i), n))
	}
	if got := len(want[len(want)-1]) - link.Headroom; got > mtu || got < mtu-3 {
		t.Fatalf("largest test packet is %d bytes, MTU %d", got, mtu)
	}
	send(t, a, want)
	checkAll(t, b.Flags(), collect(t, b, len(want)), want)
}

func testSendCopies(t *testing.T, newPair NewPair) {
	a, b, aAddr, bAddr := newPair(t)
	want := packets(t, a, aAddr, bAddr, 7, 16, 300)
	bufs := make([][]byte, len(want))
	for i := range want {
		bufs[i] = bytes.Clone(want[i])
	}
	send(t, a, bufs)
	// The caller owns its buffers again as soon as Send returns.
	for _, buf := range bufs {
		clear(buf)
	}
	checkAll(t, b.Flags(), collect(t, b, len(want)), want)
}

func testHeadroom(t *testing.T, newPair NewPair) {
	a, b, aAddr, bAddr := newPair(t)
	// Sent from buffers of exactly link.BufferSize with junk in the
	// headroom and after the packet, and received into buffers full of
	// junk: the packet must come through untouched. The headroom itself
	// need not be preserved.
	want := packets(t, a, aAddr, bAddr, 40, 8, 100)
	bufs := make([][]byte, len(want))
	for i, w := range want {
		buf := bytes.Repeat([]byte{0x5a}, link.BufferSize)
		copy(buf, w)
		bufs[i] = buf[:len(w)]
	}
	send(t, a, bufs)
	checkAll(t, b.Flags(), collect(t, b, len(want)), want)
}

func testReceiveOneAtATime(t *testing.T, newPair NewPair) {
	a, b, aAddr, bAddr := newPair(t)
	want := packets(t, a, aAddr, bAddr, 500, 10, 32)
	send(t, a, want)
	bufs := [][]byte{make([]byte, link.BufferSize)}
	sizes := make([]int, 1)
	for i := range want {
		got := collectInto(t, b, bufs, sizes)
		check(t, b.Flags(), got, want[i][link.Headroom:])
	}
}

// collectInto makes one Receive call into bufs, bounded by Timeout, and
// returns the one packet it must return.
func collectInto(t *testing.T, l link.Link, bufs [][]byte, sizes []int) []byte {
	t.Helper()
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := l.Receive(bufs, sizes)
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		if r.err != nil || r.n != 1 {
			t.Fatalf("Receive into one buffer = %d, %v; want 1, nil", r.n, r.err)
		}
	case <-time.After(Timeout):
		l.Close()
		<-done
		t.Fatalf("no packet in %v", Timeout)
	}
	return bufs[0][link.Headroom : link.Headroom+sizes[0]]
}

func testReceiveAfterClose(t *testing.T, newPair NewPair) {
	a, b, aAddr, bAddr := newPair(t)
	// Packets still queued do not keep a closed link open.
	send(t, a, packets(t, a, aAddr, bAddr, 0, 4, 16))
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	bufs := [][]byte{make([]byte, link.BufferSize)}
	if _, err := b.Receive(bufs, make([]int, 1)); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Receive after Close: %v, want %v", err, link.ErrClosed)
	}
}

func testCloseWakesReceive(t *testing.T, newPair NewPair) {
	_, b, _, _ := newPair(t)
	done := make(chan error, 1)
	go func() {
		bufs := [][]byte{make([]byte, link.BufferSize)}
		_, err := b.Receive(bufs, make([]int, 1))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Receive returned with nothing sent: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, link.ErrClosed) {
			t.Fatalf("blocked Receive woken by Close returned %v, want %v", err, link.ErrClosed)
		}
	case <-time.After(Timeout):
		t.Fatalf("Close did not wake a blocked Receive in %v", Timeout)
	}
}

// testWakeReceive checks a TimedPoller's WakeReceive: it ends the
// WaitReceiveFor under way, even with WaitReceives beside it (which must
// not take it), and one with no wait under way ends the next
// WaitReceiveFor at once.
func testWakeReceive(t *testing.T, newPair NewPair) {
	_, b, _, _ := newPair(t)
	tp, ok := b.(link.TimedPoller)
	if !ok {
		t.Skip("not a link.TimedPoller")
	}
	stop, plainDone := make(chan struct{}), make(chan struct{})
	go func() { // waits beside, as a device's receive goroutine may
		defer close(plainDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if tp.WaitReceive() != nil {
				return
			}
			time.Sleep(time.Millisecond) // a link may wake for frames it keeps (tap)
		}
	}()
	timed := make(chan error, 1)
	go func() {
		ready, err := tp.WaitReceiveFor(time.Hour)
		if err == nil && !ready {
			err = errors.New("woken, but reports nothing ready")
		}
		timed <- err
	}()
	time.Sleep(50 * time.Millisecond)
	tp.WakeReceive()
	select {
	case err := <-timed:
		if err != nil {
			t.Fatalf("WaitReceiveFor after WakeReceive: %v", err)
		}
	case <-time.After(Timeout):
		t.Fatalf("WakeReceive did not end a WaitReceiveFor in %v", Timeout)
	}
	tp.WakeReceive()
	if ready, err := tp.WaitReceiveFor(time.Hour); !ready || err != nil {
		t.Fatalf("WaitReceiveFor after a WakeReceive = %v, %v; want true, nil", ready, err)
	}
	close(stop)
	b.Close()
	<-plainDone
}

func testSendAfterClose(t *testing.T, newPair NewPair) {
	a, _, aAddr, bAddr := newPair(t)
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := a.Send(packets(t, a, aAddr, bAddr, 0, 1, 16)); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Send after Close: %v, want %v", err, link.ErrClosed)
	}
}

func testAddrs(t *testing.T, newPair NewPair) {
	a, b, aAddr, bAddr := newPair(t)
	has := func(l link.Link, want netip.Addr) bool {
		for _, x := range l.Addrs() {
			if x.Unmap() == want.Unmap() {
				return true
			}
		}
		return false
	}
	if !has(a, aAddr) {
		t.Errorf("a.Addrs() = %v, missing %v", a.Addrs(), aAddr)
	}
	if !has(b, bAddr) {
		t.Errorf("b.Addrs() = %v, missing %v", b.Addrs(), bAddr)
	}
	for _, l := range []link.Link{a, b} {
		if mtu := l.MTU(); mtu <= 0 || mtu > link.MaxPacket {
			t.Errorf("MTU() = %d, want 1..%d", mtu, link.MaxPacket)
		}
	}
}

package rsocket_test

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/rnic/rnictest"
	"github.com/gorxe/gorxe/rsocket"
)

// packetPair opens two devices on an in-memory fabric with loopback
// addresses as their GIDs, so that each datagram socket's UDP socket can
// bind the address its device has, and a socket on each.
func packetPair(t *testing.T) (a, b *rsocket.PacketConn, da, db *rnic.Device) {
	t.Helper()
	a, b, da, db = packetPairWith(t, rsocket.PacketOptions{})
	for _, c := range []*rsocket.PacketConn{a, b} {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
	}
	return a, b, da, db
}

// packetPairWith is packetPair with a's options, and no deadlines.
func packetPairWith(tb testing.TB, oa rsocket.PacketOptions) (a, b *rsocket.PacketConn, da, db *rnic.Device) {
	tb.Helper()
	f := mem.NewFabric()
	da, db = rnictest.Open(tb, f, "127.0.0.1"), rnictest.Open(tb, f, "127.0.0.2")
	var err error
	if a, err = rsocket.ListenPacket(da, netip.MustParseAddrPort("127.0.0.1:0"), oa); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { a.Close() })
	if b, err = rsocket.ListenPacket(db, netip.MustParseAddrPort("127.0.0.2:0"), rsocket.PacketOptions{}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	return a, b, da, db
}

func read(t *testing.T, c *rsocket.PacketConn) ([]byte, netip.AddrPort) {
	t.Helper()
	buf := make([]byte, 4096)
	n, from, err := c.ReadFromAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n], from
}

// TestDatagram: the first datagram to a peer goes over the UDP socket,
// and teaches the peer the sender's QPN; the peer's answer, and every
// datagram after it both ways, goes as a UD SEND. Each arrives whole, in
// order here, with the sender's address.
func TestDatagram(t *testing.T) {
	a, b, da, db := packetPair(t)
	if _, err := a.WriteToAddrPort([]byte("login"), b.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if got, from := read(t, b); string(got) != "login" || from != a.LocalAddr() {
		t.Fatalf("b read %q from %v; want login from %v", got, from, a.LocalAddr())
	}
	if pa, pb := da.Counters().SentPkts, db.Counters().SentPkts; pa != 0 || pb != 0 {
		t.Fatalf("RoCE packets before a QPN was known: %d and %d", pa, pb)
	}
	for i := range 200 {
		msg := bytes.Repeat([]byte{byte(i)}, 1+i*5%1000)
		if _, err := b.WriteToAddrPort(msg, a.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		got, from := read(t, a)
		if !bytes.Equal(got, msg) || from != b.LocalAddr() {
			t.Fatalf("round %d: a read %d bytes from %v; want %d from %v", i, len(got), from, len(msg), b.LocalAddr())
		}
		// The answer: by now a has b's QPN from the UDP service's reply.
		if _, err := a.WriteToAddrPort(got, b.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		if echo, from := read(t, b); !bytes.Equal(echo, msg) || from != a.LocalAddr() {
			t.Fatalf("round %d: b read %d bytes from %v; want %d from %v", i, len(echo), from, len(msg), a.LocalAddr())
		}
	}
	// a's first answers may go over UDP still: the UDP service's reply
	// that teaches it b's QPN races b's first datagrams (in rsocket.c
	// too). b learnt a's before it read a's first.
	pa, pb := da.Counters().SentPkts, db.Counters().SentPkts
	if pa == 0 || pb != 200 {
		t.Fatalf("RoCE packets sent: %d and %d; want some, and 200", pa, pb)
	}
	if _, err := a.WriteToAddrPort([]byte("last"), b.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if got, _ := read(t, b); string(got) != "last" || da.Counters().SentPkts != pa+1 {
		t.Fatalf("b read %q; a sent %d RoCE packets for it, want 1", got, da.Counters().SentPkts-pa)
	}
}

// TestDatagramConnected: Connect names the peer of Write and Read, and a
// datagram longer than Read's buffer is cut to it.
func TestDatagramConnected(t *testing.T) {
	a, b, _, _ := packetPair(t)
	if err := a.Connect(b.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if n, err := b.Read(buf); err != nil || string(buf[:n]) != "0123" {
		t.Fatalf("read %q, %v; want the first 4 bytes", buf[:n], err)
	}
}

// TestDatagramDeadline: a deadline set while a read waits applies to it,
// as a net.PacketConn's: brought forward it ends the read, moved away it
// lets the read wait on for the datagram.
func TestDatagramDeadline(t *testing.T) {
	a, b, _, _ := packetPair(t)
	b.SetReadDeadline(time.Time{})
	readErr := make(chan error, 1)
	go func() {
		_, _, err := b.ReadFromAddrPort(make([]byte, 8))
		readErr <- err
	}()
	time.Sleep(10 * time.Millisecond)
	b.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	select {
	case err := <-readErr:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a waiting read after its deadline: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a deadline set while a read waited did not end it")
	}
	// Past, then moved away while the next read waits: the read takes
	// the datagram that comes after the old deadline.
	b.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 8)
		n, _, err := b.ReadFromAddrPort(buf)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(buf[:n])
	}()
	time.Sleep(5 * time.Millisecond)
	b.SetReadDeadline(time.Time{})
	time.Sleep(40 * time.Millisecond)
	if _, err := a.WriteToAddrPort([]byte("late"), b.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s != "late" {
			t.Fatalf("the read whose deadline was lifted returned %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the read whose deadline was lifted got nothing")
	}
}

// TestDatagramDropped: datagrams that come while nobody reads wait in
// the receive queue; those beyond it are lost, and Dropped counts them.
func TestDatagramDropped(t *testing.T) {
	a, b, da, _ := packetPairWith(t, rsocket.PacketOptions{BufferSize: 16 * 2048})
	b.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := a.WriteToAddrPort([]byte("login"), b.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	read(t, b) // b has a's QPN now: what it sends goes over UD
	const sent, room = 40, 16
	rcvd := da.Counters().RcvdPkts
	for i := range sent {
		if _, err := b.WriteToAddrPort([]byte{byte(i)}, a.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	for end := time.Now().Add(10 * time.Second); da.Counters().RcvdPkts < rcvd+sent; {
		if time.Now().After(end) {
			t.Fatalf("a's device received %d of %d", da.Counters().RcvdPkts-rcvd, sent)
		}
		time.Sleep(time.Millisecond)
	}
	if got := a.Dropped(); got != sent-room {
		t.Fatalf("Dropped %d; want the %d beyond a receive queue of %d", got, sent-room, room)
	}
	a.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	buf := make([]byte, 8)
	for i := range room {
		if n, _, err := a.ReadFromAddrPort(buf); err != nil || n != 1 || buf[0] != byte(i) {
			t.Fatalf("read %d: %x, %v; want datagram %d", i, buf[:n], err, i)
		}
	}
	if _, _, err := a.ReadFromAddrPort(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a read past what the queue held: %v", err)
	}
}

// TestDatagramErrors: what cannot be sent, a read past its deadline, a
// closed socket: each an error, none a hang.
func TestDatagramErrors(t *testing.T) {
	a, b, da, _ := packetPair(t)
	if _, err := a.Write([]byte("x")); err == nil {
		t.Error("Write on an unconnected socket did not fail")
	}
	if max := a.MaxPayload(); max != min(da.MTU().Bytes(), 2048)-8 {
		t.Errorf("MaxPayload %d with path MTU %v; want 8 bytes less than it or 2 KiB", max, da.MTU())
	}
	if _, err := a.WriteToAddrPort(make([]byte, a.MaxPayload()+1), b.LocalAddr()); err == nil {
		t.Error("a datagram longer than MaxPayload was sent")
	}
	if _, err := a.WriteToAddrPort(make([]byte, a.MaxPayload()), b.LocalAddr()); err != nil {
		t.Errorf("a datagram of MaxPayload: %v", err)
	}
	if got, _ := read(t, b); len(got) != a.MaxPayload() {
		t.Errorf("b read %d bytes, want %d", len(got), a.MaxPayload())
	}
	if _, err := a.WriteToAddrPort([]byte("x"), netip.MustParseAddrPort("127.0.0.2:0")); err == nil {
		t.Error("a datagram to port 0 was sent")
	}
	// Binding is the UDP socket's; sending from an address that is not
	// one of the device's GIDs is what fails.
	stray, err := rsocket.ListenPacket(da, netip.MustParseAddrPort("127.0.0.9:0"), rsocket.PacketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stray.WriteToAddrPort([]byte("x"), b.LocalAddr()); err == nil || !strings.Contains(err.Error(), "not an address of the device") {
		t.Errorf("a datagram from an address not the device's: %v", err)
	}
	stray.Close()
	b.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, _, err := b.ReadFromAddrPort(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past the deadline: %v", err)
	}
	b.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, _, err := b.ReadFromAddrPort(make([]byte, 8))
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	b.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("read on a closed socket: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read did not end with Close")
	}
}

// TestDatagramHostileUDP: messages on the UDP socket that are not
// rsockets' (short, wrong tag, a version that is not the sender's family,
// a length that is not the version's, an unknown operation) are ignored:
// nothing is delivered, nothing is learnt, and the socket works after.
func TestDatagramHostileUDP(t *testing.T) {
	a, b, _, db := packetPair(t)
	raw, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.3:0")), net.UDPAddrFromAddrPort(b.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	hdr := func(tag uint32, ver, op, length byte) []byte {
		h := []byte{byte(tag >> 24), byte(tag >> 16), byte(tag >> 8), byte(tag), ver, op, length, 0, 0, 0, 0x12, 0x34, 127, 0, 0, 3}
		return append(h, "payload"...)
	}
	for i, m := range [][]byte{
		{},
		[]byte("short"),
		hdr(0x55555554, 4, 0, 16),
		hdr(0x55555555, 6, 0, 16),
		hdr(0x55555555, 4, 0, 28),
		hdr(0x55555555, 4, 0, 255),
		hdr(0x55555555, 4, 3, 16),
	} {
		if _, err := raw.Write(m); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if _, err := a.WriteToAddrPort([]byte("real"), b.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if got, from := read(t, b); string(got) != "real" || from != a.LocalAddr() {
		t.Fatalf("b read %q from %v; want real from %v", got, from, a.LocalAddr())
	}
	if n := db.Counters().SentPkts; n != 0 {
		t.Fatalf("b sent %d RoCE packets: it answered a stranger", n)
	}
}

func ExamplePacketConn() {
	f := mem.NewFabric()
	open := func(addr string) *rnic.Device {
		l, err := f.NewLink(netip.MustParseAddr(addr))
		if err != nil {
			log.Fatal(err)
		}
		dev, err := rnic.Open(rnic.Config{Link: l})
		if err != nil {
			log.Fatal(err)
		}
		return dev
	}
	da, db := open("127.0.0.1"), open("127.0.0.2")
	defer da.Close()
	defer db.Close()
	a, _ := rsocket.ListenPacket(da, netip.MustParseAddrPort("127.0.0.1:0"), rsocket.PacketOptions{})
	b, _ := rsocket.ListenPacket(db, netip.MustParseAddrPort("127.0.0.2:0"), rsocket.PacketOptions{})
	defer a.Close()
	defer b.Close()
	a.WriteToAddrPort([]byte("ping"), b.LocalAddr()) // over UDP: b learns a's QPN
	buf := make([]byte, 64)
	n, from, _ := b.ReadFromAddrPort(buf)
	b.WriteToAddrPort(buf[:n], from) // a UD SEND
	n, _, _ = a.ReadFromAddrPort(buf)
	fmt.Println(string(buf[:n]))
	// Output: ping
}

// BenchmarkDatagramEcho: a 64-byte datagram to a peer that sends it back,
// over UD QPs on two devices of an in-memory fabric; each side's read
// processes its completion queue itself.
func BenchmarkDatagramEcho(b *testing.B) {
	a, peer, _, _ := packetPairWith(b, rsocket.PacketOptions{})
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := peer.ReadFromAddrPort(buf)
			if err != nil {
				return
			}
			if _, err := peer.WriteToAddrPort(buf[:n], from); err != nil {
				return
			}
		}
	}()
	msg, buf := make([]byte, 64), make([]byte, 2048)
	echo := func() {
		if _, err := a.WriteToAddrPort(msg, peer.LocalAddr()); err != nil {
			b.Fatal(err)
		}
		if n, _, err := a.ReadFromAddrPort(buf); err != nil || n != len(msg) {
			b.Fatalf("read %d bytes, %v", n, err)
		}
	}
	echo() // the first goes over UDP and teaches each side the other's QPN
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		echo()
	}
}

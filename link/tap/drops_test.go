//go:build linux

package tap

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// TestQueueDrops fills the TAP's queue while nothing reads it: the frames
// the kernel drops there show as QueueDrops and if_tx_dropped, and the
// frames read afterwards and the ones dropped add up to the ones sent.
func TestQueueDrops(t *testing.T) {
	needRoot(t)
	const queue, sent = 16, 200
	l := open(t, Config{Addrs: []netip.Prefix{prefix("10.9.0.5/24")}, TxQueueLen: queue})
	if d := l.Stats().QueueDrops; d != 0 {
		t.Fatalf("QueueDrops = %d before anything was sent", d)
	}
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	// Polled, the link leaves the TAP to its reader: the housekeeper
	// reads no more, and the queue fills.
	if _, err := l.TryReceive(bufs, sizes); err != nil {
		t.Fatal(err)
	}
	ifi, err := net.InterfaceByName(l.Name())
	if err != nil {
		t.Fatal(err)
	}
	s, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(s)
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifi.Index, Halen: 6}
	mac := l.MAC()
	copy(to.Addr[:], mac)
	frame := make([]byte, 60)
	copy(frame, mac)
	copy(frame[6:], []byte{2, 0, 0, 0, 0, 9})
	binary.BigEndian.PutUint16(frame[12:], 0x88b5) // local experimental: not IP, not ARP
	for i := range sent {
		binary.BigEndian.PutUint32(frame[14:], uint32(i))
		if err := unix.Sendto(s, frame, 0, to); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	// None of the frames is a RoCE packet: one call reads them all.
	before := l.Stats().FramesIn
	if n, err := l.TryReceive(bufs, sizes); n != 0 || err != nil {
		t.Fatalf("TryReceive = %d, %v", n, err)
	}
	st := l.Stats()
	read := st.FramesIn - before
	if st.QueueDrops == 0 || read+st.QueueDrops != sent || read > queue {
		t.Fatalf("%d frames sent into a queue of %d: %d read, QueueDrops %d", sent, queue, read, st.QueueDrops)
	}
	var named uint64
	for _, c := range l.Counters() {
		if c.Name == "if_tx_dropped" {
			named = c.Value
		}
	}
	if named != st.QueueDrops {
		t.Errorf("if_tx_dropped = %d, QueueDrops %d", named, st.QueueDrops)
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

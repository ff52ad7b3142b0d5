package qp

import (
	"testing"

	"github.com/gorxe/gorxe/wire/bth"
)

// TestWindowRefillsInBatches: once the window is full, the requester
// waits until ACKs have opened an ackInterval's worth of it and then sends
// that many packets together, rather than one packet per ACK.
func TestWindowRefillsInBatches(t *testing.T) {
	const window = 16 // ackInterval 4
	q, port, m, _ := windowQP(t, window)
	if got := q.ackInterval(); got != 4 {
		t.Fatalf("ackInterval = %d with window %d, want 4", got, window)
	}
	if _, err := q.PostSend([]SendWR{{Opcode: WRRDMAWrite, Flags: SendSignaled,
		SGList: []SGE{{Addr: m.IOVA(), Length: 64 << 10, LKey: m.LKey()}}, RemoteAddr: 0x1000, RKey: 7}}); err != nil {
		t.Fatal(err)
	}
	if port.count != window {
		t.Fatalf("posting a 64-packet WRITE sent %d packets, want the window, %d", port.count, window)
	}
	first := bth.PSN(rtsAttr.SQPSN)
	ack := ackPacket(t)
	for _, step := range []struct {
		acked int // packets acknowledged in all
		sent  int // packets sent in all after the ACK
	}{
		{1, 16}, {2, 16}, {3, 16}, // less than an ackInterval of room: wait
		{4, 20},          // room for 4: send them together
		{5, 20}, {7, 20}, // the window is full again: wait
		{8, 24},
		{20, 36}, // a big ACK opens the whole window
	} {
		ack.BTH.SetPSN(first.Add(uint32(step.acked - 1)))
		q.HandlePacket(ack)
		if port.count != step.sent {
			t.Fatalf("after ACKs of %d packets, %d sent in all, want %d", step.acked, port.count, step.sent)
		}
	}
}

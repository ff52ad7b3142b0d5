package fabric

import (
	"errors"
	"testing"

	"github.com/gorxe/gorxe/link"
)

// TestHostLink: a host link on the switch's clock sends at the clock's
// time, notifies at each delivery, hands packets over in order without
// waiting, and refuses to wait.
func TestHostLink(t *testing.T) {
	clock := NewClock()
	s, err := NewSwitch(clock, Config{Ports: ports(2, 40e9, 1000), Buffer: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Attach(0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Attach(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Attach(1); !errors.Is(err, ErrPort) {
		t.Errorf("a port attached twice: %v", err)
	}
	if _, err := s.Attach(2); !errors.Is(err, ErrPort) {
		t.Errorf("a port the switch lacks: %v", err)
	}
	if got := b.Addrs(); len(got) != 1 || got[0] != hostB {
		t.Errorf("B's addresses %v", got)
	}
	if b.LineRate() != 40e9 || b.MTU() != link.MaxPacket {
		t.Errorf("rate %d, MTU %d", b.LineRate(), b.MTU())
	}
	notified := 0
	b.Notify(func() { notified++ })
	bufs := make([][]byte, 3)
	for i := range bufs {
		bufs[i] = make([]byte, link.Headroom+1000)
		copy(bufs[i][link.Headroom:], ip4(hostB, 1000, ect0))
		bufs[i][link.Headroom+100] = byte(i)
	}
	if err := a.Send(bufs); err != nil {
		t.Fatal(err)
	}
	for clock.Step() {
	}
	if notified != 3 {
		t.Errorf("notified %d times for 3 packets", notified)
	}
	in := make([][]byte, 2)
	for i := range in {
		in[i] = make([]byte, link.BufferSize)
	}
	sizes := make([]int, 2)
	var got []byte
	for {
		n, err := b.TryReceive(in, sizes)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		for i := range n {
			if sizes[i] != 1000 {
				t.Errorf("size %d", sizes[i])
			}
			got = append(got, in[i][link.Headroom+100])
		}
	}
	if string(got) != "\x00\x01\x02" {
		t.Errorf("received packets %v, want 0 1 2 in order", got)
	}
	if _, err := b.Receive(in, sizes); !errors.Is(err, errNoWait) {
		t.Errorf("Receive: %v", err)
	}
	if err := b.WaitReceive(); !errors.Is(err, errNoWait) {
		t.Errorf("WaitReceive: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); !errors.Is(err, link.ErrClosed) {
		t.Errorf("a second Close: %v", err)
	}
	a.Send(bufs[:1])
	for clock.Step() {
	}
	if b.Overflow() != 1 {
		t.Errorf("a packet for a closed link: overflow %d", b.Overflow())
	}
	if _, err := b.TryReceive(in, sizes); !errors.Is(err, link.ErrClosed) {
		t.Errorf("TryReceive after Close: %v", err)
	}
}

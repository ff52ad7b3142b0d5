package fabric

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorxe/gorxe/link"
)

// TestRealTimeInBubble: in a synctest bubble a packet sent on one port's
// link is received on the other's exactly when the switch delivers it,
// by the bubble's clock.
func TestRealTimeInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, err := NewRealTime(Config{Ports: ports(2, 40e9, 1000), Buffer: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		la, err := r.Link(0)
		if err != nil {
			t.Fatal(err)
		}
		lb, err := r.Link(1)
		if err != nil {
			t.Fatal(err)
		}
		if a := lb.Addrs(); len(a) != 1 || a[0] != hostB || lb.LineRate() != 40e9 || lb.MTU() != link.MaxPacket {
			t.Fatalf("link B: %v, %d b/s, MTU %d", a, lb.LineRate(), lb.MTU())
		}
		time.Sleep(time.Millisecond) // the switch's clock follows the bubble's
		buf := make([]byte, link.BufferSize)
		bufs := [][]byte{buf, make([]byte, link.BufferSize)}
		for i := range 3 {
			copy(buf[link.Headroom:], ip4(hostB, 1000, ect0))
			buf[link.Headroom+100] = byte(i)
			if err := la.Send([][]byte{buf[:link.Headroom+1000]}); err != nil {
				t.Fatal(err)
			}
		}
		t0 := time.Now()
		sizes := make([]int, 2)
		for i, want := range []time.Duration{2400, 2600, 2800} {
			n, err := lb.Receive(bufs[1:], sizes)
			if err != nil || n != 1 || sizes[0] != 1000 || bufs[1][link.Headroom+100] != byte(i) {
				t.Fatalf("Receive: %d packets, %v, size %d, packet %d", n, err, sizes[0], bufs[1][link.Headroom+100])
			}
			if got := time.Since(t0); got != want {
				t.Errorf("packet %d received after %v, want %v", i, got, want)
			}
		}
		r.Do(func(s *Switch) {
			if st := s.Port(1); st.Delivered != 3 {
				t.Errorf("port 1: %+v", st)
			}
		})
		lb.Close()
		if _, err := lb.Receive(bufs[1:], sizes); !errors.Is(err, link.ErrClosed) {
			t.Errorf("Receive after Close: %v", err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); !errors.Is(err, link.ErrClosed) {
			t.Errorf("second Close: %v", err)
		}
		if err := la.Send(bufs[:1]); err != nil {
			t.Errorf("Send after the switch closed: %v", err) // lost, as on a dead wire
		}
	})
}

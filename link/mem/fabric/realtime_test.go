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

// TestDriveErrors: RealTime refuses switches and ports it cannot drive.
func TestDriveErrors(t *testing.T) {
	clock, other := NewClock(), NewClock()
	cfg := Config{Ports: ports(2, 40e9, 1000), Buffer: 1 << 20}
	s1, err := NewSwitch(clock, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Ports = ports(2, 40e9, 1000)
	for i := range cfg.Ports {
		cfg.Ports[i].Addrs = nil
	}
	s2, err := NewSwitch(clock, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s3, err := NewSwitch(other, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := Connect(s1, 1, s2, 0); err != nil {
		t.Fatal(err)
	}
	if err := Connect(s1, 0, s3, 0); !errors.Is(err, ErrConfig) {
		t.Errorf("Connect across clocks: %v", err)
	}
	if _, err := Drive(clock); !errors.Is(err, ErrConfig) {
		t.Errorf("Drive with no switch: %v", err)
	}
	if _, err := Drive(clock, s1, s3); !errors.Is(err, ErrConfig) {
		t.Errorf("Drive across clocks: %v", err)
	}
	r, err := Drive(clock, s1, s2)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, c := range []struct {
		s    *Switch
		port int
		want error
	}{{s1, 1, ErrPort}, {s1, 2, ErrPort}, {s2, -1, ErrPort}, {s3, 0, ErrConfig}} {
		if _, err := r.LinkAt(c.s, c.port); !errors.Is(err, c.want) {
			t.Errorf("LinkAt port %d: %v, want %v", c.port, err, c.want)
		}
	}
	if l, err := r.LinkAt(s2, 1); err != nil || len(l.Addrs()) != 0 {
		t.Errorf("LinkAt(s2, 1): %v, %v", l, err)
	}
}

package perftest

import (
	"context"
	"testing"
)

// TestPassiveLatServerPolls runs read_lat and atomic_lat between two
// devices on kernel UDP sockets: the server takes no part in the run,
// and its device answers the client's READs and atomics from a busy
// poll (Side.serve), not from its receive goroutine woken for each;
// with -e it sleeps instead, and polls nothing.
func TestPassiveLatServerPolls(t *testing.T) {
	for _, tc := range []struct {
		test   Test
		events bool
	}{{ReadLat, false}, {AtomicLat, false}, {ReadLat, true}} {
		name := string(tc.test)
		if tc.events {
			name += "/events"
		}
		t.Run(name, func(t *testing.T) {
			cdev, sdev := udpDevices(t, nil)
			p := Params{Test: tc.test, Iters: 2000, Size: 8, Check: true, Events: tc.events}
			c, _ := runRemotePair(t, context.Background(), context.Background(), cdev, sdev, p, p, nil)
			if len(c) != 1 || c[0].Lat == nil {
				t.Fatalf("client results %+v", c)
			}
			b := sdev.Counters().RxBatches
			t.Logf("server's batches: %+v", b)
			switch {
			case tc.events && b.Polled != 0:
				t.Errorf("the server of a run with -e polled %d batches", b.Polled)
			case !tc.events && b.Polled <= b.Own:
				t.Errorf("the server polled %d batches, its receive goroutine took %d", b.Polled, b.Own)
			}
		})
	}
}

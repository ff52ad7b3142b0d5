package perftest

import (
	"context"
	"testing"
	"time"

	"github.com/gorxe/gorxe/rnic"
)

// TestPassiveLatServerPolls runs read_lat and atomic_lat between two
// devices on kernel UDP sockets: the server takes no part in the run,
// and its device answers the client's READs and atomics from a busy
// poll (Side.serve) rather than from its receive goroutine woken for
// each (all 2000 on an idle machine); with -e it sleeps instead, and
// polls nothing.
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
			case !tc.events && b.Polled == 0:
				// How many it polls depends on the machine's load: a
				// busy poller that loses its CPU for longer than
				// Config.PollGrace hands the link back meanwhile.
				t.Errorf("the server polled no batch; its receive goroutine took %d", b.Own)
			}
		})
	}
}

// TestServeSleepsWhenIdle drives Side.serve directly: it answers READs by
// polling, sleeps in the link (Device.Drive) once nothing has come for
// its spin window, answers the next READ from there, and stops when told
// while it sleeps.
func TestServeSleepsWhenIdle(t *testing.T) {
	cdev, sdev := udpDevices(t, nil)
	p := Params{Test: ReadLat, Iters: 20, Size: 8}
	p.Defaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var sides [2]*Side
	for i, d := range []*rnic.Device{cdev, sdev} {
		s, err := NewSide(d, &p, p.Size, i == 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		sides[i] = s
	}
	if err := connectSides(&p, sides); err != nil {
		t.Fatal(err)
	}
	client, server := sides[0], sides[1]
	stop := server.serve()
	// serve's goroutine waits in this one's P until this one parks: as
	// RunRemote's does, in the exchange (readLat would spin).
	time.Sleep(time.Millisecond)
	ctx := context.Background()
	if _, err := readLat(ctx, client, &p); err != nil {
		t.Fatal(err)
	}
	// An idle spell sends serve to sleep in the link; the next READ
	// wakes it there, and it polls again for the READs after. On a
	// loaded machine serve may see the spell late: try a few.
	var before, after rnic.Counters
	for range 10 {
		time.Sleep(2 * spinTime)
		before = sdev.Counters()
		if _, err := readLat(ctx, client, &p); err != nil {
			t.Fatal(err)
		}
		after = sdev.Counters()
		if after.RxBatches.Driven > before.RxBatches.Driven && after.RxBatches.Polled > before.RxBatches.Polled {
			break
		}
	}
	time.Sleep(2 * spinTime)
	stop() // while it sleeps in the link
	b, a := before.RxBatches, after.RxBatches
	if a.Driven == b.Driven {
		t.Errorf("after an idle spell no batch was driven: %+v then %+v", b, a)
	}
	if a.Polled <= b.Polled {
		t.Errorf("after the first READ woke it, serve did not poll: %+v then %+v", b, a)
	}
}

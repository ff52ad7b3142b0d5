package rnic_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// TestNoGoroutineOutlivesClose: after Close, every goroutine a device and
// its link started has returned, even with traffic in flight. The test
// runs in a synctest bubble, which fails it if any goroutine started in
// the bubble is still blocked when the test function returns.
func TestNoGoroutineOutlivesClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{})
		a.link.SetFaults(mem.Faults{Delay: time.Millisecond, Reorder: 4})
		a.postSend(t, writeWR(1, a, b, 0, 1<<19), readWR(2, a, b, 0, 1<<19))
		time.Sleep(5 * time.Millisecond)
		must(t, a.dev.Close())
		must(t, b.dev.Close())
		if err := a.dev.Close(); !errors.Is(err, rnic.ErrClosed) {
			t.Fatalf("second Close: %v", err)
		}
		synctest.Wait()
	})
}

// TestCQOverflowIsVisible: a CQ too small for its completions reports the
// overrun to the poller, and the QP that overran it moves to ERR.
func TestCQOverflowIsVisible(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{depth: 4})
		wrs := make([]qp.SendWR, 4)
		for i := range wrs {
			wrs[i] = writeWR(uint64(i), a, b, 0, 8)
		}
		a.postSend(t, wrs...)
		time.Sleep(50 * time.Millisecond)
		a.postSend(t, writeWR(9, a, b, 0, 8)) // the fifth completion has no room
		waitState(t, a.qp, qp.StateErr)
		var buf [8]cq.WC
		if _, err := a.scq.Poll(buf[:]); !errors.Is(err, cq.ErrOverflow) {
			t.Fatalf("Poll after overrun: %v, want ErrOverflow", err)
		}
	})
}

// TestDropsAreCounted: packets for no QP, with a bad ICRC, or not RoCE at
// all are dropped and counted.
func TestDropsAreCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _ := newPair(t, pairOpts{})
		l, err := a.fabric.NewLink(netip.MustParseAddr("10.0.0.50"))
		must(t, err)
		defer l.Close()
		frame := func(dqpn bth.QPN) []byte {
			f := wire.Frame{
				IP:      wire.IPFields{Src: netip.MustParseAddr("10.0.0.50"), Dst: netip.MustParseAddr("10.0.0.1"), HopLimit: 64},
				SrcPort: 1, DstPort: wire.UDPPort,
				Headers: wire.Headers{BTH: bth.Fields{Opcode: bth.RCSendOnly, PKey: 0xffff, DestQP: dqpn}},
				Payload: []byte("x"),
			}
			b, err := f.Append(make([]byte, 32))
			must(t, err)
			return b
		}
		noQP := frame(0x7777)
		badICRC := frame(a.qp.Num())
		badICRC[len(badICRC)-1] ^= 1
		notRoCE := frame(a.qp.Num())
		notRoCE[32+wire.IPv4Len+3] = 0x99 // UDP destination port 4761
		must(t, l.Send([][]byte{noQP, badICRC, notRoCE}))
		deadline := time.Now().Add(2 * time.Second)
		for {
			c := a.dev.Counters()
			if c.NoQP == 1 && c.ICRCErrors == 1 && c.Malformed == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("counters %+v", c)
			}
			time.Sleep(time.Millisecond)
		}
	})
}

// TestQPNumbers: QPNs are 24-bit, never 0 or 1, and unique.
func TestQPNumbers(t *testing.T) {
	a, _ := newPair(t, pairOpts{})
	seen := map[bth.QPN]bool{a.qp.Num(): true}
	for range 100 {
		q, err := a.dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: a.pd, SendCQ: a.scq, RecvCQ: a.rcq,
			Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1}})
		must(t, err)
		n := q.Num()
		if n <= 1 || n > bth.QPNMask || seen[n] {
			t.Fatalf("QPN %#x", n)
		}
		seen[n] = true
		must(t, q.Destroy())
		if err := q.Destroy(); err == nil {
			t.Fatal("destroying twice succeeded")
		}
	}
	if _, err := a.dev.CreateQP(qp.InitAttr{Type: 9, PD: a.pd, SendCQ: a.scq, RecvCQ: a.rcq,
		Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1}}); !errors.Is(err, qp.ErrAttr) {
		t.Fatalf("an XRC QP (type 9): %v, want ErrAttr", err)
	}
}

// TestIPv6 runs the verbs over IPv6 GIDs.
func TestIPv6(t *testing.T) {
	a, b := newPair(t, pairOpts{v6: true})
	fill(a.buf[:5000], 20)
	a.postSend(t, writeWR(1, a, b, 0, 5000), readWR(2, a, b, 10000, 5000))
	status(t, wait(t, a.scq, 2, 2*time.Second), cq.StatusSuccess, cq.StatusSuccess)
	if string(a.buf[:5000]) != string(b.buf[:5000]) || string(a.buf[10000:15000]) != string(b.buf[10000:15000]) {
		t.Fatal("data differs")
	}
}

// fixedLoop is a Loop that never runs anything, for Open's checks.
type fixedLoop struct{}

func (fixedLoop) Now() time.Duration       { return 0 }
func (fixedLoop) At(time.Duration, func()) {}

// TestLoopNeedsNotifier: a device on a Loop cannot wait for its link, so
// Open refuses a link that does not say when packets arrive.
func TestLoopNeedsNotifier(t *testing.T) {
	la, err := mem.NewFabric().NewLink(netip.MustParseAddr("10.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	_, err = rnic.Open(rnic.Config{Link: la, Loop: fixedLoop{}})
	if err == nil || !strings.Contains(err.Error(), "link.Notifier") {
		t.Fatalf("Open on a Loop with a mem link: %v", err)
	}
}

// countingLink is a mem link with counters of its own.
type countingLink struct{ *mem.Link }

func (countingLink) Counters() []link.Counter {
	return []link.Counter{{Name: "test_frames", Value: 7}}
}

// TestLinkCounters: a link's own counters come after the device's, by
// name.
func TestLinkCounters(t *testing.T) {
	l, err := mem.NewFabric().NewLink(netip.MustParseAddr("10.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := rnic.Open(rnic.Config{Link: countingLink{l}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c := d.Counters()
	named := c.Named()
	if last := named[len(named)-1]; last.Name != "test_frames" || last.Value != 7 || len(c.Link) != 1 {
		t.Errorf("last counter %+v, Link %+v; want test_frames 7", last, c.Link)
	}
}

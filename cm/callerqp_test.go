package cm_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// callerQP creates an RC QP on h as a program that connects its own QPs
// would (perftest creates its test QPs before connecting them).
func callerQP(t *testing.T, h *host) *rnic.QP {
	t.Helper()
	q, err := h.dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: h.pd, SendCQ: h.cq, RecvCQ: h.cq,
		Cap: qp.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestCallerQP: Dial and Accept connect QPs the caller made
// (ConnParams.QP), one in RESET and one already in INIT; the connection
// carries data, and Close disconnects without destroying them.
func TestCallerQP(t *testing.T) {
	f := mem.NewFabric()
	a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
	qa, qb := callerQP(t, a), callerQP(t, b)
	if err := qb.Modify(&qp.Attr{State: qp.StateInit, Port: 1, AccessFlags: b.params("").Access}, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	l, err := b.m.Listen(netip.Addr{}, 18515)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pb := b.params("")
	pb.QP = qb
	accepted := acceptOne(t, l, pb, true)
	p := a.params("hello")
	p.QP = qa
	ca, err := a.m.Dial(ctxFor(t, 10*time.Second), netip.AddrPortFrom(b.dev.GIDs()[0].Unmap(), 18515), p)
	if err != nil {
		t.Fatal(err)
	}
	cb := <-accepted
	if cb == nil {
		t.FailNow()
	}
	if ca.QP() != qa || cb.QP() != qb {
		t.Fatal("the connections do not use the caller's QPs")
	}
	checkWrite(t, a, b, ca, cb)
	if err := ca.Close(); err != nil {
		t.Fatal(err)
	}
	<-cb.Disconnected()
	if err := cb.Close(); err != nil {
		t.Fatal(err)
	}
	// Still the caller's to destroy.
	if err := qa.Destroy(); err != nil {
		t.Fatalf("the active side's QP: %v", err)
	}
	if err := qb.Destroy(); err != nil {
		t.Fatalf("the passive side's QP: %v", err)
	}
}

// TestCallerQPNotReset: a QP past INIT is refused, and left alone.
func TestCallerQPNotReset(t *testing.T) {
	f := mem.NewFabric()
	a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
	ca, _ := connect(t, a, b)
	p := a.params("hello")
	p.QP = ca.QP() // in RTS
	if _, err := a.m.Dial(ctxFor(t, 5*time.Second), netip.AddrPortFrom(b.dev.GIDs()[0].Unmap(), 7174), p); err == nil {
		t.Fatal("Dial took a QP in RTS")
	}
	if st := ca.QP().State(); st != qp.StateRTS {
		t.Fatalf("the refused QP is %v now", st)
	}
}

// TestListenAgain: perftest's server listens on its port for its comm
// connection and closes the listener once it accepted it, then listens
// on the same port again for the test QPs while that connection is up.
func TestListenAgain(t *testing.T) {
	f := mem.NewFabric()
	a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
	to := netip.AddrPortFrom(b.dev.GIDs()[0].Unmap(), 18515)
	round := func(n int) (as, bs []*cm.Conn) {
		l, err := b.m.Listen(netip.Addr{}, 18515)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.m.Listen(netip.Addr{}, 18515); err == nil {
			t.Fatal("two listeners on one port")
		}
		done := make(chan []*cm.Conn, 1)
		go func() {
			var cs []*cm.Conn
			defer func() { done <- cs }()
			for range n {
				r, err := l.Accept(ctxFor(t, 10*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				c, err := r.Accept(b.params(""))
				if err != nil {
					t.Error(err)
					return
				}
				cs = append(cs, c)
			}
		}()
		for range n {
			c, err := a.m.Dial(ctxFor(t, 10*time.Second), to, a.params("hello"))
			if err != nil {
				t.Fatal(err)
			}
			as = append(as, c)
		}
		bs = <-done
		if len(bs) != n {
			t.FailNow()
		}
		for _, c := range bs {
			if err := c.Established(ctxFor(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		l.Close()
		return as, bs
	}
	comm, commB := round(1)
	tests, testsB := round(2)
	for i := range tests {
		checkWrite(t, a, b, tests[i], testsB[i])
	}
	checkWrite(t, a, b, comm[0], commB[0])
}

// TestPassiveTrafficClass: the passive side sends with the traffic class
// of the REQ's path (rdma_cm's TOS, perftest's --tos) unless it asks for
// one of its own, as the kernel's passive side takes the REQ's path.
func TestPassiveTrafficClass(t *testing.T) {
	f := mem.NewFabric()
	a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
	l, err := b.m.Listen(netip.Addr{}, 18515)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := acceptOne(t, l, b.params(""), false)
	p := a.params("hello")
	p.TrafficClass = 0x68
	ca, err := a.m.Dial(ctxFor(t, 10*time.Second), netip.AddrPortFrom(b.dev.GIDs()[0].Unmap(), 18515), p)
	if err != nil {
		t.Fatal(err)
	}
	cb := <-accepted
	if cb == nil {
		t.FailNow()
	}
	if got := ca.QP().Query().AV.TrafficClass; got != 0x68 {
		t.Errorf("the active side's traffic class is %#x", got)
	}
	if got := cb.QP().Query().AV.TrafficClass; got != 0x68 {
		t.Errorf("the passive side's traffic class is %#x, want the REQ's 0x68", got)
	}
}

// acceptOne accepts the first request to l with p in a goroutine, and
// sends the connection (nil if it failed, an error of the test's) on
// the channel it returns; with established, once the RTU came.
func acceptOne(t *testing.T, l *cm.Listener, p cm.ConnParams, established bool) <-chan *cm.Conn {
	accepted := make(chan *cm.Conn, 1)
	go func() {
		r, err := l.Accept(ctxFor(t, 10*time.Second))
		if err != nil {
			t.Error(err)
			accepted <- nil
			return
		}
		c, err := r.Accept(p)
		if err == nil && established {
			err = c.Established(ctxFor(t, 10*time.Second))
		}
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	return accepted
}

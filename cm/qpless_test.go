package cm_test

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
	wirecm "github.com/gorxe/gorxe/wire/cm"
	"github.com/gorxe/gorxe/wire/mad"
)

// TestQPLess: a connection without a QP (ConnParams.QPNum), as cmtime's
// test of connections without QPs makes: the REQ and the REP name the
// numbers given, no QP is made on either side, and the connection is
// established and disconnected as any other.
func TestQPLess(t *testing.T) {
	f := mem.NewFabric()
	a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
	var mu sync.Mutex
	named := map[mad.AttrID]bth.QPN{}
	watch := func(pkt []byte, _ uint64) bool {
		var p wire.Packet
		if wire.ParseIP(&p, pkt) != nil || p.BTH.DestQP() != rnic.GSIQPN || len(p.Payload) < mad.Len {
			return false
		}
		msg, _, err := wirecm.Decode(p.Payload[:mad.Len])
		if err != nil {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		switch msg := msg.(type) {
		case *wirecm.REQ:
			named[mad.AttrREQ] = msg.LocalQPN
		case *wirecm.REP:
			named[mad.AttrREP] = msg.LocalQPN
		case *wirecm.DREQ:
			named[mad.AttrDREQ] = msg.RemoteQPN
		}
		return false
	}
	before := []*rnic.QP{callerQP(t, a), callerQP(t, b)}
	a.link.SetFaults(mem.Faults{DropFunc: watch})
	b.link.SetFaults(mem.Faults{DropFunc: watch})

	l, err := b.m.Listen(netip.Addr{}, 7471)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := acceptOne(t, l, cm.ConnParams{QPNum: 2000}, true)
	ca, err := a.m.Dial(ctxFor(t, 10*time.Second), netip.AddrPortFrom(b.dev.GIDs()[0].Unmap(), 7471), cm.ConnParams{QPNum: 1000})
	if err != nil {
		t.Fatal(err)
	}
	cb := <-accepted
	if cb == nil {
		t.FailNow()
	}
	if ca.QP() != nil || cb.QP() != nil {
		t.Fatal("a connection without a QP has one")
	}
	if err := ca.Disconnect(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	<-cb.Disconnected()
	if err := errorsOf(ca.Close(), cb.Close()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[mad.AttrID]bth.QPN{mad.AttrREQ: 1000, mad.AttrREP: 2000, mad.AttrDREQ: 2000}
	for attr, n := range want {
		if named[attr] != n {
			t.Errorf("the %v named QP %d, want %d", attr, named[attr], n)
		}
	}
	// Devices number their QPs in turn: the QP each makes now follows
	// the one it made before the connection, so none was made for it.
	for i, h := range []*host{a, b} {
		if q := callerQP(t, h); q.Num() != before[i].Num()+1 {
			t.Errorf("the QP made after the connection is %#x, the one before %#x: the connection made a QP", uint32(q.Num()), uint32(before[i].Num()))
		}
	}
}

func errorsOf(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

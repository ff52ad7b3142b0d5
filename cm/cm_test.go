package cm_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
	wcm "github.com/gorxe/gorxe/wire/cm"
	"github.com/gorxe/gorxe/wire/mad"
)

// host is a device with a connection manager and what a connection needs.
type host struct {
	link *mem.Link
	dev  *rnic.Device
	m    *cm.Manager
	pd   *mr.PD
	cq   *cq.CQ
	buf  []byte
	mr   *mr.MR
}

// quick is a response timeout short enough for tests: 4.096 µs × 2^12 =
// 17 ms, plus rdma_cm's two packet lifetimes (0.5 s).
var quick = cm.Config{ResponseTimeout: 12, MaxRetries: 4}

func newHost(t testing.TB, f *mem.Fabric, addr string, cfg cm.Config) *host {
	t.Helper()
	return newHostAddrs(t, f, cfg, netip.MustParseAddr(addr))
}

// newHostAddrs is newHost for a device with several addresses, its GIDs
// in this order.
func newHostAddrs(t testing.TB, f *mem.Fabric, cfg cm.Config, addrs ...netip.Addr) *host {
	t.Helper()
	l, err := f.NewLink(addrs...)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := rnic.Open(rnic.Config{Link: l})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	h := &host{link: l, dev: dev, pd: dev.AllocPD(), buf: make([]byte, 1<<16)}
	if h.m, err = cm.New(dev, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.m.Close() })
	if h.cq, err = dev.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	if h.mr, err = dev.RegMR(h.pd, h.buf, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *host) params(priv string) cm.ConnParams {
	return cm.ConnParams{PD: h.pd, SendCQ: h.cq, RecvCQ: h.cq, Access: mr.RemoteWrite | mr.RemoteRead,
		Cap: qp.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}, InitiatorDepth: 4, ResponderResources: 4,
		PrivateData: []byte(priv)}
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// connect dials b's port 7174 from a and accepts it there, and returns
// both ends once both say the connection is established.
func connect(t testing.TB, a, b *host) (*cm.Conn, *cm.Conn) {
	t.Helper()
	l, err := b.m.Listen(netip.Addr{}, 7174)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	type result struct {
		c   *cm.Conn
		err error
	}
	accepted := make(chan result, 1)
	go func() {
		r, err := l.Accept(ctxFor(t, 10*time.Second))
		if err != nil {
			accepted <- result{nil, err}
			return
		}
		if got := string(r.PrivateData()[:5]); got != "hello" {
			r.Reject([]byte("bad private data " + got))
			accepted <- result{nil, errors.New("REQ private data " + got)}
			return
		}
		c, err := r.Accept(b.params("welcome"))
		if err == nil {
			err = c.Established(ctxFor(t, 10*time.Second))
		}
		accepted <- result{c, err}
	}()
	ca, err := a.m.Dial(ctxFor(t, 10*time.Second), netip.AddrPortFrom(b.dev.GIDs()[0].Unmap(), 7174), a.params("hello"))
	if err != nil {
		t.Fatal(err)
	}
	rb := <-accepted
	if rb.err != nil {
		t.Fatal(rb.err)
	}
	if got := string(ca.PrivateData()[:7]); got != "welcome" {
		t.Fatalf("REP private data %q", got)
	}
	return ca, rb.c
}

// TestConnect: a Dial and an Accept make a connection whose QPs move
// data both ways, and a Disconnect on one side ends it on both.
func TestConnect(t *testing.T) {
	f := mem.NewFabric()
	a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
	ca, cb := connect(t, a, b)
	if ca.QP().State() != qp.StateRTS || cb.QP().State() != qp.StateRTS {
		t.Fatalf("QP states %v and %v, want RTS", ca.QP().State(), cb.QP().State())
	}
	if got := cb.RemoteAddr().Addr(); got != netip.MustParseAddr("10.0.0.1") {
		t.Fatalf("the passive side sees the peer at %v", got)
	}
	copy(a.buf, "written over a cm connection")
	wr := qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey(),
		SGList: []qp.SGE{{Addr: a.mr.IOVA(), Length: 28, LKey: a.mr.LKey()}}}
	if _, err := ca.QP().PostSend([]qp.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	var wc [1]cq.WC
	if n, err := a.cq.Wait(ctxFor(t, 5*time.Second), wc[:]); n != 1 || err != nil || wc[0].Status != cq.StatusSuccess {
		t.Fatalf("WRITE: %v %v", wc[0], err)
	}
	b.mr.Writes()
	if !bytes.Equal(b.buf[:28], a.buf[:28]) {
		t.Fatal("the WRITE did not land")
	}
	if err := cb.Disconnect(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ca.Disconnected():
	case <-time.After(5 * time.Second):
		t.Fatal("the active side did not see the DREQ")
	}
	if st := ca.QP().State(); st != qp.StateErr {
		t.Fatalf("the disconnected side's QP is %v, want ERR", st)
	}
}

// TestNobodyListens: a REQ to a port nobody listens on is rejected with
// "invalid service ID" (8), as the kernel's CM rejects it, at once.
func TestNobodyListens(t *testing.T) {
	f := mem.NewFabric()
	a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
	start := time.Now()
	_, err := a.m.Dial(ctxFor(t, 10*time.Second), netip.AddrPortFrom(b.dev.GIDs()[0].Unmap(), 9), a.params("x"))
	var rej *cm.Rejected
	if !errors.As(err, &rej) || rej.Reason != wcm.RejInvalidServiceID {
		t.Fatalf("Dial to nobody: %v, want a REJ with reason 8", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatalf("the REJ took %v", time.Since(start))
	}
}

// TestReject: the listener's Reject reaches the requester as reason 28
// with its private data.
func TestReject(t *testing.T) {
	f := mem.NewFabric()
	a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
	l, err := b.m.Listen(netip.Addr{}, 5000)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if r, err := l.Accept(ctxFor(t, 10*time.Second)); err == nil {
			r.Reject([]byte("go away"))
		}
	}()
	_, err = a.m.Dial(ctxFor(t, 10*time.Second), netip.AddrPortFrom(b.dev.GIDs()[0].Unmap(), 5000), a.params("x"))
	var rej *cm.Rejected
	if !errors.As(err, &rej) || rej.Reason != wcm.RejConsumerDefined || !bytes.HasPrefix(rej.PrivateData, []byte("go away")) {
		t.Fatalf("Dial: %v, want REJ 28 with \"go away\"", err)
	}
}

// TestDeadPeer: a REQ nobody answers is sent again MaxRetries times,
// then the Dial fails with ErrTimeout; it never hangs. No REJ goes: the
// kernel's CM resets a connection whose REQ timed out to idle.
func TestDeadPeer(t *testing.T) {
	f := mem.NewFabric()
	a := newHost(t, f, "10.0.0.1", cm.Config{ResponseTimeout: 8, MaxRetries: 2})
	rejs := rejSeen(a.link)
	_, err := a.m.Dial(ctxFor(t, 20*time.Second), netip.MustParseAddrPort("10.0.0.99:7174"), a.params("x"))
	if !errors.Is(err, cm.ErrTimeout) {
		t.Fatalf("Dial to nobody at all: %v, want ErrTimeout", err)
	}
	if st := a.m.Stats(); st.Retransmitted != 2 {
		t.Fatalf("%d REQs sent again, want 2", st.Retransmitted)
	}
	if got := rejs(); len(got) != 0 {
		t.Fatalf("REJs %v sent after the retries, want none", got)
	}
}

// dropFirst has the link drop the first CM MAD it sends of the given
// attribute, and counts the MADs of that attribute it sends.
func dropFirst(l *mem.Link, attr mad.AttrID) func() int {
	var mu sync.Mutex
	n := 0
	l.SetFaults(mem.Faults{DropFunc: func(pkt []byte, _ uint64) bool {
		var p wire.Packet
		if wire.ParseIP(&p, pkt) != nil || p.BTH.DestQP() != rnic.GSIQPN || len(p.Payload) < mad.Len {
			return false
		}
		if mad.Header(p.Payload).AttrID() != attr {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		n++
		return n == 1
	}})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// TestLostMessages: a lost REQ is sent again; a lost REP is sent again
// when its timer fires; a lost RTU is sent again when the duplicate REP
// comes. Each connection still ends established on both sides.
func TestLostMessages(t *testing.T) {
	for _, tt := range []struct {
		name  string
		attr  mad.AttrID
		which func(a, b *host) *mem.Link
	}{
		{"REQ", mad.AttrREQ, func(a, b *host) *mem.Link { return a.link }},
		{"REP", mad.AttrREP, func(a, b *host) *mem.Link { return b.link }},
		{"RTU", mad.AttrRTU, func(a, b *host) *mem.Link { return a.link }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := mem.NewFabric()
			a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
			sent := dropFirst(tt.which(a, b), tt.attr)
			connect(t, a, b)
			// A lost REP may be sent again twice: when its own timer
			// fires, and for the REQ the active side sends again.
			if n := sent(); n < 2 {
				t.Fatalf("%d %ss sent, want the lost one and at least one more", n, tt.name)
			}
		})
	}
}

// TestDuplicateREQWhileAccepting: a REQ sent again while the listener has
// not answered gets an MRA, and the requester waits the MRA's time
// rather than give up.
func TestDuplicateREQWhileAccepting(t *testing.T) {
	f := mem.NewFabric()
	a, b := newHost(t, f, "10.0.0.1", cm.Config{ResponseTimeout: 8, MaxRetries: 2}), newHost(t, f, "10.0.0.2", quick)
	l, err := b.m.Listen(netip.Addr{}, 7174)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		r, err := l.Accept(ctxFor(t, 10*time.Second))
		if err != nil {
			done <- err
			return
		}
		time.Sleep(3 * time.Second) // longer than a's three tries without the MRA
		_, err = r.Accept(b.params(""))
		done <- err
	}()
	c, err := a.m.Dial(ctxFor(t, 20*time.Second), netip.AddrPortFrom(b.dev.GIDs()[0].Unmap(), 7174), a.params("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c.QP().State() != qp.StateRTS {
		t.Fatalf("QP %v", c.QP().State())
	}
}

// TestStartingPSNs: each side receives from the PSN it announced, as the
// kernel's CM has it: the active side sends from the REP's starting PSN,
// the passive side from the REQ's (a kernel rxe peer NAKs anything else).
func TestStartingPSNs(t *testing.T) {
	f := mem.NewFabric()
	a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
	var mu sync.Mutex
	var req *wcm.REQ
	var rep *wcm.REP
	firstPSN := map[string]uint32{} // the first RC packet's PSN from each side
	watch := func(side string) func([]byte, uint64) bool {
		return func(pkt []byte, _ uint64) bool {
			var p wire.Packet
			if wire.ParseIP(&p, pkt) != nil {
				return false
			}
			mu.Lock()
			defer mu.Unlock()
			if p.BTH.DestQP() == rnic.GSIQPN {
				switch m, _, _ := wcm.Decode(p.Payload); m := m.(type) {
				case *wcm.REQ:
					req = m
				case *wcm.REP:
					rep = m
				}
			} else if _, seen := firstPSN[side]; !seen && p.BTH.Opcode() == 0x04 { // RC SEND ONLY
				firstPSN[side] = uint32(p.BTH.PSN())
			}
			return false
		}
	}
	a.link.SetFaults(mem.Faults{DropFunc: watch("active")})
	b.link.SetFaults(mem.Faults{DropFunc: watch("passive")})
	ca, cb := connect(t, a, b)
	// One SEND each way: its PSN is what matters, not whether a
	// receive waits for it.
	for _, s := range []struct {
		h *host
		c *cm.Conn
	}{{a, ca}, {b, cb}} {
		sge := []qp.SGE{{Addr: s.h.mr.IOVA(), Length: 8, LKey: s.h.mr.LKey()}}
		if _, err := s.c.QP().PostSend([]qp.SendWR{{WRID: 1, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: sge}}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(firstPSN)
		mu.Unlock()
		if n == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if req == nil || rep == nil || len(firstPSN) != 2 {
		t.Fatalf("saw REQ %v, REP %v, first PSNs %v", req, rep, firstPSN)
	}
	if firstPSN["active"] != uint32(rep.StartingPSN) || firstPSN["passive"] != uint32(req.StartingPSN) {
		t.Fatalf("the active side sent from %#x, the passive from %#x; want the REP's %#x and the REQ's %#x",
			firstPSN["active"], firstPSN["passive"], uint32(rep.StartingPSN), uint32(req.StartingPSN))
	}
}

// rejSeen has the link report the reason of each REJ it sends.
func rejSeen(l *mem.Link) func() []wcm.RejReason {
	var mu sync.Mutex
	var reasons []wcm.RejReason
	l.SetFaults(mem.Faults{DropFunc: func(pkt []byte, _ uint64) bool {
		var p wire.Packet
		if wire.ParseIP(&p, pkt) == nil && p.BTH.DestQP() == rnic.GSIQPN {
			if m, _, err := wcm.Decode(p.Payload); err == nil {
				if rej, ok := m.(*wcm.REJ); ok {
					mu.Lock()
					reasons = append(reasons, rej.Reason)
					mu.Unlock()
				}
			}
		}
		return false
	}})
	return func() []wcm.RejReason {
		mu.Lock()
		defer mu.Unlock()
		return append([]wcm.RejReason(nil), reasons...)
	}
}

// rawREQ is a REQ to b's port 7174 from a's address, as a's manager would
// send it, for QP qpn.
func rawREQ(a, b *host, commID uint32, qpn uint32) []byte {
	src, dst := a.dev.GIDs()[0].Unmap(), b.dev.GIDs()[0].Unmap()
	req := &wcm.REQ{LocalCommID: commID, ServiceID: wcm.ServiceID(wcm.PortSpaceTCP, 7174), LocalCAGUID: 0x1234,
		LocalQPN: bth.QPN(qpn), TransportType: wcm.TransportRC, StartingPSN: 1, PKey: 0xffff, PathMTU: qp.MTU1024,
		RetryCount: 7, RNRRetryCount: 7, RemoteCMResponseTimeout: 12, LocalCMResponseTimeout: 12,
		Primary: wcm.Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: src, RemoteGID: dst, HopLimit: 64, LocalACKTimeout: 14}}
	hdr := wcm.CMAHeader{SrcPort: 40000, Src: src, Dst: dst}
	hdr.Encode(req.PrivateData[:])
	return wcm.Append(nil, 7, req)
}

// TestStaleREQ: a REQ from the peer of an established connection that
// names that connection's QP again is rejected as stale (10), and the
// connection goes on.
func TestStaleREQ(t *testing.T) {
	f := mem.NewFabric()
	a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
	rejs := rejSeen(b.link)
	ca, cb := connect(t, a, b)
	raw := udSenderOn(t, a.dev)
	raw.send(t, b.dev.GIDs()[0], rawREQ(a, b, 0xabcd, uint32(ca.QP().Num())))
	deadline := time.Now().Add(5 * time.Second)
	for len(rejs()) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := rejs(); len(got) != 1 || got[0] != wcm.RejStaleConn {
		t.Fatalf("REJs %v, want one stale connection (10)", got)
	}
	checkWrite(t, a, b, ca, cb)
}

// TestDuplicateREQ: a REQ sent again after the REP went out is answered
// with the same REP, and makes no second connection.
func TestDuplicateREQ(t *testing.T) {
	f := mem.NewFabric()
	a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
	var mu sync.Mutex
	var reps []wcm.REP
	b.link.SetFaults(mem.Faults{DropFunc: func(pkt []byte, _ uint64) bool {
		var p wire.Packet
		if wire.ParseIP(&p, pkt) == nil && p.BTH.DestQP() == rnic.GSIQPN {
			if m, _, err := wcm.Decode(p.Payload); err == nil {
				if rep, ok := m.(*wcm.REP); ok {
					mu.Lock()
					reps = append(reps, *rep)
					mu.Unlock()
				}
			}
		}
		return false
	}})
	l, err := b.m.Listen(netip.Addr{}, 7174)
	if err != nil {
		t.Fatal(err)
	}
	raw := udSenderOn(t, a.dev)
	req := rawREQ(a, b, 0x5555, 0x99)
	raw.send(t, b.dev.GIDs()[0], req)
	r, err := l.Accept(ctxFor(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Accept(b.params("")); err != nil {
		t.Fatal(err)
	}
	raw.send(t, b.dev.GIDs()[0], req) // the same REQ again
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(reps)
		mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reps) < 2 || reps[0] != reps[1] || reps[0].RemoteCommID != 0x5555 {
		t.Fatalf("REPs %v: want the same REP twice for comm ID 0x5555", len(reps))
	}
	select {
	case r, ok := <-acceptNow(l):
		if ok {
			t.Fatalf("the duplicate REQ made a second request: %v", r)
		}
	default:
	}
}

func acceptNow(l *cm.Listener) <-chan *cm.Request {
	c := make(chan *cm.Request, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if r, err := l.Accept(ctx); err == nil {
			c <- r
		}
		close(c)
	}()
	return c
}

// TestREQStorm: a thousand REQs from one host while a connection is up:
// the listener's backlog holds what it can, the rest are dropped, and the
// connection carries data all along.
func TestREQStorm(t *testing.T) {
	f := mem.NewFabric()
	a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
	ca, cb := connect(t, a, b) // leaves its listener on 7174, never accepting again
	raw := udSenderOn(t, a.dev)
	for i := range 1000 {
		raw.send(t, b.dev.GIDs()[0], rawREQ(a, b, uint32(0x10000+i), uint32(0x1000+i)))
		if i%100 == 0 {
			checkWrite(t, a, b, ca, cb)
		}
	}
	checkWrite(t, a, b, ca, cb)
}

// TestSIDR: ResolveUD finds the UD QP a UDP-port-space listener names,
// with its Q_Key and private data; a port nobody listens on answers
// "unsupported" at once; a lost SIDR_REQ is sent again.
func TestSIDR(t *testing.T) {
	f := mem.NewFabric()
	a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
	l, err := b.m.ListenUD(netip.Addr{}, 7174)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			r, err := l.Accept(context.Background())
			if err != nil {
				return
			}
			if string(r.PrivateData()[:2]) != "hi" {
				r.Reject(nil)
				continue
			}
			r.Answer(0x123, cm.UDPQKey, []byte("ud here"))
		}
	}()
	sent := dropFirst(a.link, mad.AttrSIDRREQ)
	svc, err := a.m.ResolveUD(ctxFor(t, 10*time.Second), netip.MustParseAddrPort("10.0.0.2:7174"), netip.Addr{}, []byte("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if svc.QPN != 0x123 || svc.QKey != cm.UDPQKey || string(svc.PrivateData[:7]) != "ud here" {
		t.Fatalf("resolved %+v", svc)
	}
	if n := sent(); n != 2 {
		t.Fatalf("%d SIDR_REQs sent, want the lost one and one more", n)
	}
	var se *cm.ErrSIDR
	if _, err := a.m.ResolveUD(ctxFor(t, 10*time.Second), netip.MustParseAddrPort("10.0.0.2:9"), netip.Addr{}, nil); !errors.As(err, &se) || se.Status != wcm.SIDRUnsupported {
		t.Fatalf("resolving a port nobody listens on: %v", err)
	}
	if _, err := a.m.ResolveUD(ctxFor(t, 10*time.Second), netip.MustParseAddrPort("10.0.0.2:7174"), netip.Addr{}, []byte("no")); !errors.As(err, &se) || se.Status != wcm.SIDRReject {
		t.Fatalf("a rejected resolution: %v", err)
	}
}

// TestConnectAndClose: Connect returns with the REQ sent, before any
// answer; Established then waits for the handshake's end. Closing a
// connection whose handshake is under way abandons it with a REJ
// (timeout, 4), which ends the peer's side too, and releases the QP.
func TestConnectAndClose(t *testing.T) {
	f := mem.NewFabric()
	a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
	l, err := b.m.Listen(netip.Addr{}, 7000)
	if err != nil {
		t.Fatal(err)
	}
	raddr := netip.AddrPortFrom(b.dev.GIDs()[0].Unmap(), 7000)
	ca, err := a.m.Connect(raddr, a.params("x"))
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ca.Established(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Established before anyone accepted: %v, want the done ctx's error", err)
	}
	r, err := l.Accept(ctxFor(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cb, err := r.Accept(b.params("y"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Established(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := cb.Established(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := ca.Established(done); err != nil {
		t.Fatalf("Established with a done ctx after the handshake: %v", err)
	}

	// A second attempt, closed while B has not answered.
	ca2, err := a.m.Connect(raddr, a.params("x"))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.Accept(ctxFor(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	q := ca2.QP()
	heard := b.m.Stats().Received
	if err := ca2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ca2.Established(done); !errors.Is(err, cm.ErrClosed) {
		t.Fatalf("a closed attempt: %v, want ErrClosed", err)
	}
	if err := q.Destroy(); err == nil {
		t.Fatal("the abandoned attempt's QP is still there")
	}
	// B's side of it ends with the REJ: accepting it fails.
	for deadline := time.Now().Add(5 * time.Second); b.m.Stats().Received == heard; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no REJ reached B")
		}
	}
	var rej *cm.Rejected
	if _, err := r2.Accept(b.params("y")); !errors.As(err, &rej) || rej.Reason != wcm.RejTimeout {
		t.Fatalf("accepting a request A abandoned: %v, want its REJ (timeout)", err)
	}
}

// TestDisconnectWithConnectionContext: a Disconnect whose ctx ends when
// the connection does (a context that watches Disconnected, as rping's
// waits use) returns nil once the DREP has come, though the ctx ends at
// the same moment.
func TestDisconnectWithConnectionContext(t *testing.T) {
	for i := range 50 {
		f := mem.NewFabric()
		a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
		ca, cb := connect(t, a, b)
		// Done is Disconnected itself, so both of Disconnect's cases
		// are ready at once, every round.
		if err := ca.Disconnect(connCtx{context.Background(), ca}); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		ca.Close()
		cb.Close()
	}
}

// connCtx is a context that ends when its connection does.
type connCtx struct {
	context.Context
	c *cm.Conn
}

func (x connCtx) Done() <-chan struct{} { return x.c.Disconnected() }

func (x connCtx) Err() error {
	select {
	case <-x.c.Disconnected():
		return context.Canceled
	default:
		return nil
	}
}

// TestPathMTU: the passive side takes the REQ's path MTU as the path's,
// whatever its own device carries beyond it, so that both ends send
// packets of one size (C9-92); a REQ whose path MTU is more than the
// passive side may use is refused, not met with a smaller MTU.
func TestPathMTU(t *testing.T) {
	f := mem.NewFabric()
	a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
	l, err := b.m.Listen(netip.Addr{}, 5000)
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan error, 1)
	capped := make(chan *cm.Conn, 1)
	go func() {
		for _, limit := range []qp.MTU{0, qp.MTU1024} {
			r, err := l.Accept(ctxFor(t, 10*time.Second))
			if err != nil {
				accepted <- err
				return
			}
			p := b.params("")
			p.MTU = limit
			c, err := r.Accept(p)
			if limit == 0 {
				capped <- c
			}
			accepted <- err
		}
	}()
	p := a.params("")
	p.MTU = qp.MTU2048
	ca, err := a.m.Dial(ctxFor(t, 10*time.Second), netip.AddrPortFrom(b.dev.GIDs()[0].Unmap(), 5000), p)
	if err != nil || <-accepted != nil {
		t.Fatalf("Dial: %v", err)
	}
	cb := <-capped
	if ga, gb := ca.QP().Query().PathMTU, cb.QP().Query().PathMTU; ga != qp.MTU2048 || gb != qp.MTU2048 {
		t.Fatalf("path MTUs %v and %v, want the REQ's, 2048, on both", ga, gb)
	}
	_, err = a.m.Dial(ctxFor(t, 10*time.Second), netip.AddrPortFrom(b.dev.GIDs()[0].Unmap(), 5000), p)
	var rej *cm.Rejected
	if !errors.As(err, &rej) {
		t.Fatalf("a REQ for more than the passive side's MTU: Dial = %v, want a REJ", err)
	}
	if err := <-accepted; err == nil || !strings.Contains(err.Error(), "path MTU 2048 is more than this side carries (1024)") {
		t.Fatalf("Accept = %v", err)
	}
}

// TestRetryCounts: the retry counts of the dialling side's ConnParams go
// in the REQ and to both QPs (RetryNone as none, above 7 as 7); the RNR
// retry count of the accepting side's goes in the REP and to the dialling
// side's QP.
func TestRetryCounts(t *testing.T) {
	for _, c := range []struct {
		retry, rnr, acceptRNR uint8
		wantRetry, wantRNR    uint8 // in the REQ, and the QPs'
		wantAcceptRNR         uint8
	}{
		{0, 0, 0, 7, 7, 7},
		{3, 2, 5, 3, 2, 5},
		{cm.RetryNone, cm.RetryNone, 1, 0, 0, 1},
		{9, 200, cm.RetryNone, 7, 7, 0},
	} {
		f := mem.NewFabric()
		a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
		var mu sync.Mutex
		var req *wcm.REQ
		var rep *wcm.REP
		watch := func(pkt []byte, _ uint64) bool {
			var p wire.Packet
			if wire.ParseIP(&p, pkt) != nil || p.BTH.DestQP() != rnic.GSIQPN {
				return false
			}
			mu.Lock()
			defer mu.Unlock()
			switch m, _, _ := wcm.Decode(p.Payload); m := m.(type) {
			case *wcm.REQ:
				req = m
			case *wcm.REP:
				rep = m
			}
			return false
		}
		a.link.SetFaults(mem.Faults{DropFunc: watch})
		b.link.SetFaults(mem.Faults{DropFunc: watch})
		l, err := b.m.Listen(netip.Addr{}, 7174)
		if err != nil {
			t.Fatal(err)
		}
		accepted := make(chan *cm.Conn, 1)
		go func() {
			r, err := l.Accept(ctxFor(t, 10*time.Second))
			if err != nil {
				accepted <- nil
				return
			}
			p := b.params("")
			p.RNRRetryCount = c.acceptRNR
			conn, err := r.Accept(p)
			if err != nil {
				conn = nil
			}
			accepted <- conn
		}()
		p := a.params("")
		p.RetryCount, p.RNRRetryCount = c.retry, c.rnr
		ca, err := a.m.Dial(ctxFor(t, 10*time.Second), netip.AddrPortFrom(b.dev.GIDs()[0].Unmap(), 7174), p)
		if err != nil {
			t.Fatal(err)
		}
		cb := <-accepted
		l.Close()
		if cb == nil {
			t.Fatal("accept failed")
		}
		mu.Lock()
		if req == nil || rep == nil || req.RetryCount != c.wantRetry || req.RNRRetryCount != c.wantRNR || rep.RNRRetryCount != c.wantAcceptRNR {
			t.Errorf("%+v: REQ %+v REP %+v", c, req, rep)
		}
		mu.Unlock()
		qa, qb := ca.QP().Query(), cb.QP().Query()
		if qa.RetryCnt != c.wantRetry || qb.RetryCnt != c.wantRetry || qb.RNRRetry != c.wantRNR || qa.RNRRetry != c.wantAcceptRNR {
			t.Errorf("%+v: dialling QP retry %d rnr %d, accepting QP retry %d rnr %d", c, qa.RetryCnt, qa.RNRRetry, qb.RetryCnt, qb.RNRRetry)
		}
	}
}

// TestLinkLocal: a connection and a SIDR resolution to a link-local
// address written with its zone, as librdmacm's tools take one
// (fe80::2%eth0), leave from the device's link-local address, not its
// first of the family, and a listener on a zoned address hears them.
func TestLinkLocal(t *testing.T) {
	f := mem.NewFabric()
	a := newHostAddrs(t, f, quick, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fe80::1"))
	b := newHostAddrs(t, f, quick, netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::2"), netip.MustParseAddr("fe80::2"))
	l, err := b.m.Listen(netip.MustParseAddr("fe80::2%eth0"), 7174)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan error, 1)
	go func() {
		r, err := l.Accept(ctxFor(t, 10*time.Second))
		if err == nil {
			_, err = r.Accept(b.params("welcome"))
		}
		accepted <- err
	}()
	c, err := a.m.Dial(ctxFor(t, 10*time.Second), netip.MustParseAddrPort("[fe80::2%eth0]:7174"), a.params("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	if got, want := c.LocalAddr(), netip.MustParseAddr("fe80::1"); got != want {
		t.Errorf("the connection leaves from %v, want %v", got, want)
	}
	if got := c.RemoteAddr().Addr(); got != netip.MustParseAddr("fe80::2") {
		t.Errorf("the connection's peer is %v", got)
	}

	lu, err := b.m.ListenUD(netip.MustParseAddr("fe80::2%eth0"), 7175)
	if err != nil {
		t.Fatal(err)
	}
	defer lu.Close()
	go func() {
		if r, err := lu.Accept(context.Background()); err == nil {
			r.Answer(0x123, cm.UDPQKey, nil)
		}
	}()
	svc, err := a.m.ResolveUD(ctxFor(t, 10*time.Second), netip.MustParseAddrPort("[fe80::2%eth0]:7175"), netip.Addr{}, nil)
	if err != nil || svc.QPN != 0x123 {
		t.Fatalf("ResolveUD: %+v, %v", svc, err)
	}
	if got := a.m.LocalFor(netip.MustParseAddr("fd00::9")); got != netip.MustParseAddr("fd00::1") {
		t.Errorf("LocalFor(fd00::9) = %v, want fd00::1", got)
	}
}

// dropAll drops every CM message of attr that l sends, and counts, by
// attribute, the CM messages l sends.
func dropAll(l *mem.Link, attr mad.AttrID) (sent func(mad.AttrID) int) {
	var mu sync.Mutex
	n := map[mad.AttrID]int{}
	l.SetFaults(mem.Faults{DropFunc: func(pkt []byte, _ uint64) bool {
		var p wire.Packet
		if wire.ParseIP(&p, pkt) != nil || p.BTH.DestQP() != rnic.GSIQPN || len(p.Payload) < mad.Len {
			return false
		}
		id := mad.Header(p.Payload).AttrID()
		mu.Lock()
		defer mu.Unlock()
		n[id]++
		return id == attr
	}})
	return func(id mad.AttrID) int {
		mu.Lock()
		defer mu.Unlock()
		return n[id]
	}
}

// connectNoRTU connects a (active) to b (passive) with every RTU a sends
// dropped: a's connection is established, b's waits for the RTU. It
// returns both hosts and ends and counts, by attribute, of the CM
// messages each side sent.
func connectNoRTU(t *testing.T) (a, b *host, ca, cb *cm.Conn, aSent, bSent func(mad.AttrID) int) {
	t.Helper()
	f := mem.NewFabric()
	a, b = newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
	aSent, bSent = dropAll(a.link, mad.AttrRTU), dropAll(b.link, 0)
	l, err := b.m.Listen(netip.Addr{}, 7174)
	if err != nil {
		t.Fatal(err)
	}
	accepted := acceptOne(t, l, b.params(""), false)
	ca, err = a.m.Dial(ctxFor(t, 10*time.Second), netip.AddrPortFrom(b.dev.GIDs()[0].Unmap(), 7174), a.params("hello"))
	if err != nil {
		t.Fatal(err)
	}
	cb = <-accepted
	if cb == nil {
		t.FailNow()
	}
	return a, b, ca, cb, aSent, bSent
}

// TestDataBeforeRTU: the active side's first message reaches the passive
// side before its RTU (here the RTU is lost, every time). The passive
// side takes the data for the RTU, as a NIC's communication-established
// event has the kernel's CM do, so that a program that disconnects as
// soon as it has received (rdma_xserver) disconnects: a DREQ the active
// side answers, where it rejected a connection its peer held
// established, and that peer, sending DREQs to a side that had closed,
// took its retries (77 s at rdma_cm's timeouts) to give up.
func TestDataBeforeRTU(t *testing.T) {
	a, b, ca, cb, aSent, bSent := connectNoRTU(t)
	if _, err := cb.QP().PostRecv([]qp.RecvWR{{WRID: 7, SGList: []qp.SGE{{Addr: b.mr.IOVA(), Length: 64, LKey: b.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	send := qp.SendWR{WRID: 1, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: []qp.SGE{{Addr: a.mr.IOVA(), Length: 16, LKey: a.mr.LKey()}}}
	if _, err := ca.QP().PostSend([]qp.SendWR{send}); err != nil {
		t.Fatal(err)
	}
	var wc [1]cq.WC
	if n, err := b.cq.Wait(ctxFor(t, 5*time.Second), wc[:]); n != 1 || err != nil || wc[0].Status != cq.StatusSuccess {
		t.Fatalf("the passive side's receive: %v %v", wc[0], err)
	}
	if aSent(mad.AttrRTU) == 0 {
		t.Fatal("the active side sent no RTU")
	}
	start := time.Now()
	if err := cb.Disconnect(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Disconnect: %v", err)
	}
	select {
	case <-ca.Disconnected():
	case <-time.After(5 * time.Second):
		t.Fatal("the active side's connection did not end")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the disconnect took %v: the active side waited out its retries", d)
	}
	if bSent(mad.AttrREJ) != 0 || bSent(mad.AttrDREQ) != 1 || aSent(mad.AttrDREP) != 1 {
		t.Errorf("passive side sent %d REJ and %d DREQ, active side %d DREP: want a DREQ answered, no REJ",
			bSent(mad.AttrREJ), bSent(mad.AttrDREQ), aSent(mad.AttrDREP))
	}
}

// TestRejectedWhenEstablished: the passive side closes its connection
// before the RTU reaches it, with nothing received, and rejects it (REJ
// for the REP, reason consumer defined, as the kernel's rdma_destroy_id
// in REP_SENT). The
// active side, established since it sent the RTU, ends its connection
// on that REJ at once: its QP in ERR, Disconnected closed, and a
// Disconnect that returns without sending DREQs nobody will answer.
func TestRejectedWhenEstablished(t *testing.T) {
	_, b, ca, cb, aSent, _ := connectNoRTU(t)
	rejs := rejSeen(b.link)
	cb.Close()
	select {
	case <-ca.Disconnected():
	case <-time.After(5 * time.Second):
		t.Fatal("the REJ did not end the active side's connection")
	}
	if got := rejs(); len(got) != 1 || got[0] != wcm.RejConsumerDefined {
		t.Fatalf("the passive side sent REJs %v, want one, consumer defined (28)", got)
	}
	if st := ca.QP().State(); st != qp.StateErr {
		t.Errorf("the active side's QP is %v, want ERR", st)
	}
	start := time.Now()
	if err := ca.Disconnect(ctxFor(t, 10*time.Second)); err != nil {
		t.Errorf("Disconnect: %v", err)
	}
	if d := time.Since(start); d > 100*time.Millisecond || aSent(mad.AttrDREQ) != 0 {
		t.Errorf("Disconnect took %v and sent %d DREQs: want at once, none", d, aSent(mad.AttrDREQ))
	}
}

// deadPeer connects a to b and then has b's link drop everything it
// sends, as if b's process had been killed (no DREQ, no DREP ever). The
// retries are rdma_cm's 15, each 0.55 s here: a side that waited them
// out would wait 9 s. It returns a's end and a count, by attribute, of
// the CM messages a sends.
func deadPeer(t *testing.T) (a *host, ca *cm.Conn, aSent func(mad.AttrID) int) {
	t.Helper()
	f := mem.NewFabric()
	cfg := cm.Config{ResponseTimeout: 12, MaxRetries: 15}
	a, b := newHost(t, f, "10.0.0.1", cfg), newHost(t, f, "10.0.0.2", cfg)
	ca, _ = connect(t, a, b)
	aSent = dropAll(a.link, 0)
	b.link.SetFaults(mem.Faults{DropFunc: func([]byte, uint64) bool { return true }})
	return a, ca, aSent
}

// closed reports whether ch closes within d.
func closed(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	default:
	}
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// TestCloseDeadPeer: Close is rdma_destroy_id: it sends an established
// connection's peer one DREQ and waits for no DREP, so that closing the
// connection of a peer that died returns at once, where it waited out
// the retries (77 s at rdma_cm's timeouts); and it ends a Disconnect
// that is retrying, which sends nothing more.
func TestCloseDeadPeer(t *testing.T) {
	t.Run("established", func(t *testing.T) {
		_, ca, aSent := deadPeer(t)
		q := ca.QP()
		returned := make(chan struct{})
		go func() { ca.Close(); close(returned) }()
		if !closed(returned, 3*time.Second) {
			t.Fatal("Close waited for the dead peer")
		}
		if !closed(ca.Disconnected(), 0) {
			t.Error("Disconnected is not closed after Close")
		}
		if err := q.Destroy(); err == nil {
			t.Error("the connection's QP is still there")
		}
		time.Sleep(1200 * time.Millisecond) // two retry periods
		if n := aSent(mad.AttrDREQ); n != 1 {
			t.Errorf("%d DREQs sent, want 1 and no retries", n)
		}
	})
	t.Run("disconnecting", func(t *testing.T) {
		_, ca, aSent := deadPeer(t)
		disconnected := make(chan error, 1)
		go func() { disconnected <- ca.Disconnect(ctxFor(t, 30*time.Second)) }()
		for deadline := time.Now().Add(5 * time.Second); aSent(mad.AttrDREQ) == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("Disconnect sent no DREQ")
			}
		}
		ca.Close()
		select {
		case err := <-disconnected:
			if err != nil {
				t.Errorf("Disconnect ended by Close: %v", err)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("Close did not end the Disconnect waiting for the dead peer")
		}
		sent := aSent(mad.AttrDREQ)
		time.Sleep(1200 * time.Millisecond)
		if n := aSent(mad.AttrDREQ); n != sent {
			t.Errorf("%d DREQs sent after Close, want none", n-sent)
		}
	})
}

// TestManagerCloseSendsDREQ: closing the manager (the program exits) is
// the kernel's rdma_cm closing a program's file: each established
// connection is destroyed with a DREQ, so the peer's connection ends
// too, where before it was left established, its program waiting.
func TestManagerCloseSendsDREQ(t *testing.T) {
	f := mem.NewFabric()
	a, b := newHost(t, f, "10.0.0.1", quick), newHost(t, f, "10.0.0.2", quick)
	ca, cb := connect(t, a, b)
	aSent := dropAll(a.link, 0)
	if err := a.m.Close(); err != nil {
		t.Fatal(err)
	}
	if aSent(mad.AttrDREQ) != 1 {
		t.Errorf("%d DREQs sent, want 1", aSent(mad.AttrDREQ))
	}
	if !closed(cb.Disconnected(), 5*time.Second) {
		t.Fatal("the peer's connection did not end")
	}
	if st := cb.QP().State(); st != qp.StateErr {
		t.Errorf("the peer's QP is %v, want ERR", st)
	}
	if st := ca.QP().State(); st != qp.StateErr {
		t.Errorf("the closed manager's connection's QP is %v, want ERR", st)
	}
}

// TestRTUTimeout: a passive side whose REP's retries run out with no RTU
// (and no data) ends its connection with ErrTimeout and sends no REJ, as
// the kernel's CM, which resets the connection to idle
// (IB_CM_REP_ERROR, rdma_cm's UNREACHABLE).
func TestRTUTimeout(t *testing.T) {
	_, b, _, cb, _, _ := connectNoRTU(t)
	rejs := rejSeen(b.link)
	if err := cb.Established(ctxFor(t, 10*time.Second)); !errors.Is(err, cm.ErrTimeout) {
		t.Fatalf("the passive side without an RTU: %v, want ErrTimeout", err)
	}
	if got := rejs(); len(got) != 0 {
		t.Errorf("REJs %v sent, want none", got)
	}
}

// TestCloseRejectsRequest: a request the program took from its listener
// and never answered is rejected (28, consumer defined) when the manager
// closes, as the kernel's cm_destroy_id rejects a REQ_RCVD connection, so
// that the active side's Dial ends at once instead of after its retries.
func TestCloseRejectsRequest(t *testing.T) {
	f := mem.NewFabric()
	a, b := newHost(t, f, "10.0.0.1", cm.Config{}), newHost(t, f, "10.0.0.2", cm.Config{})
	l, err := b.m.Listen(netip.Addr{}, 7174)
	if err != nil {
		t.Fatal(err)
	}
	dialed := make(chan error, 1)
	go func() {
		_, err := a.m.Dial(ctxFor(t, 30*time.Second), netip.AddrPortFrom(b.dev.GIDs()[0].Unmap(), 7174), a.params("x"))
		dialed <- err
	}()
	if _, err := l.Accept(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	rejs := rejSeen(b.link)
	b.m.Close()
	select {
	case err := <-dialed:
		var rej *cm.Rejected
		if !errors.As(err, &rej) || rej.Reason != wcm.RejConsumerDefined {
			t.Fatalf("Dial: %v, want a REJ, consumer defined (28)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the Dial still waits after the passive side closed")
	}
	if got := rejs(); len(got) != 1 {
		t.Errorf("REJs %v, want one", got)
	}

	// A request still in the listener's backlog when the manager
	// closes is rejected once too.
	c := newHost(t, f, "10.0.0.3", cm.Config{})
	if _, err := c.m.Listen(netip.Addr{}, 7174); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := a.m.Dial(ctxFor(t, 30*time.Second), netip.AddrPortFrom(c.dev.GIDs()[0].Unmap(), 7174), a.params("x"))
		dialed <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); c.m.Stats().Received == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no REQ reached the listener")
		}
	}
	rejs = rejSeen(c.link)
	c.m.Close()
	if err := <-dialed; !errors.As(err, new(*cm.Rejected)) {
		t.Errorf("Dial to a backlog closed: %v, want a REJ", err)
	}
	if got := rejs(); len(got) != 1 || got[0] != wcm.RejConsumerDefined {
		t.Errorf("REJs %v for the request in the backlog, want one, 28", got)
	}
}

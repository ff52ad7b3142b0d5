package rnic_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorxe/gorxe/congestion"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/link/udp"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire/bth"
)

// side is one end of a connected RC pair.
type side struct {
	dev    *rnic.Device
	fabric *mem.Fabric
	link   *mem.Link
	pd     *mr.PD
	scq    *cq.CQ
	rcq    *cq.CQ
	qp     *rnic.QP
	buf    []byte
	base   int // offset of buf in the registered region
	mr     *mr.MR
	traceM sync.Mutex
	trace  []trace.Event
}

// pairOpts tune newPair.
type pairOpts struct {
	mtu         qp.MTU
	bufSize     int
	timeout     uint8
	retryCnt    uint8 // 0 means 7; use noRetry for none
	rnrRetry    uint8
	minRNRTimer uint8
	access      mr.Access
	maxRd       uint8
	sqPSN       bth.PSN // the first PSN each side sends; 0 means 0x123456
	v6          bool
	window      int
	depth       int
	noProbe     bool
	// packetTrace, when set, sees side A's packets (rnic.Config.PacketTrace).
	packetTrace func(dir rnic.Direction, pkt []byte)
	pollGrace   time.Duration // rnic.Config.PollGrace
	// udp puts the two devices on kernel UDP links on 127.0.0.1 and
	// 127.0.0.2 instead of an in-memory fabric.
	udp bool
	// sendsA, with udp, sees each batch side A's device hands its link.
	sendsA func(pkts [][]byte)
	// deferA, with udp, becomes side A's link around its UDP link: a
	// link.Deferrer.
	deferA *deferringLink
	// joinA, with udp, becomes side A's link around its UDP link: one
	// that records which batches the device has it join.
	joinA *joinWatchLink
	// wakeA, with udp, becomes side A's link around its UDP link: one
	// that counts the device's WakeReceive calls.
	wakeA *wakeCountLink
	// cheapPollB, with udp, becomes side B's link around its UDP link:
	// one whose polls say they are cheap (link.FlagCheapPoll).
	cheapPollB *cheapPollLink
	// watchB, with udp, becomes side B's link around its UDP link: one
	// that calls a function before each sleep in WaitReceive.
	watchB *waitWatchLink
	// wrapA, when set, makes side A's link (of the in-memory fabric)
	// the one it returns around it.
	wrapA func(link.Link) link.Link
	// busyPoll is both devices' rnic.Config.BusyPoll.
	busyPoll time.Duration
	// noTrace leaves the devices without a Trace function, as a program
	// that does not trace runs them.
	noTrace bool
	// cc, ccParams and lineRate are both devices' congestion control
	// (rnic.Config's CC, CCParams, LineRate).
	cc       rnic.CCMode
	ccParams congestion.Params
	lineRate congestion.Rate
	// trafficClassA is side A's address vector's traffic class.
	trafficClassA uint8
}

// recordingLink is a UDP link whose Sends are seen first.
type recordingLink struct {
	*udp.Link
	sends func(pkts [][]byte)
}

func (l recordingLink) Send(pkts [][]byte) error {
	l.sends(pkts)
	return l.Link.Send(pkts)
}

func (l recordingLink) SendJoined(pkts [][]byte) error {
	l.sends(pkts)
	return l.Link.SendJoined(pkts)
}

// failingLink is a link whose Sends fail, sending nothing, while fail
// is set.
type failingLink struct {
	link.Link
	fail *atomic.Bool
}

func (l failingLink) Send(pkts [][]byte) error {
	if l.fail.Load() {
		return errors.New("failingLink: refused")
	}
	return l.Link.Send(pkts)
}

func (o *pairOpts) defaults() {
	if o.mtu == 0 {
		o.mtu = qp.MTU1024
	}
	if o.bufSize == 0 {
		o.bufSize = 1 << 20
	}
	if o.timeout == 0 {
		o.timeout = 14 // 67 ms, perftest's default
	}
	if o.retryCnt == 0 {
		o.retryCnt = 7
	}
	if o.access == 0 {
		o.access = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic
	}
	if o.maxRd == 0 {
		o.maxRd = 16
	}
	if o.sqPSN == 0 {
		o.sqPSN = 0x123456
	}
	if o.depth == 0 {
		o.depth = 4096
	}
}

// newPair opens two devices on one in-memory fabric and connects an RC QP
// on each to the other, RESET -> INIT -> RTR -> RTS, as perftest does.
func newPair(t testing.TB, o pairOpts) (a, b *side) {
	t.Helper()
	o.defaults()
	f := mem.NewFabric()
	addrs := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")}
	if o.v6 {
		addrs = []netip.Addr{netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")}
	}
	var links [2]link.Link
	if o.udp {
		links = udpLinks(t)
		if o.sendsA != nil {
			links[0] = recordingLink{links[0].(*udp.Link), o.sendsA}
		}
		if o.deferA != nil {
			o.deferA.Link = links[0].(*udp.Link)
			links[0] = o.deferA
		}
		if o.joinA != nil {
			o.joinA.Link = links[0].(*udp.Link)
			links[0] = o.joinA
		}
		if o.wakeA != nil {
			o.wakeA.Link = links[0].(*udp.Link)
			links[0] = o.wakeA
		}
		if o.cheapPollB != nil {
			o.cheapPollB.Link = links[1].(*udp.Link)
			links[1] = o.cheapPollB
		}
		if o.watchB != nil {
			o.watchB.Link = links[1].(*udp.Link)
			links[1] = o.watchB
		}
	}
	sides := make([]*side, 2)
	for i := range sides {
		s := &side{fabric: f}
		l := links[i]
		if l == nil {
			ml, err := f.NewLink(addrs[i])
			if err != nil {
				t.Fatal(err)
			}
			s.link, l = ml, ml
			if i == 0 && o.wrapA != nil {
				l = o.wrapA(l)
			}
		}
		name := []string{"A", "B"}[i]
		cfg := rnic.Config{Link: l, Name: name, Window: o.window, NoTailProbe: o.noProbe, PollGrace: o.pollGrace, BusyPoll: o.busyPoll,
			CC: o.cc, CCParams: o.ccParams, LineRate: o.lineRate, Trace: func(ev trace.Event) {
				s.traceM.Lock()
				s.trace = append(s.trace, ev)
				s.traceM.Unlock()
			}}
		if o.noTrace {
			cfg.Trace = nil
		}
		if i == 0 {
			cfg.PacketTrace = o.packetTrace
		}
		if sp, ok := l.(link.SourcePorter); ok {
			cfg.Port = sp.SourcePort() // a UDP link's port is the RoCE port too
		}
		var err error
		s.dev, err = rnic.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.dev.Close() })
		s.pd = s.dev.AllocPD()
		if s.scq, err = s.dev.CreateCQ(o.depth); err != nil {
			t.Fatal(err)
		}
		if s.rcq, err = s.dev.CreateCQ(o.depth); err != nil {
			t.Fatal(err)
		}
		s.buf = make([]byte, o.bufSize)
		if s.mr, err = s.dev.RegMR(s.pd, s.buf, o.access); err != nil {
			t.Fatal(err)
		}
		s.qp, err = s.dev.CreateQP(qp.InitAttr{
			Type: qp.TypeRC, PD: s.pd, SendCQ: s.scq, RecvCQ: s.rcq,
			Cap: qp.Cap{MaxSendWR: uint32(o.depth), MaxRecvWR: uint32(o.depth), MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 256},
		})
		if err != nil {
			t.Fatal(err)
		}
		sides[i] = s
	}
	for i, s := range sides {
		peer := sides[1-i]
		must(t, s.qp.Modify(&qp.Attr{State: qp.StateInit, Port: 1, AccessFlags: o.access},
			qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags))
		var tc uint8
		if i == 0 {
			tc = o.trafficClassA
		}
		must(t, s.qp.Modify(&qp.Attr{
			State: qp.StateRTR, PathMTU: o.mtu, DestQPNum: peer.qp.Num(), RQPSN: o.sqPSN,
			MaxDestRdAtomic: o.maxRd, MinRNRTimer: o.minRNRTimer,
			AV: qp.AddressVector{DGID: peer.dev.GIDs()[0], HopLimit: 64, TrafficClass: tc},
		}, qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN|qp.AttrMaxDestRdAtomic|qp.AttrMinRNRTimer))
	}
	for _, s := range sides {
		must(t, s.qp.Modify(&qp.Attr{
			State: qp.StateRTS, SQPSN: o.sqPSN, Timeout: o.timeout, RetryCnt: o.retryCnt,
			RNRRetry: o.rnrRetry, MaxRdAtomic: o.maxRd,
		}, qp.AttrState|qp.AttrSQPSN|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|qp.AttrMaxQPRdAtomic))
	}
	return sides[0], sides[1]
}

// udpLinks opens kernel UDP links on 127.0.0.1 and 127.0.0.2, on one
// port both addresses have free, as RoCE v2 peers share theirs.
func udpLinks(t testing.TB) [2]link.Link {
	t.Helper()
	ls, err := udp.LoopbackPair(udp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return [2]link.Link{ls[0], ls[1]}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// addr returns the IOVA of byte off of the side's registered buffer.
func (s *side) addr(off int) uint64 { return s.mr.IOVA() + uint64(s.base+off) }

// sge returns an SGE for n bytes at off of the side's buffer.
func (s *side) sge(off, n int) qp.SGE {
	return qp.SGE{Addr: s.addr(off), Length: uint32(n), LKey: s.mr.LKey()}
}

func (s *side) postSend(t testing.TB, wrs ...qp.SendWR) {
	t.Helper()
	if _, err := s.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
}

func (s *side) postRecv(t testing.TB, wrs ...qp.RecvWR) {
	t.Helper()
	if _, err := s.qp.PostRecv(wrs); err != nil {
		t.Fatal(err)
	}
}

// wait returns n completions from c, failing the test after timeout.
func wait(t testing.TB, c *cq.CQ, n int, timeout time.Duration) []cq.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out := make([]cq.WC, 0, n)
	buf := make([]cq.WC, 64)
	for len(out) < n {
		k, err := c.Wait(ctx, buf[:min(len(buf), n-len(out))])
		if err != nil {
			t.Fatalf("waiting for %d completions, have %d %v: %v", n, len(out), out, err)
		}
		out = append(out, buf[:k]...)
	}
	return out
}

// expectNone checks that no completion arrives within d.
func expectNone(t testing.TB, c *cq.CQ, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	var buf [4]cq.WC
	if n, _ := c.Poll(buf[:]); n > 0 {
		t.Fatalf("unexpected completions %v", buf[:n])
	}
}

// traceText returns the side's trace as --trace prints it, a line an
// event.
func (s *side) traceText() string {
	s.traceM.Lock()
	defer s.traceM.Unlock()
	var b strings.Builder
	for _, ev := range s.trace {
		fmt.Fprintf(&b, "%s qp %#x: %v\n", ev.Device, ev.QP, ev)
	}
	return b.String()
}

// events returns how many events of kind the side's trace holds.
func (s *side) events(kind trace.Kind) int {
	s.traceM.Lock()
	defer s.traceM.Unlock()
	n := 0
	for _, ev := range s.trace {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

// TestSendErrCounted: packets the link fails to send are lost, as on a
// wire, and counted in send_err, as rxe counts the packets it failed to
// transmit; the transport then recovers them.
func TestSendErrCounted(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	a, b := newPair(t, pairOpts{timeout: 8, wrapA: func(l link.Link) link.Link { return failingLink{l, &fail} }})
	a.postSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, SGList: []qp.SGE{a.sge(0, 4096)},
		RemoteAddr: b.addr(0), RKey: b.mr.RKey()})
	time.Sleep(20 * time.Millisecond)
	fail.Store(false)
	if wc := wait(t, a.scq, 1, 10*time.Second); wc[0].Status != cq.StatusSuccess {
		t.Fatalf("WRITE completed with %v", wc[0].Status)
	}
	c := a.dev.Counters()
	if c.SendErr < 4 {
		t.Errorf("send_err %d, want the WRITE's 4 packets at least", c.SendErr)
	}
	for _, n := range c.Named() {
		if n.Name == "send_err" && n.Value != c.SendErr {
			t.Errorf("send_err named %d, counted %d", n.Value, c.SendErr)
		}
	}
	if b.dev.Counters().SendErr != 0 {
		t.Errorf("the other side counted send errors")
	}
}

package rc

import (
	"bytes"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/gorxe/gorxe/congestion"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/reth"
)

// ccPort is a port that keeps every packet and the traffic class each
// was finished with, on the manual clock.
type ccPort struct {
	benchPort
	tcs []uint8
}

func (p *ccPort) Finish(tx *TxDesc, buf []byte, n int) []byte {
	p.tcs = append(p.tcs, tx.TrafficClass)
	return p.benchPort.Finish(tx, buf, n)
}

// sentPkt is a packet the QP sent, parsed, with its traffic class.
type sentPkt struct {
	wire.Packet
	tc uint8
}

// packets returns the packets sent since the last call, parsed.
func (p *ccPort) packets(t *testing.T) []sentPkt {
	t.Helper()
	var out []sentPkt
	for _, b := range p.batches {
		for _, raw := range b {
			var k sentPkt
			if err := wire.ParseUDPPayload(&k.Packet, append(raw, 0, 0, 0, 0)); err != nil { // the fake port leaves the ICRC out
				t.Fatal(err)
			}
			k.tc = p.tcs[0]
			p.tcs = p.tcs[1:]
			out = append(out, k)
		}
	}
	p.batches = nil
	return out
}

const (
	testLine  = 100 * congestion.GbitPerSecond
	testBurst = 16 << 10
)

// ccQP returns a QP in RTS, path MTU 1024, on a ccPort, with DCQCN of
// profile params (nil: no congestion control) and a 1 MiB region.
func ccQP(t *testing.T, params *congestion.Params) (*QP, *ccPort, *mr.MR) {
	t.Helper()
	port := &ccPort{benchPort: benchPort{fakePort: fakePort{mrs: mr.NewTable()}, buf: make([]byte, 9100), keep: true}}
	c, err := cq.New(1024)
	if err != nil {
		t.Fatal(err)
	}
	pd := port.mrs.AllocPD()
	q, err := New(port, 0x11, qp.InitAttr{Type: qp.TypeRC, PD: pd, SendCQ: c, RecvCQ: c,
		Cap: qp.Cap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if params != nil {
		if err := q.SetCongestion(&congestion.Config{Params: *params, LineRate: testLine, Burst: testBurst}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := port.mrs.Register(pd, make([]byte, 1<<20), 0x100000, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	ia := initAttr
	ia.AccessFlags = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead
	rtr := rtrAttr
	rtr.MaxDestRdAtomic = 4
	for _, s := range []struct {
		a qp.Attr
		m qp.AttrMask
	}{{ia, initMask}, {rtr, rtrMask}, {rtsAttr, rtsMask}} {
		if err := q.Modify(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	return q, port, m
}

func connectX() *congestion.Params { p := congestion.ConnectX(); return &p }
func paper() *congestion.Params    { p := congestion.Paper(); return &p }

// writeWR is a signaled RDMA WRITE of n bytes from m.
func writeOf(m *mr.MR, n int) []qp.SendWR {
	return []qp.SendWR{{Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGList: []qp.SGE{{Addr: m.IOVA(), Length: uint32(n), LKey: m.LKey()}}, RemoteAddr: 0x1000, RKey: 7}}
}

// wireLen is what the RP counts of a packet: IPv4 and UDP headers,
// transport, ICRC.
func wireLen(k *sentPkt) int { return wire.IPv4Len + wire.UDPLen + len(k.Transport()) + wire.ICRCLen }

// TestPacingInBursts: until a CNP comes, nothing is paced. After one cuts
// the rate, the requester sends a burst (a Config.Burst of bytes, and
// the packet that overdraws it), then stops, its QP's deadline at the
// time the pacer holds a whole burst again; the device running it then
// sends the next burst. Over the message the bytes leave at the cut rate,
// in virtual time.
func TestPacingInBursts(t *testing.T) {
	q, port, m := ccQP(t, connectX())
	if _, err := q.PostSend(writeOf(m, 64<<10)); err != nil {
		t.Fatal(err)
	}
	if n := len(port.packets(t)); n != 64 {
		t.Fatalf("at the line rate %d of 64 packets went at once", n)
	}
	ack := ackPacket(t)
	acked := bth.PSN(rtsAttr.SQPSN).Add(63)
	ack.BTH.SetPSN(acked)
	q.HandlePacket(ack)

	q.HandleCNP()
	st, cnt := q.Congestion()
	if st.Rate != 50049*congestion.MbitPerSecond || cnt.RPCNPHandled != 1 || cnt.RateDecreases != 1 {
		t.Fatalf("after a CNP: rate %v, %d handled, %d cuts; want 50049Mb/s, 1, 1", st.Rate, cnt.RPCNPHandled, cnt.RateDecreases)
	}
	start := port.Now()
	if _, err := q.PostSend(writeOf(m, 256<<10)); err != nil {
		t.Fatal(err)
	}
	total, bursts := 0, 0
	for total < 256 {
		pkts := port.packets(t)
		sum := 0
		for i := range pkts {
			sum += wireLen(&pkts[i])
		}
		// A burst spends the bucket and overdraws it by one packet: the
		// last packet started with credit left.
		if len(pkts) == 0 || sum-wireLen(&pkts[len(pkts)-1]) >= testBurst || sum < testBurst && total+len(pkts) < 256 {
			t.Fatalf("burst %d: %d packets of %d bytes, want one Burst (%d bytes) and the packet that overdraws it", bursts, len(pkts), sum, testBurst)
		}
		// The burst's last packet asks for an ACK: its tail is then
		// acknowledged while the requester waits.
		if !pkts[len(pkts)-1].BTH.AckReq() {
			t.Fatalf("burst %d: its last packet (of %d) does not ask for an ACK", bursts, len(pkts))
		}
		total += len(pkts)
		bursts++
		if total == 256 {
			break
		}
		acked = acked.Add(uint32(len(pkts))) // the window stays open
		ack.BTH.SetPSN(acked)
		q.HandlePacket(ack)
		if n := len(port.packets(t)); n != 0 {
			t.Fatalf("an ACK let a paced requester send %d packets before its time", n)
		}
		d := q.Deadline()
		wait := d.Sub(port.Now())
		// The bucket refills a Burst and the overdraft at the cut rate.
		rate := 50.049 // bits per ns
		lo := time.Duration(testBurst * 8 / rate)
		hi := time.Duration((testBurst+1100)*8/rate) + 1
		if wait < lo || wait > hi {
			t.Fatalf("after burst %d the QP's deadline is %v away, want the pacer's wake-up in [%v, %v]", bursts, wait, lo, hi)
		}
		port.now = d - 1 // Now returns now+1
		q.Run()
	}
	elapsed := port.Now().Sub(start)
	// 256 packets of 1068 bytes and one of 1084 (RETH), less the first
	// burst, which went at once, at 50.049 Gb/s.
	rate := 50.049 // bits per ns
	want := time.Duration(float64(256*1068+16-testBurst) * 8 / rate)
	if elapsed < want-want/20 || elapsed > want+want/20 {
		t.Fatalf("256 KiB took %v of virtual time in %d bursts, want about %v at the cut rate", elapsed, bursts, want)
	}
	if bursts < 16 || bursts > 17 {
		t.Fatalf("256 KiB went in %d bursts, want 16 or 17 of %d bytes", bursts, testBurst)
	}
}

// TestAcksNotPaced: a QP whose requester pacing holds still answers the
// peer's requests at once: ACKs are not paced.
func TestAcksNotPaced(t *testing.T) {
	q, port, m := ccQP(t, connectX())
	q.HandleCNP()
	if _, err := q.PostSend(writeOf(m, 256<<10)); err != nil {
		t.Fatal(err)
	}
	port.packets(t)
	if !q.cc.held() {
		t.Fatal("a 256 KiB WRITE after a CNP was not paced")
	}
	owe(t, q, m, 8)
	q.FlushAck()
	pkts := port.packets(t)
	if len(pkts) != 1 || pkts[0].BTH.Opcode() != bth.RCAcknowledge {
		t.Fatalf("the responder of a paced QP sent %d packets, want its ACK", len(pkts))
	}
	if !q.cc.held() {
		t.Fatal("the ACK released the paced requester")
	}
}

// TestReadResponsesPaced: a READ's responses are paced as requests are,
// and a paced responder waits for its timer rather than asking the device
// to run it again at once.
func TestReadResponsesPaced(t *testing.T) {
	q, port, m := ccQP(t, connectX())
	q.HandleCNP()
	port.scheduled = 0
	read := request(t, wire.Headers{BTH: bth.Fields{Opcode: bth.RCRDMAReadRequest, PSN: rtrAttr.RQPSN},
		RETH: reth.Fields{VA: m.IOVA(), RKey: reth.Key(m.RKey()), DMALen: 64 << 10}}, nil)
	q.HandlePacket(read)
	pkts := port.packets(t)
	if len(pkts) == 0 || len(pkts) >= readBurst || pkts[0].BTH.Opcode() != bth.RCRDMAReadResponseFirst {
		t.Fatalf("a paced READ sent %d responses at once, want one burst of %d bytes, fewer than %d", len(pkts), testBurst, readBurst)
	}
	if port.scheduled != 0 || q.Deadline().IsZero() {
		t.Fatalf("a paced responder scheduled the QP %d times, deadline %v; want a timer instead", port.scheduled, q.Deadline())
	}
	sent := len(pkts)
	for sent < 64 {
		port.now = q.Deadline() - 1
		q.Run()
		n := len(port.packets(t))
		if n == 0 {
			t.Fatalf("at its deadline the responder sent nothing, %d of 64 sent", sent)
		}
		sent += n
	}
	if sent != 64 {
		t.Fatalf("%d responses, want 64", sent)
	}
}

// markedWrite returns the peer's WRITE of 8 bytes at psn, arrived with
// ECN field e, parsed from a whole IPv4 packet.
func markedWrite(t *testing.T, m *mr.MR, psn bth.PSN, e wire.ECN) *wire.Packet {
	t.Helper()
	f := wire.Frame{
		IP: wire.IPFields{Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("10.0.0.1"),
			TrafficClass: wire.TrafficClass(0, e), HopLimit: 64, DontFrag: true},
		SrcPort: 0xc000, DstPort: wire.UDPPort,
		Headers: wire.Headers{BTH: bth.Fields{Opcode: bth.RCRDMAWriteOnly, PKey: 0xffff, DestQP: 0x11, PSN: psn, AckReq: true},
			RETH: reth.Fields{VA: m.IOVA(), RKey: reth.Key(m.RKey()), DMALen: 8}},
		Payload: make([]byte, 8),
	}
	b, err := f.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	p := new(wire.Packet)
	if err := wire.ParseIP(p, b); err != nil {
		t.Fatal(err)
	}
	return p
}

// cnps returns the CNPs among pkts, failing the test if one is not as a
// ConnectX NIC sends it, to the peer's QP.
func cnps(t *testing.T, pkts []sentPkt) []sentPkt {
	t.Helper()
	var out []sentPkt
	for _, k := range pkts {
		if !k.IsCNP() {
			continue
		}
		tr := k.Transport()
		if len(tr) != 28 || !k.BTH.BECN() || k.BTH.FECN() || k.BTH.DestQP() != rtrAttr.DestQPNum || k.BTH.PSN() != 0 ||
			k.BTH.PKey() != 0xffff || k.BTH.AckReq() || !bytes.Equal(tr[12:], make([]byte, 16)) || k.tc != 0xc2 {
			t.Fatalf("CNP % x with traffic class %#x, want 0x81, BECN, DestQP %#x, PSN 0, 16 zero bytes, 0xc2",
				tr, k.tc, uint32(rtrAttr.DestQPNum))
		}
		out = append(out, k)
	}
	return out
}

// TestNotificationPoint: marked data packets get at most one CNP per
// min_time_between_cnps; unmarked ones, and marked ACKs, none. The
// paper's variant sends one more at the interval's end for the marks
// within it, on the QP's timer; ConnectX's does not.
func TestNotificationPoint(t *testing.T) {
	for _, c := range []struct {
		name     string
		params   *congestion.Params
		deferred bool
	}{{"paper", paper(), true}, {"connectx", connectX(), false}} {
		t.Run(c.name, func(t *testing.T) {
			q, port, m := ccQP(t, c.params)
			interval := c.params.MinTimeBetweenCNPs
			psn := rtrAttr.RQPSN
			deliver := func(e wire.ECN) []sentPkt {
				q.HandlePacket(markedWrite(t, m, psn, e))
				q.FlushAck()
				psn = psn.Add(1)
				return port.packets(t)
			}
			if got := cnps(t, deliver(wire.ECT0)); len(got) != 0 {
				t.Fatalf("an unmarked WRITE drew %d CNPs", len(got))
			}
			if got := cnps(t, deliver(wire.CE)); len(got) != 1 {
				t.Fatalf("the first marked WRITE drew %d CNPs, want 1 at once", len(got))
			}
			port.advance(interval / 4)
			if got := cnps(t, deliver(wire.CE)); len(got) != 0 {
				t.Fatalf("a marked WRITE within the interval drew %d CNPs", len(got))
			}
			d := q.Deadline()
			if c.deferred {
				if d.IsZero() || d.Sub(port.Now()) > interval {
					t.Fatalf("paper NP: deadline %v, want the interval's end, within %v", d, interval)
				}
				port.now = d - 1
				q.Run()
				if got := cnps(t, port.packets(t)); len(got) != 1 {
					t.Fatalf("paper NP: the interval's end sent %d CNPs, want 1 for the marks within it", len(got))
				}
			} else {
				port.advance(interval)
				q.Run()
				if got := cnps(t, port.packets(t)); len(got) != 0 {
					t.Fatalf("connectx NP: %d deferred CNPs", len(got))
				}
			}
			port.advance(2 * interval)
			if got := cnps(t, deliver(wire.CE)); len(got) != 1 {
				t.Fatalf("a marked WRITE after the interval drew %d CNPs, want 1", len(got))
			}
			// A marked ACK is not data: no CNP, no count.
			ack := markedWrite(t, m, 0, wire.CE)
			ack.BTH.SetOpcode(bth.RCAcknowledge)
			port.advance(2 * interval)
			q.HandlePacket(ack)
			if got := cnps(t, port.packets(t)); len(got) != 0 {
				t.Fatalf("a marked ACK drew %d CNPs", len(got))
			}
			_, cnt := q.Congestion()
			wantSent := uint64(2)
			if c.deferred {
				wantSent = 3
			}
			if cnt.NPECNMarkedRoCEPackets != 3 || cnt.NPCNPSent != wantSent || cnt.NPMarksCoalesced != 1 {
				t.Fatalf("counters %+v: want 3 marked, %d CNPs sent, 1 coalesced", cnt, wantSent)
			}
			st := q.Stats()
			if st.SentPkts != uint64(4+wantSent) { // 4 ACKs and the CNPs
				t.Fatalf("sent_pkts %d, want %d", st.SentPkts, 4+wantSent)
			}
		})
	}
}

// TestCongestionOff: without congestion control a QP counts CNPs as
// ignored and paces nothing; marks are counted and draw no CNP.
func TestCongestionOff(t *testing.T) {
	q, port, m := ccQP(t, nil)
	q.HandleCNP()
	q.HandleCNP()
	if _, err := q.PostSend(writeOf(m, 256<<10)); err != nil {
		t.Fatal(err)
	}
	if n := len(port.packets(t)); n != 256 {
		t.Fatalf("with congestion control off, %d of 256 packets went at once", n)
	}
	q.HandlePacket(markedWrite(t, m, rtrAttr.RQPSN, wire.CE))
	q.FlushAck()
	if got := cnps(t, port.packets(t)); len(got) != 0 {
		t.Fatalf("with congestion control off, a mark drew %d CNPs", len(got))
	}
	_, cnt := q.Congestion()
	if cnt.RPCNPIgnored != 2 || cnt.RPCNPHandled != 0 || cnt.NPECNMarkedRoCEPackets != 1 || cnt.NPCNPSent != 0 {
		t.Fatalf("counters %+v: want 2 CNPs ignored, 1 mark, nothing sent", cnt)
	}
}

// TestCNPInWrongState: a CNP to a QP that sends nothing (INIT, ERR) is
// counted as ignored and changes nothing; a QP back from RESET starts at
// the line rate.
func TestCNPInWrongState(t *testing.T) {
	q, port, _ := ccQP(t, connectX())
	q.HandleCNP()
	if st, _ := q.Congestion(); st.Rate == testLine {
		t.Fatal("the CNP in RTS cut nothing")
	}
	if err := q.Modify(&qp.Attr{State: qp.StateReset}, qp.AttrState); err != nil {
		t.Fatal(err)
	}
	if st, _ := q.Congestion(); st.Rate != testLine || st.Started {
		t.Fatalf("after RESET the rate is %v (started %v), want the line rate", st.Rate, st.Started)
	}
	if err := q.Modify(&initAttr, initMask); err != nil {
		t.Fatal(err)
	}
	q.HandleCNP()
	if err := toErr(q); err != nil {
		t.Fatal(err)
	}
	q.HandleCNP()
	st, cnt := q.Congestion()
	if st.Rate != testLine || cnt.RPCNPIgnored != 2 || cnt.RPCNPHandled != 0 {
		t.Fatalf("after CNPs in INIT and ERR: rate %v, %d ignored, %d handled; want the line rate, 2, 0", st.Rate, cnt.RPCNPIgnored, cnt.RPCNPHandled)
	}
	if !q.Deadline().IsZero() || len(port.packets(t)) != 0 {
		t.Fatal("a CNP to a QP in ERR armed a timer or sent something")
	}
	if err := q.SetCongestion(nil); err == nil {
		t.Fatal("SetCongestion outside RESET succeeded")
	}
}

// TestSetCongestionRefusesBadConfig: a configuration the RP cannot run
// is refused, and the QP keeps what it had.
func TestSetCongestionRefusesBadConfig(t *testing.T) {
	q, _ := newTestQP(t)
	bad := congestion.Config{Params: congestion.ConnectX(), LineRate: 0, Burst: testBurst}
	if err := q.SetCongestion(&bad); err == nil {
		t.Fatal("a zero line rate was accepted")
	}
	if q.cc.cfg != nil {
		t.Fatal("a refused configuration was kept")
	}
}

// TestCongestionAllocatesNothing: a marked request answered with a CNP
// and an ACK, and a CNP taken, allocate nothing: DCQCN keeps the steady
// state free of garbage when the network is congested, too.
func TestCongestionAllocatesNothing(t *testing.T) {
	q, port, m := ccQP(t, connectX())
	port.keep = false
	psn := rtrAttr.RQPSN
	pkts := make([]*wire.Packet, 200)
	for i := range pkts {
		pkts[i] = markedWrite(t, m, psn.Add(uint32(i)), wire.CE)
	}
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		q.HandlePacket(pkts[i])
		q.FlushAck()
		q.HandleCNP()
		port.advance(5 * time.Microsecond) // past min_time_between_cnps and the monitor period
		i++
	})
	_, cnt := q.Congestion()
	if cnt.NPCNPSent < 100 || cnt.RPCNPHandled < 100 {
		t.Fatalf("%d CNPs sent, %d handled: the runs did not take the CNP paths", cnt.NPCNPSent, cnt.RPCNPHandled)
	}
	if allocs != 0 {
		t.Fatalf("%.1f allocations per marked request and CNP, want 0", allocs)
	}
}

// TestCongestionTrace: the trace shows each CNP with the cut it made, or
// why it made none, and the rate's later changes as the QP sends.
func TestCongestionTrace(t *testing.T) {
	q, port, m := ccQP(t, connectX())
	var evs []trace.Event
	q.SetTrace(func(ev trace.Event) { evs = append(evs, ev) })
	q.HandleCNP()
	q.HandleCNP() // within rate_reduce_monitor_period: the cut waits for its end
	port.advance(5 * time.Microsecond)
	if _, err := q.PostSend(writeOf(m, 8)); err != nil {
		t.Fatal(err)
	}
	const gbps = float64(congestion.GbitPerSecond)
	want := []struct {
		kind        trace.Kind
		rate, alpha float64 // Gb/s to the Mb/s
		noCut       bool
	}{
		{trace.CNPReceived, 50.049, 0.999, false},
		{trace.CNPReceived, 50.049, 0.999, true},
		{trace.RateChange, 25.416, 0.979, false}, // the cut the second CNP left for the period's end
	}
	if len(evs) != len(want) {
		t.Fatalf("trace:\n%v\nwant %d events", evs, len(want))
	}
	for i, w := range want {
		ev := evs[i]
		if ev.Kind != w.kind || math.Round(ev.Rate/1e6) != w.rate*1e3 || ev.TargetRate != 100*gbps ||
			math.Abs(ev.Alpha-w.alpha) > 5e-4 || (ev.Reason != "") != w.noCut || ev.QP != 0x11 {
			t.Errorf("event %d: %v (%+v), want %v at %v Gb/s, alpha %v, no cut %v", i, ev, ev, w.kind, w.rate, w.alpha, w.noCut)
		}
	}
}

// TestRetransmissionsPaced: a go-back-N after a NAK resends at the paced
// rate: the NAK finds the burst spent, and the resent packets, from the
// NAKed PSN on, leave with the next burst.
func TestRetransmissionsPaced(t *testing.T) {
	q, port, m := ccQP(t, connectX())
	q.HandleCNP()
	if _, err := q.PostSend(writeOf(m, 128<<10)); err != nil {
		t.Fatal(err)
	}
	first := len(port.packets(t))
	if first == 0 || first >= 128 {
		t.Fatalf("the first burst was %d packets of 128", first)
	}
	lost := bth.PSN(rtsAttr.SQPSN).Add(3)
	buf, _ := wire.AppendTransport(nil, &wire.Headers{
		BTH:  bth.Fields{Opcode: bth.RCAcknowledge, PKey: 0xffff, DestQP: 0x11, PSN: lost},
		AETH: aeth.Fields{Syndrome: aeth.NAK(aeth.NAKPSNSequenceError)},
	}, nil)
	var nak wire.Packet
	if err := wire.ParseUDPPayload(&nak, append(buf, 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	q.HandlePacket(&nak)
	if n := len(port.packets(t)); n != 0 {
		t.Fatalf("the NAK made the paced requester resend %d packets at once", n)
	}
	port.now = q.Deadline() - 1
	q.Run()
	pkts := port.packets(t)
	if len(pkts) == 0 || pkts[0].BTH.PSN() != lost {
		t.Fatalf("the next burst sent %d packets, the first PSN %d; want the resend from PSN %d", len(pkts), pkts[0].BTH.PSN(), lost)
	}
	if _, cnt := q.Congestion(); cnt.RPCNPHandled != 1 || q.Stats().CompleterRetryErr != 1 {
		t.Fatalf("counters %+v, %d go-back-N", cnt, q.Stats().CompleterRetryErr)
	}
}

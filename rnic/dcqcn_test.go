package rnic_test

// DCQCN on the wire: the notification point's CNPs, the reaction point's
// pacing, and what a device does with CNPs it cannot use. The timed
// tests run in a synctest bubble, where the device's timers and the
// fabric run on a virtual clock: a pacing gap is measured exactly.

import (
	"bytes"
	"encoding/binary"
	"math"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorxe/gorxe/congestion"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/rnic/rnictest"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
)

// steadyConnectX is ConnectX's profile with the rate increase switched
// off (a timer of an hour, a byte counter of 256 GiB), so that a cut rate
// stays where the cut left it for the test to measure.
func steadyConnectX() congestion.Params {
	p := congestion.ConnectX()
	p.RPGTimeReset = time.Hour
	p.RPGByteReset = math.MaxUint32
	return p
}

// TestCNPPacesRequester: a CNP as a ConnectX-4 Lx sends it (UDP source
// port 0) cuts the QP's rate from the 1 Gb/s line to 501 Mb/s
// (1000 − min(1000·1023 >> 11, 500)). A 200 KiB WRITE then leaves in
// bursts of Config.PacingBurst bytes (and the packet that overdraws it),
// each burst when the pacer has earned it at the cut rate, measured on the
// bubble's clock. An ACK the QP owes meanwhile is not paced. With
// congestion control off the CNP is ignored and the WRITE goes at once.
// Every packet leaves ECN-capable, ECT(0).
func TestCNPPacesRequester(t *testing.T) {
	const (
		line  = congestion.GbitPerSecond
		cut   = 501 * congestion.MbitPerSecond
		burst = 64 << 10
		n     = 200 // packets of 1024 bytes
	)
	for _, cc := range []rnic.CCMode{rnic.CCDCQCN, rnic.CCNone} {
		t.Run(cc.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := rnictest.New(t, rnictest.Options{CC: cc, CCParams: steadyConnectX(), LineRate: line,
					PacingBurst: burst, LocalSize: 256 << 10})
				cnp := cx4CNP(t, p, p.QP.Num())
				if sport := binary.BigEndian.Uint16(cnp[20:]); sport != 0 {
					t.Fatalf("the ConnectX CNP's UDP source port is %d, want 0", sport)
				}
				p.SendRaw(t, cnp)
				p.ExpectNone(t)
				st, cnt := p.QP.Congestion()
				if cc == rnic.CCDCQCN && (st.Rate != cut || cnt.RPCNPHandled != 1) ||
					cc == rnic.CCNone && (st.Started || cnt.RPCNPIgnored != 1) {
					t.Fatalf("after the CNP: rate %v, counters %+v", st.Rate, cnt)
				}

				start := time.Now()
				p.PostSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
					SGList: []qp.SGE{p.LocalSGE(0, n*1024)}, RemoteAddr: 0x5000, RKey: 1})
				// A request of the peer's, answered while the requester waits.
				e := p.Opts.PeerPSN
				p.SendFrame(t, writeOnly(p, e, 0, []byte{1, 2, 3, 4}))

				type arrival struct {
					at    time.Duration
					bytes int // what the RP counts: IP packet, ICRC included
				}
				var data []arrival
				var ackAt time.Duration = -1
				for len(data) < n || ackAt < 0 {
					k := p.Expect(t)
					at := time.Since(start)
					if wire.ECN(k.ECN()) != wire.ECT0 {
						t.Fatalf("%v left with ECN %v, want ECT(0)", k, wire.ECN(k.ECN()))
					}
					switch k.BTH.Opcode() {
					case bth.RCAcknowledge:
						ackAt = at
					case bth.RCRDMAWriteFirst, bth.RCRDMAWriteMiddle, bth.RCRDMAWriteLast:
						data = append(data, arrival{at, len(k.Raw)})
					default:
						t.Fatalf("unexpected %v", k)
					}
				}
				if ackAt != 0 {
					t.Fatalf("the ACK owed while the requester was paced left after %v, want at once", ackAt)
				}
				if cc == rnic.CCNone {
					if last := data[n-1].at; last != 0 {
						t.Fatalf("with congestion control off the WRITE took %v, want no pacing", last)
					}
					return
				}
				// Group the packets into bursts by their time, and check
				// each: a Burst of bytes and one packet more (the last
				// burst: what was left), starting when the pacer had
				// earned everything sent before it beyond the first Burst.
				sent, bursts := 0, 0
				for i := 0; i < n; {
					j, size := i, 0
					for ; j < n && data[j].at == data[i].at; j++ {
						size += data[j].bytes
					}
					lastSize := data[j-1].bytes
					if j < n && (size-lastSize >= burst || size < burst) {
						t.Fatalf("burst %d at %v: %d packets, %d bytes; want %d bytes and one packet more", bursts, data[i].at, j-i, size, burst)
					}
					if i > 0 {
						want := time.Duration(float64(sent) * 8 / float64(cut) * float64(time.Second))
						if d := data[i].at - want; d < 0 || d > time.Microsecond {
							t.Fatalf("burst %d left at %v, want when %d bytes had been earned at %v: %v", bursts, data[i].at, sent, cut, want)
						}
					}
					sent += size
					bursts++
					i = j
				}
				if bursts != 4 {
					t.Fatalf("%d bursts, want 4 of 64 KiB for 200 KiB", bursts)
				}
				rnictest.ExpectWC(t, p.RecvCQ) // nothing
				p.Send(t, p.Resp(bth.RCAcknowledge, p.Opts.DevPSN.Add(n-1), ack, 1), nil)
				rnictest.ExpectWC(t, p.SendCQ, cq.StatusSuccess)
			})
		})
	}
}

// markedWrite returns the peer's WRITE of 4 bytes at psn, ECN field e.
func markedWrite(p *rnictest.Peer, psn bth.PSN, e wire.ECN) wire.Frame {
	f := writeOnly(p, psn, 256, []byte{0xce, 0xce, byte(psn), 0})
	f.IP.TrafficClass = wire.TrafficClass(26, e)
	return f
}

// TestNotificationPointOnTheWire: CE-marked requests and READ responses
// draw CNPs (shaped as ConnectX's: 0x81, BECN, the peer's QP, PSN 0, 16
// zero bytes, ICRC, traffic class 0xC2), at most one per QP per
// min_time_between_cnps; unmarked ones none. The paper's NP sends one at
// the end of an interval with marks in it; ConnectX's does not. Over IPv4
// and IPv6.
func TestNotificationPointOnTheWire(t *testing.T) {
	for _, c := range []struct {
		name          string
		params        congestion.Params
		dev, peer     string
		deferredCNP   bool
		interval      time.Duration
		cnpLen, count int
	}{
		{"paper/IPv4", congestion.Paper(), "10.0.0.1", "10.0.0.2", true, 50 * time.Microsecond, 60, 0},
		{"connectx/IPv4", congestion.ConnectX(), "10.0.0.1", "10.0.0.2", false, 2 * time.Microsecond, 60, 0},
		{"connectx/IPv6", congestion.ConnectX(), "fd00::1", "fd00::2", false, 2 * time.Microsecond, 80, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := rnictest.New(t, rnictest.Options{CCParams: c.params,
					DevAddrs: []netip.Addr{netip.MustParseAddr(c.dev)}, PeerAddr: netip.MustParseAddr(c.peer)})
				e := p.Opts.PeerPSN
				msn := aeth.MSN(0)
				write := func(ecn wire.ECN, wantCNP bool) {
					t.Helper()
					p.SendFrame(t, markedWrite(p, e, ecn))
					if wantCNP {
						if k := expectCNP(t, p); len(k.Raw) != c.cnpLen {
							t.Fatalf("CNP of %d bytes, want %d", len(k.Raw), c.cnpLen)
						}
					}
					msn++
					p.ExpectAck(t, ack, e, msn)
					e = e.Add(1)
				}
				write(wire.ECT0, false)
				write(wire.CE, true)  // the first mark: a CNP at once
				write(wire.CE, false) // within the interval
				write(wire.ECT1, false)
				start := time.Now()
				if c.deferredCNP {
					expectCNP(t, p) // at the interval's end, for the mark within it
					if d := time.Since(start); d <= 0 || d > c.interval {
						t.Fatalf("the deferred CNP came %v later, want within %v", d, c.interval)
					}
				}
				p.ExpectNone(t)
				time.Sleep(c.interval)
				write(wire.CE, true) // a new interval

				// A READ's response arrives marked: the requester's NP
				// answers it as the responder's does a request.
				time.Sleep(c.interval)
				p.PostSend(t, qp.SendWR{WRID: 7, Opcode: qp.WRRDMARead, Flags: qp.SendSignaled,
					SGList: []qp.SGE{p.LocalSGE(0, 8)}, RemoteAddr: 0x9000, RKey: 5})
				d := p.Opts.DevPSN
				p.ExpectOp(t, bth.RCRDMAReadRequest, d)
				resp := p.Frame(p.Resp(bth.RCRDMAReadResponseOnly, d, ack, msn), []byte("8 bytes!"))
				resp.IP.TrafficClass = wire.TrafficClass(0, wire.CE)
				p.SendFrame(t, resp)
				expectCNP(t, p)
				rnictest.ExpectWC(t, p.SendCQ, cq.StatusSuccess)
				if !bytes.Equal(p.Local[:8], []byte("8 bytes!")) {
					t.Fatal("the marked READ response's data was not placed")
				}
				// A marked ACK is no data: no CNP.
				time.Sleep(c.interval)
				p.PostSend(t, qp.SendWR{WRID: 8, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
					SGList: []qp.SGE{p.LocalSGE(0, 8)}, RemoteAddr: 0x9000, RKey: 5})
				p.ExpectOp(t, bth.RCRDMAWriteOnly, d.Add(1))
				a := p.Frame(p.Resp(bth.RCAcknowledge, d.Add(1), ack, msn+1), nil)
				a.IP.TrafficClass = wire.TrafficClass(0, wire.CE)
				p.SendFrame(t, a)
				p.ExpectNone(t)
				rnictest.ExpectWC(t, p.SendCQ, cq.StatusSuccess)

				cnt := p.Dev.Counters()
				sent := uint64(3)
				if c.deferredCNP {
					sent = 4
				}
				if cnt.CC.NPCNPSent != sent || cnt.CC.NPECNMarkedRoCEPackets != 4 || cnt.CC.NPMarksCoalesced != 1 {
					t.Fatalf("np_cnp_sent %d (want %d), np_ecn_marked_roce_packets %d (want 4), coalesced %d (want 1)",
						cnt.CC.NPCNPSent, sent, cnt.CC.NPECNMarkedRoCEPackets, cnt.CC.NPMarksCoalesced)
				}
				if named(cnt, "np_cnp_sent") != int64(sent) || named(cnt, "np_ecn_marked_roce_packets") != 4 {
					t.Fatalf("Named() lacks mlx5's NP counters: %v", cnt.Named())
				}
			})
		})
	}
}

// TestHostileCNPs: CNPs that are malformed, corrupt, from a stranger, of
// another partition, or to a QP that sends nothing are counted and
// dropped; none cuts the QP's rate, and the QP goes on.
func TestHostileCNPs(t *testing.T) {
	p := rnictest.New(t, rnictest.Options{})
	good := cx4CNP(t, p, p.QP.Num())

	// Without its 16 reserved bytes: the IP and UDP lengths and the ICRC
	// agree with the shorter packet, but a CNP is 28 bytes of transport.
	short := append([]byte(nil), good[:len(good)-16]...)
	binary.BigEndian.PutUint16(short[2:], uint16(len(short)))
	binary.BigEndian.PutUint16(short[24:], uint16(len(short)-20))
	ip := wire.IPv4(short[:20])
	ip.SetChecksum(0)
	ip.SetChecksum(wire.IPv4Checksum(ip))
	binary.LittleEndian.PutUint32(short[len(short)-4:], wire.ComputeICRC(short[:20], short[20:28], short[28:len(short)-4]))
	p.SendRaw(t, short)
	expectDropped(t, p, func(c rnic.Counters) uint64 { return c.Malformed }, 1)

	corrupt := append([]byte(nil), good...)
	corrupt[40] ^= 1 // a reserved byte: the ICRC covers it
	p.SendRaw(t, corrupt)
	expectDropped(t, p, func(c rnic.Counters) uint64 { return c.ICRCErrors }, 1)

	f := wire.CNP(wire.IPFields{Src: netip.MustParseAddr("10.0.0.9"), Dst: p.DevAddr, TrafficClass: 0xc2, HopLimit: 64, DontFrag: true}, p.QP.Num())
	p.SendRaw(t, mustBuild(t, f, nil))
	expectDropped(t, p, func(c rnic.Counters) uint64 { return c.AddrMismatch }, 1)

	f = wire.CNP(wire.IPFields{Src: p.Addr, Dst: p.DevAddr, TrafficClass: 0xc2, HopLimit: 64, DontFrag: true}, p.QP.Num())
	f.BTH.PKey = 0x1234
	p.SendRaw(t, mustBuild(t, f, nil))
	expectDropped(t, p, func(c rnic.Counters) uint64 { return c.PKeyViolations }, 1)

	// A QP in INIT sends nothing: its CNP is ignored.
	pd := p.Dev.AllocPD()
	c, err := p.Dev.CreateCQ(4)
	must(t, err)
	idle, err := p.Dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: pd, SendCQ: c, RecvCQ: c, Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1}})
	must(t, err)
	must(t, idle.Modify(&qp.Attr{State: qp.StateInit, Port: 1, AccessFlags: mr.RemoteWrite},
		qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags))
	p.SendRaw(t, cx4CNP(t, p, idle.Num()))
	expectDropped(t, p, func(c rnic.Counters) uint64 { return c.CC.RPCNPIgnored }, 1)

	cnt := p.Dev.Counters()
	if st, _ := p.QP.Congestion(); st.Started || cnt.CC.RPCNPHandled != 0 || cnt.CC.RateDecreases != 0 {
		t.Fatalf("a hostile CNP cut the rate: %v, %+v", st.Rate, cnt.CC)
	}
	expectAccepted(t, p, p.Opts.PeerPSN, 1)
	p.SendRaw(t, good)
	p.ExpectNone(t)
	if st, cc := p.QP.Congestion(); st.Rate >= rnic.DefaultLineRate || cc.RPCNPHandled != 1 {
		t.Fatalf("the good CNP after them: rate %v, %d handled", st.Rate, cc.RPCNPHandled)
	}
}

// TestDCQCNOverMarkedFabric: A writes 4 MiB to B over a fabric that marks
// every ECN-capable packet A sends CE, as a congested switch would. B's
// NP answers with CNPs, at most one per min_time_between_cnps, A's RP
// takes each of them and cuts, and the data arrives whole. On the
// bubble's clock, the transfer's time bounds how many CNPs there can be.
func TestDCQCNOverMarkedFabric(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		params := congestion.ConnectX()
		a, b := newPair(t, pairOpts{ccParams: params, lineRate: 10 * congestion.GbitPerSecond, bufSize: 4 << 20})
		a.link.SetFaults(mem.Faults{ECN: 1})
		fill(a.buf, 9)
		start := time.Now()
		var wrs []qp.SendWR
		for i := range 4 {
			wrs = append(wrs, writeWR(uint64(i), a, b, i<<20, 1<<20))
		}
		a.postSend(t, wrs...)
		status(t, wait(t, a.scq, 4, 10*time.Second), cq.StatusSuccess, cq.StatusSuccess, cq.StatusSuccess, cq.StatusSuccess)
		elapsed := time.Since(start)
		if !bytes.Equal(a.buf, b.buf) {
			t.Fatal("data differs")
		}
		ca, cb := a.stats(), b.stats()
		st, _ := a.qp.Congestion()
		if cb.CC.NPCNPSent == 0 || ca.CC.RPCNPHandled != cb.CC.NPCNPSent || ca.CC.RateDecreases == 0 || !st.Started {
			t.Fatalf("B sent %d CNPs, A handled %d and cut %d times\n%s", cb.CC.NPCNPSent, ca.CC.RPCNPHandled, ca.CC.RateDecreases, a.traceText())
		}
		if cb.CC.NPECNMarkedRoCEPackets != cb.RcvdPkts || a.link.Stats().Marked != cb.RcvdPkts {
			t.Fatalf("B counted %d marked of %d packets; the fabric marked %d", cb.CC.NPECNMarkedRoCEPackets, cb.RcvdPkts, a.link.Stats().Marked)
		}
		if most := uint64(elapsed/params.MinTimeBetweenCNPs) + 1; cb.CC.NPCNPSent > most {
			t.Fatalf("%d CNPs in %v: more than one per %v", cb.CC.NPCNPSent, elapsed, params.MinTimeBetweenCNPs)
		}
		if ca.CC.NPCNPSent != 0 || cb.CC.RPCNPHandled != 0 {
			t.Fatalf("CNPs went the wrong way: A sent %d, B handled %d", ca.CC.NPCNPSent, cb.CC.RPCNPHandled)
		}
		// 4 MiB at 10 Gb/s is 3.4 ms; cut, it takes longer.
		if elapsed < 4<<20*8*time.Second/time.Duration(10*congestion.GbitPerSecond) {
			t.Fatalf("4 MiB took %v of virtual time, faster than the line rate", elapsed)
		}
		t.Logf("elapsed %v, CNPs %d, cuts %d, rate %v, marked %d", elapsed, cb.CC.NPCNPSent, ca.CC.RateDecreases, st.Rate, cb.CC.NPECNMarkedRoCEPackets)
		// Every CNP is in the traces, once where it was sent and once
		// where it was taken.
		if a.events(trace.CNPReceived) != int(ca.CC.RPCNPHandled) || b.events(trace.CNPSent) != int(cb.CC.NPCNPSent) {
			t.Fatalf("the traces do not show the CNPs:\nA:\n%s\nB:\n%s", a.traceText(), b.traceText())
		}
	})
}

// TestCEOverUDP: on the udp link the kernel tells the device each
// datagram's TOS byte (IP_RECVTOS), so CE marks reach its NP. Side A's
// address vector asks for CE itself, a switch in its own right: B answers
// its WRITEs with CNPs, which A takes.
func TestCEOverUDP(t *testing.T) {
	a, b := newPair(t, pairOpts{udp: true, trafficClassA: uint8(wire.CE)})
	fill(a.buf[:256<<10], 4)
	a.postSend(t, writeWR(1, a, b, 0, 256<<10))
	status(t, wait(t, a.scq, 1, 10*time.Second), cq.StatusSuccess)
	// B's device wrote its memory from its own goroutine, and A learned
	// of it through the kernel's sockets, which the race detector cannot
	// see: read it as a CPU reads what a NIC wrote (MR.Peek).
	got := make([]byte, 256<<10)
	must(t, b.mr.Peek(b.addr(0), got))
	if !bytes.Equal(a.buf[:256<<10], got) {
		t.Fatal("data differs")
	}
	ca, cb := a.stats(), b.stats()
	if cb.CC.NPECNMarkedRoCEPackets < 256 || cb.CC.NPCNPSent == 0 || ca.CC.RPCNPHandled == 0 || ca.CC.RPCNPHandled > cb.CC.NPCNPSent {
		t.Fatalf("over udp: B saw %d marked packets and sent %d CNPs, A handled %d", cb.CC.NPECNMarkedRoCEPackets, cb.CC.NPCNPSent, ca.CC.RPCNPHandled)
	}
	if ca.CC.NPECNMarkedRoCEPackets != 0 {
		t.Fatalf("A saw %d marked packets; B's leave ECT(0)", ca.CC.NPECNMarkedRoCEPackets)
	}
}

// TestCCConfig: Open takes the congestion control's settings, with the
// link's rate as the line rate when the link knows it, and refuses what
// DCQCN cannot run, saying which parameter is wrong.
func TestCCConfig(t *testing.T) {
	open := func(cfg rnic.Config, bandwidth int64) (*rnic.Device, error) {
		f := mem.NewFabric()
		l, err := f.NewLink(netip.MustParseAddr("10.0.0.1"))
		must(t, err)
		l.SetFaults(mem.Faults{Bandwidth: bandwidth})
		cfg.Link = l
		d, err := rnic.Open(cfg)
		if err != nil {
			l.Close()
			return nil, err
		}
		t.Cleanup(func() { d.Close() })
		return d, nil
	}
	rate := func(d *rnic.Device) congestion.Rate {
		t.Helper()
		pd := d.AllocPD()
		c, err := d.CreateCQ(4)
		must(t, err)
		q, err := d.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: pd, SendCQ: c, RecvCQ: c, Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1}})
		must(t, err)
		st, _ := q.Congestion()
		return st.Rate
	}
	for _, c := range []struct {
		name      string
		cfg       rnic.Config
		bandwidth int64 // bytes per second of the mem link; 0 for none
		want      congestion.Rate
	}{
		{"default", rnic.Config{}, 0, rnic.DefaultLineRate},
		{"the link's rate", rnic.Config{}, 1_250_000_000, 10 * congestion.GbitPerSecond},
		{"the link's rate, in whole Mb/s", rnic.Config{}, 1_250_000_100, 10 * congestion.GbitPerSecond},
		{"the paper's, to the bit", rnic.Config{CCParams: congestion.Paper()}, 1_250_000_100, 10_000_000_800},
		{"below rpg_min_rate", rnic.Config{}, 100, congestion.MbitPerSecond},
		{"Config.LineRate first", rnic.Config{LineRate: 25 * congestion.GbitPerSecond}, 1_250_000_000, 25 * congestion.GbitPerSecond},
		{"off", rnic.Config{CC: rnic.CCNone}, 0, 0},
	} {
		d, err := open(c.cfg, c.bandwidth)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := rate(d); got != c.want {
			t.Errorf("%s: a new QP's rate is %v, want %v", c.name, got, c.want)
		}
	}
	bad := congestion.ConnectX()
	bad.RPGMinDecFac = 101
	for _, c := range []struct {
		cfg  rnic.Config
		want string
	}{
		{rnic.Config{CCParams: bad}, "rpg_min_dec_fac"},
		{rnic.Config{LineRate: 1500 * congestion.KbitPerSecond}, "whole Mb/s"},
		{rnic.Config{PacingBurst: -1}, "burst"},
		{rnic.Config{CC: 7}, "no such congestion control"},
	} {
		if _, err := open(c.cfg, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%+v): %v, want an error naming %q", c.cfg, err, c.want)
		}
	}
	if m, err := rnic.ParseCCMode("dcqcn"); err != nil || m != rnic.CCDCQCN || m.String() != "dcqcn" {
		t.Errorf("ParseCCMode(dcqcn) = %v, %v", m, err)
	}
	if m, err := rnic.ParseCCMode("none"); err != nil || m != rnic.CCNone || m.String() != "none" {
		t.Errorf("ParseCCMode(none) = %v, %v", m, err)
	}
	if _, err := rnic.ParseCCMode("reno"); err == nil {
		t.Error("ParseCCMode(reno) succeeded")
	}
}

package rnic_test

// Tests that gorxe takes what hardware RoCE NICs put on the wire
// (../shared/reference/real-rnics.md, the §0 table): each test sends
// packets shaped as a ConnectX, Huawei or other hardware peer sends them
// and asserts that the device executes them, answers them and keeps the
// QP in RTS.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/rnic/rnictest"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/reth"
)

// readReq returns a READ request for n bytes at Region[off:] at psn.
func readReq(p *rnictest.Peer, psn bth.PSN, off, n int) wire.Headers {
	h := p.Req(bth.RCRDMAReadRequest, psn)
	h.RETH = reth.Fields{VA: p.RegionVA(off), RKey: reth.Key(p.RKey()), DMALen: uint32(n)}
	return h
}

// expectReadResponses reads the responses to a READ of Region[off:off+n]
// whose first response has PSN psn, checking their opcodes, PSNs, bytes
// and the MSN of the AETH of the first and last.
func expectReadResponses(t *testing.T, p *rnictest.Peer, psn bth.PSN, off, n int, msn aeth.MSN) {
	t.Helper()
	const mtu = 1024
	count := (n + mtu - 1) / mtu
	for i := range count {
		op := bth.RCRDMAReadResponseMiddle
		switch {
		case count == 1:
			op = bth.RCRDMAReadResponseOnly
		case i == 0:
			op = bth.RCRDMAReadResponseFirst
		case i == count-1:
			op = bth.RCRDMAReadResponseLast
		}
		k := p.ExpectOp(t, op, psn.Add(uint32(i)))
		lo := off + i*mtu
		hi := min(lo+mtu, off+n)
		if !bytes.Equal(k.Payload, p.Region[lo:hi]) {
			t.Fatalf("%v carries other bytes than Region[%d:%d]", k, lo, hi)
		}
		if k.AETH != nil && (k.AETH.Syndrome() != ack || k.AETH.MSN() != msn) {
			t.Fatalf("%v, want AETH %v MSN %d", k, ack, msn)
		}
	}
}

// TestAnySourcePort: hardware sends from any UDP source port (Huawei its
// own QPN, a ConnectX CNP 0, mlx5 UD a random one): requests and responses
// from the peer are taken whatever their port, 0 included.
func TestAnySourcePort(t *testing.T) {
	p := rnictest.New(t, rnictest.Options{})
	e, d := p.Opts.PeerPSN, p.Opts.DevPSN
	msn := aeth.MSN(0)
	for i, sport := range []uint16{0, 72, 0xc123} {
		// A request: executed and acknowledged.
		data := []byte{byte(i), 0x5b, 0x0a, 0x11}
		f := writeOnly(p, e, 64, data)
		f.SrcPort = sport
		p.SendFrame(t, f)
		msn++
		p.ExpectAck(t, ack, e, msn)
		if !bytes.Equal(p.Region[64:68], data) {
			t.Fatalf("sport %d: WRITE not executed", sport)
		}
		e = e.Add(1)

		// A response: its ACK completes the device's WRITE.
		p.PostSend(t, qp.SendWR{WRID: uint64(i), Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGList: []qp.SGE{p.LocalSGE(0, 8)}, RemoteAddr: 0x5000, RKey: 1})
		p.ExpectOp(t, bth.RCRDMAWriteOnly, d)
		r := p.Frame(p.Resp(bth.RCAcknowledge, d, ack, aeth.MSN(i+1)), nil)
		r.SrcPort = sport
		p.SendFrame(t, r)
		p.Sync(t)
		rnictest.ExpectWC(t, p.SendCQ, cq.StatusSuccess)
		d = d.Add(1)
	}
	p.ExpectNone(t)
	p.ExpectState(t, qp.StateRTS)
}

// TestMigReqIgnored: ConnectX-3 Pro, Huawei and others set MigReq on every
// packet; receivers ignore it (IBTA §9.2; real-rnics.md §3).
func TestMigReqIgnored(t *testing.T) {
	p := rnictest.New(t, rnictest.Options{})
	e, d := p.Opts.PeerPSN, p.Opts.DevPSN
	copy(p.Region, payload(2048))

	f := writeOnly(p, e, 4096, []byte{1, 2, 3, 4})
	f.BTH.MigReq = true
	p.SendFrame(t, f)
	p.ExpectAck(t, ack, e, 1)
	if !bytes.Equal(p.Region[4096:4100], []byte{1, 2, 3, 4}) {
		t.Fatal("WRITE with MigReq not executed")
	}
	h := readReq(p, e.Add(1), 0, 2048)
	h.BTH.MigReq = true
	p.Send(t, h, nil)
	expectReadResponses(t, p, e.Add(1), 0, 2048, 2)

	// Responses: an ACK and READ responses, all with MigReq.
	p.PostSend(t,
		qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGList: []qp.SGE{p.LocalSGE(0, 8)}, RemoteAddr: 0x5000, RKey: 1},
		qp.SendWR{WRID: 2, Opcode: qp.WRRDMARead, Flags: qp.SendSignaled,
			SGList: []qp.SGE{p.LocalSGE(1024, 8)}, RemoteAddr: 0x6000, RKey: 2})
	p.ExpectOp(t, bth.RCRDMAWriteOnly, d)
	p.ExpectOp(t, bth.RCRDMAReadRequest, d.Add(1))
	r := p.Resp(bth.RCAcknowledge, d, ack, 1)
	r.BTH.MigReq = true
	p.Send(t, r, nil)
	r = p.Resp(bth.RCRDMAReadResponseOnly, d.Add(1), ack, 2)
	r.BTH.MigReq = true
	p.Send(t, r, []byte("migrated"))
	p.Sync(t)
	rnictest.ExpectWC(t, p.SendCQ, cq.StatusSuccess, cq.StatusSuccess)
	if string(p.Local[1024:1032]) != "migrated" {
		t.Fatalf("READ response with MigReq not placed: %q", p.Local[1024:1032])
	}
	p.ExpectNone(t)
	p.ExpectState(t, qp.StateRTS)
}

// TestCreditACKs: Huawei's ACKs carry real end-to-end credit counts
// (syndrome 000ccccc, 0x05, 0x06), rxe's 0x1F. Every one of them is an
// ACK, never a NAK: it completes what it covers, coalesced too, and a
// count of 0 does not stall the requester.
func TestCreditACKs(t *testing.T) {
	p := rnictest.New(t, rnictest.Options{})
	d := p.Opts.DevPSN
	write := func(wrid uint64) qp.SendWR {
		return qp.SendWR{WRID: wrid, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGList: []qp.SGE{p.LocalSGE(0, 8)}, RemoteAddr: 0x5000, RKey: 1}
	}
	// Four outstanding WRITEs; an ACK with 0 credits for the second
	// completes two, and the requester still sends what is posted next.
	p.PostSend(t, write(1), write(2), write(3), write(4))
	for i := range 4 {
		p.ExpectOp(t, bth.RCRDMAWriteOnly, d.Add(uint32(i)))
	}
	p.Send(t, p.Resp(bth.RCAcknowledge, d.Add(1), aeth.ACK(0), 2), nil)
	p.Sync(t)
	rnictest.ExpectWC(t, p.SendCQ, cq.StatusSuccess, cq.StatusSuccess)
	p.PostSend(t, write(5), write(6))
	p.ExpectOp(t, bth.RCRDMAWriteOnly, d.Add(4))
	p.ExpectOp(t, bth.RCRDMAWriteOnly, d.Add(5))
	p.Send(t, p.Resp(bth.RCAcknowledge, d.Add(2), aeth.ACK(5), 3), nil)
	p.Send(t, p.Resp(bth.RCAcknowledge, d.Add(5), aeth.ACK(6), 6), nil)
	p.Sync(t)
	wcs := rnictest.ExpectWC(t, p.SendCQ, cq.StatusSuccess, cq.StatusSuccess, cq.StatusSuccess, cq.StatusSuccess)
	for i, wc := range wcs {
		if wc.WRID != uint64(i+3) {
			t.Fatalf("completions out of order: %+v", wcs)
		}
	}
	d = d.Add(6)

	// Every credit code, two WRITEs outstanding each time.
	msn := aeth.MSN(6)
	for c := uint8(0); c <= 0x1e; c++ {
		p.PostSend(t, write(uint64(100+c)), write(uint64(200+c)))
		p.ExpectOp(t, bth.RCRDMAWriteOnly, d)
		p.ExpectOp(t, bth.RCRDMAWriteOnly, d.Add(1))
		msn++
		p.Send(t, p.Resp(bth.RCAcknowledge, d, aeth.ACK(c), msn), nil)
		msn++
		p.Send(t, p.Resp(bth.RCAcknowledge, d.Add(1), aeth.ACK(c), msn), nil)
		p.Sync(t)
		rnictest.ExpectWC(t, p.SendCQ, cq.StatusSuccess, cq.StatusSuccess)
		d = d.Add(2)
	}
	p.ExpectNone(t)
	p.ExpectState(t, qp.StateRTS)
	if s := p.QP.Stats(); s.RcvdSeqErr != 0 || s.RcvdRNRErr != 0 {
		t.Fatalf("credit ACKs counted as NAKs: %+v", s)
	}
}

// cx4CNP returns a CNP as a ConnectX-4 Lx sends it (real-rnics.md §4)
// from the peer to the device for QP dqpn: TOS 0xC2 (DSCP 48, ECT(0)),
// ID 0x718c, DF, TTL 64, UDP source port 0 and checksum 0, BTH opcode
// 0x81 with BECN set and PSN 0, 16 reserved zero bytes, a valid ICRC.
func cx4CNP(t *testing.T, p *rnictest.Peer, dqpn bth.QPN) []byte {
	t.Helper()
	f := wire.CNP(wire.IPFields{Src: p.Addr, Dst: p.DevAddr, TrafficClass: 0xc2, HopLimit: 64, ID: 0x718c, DontFrag: true}, dqpn)
	pkt := mustBuild(t, f, nil)
	if len(pkt) != 60 || pkt[1] != 0xc2 || binary.BigEndian.Uint16(pkt[20:]) != 0 || binary.BigEndian.Uint16(pkt[24:]) != 40 {
		t.Fatalf("not a ConnectX-4 Lx CNP: % x", pkt)
	}
	tr := pkt[28:56]
	if tr[0] != 0x81 || tr[1] != 0 || tr[4] != 0x40 || bth.QPN(binary.BigEndian.Uint32(tr[4:])&bth.QPNMask) != dqpn ||
		binary.BigEndian.Uint32(tr[8:]) != 0 || !bytes.Equal(tr[12:], make([]byte, 16)) {
		t.Fatalf("not a ConnectX-4 Lx CNP transport: % x", tr)
	}
	var q wire.Packet
	must(t, wire.ParseIP(&q, pkt))
	must(t, q.CheckICRC())
	return pkt
}

// TestCNPConsumed: a ConnectX notification point sends CNPs whenever a
// switch CE-marks the device's ECT packets, from UDP source port 0. With
// DCQCN on (the default) the CNP to the QP cuts its rate (rp_cnp_handled);
// with it off, the CNP is counted as mlx5 counts one with its reaction
// point disabled (rp_cnp_ignored), as is one for a QP that does not exist.
// Either way it is no error, nothing answers it, and the QP and its
// outstanding work go on.
func TestCNPConsumed(t *testing.T) {
	for _, c := range []struct {
		cc               rnic.CCMode
		handled, ignored uint64
	}{{rnic.CCDCQCN, 1, 1}, {rnic.CCNone, 0, 2}} {
		t.Run(c.cc.String(), func(t *testing.T) {
			p := rnictest.New(t, rnictest.Options{CC: c.cc})
			d := p.Opts.DevPSN
			p.PostSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
				SGList: []qp.SGE{p.LocalSGE(0, 8)}, RemoteAddr: 0x5000, RKey: 1})
			p.ExpectOp(t, bth.RCRDMAWriteOnly, d)

			p.SendRaw(t, cx4CNP(t, p, p.QP.Num()), cx4CNP(t, p, 0x123456))
			p.ExpectNone(t)
			cnt := p.Dev.Counters()
			if cnt.CC.RPCNPHandled != c.handled || cnt.CC.RPCNPIgnored != c.ignored || cnt.NoQP != 0 || cnt.BadOpcode != 0 ||
				cnt.ICRCErrors != 0 || cnt.Malformed != 0 || cnt.PKeyViolations != 0 || cnt.AddrMismatch != 0 {
				t.Fatalf("counters after two CNPs: %+v", cnt)
			}
			if named(cnt, "rp_cnp_ignored") != int64(c.ignored) || named(cnt, "rp_cnp_handled") != int64(c.handled) {
				t.Fatalf("Named() has rp_cnp_ignored %d, rp_cnp_handled %d; want %d, %d",
					named(cnt, "rp_cnp_ignored"), named(cnt, "rp_cnp_handled"), c.ignored, c.handled)
			}
			st, _ := p.QP.Congestion()
			if cut := st.Started && st.Rate < rnic.DefaultLineRate; cut != (c.handled == 1) {
				t.Fatalf("the QP's rate after the CNP is %v (a CNP handled: %v)", st.Rate, st.Started)
			}
			p.ExpectState(t, qp.StateRTS)
			rnictest.ExpectNoWC(t, p.SendCQ)

			p.Send(t, p.Resp(bth.RCAcknowledge, d, ack, 1), nil)
			p.Sync(t)
			rnictest.ExpectWC(t, p.SendCQ, cq.StatusSuccess)
			expectAccepted(t, p, p.Opts.PeerPSN, 1)
		})
	}
}

// named returns the counter name of c.Named(), failing with -1 if absent.
func named(c rnic.Counters, name string) int64 {
	for _, n := range c.Named() {
		if n.Name == name {
			return int64(n.Value)
		}
	}
	return -1
}

// scapyVectors reads testdata/scapy-roce.hex: packets from scapy's RoCE
// tests, by name.
func scapyVectors(t *testing.T) map[string][]byte {
	t.Helper()
	f, err := os.Open("testdata/scapy-roce.hex")
	must(t, err)
	defer f.Close()
	v := make(map[string][]byte)
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, h, _ := strings.Cut(line, " ")
		b, err := hex.DecodeString(strings.ReplaceAll(h, " ", ""))
		must(t, err)
		v[name] = b
	}
	must(t, s.Err())
	return v
}

// TestScapyVectors: the ConnectX-4 Lx CNP and the UC SEND_ONLY of scapy's
// RoCE tests parse, their ICRCs verify, the device counts the CNP as
// rp_cnp_ignored and drops the UC packet as bad_opcode: once as it is
// (to QP 211, which does not exist, so no_qp) and once readdressed to
// the RC QP. Neither is answered or harms the QP.
func TestScapyVectors(t *testing.T) {
	v := scapyVectors(t)
	var cnp, uc wire.Packet
	must(t, wire.ParseFrame(&cnp, v["cx4lx-cnp"]))
	must(t, cnp.CheckICRC())
	if !cnp.IsCNP() || !cnp.BTH.BECN() || cnp.BTH.DestQP() != 0x118 || cnp.SrcPort() != 0 || cnp.TrafficClass() != 0xc2 || cnp.ICRC() != 0x2a00fd82 {
		t.Fatalf("ConnectX-4 Lx CNP parsed as %v sport %d TOS %#x ICRC %#x", cnp.BTH.Opcode(), cnp.SrcPort(), cnp.TrafficClass(), cnp.ICRC())
	}
	must(t, wire.ParseIP(&uc, v["uc-send-only"]))
	must(t, uc.CheckICRC())
	if uc.BTH.Opcode() != bth.UCSendOnly || !uc.BTH.MigReq() || uc.BTH.DestQP() != 211 || uc.SrcPort() != 0xc000 ||
		uc.ECN() != 1 || len(uc.Payload) != 18 || wire.UDP(uc.UDP).Checksum() != 0xaca2 {
		t.Fatalf("UC SEND_ONLY parsed as %v", uc.BTH.Opcode())
	}

	p := rnictest.New(t, rnictest.Options{DevAddrs: []netip.Addr{
		netip.MustParseAddr("10.0.0.1"),
		netip.MustParseAddr("10.0.18.1"),   // the CNP's destination
		netip.MustParseAddr("192.168.0.7"), // the UC packet's
	}})
	p.SendRaw(t, v["cx4lx-cnp"][wire.EthernetLen:])
	p.SendRaw(t, v["uc-send-only"])
	// The UC packet to the RC QP, its ICRC recomputed.
	f, err := uc.Frame()
	must(t, err)
	f.BTH.DestQP = p.QP.Num()
	p.SendRaw(t, mustBuild(t, f, nil))
	p.ExpectNone(t)
	c := p.Dev.Counters()
	if c.CC.RPCNPIgnored != 1 || c.NoQP != 1 || c.BadOpcode != 1 || c.ICRCErrors != 0 || c.Malformed != 0 {
		t.Fatalf("counters after the scapy vectors: %+v", c)
	}
	p.ExpectState(t, qp.StateRTS)
	rnictest.ExpectNoWC(t, p.RecvCQ)
	expectAccepted(t, p, p.Opts.PeerPSN, 1)
	p.CheckGuards(t)
}

// TestECNMarksAccepted: requests arrive with ECT(0) or ECT(1) set by their
// sender (Huawei marks ECT(0) on everything) or CE set by a switch after
// the sender computed the ICRC, over IPv4 and IPv6. The ICRC masks the
// traffic class, so all are executed; a CE-marked one draws a CNP first.
func TestECNMarksAccepted(t *testing.T) {
	for _, c := range []struct {
		name       string
		dev, peer  string
		tos, after uint8 // the sender's traffic class; what a switch makes of it
	}{
		{"IPv4 ECT(0)", "10.0.0.1", "10.0.0.2", 0x02, 0x02},
		{"IPv4 ECT(1)", "10.0.0.1", "10.0.0.2", 0x01, 0x01},
		{"IPv4 CE", "10.0.0.1", "10.0.0.2", 0x03, 0x03},
		{"IPv4 ECT(0) marked CE", "10.0.0.1", "10.0.0.2", 0x6a, 0x6b},
		{"IPv6 ECT(0)", "fd00::1", "fd00::2", 0x02, 0x02},
		{"IPv6 ECT(1)", "fd00::1", "fd00::2", 0x01, 0x01},
		{"IPv6 ECT(1) marked CE", "fd00::1", "fd00::2", 0x01, 0x03},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := rnictest.New(t, rnictest.Options{
				DevAddrs: []netip.Addr{netip.MustParseAddr(c.dev)}, PeerAddr: netip.MustParseAddr(c.peer)})
			e := p.Opts.PeerPSN
			f := writeOnly(p, e, 128, []byte{0xec, 0x70, 0xce, 0x01})
			f.IP.TrafficClass = c.tos
			pkt := mustBuild(t, f, nil)
			if c.after != c.tos { // a switch marks CE: the ICRC stays as it was
				if pkt[0]>>4 == 4 {
					pkt[1] = c.after
					h := wire.IPv4(pkt[:20])
					h.SetChecksum(0)
					h.SetChecksum(wire.IPv4Checksum(h))
				} else {
					pkt[0] = pkt[0]&0xf0 | c.after>>4
					pkt[1] = pkt[1]&0x0f | c.after<<4
				}
			}
			var q wire.Packet
			must(t, wire.ParseIP(&q, pkt))
			if q.TrafficClass() != c.after {
				t.Fatalf("traffic class %#x, want %#x", q.TrafficClass(), c.after)
			}
			p.SendRaw(t, pkt)
			if wire.ECN(c.after&3) == wire.CE {
				expectCNP(t, p)
			}
			p.ExpectAck(t, ack, e, 1)
			if !bytes.Equal(p.Region[128:132], []byte{0xec, 0x70, 0xce, 0x01}) {
				t.Fatal("WRITE not executed")
			}
			if c := p.Dev.Counters(); c.ICRCErrors != 0 {
				t.Fatalf("icrc_errors %d", c.ICRCErrors)
			}
			p.ExpectState(t, qp.StateRTS)
		})
	}
}

// TestUDPChecksumAccepted: rxe, Huawei and the ConnectX CNP send a UDP
// checksum of 0, another ConnectX packet a valid non-zero one; both are
// taken (the ICRC masks the field).
func TestUDPChecksumAccepted(t *testing.T) {
	p := rnictest.New(t, rnictest.Options{})
	e := p.Opts.PeerPSN
	for i, sum := range []bool{false, true} {
		data := []byte{byte(i), 0xcc, 0x5e, 0x77}
		f := writeOnly(p, e, 64, data)
		f.UDPChecksum = sum
		pkt := mustBuild(t, f, nil)
		var q wire.Packet
		must(t, wire.ParseIP(&q, pkt))
		udp := wire.UDP(q.UDP)
		ip := wire.IPv4(q.IP)
		pseudo := wire.PseudoHeaderChecksum(wire.ProtocolUDP, q.IP[12:16], q.IP[16:20], uint16(len(pkt)-len(ip)))
		switch {
		case !sum && udp.Checksum() != 0:
			t.Fatalf("UDP checksum %#x, want 0", udp.Checksum())
		case sum && (udp.Checksum() == 0 || wire.Checksum(pkt[len(ip):], pseudo) != 0xffff):
			t.Fatalf("UDP checksum %#x does not verify", udp.Checksum())
		}
		p.SendRaw(t, pkt)
		p.ExpectAck(t, ack, e, aeth.MSN(i+1))
		if !bytes.Equal(p.Region[64:68], data) {
			t.Fatalf("WRITE with UDP checksum %#x not executed", udp.Checksum())
		}
		e = e.Add(1)
	}
	p.ExpectState(t, qp.StateRTS)
}

// TestReadRetryFromMiddle: a hardware requester that lost a READ response
// re-reads from exactly that PSN (Lumina's read_gbn_check): a READ whose
// PSN lies inside an executed READ, for the tail of its range. It is
// answered from the saved READ, with the PSNs and bytes of the tail, takes
// no new MSN, and the next request is expected where it was.
func TestReadRetryFromMiddle(t *testing.T) {
	p := rnictest.New(t, rnictest.Options{})
	e := p.Opts.PeerPSN
	copy(p.Region, payload(8192))
	p.Send(t, readReq(p, e, 1000, 4096), nil) // responses e .. e+3
	expectReadResponses(t, p, e, 1000, 4096, 1)

	// Lost from e+2: re-read 2048 bytes at 1000+2048 from PSN e+2.
	p.Send(t, readReq(p, e.Add(2), 1000+2048, 2048), nil)
	expectReadResponses(t, p, e.Add(2), 1000+2048, 2048, 1)
	// And only the last one, as a READ of 1024 bytes from e+3.
	p.Send(t, readReq(p, e.Add(3), 1000+3072, 1024), nil)
	expectReadResponses(t, p, e.Add(3), 1000+3072, 1024, 1)
	p.ExpectNone(t)
	if s := p.QP.Stats(); s.DuplicateRequest != 2 {
		t.Fatalf("duplicate_request %d, want 2", s.DuplicateRequest)
	}
	p.ExpectState(t, qp.StateRTS)
	expectAccepted(t, p, e.Add(4), 2)
}

// TestEarlyRetransmission: a ConnectX requester with adaptive
// retransmission may send a request again microseconds later, before any
// answer. A WRITE sent twice back to back is executed and acknowledged;
// an atomic sent twice is executed once and answered twice from the saved
// value; a READ request sent again while its responses go out is answered
// again. The QP stays in RTS and the next PSN is where it should be.
func TestEarlyRetransmission(t *testing.T) {
	p := rnictest.New(t, rnictest.Options{})
	e := p.Opts.PeerPSN

	// A WRITE twice in one batch.
	data := payload(512)
	w := mustBuild(t, writeOnly(p, e, 256, data), nil)
	p.SendRaw(t, w, w)
	p.ExpectAck(t, ack, e, 1) // one ACK answers both when they come in one batch
	// The receive path may take them in two batches, and then answers
	// the second as a duplicate with the same ACK again (C9-105): never
	// anything else.
	if k := p.Next(50 * time.Millisecond); k != nil && (k.BTH.Opcode() != bth.RCAcknowledge || k.BTH.PSN() != e || k.AETH.MSN() != 1) {
		t.Fatalf("after the ACK the device sent %v", k)
	}
	p.ExpectNone(t)
	if !bytes.Equal(p.Region[256:768], data) {
		t.Fatal("WRITE not executed")
	}

	// A fetch-and-add twice in one batch.
	binary.NativeEndian.PutUint64(p.Region[8:], 40)
	h := p.Req(bth.RCFetchAdd, e.Add(1))
	h.AtomicETH.VA, h.AtomicETH.RKey, h.AtomicETH.SwapAdd = p.RegionVA(8), reth.Key(p.RKey()), 2
	a := mustBuild(t, p.Frame(h, nil), nil)
	p.SendRaw(t, a, a)
	for range 2 {
		if k := p.ExpectOp(t, bth.RCAtomicAcknowledge, e.Add(1)); k.AtomicAck.OrigData() != 40 || k.AETH.MSN() != 2 {
			t.Fatalf("atomic ACK %v orig %d", k, k.AtomicAck.OrigData())
		}
	}
	if v := binary.NativeEndian.Uint64(p.Region[8:]); v != 42 {
		t.Fatalf("remote word %d, want 42: the atomic ran twice", v)
	}

	// A 16-response READ sent again right behind itself.
	copy(p.Region[1024:], payload(8192))
	r := mustBuild(t, p.Frame(readReq(p, e.Add(2), 1024, 8192), nil), nil)
	p.SendRaw(t, r, r)
	expectReadResponses(t, p, e.Add(2), 1024, 8192, 3)
	expectReadResponses(t, p, e.Add(2), 1024, 8192, 3)
	p.ExpectNone(t)
	if s := p.QP.Stats(); s.DuplicateRequest != 3 {
		t.Fatalf("duplicate_request %d, want 3", s.DuplicateRequest)
	}
	p.ExpectState(t, qp.StateRTS)
	expectAccepted(t, p, e.Add(10), 4)
	p.CheckGuards(t)
}

// TestOwnSourcePort: in an RC connection the device sends from the UDP
// source port rdma_get_udp_sport gives with flow label 0 and the QPN pair,
// as rxe, mlx5 and irdma do: requests, ACKs and READ responses alike.
func TestOwnSourcePort(t *testing.T) {
	p := rnictest.New(t, rnictest.Options{})
	e, d := p.Opts.PeerPSN, p.Opts.DevPSN
	want := wire.UDPSourcePort(0, p.QP.Num(), p.QPN)
	if want != wire.UDPSourcePort(0, p.QPN, p.QP.Num()) {
		t.Fatal("the port is not symmetric")
	}
	check := func(k *rnictest.Packet) {
		t.Helper()
		if got := binary.BigEndian.Uint16(k.Raw[len(k.IP):]); got != want || k.SrcPort() != want {
			t.Fatalf("%v from UDP port %d, want %d", k, got, want)
		}
	}
	p.PostSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGList: []qp.SGE{p.LocalSGE(0, 8)}, RemoteAddr: 0x5000, RKey: 1})
	check(p.ExpectOp(t, bth.RCRDMAWriteOnly, d))
	p.Send(t, p.Resp(bth.RCAcknowledge, d, ack, 1), nil)
	p.Sync(t)
	rnictest.ExpectWC(t, p.SendCQ, cq.StatusSuccess)

	p.SendFrame(t, writeOnly(p, e, 0, []byte{1, 2, 3, 4}))
	check(p.ExpectAck(t, ack, e, 1))
	p.Send(t, readReq(p, e.Add(1), 0, 2048), nil)
	check(p.ExpectOp(t, bth.RCRDMAReadResponseFirst, e.Add(1)))
	check(p.ExpectOp(t, bth.RCRDMAReadResponseLast, e.Add(2)))
}

// expectCNP reads the next packet the device sent the peer and fails the
// test unless it is a CNP as ConnectX sends one (Annex A17.9.3,
// dcqcn.md §1.6): BTH opcode 0x81, BECN set and FECN clear, P_Key 0xFFFF,
// the peer's QP, PSN 0 without AckReq, 16 reserved zero bytes, a valid
// ICRC, traffic class 0xC2 (DSCP 48, ECT(0)); 60 bytes over IPv4, 80 over
// IPv6.
func expectCNP(t *testing.T, p *rnictest.Peer) *rnictest.Packet {
	t.Helper()
	k := p.ExpectOp(t, bth.CNP, 0) // Expect checked the ICRC and the peer's QP
	tr := k.Transport()
	want := 60
	if k.IPVersion() == 6 {
		want = 80
	}
	if len(k.Raw) != want || len(tr) != 28 || !k.BTH.BECN() || k.BTH.FECN() || k.BTH.AckReq() || k.BTH.PKey() != 0xffff ||
		!bytes.Equal(tr[bth.Len:], make([]byte, 16)) || k.TrafficClass() != wire.CNPTrafficClass || len(k.Payload) != 0 {
		t.Fatalf("the device's CNP is not as ConnectX sends one (traffic class %#x): % x", k.TrafficClass(), k.Raw)
	}
	return k
}

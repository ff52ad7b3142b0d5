package rnic_test

// Tests of the receive checks (receive_checks.go) and of every NAK the
// responder sends, each against a scripted peer (rnic/rnictest): the peer
// crafts the packets, and each test asserts the exact packets that come
// back, the completions and the QP's state.

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/rnic/rnictest"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/reth"
)

var ack = aeth.ACK(aeth.UnlimitedCredits)

// writeOnly returns an RDMA WRITE ONLY of data to Region[off:] at psn.
func writeOnly(p *rnictest.Peer, psn bth.PSN, off int, data []byte) wire.Frame {
	h := p.Req(bth.RCRDMAWriteOnly, psn)
	h.RETH = reth.Fields{VA: p.RegionVA(off), RKey: reth.Key(p.RKey()), DMALen: uint32(len(data))}
	return p.Frame(h, data)
}

// mustBuild builds f with rnictest.Build.
func mustBuild(t *testing.T, f wire.Frame, edit func([]byte)) []byte {
	t.Helper()
	pkt, err := rnictest.Build(f, edit)
	must(t, err)
	return pkt
}

// expectAccepted sends a WRITE of 4 bytes at psn, the expected PSN, and
// checks that it is executed and acknowledged with msn: the QP is intact.
func expectAccepted(t *testing.T, p *rnictest.Peer, psn bth.PSN, msn aeth.MSN) {
	t.Helper()
	data := []byte{byte(psn), 0xac, 0xce, 0x97}
	p.SendFrame(t, writeOnly(p, psn, 64, data))
	p.ExpectAck(t, ack, psn, msn)
	if !bytes.Equal(p.Region[64:68], data) {
		t.Fatalf("WRITE at PSN %#x not executed: % x", uint32(psn), p.Region[64:68])
	}
}

// expectDropped checks that what was sent since the last check made the
// device send nothing, write nothing, and count one drop in counter.
func expectDropped(t *testing.T, p *rnictest.Peer, counter func(c rnic.Counters) uint64, want uint64) {
	t.Helper()
	p.ExpectNone(t)
	if got := counter(p.Dev.Counters()); got != want {
		t.Fatalf("counter says %d drops, want %d: %+v", got, want, p.Dev.Counters())
	}
	if !bytes.Equal(p.Region[:64], make([]byte, 64)) {
		t.Fatal("a dropped packet wrote the region")
	}
	p.ExpectState(t, qp.StateRTS)
	p.CheckGuards(t)
}

// TestPKeyChecked: a packet's P_Key must name the QP's partition (the
// default, 0x7FFF) and one of the two must be a full member (§10.9.3);
// the others are dropped and counted as pkey_violations.
func TestPKeyChecked(t *testing.T) {
	p := rnictest.New(t, rnictest.Options{})
	psn, msn := p.Opts.PeerPSN, aeth.MSN(0)
	drops := uint64(0)
	for _, c := range []struct {
		pkey uint16
		ok   bool
	}{
		{0xffff, true},  // full member of the default partition
		{0x7fff, true},  // limited member: our entry is a full one
		{0x8001, false}, // another partition
		{0x1234, false},
		{0x0000, false}, // the invalid P_Key
		{0x8000, false},
		{0xfffe, false},
	} {
		f := writeOnly(p, psn, 0, []byte{1, 2, 3, 4})
		f.BTH.PKey = c.pkey
		if c.ok {
			f.RETH.VA = p.RegionVA(64)
			p.SendFrame(t, f)
			msn++
			p.ExpectAck(t, ack, psn, msn)
			psn = psn.Add(1)
			continue
		}
		p.SendFrame(t, f)
		drops++
		expectDropped(t, p, func(c rnic.Counters) uint64 { return c.PKeyViolations }, drops)
	}
	expectAccepted(t, p, psn, msn+1)
}

// TestSourceAddressChecked: a connected QP takes packets only from its
// peer's address, sent to its own (rxe's check_addr); a packet from a
// third host or to the device's other address is dropped and counted as
// addr_mismatch, whatever it says.
func TestSourceAddressChecked(t *testing.T) {
	other := netip.MustParseAddr("10.0.0.3")
	p := rnictest.New(t, rnictest.Options{DevAddrs: []netip.Addr{netip.MustParseAddr("10.0.0.1"), other}})
	psn := p.Opts.PeerPSN

	f := writeOnly(p, psn, 0, []byte{1, 2, 3, 4})
	f.IP.Src = netip.MustParseAddr("10.0.0.99")
	p.SendFrame(t, f)
	expectDropped(t, p, func(c rnic.Counters) uint64 { return c.AddrMismatch }, 1)

	f = writeOnly(p, psn, 0, []byte{1, 2, 3, 4})
	f.IP.Dst = other // the device's, but not the QP's GID
	p.SendFrame(t, f)
	expectDropped(t, p, func(c rnic.Counters) uint64 { return c.AddrMismatch }, 2)

	// A forged ACK from a third host does not reach the completer either.
	p.PostSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGList: []qp.SGE{p.LocalSGE(0, 8)}, RemoteAddr: 0x5000, RKey: 0x1234})
	p.ExpectOp(t, bth.RCRDMAWriteOnly, p.Opts.DevPSN)
	f = p.Frame(p.Resp(bth.RCAcknowledge, p.Opts.DevPSN, aeth.NAK(aeth.NAKRemoteAccess), 1), nil)
	f.IP.Src = netip.MustParseAddr("10.0.0.99")
	p.SendFrame(t, f)
	expectDropped(t, p, func(c rnic.Counters) uint64 { return c.AddrMismatch }, 3)
	rnictest.ExpectNoWC(t, p.SendCQ)

	expectAccepted(t, p, psn, 1)
}

// TestReservedOpcodesDropped: an opcode no transport defines is dropped
// before anything else looks at the packet, as rxe drops it (rxe_rcv:
// "Reject unknown opcodes before ICRC processing"), and counted as
// bad_opcode; so is an opcode of a service the RC QP does not run (rxe's
// check_type_state). No NAK goes back, and the expected PSN stays.
func TestReservedOpcodesDropped(t *testing.T) {
	p := rnictest.New(t, rnictest.Options{})
	psn := p.Opts.PeerPSN
	ops := []bth.Opcode{0x15, 0x18, 0x19, 0x1a, 0x1b, 0x1e, 0x1f, // reserved RC
		0x2c, 0x3f, // reserved UC
		0x40, 0x4c, // RD, which gorxe does not know
		0x66, 0x80, 0x82, 0xa0, 0xc0, 0xff, // reserved UD, IB CNP, others
	}
	for i, op := range ops {
		f := p.Frame(p.Req(op, psn), bytes.Repeat([]byte{0xee}, 32))
		p.SendRaw(t, mustBuild(t, f, nil))
		expectDropped(t, p, func(c rnic.Counters) uint64 { return c.BadOpcode }, uint64(i+1))
	}
	n := uint64(len(ops))
	// Defined opcodes of other services reach the device's QP lookup and
	// are refused there.
	for _, op := range []bth.Opcode{bth.UCRDMAWriteOnly, bth.UCSendOnly, bth.UDSendOnly} {
		h := p.Req(op, psn)
		h.RETH = reth.Fields{VA: p.RegionVA(0), RKey: reth.Key(p.RKey()), DMALen: 4}
		p.SendFrame(t, p.Frame(h, []byte{1, 2, 3, 4}))
		n++
		expectDropped(t, p, func(c rnic.Counters) uint64 { return c.BadOpcode }, n)
	}
	if c := p.Dev.Counters(); c.Malformed != 0 || c.ICRCErrors != 0 {
		t.Fatalf("drops counted as malformed or ICRC errors: %+v", c)
	}
	expectAccepted(t, p, psn, 1)
}

// TestHeaderChecksDropped: a BTH with TVer 1, a bad ICRC, a UDP port other
// than RoCE's and a QP that does not exist (0, 1, the multicast QPN, an
// unused one) are dropped silently and counted (§9.6; rxe hdr_check).
func TestHeaderChecksDropped(t *testing.T) {
	p := rnictest.New(t, rnictest.Options{})
	psn := p.Opts.PeerPSN

	f := writeOnly(p, psn, 0, []byte{1, 2, 3, 4})
	f.BTH.TVer = 1
	p.SendFrame(t, f)
	expectDropped(t, p, func(c rnic.Counters) uint64 { return c.Malformed }, 1)

	pkt := mustBuild(t, writeOnly(p, psn, 0, []byte{1, 2, 3, 4}), nil)
	pkt[len(pkt)-6] ^= 0x40 // a payload bit
	p.SendRaw(t, pkt)
	expectDropped(t, p, func(c rnic.Counters) uint64 { return c.ICRCErrors }, 1)

	f = writeOnly(p, psn, 0, []byte{1, 2, 3, 4})
	f.DstPort = wire.UDPPort + 1
	p.SendFrame(t, f)
	expectDropped(t, p, func(c rnic.Counters) uint64 { return c.Malformed }, 2)

	for i, qpn := range []bth.QPN{0, 1, bth.QPNMask, 0x999} {
		f = writeOnly(p, psn, 0, []byte{1, 2, 3, 4})
		f.BTH.DestQP = qpn
		p.SendFrame(t, f)
		expectDropped(t, p, func(c rnic.Counters) uint64 { return c.NoQP }, uint64(i+1))
	}
	expectAccepted(t, p, psn, 1)
}

// TestNAKSequenceError: a request past the expected PSN gets one NAK PSN
// sequence error naming the expected PSN; later ones are dropped without
// another NAK until the expected PSN comes (C9-114). The QP stays up.
func TestNAKSequenceError(t *testing.T) {
	p := rnictest.New(t, rnictest.Options{})
	e := p.Opts.PeerPSN
	p.SendFrame(t, writeOnly(p, e.Add(2), 0, []byte{1, 2, 3, 4}))
	p.ExpectAck(t, aeth.NAK(aeth.NAKPSNSequenceError), e, 0)
	p.SendFrame(t, writeOnly(p, e.Add(3), 0, []byte{1, 2, 3, 4}))
	p.ExpectNone(t)
	if !bytes.Equal(p.Region[:4], make([]byte, 4)) {
		t.Fatal("an out-of-sequence WRITE was executed")
	}
	p.ExpectState(t, qp.StateRTS)
	expectAccepted(t, p, e, 1)
	if s := p.QP.Stats(); s.OutOfSeqRequest != 2 {
		t.Fatalf("out_of_seq_request %d, want 2", s.OutOfSeqRequest)
	}
	// After the gap is filled, a new gap is NAKed again.
	p.SendFrame(t, writeOnly(p, e.Add(5), 0, []byte{1, 2, 3, 4}))
	p.ExpectAck(t, aeth.NAK(aeth.NAKPSNSequenceError), e.Add(1), 1)
}

// fatalCase is a request the responder must refuse with a NAK that moves
// the QP to ERR.
type fatalCase struct {
	name string
	opts rnictest.Options
	// send sends the offending packets from PSN e on and returns the PSN
	// of the one that is NAKed and the MSN the NAK carries.
	send func(t *testing.T, p *rnictest.Peer, e bth.PSN) (bth.PSN, aeth.MSN)
	recv cq.Status // the status of the receive posted before; WR_FLUSH_ERR when zero
}

func runFatal(t *testing.T, syn aeth.Syndrome, cases []fatalCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := rnictest.New(t, c.opts)
			p.PostRecv(t, 7, 0, 64)
			psn, msn := c.send(t, p, p.Opts.PeerPSN)
			p.ExpectAck(t, syn, psn, msn)
			p.ExpectNone(t)
			p.ExpectState(t, qp.StateErr)
			want := c.recv
			if want == 0 {
				want = cq.StatusWRFlushErr
			}
			rnictest.ExpectWC(t, p.RecvCQ, want)
			rnictest.ExpectNoWC(t, p.SendCQ)
			p.CheckGuards(t)
			// A QP in ERR executes nothing more.
			p.SendFrame(t, writeOnly(p, psn.Add(1), 0, []byte{9, 9, 9, 9}))
			p.ExpectNone(t)
		})
	}
}

// payload returns n bytes of a pattern.
func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13 + 1)
	}
	return b
}

// TestNAKInvalidRequest: each request the responder cannot accept as
// formed gets NAK invalid request at its PSN, and the QP goes to ERR
// (class C errors; rxe's ERR_MISSING_OPCODE_*, ERR_UNSUPPORTED_OPCODE,
// ERR_LENGTH, ERR_TOO_MANY_RDMA_ATM_REQ, ERR_MISALIGNED_ATOMIC).
func TestNAKInvalidRequest(t *testing.T) {
	write := func(op bth.Opcode, dmaLen uint32, n int) func(t *testing.T, p *rnictest.Peer, e bth.PSN) (bth.PSN, aeth.MSN) {
		return func(t *testing.T, p *rnictest.Peer, e bth.PSN) (bth.PSN, aeth.MSN) {
			h := p.Req(op, e)
			h.RETH = reth.Fields{VA: p.RegionVA(0), RKey: reth.Key(p.RKey()), DMALen: dmaLen}
			p.Send(t, h, payload(n))
			return e, 0
		}
	}
	runFatal(t, aeth.NAK(aeth.NAKInvalidRequest), []fatalCase{
		{name: "WRITE MIDDLE without FIRST (C9-91)", send: write(bth.RCRDMAWriteMiddle, 0, 1024)},
		{name: "SEND LAST without FIRST", send: write(bth.RCSendLast, 0, 8)},
		{name: "SEND ONLY inside a WRITE", send: func(t *testing.T, p *rnictest.Peer, e bth.PSN) (bth.PSN, aeth.MSN) {
			write(bth.RCRDMAWriteFirst, 4096, 1024)(t, p, e)
			p.ExpectAck(t, ack, e, 0) // Req asks for an ACK of every packet
			p.Send(t, p.Req(bth.RCSendOnly, e.Add(1)), payload(8))
			return e.Add(1), 0
		}},
		{name: "WRITE FIRST shorter than the MTU (C9-92)", send: write(bth.RCRDMAWriteFirst, 4096, 1000)},
		{name: "WRITE ONLY longer than the MTU (C9-92)", send: write(bth.RCRDMAWriteOnly, 1028, 1028)},
		{name: "empty WRITE LAST (C9-92)", send: func(t *testing.T, p *rnictest.Peer, e bth.PSN) (bth.PSN, aeth.MSN) {
			write(bth.RCRDMAWriteFirst, 1024, 1024)(t, p, e)
			p.ExpectAck(t, ack, e, 0)
			p.Send(t, p.Req(bth.RCRDMAWriteLast, e.Add(1)), nil)
			return e.Add(1), 0
		}},
		{name: "WRITE longer than its DMA length", send: write(bth.RCRDMAWriteOnly, 8, 12)},
		{name: "WRITE shorter than its DMA length", send: write(bth.RCRDMAWriteOnly, 16, 12)},
		{name: "DMA length over 2^31 (C9-94)", send: write(bth.RCRDMAWriteFirst, 1<<31+1, 1024)},
		{name: "READ over 2^31 (C9-94)", send: write(bth.RCRDMAReadRequest, 0xffffffff, 0)},
		{name: "WRITE without REMOTE_WRITE", opts: rnictest.Options{Access: mr.LocalWrite | mr.RemoteRead},
			send: write(bth.RCRDMAWriteOnly, 8, 8)},
		{name: "READ without REMOTE_READ", opts: rnictest.Options{Access: mr.LocalWrite | mr.RemoteWrite},
			send: write(bth.RCRDMAReadRequest, 8, 0)},
		{name: "atomic without REMOTE_ATOMIC", opts: rnictest.Options{Access: mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead},
			send: func(t *testing.T, p *rnictest.Peer, e bth.PSN) (bth.PSN, aeth.MSN) {
				h := p.Req(bth.RCFetchAdd, e)
				h.AtomicETH.VA, h.AtomicETH.RKey, h.AtomicETH.SwapAdd = p.RegionVA(0), reth.Key(p.RKey()), 1
				p.Send(t, h, nil)
				return e, 0
			}},
		{name: "misaligned atomic", send: func(t *testing.T, p *rnictest.Peer, e bth.PSN) (bth.PSN, aeth.MSN) {
			h := p.Req(bth.RCCompareSwap, e)
			h.AtomicETH.VA, h.AtomicETH.RKey = p.RegionVA(4), reth.Key(p.RKey())
			p.Send(t, h, nil)
			return e, 0
		}},
		{name: "FLUSH (unsupported)", send: func(t *testing.T, p *rnictest.Peer, e bth.PSN) (bth.PSN, aeth.MSN) {
			h := p.Req(bth.RCFlush, e)
			h.RETH = reth.Fields{VA: p.RegionVA(0), RKey: reth.Key(p.RKey()), DMALen: 8}
			p.Send(t, h, nil)
			return e, 0
		}},
		{name: "ATOMIC WRITE (unsupported)", send: write(bth.RCAtomicWrite, 8, 8)},
		{name: "SEND longer than the receive", recv: cq.StatusLocLenErr,
			send: func(t *testing.T, p *rnictest.Peer, e bth.PSN) (bth.PSN, aeth.MSN) {
				p.Send(t, p.Req(bth.RCSendOnly, e), payload(65)) // the receive holds 64
				return e, 0
			}},
		{name: "after a good message", send: func(t *testing.T, p *rnictest.Peer, e bth.PSN) (bth.PSN, aeth.MSN) {
			p.SendFrame(t, writeOnly(p, e, 0, []byte{1, 2, 3, 4}))
			p.ExpectAck(t, ack, e, 1)
			write(bth.RCRDMAWriteLast, 0, 4)(t, p, e.Add(1))
			return e.Add(1), 1
		}},
	})
}

// TestNAKRemoteAccess: a request naming memory it may not touch gets NAK
// remote access error at its PSN and the QP goes to ERR; nothing outside
// the region is read or written.
func TestNAKRemoteAccess(t *testing.T) {
	rw := func(op bth.Opcode, va uint64, rkey func(p *rnictest.Peer) uint32, n uint32) func(t *testing.T, p *rnictest.Peer, e bth.PSN) (bth.PSN, aeth.MSN) {
		return func(t *testing.T, p *rnictest.Peer, e bth.PSN) (bth.PSN, aeth.MSN) {
			h := p.Req(op, e)
			h.RETH = reth.Fields{VA: va, RKey: reth.Key(rkey(p)), DMALen: n}
			var data []byte
			if op != bth.RCRDMAReadRequest {
				data = payload(int(n))
			}
			p.Send(t, h, data)
			return e, 0
		}
	}
	good := func(p *rnictest.Peer) uint32 { return p.RKey() }
	end := uint64(rnictest.RegionIOVA + 16<<10)
	runFatal(t, aeth.NAK(aeth.NAKRemoteAccess), []fatalCase{
		{name: "bad rkey", send: rw(bth.RCRDMAWriteOnly, rnictest.RegionIOVA, func(p *rnictest.Peer) uint32 { return p.RKey() ^ 0x5a00 }, 8)},
		{name: "the lkey of a local-only region", send: rw(bth.RCRDMAWriteOnly, rnictest.LocalIOVA, func(p *rnictest.Peer) uint32 { return uint32(p.LocalMR.RKey()) }, 8)},
		{name: "WRITE past the end", send: rw(bth.RCRDMAWriteOnly, end-4, good, 8)},
		{name: "WRITE before the start", send: rw(bth.RCRDMAWriteOnly, rnictest.RegionIOVA-1, good, 8)},
		{name: "WRITE wrapping the address space", send: rw(bth.RCRDMAWriteOnly, ^uint64(3), good, 8)},
		{name: "READ past the end", send: rw(bth.RCRDMAReadRequest, end-63, good, 64)},
		{name: "atomic outside", send: func(t *testing.T, p *rnictest.Peer, e bth.PSN) (bth.PSN, aeth.MSN) {
			h := p.Req(bth.RCFetchAdd, e)
			h.AtomicETH.VA, h.AtomicETH.RKey, h.AtomicETH.SwapAdd = end, reth.Key(p.RKey()), 1
			p.Send(t, h, nil)
			return e, 0
		}},
		{name: "WRITE to a region without REMOTE_WRITE", send: func(t *testing.T, p *rnictest.Peer, e bth.PSN) (bth.PSN, aeth.MSN) {
			ro, err := p.Dev.RegMRIOVA(p.PD, make([]byte, 4096), 0x200000, mr.LocalWrite|mr.RemoteRead)
			must(t, err)
			return rw(bth.RCRDMAWriteOnly, 0x200000, func(*rnictest.Peer) uint32 { return uint32(ro.RKey()) }, 8)(t, p, e)
		}},
	})
}

// TestNAKRemoteOperationalError: the responder cannot use the receive
// buffer it was given: the receive completes with LOC_PROT_ERR, the SEND
// gets NAK remote operational error, and the QP goes to ERR.
func TestNAKRemoteOperationalError(t *testing.T) {
	p := rnictest.New(t, rnictest.Options{})
	bad := p.LocalSGE(0, 64)
	bad.LKey ^= 0x99
	_, err := p.QP.PostRecv([]qp.RecvWR{{WRID: 3, SGList: []qp.SGE{bad}}, {WRID: 4, SGList: []qp.SGE{p.LocalSGE(0, 64)}}})
	must(t, err)
	e := p.Opts.PeerPSN
	p.Send(t, p.Req(bth.RCSendOnly, e), payload(16))
	p.ExpectAck(t, aeth.NAK(aeth.NAKRemoteOperation), e, 0)
	p.ExpectNone(t)
	p.ExpectState(t, qp.StateErr)
	wcs := rnictest.ExpectWC(t, p.RecvCQ, cq.StatusLocProtErr, cq.StatusWRFlushErr)
	if wcs[0].WRID != 3 || wcs[1].WRID != 4 {
		t.Fatalf("receives %+v", wcs)
	}
	p.CheckGuards(t)
}

// TestRNRNAK: a SEND, or a WRITE with immediate, that finds no receive
// posted gets an RNR NAK at its PSN carrying the responder's
// min_rnr_timer; the QP stays up, and the retried request succeeds once a
// receive is there.
func TestRNRNAK(t *testing.T) {
	p := rnictest.New(t, rnictest.Options{MinRNRTimer: 14})
	e := p.Opts.PeerPSN
	rnr := aeth.RNRNAK(14)
	p.Send(t, p.Req(bth.RCSendOnly, e), []byte("late receive"))
	p.ExpectAck(t, rnr, e, 0)
	// Until the request is retried, what follows it is out of sequence
	// and dropped without a second NAK.
	p.Send(t, p.Req(bth.RCSendOnly, e.Add(1)), []byte("next"))
	p.ExpectNone(t)
	p.ExpectState(t, qp.StateRTS)
	p.Send(t, p.Req(bth.RCSendOnly, e), []byte("late receive"))
	p.ExpectAck(t, rnr, e, 0)

	p.PostRecv(t, 5, 0, 64)
	p.Send(t, p.Req(bth.RCSendOnly, e), []byte("late receive"))
	p.ExpectAck(t, ack, e, 1)
	wc := rnictest.ExpectWC(t, p.RecvCQ, cq.StatusSuccess)[0]
	if wc.WRID != 5 || string(p.Local[:wc.ByteLen]) != "late receive" {
		t.Fatalf("receive %+v %q", wc, p.Local[:12])
	}

	h := p.Req(bth.RCRDMAWriteOnlyWithImm, e.Add(1))
	h.RETH = reth.Fields{VA: p.RegionVA(0), RKey: reth.Key(p.RKey()), DMALen: 4}
	h.Imm = 0xfeed
	p.Send(t, h, []byte{1, 2, 3, 4})
	p.ExpectAck(t, rnr, e.Add(1), 1)
	if s := p.QP.Stats(); s.SendRNRErr != 3 {
		t.Fatalf("send_rnr_err %d, want 3", s.SendRNRErr)
	}
	p.PostRecv(t, 6, 0, 64)
	p.Send(t, h, []byte{1, 2, 3, 4})
	p.ExpectAck(t, ack, e.Add(1), 2)
	if wc := rnictest.ExpectWC(t, p.RecvCQ, cq.StatusSuccess)[0]; wc.WRID != 6 || wc.ImmData != 0xfeed || wc.Opcode != cq.OpRecvRDMAWithImm {
		t.Fatalf("receive %+v", wc)
	}
}

// TestRequesterNAKs: the requester fails the oldest WQE with the status a
// NAK names and flushes the rest; an unknown NAK code is a remote
// operational error, as rxe's completer takes it.
func TestRequesterNAKs(t *testing.T) {
	for _, c := range []struct {
		code aeth.NAKCode
		want cq.Status
	}{
		{aeth.NAKInvalidRequest, cq.StatusRemInvReqErr},
		{aeth.NAKRemoteAccess, cq.StatusRemAccessErr},
		{aeth.NAKRemoteOperation, cq.StatusRemOpErr},
		{aeth.NAKRemoteOperation + 1, cq.StatusRemOpErr},
	} {
		t.Run(c.code.String(), func(t *testing.T) {
			p := rnictest.New(t, rnictest.Options{})
			d := p.Opts.DevPSN
			p.PostSend(t,
				qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, SGList: []qp.SGE{p.LocalSGE(0, 8)}, RemoteAddr: 0x5000, RKey: 1},
				qp.SendWR{WRID: 2, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, SGList: []qp.SGE{p.LocalSGE(0, 8)}, RemoteAddr: 0x5000, RKey: 1})
			p.ExpectOp(t, bth.RCRDMAWriteOnly, d)
			p.ExpectOp(t, bth.RCRDMAWriteOnly, d.Add(1))
			p.Send(t, p.Resp(bth.RCAcknowledge, d, aeth.NAK(c.code), 0), nil)
			wcs := rnictest.ExpectWC(t, p.SendCQ, c.want, cq.StatusWRFlushErr)
			if wcs[0].WRID != 1 || wcs[1].WRID != 2 {
				t.Fatalf("completions %+v", wcs)
			}
			p.ExpectState(t, qp.StateErr)
		})
	}
}

// TestRequesterGhostAndStale: an ACK for a PSN the requester never sent
// and an ACK older than what is outstanding complete nothing; the real
// ACK then completes the WRITE.
func TestRequesterGhostAndStale(t *testing.T) {
	p := rnictest.New(t, rnictest.Options{})
	d := p.Opts.DevPSN
	p.PostSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGList: []qp.SGE{p.LocalSGE(0, 8)}, RemoteAddr: 0x5000, RKey: 1})
	p.ExpectOp(t, bth.RCRDMAWriteOnly, d)
	p.Send(t, p.Resp(bth.RCAcknowledge, d.Add(1000), ack, 1), nil)
	p.Send(t, p.Resp(bth.RCAcknowledge, d.Add(1), aeth.NAK(aeth.NAKRemoteAccess), 1), nil)
	p.Send(t, p.Resp(bth.RCAcknowledge, d.Add(-5&bth.PSNMask), aeth.NAK(aeth.NAKRemoteAccess), 1), nil)
	p.ExpectNone(t)
	rnictest.ExpectNoWC(t, p.SendCQ)
	p.ExpectState(t, qp.StateRTS)
	p.Send(t, p.Resp(bth.RCAcknowledge, d, ack, 1), nil)
	p.Sync(t)
	rnictest.ExpectWC(t, p.SendCQ, cq.StatusSuccess)
}

// TestRequesterSequenceNAK: a NAK PSN sequence error sends the requester
// back to the PSN it names, at once; what it names before is acknowledged.
func TestRequesterSequenceNAK(t *testing.T) {
	p := rnictest.New(t, rnictest.Options{RetryCnt: 3})
	d := p.Opts.DevPSN
	copy(p.Local, payload(3000))
	p.PostSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGList: []qp.SGE{p.LocalSGE(0, 3000)}, RemoteAddr: 0x5000, RKey: 1})
	p.ExpectOp(t, bth.RCRDMAWriteFirst, d)
	p.ExpectOp(t, bth.RCRDMAWriteMiddle, d.Add(1))
	p.ExpectOp(t, bth.RCRDMAWriteLast, d.Add(2))
	p.Send(t, p.Resp(bth.RCAcknowledge, d.Add(1), aeth.NAK(aeth.NAKPSNSequenceError), 0), nil)
	mid := p.ExpectOp(t, bth.RCRDMAWriteMiddle, d.Add(1))
	if !bytes.Equal(mid.Payload, p.Local[1024:2048]) {
		t.Fatal("retransmitted MIDDLE carries other bytes")
	}
	p.ExpectOp(t, bth.RCRDMAWriteLast, d.Add(2))
	rnictest.ExpectNoWC(t, p.SendCQ)
	p.Send(t, p.Resp(bth.RCAcknowledge, d.Add(2), ack, 1), nil)
	p.Sync(t)
	rnictest.ExpectWC(t, p.SendCQ, cq.StatusSuccess)
	if s := p.QP.Stats(); s.RcvdSeqErr != 1 {
		t.Fatalf("rcvd_seq_err %d, want 1", s.RcvdSeqErr)
	}
}

// TestRequesterRNRWait: an RNR NAK makes the requester wait the timer it
// names, then send the request again from its PSN.
func TestRequesterRNRWait(t *testing.T) {
	p := rnictest.New(t, rnictest.Options{RNRRetry: 7})
	d := p.Opts.DevPSN
	p.PostSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: []qp.SGE{p.LocalSGE(0, 8)}})
	p.ExpectOp(t, bth.RCSendOnly, d)
	p.Send(t, p.Resp(bth.RCAcknowledge, d, aeth.RNRNAK(1), 0), nil) // 0.01 ms
	p.ExpectOp(t, bth.RCSendOnly, d)
	p.Send(t, p.Resp(bth.RCAcknowledge, d, ack, 1), nil)
	p.Sync(t)
	rnictest.ExpectWC(t, p.SendCQ, cq.StatusSuccess)
	if s := p.QP.Stats(); s.RcvdRNRErr != 1 {
		t.Fatalf("rcvd_rnr_err %d, want 1", s.RcvdRNRErr)
	}
}

// TestDuplicateAtomicAnswered: a retried atomic is answered from the saved
// original value, and not executed again.
func TestDuplicateAtomicAnswered(t *testing.T) {
	p := rnictest.New(t, rnictest.Options{})
	e := p.Opts.PeerPSN
	binary.NativeEndian.PutUint64(p.Region[8:], 40)
	h := p.Req(bth.RCFetchAdd, e)
	h.AtomicETH.VA, h.AtomicETH.RKey, h.AtomicETH.SwapAdd = p.RegionVA(8), reth.Key(p.RKey()), 2
	for range 2 {
		p.Send(t, h, nil)
		if k := p.ExpectOp(t, bth.RCAtomicAcknowledge, e); k.AtomicAck.OrigData() != 40 || k.AETH.MSN() != 1 {
			t.Fatalf("atomic ACK %v orig %d", k, k.AtomicAck.OrigData())
		}
	}
	if v := binary.NativeEndian.Uint64(p.Region[8:]); v != 42 {
		t.Fatalf("remote word %d, want 42", v)
	}
}

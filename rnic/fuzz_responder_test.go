package rnic_test

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic/rnictest"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/reth"
)

// A fuzz input is a byte of work to post, then records of fuzzRecord
// bytes, each one packet the peer sends:
//
//	0     opcode (any byte: reserved ones are built and sent too)
//	1     flags: fuzzAckReq, fuzzResponse, fuzzBadKey, fuzzBadPKey,
//	      fuzzTVer, fuzzForeign, fuzzSE, fuzzBadQP
//	2-3   PSN delta (int16): from the next expected request PSN, or with
//	      fuzzResponse from the device's first PSN
//	4-5   VA: offset from the region's IOVA minus 4096 (uint16)
//	6-7   DMA length (uint16), shifted left by byte 8's low 5 bits
//	9     AETH syndrome
//	10    payload length: 4 times it, plus byte 8's top 2 bits (0 on a
//	      FIRST or MIDDLE is one path MTU)
//	11    payload byte, compare and swap values
//
// The work byte's bits post a receive (two of them with bit 0; none on
// an SRQ, which FuzzResponderSRQ fills itself), and send
// a 2000-byte WRITE (bit 1), a 1500-byte READ (bit 2) and a FETCH_ADD
// (bit 3) for the peer's responses to answer.
const fuzzRecord = 12

const (
	fuzzAckReq = 1 << iota
	fuzzResponse
	fuzzBadKey
	fuzzBadPKey
	fuzzTVer
	fuzzForeign
	fuzzSE
	fuzzBadQP
)

// fuzzSeeds are inputs made of packets a well-behaved peer sends: the
// fuzzer mutates them into hostile ones.
func fuzzSeeds() [][]byte {
	rec := func(op bth.Opcode, flags byte, psn int16, vaOff uint16, dmaLen uint16, shift, syn, n, fill byte) []byte {
		b := make([]byte, fuzzRecord)
		b[0], b[1] = byte(op), flags
		binary.BigEndian.PutUint16(b[2:], uint16(psn))
		binary.BigEndian.PutUint16(b[4:], vaOff)
		binary.BigEndian.PutUint16(b[6:], dmaLen)
		b[8], b[9], b[10], b[11] = shift, syn, n, fill
		return b
	}
	in := func(work byte, recs ...[]byte) []byte {
		b := []byte{work}
		for _, r := range recs {
			b = append(b, r...)
		}
		return b
	}
	ackSyn := byte(aeth.ACK(aeth.UnlimitedCredits))
	const va = 4096 // Region[0]
	return [][]byte{
		in(1, rec(bth.RCSendOnly, fuzzAckReq, 0, 0, 0, 0, 0, 32/4, 1)),
		in(1, rec(bth.RCSendFirst, 0, 0, 0, 0, 0, 0, 0, 2)), // payload grown to the MTU below
		in(0, rec(bth.RCRDMAWriteOnly, fuzzAckReq, 0, va, 64, 0, 0, 64/4, 3)),
		in(0, rec(bth.RCRDMAWriteFirst, 0, 0, va, 1500, 0, 0, 0, 4),
			rec(bth.RCRDMAWriteLast, fuzzAckReq, 0, 0, 0, 0, 0, 476/4, 4)),
		in(1, rec(bth.RCRDMAWriteOnlyWithImm, fuzzAckReq, 0, va+100, 8, 0, 0, 8/4, 5)),
		in(0, rec(bth.RCRDMAReadRequest, 0, 0, va, 3000, 0, 0, 0, 0)),
		in(0, rec(bth.RCFetchAdd, 0, 0, va+8, 0, 0, 0, 0, 1),
			rec(bth.RCFetchAdd, 0, -1, va+8, 0, 0, 0, 0, 1)), // the retry
		in(0, rec(bth.RCCompareSwap, 0, 0, va+16, 0, 0, 0, 0, 0)),
		in(2, rec(bth.RCAcknowledge, fuzzResponse, 1, 0, 0, 0, ackSyn, 0, 0)),
		in(2, rec(bth.RCAcknowledge, fuzzResponse, 0, 0, 0, 0, byte(aeth.NAK(aeth.NAKPSNSequenceError)), 0, 0)),
		in(2, rec(bth.RCAcknowledge, fuzzResponse, 0, 0, 0, 0, byte(aeth.RNRNAK(1)), 0, 0)),
		in(4, rec(bth.RCRDMAReadResponseFirst, fuzzResponse, 0, 0, 0, 0, ackSyn, 0, 7),
			rec(bth.RCRDMAReadResponseLast, fuzzResponse, 1, 0, 0, 0, ackSyn, 476/4, 7)),
		in(8, rec(bth.RCAtomicAcknowledge, fuzzResponse, 0, 0, 0, 0, ackSyn, 0, 9)),
		in(14, rec(bth.RCRDMAReadResponseOnly, fuzzResponse, 0, 0, 0, 0, ackSyn, 0, 7),
			rec(bth.RCAcknowledge, fuzzResponse, 2, 0, 0, 0, byte(aeth.NAK(aeth.NAKRemoteAccess)), 0, 0)),
	}
}

// FuzzResponder drives one live device QP, its responder and its
// requester, with packets mutated from ones a peer would send, and checks
// after every input that the device answered within rnictest.Timeout
// (nothing hangs) and wrote nothing outside its registered regions. A
// panic anywhere in the device fails it too. The device is made once;
// each input starts from a QP taken back through RESET to RTS.
func FuzzResponder(f *testing.F) {
	fuzzResponder(f, rnictest.Options{RetryCnt: 7, RNRRetry: 7})
}

// FuzzResponderSRQ is FuzzResponder with the QP on a shared receive
// queue, where what fails a SEND completes the WQE it took in error
// (IBTA class E). Each input starts with fuzzSRQDepth identical WQEs of
// two SGEs on it, whatever the work byte says, so that an input replays
// alike: an SRQ keeps its WQEs when its QP is reset.
func FuzzResponderSRQ(f *testing.F) {
	fuzzResponder(f, rnictest.Options{RetryCnt: 7, RNRRetry: 7, SRQ: true})
}

const fuzzSRQDepth = 4

func fuzzResponder(f *testing.F, o rnictest.Options) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	p := rnictest.New(f, o)
	var wcs [64]cq.WC
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 || len(in) > 1+16*fuzzRecord {
			return
		}
		p.Reconnect(t)
		for _, c := range []*cq.CQ{p.SendCQ, p.RecvCQ} {
			for n, _ := c.Poll(wcs[:]); n > 0; n, _ = c.Poll(wcs[:]) {
			}
		}
		for p.SRQ != nil && p.SRQ.Posted() < fuzzSRQDepth {
			_, err := p.SRQ.PostRecv([]qp.RecvWR{{WRID: 1, SGList: []qp.SGE{p.LocalSGE(0, 1000), p.LocalSGE(2048, 500)}}})
			must(t, err)
		}
		fuzzPost(t, p, in[0])
		var pkts [][]byte
		next := p.Opts.PeerPSN
		for r := in[1:]; len(r) >= fuzzRecord; r = r[fuzzRecord:] {
			if pkt := fuzzPacket(p, r[:fuzzRecord], &next); pkt != nil {
				pkts = append(pkts, pkt)
			}
		}
		if len(pkts) > 0 {
			p.SendRaw(t, pkts...)
		}
		p.Drain(t) // fails the input if the device does not answer
		p.CheckGuards(t)
	})
}

// fuzzPost posts the work the input's first byte asks for.
func fuzzPost(t *testing.T, p *rnictest.Peer, work byte) {
	if work&1 != 0 && p.SRQ == nil {
		p.PostRecv(t, 1, 0, 1500)
		p.PostRecv(t, 2, 2048, 1024)
	}
	var wrs []qp.SendWR
	if work&2 != 0 {
		wrs = append(wrs, qp.SendWR{WRID: 3, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGList: []qp.SGE{p.LocalSGE(0, 2000)}, RemoteAddr: 0x5000, RKey: 0x77})
	}
	if work&4 != 0 {
		wrs = append(wrs, qp.SendWR{WRID: 4, Opcode: qp.WRRDMARead, Flags: qp.SendSignaled,
			SGList: []qp.SGE{p.LocalSGE(4096, 1000), p.LocalSGE(6000, 500)}, RemoteAddr: 0x6000, RKey: 0x77})
	}
	if work&8 != 0 {
		wrs = append(wrs, qp.SendWR{WRID: 5, Opcode: qp.WRAtomicFetchAndAdd, Flags: qp.SendSignaled,
			SGList: []qp.SGE{p.LocalSGE(8192, 8)}, RemoteAddr: 0x7000, RKey: 0x77, CompareAdd: 1})
	}
	if len(wrs) > 0 {
		p.PostSend(t, wrs...)
	}
}

// fuzzPacket builds the packet record r describes, or nil if it cannot be
// built. next is the PSN the next request takes by default.
func fuzzPacket(p *rnictest.Peer, r []byte, next *bth.PSN) []byte {
	op, flags := bth.Opcode(r[0]), r[1]
	delta := int32(int16(binary.BigEndian.Uint16(r[2:])))
	base := *next
	if flags&fuzzResponse != 0 {
		base = p.Opts.DevPSN
	} else {
		*next = next.Add(1)
	}
	psn := bth.PSN(int32(base)+delta) & bth.PSNMask
	h := p.Req(op, psn)
	h.BTH.AckReq = flags&fuzzAckReq != 0
	h.BTH.SE = flags&fuzzSE != 0
	if flags&fuzzTVer != 0 {
		h.BTH.TVer = r[11] & 0xf
	}
	if flags&fuzzBadPKey != 0 {
		h.BTH.PKey = uint16(r[11])<<8 | uint16(r[4])
	}
	if flags&fuzzBadQP != 0 {
		h.BTH.DestQP = bth.QPN(r[11])
		if h.BTH.DestQP == p.BarrierQPN() {
			h.BTH.DestQP = p.QP.Num() // the barrier must stay up: it is the harness
		}
	}
	h.RETH = fuzzRETH(p, r, flags&fuzzBadKey != 0)
	h.FETH.Selectivity = 1
	h.AtomicETH.VA, h.AtomicETH.RKey = h.RETH.VA, h.RETH.RKey
	h.AtomicETH.SwapAdd, h.AtomicETH.Compare = uint64(r[11]), uint64(r[11]>>1)
	h.AETH.Syndrome, h.AETH.MSN = aeth.Syndrome(r[9]), aeth.MSN(psn)
	h.AtomicAck = uint64(r[11])
	h.Imm, h.IETH = uint32(r[11]), h.RETH.RKey
	return fuzzBuild(p, h, r, flags&fuzzForeign != 0, netip.Addr{})
}

// fuzzRETH is the RETH a record's bytes 4-8 give, FuzzResponder's and
// FuzzUnreliable's alike: the VA from the region's IOVA minus 4096, the
// region's rkey or with badKey bytes 4-7, the DMA length.
func fuzzRETH(p *rnictest.Peer, r []byte, badKey bool) reth.Fields {
	rkey := reth.Key(p.RKey())
	if badKey {
		rkey = reth.Key(binary.BigEndian.Uint32(r[4:]))
	}
	return reth.Fields{
		VA:     uint64(rnictest.RegionIOVA) - 4096 + uint64(binary.BigEndian.Uint16(r[4:])),
		RKey:   rkey,
		DMALen: uint32(binary.BigEndian.Uint16(r[6:])) << (r[8] & 31),
	}
}

// fuzzBuild builds the packet with headers h and the payload a record's
// bytes 8, 10 and 11 give, from a stranger's address with foreign, to dst
// when it is valid (else to the device), or nil if it cannot be built.
func fuzzBuild(p *rnictest.Peer, h wire.Headers, r []byte, foreign bool, dst netip.Addr) []byte {
	n := 4*int(r[10]) + int(r[8]>>6)
	if info, ok := wire.Lookup(h.BTH.Opcode); ok {
		if !info.Payload {
			n = 0
		} else if n == 0 && (info.Position == wire.First || info.Position == wire.Middle) {
			n = p.Opts.MTU.Bytes() // what a well-formed FIRST or MIDDLE carries
		}
	}
	pay := make([]byte, n)
	for i := range pay {
		pay[i] = r[11] + byte(i)
	}
	f := p.Frame(h, pay)
	if foreign {
		f.IP.Src = netip.AddrFrom4([4]byte{10, 0, 0, r[11]})
	}
	if dst.IsValid() {
		f.IP.Dst = dst
	}
	pkt, err := rnictest.Build(f, nil)
	if err != nil {
		return nil
	}
	return pkt
}

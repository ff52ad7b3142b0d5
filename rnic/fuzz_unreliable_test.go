package rnic_test

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/rnic/rnictest"
	"github.com/gorxe/gorxe/wire/bth"
)

// The unreliable fuzzer's QPs, which a record's target bits choose: a UC
// QP and a UD QP with receive queues of their own, and one of each on a
// shared receive queue. The UC QPs' path MTU is 256 bytes. Both UD QPs
// are attached to the multicast group fuzzGroup.
const (
	fuzzUC = iota
	fuzzUCSRQ
	fuzzUD
	fuzzUDSRQ
)

// A FuzzUnreliable input is records of fuzzRecord bytes, each one packet
// the peer sends:
//
//	0     opcode (any byte)
//	1     flags: bits 0-1 the target QP (fuzzUC ...), then
//	      fuzzUBadKey, fuzzUBadQKey, fuzzUForeign, fuzzUSE, fuzzUBadPKey,
//	      fuzzUMcast (to the multicast QP at fuzzGroup, not the target)
//	2-3   PSN delta (int16) from the target's next expected PSN
//	4-5   VA: offset from the region's IOVA minus 4096 (uint16)
//	6-7   DMA length (uint16), shifted left by byte 8's low 5 bits
//	9     Q_Key (with fuzzUBadQKey) and source QP of a DETH
//	10    payload length: 4 times it, plus byte 8's top 2 bits (0 on a
//	      FIRST or MIDDLE is one path MTU)
//	11    payload byte, immediate
const (
	fuzzUBadKey = 1 << (iota + 2)
	fuzzUBadQKey
	fuzzUForeign
	fuzzUSE
	fuzzUBadPKey
	fuzzUMcast
)

// fuzzGroup is the multicast group the fuzzer's UD QPs are attached to.
var fuzzGroup = netip.MustParseAddr("::ffff:239.0.0.1")

// fuzzRecvLen is the length of each receive the fuzzer posts, by WRID.
var fuzzRecvLen = map[uint64]uint32{1: 1500, 2: 1024, 3: 100, 4: 1100, 5: 1100, 6: 112}

// unreliableFixture is rnictest's device with the four QPs the fuzzer
// targets, all completing into one receive CQ.
type unreliableFixture struct {
	p   *rnictest.Peer
	qps [4]*rnic.QP
	srq *rnic.SRQ
	rcq *cq.CQ
	psn [4]bth.PSN // the next PSN the peer sends each
}

func newUnreliableFixture(f *testing.F) *unreliableFixture {
	// Path MTU 256: a record's payload (up to 1023 bytes) can exceed it.
	p := rnictest.New(f, rnictest.Options{MTU: qp.MTU256})
	u := &unreliableFixture{p: p}
	var err error
	u.rcq, err = p.Dev.CreateCQ(1024)
	must(f, err)
	scq, err := p.Dev.CreateCQ(16)
	must(f, err)
	u.srq, err = p.Dev.CreateSRQ(p.PD, qp.SRQAttr{MaxWR: 8, MaxSGE: 2})
	must(f, err)
	for i := range u.qps {
		typ := qp.TypeUC
		if i >= fuzzUD {
			typ = qp.TypeUD
		}
		ia := qp.InitAttr{Type: typ, PD: p.PD, SendCQ: scq, RecvCQ: u.rcq,
			Cap: qp.Cap{MaxSendWR: 4, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 2}}
		if i == fuzzUCSRQ || i == fuzzUDSRQ {
			ia.SRQ = u.srq
		}
		u.qps[i], err = p.Dev.CreateQP(ia)
		must(f, err)
		if typ == qp.TypeUD {
			must(f, p.Dev.AttachMcast(u.qps[i], fuzzGroup))
		}
	}
	return u
}

// reset takes the four QPs through RESET back to RTS, posts two receives
// on each of the two receive queues, tops the SRQ up to eight, and
// discards every completion.
func (u *unreliableFixture) reset(t *testing.T) {
	p := u.p
	for i, q := range u.qps {
		must(t, q.Modify(&qp.Attr{State: qp.StateReset}, qp.AttrState))
		u.psn[i] = p.Opts.PeerPSN
		if i >= fuzzUD {
			must(t, q.Modify(&qp.Attr{State: qp.StateInit, Port: 1, QKey: udQKey}, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrQKey))
			must(t, q.Modify(&qp.Attr{State: qp.StateRTR}, qp.AttrState))
			must(t, q.Modify(&qp.Attr{State: qp.StateRTS, SQPSN: p.Opts.DevPSN}, qp.AttrState|qp.AttrSQPSN))
			continue
		}
		must(t, q.Modify(&qp.Attr{State: qp.StateInit, Port: 1, AccessFlags: mr.RemoteWrite},
			qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags))
		must(t, q.Modify(&qp.Attr{State: qp.StateRTR, PathMTU: p.Opts.MTU, DestQPNum: p.QPN + 2 + bth.QPN(i), RQPSN: p.Opts.PeerPSN,
			AV: qp.AddressVector{DGID: p.Addr, HopLimit: 64}},
			qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN))
		must(t, q.Modify(&qp.Attr{State: qp.StateRTS, SQPSN: p.Opts.DevPSN}, qp.AttrState|qp.AttrSQPSN))
	}
	recv := func(wrid uint64, sges ...qp.SGE) qp.RecvWR { return qp.RecvWR{WRID: wrid, SGList: sges} }
	_, err := u.qps[fuzzUC].PostRecv([]qp.RecvWR{
		recv(1, p.LocalSGE(0, 1500)),
		recv(2, p.LocalSGE(2048, 600), p.LocalSGE(3000, 424)),
	})
	must(t, err)
	_, err = u.qps[fuzzUD].PostRecv([]qp.RecvWR{recv(3, p.LocalSGE(4096, 100)), recv(4, p.LocalSGE(5000, 1100))})
	must(t, err)
	for k := 0; u.srq.Posted() < 8; k++ {
		wr := recv(5, p.LocalSGE(8192, 700), p.LocalSGE(9000, 400))
		if k%2 == 1 {
			wr = recv(6, p.LocalSGE(12288, 112))
		}
		_, err := u.srq.PostRecv([]qp.RecvWR{wr})
		must(t, err)
	}
	var wcs [64]cq.WC
	for n, _ := u.rcq.Poll(wcs[:]); n > 0; n, _ = u.rcq.Poll(wcs[:]) {
	}
}

// packet builds the packet record r describes, or nil if it cannot be
// built.
func (u *unreliableFixture) packet(r []byte) []byte {
	p := u.p
	op, flags := bth.Opcode(r[0]), r[1]
	target := int(flags & 3)
	delta := int32(int16(binary.BigEndian.Uint16(r[2:])))
	psn := bth.PSN(int32(u.psn[target])+delta) & bth.PSNMask
	u.psn[target] = u.psn[target].Add(1)

	h := p.Req(op, psn)
	h.BTH.DestQP = u.qps[target].Num()
	var dst netip.Addr
	if flags&fuzzUMcast != 0 {
		h.BTH.DestQP, dst = bth.MulticastQPN, fuzzGroup.Unmap()
	}
	h.BTH.AckReq = false
	h.BTH.SE = flags&fuzzUSE != 0
	if flags&fuzzUBadPKey != 0 {
		h.BTH.PKey = uint16(r[11])<<8 | uint16(r[4])
	}
	h.RETH = fuzzRETH(p, r, flags&fuzzUBadKey != 0)
	h.DETH.QKey, h.DETH.SrcQP = udQKey, p.QPN+bth.QPN(r[9])
	if flags&fuzzUBadQKey != 0 {
		h.DETH.QKey = uint32(r[9])<<24 | uint32(r[11])
	}
	h.Imm, h.IETH = uint32(r[11]), h.RETH.RKey
	return fuzzBuild(p, h, r, flags&fuzzUForeign != 0, dst)
}

// check fails the input unless the four QPs are still in RTS and every
// receive completion is one the fuzzer posted, with a status a peer's
// message can cause, that filled no more than its WQE holds.
func (u *unreliableFixture) check(t *testing.T) {
	for i, q := range u.qps {
		if s := q.State(); s != qp.StateRTS {
			t.Fatalf("QP %d (%#x) in %v after the input, want RTS: an unreliable QP drops what it cannot take", i, uint32(q.Num()), s)
		}
	}
	var wcs [64]cq.WC
	for n, _ := u.rcq.Poll(wcs[:]); n > 0; n, _ = u.rcq.Poll(wcs[:]) {
		for _, wc := range wcs[:n] {
			size, ok := fuzzRecvLen[wc.WRID]
			switch {
			case !ok:
				t.Fatalf("completion of WRID %d, which was never posted: %+v", wc.WRID, wc)
			case wc.Status != cq.StatusSuccess && wc.Status != cq.StatusLocLenErr &&
				wc.Status != cq.StatusRemInvReqErr && wc.Status != cq.StatusRemAccessErr:
				// Those a bad message ends a receive with (class D and E);
				// the others say the device broke a WQE it was given.
				t.Fatalf("receive completed with %v: %+v", wc.Status, wc)
			case wc.Status == cq.StatusSuccess && wc.ByteLen > size:
				t.Fatalf("completion of %d bytes into a WQE of %d: %+v", wc.ByteLen, size, wc)
			case wc.Status == cq.StatusSuccess && (wc.QPNum == uint32(u.qps[fuzzUD].Num()) || wc.QPNum == uint32(u.qps[fuzzUDSRQ].Num())) && wc.ByteLen < 40:
				t.Fatalf("UD completion of %d bytes, without its 40-byte GRH: %+v", wc.ByteLen, wc)
			}
		}
	}
}

// fuzzUnreliableSeeds are packets a well-behaved peer sends each QP.
func fuzzUnreliableSeeds() [][]byte {
	rec := func(op bth.Opcode, flags byte, psn int16, vaOff, dmaLen uint16, shift, src, n, fill byte) []byte {
		b := make([]byte, fuzzRecord)
		b[0], b[1] = byte(op), flags
		binary.BigEndian.PutUint16(b[2:], uint16(psn))
		binary.BigEndian.PutUint16(b[4:], vaOff)
		binary.BigEndian.PutUint16(b[6:], dmaLen)
		b[8], b[9], b[10], b[11] = shift, src, n, fill
		return b
	}
	join := func(recs ...[]byte) []byte {
		var b []byte
		for _, r := range recs {
			b = append(b, r...)
		}
		return b
	}
	const va = 4096 // Region[0]
	return [][]byte{
		join(rec(bth.UCSendOnly, fuzzUC, 0, 0, 0, 0, 0, 64/4, 1)),
		join(rec(bth.UCSendFirst, fuzzUC, 0, 0, 0, 0, 0, 0, 2), rec(bth.UCSendLastWithImm, fuzzUC, 0, 0, 0, 0, 0, 200/4, 2)),
		join(rec(bth.UCSendFirst, fuzzUCSRQ, 0, 0, 0, 0, 0, 0, 3), rec(bth.UCSendLast, fuzzUCSRQ, 1, 0, 0, 0, 0, 8, 3)), // a lost MIDDLE
		join(rec(bth.UCRDMAWriteOnly, fuzzUC, 0, va, 64, 0, 0, 64/4, 4)),
		join(rec(bth.UCRDMAWriteFirst, fuzzUC, 0, va+100, 256+476, 0, 0, 0, 5), rec(bth.UCRDMAWriteLast, fuzzUC, 0, 0, 0, 0, 0, 476/4, 5)),
		join(rec(bth.UCRDMAWriteOnlyWithImm, fuzzUCSRQ, 0, va, 8, 0, 0, 8/4, 6)),
		join(rec(bth.UCRDMAWriteOnlyWithImm, fuzzUCSRQ|fuzzUBadKey, 0, va, 8, 0, 0, 8/4, 6)),
		join(rec(bth.UDSendOnly, fuzzUD, 0, 0, 0, 0, 1, 60/4, 7), rec(bth.UDSendOnlyWithImm, fuzzUD, 0, 0, 0, 0, 1, 1000/4, 7)),
		join(rec(bth.UDSendOnly, fuzzUDSRQ, 0, 0, 0, 0, 2, 1020/4, 8), rec(bth.UDSendOnly, fuzzUDSRQ|fuzzUBadQKey, 0, 0, 0, 0, 0x80, 64/4, 8)),
		join(rec(bth.UDSendOnlyWithImm, fuzzUD|fuzzUMcast, 0, 0, 0, 0, 3, 80/4, 9), rec(bth.UDSendOnly, fuzzUD|fuzzUMcast, 0, 0, 0, 0, 3, 1000/4, 9)),
	}
}

// FuzzUnreliable drives a live device's UC and UD QPs, with receive
// queues of their own and on a shared receive queue, with packets mutated
// from ones a peer would send, to the QPs and to the multicast group of
// the UD ones. After every input the device must have
// answered within rnictest.Timeout and sent nothing (neither service
// acknowledges), written nothing outside its registered regions, left
// every QP in RTS (UC and UD drop what they cannot take), and completed
// only receives it was given, none longer than its WQE.
func FuzzUnreliable(f *testing.F) {
	for _, s := range fuzzUnreliableSeeds() {
		f.Add(s)
	}
	u := newUnreliableFixture(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 16*fuzzRecord {
			return
		}
		u.reset(t)
		var pkts [][]byte
		for r := in; len(r) >= fuzzRecord; r = r[fuzzRecord:] {
			if pkt := u.packet(r[:fuzzRecord]); pkt != nil {
				pkts = append(pkts, pkt)
			}
		}
		if len(pkts) > 0 {
			u.p.SendRaw(t, pkts...)
		}
		u.p.ExpectNone(t) // fails the input if the device does not answer
		u.p.CheckGuards(t)
		u.check(t)
	})
}

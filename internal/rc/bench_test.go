package rc

import (
	"bytes"
	"testing"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/reth"
)

// benchPort reuses one buffer, keeps the last packet sent and counts them.
// With keep set it gives out fresh buffers instead and keeps a copy of
// every batch sent, for tests that look at more than the last packet.
type benchPort struct {
	fakePort
	buf     []byte
	last    []byte
	count   int
	keep    bool
	batches [][][]byte
}

func (p *benchPort) NewBuffer() []byte {
	if p.keep {
		return make([]byte, len(p.buf))
	}
	return p.buf
}

func (p *benchPort) Send(pkts [][]byte) {
	p.last = pkts[len(pkts)-1]
	p.count += len(pkts)
	if p.keep {
		batch := make([][]byte, len(pkts))
		for i, b := range pkts {
			batch[i] = bytes.Clone(b)
		}
		p.batches = append(p.batches, batch)
	}
}

// benchQP returns a QP in RTS on a benchPort, with a 64 KiB region.
func benchQP(b testing.TB) (*QP, *benchPort, *mr.MR, *cq.CQ) { return windowQP(b, 0) }

// windowQP is benchQP with the requester's window set (0: the default).
func windowQP(b testing.TB, window int) (*QP, *benchPort, *mr.MR, *cq.CQ) {
	port := &benchPort{fakePort: fakePort{mrs: mr.NewTable()}, buf: make([]byte, 9100)}
	c, err := cq.New(1024)
	if err != nil {
		b.Fatal(err)
	}
	pd := port.mrs.AllocPD()
	q, err := New(port, 0x11, qp.InitAttr{Type: qp.TypeRC, PD: pd, SendCQ: c, RecvCQ: c, Window: window,
		Cap: qp.Cap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		b.Fatal(err)
	}
	m, err := port.mrs.Register(pd, make([]byte, 64<<10), 0x10000, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead)
	if err != nil {
		b.Fatal(err)
	}
	ia := initAttr
	ia.AccessFlags = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead
	for _, s := range []struct {
		a qp.Attr
		m qp.AttrMask
	}{{ia, initMask}, {rtrAttr, rtrMask}, {rtsAttr, rtsMask}} {
		if err := q.Modify(&s.a, s.m); err != nil {
			b.Fatal(err)
		}
	}
	return q, port, m, c
}

// BenchmarkRequesterWrite is the requester's and completer's per-message
// work for a one-packet RDMA WRITE: post, build and transmit the packet,
// then take its ACK and retire the work request.
func BenchmarkRequesterWrite(b *testing.B) {
	q, port, m, c := benchQP(b)
	wrs := []qp.SendWR{{Opcode: qp.WRRDMAWrite, SGList: []qp.SGE{{Addr: m.IOVA(), Length: 1024, LKey: m.LKey()}},
		RemoteAddr: 0x1000, RKey: 7}}
	ack := ackPacket(b)
	var wcs [1]cq.WC
	b.ReportAllocs()
	b.SetBytes(1024)
	for b.Loop() {
		if _, err := q.PostSend(wrs); err != nil {
			b.Fatal(err)
		}
		q.Run()
		ack.BTH.SetPSN(bth.Header(port.last).PSN())
		q.HandlePacket(ack)
		c.Poll(wcs[:])
	}
	if st := q.State(); st != qp.StateRTS {
		b.Fatalf("QP in %v", st)
	}
}

// ackPacket returns a parsed ACK for QP 0x11; set its PSN before use.
func ackPacket(tb testing.TB) *wire.Packet {
	buf, _ := wire.AppendTransport(nil, &wire.Headers{
		BTH:  bth.Fields{Opcode: bth.RCAcknowledge, PKey: 0xffff, DestQP: 0x11},
		AETH: aeth.Fields{Syndrome: aeth.ACK(aeth.UnlimitedCredits)},
	}, nil)
	buf = append(buf, 0, 0, 0, 0)
	ack := new(wire.Packet)
	if err := wire.ParseUDPPayload(ack, buf); err != nil {
		tb.Fatal(err)
	}
	return ack
}

// BenchmarkResponderWrite is the responder's per-packet work for an RDMA
// WRITE ONLY of 1024 bytes with AckReq: check the PSN, the opcode sequence,
// the rkey and range, place the payload, and send the ACK.
func BenchmarkResponderWrite(b *testing.B) {
	q, port, m, _ := benchQP(b)
	pkt, _ := wire.AppendTransport(nil, &wire.Headers{
		BTH:  bth.Fields{Opcode: bth.RCRDMAWriteOnly, PKey: 0xffff, DestQP: 0x11, AckReq: true},
		RETH: reth.Fields{VA: m.IOVA(), RKey: reth.Key(m.RKey()), DMALen: 1024},
	}, make([]byte, 1024))
	pkt = append(pkt, 0, 0, 0, 0)
	var p wire.Packet
	if err := wire.ParseUDPPayload(&p, pkt); err != nil {
		b.Fatal(err)
	}
	psn := bth.PSN(rtrAttr.RQPSN)
	b.ReportAllocs()
	b.SetBytes(1024)
	for b.Loop() {
		p.BTH.SetPSN(psn)
		q.HandlePacket(&p)
		q.Run()
		psn = psn.Add(1)
	}
	if op := bth.Header(port.last).Opcode(); op != bth.RCAcknowledge || q.State() != qp.StateRTS {
		b.Fatalf("last packet %v, QP in %v", op, q.State())
	}
}

package rc

import (
	"testing"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/reth"
)

// withSyndrome returns p, an ACK, with its AETH's syndrome set to syn.
func withSyndrome(p *wire.Packet, syn aeth.Syndrome) *wire.Packet {
	p.AETH[0] = byte(syn)
	return p
}

// recovery runs a QP through one round of each loss path on both of its
// sides, and returns a function that runs another round. As a requester
// it sends a 4-packet WRITE that is NAKed (a go-back-N), RNR NAKed (the
// wait, then a go-back-N), timed out (a go-back-N), and acknowledged. As
// a responder it receives a request, a duplicate of it (acknowledged
// again), one past the next (a sequence NAK), and the next.
func recovery(t *testing.T, q *QP, port *benchPort, m *mr.MR, c *cq.CQ) func() {
	wrs := []qp.SendWR{{Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, SGList: []qp.SGE{{Addr: m.IOVA(), Length: uint32(4 * q.mtu), LKey: m.LKey()}},
		RemoteAddr: 0x1000, RKey: 7}}
	nak := withSyndrome(ackPacket(t), aeth.NAK(aeth.NAKPSNSequenceError))
	rnr := withSyndrome(ackPacket(t), aeth.RNRNAK(1))
	ack := ackPacket(t)
	write := request(t, wire.Headers{
		BTH:  bth.Fields{Opcode: bth.RCRDMAWriteOnly, AckReq: true},
		RETH: reth.Fields{VA: m.IOVA(), RKey: reth.Key(m.RKey()), DMALen: 64},
	}, make([]byte, 64))
	var wcs [4]cq.WC
	return func() {
		base := q.req.sentMax
		if _, err := q.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
		nak.BTH.SetPSN(base.Add(1))
		q.HandlePacket(nak)
		rnr.BTH.SetPSN(base.Add(2))
		q.HandlePacket(rnr)
		port.advance(aeth.RNRTimer(1).Duration())
		q.Run()
		port.advance(q.tm.ackTimeout())
		q.Run()
		ack.BTH.SetPSN(base.Add(3))
		q.HandlePacket(ack)
		if n, _ := c.Poll(wcs[:]); n != 1 || wcs[0].Status != cq.StatusSuccess {
			t.Fatalf("%d completions, the first %v", n, wcs[0])
		}
		for _, d := range []uint32{0, bth.PSNMask, 1, 0} { // next, duplicate, past the next, next
			write.BTH.SetPSN(q.resp.psn.Add(d))
			q.HandlePacket(write)
		}
		q.FlushAck()
	}
}

// TestTracedRecoveryAllocatesNothing: the paths a loss takes, NAKs sent
// and received, go-back-N, an RNR wait, a local ACK timeout, a duplicate,
// allocate no more with a trace function installed than without: events
// are values whose strings are constants.
func TestTracedRecoveryAllocatesNothing(t *testing.T) {
	var counts [32]int
	measure := func(traced bool) float64 {
		q, port, m, c := benchQP(t)
		if traced {
			q.SetTrace(func(ev trace.Event) { counts[ev.Kind]++ })
		}
		round := recovery(t, q, port, m, c)
		round()
		return testing.AllocsPerRun(50, round)
	}
	untraced := measure(false)
	traced := measure(true)
	for _, k := range []trace.Kind{trace.NAKReceived, trace.RNRNAKReceived, trace.RNRWaitOver, trace.Timeout, trace.GoBack, trace.NAKSent, trace.Duplicate} {
		if counts[k] < 51 {
			t.Errorf("%d %v events in 51 rounds: the rounds did not take its path", counts[k], k)
		}
	}
	if traced > untraced {
		t.Fatalf("%.1f allocations a round traced, %.1f untraced", traced, untraced)
	}
}

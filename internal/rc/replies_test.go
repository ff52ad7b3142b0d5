package rc

import (
	"testing"

	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/reth"
)

// request returns a parsed request packet for QP 0x11.
func request(t testing.TB, h wire.Headers, payload []byte) *wire.Packet {
	t.Helper()
	h.BTH.PKey, h.BTH.DestQP = 0xffff, 0x11
	buf, err := wire.AppendTransport(nil, &h, payload)
	if err != nil {
		t.Fatal(err)
	}
	buf = append(buf, 0, 0, 0, 0)
	p := new(wire.Packet)
	if err := wire.ParseUDPPayload(p, buf); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReadRepliesInBursts: a large READ's responses leave a burst at a
// time: readBurst on the path that received the request, then maxBurst
// each time the device runs the QP, which the responder asks for until
// the READ is answered. A WRITE that arrives meanwhile is executed at
// once, but its ACK waits behind the READ's responses, so that the
// requester sees every answer in PSN order.
func TestReadRepliesInBursts(t *testing.T) {
	q, port, _, _ := windowQP(t, 0)
	port.keep = true
	const n = 1024 // responses of 1024 bytes at path MTU 1024
	mem := make([]byte, n*1024)
	for i := range mem {
		mem[i] = byte(i / 1024)
	}
	big, err := port.mrs.Register(q.pd, mem, 0x1000000, mr.LocalWrite|mr.RemoteRead|mr.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	psn := rtrAttr.RQPSN
	read := request(t, wire.Headers{BTH: bth.Fields{Opcode: bth.RCRDMAReadRequest, PSN: psn},
		RETH: reth.Fields{VA: big.IOVA(), RKey: reth.Key(big.RKey()), DMALen: n * 1024}}, nil)
	q.HandlePacket(read)
	if port.count != readBurst || port.scheduled == 0 {
		t.Fatalf("the READ request sent %d responses and scheduled the QP %d times; want %d and at least once",
			port.count, port.scheduled, readBurst)
	}
	write := request(t, wire.Headers{BTH: bth.Fields{Opcode: bth.RCRDMAWriteOnly, PSN: psn.Add(n), AckReq: true},
		RETH: reth.Fields{VA: big.IOVA(), RKey: reth.Key(big.RKey()), DMALen: 8}}, []byte("written!"))
	q.HandlePacket(write)
	if string(mem[:8]) != "written!" {
		t.Fatal("the WRITE behind the READ was not executed")
	}
	if port.count != readBurst {
		t.Fatalf("the WRITE sent %d packets ahead of the READ's responses", port.count-readBurst)
	}
	for turn := 1; port.count < n+1; turn++ {
		before, sched := port.count, port.scheduled
		q.Run()
		if sent := port.count - before; sent > maxBurst+1 || sent == 0 {
			t.Fatalf("turn %d sent %d packets, want 1..%d", turn, sent, maxBurst+1)
		}
		if port.count < n+1 && port.scheduled == sched {
			t.Fatalf("turn %d left %d responses and did not ask to run again", turn, n+1-port.count)
		}
	}
	var all [][]byte
	for _, b := range port.batches {
		all = append(all, b...)
	}
	for i, pkt := range all {
		var p wire.Packet
		if err := wire.ParseUDPPayload(&p, append(pkt, 0, 0, 0, 0)); err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		wantPSN, wantOp := psn.Add(uint32(i)), bth.RCRDMAReadResponseMiddle
		switch i {
		case 0:
			wantOp = bth.RCRDMAReadResponseFirst
		case n - 1:
			wantOp = bth.RCRDMAReadResponseLast
		case n:
			wantOp, wantPSN = bth.RCAcknowledge, psn.Add(n)
		}
		if p.BTH.Opcode() != wantOp || p.BTH.PSN() != wantPSN {
			t.Fatalf("packet %d is %v PSN %d, want %v PSN %d", i, p.BTH.Opcode(), p.BTH.PSN(), wantOp, wantPSN)
		}
		if wantOp == bth.RCAcknowledge && p.AETH.Syndrome().Type() != aeth.TypeACK {
			t.Fatalf("the WRITE's answer is %v", p.AETH.Syndrome())
		}
		if i < n && i > 0 && (len(p.Payload) != 1024 || p.Payload[0] != byte(i) || p.Payload[1023] != byte(i)) {
			t.Fatalf("response %d carries the wrong bytes", i)
		}
	}
}

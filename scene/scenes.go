package scene

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// Scene is one scripted conversation.
type Scene struct {
	Name    string // what "gorxe demo NAME" takes
	Title   string
	Teaches string // what it shows, for "gorxe demo --list"
	play    func(st *Stage) error
	setup   setup
}

// setup is how a scene's stage is built.
type setup struct {
	cc   bool // DCQCN on
	cm   bool // the QPs stay in RESET, for the connection managers to connect
	psnA bth.PSN
	conn func(*rnic.ConnectAttr)
}

// Scenes are the scenes, in the order "gorxe demo --list" shows them.
var Scenes = []Scene{
	{Name: "verbs", Title: "The verbs on the wire",
		Teaches: "SEND/RECV, RDMA WRITE, RDMA READ and the two atomics, each as the packets it becomes: FIRST/MIDDLE/LAST at the path MTU, the RETH and AtomicETH, ACK coalescing, READ responses that double as ACKs, the MSN.",
		play:    verbs},
	{Name: "loss", Title: "Loss and go-back-N",
		Teaches: "The fabric drops one packet of an 8-packet WRITE. The responder NAKs the first later packet once (PSN sequence error) and drops the rest; the requester goes back to the PSN the NAK names and resends everything from there.",
		play:    loss},
	{Name: "tail-loss", Title: "Tail loss and the probe",
		Teaches: "The fabric drops the last packet of a WRITE, so nothing comes after it to show the gap and no NAK can come. With no ACK, the requester resends its last packet (a tail-loss probe) rather than wait out the whole ACK timeout. It waits a few round trips for that, as measured by an earlier WRITE.",
		play:    tailLoss},
	{Name: "rnr", Title: "Receiver not ready",
		Teaches: "A SEND arrives before B has posted a receive. B answers with an RNR NAK carrying its RNR timer; A waits that long and sends again, until B has posted one. RNR waits do not count against the retry count, but against rnr_retry.",
		play:    rnr},
	{Name: "read-retry", Title: "A READ retried from the middle",
		Teaches: "The fabric drops the 3rd of a READ's 6 responses. The requester sees the 4th out of order (an implied NAK) and asks again for what is missing only: a new READ request from the missing PSN, for the rest of the bytes. The responder serves it from its saved READ state.",
		play:    readRetry},
	{Name: "duplicate-atomic", Title: "A duplicate atomic",
		Teaches: "The ATOMIC_ACKNOWLEDGE of a FETCH_ADD is lost, so the requester sends the FETCH_ADD again. The responder must not add twice: it recognises the duplicate PSN and answers with the original value it saved.",
		play:    duplicateAtomic},
	{Name: "psn-wrap", Title: "PSN wrap-around",
		Teaches: "PSNs are 24 bits and wrap from 16777215 to 0. A WRITE starts 3 PSNs before the wrap and loses the packet at PSN 0; the NAK names PSN 0 and go-back-N works across the wrap, in serial-number arithmetic.",
		setup:   setup{psnA: 0xfffffd},
		play:    psnWrap},
	{Name: "dead-peer", Title: "A dead peer and retry exhaustion",
		Teaches: "B stops answering. A's local ACK timer fires, it resends, again and again: after retry_cnt retries the work request completes with IBV_WC_RETRY_EXC_ERR and the QP goes to the error state.",
		setup:   setup{conn: func(c *rnic.ConnectAttr) { c.Timeout, c.RetryCnt = 12, 3 }},
		play:    deadPeer},
	{Name: "access-error", Title: "An access error",
		Teaches: "A WRITE names an rkey B never gave out. B's responder refuses it with a NAK (remote access error), which is not retried: A's work request completes with IBV_WC_REM_ACCESS_ERR and A's QP goes to the error state.",
		play:    accessError},
	{Name: "cnp", Title: "A CNP and a rate cut",
		Teaches: "A switch marks one packet of A's WRITE ECN CE instead of dropping it. B's NIC (DCQCN's notification point) sends a CNP to A's QP; A's NIC (the reaction point) cuts the QP's rate and starts recovering it.",
		setup:   setup{cc: true},
		play:    cnp},
	{Name: "cm-lost-rep", Title: "A CM handshake with a lost REP",
		Teaches: "rdma_cm's handshake, in MADs between the NICs' QP 1: A's REQ names its QP and first PSN, B's REP its own, A's RTU ends it, and each side moves its QP to RTS from what the other sent. The fabric drops B's first REP. After the CM response timeout (4.8 s) both timers fire: A's, whose REQ nothing answered, sends the REQ again with the same transaction ID, and B's, whose REP no RTU answered, sends the REP again. B answers the duplicate REQ with the same REP too; A takes the first REP, moves its QP to RTS and sends the RTU, and answers the duplicate REP with the same RTU. Then a SEND crosses the new connection.",
		setup:   setup{cm: true},
		play:    cmLostREP},
}

// Find returns the scene called name.
func Find(name string) (*Scene, bool) {
	for k := range Scenes {
		if Scenes[k].Name == name {
			return &Scenes[k], true
		}
	}
	return nil, false
}

// fill writes a pattern that depends on seed into b.
func (st *Stage) fill(b []byte) {
	for i := range b {
		b[i] = byte('a' + st.rng.IntN(26))
	}
}

// sendOK posts wr on h and waits for its completion, which must succeed.
func (st *Stage) sendOK(h *Host, wr qp.SendWR) (cq.WC, error) {
	if err := h.post(wr); err != nil {
		return cq.WC{}, err
	}
	wc, ok := st.wait(h.SCQ, time.Second)
	if !ok {
		return wc, fmt.Errorf("%s: no completion for work request %d", h.Name, wr.WRID)
	}
	st.say("%s's send CQ: %v", h.Name, wc)
	if wc.Status != cq.StatusSuccess {
		return wc, fmt.Errorf("%s: work request %d: %v", h.Name, wr.WRID, wc.Status)
	}
	return wc, nil
}

// check fails the scene unless ok, and otherwise says what held.
func (st *Stage) check(ok bool, format string, args ...any) error {
	if !ok {
		return fmt.Errorf("check failed: "+format, args...)
	}
	st.say("=> "+format, args...)
	return nil
}

// once returns a drop or mark function true for the first transmission of
// the packet at psn from a requester, or of a response at psn.
func once(psn bth.PSN, response bool) func(*wire.Packet) bool {
	done := false
	return func(p *wire.Packet) bool {
		op := p.BTH.Opcode()
		isResp := op == bth.RCAcknowledge || op == bth.RCAtomicAcknowledge || (op >= bth.RCRDMAReadResponseFirst && op <= bth.RCRDMAReadResponseOnly)
		if done || p.BTH.PSN() != psn || isResp != response {
			return false
		}
		done = true
		return true
	}
}

func verbs(st *Stage) error {
	a, b := st.A, st.B
	msg := make([]byte, 64)
	st.fill(msg)
	copy(a.Buf, msg)
	st.say("B posts a receive of 64 bytes; A SENDs 64 bytes")
	if _, err := b.QP.PostRecv([]qp.RecvWR{{WRID: 1, SGList: b.sge(0, 64)}}); err != nil {
		return err
	}
	if _, err := st.sendOK(a, qp.SendWR{WRID: 1, Opcode: qp.WRSend, SGList: a.sge(0, 64)}); err != nil {
		return err
	}
	if wc, ok := st.wait(b.RCQ, time.Second); !ok || wc.Status != cq.StatusSuccess {
		return fmt.Errorf("B's receive did not complete: %v", wc)
	}
	if err := st.check(bytes.Equal(b.Buf[:64], msg), "B's receive buffer holds what A sent"); err != nil {
		return err
	}
	st.fill(a.Buf[4096 : 4096+3000])
	st.say("A WRITEs 3000 bytes into B's memory: three packets at path MTU 1024")
	if _, err := st.sendOK(a, qp.SendWR{WRID: 2, Opcode: qp.WRRDMAWrite, SGList: a.sge(4096, 3000), RemoteAddr: b.va(4096), RKey: b.MR.RKey()}); err != nil {
		return err
	}
	if err := st.check(bytes.Equal(a.Buf[4096:7096], b.Buf[4096:7096]), "B's memory holds the 3000 bytes"); err != nil {
		return err
	}
	st.fill(b.Buf[16384 : 16384+3000])
	st.say("A READs 3000 bytes of B's memory")
	if _, err := st.sendOK(a, qp.SendWR{WRID: 3, Opcode: qp.WRRDMARead, SGList: a.sge(16384, 3000), RemoteAddr: b.va(16384), RKey: b.MR.RKey()}); err != nil {
		return err
	}
	if err := st.check(bytes.Equal(a.Buf[16384:19384], b.Buf[16384:19384]), "A's buffer holds B's 3000 bytes"); err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(b.Buf[32768:], 100)
	st.say("A does FETCH_ADD 5 and then COMPARE_SWAP 105 -> 7 on B's word, which holds 100")
	if _, err := st.sendOK(a, qp.SendWR{WRID: 4, Opcode: qp.WRAtomicFetchAndAdd, SGList: a.sge(32768, 8), RemoteAddr: b.va(32768), RKey: b.MR.RKey(), CompareAdd: 5}); err != nil {
		return err
	}
	if _, err := st.sendOK(a, qp.SendWR{WRID: 5, Opcode: qp.WRAtomicCmpAndSwp, SGList: a.sge(32776, 8), RemoteAddr: b.va(32768), RKey: b.MR.RKey(), CompareAdd: 105, Swap: 7}); err != nil {
		return err
	}
	old1, old2, now := binary.LittleEndian.Uint64(a.Buf[32768:]), binary.LittleEndian.Uint64(a.Buf[32776:]), binary.LittleEndian.Uint64(b.Buf[32768:])
	return st.check(old1 == 100 && old2 == 105 && now == 7, "the atomics returned %d and %d, and B's word holds %d", old1, old2, now)
}

// writeCheck posts a WRITE of n seeded bytes from A to B and checks B's
// memory when it completes.
func (st *Stage) writeCheck(n int) error {
	a, b := st.A, st.B
	st.fill(a.Buf[:n])
	if _, err := st.sendOK(a, qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, SGList: a.sge(0, n), RemoteAddr: b.va(0), RKey: b.MR.RKey()}); err != nil {
		return err
	}
	return st.check(bytes.Equal(a.Buf[:n], b.Buf[:n]), "B's memory holds all %d bytes, in order", n)
}

func loss(st *Stage) error {
	k := 2 + st.rng.IntN(6) // the 2nd to 7th of 8 packets
	psn := st.A.PSN.Add(uint32(k - 1))
	st.A.link.drop = once(psn, false)
	st.say("A WRITEs 8192 bytes to B (8 packets, PSN %d to %d); the fabric will drop packet %d, PSN %d", st.A.PSN, st.A.PSN.Add(7), k, psn)
	return st.writeCheck(8192)
}

func tailLoss(st *Stage) error {
	a, b := st.A, st.B
	st.say("A WRITEs 64 bytes to B: the round trip it measures times the probe, and no probe is armed before one is")
	if _, err := st.sendOK(a, qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, SGList: a.sge(0, 64), RemoteAddr: b.va(0), RKey: b.MR.RKey()}); err != nil {
		return err
	}
	psn := a.PSN.Add(4)
	a.link.drop = once(psn, false)
	st.say("A WRITEs 4096 bytes to B (4 packets); the fabric will drop the last, PSN %d", psn)
	return st.writeCheck(4096)
}

func rnr(st *Stage) error {
	a, b := st.A, st.B
	st.fill(a.Buf[:100])
	st.say("A SENDs 100 bytes; B has posted no receive yet, and will in 1 ms")
	if err := a.post(qp.SendWR{WRID: 1, Opcode: qp.WRSend, SGList: a.sge(0, 100)}); err != nil {
		return err
	}
	st.idle(time.Millisecond)
	st.say("B posts a receive of 100 bytes")
	if _, err := b.QP.PostRecv([]qp.RecvWR{{WRID: 7, SGList: b.sge(0, 100)}}); err != nil {
		return err
	}
	wc, ok := st.wait(a.SCQ, time.Second)
	if !ok || wc.Status != cq.StatusSuccess {
		return fmt.Errorf("A's SEND did not complete: %v", wc)
	}
	st.say("A's send CQ: %v", wc)
	if wc, ok := st.wait(b.RCQ, time.Second); !ok || wc.Status != cq.StatusSuccess {
		return fmt.Errorf("B's receive did not complete: %v", wc)
	}
	return st.check(bytes.Equal(a.Buf[:100], b.Buf[:100]), "B's receive holds A's 100 bytes")
}

func readRetry(st *Stage) error {
	a, b := st.A, st.B
	psn := a.PSN.Add(2) // the READ's 3rd response
	b.link.drop = once(psn, true)
	st.fill(b.Buf[:6144])
	st.say("A READs 6144 bytes of B's memory (6 responses, PSN %d to %d); the fabric will drop B's 3rd response, PSN %d", a.PSN, a.PSN.Add(5), psn)
	if _, err := st.sendOK(a, qp.SendWR{WRID: 1, Opcode: qp.WRRDMARead, SGList: a.sge(0, 6144), RemoteAddr: b.va(0), RKey: b.MR.RKey()}); err != nil {
		return err
	}
	return st.check(bytes.Equal(a.Buf[:6144], b.Buf[:6144]), "A's buffer holds all 6144 bytes of B's")
}

func duplicateAtomic(st *Stage) error {
	a, b := st.A, st.B
	binary.LittleEndian.PutUint64(b.Buf[0:], 100)
	b.link.drop = once(a.PSN, true)
	st.say("A does FETCH_ADD 5 on B's word, which holds 100; the fabric will drop B's ATOMIC_ACKNOWLEDGE")
	if _, err := st.sendOK(a, qp.SendWR{WRID: 1, Opcode: qp.WRAtomicFetchAndAdd, SGList: a.sge(0, 8), RemoteAddr: b.va(0), RKey: b.MR.RKey(), CompareAdd: 5}); err != nil {
		return err
	}
	old, now := binary.LittleEndian.Uint64(a.Buf[0:]), binary.LittleEndian.Uint64(b.Buf[0:])
	return st.check(old == 100 && now == 105, "A got the original value %d and B's word holds %d: added once", old, now)
}

func psnWrap(st *Stage) error {
	st.A.link.drop = once(0, false)
	st.say("A WRITEs 6144 bytes to B (6 packets, PSN %d to %d across the wrap); the fabric will drop PSN 0", st.A.PSN, st.A.PSN.Add(5))
	return st.writeCheck(6144)
}

func deadPeer(st *Stage) error {
	a, b := st.A, st.B
	st.say("A WRITEs 1024 bytes to B, which is alive")
	if err := st.writeCheck(1024); err != nil {
		return err
	}
	a.link.dead, b.link.dead = true, true
	st.say("B's link goes dead: nothing reaches B and nothing leaves it. A WRITEs 1024 bytes (ACK timeout 16.8 ms, retry_cnt 3)")
	if err := a.post(qp.SendWR{WRID: 2, Opcode: qp.WRRDMAWrite, SGList: a.sge(0, 1024), RemoteAddr: b.va(0), RKey: b.MR.RKey()}); err != nil {
		return err
	}
	wc, ok := st.wait(a.SCQ, 10*time.Second)
	if !ok {
		return fmt.Errorf("A's WRITE never completed")
	}
	st.say("A's send CQ: %v", wc)
	state := a.QP.Query().State
	return st.check(wc.Status == cq.StatusRetryExcErr && state == qp.StateErr, "the WRITE failed with %v and A's QP is in %v", wc.Status, state)
}

func accessError(st *Stage) error {
	a, b := st.A, st.B
	bad := b.MR.RKey() ^ 0x100
	st.say("A WRITEs 64 bytes to B with rkey %#x; B's region's rkey is %#x", uint32(bad), uint32(b.MR.RKey()))
	if err := a.post(qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, SGList: a.sge(0, 64), RemoteAddr: b.va(0), RKey: bad}); err != nil {
		return err
	}
	wc, ok := st.wait(a.SCQ, time.Second)
	if !ok {
		return fmt.Errorf("A's WRITE never completed")
	}
	st.say("A's send CQ: %v", wc)
	state := a.QP.Query().State
	return st.check(wc.Status == cq.StatusRemAccessErr && state == qp.StateErr, "the WRITE failed with %v and A's QP is in %v", wc.Status, state)
}

func cnp(st *Stage) error {
	a := st.A
	a.link.mark = once(a.PSN.Add(1), false)
	st.say("A WRITEs 4096 bytes to B (4 packets); a switch marks the 2nd ECN CE")
	if err := st.writeCheck(4096); err != nil {
		return err
	}
	st.idle(100 * time.Microsecond)
	s, c := a.QP.Congestion()
	return st.check(c.RPCNPHandled == 1 && float64(s.Rate) < rate, "A's QP handled %d CNP: its rate is %v, below the line rate", c.RPCNPHandled, s.Rate)
}

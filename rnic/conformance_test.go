package rnic_test

// The conformance suite: one deterministic test per rule of the RC
// transport, each scripting the loss it needs with the in-memory fabric and
// asserting exact completions and counters.

import (
	"bytes"
	"encoding/binary"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
)

// opOf returns a packet's opcode and PSN, or 0xff for a non-RoCE packet.
func opOf(pkt []byte) (bth.Opcode, bth.PSN) {
	var p wire.Packet
	if wire.ParseIP(&p, pkt) != nil {
		return 0xff, 0
	}
	return p.BTH.Opcode(), p.BTH.PSN()
}

// dropNth drops the nth (from 1) packet the side sends with opcode op.
func (s *side) dropNth(op bth.Opcode, nth int) *atomic.Int32 {
	var seen, dropped atomic.Int32
	s.link.SetFaults(mem.Faults{DropFunc: func(pkt []byte, _ uint64) bool {
		if o, _ := opOf(pkt); o == op && int(seen.Add(1)) == nth {
			dropped.Add(1)
			return true
		}
		return false
	}})
	return &dropped
}

func (s *side) stats() rnic.Counters { return s.dev.Counters() }

// delayFirstAck holds the first ACK the side sends for d, as a host that
// stalls before its first answer would.
func (s *side) delayFirstAck(d time.Duration) {
	var first atomic.Bool
	s.link.SetFaults(mem.Faults{DelayFunc: func(pkt []byte) time.Duration {
		if o, _ := opOf(pkt); o == bth.RCAcknowledge && first.CompareAndSwap(false, true) {
			return d
		}
		return 0
	}})
}

// checkEvents checks, once the bubble's devices are idle, that each
// side's trace tells of every recovery and answer its counters count,
// once: as many events of each kind as the counter that counts the same
// thing. Each of reasons, a kind and a reason, must be among the events
// of the sides together.
func checkEvents(t *testing.T, sides []*side, reasons ...trace.Event) {
	t.Helper()
	synctest.Wait()
	seen := make(map[[2]string]bool)
	for _, s := range sides {
		st := s.stats()
		var n [32]int
		goBacks, seqNAKs := 0, 0
		s.traceM.Lock()
		for _, ev := range s.trace {
			n[ev.Kind]++
			seen[[2]string{ev.Kind.String(), ev.Reason}] = true
			switch {
			case ev.Kind == trace.GoBack && ev.Reason != trace.GoBackRNR:
				goBacks++ // completer_retry_err does not count the RNR NAK's
			case ev.Kind == trace.NAKReceived && ev.Syndrome == trace.PSNSequenceError:
				seqNAKs++
			}
		}
		s.traceM.Unlock()
		for _, c := range []struct {
			what    string
			events  int
			counter uint64
		}{
			{"go-back-N", goBacks, st.CompleterRetryErr},
			{"timeout", n[trace.Timeout], st.RetransmitTimeouts},
			{"probe", n[trace.Probe], st.TailProbes},
			{"spurious probe", n[trace.ProbeSpurious], st.SpuriousProbes},
			{"sequence NAK received", seqNAKs, st.RcvdSeqErr},
			{"RNR NAK received", n[trace.RNRNAKReceived], st.RcvdRNRErr},
			{"RNR NAK sent", n[trace.RNRNAKSent], st.SendRNRErr},
			{"duplicate", n[trace.Duplicate], st.DuplicateRequest},
			{"CNP sent", n[trace.CNPSent], st.CC.NPCNPSent},
		} {
			if uint64(c.events) != c.counter {
				t.Errorf("%s: %d %s events, counters say %d\n%s", s.dev.Name(), c.events, c.what, c.counter, s.traceText())
			}
		}
	}
	for _, r := range reasons {
		if !seen[[2]string{r.Kind.String(), r.Reason}] {
			t.Errorf("no %v event with reason %q", r.Kind, r.Reason)
		}
	}
}

func status(t testing.TB, wcs []cq.WC, want ...cq.Status) {
	t.Helper()
	if len(wcs) != len(want) {
		t.Fatalf("%d completions, want %d: %v", len(wcs), len(want), wcs)
	}
	for i := range want {
		if wcs[i].Status != want[i] {
			t.Fatalf("completion %d (wr_id %d): %v, want %v", i, wcs[i].WRID, wcs[i].Status, want[i])
		}
	}
}

// writeChecked fills n bytes of a's buffer from seed, WRITEs them to the
// start of b's as work request id, and fails the test unless the WRITE
// completes successfully within timeout with b holding the same bytes.
func writeChecked(t testing.TB, a, b *side, id uint64, n int, seed uint64, timeout time.Duration) {
	t.Helper()
	fill(a.buf[:n], seed)
	a.postSend(t, writeWR(id, a, b, 0, n))
	status(t, wait(t, a.scq, 1, timeout), cq.StatusSuccess)
	if !bytes.Equal(a.buf[:n], b.buf[:n]) {
		t.Fatal("data differs")
	}
}

func writeWR(id uint64, a, b *side, off, n int) qp.SendWR {
	return qp.SendWR{WRID: id, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGList: []qp.SGE{a.sge(off, n)}, RemoteAddr: b.addr(off), RKey: b.mr.RKey()}
}

func readWR(id uint64, a, b *side, off, n int) qp.SendWR {
	return qp.SendWR{WRID: id, Opcode: qp.WRRDMARead, Flags: qp.SendSignaled,
		SGList: []qp.SGE{a.sge(off, n)}, RemoteAddr: b.addr(off), RKey: b.mr.RKey()}
}

// TestImpliedNAK: the READ response is lost, and the ACK of the WRITE
// after it tells the requester so (C9-114): it retransmits from the READ
// at once, without waiting for its timer.
func TestImpliedNAK(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{timeout: 20, retryCnt: 3}) // 4.3 s: a timeout would fail the test
		fill(b.buf[:512], 1)
		b.dropNth(bth.RCRDMAReadResponseOnly, 1)
		a.postSend(t, readWR(1, a, b, 0, 512), writeWR(2, a, b, 4096, 100))
		status(t, wait(t, a.scq, 2, 2*time.Second), cq.StatusSuccess, cq.StatusSuccess)
		if !bytes.Equal(a.buf[:512], b.buf[:512]) {
			t.Fatal("READ data differs")
		}
		sa, sb := a.stats(), b.stats()
		if sa.CompleterRetryErr != 1 || sa.RetransmitTimeouts != 0 {
			t.Fatalf("requester: %d go-back-N, %d timeouts; want 1 and 0\n%s", sa.CompleterRetryErr, sa.RetransmitTimeouts, a.traceText())
		}
		if sb.DuplicateRequest != 2 { // the READ, replayed, and the WRITE, re-ACKed
			t.Fatalf("responder saw %d duplicates, want 2", sb.DuplicateRequest)
		}
		checkEvents(t, []*side{a, b}, trace.Event{Kind: trace.ImpliedNAK}, trace.Event{Kind: trace.GoBack, Reason: trace.GoBackImpliedNAK},
			trace.Event{Kind: trace.Duplicate, Reason: trace.DuplicateReplayed}, trace.Event{Kind: trace.Duplicate, Reason: trace.DuplicateAcked})
	})
}

// TestAckTimeoutRetry: the only ACK of an 8-packet WRITE is lost; the
// local ACK timer fires, the WRITE's first four packets are sent again
// (timeoutResend), the responder acknowledges each duplicate with the
// WRITE's last PSN, and nothing more goes: the rest had arrived. (The
// tail-loss probe, which would recover sooner, is off.)
func TestAckTimeoutRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{timeout: 14, retryCnt: 3, noProbe: true}) // 67 ms
		b.dropNth(bth.RCAcknowledge, 1)
		writeChecked(t, a, b, 1, 8*1024, 2, 2*time.Second)
		sa, sb := a.stats(), b.stats()
		if sa.RetransmitTimeouts != 1 || sa.CompleterRetryErr != 1 || sb.DuplicateRequest != 4 {
			t.Fatalf("timeouts %d retries %d duplicates %d; want 1, 1, 4", sa.RetransmitTimeouts, sa.CompleterRetryErr, sb.DuplicateRequest)
		}
		checkEvents(t, []*side{a, b}, trace.Event{Kind: trace.GoBack, Reason: trace.GoBackTimeout})
	})
}

// TestAckTimeoutLate: the responder's host stalls before its first answer
// (a peer just started in a one-CPU VM), past the local ACK timeout, with
// all 64 packets of a WRITE arrived. The timer fires, and the requester
// resends only the first four packets from the oldest (timeoutResend):
// when the late answers come, they cover the whole WRITE, and the timeout
// has cost four duplicates, not 64.
func TestAckTimeoutLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{timeout: 14, retryCnt: 3}) // 67 ms
		b.delayFirstAck(100 * time.Millisecond)
		const n = 64 * 1024 // 64 packets of 1 KiB
		writeChecked(t, a, b, 1, n, 4, 2*time.Second)
		sa, sb := a.stats(), b.stats()
		if sa.RetransmitTimeouts != 1 || sb.DuplicateRequest != 4 {
			t.Fatalf("timeouts %d, duplicates at the responder %d; want 1 and 4\n%s", sa.RetransmitTimeouts, sb.DuplicateRequest, a.traceText())
		}
	})
}

// TestAckTimeoutLostWindow: a whole window is lost, every packet of it.
// After the local ACK timeout the requester resends the first four
// packets from the oldest. Once the first is acknowledged, it probes with
// the window's last packet (recoveryConfirm): the answer could be the
// original's, late. The responder NAKs the gap the probe shows, and the
// requester sends the rest, go-back-N: every byte arrives, with no second
// timeout, for one packet more than the window twice. With probes off,
// the rest goes at the first answer.
func TestAckTimeoutLostWindow(t *testing.T) {
	for _, noProbe := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			a, b := newPair(t, pairOpts{timeout: 14, retryCnt: 3, noProbe: noProbe}) // 67 ms
			const n = 32 * 1024
			a.link.SetFaults(mem.Faults{DropFunc: func(_ []byte, seq uint64) bool { return seq < n/1024 }})
			writeChecked(t, a, b, 1, n, 5, 2*time.Second)
			sa, sb := a.stats(), b.stats()
			probes := uint64(1)
			if noProbe {
				probes = 0
			}
			if sa.RetransmitTimeouts != 1 || sb.DuplicateRequest != 0 || sb.OutOfSeqRequest != probes || sa.SentPkts != 2*n/1024+probes {
				t.Fatalf("no probe %v: timeouts %d, duplicates %d, out of sequence %d, sent %d; want 1, 0, %d, %d\n%s",
					noProbe, sa.RetransmitTimeouts, sb.DuplicateRequest, sb.OutOfSeqRequest, sa.SentPkts, probes, 2*n/1024+probes, a.traceText())
			}
		})
	}
}

// TestConfirmProbeNAKLost: as TestAckTimeoutLostWindow, but the NAK that
// answers the requester's probe after the resends (recoveryConfirm) is
// lost too, and the resends are all acknowledged: nothing is left to
// answer, and only a timer can end the wait. The probe timer does: the
// requester goes back to the oldest unacknowledged PSN, and every byte
// arrives. (A QP that took the acknowledged resends for nothing
// outstanding disarmed its timers here and never sent again.)
func TestConfirmProbeNAKLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{timeout: 14, retryCnt: 3}) // 67 ms
		const n = 32 * 1024
		a.link.SetFaults(mem.Faults{DropFunc: func(_ []byte, seq uint64) bool { return seq < n/1024 }})
		var naks atomic.Int32
		b.link.SetFaults(mem.Faults{DropFunc: func(pkt []byte, _ uint64) bool {
			var p wire.Packet
			return wire.ParseIP(&p, pkt) == nil && p.BTH.Opcode() == bth.RCAcknowledge &&
				p.AETH.Syndrome().Type() == aeth.TypeNAK && naks.Add(1) == 1
		}})
		writeChecked(t, a, b, 1, n, 5, 2*time.Second)
		sa := a.stats()
		if naks.Load() == 0 || sa.TailProbes == 0 {
			t.Fatalf("%d NAKs, %d probes: the probe after the resends was not NAKed\n%s", naks.Load(), sa.TailProbes, a.traceText())
		}
		checkEvents(t, []*side{a, b}, trace.Event{Kind: trace.Probe, Reason: trace.ProbeConfirm}, trace.Event{Kind: trace.GoBack, Reason: trace.GoBackProbe})
	})
}

// TestRNRDuringConfirm: a whole window is lost, and a SEND inside the
// four packets resent after the local ACK timeout finds no receive WQE.
// The WRITE before it is acknowledged (the requester probes, in
// recoveryConfirm), then the SEND draws an RNR NAK, and the responder
// drops the probe that follows. The RNR NAK ends the recovery from
// silence: once the receive is posted, the requester resends from the
// SEND to the end of the window after the RNR wait, as after any RNR NAK,
// without a second probe. (Before, it resent only the SEND and then
// waited, holding the rest, for the probe timer.)
func TestRNRDuringConfirm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{timeout: 14, retryCnt: 3, rnrRetry: 7, minRNRTimer: 14}) // 67 ms; 1.28 ms
		a.link.SetFaults(mem.Faults{DropFunc: func(_ []byte, seq uint64) bool { return seq < 32 }})
		fill(a.buf[:32*1024], 6)
		a.postSend(t, writeWR(1, a, b, 0, 3*1024), // PSNs 0-2
			qp.SendWR{WRID: 2, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: []qp.SGE{a.sge(3*1024, 1024)}}, // 3
			writeWR(3, a, b, 4*1024, 28*1024)) // 4-31
		time.Sleep(80 * time.Millisecond) // past the timeout, the resends and the first RNR NAKs
		if a.stats().RcvdRNRErr == 0 || a.stats().TailProbes != 1 {
			t.Fatalf("%d RNR NAKs, %d probes before the receive; want some and 1\n%s", a.stats().RcvdRNRErr, a.stats().TailProbes, a.traceText())
		}
		posted := time.Now()
		b.postRecv(t, qp.RecvWR{WRID: 9, SGList: []qp.SGE{b.sge(64*1024, 1024)}})
		status(t, wait(t, a.scq, 3, 2*time.Second), cq.StatusSuccess, cq.StatusSuccess, cq.StatusSuccess)
		took := time.Since(posted)
		if !bytes.Equal(a.buf[:3*1024], b.buf[:3*1024]) || !bytes.Equal(a.buf[4*1024:32*1024], b.buf[4*1024:32*1024]) ||
			!bytes.Equal(a.buf[3*1024:4*1024], b.buf[64*1024:65*1024]) {
			t.Fatal("data differs")
		}
		sa := a.stats()
		if sa.RetransmitTimeouts != 1 || sa.TailProbes != 1 || took > 5*time.Millisecond {
			t.Fatalf("timeouts %d, probes %d, %v from the receive to the completions; want 1, 1, at most an RNR wait and a few round trips\n%s",
				sa.RetransmitTimeouts, sa.TailProbes, took, a.traceText())
		}
	})
}

// TestPSNSequenceError: a middle packet is lost; the responder NAKs the
// gap once and drops what follows; the requester goes back to the NAKed PSN.
func TestPSNSequenceError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{timeout: 20, retryCnt: 3})
		a.dropNth(bth.RCRDMAWriteMiddle, 1)
		writeChecked(t, a, b, 1, 8*1024, 3, 2*time.Second) // 8 packets: FIRST, 6 MIDDLE, LAST
		sa, sb := a.stats(), b.stats()
		if sa.RcvdSeqErr != 1 || sa.CompleterRetryErr != 1 || sa.RetransmitTimeouts != 0 {
			t.Fatalf("requester: %d sequence NAKs, %d go-back-N, %d timeouts; want 1, 1, 0", sa.RcvdSeqErr, sa.CompleterRetryErr, sa.RetransmitTimeouts)
		}
		if sb.OutOfSeqRequest != 6 { // the 6 packets after the lost one
			t.Fatalf("responder dropped %d out-of-sequence requests, want 6", sb.OutOfSeqRequest)
		}
		checkEvents(t, []*side{a, b}, trace.Event{Kind: trace.GoBack, Reason: trace.GoBackNAK})
		if n := b.events(trace.NAKSent); n != 1 {
			t.Errorf("%d NAKs sent, want 1\n%s", n, b.traceText())
		}
	})
}

// TestRNRThenSuccess: a SEND arrives before its receive is posted; the
// responder answers RNR NAK, the requester waits the RNR timer and retries
// until the receive is there.
func TestRNRThenSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{rnrRetry: 7, minRNRTimer: 14}) // 1.28 ms
		copy(a.buf, "late receive")
		a.postSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: []qp.SGE{a.sge(0, 12)}})
		time.Sleep(20 * time.Millisecond)
		if b.stats().SendRNRErr == 0 {
			t.Fatal("no RNR NAK sent")
		}
		b.postRecv(t, qp.RecvWR{WRID: 5, SGList: []qp.SGE{b.sge(0, 64)}})
		status(t, wait(t, a.scq, 1, 2*time.Second), cq.StatusSuccess)
		if wc := wait(t, b.rcq, 1, time.Second)[0]; wc.WRID != 5 || string(b.buf[:wc.ByteLen]) != "late receive" {
			t.Fatalf("receive %+v %q", wc, b.buf[:12])
		}
		if sa := a.stats(); sa.RcvdRNRErr == 0 || sa.RcvdRNRErr != b.stats().SendRNRErr {
			t.Fatalf("requester got %d RNR NAKs, responder sent %d", sa.RcvdRNRErr, b.stats().SendRNRErr)
		}
		checkEvents(t, []*side{a, b}, trace.Event{Kind: trace.RNRWaitOver}, trace.Event{Kind: trace.GoBack, Reason: trace.GoBackRNR})
		if w, g := a.events(trace.RNRWaitOver), a.events(trace.GoBack); w != int(a.stats().RcvdRNRErr) || g != w {
			t.Errorf("%d RNR waits over and %d go-backs for %d RNR NAKs\n%s", w, g, a.stats().RcvdRNRErr, a.traceText())
		}
	})
}

// TestRNRRetryExhausted: rnr_retry 2 allows three tries; then the WQE fails
// with RNR_RETRY_EXC_ERR and the rest are flushed.
func TestRNRRetryExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{rnrRetry: 2, minRNRTimer: 1})
		a.postSend(t,
			qp.SendWR{WRID: 1, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: []qp.SGE{a.sge(0, 8)}},
			qp.SendWR{WRID: 2, Opcode: qp.WRSend, SGList: []qp.SGE{a.sge(0, 8)}}, // unsignaled, but flushed
			writeWR(3, a, b, 0, 8))
		status(t, wait(t, a.scq, 3, 2*time.Second), cq.StatusRNRRetryExcErr, cq.StatusWRFlushErr, cq.StatusWRFlushErr)
		sa := a.stats()
		if sa.RcvdRNRErr != 3 || sa.RetryRNRExceeded != 1 || b.stats().SendRNRErr != 3 {
			t.Fatalf("RNR NAKs received %d, exhausted %d, sent %d; want 3, 1, 3", sa.RcvdRNRErr, sa.RetryRNRExceeded, b.stats().SendRNRErr)
		}
		if st := a.qp.State(); st != qp.StateErr {
			t.Fatalf("requester QP in %v, want ERR", st)
		}
		checkEvents(t, []*side{a, b}, trace.Event{Kind: trace.WRFailed}, trace.Event{Kind: trace.State, Reason: "a work request failed"})
	})
}

// TestTailLossProbe: the last packet of a WRITE is lost, so no later packet
// reveals the gap; the requester's probe resends it long before the local
// ACK timeout would. (A WRITE before it measures the round trip: no probe
// is armed before one is, TestSlowFirstAnswer.)
func TestTailLossProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{timeout: 20, retryCnt: 3}) // 4.3 s
		a.postSend(t, writeWR(0, a, b, 4096, 64))
		status(t, wait(t, a.scq, 1, time.Second), cq.StatusSuccess)
		a.dropNth(bth.RCRDMAWriteLast, 1)
		fill(a.buf[:3000], 21)
		start := time.Now()
		a.postSend(t, writeWR(1, a, b, 0, 3000))
		status(t, wait(t, a.scq, 1, 4*time.Second), cq.StatusSuccess)
		if el := time.Since(start); el > time.Second {
			t.Fatalf("recovery took %v", el)
		}
		if !bytes.Equal(a.buf[:3000], b.buf[:3000]) {
			t.Fatal("data differs")
		}
		if sa := a.stats(); sa.TailProbes != 1 || sa.RetransmitTimeouts != 0 {
			t.Fatalf("%d probes, %d timeouts; want 1 and 0\n%s", sa.TailProbes, sa.RetransmitTimeouts, a.traceText())
		}
		checkEvents(t, []*side{a, b}, trace.Event{Kind: trace.Probe})
	})
}

// TestSpuriousProbe: nothing is lost, but now and then the responder's
// host stalls for 3 ms (a one-CPU VM descheduled), long past the probe
// timeout's 1 ms floor. The first stall draws a probe, and the probe's
// second timeout a go-back (the next, 2 ms later, would come after the
// stall); the responder answers the packet, and then each copy of it, so
// the requester learns that both were not needed and waits longer from
// then on: the later stalls draw nothing.
func TestSpuriousProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rounds, every, stall = 1200, 300, 3 * time.Millisecond
		a, b := newPair(t, pairOpts{timeout: 14, retryCnt: 3}) // 67 ms
		var sent atomic.Int32
		a.link.SetFaults(mem.Faults{DelayFunc: func(pkt []byte) time.Duration {
			if o, _ := opOf(pkt); o == bth.RCRDMAWriteOnly && sent.Add(1)%every == every/2 {
				return stall
			}
			return 0
		}})
		fill(a.buf[:64], 3)
		for i := range rounds {
			a.postSend(t, writeWR(uint64(i), a, b, 0, 64))
			status(t, wait(t, a.scq, 1, time.Second), cq.StatusSuccess)
		}
		sa, sb := a.stats(), b.stats()
		if sa.TailProbes != 1 || sa.SpuriousProbes != 1 || sa.CompleterRetryErr != 1 || sa.RetransmitTimeouts != 0 {
			t.Fatalf("%d stalls: %d probes, %d found spurious, %d go-backs, %d timeouts; want 1, 1, 1, 0\n%s",
				rounds/every, sa.TailProbes, sa.SpuriousProbes, sa.CompleterRetryErr, sa.RetransmitTimeouts, a.traceText())
		}
		if sb.DuplicateRequest != 2 {
			t.Errorf("the responder saw %d duplicates, want 2: the probe and the go-back", sb.DuplicateRequest)
		}
		checkEvents(t, []*side{a, b}, trace.Event{Kind: trace.ProbeSpurious}, trace.Event{Kind: trace.GoBack, Reason: trace.GoBackProbe})

		// A tail really lost is still found by a probe, at the longer wait
		// (6 ms, twice the stall), long before the local ACK timeout.
		a.link.SetFaults(mem.Faults{})
		a.dropNth(bth.RCRDMAWriteOnly, 1)
		start := time.Now()
		a.postSend(t, writeWR(rounds, a, b, 0, 64))
		status(t, wait(t, a.scq, 1, time.Second), cq.StatusSuccess)
		if el, sa := time.Since(start), a.stats(); sa.TailProbes != 2 || sa.RetransmitTimeouts != 0 || el > 10*time.Millisecond {
			t.Errorf("a lost tail: %d probes in all, %d timeouts, recovered in %v; want 2, 0, at most 10ms", sa.TailProbes, sa.RetransmitTimeouts, el)
		}
	})
}

// TestProbeTakesNoSample: lost tails, each recovered by a probe after the
// 1 ms floor, a few messages apart. The answer to a probe's copy is no
// round trip of the original (Karn's rule): taken as one, each recovery
// counted its own wait as a round trip and doubled the next one's.
func TestProbeTakesNoSample(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{timeout: 14, retryCnt: 3}) // 67 ms
		next := uint64(0)
		write := func() time.Duration {
			start := time.Now()
			a.postSend(t, writeWR(next, a, b, 0, 64))
			next++
			status(t, wait(t, a.scq, 1, time.Second), cq.StatusSuccess)
			return time.Since(start)
		}
		for range 5 {
			write()
		}
		for i := range 8 {
			a.dropNth(bth.RCRDMAWriteOnly, 1)
			if el := write(); el > 1500*time.Microsecond {
				t.Fatalf("lost tail %d recovered in %v, want the 1ms floor\n%s", i+1, el, a.traceText())
			}
			for range 5 {
				write()
			}
		}
		if sa := a.stats(); sa.TailProbes != 8 || sa.RetransmitTimeouts != 0 {
			t.Errorf("%d probes, %d timeouts; want 8, 0", sa.TailProbes, sa.RetransmitTimeouts)
		}
	})
}

// TestSlowFirstAnswer: a QP's first answer comes 40 ms late (a peer just
// started, as in make bench-vm's emulated VMs), with no round trip
// measured yet to time a probe by: the requester waits for it without a
// probe or a go-back.
func TestSlowFirstAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{timeout: 14, retryCnt: 3}) // 67 ms
		b.delayFirstAck(40 * time.Millisecond)
		for i := range 3 {
			a.postSend(t, writeWR(uint64(i), a, b, 0, 64))
			status(t, wait(t, a.scq, 1, time.Second), cq.StatusSuccess)
		}
		if sa := a.stats(); sa.TailProbes != 0 || sa.CompleterRetryErr != 0 || sa.RetransmitTimeouts != 0 {
			t.Fatalf("%d probes, %d go-backs, %d timeouts; want none\n%s", sa.TailProbes, sa.CompleterRetryErr, sa.RetransmitTimeouts, a.traceText())
		}
	})
}

// TestLossyStartProbes: a QP's very first packet is lost, so its first
// message completes by a go-back, which voids the round-trip sample under
// way (Karn's rule) and leaves no round trip measured. The answer that
// drew the go-back still bounds one, so the next message's lost tail is
// found by a probe, not by the local ACK timeout.
func TestLossyStartProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{timeout: 14, retryCnt: 3}) // 67 ms
		a.dropNth(bth.RCRDMAWriteFirst, 1)
		fill(a.buf[:3000], 7)
		a.postSend(t, writeWR(0, a, b, 0, 3000))
		status(t, wait(t, a.scq, 1, time.Second), cq.StatusSuccess)
		if sa := a.stats(); sa.CompleterRetryErr != 1 || sa.RetransmitTimeouts != 0 {
			t.Fatalf("the first message: %d go-backs, %d timeouts; want 1 (the NAK's), 0\n%s", sa.CompleterRetryErr, sa.RetransmitTimeouts, a.traceText())
		}
		a.dropNth(bth.RCRDMAWriteLast, 1)
		fill(a.buf[:3000], 8)
		start := time.Now()
		a.postSend(t, writeWR(1, a, b, 0, 3000))
		status(t, wait(t, a.scq, 1, time.Second), cq.StatusSuccess)
		el, sa := time.Since(start), a.stats()
		if sa.TailProbes != 1 || sa.RetransmitTimeouts != 0 || el > 10*time.Millisecond {
			t.Fatalf("a lost tail after a lossy start: %d probes, %d timeouts, recovered in %v; want 1, 0, at most 10ms\n%s",
				sa.TailProbes, sa.RetransmitTimeouts, el, a.traceText())
		}
		if !bytes.Equal(a.buf[:3000], b.buf[:3000]) {
			t.Fatal("data differs")
		}
	})
}

// TestProbeSlowPeer: a responder that takes its time to answer (every ACK
// of B lost for 200 ms, as a soft-RoCE peer in an emulated VM answers
// seconds late when duplicates queue up) gets one probe, then go-backs on
// a doubling clock, each of a few packets, not the whole window again;
// and when its answers come, they show the packets sent before arrived,
// and the requester goes on from where it was.
func TestProbeSlowPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{timeout: 16, retryCnt: 7}) // 268 ms
		a.postSend(t, writeWR(1, a, b, 0, 64))                 // a round trip measured: the probe times from it
		status(t, wait(t, a.scq, 1, time.Second), cq.StatusSuccess)
		before := a.stats().SentPkts
		quietUntil := time.Now().Add(200 * time.Millisecond)
		b.link.SetFaults(mem.Faults{DropFunc: func([]byte, uint64) bool { return time.Now().Before(quietUntil) }})
		const msgs, size = 5, 64 << 10
		writeChecked(t, a, b, 2, size, msgs, 3*time.Second)
		sa := a.stats()
		// The probe's go-backs double from the 1 ms floor: 2, 4, ... 128
		// ms, eight in 200 ms, timeoutResend packets each.
		need := uint64(msgs * size / 1024)
		if sa.TailProbes > 2 || sa.CompleterRetryErr > 9 || sa.SentPkts-before > need+9*4+2 {
			t.Fatalf("one 200 ms silence: %d probes, %d go-backs, %d packets sent for %d; want at most 2, 9 and %d\n%s",
				sa.TailProbes, sa.CompleterRetryErr, sa.SentPkts-before, need, need+9*4+2, a.traceText())
		}
		checkEvents(t, []*side{a, b}, trace.Event{Kind: trace.GoBack, Reason: trace.GoBackProbe})
	})
}

// TestRetryExceededDeadPeer: the peer is gone; after retry_cnt timeouts
// the oldest WQE fails with RETRY_EXC_ERR and the others are flushed, in
// bounded time.
func TestRetryExceededDeadPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{timeout: 10, retryCnt: 2}) // 4.2 ms
		b.dev.Close()
		start := time.Now()
		a.postSend(t, writeWR(1, a, b, 0, 100), writeWR(2, a, b, 0, 100), readWR(3, a, b, 0, 100))
		status(t, wait(t, a.scq, 3, 2*time.Second), cq.StatusRetryExcErr, cq.StatusWRFlushErr, cq.StatusWRFlushErr)
		if el := time.Since(start); el > time.Second {
			t.Fatalf("took %v", el)
		}
		sa := a.stats()
		if sa.RetransmitTimeouts != 3 || sa.RetryExceededErr != 1 {
			t.Fatalf("timeouts %d, retry exceeded %d; want 3 and 1", sa.RetransmitTimeouts, sa.RetryExceededErr)
		}
		if st := a.qp.State(); st != qp.StateErr {
			t.Fatalf("QP in %v, want ERR", st)
		}
		checkEvents(t, []*side{a}, trace.Event{Kind: trace.WRFailed})
	})
}

// TestRemoteAccessErrors: a bad rkey, a range outside the region, and a
// region without the right all get NAK remote access error: the requester
// completes with REM_ACCESS_ERR and both QPs go to ERR.
func TestRemoteAccessErrors(t *testing.T) {
	cases := []struct {
		name string
		wr   func(a, b *side) qp.SendWR
	}{
		{"bad rkey", func(a, b *side) qp.SendWR {
			w := writeWR(1, a, b, 0, 64)
			w.RKey ^= 0x5a5a5a5a
			return w
		}},
		{"write past the end", func(a, b *side) qp.SendWR {
			w := writeWR(1, a, b, 0, 64)
			w.RemoteAddr = b.addr(len(b.buf) - 32)
			return w
		}},
		{"write before the start", func(a, b *side) qp.SendWR {
			w := writeWR(1, a, b, 0, 64)
			w.RemoteAddr = b.addr(0) - 1
			return w
		}},
		{"read past the end", func(a, b *side) qp.SendWR {
			w := readWR(1, a, b, 0, 64)
			w.RemoteAddr = b.addr(len(b.buf) - 63)
			return w
		}},
		{"atomic outside", func(a, b *side) qp.SendWR {
			return qp.SendWR{WRID: 1, Opcode: qp.WRAtomicFetchAndAdd, Flags: qp.SendSignaled, SGList: []qp.SGE{a.sge(0, 8)},
				RemoteAddr: b.addr(len(b.buf)), RKey: b.mr.RKey(), CompareAdd: 1}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := newPair(t, pairOpts{bufSize: 4096})
				a.postSend(t, c.wr(a, b), writeWR(2, a, b, 0, 8))
				status(t, wait(t, a.scq, 2, 2*time.Second), cq.StatusRemAccessErr, cq.StatusWRFlushErr)
				waitState(t, b.qp, qp.StateErr)
				if a.qp.State() != qp.StateErr {
					t.Fatalf("requester in %v", a.qp.State())
				}
			})
		})
	}
}

// TestWrongAccessRights: a region registered without REMOTE_WRITE refuses a
// WRITE (remote access error); a QP without REMOTE_READ refuses a READ
// (invalid request).
func TestWrongAccessRights(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{})
		ro, err := b.dev.RegMR(b.pd, make([]byte, 4096), mr.LocalWrite|mr.RemoteRead)
		must(t, err)
		a.postSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGList: []qp.SGE{a.sge(0, 16)}, RemoteAddr: ro.IOVA(), RKey: ro.RKey()})
		status(t, wait(t, a.scq, 1, 2*time.Second), cq.StatusRemAccessErr)

		a, b = newPair(t, pairOpts{access: mr.LocalWrite | mr.RemoteWrite})
		a.postSend(t, readWR(1, a, b, 0, 16))
		status(t, wait(t, a.scq, 1, 2*time.Second), cq.StatusRemInvReqErr)
	})
}

// TestLocalErrors: a bad lkey fails locally with LOC_PROT_ERR; a SEND longer
// than the receive buffer fails the receive with LOC_LEN_ERR and the send
// with REM_INV_REQ_ERR.
func TestLocalErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{})
		bad := a.sge(0, 16)
		bad.LKey ^= 0x77
		a.postSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, SGList: []qp.SGE{bad},
			RemoteAddr: b.addr(0), RKey: b.mr.RKey()})
		status(t, wait(t, a.scq, 1, 2*time.Second), cq.StatusLocProtErr)

		a, b = newPair(t, pairOpts{})
		b.postRecv(t, qp.RecvWR{WRID: 1, SGList: []qp.SGE{b.sge(0, 100)}}, qp.RecvWR{WRID: 2, SGList: []qp.SGE{b.sge(0, 100)}})
		a.postSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: []qp.SGE{a.sge(0, 101)}})
		status(t, wait(t, a.scq, 1, 2*time.Second), cq.StatusRemInvReqErr)
		status(t, wait(t, b.rcq, 2, 2*time.Second), cq.StatusLocLenErr, cq.StatusWRFlushErr)
	})
}

func waitState(t testing.TB, q *rnic.QP, want qp.State) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for q.State() != want {
		if time.Now().After(deadline) {
			t.Fatalf("QP in %v, want %v", q.State(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGhostACK: an ACK for a PSN the requester never sent is ignored: it
// completes nothing, and the connection goes on.
func TestGhostACK(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{timeout: 12, retryCnt: 7})
		var hold atomic.Bool
		hold.Store(true)
		b.link.SetFaults(mem.Faults{DropFunc: func(pkt []byte, _ uint64) bool { return hold.Load() }})
		a.postSend(t, writeWR(1, a, b, 0, 64))
		// A host that claims B's address forges ACKs: one far ahead, one
		// for what was sent. (From any other address the device would drop
		// them before the QP saw them: TestSourceAddressChecked.)
		f := forger(t, a, b)
		f(0x123456+1000, aeth.ACK(31))
		f(0x123456+1, aeth.NAK(aeth.NAKRemoteAccess))
		expectNone(t, a.scq, 30*time.Millisecond)
		if a.qp.State() != qp.StateRTS {
			t.Fatalf("QP in %v after ghost ACKs", a.qp.State())
		}
		if c := a.stats(); c.AddrMismatch != 0 || c.PKeyViolations != 0 {
			t.Fatalf("the device dropped the forged ACKs before the QP saw them: %+v", c)
		}
		hold.Store(false)
		status(t, wait(t, a.scq, 1, 2*time.Second), cq.StatusSuccess)
		checkEvents(t, []*side{a, b}, trace.Event{Kind: trace.Dropped, Reason: "ghost response: nothing was sent at this PSN"})
	})
}

// forger returns a function that sends an ACK to s's QP as if from its
// peer: from a third host on the fabric that puts the peer's address in
// the IP source. The fabric routes by destination only, so a link without
// addresses of its own can send such packets.
func forger(t *testing.T, s, peer *side) func(psn bth.PSN, syn aeth.Syndrome) {
	l, err := s.fabric.NewLink()
	must(t, err)
	t.Cleanup(func() { l.Close() })
	return func(psn bth.PSN, syn aeth.Syndrome) {
		f := wire.Frame{
			IP:      wire.IPFields{Src: peer.dev.GIDs()[0].Unmap(), Dst: s.dev.GIDs()[0].Unmap(), HopLimit: 64, DontFrag: true},
			SrcPort: 0xc000, DstPort: wire.UDPPort,
			Headers: wire.Headers{BTH: bth.Fields{Opcode: bth.RCAcknowledge, PKey: 0xffff, DestQP: s.qp.Num(), PSN: psn}},
		}
		f.AETH.Syndrome = syn
		buf := make([]byte, 32, 256)
		buf, err := f.Append(buf)
		must(t, err)
		must(t, l.Send([][]byte{buf}))
	}
}

// TestDuplicateReadSubRange: a response in the middle of a READ is lost;
// the requester asks again for what is missing, and the responder answers
// that tail of the original READ from its saved state.
func TestDuplicateReadSubRange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{timeout: 20, retryCnt: 3})
		var reqs []uint32 // DMA lengths of the READ requests B receives
		var seen atomic.Int32
		b.link.SetFaults(mem.Faults{DropFunc: func(pkt []byte, _ uint64) bool {
			o, _ := opOf(pkt)
			return o == bth.RCRDMAReadResponseMiddle && seen.Add(1) == 2 // the third of 6 responses
		}})
		a.link.SetFaults(mem.Faults{DropFunc: func(pkt []byte, _ uint64) bool {
			var p wire.Packet
			if wire.ParseIP(&p, pkt) == nil && p.BTH.Opcode() == bth.RCRDMAReadRequest {
				reqs = append(reqs, p.RETH.DMALen())
			}
			return false
		}})
		fill(b.buf[:6*1024], 6)
		a.postSend(t, readWR(1, a, b, 0, 6*1024))
		status(t, wait(t, a.scq, 1, 2*time.Second), cq.StatusSuccess)
		if !bytes.Equal(a.buf[:6*1024], b.buf[:6*1024]) {
			t.Fatal("READ data differs")
		}
		if len(reqs) != 2 || reqs[0] != 6*1024 || reqs[1] != 4*1024 {
			t.Fatalf("READ requests for %v bytes, want [6144 4096]", reqs)
		}
		if d := b.stats().DuplicateRequest; d != 1 {
			t.Fatalf("responder saw %d duplicates, want 1", d)
		}
		checkEvents(t, []*side{a, b}, trace.Event{Kind: trace.Duplicate, Reason: trace.DuplicateReplayed})
	})
}

// TestDuplicateAtomicNotExecutedTwice: the ATOMIC ACK is lost; the retried
// FETCH_ADD is answered with the saved original value and not executed
// again: the remote word moves once.
func TestDuplicateAtomicNotExecutedTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{timeout: 14, retryCnt: 3})
		binary.NativeEndian.PutUint64(b.buf[8:], 1000)
		b.dropNth(bth.RCAtomicAcknowledge, 1)
		a.postSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRAtomicFetchAndAdd, Flags: qp.SendSignaled,
			SGList: []qp.SGE{a.sge(0, 8)}, RemoteAddr: b.addr(8), RKey: b.mr.RKey(), CompareAdd: 1})
		status(t, wait(t, a.scq, 1, 2*time.Second), cq.StatusSuccess)
		if got := binary.NativeEndian.Uint64(a.buf); got != 1000 {
			t.Fatalf("original value %d, want 1000", got)
		}
		if got := binary.NativeEndian.Uint64(b.buf[8:]); got != 1001 {
			t.Fatalf("remote value %d, want 1001: executed more than once", got)
		}
		if d := b.stats().DuplicateRequest; d != 1 {
			t.Fatalf("responder saw %d duplicates, want 1", d)
		}
		checkEvents(t, []*side{a, b}, trace.Event{Kind: trace.Duplicate, Reason: trace.DuplicateAnswered})
	})
}

// TestPSNWrap: PSNs run past 0xFFFFFF back to 0 in the middle of messages.
func TestPSNWrap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{sqPSN: 0xfffff0})
		n := 64 * 1024 // 64 packets: PSN 0xfffff0 .. 0x2f
		fill(a.buf[:n], 7)
		fill(b.buf[n:2*n], 8)
		a.postSend(t, writeWR(1, a, b, 0, n), readWR(2, a, b, n, n))
		b.postRecv(t, qp.RecvWR{WRID: 3, SGList: []qp.SGE{b.sge(4*n, n)}})
		a.postSend(t, qp.SendWR{WRID: 3, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: []qp.SGE{a.sge(0, n)}})
		status(t, wait(t, a.scq, 3, 2*time.Second), cq.StatusSuccess, cq.StatusSuccess, cq.StatusSuccess)
		status(t, wait(t, b.rcq, 1, 2*time.Second), cq.StatusSuccess)
		if !bytes.Equal(a.buf[:n], b.buf[:n]) || !bytes.Equal(a.buf[n:2*n], b.buf[n:2*n]) || !bytes.Equal(a.buf[:n], b.buf[4*n:5*n]) {
			t.Fatal("data differs across the PSN wrap")
		}
	})
}

// TestZeroLength: zero-byte SEND, WRITE and READ. A zero-length WRITE or
// READ names no memory, so its rkey and address are not checked (C9-88).
func TestZeroLength(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{})
		b.postRecv(t, qp.RecvWR{WRID: 1})
		a.postSend(t,
			qp.SendWR{WRID: 1, Opcode: qp.WRSend, Flags: qp.SendSignaled},
			qp.SendWR{WRID: 2, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, RemoteAddr: 0xdead, RKey: 0xbad},
			qp.SendWR{WRID: 3, Opcode: qp.WRRDMARead, Flags: qp.SendSignaled, RemoteAddr: 0xdead, RKey: 0xbad},
		)
		status(t, wait(t, a.scq, 3, 2*time.Second), cq.StatusSuccess, cq.StatusSuccess, cq.StatusSuccess)
		if wc := wait(t, b.rcq, 1, time.Second)[0]; wc.Status != cq.StatusSuccess || wc.ByteLen != 0 {
			t.Fatalf("receive %+v", wc)
		}
	})
}

// TestLargeMessages: WRITE, READ and SEND of more than 8 MiB.
func TestLargeMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 9 << 20
		a, b := newPair(t, pairOpts{bufSize: 2 * n, mtu: qp.MTU4096})
		fill(a.buf[:n], 9)
		fill(b.buf[n:], 10)
		a.postSend(t, writeWR(1, a, b, 0, n), readWR(2, a, b, n, n))
		status(t, wait(t, a.scq, 2, 10*time.Second), cq.StatusSuccess, cq.StatusSuccess)
		if !bytes.Equal(a.buf, b.buf) {
			t.Fatal("data differs")
		}
		fill(a.buf[:n], 11)
		b.postRecv(t, qp.RecvWR{WRID: 1, SGList: []qp.SGE{b.sge(n, n)}})
		a.postSend(t, qp.SendWR{WRID: 3, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: []qp.SGE{a.sge(0, n)}})
		status(t, wait(t, a.scq, 1, 10*time.Second), cq.StatusSuccess)
		if wc := wait(t, b.rcq, 1, time.Second)[0]; wc.ByteLen != n || !bytes.Equal(a.buf[:n], b.buf[n:]) {
			t.Fatalf("SEND of %d bytes: %+v", n, wc)
		}
	})
}

// TestSGELists: a SEND gathered from three SGEs is scattered over two; a
// WRITE gathers from four.
func TestSGELists(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{mtu: qp.MTU256})
		fill(a.buf[:4096], 12)
		b.postRecv(t, qp.RecvWR{WRID: 1, SGList: []qp.SGE{b.sge(1000, 300), b.sge(5000, 700)}})
		a.postSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRSend, Flags: qp.SendSignaled,
			SGList: []qp.SGE{a.sge(0, 100), a.sge(2000, 500), a.sge(3000, 400)}})
		status(t, wait(t, a.scq, 1, 2*time.Second), cq.StatusSuccess)
		if wc := wait(t, b.rcq, 1, time.Second)[0]; wc.ByteLen != 1000 {
			t.Fatalf("receive %+v", wc)
		}
		want := append(append(append([]byte{}, a.buf[:100]...), a.buf[2000:2500]...), a.buf[3000:3400]...)
		got := append(append([]byte{}, b.buf[1000:1300]...), b.buf[5000:5700]...)
		if !bytes.Equal(got, want) {
			t.Fatal("scattered SEND differs")
		}
		a.postSend(t, qp.SendWR{WRID: 2, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGList:     []qp.SGE{a.sge(0, 10), a.sge(100, 300), a.sge(700, 1), a.sge(900, 600)},
			RemoteAddr: b.addr(10000), RKey: b.mr.RKey()})
		status(t, wait(t, a.scq, 1, 2*time.Second), cq.StatusSuccess)
		want = append(append(append(append([]byte{}, a.buf[:10]...), a.buf[100:400]...), a.buf[700:701]...), a.buf[900:1500]...)
		if !bytes.Equal(b.buf[10000:10000+len(want)], want) {
			t.Fatal("gathered WRITE differs")
		}
	})
}

// TestRemoteOperationalError: the responder cannot use the receive buffer
// it was given (a bad lkey): its receive completes with LOC_PROT_ERR and it
// NAKs remote operational error, which fails the SEND with REM_OP_ERR.
func TestRemoteOperationalError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{})
		bad := b.sge(0, 64)
		bad.LKey ^= 0x99
		b.postRecv(t, qp.RecvWR{WRID: 1, SGList: []qp.SGE{bad}})
		a.postSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: []qp.SGE{a.sge(0, 8)}})
		status(t, wait(t, a.scq, 1, 2*time.Second), cq.StatusRemOpErr)
		status(t, wait(t, b.rcq, 1, 2*time.Second), cq.StatusLocProtErr)
	})
}

// TestMaxRdAtomic: with max_rd_atomic 2, never more than two READs or
// atomics are outstanding, however many are posted.
func TestMaxRdAtomic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var outstanding, peak atomic.Int32
		trace := func(dir rnic.Direction, pkt []byte) {
			switch op, _ := opOf(pkt); {
			case dir == rnic.Sent && (op == bth.RCRDMAReadRequest || op == bth.RCFetchAdd):
				if n := outstanding.Add(1); n > peak.Load() {
					peak.Store(n)
				}
			case dir == rnic.Received && (op == bth.RCRDMAReadResponseLast || op == bth.RCRDMAReadResponseOnly || op == bth.RCAtomicAcknowledge):
				outstanding.Add(-1)
			}
		}
		a, b := newPair(t, pairOpts{maxRd: 2, packetTrace: trace})
		b.link.SetFaults(mem.Faults{Delay: time.Millisecond}) // responses take long: the limit must bite
		var wrs []qp.SendWR
		for i := range 8 {
			wrs = append(wrs, readWR(uint64(i), a, b, i*4096, 3000))
		}
		wrs = append(wrs, qp.SendWR{WRID: 8, Opcode: qp.WRAtomicFetchAndAdd, Flags: qp.SendSignaled,
			SGList: []qp.SGE{a.sge(60000, 8)}, RemoteAddr: b.addr(60000), RKey: b.mr.RKey(), CompareAdd: 1})
		a.postSend(t, wrs...)
		wcs := wait(t, a.scq, 9, 5*time.Second)
		for i, wc := range wcs {
			if wc.Status != cq.StatusSuccess || wc.WRID != uint64(i) {
				t.Fatalf("completion %d: %+v", i, wc)
			}
		}
		if p := peak.Load(); p != 2 {
			t.Fatalf("at most %d READs and atomics were outstanding, want exactly 2", p)
		}
	})
}

// TestSQDDrains: in SQD the requester finishes what it started and starts
// nothing new until the QP is back in RTS.
func TestSQDDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{})
		must(t, a.qp.Modify(&qp.Attr{State: qp.StateSQD}, qp.AttrState))
		a.postSend(t, writeWR(1, a, b, 0, 100))
		expectNone(t, a.scq, 20*time.Millisecond)
		must(t, a.qp.Modify(&qp.Attr{State: qp.StateRTS}, qp.AttrState))
		status(t, wait(t, a.scq, 1, 2*time.Second), cq.StatusSuccess)
	})
}

// TestHeavyLoss: losses so dense that the local ACK timer, not a NAK or a
// probe, recovers many of them. 20 WRITEs of 64 KiB with a tenth, then a
// fifth, of the packets lost each way, over ten seeds each: every WRITE
// completes, and every byte arrives. With -v it prints the local ACK
// timeouts and the virtual time the runs took in all, the figures that
// chose how many packets a timeout resends (timeoutResend); they move by a
// few percent from run to run, as goroutines ready at one instant of the
// fake clock run in no fixed order.
func TestHeavyLoss(t *testing.T) {
	for _, loss := range []float64{0.1, 0.2} {
		var timeouts uint64
		var took time.Duration
		for seed := uint64(1); seed <= 10; seed++ {
			synctest.Test(t, func(t *testing.T) {
				a, b := newPair(t, pairOpts{noTrace: true})
				a.link.SetFaults(mem.Faults{Drop: loss, Seed: seed})
				b.link.SetFaults(mem.Faults{Drop: loss, Seed: seed + 100})
				const n, size = 20, 64 << 10
				fill(a.buf[:size], seed)
				wrs := make([]qp.SendWR, n)
				for i := range wrs {
					wrs[i] = writeWR(uint64(i), a, b, 0, size)
				}
				start := time.Now()
				a.postSend(t, wrs...)
				for i, wc := range wait(t, a.scq, n, 10*time.Minute) {
					if wc.Status != cq.StatusSuccess {
						t.Fatalf("loss %v, seed %d: completion %d: %v", loss, seed, i, wc)
					}
				}
				took += time.Since(start)
				timeouts += a.stats().RetransmitTimeouts
				if !bytes.Equal(a.buf[:size], b.buf[:size]) {
					t.Fatalf("loss %v, seed %d: data differs", loss, seed)
				}
			})
		}
		t.Logf("loss %v each way, 10 seeds: %d local ACK timeouts, %.1f s of virtual time", loss, timeouts, took.Seconds())
	}
}

// TestProbeSlowDrain: a responder behind a slow link (a soft-RoCE peer in
// an emulated VM drains a deep queue at a packet a millisecond) answers
// all along, but each answer comes only once the packets before it have
// gone through. The round trip measured before the queue built was short;
// a probe timed by it fires, and its go-back voids every sample (Karn's
// rule) and keeps the short estimate. The probe's wait doubles for each of
// its go-backs until a clean sample comes (RFC 6298's backoff), each
// go-back resends only a few packets, and an answer for a packet the
// requester had not yet sent again undoes it: a few go-backs of a few
// packets, not the window again every few milliseconds. One packet lost
// (its NAK comes from behind the queue) changes little.
//
// The same with rstream's writes, 2 KiB doubling to 64 KiB, each its own
// message: the first answers from behind the queue are for packets the
// go-back has resent, and say nothing of the rest; the requester probes
// and waits for the next (recoveryConfirm) instead of sending the window
// again (which made 299 duplicates of 512 packets).
func TestProbeSlowDrain(t *testing.T) {
	for _, growing := range []bool{false, true} {
		for _, drop := range []uint64{0, 100, 300} {
			synctest.Test(t, func(t *testing.T) {
				a, b := newPair(t, pairOpts{timeout: 18, mtu: qp.MTU4096, bufSize: 4 << 20}) // 1.07 s
				a.postSend(t, writeWR(1, a, b, 0, 64))                                       // a short round trip measured
				status(t, wait(t, a.scq, 1, time.Second), cq.StatusSuccess)
				// 4 MB/s: a 4 KiB packet a millisecond; the packet sent drop-th
				// from now lost, if drop is not 0.
				a.link.SetFaults(mem.Faults{Bandwidth: 4 << 20, DropFunc: func(_ []byte, seq uint64) bool { return seq+1 == drop }})
				var wrs []qp.SendWR
				off, size := 0, 64<<10
				if growing {
					size = 2 << 10
				}
				for off+size <= 2<<20 {
					wrs = append(wrs, writeWR(uint64(2+len(wrs)), a, b, off, size))
					off += size
					size = min(2*size, 64<<10)
				}
				fill(a.buf[:off], 9)
				a.postSend(t, wrs...)
				wait(t, a.scq, len(wrs), 10*time.Second)
				if !bytes.Equal(a.buf[:off], b.buf[:off]) {
					t.Fatal("data differs")
				}
				sa, sb := a.stats(), b.stats()
				// Each go-back of the window sent up to 256 packets again:
				// before the backoff, 32 go-backs sent 6561 packets for these
				// 512; with a backoff that the first answer after a go-back
				// ended, 6 and 1764 (with one packet lost, 32 go-backs and
				// 9889 packets for 2048 at MTU 1024); now 4 and 550 (with
				// one lost, 9 and 790).
				need := uint64((off + 4095) / 4096)
				t.Logf("growing %v, packet %d lost: %d go-backs (%d undone), %d packets sent for %d, %d duplicates at the responder",
					growing, drop, sa.CompleterRetryErr, sa.SpuriousGoBacks, sa.SentPkts, need, sb.DuplicateRequest)
				// A loss costs the window once more: the responder drops
				// what follows the gap.
				most := need + need/4
				if drop != 0 {
					most += qp.DefaultWindow
				}
				if sa.CompleterRetryErr > 10 || sa.SentPkts > most || sb.DuplicateRequest > 64 {
					t.Fatalf("growing %v, packet %d lost: %d go-backs, %d packets sent for %d, %d duplicates; want at most 10, %d and 64\n%s",
						growing, drop, sa.CompleterRetryErr, sa.SentPkts, need, sb.DuplicateRequest, most, a.traceText())
				}
			})
		}
	}
}

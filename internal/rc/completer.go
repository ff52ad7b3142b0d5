package rc

import (
	"encoding/binary"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
)

// completer matches ACKs, NAKs, READ responses and atomic ACKs to the
// outstanding send work requests, completes them in order, and decides
// when the requester goes back N (IBTA Vol 1 §9.7.5.2; rxe_comp.c). It
// owns the retry counts.
type completer struct {
	q         *QP
	psn       bth.PSN // the oldest PSN not yet acknowledged or answered
	retryLeft uint8   // retries left of retry_cnt
	rnrLeft   uint8   // retries left of rnr_retry
	state     recoveryState
	fewEnd    bth.PSN // recoveryFew, recoveryConfirm: the requester sends nothing from here
}

// recoveryState says whether a go-back-N is under way.
type recoveryState uint8

const (
	// recoveryNone: every answer so far came in order.
	recoveryNone recoveryState = iota
	// recoveryGoBackN: the requester went back after a loss, and no
	// answer has shown progress since. Further gaps in READ responses
	// (the rest of the lost burst) start no other retransmission.
	recoveryGoBackN
	// recoveryFew: the local ACK timer fired, or the tail-loss probe
	// went unanswered (timers.expiredProbe), and the requester has gone
	// back, but resends only the first timeoutResend packets from the
	// oldest unanswered PSN, each asking for an ACK, until an answer
	// shows what the responder holds. Silence can be a late answer
	// rather than a loss (a peer just started, its first window slow to
	// come through: 96 ms in the emulated VMs of make bench-vm, past a
	// 67 ms timeout; a soft-RoCE peer draining a queue), and then costs
	// those few duplicates, not the window again. A NAK ends it and
	// go-back-N goes on from there. TCP restarts from one segment after
	// its retransmission timeout (RFC 5681) for the same reason. An
	// answer for a PSN the requester has not sent again since it went
	// back shows the packets sent before arriving after all: the
	// requester then resumes where it was (onProgress). An answer for
	// one it has resent leads to recoveryConfirm.
	recoveryFew
	// recoveryConfirm: an answer came during recoveryFew, but for a
	// packet resent since the go-back: it may answer the resend (the
	// packets sent before were lost) or the original (they are arriving,
	// late). The requester resends nothing more and probes with the last
	// packet it ever sent (onProgress): if the packets after the resent
	// ones were lost, the responder NAKs the gap the probe shows, and
	// go-back-N goes on from there, a round trip later than it would
	// have; if they are arriving, the responder answers one of them, a
	// PSN not resent, and the go-back is undone. Without it a responder
	// answering late, behind a queue, drew the whole window again as soon
	// as it answered one of the first few packets: rstream's transfers
	// start at 2 KiB, each its own message, and soft-RoCE in a one-CPU VM
	// saw 274 duplicates of a 256-packet burst (docs/interop.md). This is
	// F-RTO's test (RFC 5682), which sends new data after the first
	// answer to learn whether a timeout was spurious.
	recoveryConfirm
)

// start resets the completer for a requester starting at psn.
func (c *completer) start(psn bth.PSN) {
	*c = completer{q: c.q, psn: psn, retryLeft: c.q.attr.RetryCnt, rnrLeft: c.q.attr.RNRRetry}
}

// oldest returns the oldest PSN not yet acknowledged or answered.
func (c *completer) oldest() bth.PSN { return c.psn }

// setRetries takes new retry_cnt and rnr_retry attributes.
func (c *completer) setRetries(retry, rnr uint8) { c.retryLeft, c.rnrLeft = retry, rnr }

// handleResponse takes a response packet. A response may open the window,
// retire a fenced READ, or send the requester back (a NAK, an implied
// NAK), so the requester sends what it now can before the QP is unlocked:
// nothing else would make it.
func (c *completer) handleResponse(p *wire.Packet) {
	q := c.q
	if !q.canSend() {
		return
	}
	psn := p.BTH.PSN()
	if !psn.Before(q.req.sentMax) {
		q.event(trace.Event{Kind: trace.Dropped, PSN: uint32(psn), Opcode: p.BTH.Opcode().String(), Reason: "ghost response: nothing was sent at this PSN"})
		return
	}
	q.tm.onAnswer()
	switch p.BTH.Opcode() {
	case bth.RCAcknowledge:
		c.handleAck(psn, p.AETH.Syndrome())
	case bth.RCAtomicAcknowledge:
		c.handleAtomicAck(psn, p.AtomicAck.OrigData())
	case bth.RCRDMAReadResponseFirst, bth.RCRDMAReadResponseMiddle,
		bth.RCRDMAReadResponseLast, bth.RCRDMAReadResponseOnly:
		c.handleReadResponse(p, psn)
	}
	q.req.sendSome()
}

// handleAck takes an ACK or NAK. An ACK's syndrome may carry a credit
// count (0..30, or 31 for none advertised) as hardware responders send
// it: gorxe's requester does not limit itself by credits, so every ACK
// counts alike and none stalls the sender (IBTA §9.7.5.1.2 lets a
// requester ignore them when it does not run end-to-end flow control).
func (c *completer) handleAck(psn bth.PSN, syn aeth.Syndrome) {
	q := c.q
	if psn.Before(c.psn.Add(bth.PSNMask)) { // before comp.psn - 1: stale
		return
	}
	switch syn.Type() {
	case aeth.TypeACK:
		if psn.Before(c.psn) {
			q.tm.onDuplicateAck(psn)
		}
		if w := c.retire(psn); w != nil && w.isReadOrAtomic() && !w.first.After(psn) {
			// The responder is past a READ or atomic whose answer never
			// arrived: implied NAK (C9-114).
			c.impliedNAK(w)
		}
	case aeth.TypeRNRNAK:
		if psn.Before(c.psn) {
			return
		}
		c.retire(psn.Add(bth.PSNMask))
		q.stats.RcvdRNRErr++
		q.event(trace.Event{Kind: trace.RNRNAKReceived, PSN: uint32(psn), Wait: syn.RNRTimer().Duration()})
		switch c.rnrLeft {
		case 7:
		case 0:
			q.stats.RetryRNRExceeded++
			q.enterError(q.sq.at(q.sq.head), cq.StatusRNRRetryExcErr, "")
			return
		default:
			c.rnrLeft--
		}
		// The responder holds psn and drops what follows until psn comes
		// again: an answer that ends a recovery from silence, which
		// would otherwise hold the requester at fewEnd with nothing
		// left to answer, until a probe timeout.
		c.state = recoveryNone
		q.req.goBack(psn)
		q.tm.startRNRWait(syn.RNRTimer())
	case aeth.TypeNAK:
		if psn.Before(c.psn) {
			return
		}
		c.retire(psn.Add(bth.PSNMask))
		code := syn.NAKCode()
		q.event(trace.Event{Kind: trace.NAKReceived, PSN: uint32(psn), Syndrome: syndrome(code)})
		if code == aeth.NAKPSNSequenceError {
			q.stats.RcvdSeqErr++
			c.retransmit(psn, trace.GoBackNAK)
			return
		}
		status := cq.StatusRemOpErr
		switch code {
		case aeth.NAKInvalidRequest:
			status = cq.StatusRemInvReqErr
		case aeth.NAKRemoteAccess:
			status = cq.StatusRemAccessErr
		}
		if q.sq.head != q.sq.tail {
			q.enterError(q.sq.at(q.sq.head), status, "")
		}
	}
}

// syndrome names a NAK code as the IBTA and rdma-core do, for the trace.
func syndrome(code aeth.NAKCode) string {
	switch code {
	case aeth.NAKPSNSequenceError:
		return trace.PSNSequenceError
	case aeth.NAKInvalidRequest:
		return trace.InvalidRequest
	case aeth.NAKRemoteAccess:
		return trace.RemoteAccessError
	case aeth.NAKRemoteOperation:
		return trace.RemoteOperationalError
	case aeth.NAKInvalidRDRequest:
		return trace.InvalidRDRequest
	}
	return code.String() // a reserved code, "NAK_CODE_n"
}

// retransmit sends the requester back to psn, if a retry is left: the
// answer to a sequence NAK, an implied NAK, or a local ACK timeout, which
// why names (a trace.GoBack reason).
func (c *completer) retransmit(psn bth.PSN, why string) {
	if !c.useRetry() {
		return
	}
	c.goBack(psn, why)
	c.q.tm.restartRetransmit()
}

// goBack starts a go-back-N from psn, whatever retries are left: the
// requester resends from there, and the completer notes the recovery.
// why is what made it, a trace.GoBack reason; the recovery from a local
// ACK timeout or an unanswered probe, which know of no loss, only of
// silence, resends only a few packets until one is answered
// (recoveryFew).
func (c *completer) goBack(psn bth.PSN, why string) {
	q := c.q
	q.req.goBack(psn)
	q.tm.onRetransmit(psn, why)
	c.state = recoveryGoBackN
	if why == trace.GoBackTimeout || why == trace.GoBackProbe {
		c.state, c.fewEnd = recoveryFew, psn.Add(timeoutResend)
	}
	q.stats.CompleterRetryErr++
	q.event(trace.Event{Kind: trace.GoBack, PSN: uint32(psn), Reason: why})
}

// retire completes, in order, the SEND and RDMA WRITE work requests that
// every PSN up to and including a acknowledges. It stops at the first WQE
// that a does not finish (a READ or atomic waits for its own answer) and
// returns it, or nil when the queue is done.
func (c *completer) retire(a bth.PSN) *sendWQE {
	q := c.q
	progress := false
	defer func() {
		if progress {
			c.onProgress()
		}
	}()
	for q.sq.head != q.sq.tail {
		w := q.sq.at(q.sq.head)
		if !w.started || w.first.After(a) {
			return w
		}
		if w.isReadOrAtomic() {
			return w
		}
		if w.last.After(a) {
			if next := a.Add(1); next.After(c.psn) {
				c.psn = next
				progress = true
			}
			return w
		}
		if next := w.last.Add(1); next.After(c.psn) {
			c.psn = next
		}
		progress = true
		c.answered(w)
	}
	return nil
}

// onProgress runs after the completer moved its PSN forward: retries are
// restored, the recovery is over, the timers restart, and a requester
// left behind by a retransmission skips what is already acknowledged.
//
// An answer during a recovery from silence (recoveryFew) for a PSN the
// requester has not yet sent again shows that the packets it sent before
// it went back are arriving: the silence was a late answer, not a loss.
// The requester then resumes after the last packet it had sent, rather
// than send them all again behind the originals (the go-back is undone,
// as TCP undoes a spurious retransmission, RFC 3522): a soft-RoCE peer
// answering from behind a queue of a window, a millisecond a packet,
// would otherwise get every packet twice. Were some of those packets
// lost after all, the responder NAKs the gap, or the probe finds it.
//
// The first answer during that recovery for a packet it has sent again
// says nothing either way: the requester stops resending and probes
// (recoveryConfirm), and the answers that follow decide.
func (c *completer) onProgress() {
	q := c.q
	q.tm.onAcked(c.psn)
	c.retryLeft = q.attr.RetryCnt
	c.rnrLeft = q.attr.RNRRetry
	few, confirming := c.resendingFew(), c.state == recoveryConfirm
	c.state = recoveryNone
	switch {
	case !few || !c.psn.Before(q.req.sentMax):
		q.req.skipTo(c.psn)
	case q.req.psn.Before(c.psn):
		q.stats.SpuriousGoBacks++
		q.event(trace.Event{Kind: trace.GoBackUndone, PSN: uint32(c.psn.Add(bth.PSNMask)), Expected: uint32(q.req.sentMax)})
		q.req.skipTo(q.req.sentMax)
	case confirming:
		c.state = recoveryConfirm // a resend answered; the probe is out
	case q.tm.probeLast(trace.ProbeConfirm):
		c.state, c.fewEnd = recoveryConfirm, q.req.psn
	default:
		q.req.skipTo(c.psn) // the last packet cannot be probed (a READ, an atomic)
	}
	q.tm.restartRetransmit()
}

// impliedNAK retransmits from the oldest unanswered PSN of w, a READ or
// atomic whose responses were lost, once per loss.
func (c *completer) impliedNAK(w *sendWQE) {
	q := c.q
	if c.state == recoveryGoBackN {
		return
	}
	q.event(trace.Event{Kind: trace.ImpliedNAK, PSN: uint32(c.psn), WRID: w.wr.WRID})
	c.retransmit(c.psn, trace.GoBackImpliedNAK)
}

// awaiting returns the READ (read set) or atomic WQE that a response with
// PSN r answers, if r is the PSN the completer waits for. A response also
// acknowledges every SEND and WRITE before it, which are retired first. A
// response past the one awaited means those between were lost (implied
// NAK); a response before it is a duplicate. Both return nil.
func (c *completer) awaiting(r bth.PSN, read bool) *sendWQE {
	if r.Before(c.psn) {
		return nil
	}
	w := c.retire(r.Add(bth.PSNMask))
	if w == nil || (w.wr.Opcode == qp.WRRDMARead) != read || !w.isReadOrAtomic() || !r.InRange(w.first, w.last) {
		if w != nil && w.isReadOrAtomic() && w.last.Before(r) {
			c.impliedNAK(w)
		}
		return nil
	}
	if r != c.psn {
		c.impliedNAK(w) // a response before this one was lost
		return nil
	}
	return w
}

// answered retires w, at the head of the queue, now fully answered.
func (c *completer) answered(w *sendWQE) {
	q := c.q
	w.acked = true
	q.sq.head++
	q.completeSend(w, cq.StatusSuccess)
}

func (c *completer) handleReadResponse(p *wire.Packet, r bth.PSN) {
	q := c.q
	w := c.awaiting(r, true)
	if w == nil {
		return
	}
	k := uint32(r.Diff(w.first))
	off := k * uint32(q.mtu)
	want := min(w.length-off, uint32(q.mtu))
	op := p.BTH.Opcode()
	lastOp := op == bth.RCRDMAReadResponseLast || op == bth.RCRDMAReadResponseOnly
	if uint32(len(p.Payload)) != want || lastOp != (r == w.last) {
		q.enterError(w, cq.StatusBadRespErr, "a READ response of the wrong length or opcode")
		return
	}
	if !scatter(w.wr.SGList, w.mrs, off, p.Payload) {
		q.enterError(w, cq.StatusLocProtErr, errScatter)
		return
	}
	c.psn = r.Add(1)
	if r == w.last {
		c.answered(w)
	}
	c.onProgress()
}

func (c *completer) handleAtomicAck(r bth.PSN, orig uint64) {
	q := c.q
	w := c.awaiting(r, false) // an atomic's one PSN: first == last == r
	if w == nil {
		return
	}
	var v [8]byte
	binary.NativeEndian.PutUint64(v[:], orig) // the local buffer holds a host-order u64
	if !scatter(w.wr.SGList, w.mrs, 0, v[:]) {
		q.enterError(w, cq.StatusLocProtErr, errScatter)
		return
	}
	c.psn = r.Add(1)
	c.answered(w)
	c.onProgress()
}

// expiredRetransmit handles a local ACK timeout: the requester goes back to
// the oldest unacknowledged PSN, unless retry_cnt is used up, and sends
// the first few packets from there until one is answered (recoveryFew).
func (c *completer) expiredRetransmit() {
	q := c.q
	if !q.req.outstanding() || !q.canSend() {
		return
	}
	q.stats.RetransmitTimeouts++
	q.event(trace.Event{Kind: trace.Timeout, PSN: uint32(c.psn)})
	c.retransmit(c.psn, trace.GoBackTimeout)
	q.req.sendSome()
}

// timeoutResend is how many packets the requester resends after a local
// ACK timeout, or an unanswered probe, before an answer comes. One, as TCP sends, is the least a
// late answer costs; but where packets are lost, the one packet or its
// ACK is lost too, and each such loss costs another timeout. With a fifth
// of the packets lost each way, 20 WRITEs of 64 KiB over the in-memory
// fabric (40 seeds, a fake clock: TestHeavyLoss's runs, three times each,
// which move by a few percent as ready goroutines run in no fixed order)
// took 1989-2085 timeouts in all resending one packet, 1758-1779
// resending four, and 1489-1551 going back N; with a tenth lost, 195-225,
// 185-203 and 165-188. Four packets, each asking for an ACK, go
// unanswered far less often than one.
const timeoutResend = 4

// resendingFew reports whether the requester, after a local ACK timeout
// or an unanswered probe, sends only the first timeoutResend packets
// from the oldest unanswered PSN (recoveryFew), or nothing more until an
// answer shows whether the packets sent before are arriving
// (recoveryConfirm).
func (c *completer) resendingFew() bool {
	return c.state == recoveryFew || c.state == recoveryConfirm
}

// holds reports whether the recovery from silence keeps the requester,
// standing at psn, from sending.
func (c *completer) holds(psn bth.PSN) bool { return c.resendingFew() && !psn.Before(c.fewEnd) }

// useRetry takes one retry from retry_cnt (7 is unlimited, as rxe), or
// fails the oldest work request with RETRY_EXC_ERR when none are left.
func (c *completer) useRetry() bool {
	q := c.q
	switch c.retryLeft {
	case 7:
		return true
	case 0:
		q.stats.RetryExceededErr++
		q.enterError(q.sq.at(q.sq.head), cq.StatusRetryExcErr, "")
		return false
	}
	c.retryLeft--
	return true
}

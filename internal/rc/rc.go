// Package rc is the engine of Reliable Connected queue pairs (IBTA Vol 1 ch. 9,
// ch. 10), and of Unreliable Connected ones, which run the same engines
// with the reliability taken out (uc.go): the state machine, and the three
// engines of a reliable transport that every RC QP runs:
//
//   - the requester (requester.go) turns send work requests into packets:
//     segmentation by path MTU, PSNs, AckReq, a bounded window;
//   - the responder (responder.go) executes arriving requests in PSN order
//     and acknowledges them, answering duplicates from saved state;
//   - the completer (completer.go) matches ACKs, NAKs, READ responses and
//     atomic ACKs to outstanding work requests, retransmits go-back-N, and
//     produces work completions in order.
//
// Each engine is a type that owns its state (requester, responder,
// completer, and timers for the deadlines); the QP composes them, holds
// the lock, and owns what they share: the attributes, the work queues and
// the batch of packets going out. An engine changes another's state only
// through the other's methods.
//
// A QP does no I/O of its own: its device hands it arriving packets
// (HandlePacket), lets it run when a timer is due or it asked to (Run), and
// sends what it builds (Port). Every method takes the QP's lock, so the
// device's receive goroutine, its timer workers and users posting work
// requests may all drive a QP: the one holding the lock does the work, and
// a PostSend sends its packets from the caller's own goroutine, as a
// hardware NIC starts on a doorbell, without waking another.
//
// The verbs' types (qp.Attr, qp.SendWR, ...) are package qp's; this
// package is internal, so that only the device (rnic) drives an engine.
package rc

import (
	"fmt"
	"sync"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// QP is a Reliable Connected or an Unreliable Connected queue pair.
type QP struct {
	mu      sync.Mutex
	port    Port
	num     bth.QPN
	uc      bool // an Unreliable Connected QP (uc.go)
	pd      *mr.PD
	sendCQ  *cq.CQ
	recvCQ  *cq.CQ
	sigAll  bool
	window  int
	txOff   int
	noProbe bool

	attr  qp.Attr
	mtu   int
	path  TxDesc // where packets to the peer go, from the attributes
	stats qp.Counters

	sq   sendQueue
	rq   recvQueue
	srq  *SRQ     // the shared receive queue the responder takes WQEs from, or nil for rq
	tx   [][]byte // packets built under the lock, sent when it is released
	txb  [][]byte // their buffers
	req  requester
	comp completer
	resp responder
	tm   timers
	cc   cc

	// clock is the time QP.now read under this hold of the lock, or zero.
	clock monotime.Time

	// onEvent, when set, is told of every state change and transport
	// event (SetTrace).
	onEvent func(trace.Event)
	onAsync func(Async) // SetAsync's
}

// New creates a QP numbered num in the RESET state.
func New(port Port, num bth.QPN, ia qp.InitAttr) (*QP, error) {
	if ia.Type != qp.TypeRC && ia.Type != qp.TypeUC {
		return nil, fmt.Errorf("%w: only RC and UC queue pairs are supported, not type %d", qp.ErrAttr, ia.Type)
	}
	if ia.SendCQ == nil || ia.RecvCQ == nil || ia.PD == nil {
		return nil, fmt.Errorf("%w: a QP needs a PD, a send CQ and a receive CQ", qp.ErrAttr)
	}
	srq, err := sharedQueue(&ia)
	if err != nil {
		return nil, err
	}
	if err := checkCap(ia.Cap, srq != nil); err != nil {
		return nil, err
	}
	q := &QP{
		srq:     srq,
		port:    port,
		num:     num,
		uc:      ia.Type == qp.TypeUC,
		pd:      ia.PD,
		sendCQ:  ia.SendCQ,
		recvCQ:  ia.RecvCQ,
		sigAll:  ia.SigAll,
		window:  ia.Window,
		txOff:   port.TxOffset(),
		noProbe: ia.NoTailProbe,
	}
	if q.window <= 0 {
		q.window = qp.DefaultWindow
	}
	q.req.q, q.comp.q, q.resp.q, q.tm.q, q.cc.q = q, q, q, q, q
	q.attr.Cap = ia.Cap
	q.attr.PathMTU = qp.MTU256
	q.mtu = qp.MTU256.Bytes()
	q.sq.init(ia.Cap)
	q.rq.init(ia.Cap)
	return q, nil
}

// checkCap checks a QP's queue sizes; a QP with an SRQ has no receive
// queue to size.
func checkCap(c qp.Cap, srq bool) error {
	switch {
	case c.MaxSendWR < 1 || c.MaxSendWR > qp.MaxWR || (c.MaxRecvWR < 1 && !srq) || c.MaxRecvWR > qp.MaxWR:
		return fmt.Errorf("%w: work queue sizes must be 1..%d (send %d, recv %d)", qp.ErrAttr, qp.MaxWR, c.MaxSendWR, c.MaxRecvWR)
	case c.MaxSendSGE > qp.MaxSGE || c.MaxRecvSGE > qp.MaxSGE:
		return fmt.Errorf("%w: at most %d SGEs per work request", qp.ErrAttr, qp.MaxSGE)
	case c.MaxInlineData > qp.MaxInlineData:
		return fmt.Errorf("%w: at most %d bytes of inline data", qp.ErrAttr, qp.MaxInlineData)
	}
	return nil
}

// Num returns the QP number.
func (q *QP) Num() bth.QPN { return q.num }

// Service returns the transport service the QP runs, whose opcodes it
// takes: RC or UC.
func (q *QP) Service() bth.Service {
	if q.uc {
		return bth.ServiceUC
	}
	return bth.ServiceRC
}

// SetTrace installs fn to be told of the QP's state changes and transport
// events: the NAKs, duplicates and CNPs its responder answers, its
// requester's go-back-N, timeouts, probes and RNR waits, failed work
// requests, DCQCN's rate changes. nil removes it. fn is called with the
// QP's lock held and must not call back into the QP. An event's strings
// are constants but for a rare error's, so a traced QP recovers from a
// loss allocating nothing more than an untraced one.
func (q *QP) SetTrace(fn func(trace.Event)) {
	q.mu.Lock()
	q.onEvent = fn
	q.mu.Unlock()
}

// event reports ev, with the QP's number and the time on the QP's clock,
// to the trace function, if one is installed.
func (q *QP) event(ev trace.Event) {
	if q.onEvent == nil {
		return
	}
	now := q.clock
	if now.IsZero() {
		now = q.port.Now() // not kept in q.clock: tracing changes no decision
	}
	ev.Time = now.SinceEpoch()
	ev.QP = uint32(q.num)
	q.onEvent(ev)
}

// stateEvent reports a change of state; reason says why when it was not
// a Modify.
func (q *QP) stateEvent(from, to qp.State, reason string) {
	q.event(trace.Event{Kind: trace.State, From: from.String(), To: to.String(), Reason: reason})
}

// The reasons a QP goes to ERR of itself, for its State event, and a work
// request's cause of failure beyond its status, for its WRFailed event.
const (
	errWRFailed = "a work request failed"
	errNAKSent  = "the responder NAKed a request"
	errScatter  = "a local memory region went away"
)

// State returns the QP's current state.
func (q *QP) State() qp.State {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.attr.State
}

// Query returns the QP's attributes, as ibv_query_qp.
func (q *QP) Query() qp.Attr {
	q.mu.Lock()
	defer q.mu.Unlock()
	a := q.attr
	a.CurState = a.State
	return a
}

// Stats returns a copy of the QP's counters.
func (q *QP) Stats() qp.Counters {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stats
}

// transitionRules are the attributes each state transition of a QP type
// requires and allows (IBTA Vol 1 Table 91).
type transitionRules map[[2]qp.State]struct{ required, optional qp.AttrMask }

// next checks a Modify from state cur against the rules, as
// ibv_modify_qp: the current state it names, the state it asks for, and
// the attributes that transition requires and allows (any state may go
// to RESET or ERR, with none). It returns the state to move to; who, if
// not empty, names the QP type in the error of an attribute not taken.
func (rules transitionRules) next(cur qp.State, attr *qp.Attr, mask qp.AttrMask, who string) (qp.State, error) {
	if mask&qp.AttrCurState != 0 && attr.CurState != cur {
		return cur, fmt.Errorf("%w: current state is %v, not %v", qp.ErrState, cur, attr.CurState)
	}
	next := cur
	if mask&qp.AttrState != 0 {
		next = attr.State
	}
	if next > qp.StateErr {
		return cur, fmt.Errorf("%w: no state %d", qp.ErrAttr, next)
	}
	if next == qp.StateReset || next == qp.StateErr {
		if mask&^(qp.AttrState|qp.AttrCurState) != 0 {
			return cur, fmt.Errorf("%w: %v -> %v takes no attributes", qp.ErrAttr, cur, next)
		}
		return next, nil
	}
	rule, ok := rules[[2]qp.State{cur, next}]
	if !ok {
		return cur, fmt.Errorf("%w: %v -> %v", qp.ErrState, cur, next)
	}
	if missing := rule.required &^ mask; missing != 0 {
		return cur, fmt.Errorf("%w: %v -> %v needs attributes %#x", qp.ErrAttr, cur, next, uint32(missing))
	}
	if extra := mask &^ (rule.required | rule.optional | qp.AttrState); extra != 0 {
		return cur, fmt.Errorf("%w: %s%v -> %v does not take attributes %#x", qp.ErrAttr, who, cur, next, uint32(extra))
	}
	return next, checkAttr(attr, mask)
}

// Attribute requirements of each transition for RC QPs (IBTA Vol 1
// Table 91, and ibv_modify_qp(3)).
var transitions = transitionRules{
	{qp.StateReset, qp.StateInit}: {qp.AttrPKeyIndex | qp.AttrPort | qp.AttrAccessFlags, 0},
	{qp.StateInit, qp.StateInit}:  {0, qp.AttrPKeyIndex | qp.AttrPort | qp.AttrAccessFlags},
	{qp.StateInit, qp.StateRTR}: {
		qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer,
		qp.AttrPKeyIndex | qp.AttrAccessFlags | qp.AttrAltPath,
	},
	{qp.StateRTR, qp.StateRTS}: {
		qp.AttrSQPSN | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic,
		qp.AttrCurState | qp.AttrAccessFlags | qp.AttrMinRNRTimer | qp.AttrAltPath | qp.AttrPathMigState,
	},
	{qp.StateRTS, qp.StateRTS}: {0, qp.AttrCurState | qp.AttrAccessFlags | qp.AttrMinRNRTimer | qp.AttrAltPath | qp.AttrPathMigState | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry},
	{qp.StateRTS, qp.StateSQD}: {0, qp.AttrEnSQDAsyncNotify},
	{qp.StateSQD, qp.StateSQD}: {0, qp.AttrAV | qp.AttrPathMTU | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic | qp.AttrMaxDestRdAtomic | qp.AttrAccessFlags | qp.AttrMinRNRTimer | qp.AttrAltPath | qp.AttrPathMigState},
	{qp.StateSQD, qp.StateRTS}: {0, qp.AttrCurState | qp.AttrAccessFlags | qp.AttrMinRNRTimer | qp.AttrAltPath | qp.AttrPathMigState | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic},
}

// Modify changes the QP's attributes and state, as ibv_modify_qp: mask
// says which fields of attr to apply. Any state may move to RESET or ERR;
// other transitions need the attributes the IBTA lists for them. An
// illegal transition or a bad attribute changes nothing and returns an
// error saying which.
func (q *QP) Modify(attr *qp.Attr, mask qp.AttrMask) error {
	q.mu.Lock()
	defer q.unlock()
	cur := q.attr.State
	table := transitions
	if q.uc {
		table = ucTransitions
	}
	next, err := table.next(cur, attr, mask, "")
	if err != nil {
		return err
	}
	if next == qp.StateErr && cur != qp.StateErr {
		q.enterError(nil, 0, "")
		return nil
	}
	if next == qp.StateReset || next == qp.StateErr {
		if next == qp.StateReset {
			q.reset()
		}
		q.stateEvent(cur, next, "")
		return nil
	}
	q.apply(attr, mask)
	q.attr.State = next
	q.path = q.txDesc()
	switch {
	case next == qp.StateRTR && cur == qp.StateInit:
		q.resp.start()
	case next == qp.StateRTS && cur == qp.StateRTR:
		q.req.start()
	}
	q.stateEvent(cur, next, "")
	if next == qp.StateRTS {
		q.port.Schedule(q)
	}
	return nil
}

func checkAttr(a *qp.Attr, mask qp.AttrMask) error {
	switch {
	case mask&qp.AttrPathMTU != 0 && a.PathMTU.Bytes() == 0:
		return fmt.Errorf("%w: path MTU %d (want 1..5: 256..4096 bytes)", qp.ErrAttr, a.PathMTU)
	case mask&qp.AttrAccessFlags != 0 && a.AccessFlags&^(mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic) != 0:
		return fmt.Errorf("%w: access flags %v", qp.ErrAttr, a.AccessFlags)
	case mask&qp.AttrTimeout != 0 && a.Timeout > 31:
		return fmt.Errorf("%w: timeout %d (want 0..31)", qp.ErrAttr, a.Timeout)
	case mask&qp.AttrRetryCnt != 0 && a.RetryCnt > 7:
		return fmt.Errorf("%w: retry_cnt %d (want 0..7)", qp.ErrAttr, a.RetryCnt)
	case mask&qp.AttrRNRRetry != 0 && a.RNRRetry > 7:
		return fmt.Errorf("%w: rnr_retry %d (want 0..7)", qp.ErrAttr, a.RNRRetry)
	case mask&qp.AttrMinRNRTimer != 0 && a.MinRNRTimer > 31:
		return fmt.Errorf("%w: min_rnr_timer %d (want 0..31)", qp.ErrAttr, a.MinRNRTimer)
	case mask&qp.AttrDestQPN != 0 && a.DestQPNum > bth.QPNMask:
		return fmt.Errorf("%w: dest QPN %#x is more than 24 bits", qp.ErrAttr, a.DestQPNum)
	case mask&qp.AttrRQPSN != 0 && a.RQPSN > bth.PSNMask, mask&qp.AttrSQPSN != 0 && a.SQPSN > bth.PSNMask:
		return fmt.Errorf("%w: PSN is more than 24 bits", qp.ErrAttr)
	case mask&qp.AttrMaxQPRdAtomic != 0 && a.MaxRdAtomic > qp.MaxRdAtomic,
		mask&qp.AttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > qp.MaxRdAtomic:
		return fmt.Errorf("%w: at most %d outstanding READs and atomics", qp.ErrAttr, qp.MaxRdAtomic)
	case mask&qp.AttrAV != 0 && !a.AV.DGID.IsValid():
		return fmt.Errorf("%w: address vector without a destination GID", qp.ErrAttr)
	case mask&qp.AttrPort != 0 && a.Port != 1:
		return fmt.Errorf("%w: port %d (a gorxe device has port 1)", qp.ErrAttr, a.Port)
	case mask&qp.AttrPKeyIndex != 0 && a.PKeyIndex != 0:
		return fmt.Errorf("%w: P_Key index %d (the table holds only 0xFFFF)", qp.ErrAttr, a.PKeyIndex)
	}
	return nil
}

func (q *QP) apply(a *qp.Attr, mask qp.AttrMask) {
	set := func(bit qp.AttrMask, f func()) {
		if mask&bit != 0 {
			f()
		}
	}
	set(qp.AttrAccessFlags, func() { q.attr.AccessFlags = a.AccessFlags })
	set(qp.AttrPKeyIndex, func() { q.attr.PKeyIndex = a.PKeyIndex })
	set(qp.AttrPort, func() { q.attr.Port = a.Port })
	set(qp.AttrAV, func() { q.attr.AV = a.AV })
	set(qp.AttrPathMTU, func() { q.attr.PathMTU = a.PathMTU; q.mtu = a.PathMTU.Bytes() })
	set(qp.AttrTimeout, func() { q.attr.Timeout = a.Timeout })
	set(qp.AttrRetryCnt, func() { q.attr.RetryCnt = a.RetryCnt })
	set(qp.AttrRNRRetry, func() { q.attr.RNRRetry = a.RNRRetry })
	set(qp.AttrRQPSN, func() { q.attr.RQPSN = a.RQPSN })
	set(qp.AttrSQPSN, func() { q.attr.SQPSN = a.SQPSN })
	set(qp.AttrMinRNRTimer, func() { q.attr.MinRNRTimer = a.MinRNRTimer })
	set(qp.AttrDestQPN, func() { q.attr.DestQPNum = a.DestQPNum })
	set(qp.AttrMaxQPRdAtomic, func() { q.attr.MaxRdAtomic = a.MaxRdAtomic })
	set(qp.AttrMaxDestRdAtomic, func() { q.attr.MaxDestRdAtomic = a.MaxDestRdAtomic })
	if mask&(qp.AttrRetryCnt|qp.AttrRNRRetry) != 0 {
		q.comp.setRetries(q.attr.RetryCnt, q.attr.RNRRetry)
	}
}

// reset returns the QP to RESET: queues emptied without completions, as
// ibv_modify_qp to RESET does.
func (q *QP) reset() {
	cp := q.attr.Cap
	q.attr = qp.Attr{Cap: cp, PathMTU: qp.MTU256}
	q.mtu = qp.MTU256.Bytes()
	q.sq.init(cp)
	q.rq.init(cp)
	q.path = TxDesc{}
	q.req = requester{q: q}
	q.comp = completer{q: q}
	q.resp.reset()
	q.tm.reset()
	q.cc.reset()
}

// enterError moves the QP to ERR (IBTA Vol 1 §10.3.1): the work request
// that failed, if any, completes with status, and every other outstanding
// work request on both queues completes with WR_FLUSH_ERR. why says what
// went wrong, for the trace: the failed work request's cause beyond its
// status, or when none failed the QP's ("" for a Modify).
func (q *QP) enterError(failed *sendWQE, status cq.Status, why string) {
	if q.attr.State == qp.StateErr {
		return
	}
	prev := q.attr.State
	q.attr.State = qp.StateErr
	if failed != nil {
		failed.status = status
		failed.failed = true
		q.event(trace.Event{Kind: trace.WRFailed, WRID: failed.wr.WRID, Opcode: failed.wr.Opcode.String(), Status: status.String(), Reason: why})
		why = errWRFailed
	}
	q.stateEvent(prev, qp.StateErr, why)
	if q.srq != nil {
		q.async(AsyncLastWQE)
	}
	q.tm.stop()
	q.cc.stop()
	if prev == qp.StateRTR || prev == qp.StateRTS || prev == qp.StateSQD {
		// The requests the responder executed are acknowledged still: a
		// program that moves the QP to ERR as soon as it sees the last
		// receive complete (rdma_disconnect) must not leave its peer's
		// SEND unacknowledged, to be flushed there when the DREQ comes.
		q.resp.flushAck()
	}
	q.resp.abandon()
	q.flush()
}

// flush completes every work request still queued while the QP is in ERR.
func (q *QP) flush() {
	for q.sq.head != q.sq.tail {
		w := q.sq.at(q.sq.head)
		switch {
		case w.acked:
			q.completeSend(w, cq.StatusSuccess)
		case w.failed:
			q.completeSend(w, w.status)
		default:
			q.completeSend(w, cq.StatusWRFlushErr)
		}
		q.sq.head++
	}
	q.req.rewind()
	for q.rq.head != q.rq.tail {
		r := q.rq.at(q.rq.head)
		q.pushRecv(cq.WC{WRID: r.wrid, Status: cq.StatusWRFlushErr, Opcode: cq.OpRecv})
		q.rq.head++
	}
}

// pushSend and pushRecv deliver a completion; a CQ that overflows moves
// the QP to ERR, as the IBTA asks of a CQ overrun (§11.4.2.1).
func (q *QP) pushSend(wc cq.WC) {
	wc.QPNum = uint32(q.num)
	if err := q.sendCQ.Push(wc); err != nil && q.attr.State != qp.StateErr {
		q.enterError(nil, 0, "send CQ: "+err.Error())
	}
}

func (q *QP) pushRecv(wc cq.WC) {
	wc.QPNum = uint32(q.num)
	if err := q.recvCQ.Push(wc); err != nil && q.attr.State != qp.StateErr {
		q.enterError(nil, 0, "receive CQ: "+err.Error())
	}
}

// canSend reports whether the QP's state lets its requester and completer
// work: RTS, or SQD while the send queue drains.
func (q *QP) canSend() bool { return q.attr.State == qp.StateRTS || q.attr.State == qp.StateSQD }

// HandlePacket processes a packet addressed to this QP. The device has
// parsed it and checked its ICRC. It reports whether the responder now
// owes an ACK it has deferred, for FlushAck.
func (q *QP) HandlePacket(p *wire.Packet) (ackOwed bool) {
	q.mu.Lock()
	defer q.unlock()
	q.stats.RcvdPkts++
	if p.CE() {
		q.cc.onMarked(p)
	}
	if q.uc {
		q.resp.handleUnreliable(p) // UC has no responses: nothing is acknowledged
	} else if p.Info.Response {
		q.comp.handleResponse(p)
	} else {
		q.resp.handleRequest(p)
	}
	return q.resp.ackPending
}

// Run lets the QP do what is due: fire expired timers, send the next
// burst of queued answers, send what its window allows, and flush a
// deferred ACK. The device calls it from its worker after Schedule and
// when Deadline has passed.
func (q *QP) Run() {
	q.mu.Lock()
	defer q.unlock()
	q.tm.run(q.now())
	q.resp.sendReplies(maxBurst)
	q.req.sendSome()
}

// FlushAck sends the ACK the responder deferred, if it still owes one. A
// responder defers the ACK of the requests in a batch of packets, so that
// one ACK covers them all; the device calls FlushAck once it has handed
// the QP the whole batch, unless a PostSend on the QP has sent the ACK
// already, behind its requests.
func (q *QP) FlushAck() {
	q.mu.Lock()
	defer q.unlock()
	q.resp.flushAck()
}

// unlock sends the packets built while the lock was held, arms the
// timers for them, then releases it. Sending under the lock keeps each
// QP's packets in PSN order on the wire however many goroutines drive it.
func (q *QP) unlock() {
	q.flushTx()
	q.tm.settle()
	if d := q.tm.next(); !d.IsZero() {
		q.port.Timer(q, d)
	}
	q.clock = 0
	q.mu.Unlock()
}

// headers returns the headers of a packet to the peer: a BTH with opcode
// and psn, the default P_Key and the peer's QPN.
func (q *QP) headers(op bth.Opcode, psn bth.PSN) wire.Headers {
	return wire.Headers{BTH: bth.Fields{Opcode: op, PKey: bth.DefaultPKey, DestQP: q.attr.DestQPNum, PSN: psn}}
}

// build encodes h and n bytes of payload, which fill writes (fill may be
// nil when n is 0), pads the packet, and queues it for the peer. Headers
// that do not encode are a bug in the engine that chose them: the packet
// is not sent, and an Error event says why.
func (q *QP) build(h *wire.Headers, n uint32, fill func(dst []byte)) {
	buf := q.port.NewBuffer()
	t := buf[q.txOff:]
	off, err := h.Encode(t)
	if err != nil {
		q.port.FreeBuffer(buf)
		q.event(trace.Event{Kind: trace.Error, Reason: "packet " + h.BTH.Opcode.String() + " not sent: " + err.Error()})
		return
	}
	if n > 0 {
		fill(t[off : off+int(n)])
	}
	off += int(n)
	pad := wire.PadLen(int(n))
	clear(t[off : off+pad])
	bth.Header(t).SetPadCnt(pad)
	if q.queueTxTo(&q.path, buf, off+pad) {
		q.cc.onSent(h.BTH.Opcode, off+pad+wire.ICRCLen)
	}
}

// queueTxTo completes a built packet for the destination tx names and
// queues it, sending the queue when it holds a link batch. It reports
// whether the packet could go out.
func (q *QP) queueTxTo(tx *TxDesc, buf []byte, n int) bool {
	pkt := q.port.Finish(tx, buf, n)
	if pkt == nil {
		q.port.FreeBuffer(buf)
		return false
	}
	q.stats.SentPkts++
	q.tx = append(q.tx, pkt)
	q.txb = append(q.txb, buf)
	if len(q.tx) == txBatch {
		q.flushTx()
	}
	return true
}

// txBatch is how many packets go to the link in one call.
const txBatch = 64

func (q *QP) flushTx() {
	if len(q.tx) > 0 {
		q.port.Send(q.tx)
		for _, b := range q.txb {
			q.port.FreeBuffer(b)
		}
		clear(q.tx)
		clear(q.txb)
		q.tx, q.txb = q.tx[:0], q.txb[:0]
	}
	if q.uc {
		// Even with nothing left to send: a WQE whose last packet filled
		// the batch before (queueTxTo) is done only now.
		q.comp.retireSent()
	}
}

// Deadline returns when the QP next needs Run for a timer, or the zero
// Time when no timer is armed.
func (q *QP) Deadline() monotime.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.tm.next()
}

// Resends reports whether Run at now would retransmit: the local ACK
// timeout or the tail-loss probe has expired.
func (q *QP) Resends(now monotime.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.tm.resends(now)
}

// txDesc returns the transmit descriptor of packets to the peer, from the
// address vector and the QPNs. Its UDP source port is the one rdma-core,
// the kernel's rxe and mlx5 and irdma all derive from the flow label, or
// when that is 0 from the two QPNs, so that both directions of a
// connection hash alike in ECMP.
func (q *QP) txDesc() TxDesc {
	av := &q.attr.AV
	return TxDesc{
		SGIDIndex:    av.SGIDIndex,
		DGID:         av.DGID,
		DestQPN:      q.attr.DestQPNum,
		TrafficClass: av.TrafficClass,
		FlowLabel:    av.FlowLabel,
		HopLimit:     av.HopLimit,
		SrcPort:      wire.UDPSourcePort(av.FlowLabel, q.num, q.attr.DestQPNum),
	}
}

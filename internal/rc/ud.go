package rc

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/gorxe/gorxe/congestion"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/deth"
)

// UD is an Unreliable Datagram queue pair (IBTA Vol 1 §9.8.4, §10.2.5):
// each send work request is one SEND packet to the QP its address handle
// and destination QPN name, with a DETH (the Q_Key and the sender's QPN);
// nothing is acknowledged or retransmitted, and what cannot be received
// is dropped. It needs none of an RC QP's engines: a send leaves, and
// completes, inside PostSend; a packet is received, or dropped, inside
// HandlePacket.
//
// Every received message lands behind a 40-byte GRH area, as rdma-core
// delivers it on RoCE: the IPv6 header, or 20 zero bytes and the IPv4
// header; the completion counts those 40 bytes and has cq.FlagGRH.
type UD struct {
	mu     sync.Mutex
	port   Port
	num    bth.QPN
	pd     *mr.PD
	sendCQ *cq.CQ
	recvCQ *cq.CQ
	sigAll bool
	txOff  int
	mtu    int // the port's MTU: the largest message (C10-93.1.1)
	gsi    bool

	attr  qp.Attr
	psn   bth.PSN // the next send's
	stats qp.Counters
	rq    recvQueue
	srq   *SRQ    // the shared receive queue receives come from, or nil for rq
	wqe   recvWQE // the WQE taken from srq for the packet being received
	tx    [][]byte
	txb   [][]byte
	mrs   []*mr.MR // a send's SGEs' regions, reused
	txd   TxDesc   // the packet being sent's, kept here so that a send allocates nothing

	onEvent func(trace.Event) // SetTrace's
	onAsync func(Async)       // SetAsync's
}

// GRHLen is the GRH area in front of every message a UD QP receives.
const GRHLen = wire.GRHLen

// errUDTooLong is why a UD SEND longer than the port's MTU is dropped.
const errUDTooLong = "message longer than the MTU"

// NewUD creates a UD QP numbered num in the RESET state, whose messages
// may be up to mtu bytes. QP 1, the GSI, takes the Q_Key 0x80010000 on
// receive whatever its attributes say (IBTA Vol 1 §15.4.3).
func NewUD(port Port, num bth.QPN, ia qp.InitAttr, mtu int) (*UD, error) {
	if ia.Type != qp.TypeUD {
		return nil, fmt.Errorf("%w: NewUD makes UD queue pairs, not type %d", qp.ErrAttr, ia.Type)
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
	q := &UD{
		srq:  srq,
		port: port, num: num, pd: ia.PD, sendCQ: ia.SendCQ, recvCQ: ia.RecvCQ,
		sigAll: ia.SigAll, txOff: port.TxOffset(), mtu: mtu, gsi: num == 1,
	}
	q.attr.Cap = ia.Cap
	q.attr.PathMTU = qp.MTUFromBytes(mtu)
	q.rq.init(ia.Cap)
	return q, nil
}

// Num returns the QP number.
func (q *UD) Num() bth.QPN { return q.num }

// Service returns bth.ServiceUD: the QP takes UD opcodes.
func (q *UD) Service() bth.Service { return bth.ServiceUD }

// SetTrace installs fn to be told of the QP's state changes, failed
// sends and dropped messages; nil removes it. fn is called with the QP's
// lock held and must not call back into the QP.
func (q *UD) SetTrace(fn func(trace.Event)) {
	q.mu.Lock()
	q.onEvent = fn
	q.mu.Unlock()
}

// event reports ev, with the QP's number and the time on its clock, to
// the trace function, if one is installed.
func (q *UD) event(ev trace.Event) {
	if q.onEvent == nil {
		return
	}
	ev.Time = q.port.Now().SinceEpoch()
	ev.QP = uint32(q.num)
	q.onEvent(ev)
}

// dropped reports the SEND p dropped, and why.
func (q *UD) dropped(p *wire.Packet, why string) {
	q.event(trace.Event{Kind: trace.Dropped, PSN: uint32(p.BTH.PSN()), Opcode: p.BTH.Opcode().String(), Reason: why})
}

// enterError moves the QP to ERR, for the reason why, and flushes its
// receives.
func (q *UD) enterError(why string) {
	prev := q.attr.State
	q.attr.State = qp.StateErr
	q.event(trace.Event{Kind: trace.State, From: prev.String(), To: qp.StateErr.String(), Reason: why})
	if q.srq != nil && q.onAsync != nil && prev != qp.StateErr {
		q.onAsync(AsyncLastWQE)
	}
	q.flushRecv()
}

// State returns the QP's current state.
func (q *UD) State() qp.State {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.attr.State
}

// Query returns the QP's attributes, as ibv_query_qp.
func (q *UD) Query() qp.Attr {
	q.mu.Lock()
	defer q.mu.Unlock()
	a := q.attr
	a.CurState = a.State
	a.SQPSN = q.psn
	return a
}

// Stats returns a copy of the QP's counters.
func (q *UD) Stats() qp.Counters {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stats
}

// Attribute requirements of each transition for UD QPs (IBTA Vol 1
// Table 91's UD column): a Q_Key instead of an address vector, no
// destination QP, no receive PSN, no timers.
var udTransitions = transitionRules{
	{qp.StateReset, qp.StateInit}: {qp.AttrPKeyIndex | qp.AttrPort | qp.AttrQKey, 0},
	{qp.StateInit, qp.StateInit}:  {0, qp.AttrPKeyIndex | qp.AttrPort | qp.AttrQKey},
	{qp.StateInit, qp.StateRTR}:   {0, qp.AttrPKeyIndex | qp.AttrQKey},
	{qp.StateRTR, qp.StateRTS}:    {qp.AttrSQPSN, qp.AttrCurState | qp.AttrQKey},
	{qp.StateRTS, qp.StateRTS}:    {0, qp.AttrCurState | qp.AttrQKey},
	{qp.StateRTS, qp.StateSQD}:    {0, qp.AttrEnSQDAsyncNotify},
	{qp.StateSQD, qp.StateSQD}:    {0, qp.AttrPKeyIndex | qp.AttrQKey},
	{qp.StateSQD, qp.StateRTS}:    {0, qp.AttrCurState | qp.AttrQKey},
	{qp.StateSQE, qp.StateRTS}:    {0, qp.AttrCurState | qp.AttrQKey},
}

// Modify changes the QP's attributes and state, as ibv_modify_qp, with
// the UD column of the IBTA's rules; RESET and ERR as for RC.
func (q *UD) Modify(attr *qp.Attr, mask qp.AttrMask) error {
	q.mu.Lock()
	defer q.unlock()
	cur := q.attr.State
	next, err := udTransitions.next(cur, attr, mask, "a UD QP's ")
	if err != nil {
		return err
	}
	if next == qp.StateErr {
		q.enterError("")
		return nil
	}
	if next == qp.StateReset {
		cp := q.attr.Cap
		q.attr = qp.Attr{Cap: cp, PathMTU: qp.MTUFromBytes(q.mtu)}
		q.psn = 0
		q.rq.init(cp)
		q.event(trace.Event{Kind: trace.State, From: cur.String(), To: next.String()})
		return nil
	}
	if mask&qp.AttrPKeyIndex != 0 {
		q.attr.PKeyIndex = attr.PKeyIndex
	}
	if mask&qp.AttrPort != 0 {
		q.attr.Port = attr.Port
	}
	if mask&qp.AttrQKey != 0 {
		q.attr.QKey = attr.QKey
	}
	if mask&qp.AttrSQPSN != 0 {
		q.psn = attr.SQPSN
	}
	q.attr.State = next
	q.event(trace.Event{Kind: trace.State, From: cur.String(), To: next.String()})
	return nil
}

// PostSend sends each work request as one UD SEND, on the caller's
// goroutine, and completes it once its packet is handed to the link. It
// checks each request before sending it; on error it returns the index
// of the first request it did not take. A message longer than the port's
// MTU sends nothing and completes successfully, as the IBTA requires
// (C10-93.1.1). In ERR the requests complete at once with WR_FLUSH_ERR.
func (q *UD) PostSend(wrs []qp.SendWR) (int, error) {
	q.mu.Lock()
	defer q.unlock()
	switch q.attr.State {
	case qp.StateRTS, qp.StateErr:
	default:
		return 0, fmt.Errorf("%w: post_send in %v", qp.ErrNotPosting, q.attr.State)
	}
	for i := range wrs {
		wr := &wrs[i]
		if err := q.checkSendWR(wr); err != nil {
			return i, err
		}
		if q.attr.State == qp.StateErr {
			q.completeSend(wr, cq.StatusWRFlushErr)
			continue
		}
		q.send(wr)
	}
	return len(wrs), nil
}

func (q *UD) checkSendWR(wr *qp.SendWR) error {
	var total uint64
	for _, s := range wr.SGList {
		total += uint64(s.Length)
	}
	inline := wr.Flags&qp.SendInline != 0
	if inline && wr.Inline != nil {
		total = uint64(len(wr.Inline))
	}
	switch {
	case wr.Opcode != qp.WRSend && wr.Opcode != qp.WRSendWithImm:
		return fmt.Errorf("%w: opcode %v is not supported on UD (SEND and SEND_WITH_IMM are)", qp.ErrBadWR, wr.Opcode)
	case wr.AH == nil:
		return fmt.Errorf("%w: a UD send needs an address handle", qp.ErrBadWR)
	case wr.AH.PD() != q.pd:
		return fmt.Errorf("%w: the address handle is of another protection domain", qp.ErrBadWR)
	case wr.RemoteQPN > bth.QPNMask:
		return fmt.Errorf("%w: remote QPN %#x is more than 24 bits", qp.ErrBadWR, wr.RemoteQPN)
	case !inline && uint32(len(wr.SGList)) > q.attr.Cap.MaxSendSGE:
		return fmt.Errorf("%w: %d SGEs, the QP allows %d", qp.ErrBadWR, len(wr.SGList), q.attr.Cap.MaxSendSGE)
	case inline && total > uint64(q.attr.Cap.MaxInlineData):
		return fmt.Errorf("%w: %d bytes inline, the QP allows %d", qp.ErrBadWR, total, q.attr.Cap.MaxInlineData)
	}
	return nil
}

// send builds and queues wr's packet, and completes wr.
func (q *UD) send(wr *qp.SendWR) {
	payload, status := q.payloadLen(wr)
	if status != cq.StatusSuccess {
		q.fail(wr, status)
		return
	}
	psn := q.psn
	q.psn = (q.psn + 1) & bth.PSNMask
	op := bth.UDSendOnly
	if wr.Opcode == qp.WRSendWithImm {
		op = bth.UDSendOnlyWithImm
	}
	if payload > q.mtu {
		// C10-93.1.1: no packet, and no error either.
		q.event(trace.Event{Kind: trace.Dropped, PSN: uint32(psn), Opcode: op.String(), Reason: "message longer than the MTU: not sent (C10-93.1.1)"})
		q.completeSend(wr, cq.StatusSuccess)
		return
	}
	qkey := wr.RemoteQKey
	if qkey&0x80000000 != 0 {
		qkey = q.attr.QKey // a privileged Q_Key stands for the QP's own
	}
	h := wire.Headers{
		BTH: bth.Fields{
			Opcode: op, SE: wr.Flags&qp.SendSolicited != 0,
			PKey: bth.DefaultPKey, DestQP: wr.RemoteQPN, PSN: psn,
		},
		DETH: deth.Fields{QKey: qkey, SrcQP: q.num},
		Imm:  wr.ImmData,
	}
	buf := q.port.NewBuffer()
	t := buf[q.txOff:]
	off, err := h.Encode(t)
	if err != nil {
		q.port.FreeBuffer(buf)
		q.fail(wr, cq.StatusLocQPOpErr)
		return
	}
	q.copyPayload(wr, t[off:off+payload])
	off += payload
	pad := wire.PadLen(payload)
	clear(t[off : off+pad])
	bth.Header(t).SetPadCnt(pad)
	av := wr.AH.AV()
	q.txd = TxDesc{
		SGIDIndex: av.SGIDIndex, DGID: av.DGID, DestQPN: wr.RemoteQPN,
		TrafficClass: av.TrafficClass, FlowLabel: av.FlowLabel, HopLimit: av.HopLimit,
		SrcPort: wire.UDPSourcePort(av.FlowLabel, q.num, wr.RemoteQPN),
	}
	pkt := q.port.Finish(&q.txd, buf, off+pad)
	if pkt == nil {
		q.port.FreeBuffer(buf) // no route: the datagram is lost, as on a wire
	} else {
		q.stats.SentPkts++
		q.tx = append(q.tx, pkt)
		q.txb = append(q.txb, buf)
		if len(q.tx) == txBatch {
			q.flushTx()
		}
	}
	q.completeSend(wr, cq.StatusSuccess)
}

// payloadLen resolves wr's SGEs (into q.mrs) and returns its length, or
// the status of a work request whose local buffers are not all in
// registered memory of the QP's PD.
func (q *UD) payloadLen(wr *qp.SendWR) (int, cq.Status) {
	if wr.Flags&qp.SendInline != 0 && wr.Inline != nil {
		return len(wr.Inline), cq.StatusSuccess
	}
	q.mrs = q.mrs[:0]
	total := 0
	for _, s := range wr.SGList {
		m, _, err := q.port.MRs().Lookup(s.LKey, q.pd, s.Addr, uint64(s.Length), 0)
		if err != nil && s.Length > 0 {
			return 0, cq.StatusLocProtErr
		}
		q.mrs = append(q.mrs, m)
		total += int(s.Length)
	}
	return total, cq.StatusSuccess
}

// copyPayload copies wr's message into dst: its inline bytes, or its
// SGEs' bytes through the regions payloadLen resolved.
func (q *UD) copyPayload(wr *qp.SendWR, dst []byte) {
	if wr.Flags&qp.SendInline != 0 && wr.Inline != nil {
		copy(dst, wr.Inline)
		return
	}
	forEachSGE(wr.SGList, 0, len(dst), func(i int, addr uint64, lo, hi int) {
		if m := q.mrs[i]; m != nil {
			_ = m.ReadAt(addr, dst[lo:hi])
		}
	})
}

// fail completes wr with an error status and moves the QP to ERR, as
// rxe does for a send its requester cannot build.
func (q *UD) fail(wr *qp.SendWR, status cq.Status) {
	q.stats.RDMASends++
	q.event(trace.Event{Kind: trace.WRFailed, WRID: wr.WRID, Opcode: wr.Opcode.String(), Status: status.String()})
	q.pushSend(cq.WC{WRID: wr.WRID, Status: status, Opcode: cq.OpSend})
	if q.attr.State != qp.StateErr { // unless the send CQ overran
		q.enterError(errWRFailed)
	}
}

func (q *UD) completeSend(wr *qp.SendWR, status cq.Status) {
	q.stats.RDMASends++ // every SEND retired, as rxe's rdma_sends
	if status == cq.StatusSuccess && wr.Flags&qp.SendSignaled == 0 && !q.sigAll {
		return
	}
	q.pushSend(cq.WC{WRID: wr.WRID, Status: status, Opcode: cq.OpSend})
}

func (q *UD) pushSend(wc cq.WC) {
	wc.QPNum = uint32(q.num)
	if err := q.sendCQ.Push(wc); err != nil && q.attr.State != qp.StateErr {
		q.enterError("send CQ: " + err.Error())
	}
}

func (q *UD) pushRecv(wc cq.WC) {
	wc.QPNum = uint32(q.num)
	if err := q.recvCQ.Push(wc); err != nil && q.attr.State != qp.StateErr {
		q.enterError("receive CQ: " + err.Error())
	}
}

// PostRecv queues receive work requests, as ibv_post_recv. Receives may
// be posted from INIT on; in ERR they complete at once with WR_FLUSH_ERR.
// Each needs room for the 40-byte GRH area in front of the message.
func (q *UD) PostRecv(wrs []qp.RecvWR) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n, err := postRecv(&q.rq, q.srq != nil, &q.attr, wrs)
	if err == nil && q.attr.State == qp.StateErr {
		q.flushRecv()
	}
	return n, err
}

// consumeRecv retires the receive WQE being completed: the head of the
// QP's own queue; one taken from an SRQ has left it already.
func (q *UD) consumeRecv() {
	if q.srq == nil {
		q.rq.head++
	}
}

// flushRecv completes every receive posted to the QP's own queue with
// WR_FLUSH_ERR. A shared queue's are left for its other QPs.
func (q *UD) flushRecv() {
	for q.rq.head != q.rq.tail {
		r := q.rq.at(q.rq.head)
		q.rq.head++
		q.pushRecv(cq.WC{WRID: r.wrid, Status: cq.StatusWRFlushErr, Opcode: cq.OpRecv})
	}
}

// HandlePacket receives a UD SEND (IBTA Vol 1 §10.2.5; rxe's rules where
// the IBTA leaves a choice). It drops, and counts, a packet whose Q_Key
// is not the QP's (the GSI's is 0x80010000), one that finds no receive
// posted or one too small for it, or one longer than the MTU (class D:
// nothing is answered, the receive stays posted). With an SRQ the
// receive has left the shared queue when the lengths are checked: one
// too small, or a message longer than the MTU, completes the receive
// with REM_INV_REQ_ERR (class E, as rxe). A receive whose buffers are
// not registered memory completes with LOC_PROT_ERR and the QP goes to
// ERR. It never owes an ACK.
func (q *UD) HandlePacket(p *wire.Packet) bool {
	q.mu.Lock()
	defer q.unlock()
	q.stats.RcvdPkts++
	switch q.attr.State {
	case qp.StateRTR, qp.StateRTS, qp.StateSQD, qp.StateSQE:
	default:
		return false
	}
	op := p.BTH.Opcode()
	if op != bth.UDSendOnly && op != bth.UDSendOnlyWithImm {
		return false
	}
	qkey := q.attr.QKey
	if q.gsi {
		qkey = deth.GSIQKey
	}
	if p.DETH.QKey() != qkey {
		q.stats.QKeyViolations++
		q.dropped(p, "Q_Key not the QP's")
		return false
	}
	var r *recvWQE
	switch {
	case q.srq != nil && q.srq.take(&q.wqe):
		r = &q.wqe // taken: from here on it completes, well or in error
	case q.srq == nil && q.rq.head != q.rq.tail && len(p.Payload) <= q.mtu:
		r = q.rq.at(q.rq.head)
	case len(p.Payload) > q.mtu:
		q.stats.UDDropped++
		q.dropped(p, errUDTooLong)
		return false
	default:
		q.stats.UDDropped++
		q.dropped(p, "no receive posted")
		return false
	}
	n := GRHLen + len(p.Payload)
	if uint64(n) > r.length || len(p.Payload) > q.mtu {
		q.stats.UDDropped++
		why := errUDTooLong
		if uint64(n) > r.length {
			why = "message and GRH longer than the receive"
		}
		q.dropped(p, why)
		if q.srq != nil {
			// Class E (rxe: RESPST_ERR_LENGTH, "UC/UD - class E"): a
			// WQE taken from a shared queue cannot go back; it
			// completes in error and the QP stays up.
			q.pushRecv(cq.WC{WRID: r.wrid, Status: cq.StatusRemInvReqErr, Opcode: cq.OpRecv})
		}
		return false
	}
	mrs := q.mrs[:0]
	for _, s := range r.sges {
		m, _, err := q.port.MRs().Lookup(s.LKey, q.pd, s.Addr, uint64(s.Length), mr.LocalWrite)
		if err != nil && s.Length > 0 {
			q.consumeRecv()
			q.pushRecv(cq.WC{WRID: r.wrid, Status: cq.StatusLocProtErr, Opcode: cq.OpRecv})
			if q.attr.State != qp.StateErr { // unless the receive CQ overran
				q.enterError("receive work request's SGE: " + err.Error())
			}
			return false
		}
		mrs = append(mrs, m)
	}
	q.mrs = mrs
	var grh [GRHLen]byte
	wire.PutGRH(grh[:], p.IP)
	scatter(r.sges, mrs, 0, grh[:])
	scatter(r.sges, mrs, GRHLen, p.Payload)
	q.consumeRecv()
	wc := cq.WC{
		WRID: r.wrid, Status: cq.StatusSuccess, Opcode: cq.OpRecv, ByteLen: uint32(n),
		SrcQP: uint32(p.DETH.SrcQP()), Flags: cq.FlagGRH,
	}
	if op == bth.UDSendOnlyWithImm {
		wc.Flags |= cq.FlagWithImm
		wc.ImmData = p.ImmDt.Imm()
	}
	q.stats.RDMARecvs++
	q.pushRecv(wc)
	return false
}

// unlock sends the packets built under the lock, then releases it.
func (q *UD) unlock() {
	q.flushTx()
	q.mu.Unlock()
}

func (q *UD) flushTx() {
	if len(q.tx) == 0 {
		return
	}
	q.port.Send(q.tx)
	for _, b := range q.txb {
		q.port.FreeBuffer(b)
	}
	clear(q.tx)
	clear(q.txb)
	q.tx, q.txb = q.tx[:0], q.txb[:0]
}

// FlushAck does nothing: a UD QP owes no ACK.
func (q *UD) FlushAck() {}

// Run does nothing: a UD QP has no deferred work and no timers.
func (q *UD) Run() {}

// Deadline returns the zero Time: no timer is ever armed.
func (q *UD) Deadline() monotime.Time { return 0 }

// Resends is false: a UD QP sends nothing again.
func (q *UD) Resends(monotime.Time) bool { return false }

// HandleCNP ignores a CNP: gorxe paces connected QPs only.
func (q *UD) HandleCNP() {}

// Congestion returns zero values: a UD QP has no reaction point.
func (q *UD) Congestion() (congestion.State, congestion.Counters) {
	return congestion.State{}, congestion.Counters{}
}

// Path reports no peer: a UD QP's destinations are per work request.
func (q *UD) Path() (dgid netip.Addr, sgidIndex uint8, ok bool) { return netip.Addr{}, 0, false }

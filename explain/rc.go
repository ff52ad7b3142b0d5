package explain

import (
	"fmt"
	"slices"
	"time"

	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
)

// The model's rules cite the InfiniBand Architecture Specification,
// Volume 1: §9.7.5.1 is the responder's checks of a request's PSN,
// §9.7.5.1.1 its duplicates, §9.7.5.2 the requester's handling of ACKs
// and NAKs, C9-104 the saved READ and atomic state that answers a
// duplicate, C9-105 the ACK of a duplicate SEND or WRITE, C9-107 a READ
// retried from the middle and C9-148 the MSN.

// psnDiff returns a - b in 24-bit serial arithmetic: negative when a is
// before b, within half the PSN space.
func psnDiff(a, b uint32) int32 { return int32((a-b)<<8) >> 8 }

// psnAdd returns p + n in the 24-bit PSN space.
func psnAdd(p uint32, n int) uint32 { return (p + uint32(n)) & bth.PSNMask }

// lateNAK is how long after a NAK a resend of the PSN it names is taken
// for the work of the requester's ACK timer instead: a NAK is acted on
// at once, and ACK timeouts are milliseconds long.
const lateNAK = 10 * time.Millisecond

// defaultMTU is the path MTU assumed until a full packet shows it.
const defaultMTU = 1024

// conn is one connection: two ends, each a requester of what it sends
// and a responder to what it receives.
type conn struct {
	idx   int
	svc   bth.Service
	ends  [2]*end
	flows [2]*flow
	mtu   int // the path MTU, once a FIRST or MIDDLE packet has shown it
	// mtuFloor is what the MTU is at least, from a READ answered in one
	// response.
	mtuFloor int
	first    time.Duration
	last     time.Duration
	sum      Summary
	tids     map[cmKey]cmSent // CM messages seen, to find their retransmissions
	// heard is the CM message each side last received on a transaction,
	// by (transaction, receiving side).
	heard map[cmKey]cmHeard
	// reqs is the QP each REQ asked to connect, by its transaction.
	reqs map[uint64]bth.QPN
}

// end is one QP of a connection.
type end struct {
	End
	req  requester
	resp responder
}

func newConn(idx int, svc bth.Service, a, b End) *conn {
	c := &conn{idx: idx, svc: svc, first: -1}
	c.ends[0] = &end{End: a}
	c.ends[1] = &end{End: b}
	for i := range c.sum.NAKs {
		c.sum.NAKs[i] = map[string]int{}
	}
	return c
}

// label names an end for a sentence: "A (10.0.0.1)" style names are the
// caller's; here the address and QPN.
func (e *end) label() string {
	if e.QPN == 0 {
		return e.Addr
	}
	return fmt.Sprintf("%s QP %#x", e.Addr, e.QPN)
}

// state is the end's EndState.
func (e *end) state() EndState {
	s := EndState{End: e.label(), RequesterKnown: e.req.started, ResponderKnown: e.resp.known, NextPSN: e.req.next, Unacked: e.req.una, Outstanding: e.req.outstanding(),
		Reads: len(e.req.reads), Recovery: e.req.recovery(), ExpectedPSN: e.resp.epsn, MSN: e.resp.msn}
	if e.resp.nak {
		s.NAKState = fmt.Sprintf("sequence error NAK sent: dropping requests until PSN %d", e.resp.epsn)
	}
	return s
}

// requester is what one end has sent as requests and what is answered.
type requester struct {
	started bool
	next    uint32         // the PSN after the highest sent
	una     uint32         // the oldest not acknowledged; next when all are
	sent    map[uint32]int // report index of each unacknowledged PSN's latest transmission
	// orig is what each PSN was first sent as, for the last origWindow
	// PSNs, acknowledged or not: a broken requester may resend one the
	// responder has acknowledged.
	orig   map[uint32]sentAs
	reads  []pendingRead // READs and atomics awaiting their answers, oldest first
	lastTx time.Duration // when it last sent a request

	// What the next retransmission answers: "nak", "rnr" or "implied"
	// at causePSN, from the packet causeAt; "" for a timeout.
	cause    string
	causePSN uint32
	causeAt  int
	wait     time.Duration // an RNR NAK's timer
	// inRun says the implied NAK came during a go-back-N run that had yet
	// to resend the READ it names, with no answer acknowledging anything
	// new since the run began: the run resends it in its turn, and no new
	// go-back begins (rxe's completer starts no second retry while one
	// it started has made no progress, and does not count one).
	inRun bool
	// A go-back-N run in progress resends runNext next; it began with
	// the packet runAt.
	resending bool
	runNext   uint32
	runAt     int
	// The last resend after a silence (a tail-loss probe or a timeout),
	// which began with the packet probeAt (0 when none is in question),
	// resent up to probed, the last PSN sent before it; probeAnswered is
	// the ACK that first covered probed. A second ACK of probed or later
	// means the responder had all of the originals: the first ACK was
	// late, not lost.
	probed        uint32
	probeAt       int
	probeAnswered int
	// The run a timeout began with the packet fewAt (0 when none), at PSN
	// fewPSN, fewSent packets so far; fewAnswered is the ACK that covered
	// its first PSN, if one came before the run went on. A requester that
	// resends a few packets at a timeout and the rest once they are
	// answered (gorxe's) shows so.
	fewAt       int
	fewPSN      uint32
	fewSent     int
	fewAnswered int
	// tlp is the last tail-loss probe (0 when none), while no answer has
	// come since: a go-back after it is the unanswered probe's.
	tlp int
	// ackedAt is the last answer that acknowledged new PSNs (0 when none).
	ackedAt int
	// undoAt is the ACK (0 when none) that, during such a run, covered a
	// PSN the run had not yet sent again: the originals are arriving. A
	// requester that then sends new requests instead of the rest of the
	// run (gorxe's) has undone its go-back.
	undoAt int
	// The ACK aheadAt (0 when none) covered PSNs aheadFrom to aheadTo
	// that the capture had not shown sent. A request among them that comes
	// soon after is its original, seen after its answer (reordered).
	aheadAt            int
	aheadFrom, aheadTo uint32
}

// reordered is how long after its answer a request can come in a capture
// that saw the two out of order. On a bridge the two are seen on
// different CPUs: the request is forwarded to the responder's port before
// the bridge's own capture takes its copy, and a responder that answers
// at once, on another CPU, can have its answer captured first: 9 µs
// later on a quiet host (testdata/interop/reordered, case 138), 2.7 ms
// on a loaded one, whose bridge queued its copy (case 119). Only a
// request the capture had not shown before an ACK covered it is read
// this way; taking a resend for its original needs the capture to have
// lost the original and the requester's timer to fire as the ACK came.
const reordered = 10 * time.Millisecond

// sentAs is what a request packet was when first sent: its opcode and
// payload length, and the report index of that packet. A retransmission
// must repeat them.
type sentAs struct {
	op  bth.Opcode
	n   int
	pkt int
}

// pendingRead is a READ or atomic waiting for its responses.
type pendingRead struct {
	psn    uint32
	n      int    // response packets: 1 for an atomic
	length uint32 // a READ's DMA length
	got    int    // responses in order so far
	atomic bool
}

func (r *requester) outstanding() int {
	if !r.started {
		return 0
	}
	return int(psnDiff(r.next, r.una))
}

func (r *requester) recovery() string {
	switch {
	case r.resending:
		return fmt.Sprintf("go-back-N: resending, next PSN %d", r.runNext)
	case r.cause == "nak":
		return fmt.Sprintf("NAKed: will go back to PSN %d", r.causePSN)
	case r.cause == "rnr":
		return fmt.Sprintf("RNR wait of %v, then resend PSN %d", r.wait, r.causePSN)
	case r.cause == "implied":
		return fmt.Sprintf("implied NAK: will resend from PSN %d", r.causePSN)
	}
	return ""
}

// sentPSN reports whether the requester has sent psn and not had it
// acknowledged.
func (r *requester) sentPSN(psn uint32) bool {
	return r.started && psnDiff(psn, r.una) >= 0 && psnDiff(psn, r.next) < 0
}

// ack moves the oldest unacknowledged PSN to after psn.
func (r *requester) ack(psn uint32) int {
	n := 0
	for psnDiff(r.una, psn) <= 0 && psnDiff(r.una, r.next) < 0 {
		delete(r.sent, r.una)
		r.una = psnAdd(r.una, 1)
		n++
	}
	if r.cause != "" && psnDiff(r.causePSN, r.una) < 0 {
		r.cause = ""
	}
	return n
}

// responder is what one end expects of the requests it receives.
type responder struct {
	known bool
	epsn  uint32 // the expected PSN
	nak   bool   // a sequence error NAK is out for epsn: later PSNs are dropped
	msn   uint32 // from the last AETH it sent
	// open is the SEND or WRITE whose FIRST or MIDDLE it took last, when
	// inMsg: the next request must go on with it.
	open  opKind
	inMsg bool
	// owed says a sequence error NAK is due for owedPSN, for the request
	// out of sequence at owedAt, and the capture has not shown it yet. A
	// responder answers in order, and one that falls behind (rxe in a
	// slow VM, tens of milliseconds) sends it late: after the requests
	// that followed, the expected PSN among them, which it took.
	owed    bool
	owedPSN uint32
	owedAt  int
}

// follows reports whether a request of kind at pos may come next, by the
// opcode sequence (IBTA §9.7.5.1, opcode sequence check): a SEND or WRITE
// begun goes on with its MIDDLE or LAST packets, and nothing else; none
// begun, a request starts with a FIRST or an ONLY.
func (rs *responder) follows(kind opKind, pos wire.Position) bool {
	goesOn := pos == wire.Middle || pos == wire.Last
	if rs.inMsg {
		return goesOn && kind == rs.open
	}
	return !goesOn
}

// rewind has the responder expect psn again, as a NAK or an RNR NAK it
// sent shows: the last request it took is the one q sent before psn.
func (rs *responder) rewind(psn uint32, q *requester) {
	rs.epsn = psn
	if o, ok := q.orig[psnAdd(psn, -1)]; ok {
		rs.took(classify(o.op))
	}
}

// took notes a request the responder accepted in sequence.
func (rs *responder) took(kind opKind, pos wire.Position) {
	rs.open, rs.inMsg = kind, (kind == opSend || kind == opWrite) && (pos == wire.First || pos == wire.Middle)
}

// opKind is what a request or response packet is part of.
type opKind uint8

const (
	opSend opKind = iota
	opWrite
	opRead
	opAtomic
	opFlush
	opReadResp
	opAck
	opAtomicAck
	opOther
)

// kindName names a kind of request for a sentence.
func kindName(k opKind) string {
	switch k {
	case opSend:
		return "SEND"
	case opWrite:
		return "RDMA WRITE"
	}
	return "request"
}

// classify returns what op is part of and its place in the message. A
// connected service's operation reads as RC's, in its low five bits; an
// operation wire does not know is one packet of opOther.
func classify(op bth.Opcode) (opKind, wire.Position) {
	pos := wire.Only
	if info, ok := wire.Lookup(op & 0x1f); ok {
		pos = info.Position
	}
	switch op & 0x1f {
	case 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x16, 0x17:
		return opSend, pos
	case 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x1d:
		return opWrite, pos
	case 0x0c:
		return opRead, pos
	case 0x0d, 0x0e, 0x0f, 0x10:
		return opReadResp, pos
	case 0x11:
		return opAck, pos
	case 0x12:
		return opAtomicAck, pos
	case 0x13, 0x14:
		return opAtomic, pos
	case 0x1c:
		return opFlush, pos
	}
	return opOther, pos
}

// isResponse reports whether op is sent by a responder.
func isResponse(op bth.Opcode) bool {
	k, _ := classify(op)
	return k == opReadResp || k == opAck || k == opAtomicAck
}

// opWord names a request for a sentence.
func opWord(op bth.Opcode) string {
	switch k, _ := classify(op); k {
	case opSend:
		return "SEND"
	case opWrite:
		if op&0x1f == 0x1d {
			return "ATOMIC WRITE"
		}
		return "RDMA WRITE"
	case opRead:
		return "RDMA READ"
	case opAtomic:
		if op&0x1f == 0x13 {
			return "COMPARE_SWAP"
		}
		return "FETCH_ADD"
	case opFlush:
		return "FLUSH"
	}
	return op.String()
}

// learnMTU takes the path MTU from a FIRST or MIDDLE packet, whose
// payload is exactly one MTU (C9-92), and a floor under it from a READ
// answered by one READ_RESPONSE_ONLY; when either changes what the MTU is
// taken to be, the spans of READs reckoned with the old are reckoned
// again.
func (c *conn) learnMTU(p *wire.Packet) {
	old := c.pmtu()
	switch _, pos := classify(p.BTH.Opcode()); {
	case (pos == wire.First || pos == wire.Middle) && len(p.Payload) > 0:
		c.mtu = len(p.Payload)
	case p.BTH.Opcode() == bth.RCRDMAReadResponseOnly && c.mtu == 0:
		for m := 256; m <= 4096; m *= 2 {
			if m >= len(p.Payload) {
				c.mtuFloor = max(c.mtuFloor, m)
				break
			}
		}
	}
	if c.pmtu() != old {
		for k, e := range c.ends {
			c.respanLast(&e.req, &c.ends[1-k].resp)
		}
	}
}

// respanLast reckons again the span of the last request q sent, when it
// is a READ whose responses have not all come: its end moves, and with
// it q's next PSN and, when it followed, the responder's expected PSN.
func (c *conn) respanLast(q *requester, rs *responder) {
	if rd := q.lastRead(); rd != nil {
		q.resize(rd, max(c.readSpan(rd.length), rd.got), rs)
	}
}

// lastRead returns the READ q sent last, when nothing came after it (its
// end is q's next PSN), or nil.
func (q *requester) lastRead() *pendingRead {
	if len(q.reads) == 0 {
		return nil
	}
	rd := &q.reads[len(q.reads)-1]
	if rd.atomic || psnAdd(rd.psn, rd.n) != q.next {
		return nil
	}
	return rd
}

// resize gives the READ rd a span of n PSNs. When it was the last request
// q sent, q's next PSN moves with its end, and so does the responder rs's
// expected PSN when it had followed the old end.
func (q *requester) resize(rd *pendingRead, n int, rs *responder) {
	end := psnAdd(rd.psn, rd.n)
	rd.n = n
	if q.next == end {
		q.next = psnAdd(rd.psn, n)
		if rs.epsn == end {
			rs.epsn = q.next
		}
	}
}

// pmtu returns the path MTU to reckon READ spans with.
func (c *conn) pmtu() int {
	if c.mtu > 0 {
		return c.mtu
	}
	return max(defaultMTU, c.mtuFloor)
}

// readSpan is how many response packets, and so PSNs, a READ of n bytes
// takes.
func (c *conn) readSpan(n uint32) int {
	if n == 0 {
		return 1
	}
	return int((int(n) + c.pmtu() - 1) / c.pmtu())
}

// packet explains packet i of the report, which end side of c sent, as
// the sighting ro shows it: leaving its sender, arriving at its receiver,
// or both at once.
func (c *conn) packet(m *model, i, side int, p *wire.Packet, ro role) {
	pk := m.pkt(i)
	s, r := c.ends[side], c.ends[1-side]
	if ro != arriving {
		pk.Conn = c.idx
		if c.first < 0 {
			c.first = pk.Time
		}
		c.last = pk.Time
		c.sum.Packets[side]++
		c.learnMTU(p)
	}
	switch {
	case isResponse(p.BTH.Opcode()):
		if ro == leaving {
			pk.Text = responseWord(p) + " from " + s.label() + "."
			return
		}
		c.response(m, i, s, r, side, p)
	case c.svc == bth.ServiceUC:
		if ro == leaving {
			pk.Text = "UC " + c.describe(p, s, r)
			return
		}
		c.ucRequest(m, i, s, r, side, p)
	default:
		op := p.BTH.Opcode()
		psn := uint32(p.BTH.PSN())
		kind, pos := classify(op)
		if ro != arriving && c.mtu == 0 {
			if mtu := m.mtuAhead(c, m.pkt(i).Index); mtu > 0 {
				c.mtu = mtu
			} else {
				c.respan(&s.req, &r.resp, psn)
			}
		}
		span := 1
		if kind == opRead && p.RETH != nil {
			span = c.readSpan(p.RETH.DMALen())
		}
		if ro != arriving {
			m.retx[i] = c.sent(m, i, s, side, psn, span, p)
		}
		if ro == leaving {
			pk.Text = joinText(m.retx[i], c.describe(p, s, r))
			return
		}
		c.receive(m, i, s, r, psn, span, kind, pos, p, m.retx[i])
	}
	if p.CE() {
		pk.Text += " A switch marked it ECN CE (congestion): the receiver's NIC, DCQCN's notification point, answers with a CNP."
	}
	m.after(i, c, side)
}

// joinText joins two sentences with a space, either of which may be empty.
func joinText(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + " " + b
}

// responseWord names a response for a sentence.
func responseWord(p *wire.Packet) string {
	switch k, _ := classify(p.BTH.Opcode()); {
	case k == opReadResp:
		return "A READ response"
	case k == opAtomicAck:
		return "An ATOMIC_ACKNOWLEDGE"
	case p.AETH != nil && p.AETH.Syndrome().Type() == aeth.TypeNAK:
		return "A NAK (" + nakName(p.AETH.Syndrome().NAKCode()) + ")"
	case p.AETH != nil && p.AETH.Syndrome().Type() == aeth.TypeRNRNAK:
		return "An RNR NAK"
	}
	return "An ACK"
}

// sent updates the requester s for a request it sent and returns a
// sentence about it when it is a retransmission, "" for a first one.
func (c *conn) sent(m *model, i int, s *end, side int, psn uint32, span int, p *wire.Packet) string {
	q := &s.req
	pk := m.pkt(i)
	gap := pk.Time - q.lastTx
	q.lastTx = pk.Time
	if q.sent == nil {
		q.sent = make(map[uint32]int)
		q.orig = make(map[uint32]sentAs)
	}
	if !q.started {
		q.started, q.next, q.una = true, psn, psn
	}
	kind, pos := classify(p.BTH.Opcode())
	if psnDiff(psn, q.next) >= 0 {
		q.sent[psn] = i
		q.remember(psn, sentAs{op: p.BTH.Opcode(), n: len(p.Payload), pkt: i})
		if kind == opRead || kind == opAtomic || pos == wire.Last || pos == wire.Only {
			c.sum.Messages[side]++
		}
		q.next = psnAdd(psn, span)
		q.resending = false
		why := ""
		if q.undoAt != 0 {
			a := m.pkt(q.undoAt)
			m.event(i, trace.Event{Kind: trace.GoBackUndone, QP: s.QPN, PSN: psnAdd(q.una, -1), Expected: psn})
			why = fmt.Sprintf("A new request, not the rest of the resend that began at packet %d: the ACK of packet %d showed the requests sent before the silence arriving after all, so %s resumes after the last of them (gorxe's requester undoes such a go-back, as TCP undoes a spurious retransmission).",
				m.pkt(q.fewAt).Index, a.Index, s.label())
			q.undoAt, q.fewAt, q.fewAnswered = 0, 0, 0
		}
		c.sum.Bytes[side] += int64(len(p.Payload))
		if kind == opRead || kind == opAtomic {
			pr := pendingRead{psn: psn, n: span, atomic: kind == opAtomic}
			if p.RETH != nil {
				pr.length = p.RETH.DMALen()
			}
			q.reads = append(q.reads, pr)
		}
		return why
	}
	if _, seen := q.orig[psn]; !seen && q.aheadAt != 0 && psnDiff(psn, q.aheadFrom) >= 0 && psnDiff(psnAdd(psn, span-1), q.aheadTo) <= 0 &&
		pk.Time-m.pkt(q.aheadAt).Time <= reordered && kind != opRead && kind != opAtomic {
		// Answered before the capture showed it: the original, late in
		// the capture, not a resend.
		q.remember(psn, sentAs{op: p.BTH.Opcode(), n: len(p.Payload), pkt: i})
		if pos == wire.Last || pos == wire.Only {
			c.sum.Messages[side]++
		}
		c.sum.Bytes[side] += int64(len(p.Payload))
		return fmt.Sprintf("The capture shows this request after its answer (the ACK of packet %d, %s before): it saw the two out of order, as a bridge can, which forwards a request to the responder's port before its own capture takes a copy, while the responder answers at once on another CPU. So this is the original, not a resend.",
			m.pkt(q.aheadAt).Index, seconds(pk.Time-m.pkt(q.aheadAt).Time))
	}
	// A PSN sent before: a retransmission.
	why := c.resent(m, i, s, side, psn, span, p, gap)
	if o, ok := q.orig[psn]; ok && (o.op != p.BTH.Opcode() || o.n != len(p.Payload) && kind != opRead) {
		// A READ asked again from the middle names another address and
		// length, in a request of the same size; anything else must be
		// sent again as it was.
		pk.Anomaly = "error"
		why = joinText(why, fmt.Sprintf("It is not what %s first sent with this PSN (packet %d: %s, %d bytes of payload): a retransmission must repeat the request, and a responder that takes this one as new sees its messages cut differently (a SEND or WRITE without its FIRST or LAST is refused with a NAK, invalid request).",
			s.label(), m.pkt(o.pkt).Index, o.op, o.n))
	}
	return why
}

// maxFew is the most packets a run after a timeout may have resent
// before it waits for their answer, for explain to tell the wait: a run
// that resends a whole window has answers come in between by chance.
const maxFew = 8

// origWindow is how many PSNs back a requester's first transmissions are
// remembered.
const origWindow = 1 << 15

// remember notes what psn was first sent as, and forgets the PSNs more
// than origWindow behind it once there are that many.
func (q *requester) remember(psn uint32, a sentAs) {
	q.orig[psn] = a
	if len(q.orig) <= origWindow {
		return
	}
	for k := range q.orig {
		if psnDiff(psn, k) >= origWindow/2 {
			delete(q.orig, k)
		}
	}
}

// watchResend follows the answers to the resend after a silence that
// begins with packet i, when the last request sent before it ended a
// message and so asked for an ACK: ACKed twice, it shows the responder
// had every original. (An ACK of a PSN inside a message answers a
// duplicate, but the packets after it may have been lost before the
// capture point.) resent has cleared the last run's watch.
func (q *requester) watchResend(i int) {
	last := psnAdd(q.next, -1)
	if o, ok := q.orig[last]; ok {
		if _, pos := classify(o.op); pos == wire.Last || pos == wire.Only {
			q.probed, q.probeAt = last, i
		}
	}
}

// resent updates the requester s for a request it sent again and returns
// the sentence that says why it did.
func (c *conn) resent(m *model, i int, s *end, side int, psn uint32, span int, p *wire.Packet, gap time.Duration) string {
	q := &s.req
	pk := m.pkt(i)
	kind, _ := classify(p.BTH.Opcode())
	q.sent[psn] = i
	c.sum.Retransmissions[side]++
	pk.Anomaly = "retransmission"
	if kind == opRead || kind == opAtomic {
		q.retryRead(psn, span, p)
	}
	caused := q.cause != "" && psn == q.causePSN
	if q.cause == "nak" && caused && pk.Time-m.pkt(q.causeAt).Time > lateNAK {
		// So long after the NAK that it did not send the requester back
		// (it was going back already): its ACK timer did.
		caused = false
	}
	if q.resending && !caused && q.fewAt != 0 && q.fewAnswered != 0 && q.fewSent <= maxFew &&
		psn != q.runNext && psnAdd(psn, span) == q.next {
		// The last packet sent, not the run's next: the answer to the few
		// resent packets could be theirs or the originals', and a probe
		// asks which. The run stays where it was, for the answer to tell.
		m.event(i, trace.Event{Kind: trace.Probe, QP: s.QPN, PSN: psn, Reason: trace.ProbeConfirm})
		return fmt.Sprintf("A probe: the ACK of packet %d answered one of the %s %s resent from packet %d after the silence, as the resend's answer or, late, the original's. So it resends nothing more and sends its last packet again, asking for an ACK: an answer for a PSN it has not resent will show the originals arriving, and a NAK of the gap the probe shows will say they were lost (gorxe's requester tests a timeout so, as TCP's F-RTO does).",
			m.pkt(q.fewAnswered).Index, plural(q.fewSent, "packet"), s.label(), m.pkt(q.fewAt).Index)
	}
	if q.resending && q.inRun && q.cause == "implied" && psn == q.runNext {
		caused = false
	}
	if q.resending && !caused && psnDiff(psn, q.runNext) >= 0 {
		// The run goes on; a PSN it skipped was resent and lost before
		// the capture point.
		q.runNext = psnAdd(psn, span)
		q.undoAt = 0
		if q.inRun && q.cause == "implied" && psnDiff(q.causePSN, psn) >= 0 && psnDiff(q.causePSN, q.runNext) < 0 {
			at := m.pkt(q.causeAt).Index
			q.cause, q.inRun = "", false
			return fmt.Sprintf("Resent, go-back-N: %s goes on resending everything after the PSN it went back to, and this is the READ whose responses packet %d showed lost: the run resends it in its turn, not a new go-back.", s.label(), at)
		}
		if q.fewAt != 0 && q.fewAnswered != 0 && q.fewSent <= maxFew {
			first, n, answered := q.fewAt, q.fewSent, q.fewAnswered
			q.fewAt, q.fewAnswered = 0, 0
			return fmt.Sprintf("Resent, go-back-N: after the silence %s resent %s from packet %d, and the rest only after the ACK of packet %d answered them, which showed what the responder holds (gorxe's requester resends so, as TCP restarts from one segment after a timeout).",
				s.label(), plural(n, "packet"), m.pkt(first).Index, m.pkt(answered).Index)
		}
		q.fewSent++
		return fmt.Sprintf("Resent, go-back-N: %s goes on resending everything after the PSN it went back to.", s.label())
	}
	// A resend of a PSN the capture has seen acknowledged: the answer had
	// not reached the requester when it chose to resend. From where it
	// stood, the PSN was its oldest unacknowledged one.
	crossed := psnDiff(psn, q.una) < 0 && q.ackedAt != 0
	from := q.una
	if crossed {
		from = psn
	}
	q.resending, q.runNext, q.runAt = true, psnAdd(psn, span), i
	q.fewAt, q.fewAnswered, q.undoAt = 0, 0, 0
	q.probeAt, q.probeAnswered = 0, 0 // a new run: its copies' answers say nothing of the last one's need
	ev := trace.Event{Kind: trace.GoBack, QP: s.QPN, PSN: psn}
	var why string
	switch {
	case q.cause == "nak" && caused:
		ev.Reason = trace.GoBackNAK
		why = fmt.Sprintf("Retransmission of PSN %d after the NAK (packet %d), go-back-N: %s resends from the PSN the responder named, and everything after it.",
			psn, m.pkt(q.causeAt).Index, s.label())
	case q.cause == "rnr" && caused:
		ev.Reason = trace.GoBackRNR
		m.event(i, trace.Event{Kind: trace.RNRWaitOver, QP: s.QPN, PSN: psn})
		why = fmt.Sprintf("Resent after the RNR wait: the responder asked for %v, and %s waited %s since the RNR NAK.",
			q.wait, s.label(), seconds(pk.Time-m.pkt(q.causeAt).Time))
	case q.cause == "implied" && caused:
		ev.Reason = trace.GoBackImpliedNAK
		why = fmt.Sprintf("Resent from PSN %d: the answers before the later one that came (packet %d) were lost, an implied NAK.", psn, m.pkt(q.causeAt).Index)
		if kind == opRead && p.RETH != nil {
			why += fmt.Sprintf(" The READ is asked again from the middle: %d bytes from the first missing response on (C9-107).", p.RETH.DMALen())
		}
	case psn != from && psnAdd(psn, span) == q.next:
		// Only the last packet again, not the oldest unacknowledged: a probe.
		ev = trace.Event{Kind: trace.Probe, QP: s.QPN, PSN: psn, Wait: gap}
		q.watchResend(i)
		q.tlp = i
		c.sum.Timeouts[side]++
		pk.Anomaly = "timeout"
		why = fmt.Sprintf("A tail-loss probe: after %s with no ACK, %s resends only its last packet, to learn from the answer what the responder has.", seconds(gap), s.label())
		q.resending = false
	case q.tlp != 0:
		ev.Reason = trace.GoBackProbe
		q.watchResend(i)
		q.fewAt, q.fewPSN, q.fewSent = i, psn, 1
		c.sum.Timeouts[side]++
		pk.Anomaly = "timeout"
		why = fmt.Sprintf("Retransmission after %s of silence: the tail-loss probe (packet %d) went unanswered too, so %s takes the oldest unacknowledged PSN, %d, for lost again and goes back to it, go-back-N, without waiting for its local ACK timeout (gorxe's requester goes back so, resending a few packets until one is answered, and again on a doubling clock while none is).",
			seconds(gap), m.pkt(q.tlp).Index, s.label(), from)
	default:
		ev.Reason = trace.GoBackTimeout
		q.watchResend(i)
		q.fewAt, q.fewPSN, q.fewSent = i, psn, 1
		m.event(i, trace.Event{Kind: trace.Timeout, QP: s.QPN, PSN: from})
		c.sum.Timeouts[side]++
		pk.Anomaly = "timeout"
		why = fmt.Sprintf("Retransmission after %s of silence: no ACK of PSN %d had reached %s when its local ACK timer fired (the timeout is inferred from the gap), so it goes back to the oldest unacknowledged PSN, go-back-N.",
			seconds(gap), from, s.label())
		if psnAdd(psn, span) == q.next {
			why += " This was the one packet outstanding, so a tail-loss probe (as gorxe's requester sends after a few round trips of silence) would resend the same packet: the capture alone does not tell the two apart."
		}
	}
	m.event(i, ev)
	q.cause = ""
	if crossed {
		a := m.pkt(q.ackedAt)
		why += fmt.Sprintf(" Yet PSN %d was acknowledged already, by packet %d, %s before this resend as the capture saw them: the answer and the resend crossed (or the requester had not taken the answer in when its timer fired), so the resend was not needed, and the responder takes it as a duplicate.",
			psn, a.Index, seconds(pk.Time-a.Time))
	}
	return why
}

// respan corrects the span of the last READ q sent, reckoned with a
// guessed path MTU, when the next request comes at psn inside it: that
// is where the READ's responses end. The span shows the MTU, when only
// one MTU gives it. rs is the responder's side, whose expected PSN
// followed the guess too.
func (c *conn) respan(q *requester, rs *responder, psn uint32) {
	rd := q.lastRead()
	if rd == nil || psnDiff(psn, rd.psn) <= 0 || psnDiff(psn, q.next) >= 0 {
		return
	}
	q.resize(rd, int(psnDiff(psn, rd.psn)), rs)
	mtu := 0
	for m := 256; m <= 4096; m *= 2 {
		if (int(rd.length)+m-1)/m == rd.n {
			if mtu != 0 {
				return // more than one MTU gives this span
			}
			mtu = m
		}
	}
	c.mtu = mtu
}

// retryRead notes a READ or atomic sent again: a retried READ that asks
// from the middle restarts the count of its responses there.
func (q *requester) retryRead(psn uint32, span int, p *wire.Packet) {
	for j := range q.reads {
		rd := &q.reads[j]
		if d := psnDiff(psn, rd.psn); d >= 0 && int(d) < rd.n {
			rd.got = int(d)
			return
		}
	}
	// A READ whose first copy was lost before the capture point: it goes
	// in PSN order among the outstanding ones, where its answers will
	// come.
	pr := pendingRead{psn: psn, n: span, atomic: p.AtomicETH != nil}
	j := 0
	for j < len(q.reads) && psnDiff(q.reads[j].psn, psn) < 0 {
		j++
	}
	q.reads = slices.Insert(q.reads, j, pr)
}

// receive explains what the responder r does with a request at psn.
func (c *conn) receive(m *model, i int, s, r *end, psn uint32, span int, kind opKind, pos wire.Position, p *wire.Packet, retx string) {
	pk := m.pkt(i)
	rs := &r.resp
	text := func(t string) {
		if retx != "" {
			t = retx + " " + t
		}
		pk.Text = t
	}
	flag := func(tag string) {
		if pk.Anomaly != "error" { // a resend unlike the first send, told by sent
			pk.Anomaly = tag
		}
	}
	if !rs.known {
		rs.known, rs.epsn = true, psn
		// A capture may begin in the middle of a message.
		rs.open, rs.inMsg = kind, pos == wire.Middle || pos == wire.Last
	}
	what := c.describe(p, s, r)
	d := psnDiff(psn, rs.epsn)
	switch {
	case d == 0 && !rs.follows(kind, pos):
		pk.Anomaly = "error"
		was := "no SEND or WRITE is under way"
		if rs.inMsg {
			was = fmt.Sprintf("a %s begun is not finished", kindName(rs.open))
		}
		rs.inMsg = false
		text(fmt.Sprintf("%s arrives at the expected PSN %d, but %s: its opcode breaks the sequence, and %s refuses it with a NAK, invalid request: a fatal error, %s goes to the error state (IBTA §9.7.5.1).",
			p.BTH.Opcode(), psn, was, r.label(), s.label()))
	case d == 0:
		resumed := ""
		if rs.nak {
			resumed = fmt.Sprintf(" It is the PSN the NAK asked for: %s takes requests again.", r.label())
			rs.nak = false
		}
		rs.epsn = psnAdd(psn, span)
		rs.took(kind, pos)
		text(what + resumed)
	case d > 0:
		flag("out of sequence")
		if !rs.nak {
			rs.nak = true
			rs.owed, rs.owedPSN, rs.owedAt = true, rs.epsn, i
			m.event(i, trace.Event{Kind: trace.NAKSent, QP: r.QPN, PSN: psn, Expected: rs.epsn, Syndrome: trace.PSNSequenceError, Opcode: p.BTH.Opcode().String()})
			lost := "lost before the capture point"
			if _, seen := s.req.sent[rs.epsn]; seen {
				lost = "sent, and so lost after the capture point"
			}
			text(fmt.Sprintf("PSN %d arrives while %d is expected (%d is %s): %s NAKs once with PSN sequence error and drops what follows until %d comes back (IBTA §9.7.5.1).",
				psn, rs.epsn, rs.epsn, lost, r.label(), rs.epsn))
		} else {
			text(fmt.Sprintf("PSN %d is dropped: %s has NAKed and discards every request until PSN %d comes back.", psn, r.label(), rs.epsn))
		}
	default:
		flag("duplicate")
		ev := trace.Event{Kind: trace.Duplicate, QP: r.QPN, PSN: psn, Expected: rs.epsn, Opcode: p.BTH.Opcode().String()}
		switch kind {
		case opRead:
			ev.Reason = trace.DuplicateReplayed
			text(fmt.Sprintf("Duplicate READ request (PSN %d, %d expected): the responder replays from its saved state, sending the responses again without a new MSN (C9-104).", psn, rs.epsn))
		case opAtomic:
			ev.Reason = trace.DuplicateAnswered
			text(fmt.Sprintf("Duplicate atomic (PSN %d, %d expected): it is not done twice; %s answers with the original value it saved the first time (C9-104).", psn, rs.epsn, r.label()))
		default:
			ev.Reason = trace.DuplicateAcked
			text(fmt.Sprintf("Duplicate: PSN %d is before the expected %d, so %s executed it already; it does not again, and acknowledges what it has (C9-105).", psn, rs.epsn, r.label()))
		}
		m.event(i, ev)
	}
}

// describe says what an in-sequence request asks of the responder.
func (c *conn) describe(p *wire.Packet, s, r *end) string {
	op := p.BTH.Opcode()
	kind, pos := classify(op)
	n := len(p.Payload)
	ack := ""
	if p.BTH.AckReq() {
		ack = " It asks for an ACK (ackreq)."
	}
	imm := ""
	if p.ImmDt != nil {
		imm = fmt.Sprintf(", with immediate data %#x for the receiver's completion", p.ImmDt.Imm())
	}
	switch kind {
	case opWrite:
		switch pos {
		case wire.Only:
			return fmt.Sprintf("RDMA WRITE of %d bytes into %s's memory at %#x (rkey %#x)%s: the responder checks the rkey and its rights, then writes; its CPU is not told.%s",
				n, r.Addr, p.RETH.VA(), uint32(p.RETH.RKey()), imm, ack)
		case wire.First:
			return fmt.Sprintf("First packet of an RDMA WRITE of %d bytes to %#x (rkey %#x): the RETH names where; %d bytes written.%s",
				p.RETH.DMALen(), p.RETH.VA(), uint32(p.RETH.RKey()), n, ack)
		case wire.Middle:
			return fmt.Sprintf("%d more bytes of the RDMA WRITE, placed after the last.%s", n, ack)
		default:
			return fmt.Sprintf("Last %d bytes of the RDMA WRITE%s: the message is complete.%s", n, imm, ack)
		}
	case opSend:
		switch pos {
		case wire.Only:
			return fmt.Sprintf("SEND of %d bytes%s: it fills the next receive %s has posted, and completes there.%s", n, imm, r.label(), ack)
		case wire.First:
			return fmt.Sprintf("First %d bytes of a SEND: the responder takes its next posted receive for it.%s", n, ack)
		case wire.Middle:
			return fmt.Sprintf("%d more bytes of the SEND.%s", n, ack)
		default:
			return fmt.Sprintf("Last %d bytes of the SEND%s: the receive completes.%s", n, imm, ack)
		}
	case opRead:
		n := p.RETH.DMALen()
		span := c.readSpan(n)
		read := fmt.Sprintf("RDMA READ of %d bytes at %#x (rkey %#x)", n, p.RETH.VA(), uint32(p.RETH.RKey()))
		if most := max(1, int((uint64(n)+4095)/4096)); c.mtu == 0 && span != most {
			// No packet has shown the path MTU yet: the span is a guess,
			// and the responses' PSNs will tell.
			return fmt.Sprintf("%s: it takes a PSN for each READ response the responder will send, from %d on: %d at a path MTU of %d, %d at 4096 (no packet has shown the path MTU yet). It counts as a message (C9-148).",
				read, p.BTH.PSN(), span, c.pmtu(), most)
		}
		last := psnAdd(uint32(p.BTH.PSN()), span-1)
		return fmt.Sprintf("%s: it takes PSNs %d to %d, the %d READ responses the responder will send, and counts as a message (C9-148).",
			read, p.BTH.PSN(), last, span)
	case opAtomic:
		a := p.AtomicETH
		if op&0x1f == 0x13 {
			return fmt.Sprintf("COMPARE_SWAP on the 8 bytes at %#x: if they equal %#x they become %#x, in one step; the old value comes back in an ATOMIC_ACKNOWLEDGE.", a.VA(), a.Compare(), a.SwapAdd())
		}
		return fmt.Sprintf("FETCH_ADD on the 8 bytes at %#x: %d is added in one step; the old value comes back in an ATOMIC_ACKNOWLEDGE.", a.VA(), a.SwapAdd())
	case opFlush:
		return "FLUSH: the responder makes earlier writes to the range persistent or visible."
	}
	return fmt.Sprintf("%v request.", op)
}

// response explains an ACK, NAK, READ response or atomic ACK that the
// responder s sends to the requester r.
func (c *conn) response(m *model, i int, s, r *end, side int, p *wire.Packet) {
	pk := m.pkt(i)
	op := p.BTH.Opcode()
	psn := uint32(p.BTH.PSN())
	kind, pos := classify(op)
	q := &r.req
	q.tlp = 0 // the probe, or what came before it, is answered
	una := q.una
	defer func() {
		if q.una != una {
			q.ackedAt = i
		}
	}()
	if p.AETH != nil {
		s.resp.msn = uint32(p.AETH.MSN())
	}
	var syn aeth.Syndrome
	if p.AETH != nil {
		syn = p.AETH.Syndrome()
	}
	switch {
	case kind == opAck && syn.Type() == aeth.TypeNAK:
		c.nak(m, i, s, r, side, psn, syn)
	case kind == opAck && syn.Type() == aeth.TypeRNRNAK:
		c.sum.RNRNAKs[side]++
		pk.Anomaly = "rnr"
		wait := syn.RNRTimer().Duration()
		m.event(i, trace.Event{Kind: trace.RNRNAKSent, QP: s.QPN, PSN: psn, Wait: wait})
		m.event(i, trace.Event{Kind: trace.RNRNAKReceived, QP: r.QPN, PSN: psn, Wait: wait})
		// The responder took nothing of the request: it expects it again.
		s.resp.rewind(psn, q)
		s.resp.nak = false
		q.cause, q.causePSN, q.causeAt, q.wait = "rnr", psn, i, wait
		q.resending = false
		q.ack(psnAdd(psn, -1))
		pk.Text = fmt.Sprintf("RNR NAK (receiver not ready) for PSN %d: %s has no receive posted for the SEND. %s waits %v (the RNR timer) and then sends PSN %d again.",
			psn, s.label(), r.label(), wait, psn)
	case kind == opAck:
		pk.Text = c.ack(m, i, s, r, psn, syn)
	case kind == opAtomicAck:
		pk.Text = c.atomicAck(m, i, s, r, psn, p)
	default:
		pk.Text = c.readResponse(m, i, s, r, side, psn, pos, p)
	}
}

// ack explains a positive acknowledgement.
func (c *conn) ack(m *model, i int, s, r *end, psn uint32, syn aeth.Syndrome) string {
	q := &r.req
	credits := ""
	if n, limited := syn.Credits(); limited {
		credits = fmt.Sprintf(" It grants %d receive credits (end-to-end flow control).", n)
	}
	msn := fmt.Sprintf("%s has completed %s (MSN)", s.label(), plural(int(s.resp.msn), "message"))
	if !q.started {
		return fmt.Sprintf("ACK of every request up to PSN %d, none of them in the capture; %s.%s", psn, msn, credits)
	}
	if psnDiff(psn, q.una) < 0 {
		if q.probeAnswered != 0 && psnDiff(psn, q.probed) >= 0 {
			first, copy := m.pkt(q.probeAnswered).Index, m.pkt(q.probeAt).Index
			q.probeAt, q.probeAnswered = 0, 0
			return fmt.Sprintf("ACK of PSN %d again, the answer to a copy from the resend at packet %d: the ACK of packet %d answered the original, late but not lost, so the resend after the silence was not needed (a gorxe requester learns from this to wait longer before it probes); %s.%s",
				psn, copy, first, msn, credits)
		}
		return fmt.Sprintf("ACK of PSN %d, which %s has had acknowledged already: the answer to a duplicate request, or a repeat, and changes nothing; %s.%s", psn, r.label(), msn, credits)
	}
	if q.fewAt != 0 && q.fewAnswered == 0 && psnDiff(psn, q.fewPSN) >= 0 {
		q.fewAnswered = i
	}
	undo := ""
	if q.resending && q.fewAt != 0 && q.fewSent <= maxFew && psnDiff(psn, q.runNext) >= 0 && psnDiff(psn, q.next) < 0 {
		q.undoAt = i
		undo = fmt.Sprintf(" It covers PSN %d, which %s has not sent again since it went back at packet %d: the requests sent before the silence are arriving after all.",
			psn, r.label(), m.pkt(q.fewAt).Index)
	}
	switch {
	case q.probeAt != 0 && q.probeAnswered == 0 && psnDiff(psn, q.probed) >= 0:
		q.probeAnswered = i
	case q.probeAnswered != 0 && psnDiff(psn, q.probed) > 0:
		q.probeAt, q.probeAnswered = 0, 0 // a later PSN's answer: the probe's came with the first, or never
	}
	unseen := ""
	if psnDiff(psn, q.next) >= 0 {
		unseen = " (the capture holds none of the requests after its last)"
		q.aheadAt, q.aheadFrom, q.aheadTo = i, q.next, psn
		q.next = psnAdd(psn, 1)
	}
	var implied string
	for len(q.reads) > 0 && psnDiff(q.reads[0].psn, psn) <= 0 {
		rd := q.reads[0]
		if psnDiff(psnAdd(rd.psn, rd.n-1), psn) <= 0 {
			q.reads = q.reads[1:] // its responses are all before this ACK's PSN
			continue
		}
		implied = fmt.Sprintf(" It acknowledges PSNs past the READ at %d, whose responses have not all come: an implied NAK, and %s will ask again.", rd.psn, r.label())
		q.impliedNAK(&rd, i)
		m.event(i, trace.Event{Kind: trace.ImpliedNAK, QP: r.QPN, PSN: q.causePSN})
		break
	}
	n := q.ack(psn)
	coalesced := ""
	if n > 1 && unseen == "" {
		coalesced = fmt.Sprintf(", %d packets at once (coalesced)", n)
	}
	return fmt.Sprintf("ACK of every request up to PSN %d%s%s; %s.%s%s%s", psn, coalesced, unseen, msn, credits, implied, undo)
}

// nak explains a NAK.
func (c *conn) nak(m *model, i int, s, r *end, side int, psn uint32, syn aeth.Syndrome) {
	pk := m.pkt(i)
	q := &r.req
	code := syn.NAKCode()
	name := nakName(code)
	c.sum.NAKs[side][name]++
	pk.Anomaly = "nak"
	m.event(i, trace.Event{Kind: trace.NAKReceived, QP: r.QPN, PSN: psn, Syndrome: name})
	if code != aeth.NAKPSNSequenceError {
		status := map[aeth.NAKCode]string{aeth.NAKInvalidRequest: "IBV_WC_REM_INV_REQ_ERR", aeth.NAKRemoteAccess: "IBV_WC_REM_ACCESS_ERR",
			aeth.NAKRemoteOperation: "IBV_WC_REM_OP_ERR"}[code]
		if status == "" {
			status = "IBV_WC_REM_OP_ERR"
		}
		m.event(i, trace.Event{Kind: trace.NAKSent, QP: s.QPN, PSN: psn, Expected: psn, Syndrome: name})
		m.event(i, trace.Event{Kind: trace.WRFailed, QP: r.QPN, Status: status, Reason: name})
		pk.Text = fmt.Sprintf("NAK, %s, for PSN %d: %s refuses the request. This is fatal, not retried: %s's work request completes with %s and its QP moves to the error state, flushing the rest.",
			name, psn, s.label(), r.label(), status)
		return
	}
	// PSN sequence error: the responder expects psn.
	q.ack(psnAdd(psn, -1)) // a NAK acknowledges everything before its PSN
	q.cause, q.causePSN, q.causeAt = "nak", psn, i
	rs := &s.resp
	late := rs.owed && rs.owedPSN == psn && !(rs.nak && rs.epsn == psn)
	owedAt := rs.owedAt
	rs.owed = false        // this is the NAK owed, or the owed one never came
	j, seen := q.sent[psn] // psn's latest sending the capture holds
	seen = seen && j < i
	if late && seen {
		// The NAK owed for the request at owedAt, late: psn reached the
		// responder since (the model took it at j), and so did what
		// followed. It expects later PSNs now, and the requests the NAK
		// brings again are duplicates to it. A NAK for psn could not be
		// sent for a later request instead: a responder that has NAKed
		// drops requests until psn comes (rxe's sent_psn_nak), and once
		// psn has come it no longer expects psn.
		pk.Text = fmt.Sprintf("NAK, PSN sequence error, for PSN %d: %s's answer to packet %d, %v after it. It answers requests in order and is that far behind: PSN %d has reached it since (packet %d), and it took the requests that followed. %s goes back to PSN %d all the same and sends everything again from there (go-back-N, IBTA §9.7.5.2); %s finds those requests duplicates.",
			psn, s.label(), m.pkt(owedAt).Index, seconds(pk.Time-m.pkt(owedAt).Time), psn, m.pkt(j).Index, r.label(), psn, s.label())
		return
	}
	lost := ""
	if seen {
		lp := m.pkt(j)
		if !lp.Lost {
			lp.Lost = true
			lp.Anomaly = "lost"
			lp.Text += fmt.Sprintf(" It never reached %s: the NAK at packet %d names this PSN.", s.label(), pk.Index)
			lost = fmt.Sprintf(" The capture saw PSN %d sent (packet %d): it was lost on the way.", psn, lp.Index)
		}
	}
	if !rs.nak || rs.epsn != psn {
		c.retell(m, i, s, r, psn)
	}
	rs.rewind(psn, q)
	rs.known, rs.nak = true, true
	pk.Text = fmt.Sprintf("NAK, PSN sequence error: %s expected PSN %d and got a later one. %s goes back to PSN %d and sends everything again from there (go-back-N, IBTA §9.7.5.2).%s",
		s.label(), psn, r.label(), psn, lost)
}

// retell corrects the story of the requests r sent after psn and before
// the NAK at packet i, which the model took for in sequence: the capture
// saw them on their way but not psn's loss, which the NAK now shows. The
// first of them is the one the responder s NAKed; the rest it dropped.
// What the requester's side said of a resent one stands; the responder's
// story, a duplicate's included, is told again.
func (c *conn) retell(m *model, i int, s, r *end, psn uint32) {
	var later []int
	for p, j := range r.req.sent {
		if d := psnDiff(p, psn); d > 0 && j < i {
			later = append(later, j)
		}
	}
	slices.Sort(later)
	if len(later) == 0 {
		// The request that made the NAK is not in the capture.
		m.event(i, trace.Event{Kind: trace.NAKSent, QP: s.QPN, PSN: psn, Expected: psn, Syndrome: trace.PSNSequenceError})
		return
	}
	for k, j := range later {
		pk := m.pkt(j)
		pk.Events = slices.DeleteFunc(pk.Events, func(e trace.Event) bool { return e.Kind == trace.Duplicate })
		if k == 0 {
			pk.Anomaly = "out of sequence"
			pk.Text = joinText(m.retx[j], fmt.Sprintf("PSN %d arrives while %d is expected (%d was lost after the capture point): %s NAKs once with PSN sequence error and drops what follows until %d comes back (IBTA §9.7.5.1).",
				pk.PSN, psn, psn, s.label(), psn))
			e := trace.Event{Kind: trace.NAKSent, QP: s.QPN, PSN: pk.PSN, Expected: psn, Syndrome: trace.PSNSequenceError, Opcode: pk.Opcode, Time: pk.Time}
			pk.Events = append(pk.Events, e)
			continue
		}
		if pk.Anomaly == "" {
			pk.Anomaly = "out of sequence"
		}
		pk.Text = joinText(m.retx[j], fmt.Sprintf("PSN %d is dropped: %s has NAKed and discards every request until PSN %d comes back.", pk.PSN, s.label(), psn))
	}
}

// nakName names a NAK code as the trace does.
func nakName(c aeth.NAKCode) string {
	switch c {
	case aeth.NAKPSNSequenceError:
		return "PSN sequence error"
	case aeth.NAKInvalidRequest:
		return "invalid request"
	case aeth.NAKRemoteAccess:
		return "remote access error"
	case aeth.NAKRemoteOperation:
		return "remote operational error"
	case aeth.NAKInvalidRDRequest:
		return "invalid RD request"
	}
	return c.String()
}

// atomicAck explains the answer to an atomic.
func (c *conn) atomicAck(m *model, i int, s, r *end, psn uint32, p *wire.Packet) string {
	q := &r.req
	orig := uint64(0)
	if p.AtomicAck != nil {
		orig = p.AtomicAck.OrigData()
	}
	for j, rd := range q.reads {
		if rd.psn == psn {
			c.implied(m, i, r, j)
			q.reads = append(q.reads[:j], q.reads[j+1:]...)
			q.ack(psn)
			return fmt.Sprintf("ATOMIC_ACKNOWLEDGE: the atomic at PSN %d is done; the 8 bytes held %#x before it. It also acknowledges every request up to PSN %d.", psn, orig, psn)
		}
	}
	return fmt.Sprintf("ATOMIC_ACKNOWLEDGE for PSN %d, whose answer %s has already had (the reply to a duplicate, from the saved result): original value %#x.", psn, r.label(), orig)
}

// implied handles an answer to the READ or atomic j when earlier ones
// have not all been answered: their answers were lost, an implied NAK.
func (c *conn) implied(m *model, i int, r *end, j int) {
	q := &r.req
	if j == 0 || q.cause == "implied" {
		return
	}
	q.impliedNAK(&q.reads[0], i)
	m.event(i, trace.Event{Kind: trace.ImpliedNAK, QP: r.QPN, PSN: q.causePSN})
	m.pkt(i).Anomaly = "out of sequence"
}

// impliedNAK notes an implied NAK at packet i for the READ or atomic rd,
// whose answers from rd.got on were lost, and whether a go-back run
// already under way covers it (inRun).
func (q *requester) impliedNAK(rd *pendingRead, i int) {
	q.cause, q.causePSN, q.causeAt = "implied", psnAdd(rd.psn, rd.got), i
	q.inRun = q.resending && q.ackedAt < q.runAt && psnDiff(rd.psn, q.runNext) >= 0
}

// readResponse explains one READ response packet.
func (c *conn) readResponse(m *model, i int, s, r *end, side int, psn uint32, pos wire.Position, p *wire.Packet) string {
	q := &r.req
	n := len(p.Payload)
	for j := range q.reads {
		rd := &q.reads[j]
		d := psnDiff(psn, rd.psn)
		if d < 0 || int(d) >= rd.n || rd.atomic {
			continue
		}
		k := int(d)
		switch {
		case k == rd.got:
			rd.got++
			c.sum.Bytes[side] += int64(n)
			c.implied(m, i, r, j)
			aethNote := ""
			if pos == wire.First || pos == wire.Last || pos == wire.Only {
				aethNote = " Its AETH makes it an acknowledgement, too."
			}
			if rd.got < rd.n {
				if pos == wire.Only || pos == wire.Last {
					// The READ took fewer PSNs than reckoned with a
					// guessed MTU: it ends here.
					q.resize(rd, rd.got, &s.resp)
				} else {
					return fmt.Sprintf("READ response %d of %d for the READ at PSN %d: %d bytes of %s's memory, placed in %s's buffer.%s",
						k+1, rd.n, rd.psn, n, s.Addr, r.Addr, aethNote)
				}
			}
			done := *rd
			q.reads = append(q.reads[:j], q.reads[j+1:]...)
			q.ack(psn)
			return fmt.Sprintf("Last READ response (%d of %d) for the READ at PSN %d: %d bytes; the READ is complete, and everything up to PSN %d acknowledged.%s",
				k+1, done.n, done.psn, n, psn, aethNote)
		case k > rd.got:
			missing := psnAdd(rd.psn, rd.got)
			if q.cause != "implied" {
				q.impliedNAK(rd, i)
				m.event(i, trace.Event{Kind: trace.ImpliedNAK, QP: r.QPN, PSN: missing})
				m.pkt(i).Anomaly = "out of sequence"
				if q.inRun {
					return fmt.Sprintf("READ response at PSN %d while %d is missing: the responses between were lost. %s discards this one; the go-back run it began at packet %d, which nothing has answered yet, has still to resend the READ at PSN %d, and resends it in its turn (a second go-back is not begun while the first has made no progress).",
						psn, missing, r.label(), m.pkt(q.runAt).Index, rd.psn)
				}
				return fmt.Sprintf("READ response at PSN %d while %d is missing: the responses between were lost. %s discards this one and will ask for the READ again from PSN %d, from the middle (C9-107).",
					psn, missing, r.label(), missing)
			}
			return fmt.Sprintf("READ response at PSN %d, discarded: %s is still missing PSN %d.", psn, r.label(), missing)
		default:
			return fmt.Sprintf("READ response at PSN %d again: the responder replays the READ from its saved state; %s has these bytes already.", psn, r.label())
		}
	}
	return fmt.Sprintf("READ response at PSN %d for no READ the capture shows outstanding: a replay of one already complete, or the answer to a request before the capture.", psn)
}

// ucRequest explains a UC packet: no ACKs, no retransmission; a gap drops
// the message in progress.
func (c *conn) ucRequest(m *model, i int, s, r *end, side int, p *wire.Packet) {
	pk := m.pkt(i)
	psn := uint32(p.BTH.PSN())
	rs := &r.resp
	q := &s.req
	if !q.started {
		q.started = true
	}
	q.next = psnAdd(psn, 1)
	q.una = q.next
	c.sum.Bytes[side] += int64(len(p.Payload))
	_, pos := classify(p.BTH.Opcode())
	if !rs.known {
		rs.known, rs.epsn = true, psn
	}
	what := "UC " + c.describe(p, s, r)
	switch d := psnDiff(psn, rs.epsn); {
	case d == 0:
		if pos == wire.Last || pos == wire.Only {
			c.sum.Messages[side]++
		}
		pk.Text = what + " UC sends no ACK: nothing is retransmitted."
	default:
		pk.Anomaly = "out of sequence"
		m.event(i, trace.Event{Kind: trace.Dropped, QP: r.QPN, PSN: psn, Opcode: p.BTH.Opcode().String(), Reason: "UC PSN gap"})
		pk.Text = fmt.Sprintf("UC PSN %d while %d is expected: packets were lost. %s drops the message in progress and waits for the next FIRST or ONLY packet; UC never retransmits.", psn, rs.epsn, r.label())
		if pos == wire.First || pos == wire.Only {
			pk.Text = fmt.Sprintf("UC PSN %d while %d is expected: packets were lost, and the message in progress with them. This packet starts a new message, so %s takes it.", psn, rs.epsn, r.label())
			if pos == wire.Only {
				c.sum.Messages[side]++
			}
		}
	}
	rs.epsn = psnAdd(psn, 1)
}

// summary returns c's summary.
func (c *conn) summary() Summary {
	s := c.sum
	if c.first >= 0 {
		s.Duration = c.last - c.first
	}
	if s.Duration > 0 {
		for k := range s.Goodput {
			s.Goodput[k] = float64(s.Bytes[k]) * 8 / s.Duration.Seconds()
		}
	}
	return s
}

// plural returns "1 message", "2 messages".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

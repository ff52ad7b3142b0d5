package rc

import (
	"fmt"

	"github.com/gorxe/gorxe/congestion"
	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// cc is a QP's congestion control: DCQCN's two per-flow points (package
// congestion), plugged into the engines' send and receive paths.
//
//   - The reaction point (RP) paces what the QP sends its peer: the
//     requester's packets, retransmissions included, and the responder's
//     READ responses. The requester and the responder ask mayBuild before
//     each such packet and stop when it says no; the QP's timers then
//     wake it when the pacer has built up a whole burst, so a paced QP
//     pays for one timer per burst, not one per packet. ACKs, NAKs,
//     atomic ACKs and CNPs are not paced: they carry the peer's flow, not
//     this one's, and hold up the peer if held up. A tail-loss probe is
//     not held either, but is counted.
//   - The notification point (NP) answers the data packets (requests and
//     READ responses) that arrive ECN CE-marked with a CNP to the peer's
//     QP, at most one per min_time_between_cnps. A CNP is sent at once,
//     not paced, and uses no PSN.
//
// A CNP that arrives for the QP goes to its RP (HandleCNP).
//
// An idle QP, or one whose packets no switch marks, pays almost nothing
// for this: the points and what goes with them (type points) are made at
// the QP's first CNP or CE mark, so that until then a QP keeps two
// pointers (gorxe's budget is thousands of QPs a device, and the points
// are 500 bytes), and until the first CNP the send path asks one question
// per packet: has a CNP come? Only then is the clock read, once per lock
// hold (QP.now), and the RP told of every packet.
//
// Without a configuration (SetCongestion(nil)) the points are the zero,
// off, ones: the RP counts every CNP as ignored, the NP counts marks and
// sends no CNP.
type cc struct {
	q   *QP
	cfg *congestion.Config // nil: congestion control is off; the device's, shared, never written
	p   *points            // nil until the first CNP or CE mark
}

// points is a QP's DCQCN state, from its first CNP or CE mark on.
type points struct {
	rp   congestion.ReactionPoint
	np   congestion.NotificationPoint
	hot  bool            // a CNP has come: the RP may pace, its timers run
	held bool            // the last mayBuild held a packet back
	wake monotime.Time   // when a held sender may send again; zero when none is held
	rate congestion.Rate // the RP's rate as the trace last told it (traceRate)
	// ignored counts CNPs that came while the QP could send nothing
	// (RESET, INIT, ERR): rp_cnp_ignored, as a CNP to a disabled RP.
	ignored uint64
	tx      TxDesc // a CNP's, kept here so that a CNP allocates nothing
}

// SetCongestion gives the QP, which must be in RESET, DCQCN with the
// reaction point's configuration c (its Params are the notification
// point's too), or no congestion control when c is nil. The device gives
// all its QPs the same; the QP keeps c, which must not change. It returns
// c's first problem, changing nothing.
func (q *QP) SetCongestion(c *congestion.Config) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.attr.State != qp.StateReset {
		return fmt.Errorf("%w: congestion control is set in RESET, not %v", qp.ErrState, q.attr.State)
	}
	if c != nil {
		if _, err := congestion.NewReactionPoint(*c); err != nil {
			return err
		}
	}
	q.cc.cfg = c
	q.cc.reset()
	return nil
}

// reset forgets the points: a QP starts at the line rate, and starts so
// again when it returns to RESET for a new connection.
func (c *cc) reset() { c.p = nil }

// points returns the QP's DCQCN state, making it at the first need.
func (c *cc) points() *points {
	if c.p != nil {
		return c.p
	}
	p := new(points)
	if c.cfg != nil {
		// SetCongestion checked the configuration, so neither fails.
		rp, err := congestion.NewReactionPoint(*c.cfg)
		np, err2 := congestion.NewNotificationPoint(c.cfg.Params)
		if err == nil && err2 == nil {
			p.rp, p.np = *rp, *np
		}
	}
	p.rate = p.rp.Rate()
	c.p = p
	return p
}

// now returns the time for congestion control's decisions: the clock,
// read once per hold of the QP's lock (unlock forgets it). A burst built
// under one lock is timed as if built at once; the pacer then credits
// the time it really took at the next look.
func (q *QP) now() monotime.Time {
	if q.clock.IsZero() {
		q.clock = q.port.Now()
	}
	return q.clock
}

// mayBuild reports whether the RP lets the QP build one more paced packet
// now. When it does not, the QP's timers wake it when a burst is due.
func (c *cc) mayBuild() bool {
	p := c.p
	if p == nil || !p.hot {
		return true
	}
	now := c.q.now()
	if p.rp.HasPacingBudget(now) {
		p.held = false
		return true
	}
	p.held = true
	p.wake = p.rp.TimeUntilSend(now)
	c.traceRate()
	return false
}

// held reports whether the last mayBuild held a packet back.
func (c *cc) held() bool { return c.p != nil && c.p.held }

// lastOfBurst reports whether a paced packet with n bytes of transport
// (BTH through pad) is the last the RP lets go before it holds the QP.
func (c *cc) lastOfBurst(n int) bool {
	p := c.p
	return p != nil && p.hot && p.rp.PacingBudget(c.q.now()) <= n+wire.ICRCLen+c.q.ipOverhead()
}

// paced reports whether packets of opcode op are paced: everything the
// QP sends but ACKs, NAKs, atomic ACKs and CNPs.
func paced(op bth.Opcode) bool {
	return op != bth.RCAcknowledge && op != bth.RCAtomicAcknowledge && op != bth.CNP
}

// onSent tells the RP of a packet of opcode op with n bytes of transport
// (BTH through ICRC) gone to the link.
func (c *cc) onSent(op bth.Opcode, n int) {
	p := c.p
	if p == nil || !p.hot || !paced(op) {
		return
	}
	p.rp.OnPacketSent(c.q.now(), n+c.q.ipOverhead())
	c.traceRate()
}

// ipOverhead is what the IP and UDP headers add to a packet to the peer:
// the RP counts bytes as they leave on the IP link.
func (q *QP) ipOverhead() int {
	if q.path.DGID.Unmap().Is4() {
		return wire.IPv4Len + wire.UDPLen
	}
	return wire.IPv6Len + wire.UDPLen
}

// sends reports whether the QP sends anything to its peer in its state:
// a responder from RTR, a requester from RTS.
func (c *cc) sends() bool {
	switch c.q.attr.State {
	case qp.StateRTR, qp.StateRTS, qp.StateSQD:
		return true
	}
	return false
}

// onCNP takes a CNP from the peer's NP: this QP's packets arrived marked.
func (c *cc) onCNP() {
	q := c.q
	p := c.points()
	if !c.sends() {
		p.ignored++
		c.traceCNP("ignored: the QP sends nothing in its state")
		return
	}
	p.rp.OnCNP(q.now())
	if !p.rp.Enabled() {
		c.traceCNP("ignored: congestion control is off")
		return
	}
	p.hot = true
	if p.rp.Rate() == p.rate {
		c.traceCNP("no cut now (one per rate_reduce_monitor_period, none below rpg_min_rate)")
		return
	}
	c.traceCNP("")
}

// traceCNP reports a CNP received, with the RP's state after it and, if
// it did not cut the rate, why.
func (c *cc) traceCNP(why string) {
	p := c.p
	s := p.rp.State()
	p.rate = s.Rate
	c.q.event(trace.Event{Kind: trace.CNPReceived, Rate: float64(s.Rate), TargetRate: float64(s.TargetRate), Alpha: s.Alpha, Reason: why})
}

// onMarked takes packet p, which arrived CE-marked, and sends a CNP for it
// if p carries the peer's data (a request or a READ response) and the NP
// has sent none within its interval. A marked ACK is not the data path
// this QP's peer could slow.
func (c *cc) onMarked(p *wire.Packet) {
	if !paced(p.BTH.Opcode()) || !c.sends() {
		return
	}
	if c.points().np.OnECNMarked(c.q.now()) {
		c.sendCNP(p.BTH.PSN())
	}
}

// sendCNP sends the peer's QP a CNP (Annex A17.9.3) for the marked packet
// with PSN psn, on the QP's path but with the CNP's traffic class:
// cnp_dscp and ECT(0), as ConnectX sends it.
func (c *cc) sendCNP(psn bth.PSN) {
	q, p := c.q, c.p
	h := wire.CNPHeaders(q.attr.DestQPNum)
	buf := q.port.NewBuffer()
	n, err := h.Encode(buf[q.txOff:])
	if err != nil {
		q.port.FreeBuffer(buf)
		q.event(trace.Event{Kind: trace.Error, Reason: "CNP not sent: " + err.Error()})
		return
	}
	q.event(trace.Event{Kind: trace.CNPSent, PSN: uint32(psn), DestQP: uint32(q.attr.DestQPNum)})
	p.tx = q.path
	p.tx.TrafficClass = wire.TrafficClass(c.cfg.Params.CNPDSCP, wire.ECT0)
	q.queueTxTo(&p.tx, buf, n)
}

// deadline returns when the QP needs Run for congestion control: a held
// sender's wake-up, or the end of the NP's interval when a deferred CNP
// waits for it (the paper's variant); the zero Time for neither.
func (c *cc) deadline() monotime.Time {
	p := c.p
	if p == nil || !c.sends() {
		return 0
	}
	return monotime.Min(p.wake, p.np.Deadline())
}

// run does what is due at now: a held sender may look again (Run sends
// next), and a deferred CNP goes.
func (c *cc) run(now monotime.Time) {
	p := c.p
	if p == nil {
		return
	}
	if !p.wake.IsZero() && !now.Before(p.wake) {
		p.wake = 0
	}
	if c.sends() && p.np.Advance(now) {
		c.sendCNP(c.q.resp.psn)
	}
}

// stop forgets a held sender's wake-up, as the QP enters ERR.
func (c *cc) stop() {
	if c.p != nil {
		c.p.wake, c.p.held = 0, false
	}
}

// traceRate reports a change of the RP's rate since it last did: a cut,
// or a recovery step of its timer or byte counter. It runs for every
// paced packet, and looks at the rate only when the QP is traced.
func (c *cc) traceRate() {
	q, p := c.q, c.p
	if q.onEvent == nil {
		return
	}
	if r := p.rp.Rate(); r != p.rate {
		s := p.rp.State()
		q.event(trace.Event{Kind: trace.RateChange, Rate: float64(s.Rate), TargetRate: float64(s.TargetRate), Alpha: s.Alpha})
		p.rate = r
	}
}

// HandleCNP takes a CNP addressed to this QP: the peer saw this QP's
// packets arrive ECN CE-marked. With congestion control on, the RP cuts
// the QP's rate; without, or in a state that sends nothing, the CNP is
// counted as ignored.
func (q *QP) HandleCNP() {
	q.mu.Lock()
	defer q.unlock()
	q.stats.RcvdPkts++
	q.cc.onCNP()
}

// Congestion returns the state of the QP's reaction point and the
// counters of both its points (mlx5's np_ and rp_ counters).
// Before the first CNP the rate is the line rate (0 with congestion
// control off).
func (q *QP) Congestion() (congestion.State, congestion.Counters) {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.cc.p
	if p == nil {
		var st congestion.State
		if cfg := q.cc.cfg; cfg != nil {
			st.Rate, st.TargetRate = cfg.LineRate, cfg.LineRate
		}
		return st, congestion.Counters{}
	}
	c := p.rp.Counters()
	n := p.np.Counters()
	c.Add(&n)
	c.RPCNPIgnored += p.ignored
	return p.rp.State(), c
}

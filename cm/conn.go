package cm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/cm"
)

// ConnParams say how to make a connection's QP and what to tell the peer:
// the QP's resources, and rdma_cm's struct rdma_conn_param.
type ConnParams struct {
	PD     *mr.PD
	SendCQ *cq.CQ
	RecvCQ *cq.CQ
	Cap    qp.Cap
	SigAll bool
	// Access is what the peer may do to this side's memory: remote
	// write, read, atomic.
	Access mr.Access
	// ResponderResources is how many READs and atomics the peer may have
	// outstanding at this side; InitiatorDepth how many this side may
	// have outstanding at the peer. A passive side's zero takes the
	// REQ's values.
	ResponderResources uint8
	InitiatorDepth     uint8
	// RetryCount and RNRRetryCount are the retries of the peer's
	// requester after timeouts and RNR NAKs (RNR 7: without end). 0
	// means 7, RetryNone none; above 7 is 7, as the kernel's rdma_cm
	// cuts the CM's 3-bit fields.
	RetryCount    uint8
	RNRRetryCount uint8
	// ACKTimeout is the local ACK timeout exponent this side asks for;
	// 0 means 18 (1.07 s), rdma_cm's on RoCE.
	ACKTimeout   uint8
	TrafficClass uint8
	// MTU is the largest path MTU to use; 0 means the device's.
	MTU qp.MTU
	// PrivateData goes in the REQ (at most 56 bytes behind rdma_cm's
	// header), the REP (196) or the REJ (148).
	PrivateData []byte
	// Local is the address a Dial sends from; the zero Addr takes the
	// device's first GID of the destination's family.
	Local netip.Addr
	// Receives are posted on the QP as soon as it exists, before any
	// message of the handshake goes out: a program's rdma_post_recv
	// before rdma_connect or rdma_accept, so that the peer's first SEND
	// finds one.
	Receives []qp.RecvWR
	// QP, when set, is an RC QP the caller created, in RESET or INIT,
	// that the connection uses instead of creating one from PD, the CQs,
	// Cap and SigAll (which are then ignored): it is moved to INIT with
	// Access if it is in RESET, and on to RTS. The caller keeps it: a
	// failed Dial or Accept and Conn.Close leave it to the caller to
	// destroy (in whatever state the attempt left it).
	QP *rnic.QP
	// QPNum, when QP is nil and QPNum is not 0, makes a connection with
	// no QP of the device's: the REQ or REP names QPNum, and no QP is
	// created or moved. It is rdma_connect and rdma_accept with a
	// conn_param's qp_num on an id without a QP, as cmtime's test of
	// connections without QPs does; PD, the CQs, Cap, Access and
	// Receives are then ignored.
	QPNum bth.QPN
}

// qpLess reports whether p asks for a connection without a QP.
func (p *ConnParams) qpLess() bool { return p.QP == nil && p.QPNum != 0 }

// RetryNone, as ConnParams' RetryCount or RNRRetryCount, asks for no
// retry at all; their zero value is rdma_cm's default, 7.
const RetryNone uint8 = 0xff

func (p *ConnParams) defaults() {
	def := func(v *uint8, d uint8) {
		if *v == 0 {
			*v = d
		}
	}
	retries := func(v *uint8) {
		switch {
		case *v == RetryNone:
			*v = 0
		case *v == 0 || *v > 7:
			*v = 7
		}
	}
	retries(&p.RetryCount)
	retries(&p.RNRRetryCount)
	def(&p.ACKTimeout, 18)
}

type connState uint8

const (
	stReqSent     connState = iota // active: REQ sent, waiting for REP
	stReqRcvd                      // passive: REQ handed to the listener
	stRepSent                      // passive: REP sent, waiting for RTU
	stEstablished                  // both
	stDreqSent                     // Disconnect sent a DREQ
	stClosed                       // disconnected, rejected or failed
)

var stateNames = [...]string{"REQ_SENT", "REQ_RCVD", "REP_SENT", "ESTABLISHED", "DREQ_SENT", "CLOSED"}

func (s connState) String() string { return stateNames[s] }

// Conn is an RC connection the connection manager made: its QP, in RTS
// once the connection is established, and what the peer sent.
type Conn struct {
	m      *Manager
	active bool
	state  connState

	localID    uint32
	remoteID   uint32
	remoteGUID uint64
	peer       peerAddr
	peerPort   uint16 // the active side's rdma_cm port, or the service's
	tid        uint64

	qp       *rnic.QP // nil for a connection without one (ConnParams.QPNum)
	ownQP    bool     // the manager created qp (not ConnParams.QP)
	remoteQP bth.QPN
	req      *cm.REQ // the REQ sent (active) or received (passive)
	rep      *cm.REP // the REP sent (passive) or received (active)
	rtu      *cm.RTU
	dreq     *cm.DREQ
	retries  uint8
	timer    *alarm
	wait     time.Duration // the current response time

	cp           connParams
	remotePriv   []byte
	err          error
	decided      chan struct{} // closed when the handshake ends, either way
	disconnected chan struct{} // closed when the connection ends
}

// QP returns the connection's queue pair, nil for a connection made
// without one (ConnParams.QPNum).
func (c *Conn) QP() *rnic.QP { return c.qp }

// LocalAddr returns this side's address.
func (c *Conn) LocalAddr() netip.Addr { return c.peer.dst }

// RemoteAddr returns the peer's address and its rdma_cm port (an active
// peer's source port, from rdma_cm's header; a passive peer's service
// port).
func (c *Conn) RemoteAddr() netip.AddrPort { return netip.AddrPortFrom(c.peer.src, c.peerPort) }

// PrivateData returns the private data the peer sent: a REP's, or a
// REQ's behind rdma_cm's header.
func (c *Conn) PrivateData() []byte { return c.remotePriv }

// Disconnected is closed when the connection ends: the peer's DREQ, this
// side's Disconnect, or a handshake that failed.
func (c *Conn) Disconnected() <-chan struct{} { return c.disconnected }

// Established waits until the handshake ends: on the passive side, the
// RTU came; on the active side (Dial has waited already; Connect has not),
// the REP came and the RTU went. It returns nil then, or why the handshake
// failed. With a ctx that is done it waits for nothing: it returns the
// outcome, or ctx's error while the handshake goes on.
func (c *Conn) Established(ctx context.Context) error {
	select {
	case <-c.decided:
	default:
		select {
		case <-c.decided:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.err
}

// Dial connects to the rdma_cm listener at raddr (rdma_connect in the TCP
// port space): it creates an RC QP from p, sends the REQ, and once the REP
// comes moves the QP to RTS and sends the RTU. It returns when the
// connection is established, rejected (an error wrapping *Rejected), has
// timed out after the retries (ErrTimeout), or ctx ends (the attempt is
// then abandoned with a REJ, as the kernel's rdma_destroy_id does).
func (m *Manager) Dial(ctx context.Context, raddr netip.AddrPort, p ConnParams) (*Conn, error) {
	c, err := m.Connect(raddr, p)
	if err != nil {
		return nil, err
	}
	select {
	case <-c.decided:
	case <-ctx.Done():
		m.mu.Lock()
		c.abandonLocked(context.Cause(ctx))
		m.mu.Unlock()
		<-c.decided
	}
	m.mu.Lock()
	err = c.err
	m.mu.Unlock()
	if err != nil {
		release(c.qp, p)
		return nil, fmt.Errorf("cm: dial %v: %w", raddr, err)
	}
	return c, nil
}

// Connect starts what Dial does and returns at once, with the REQ sent:
// Established reports the handshake's end. A program on a Loop uses it
// (see Manager). When the handshake fails, Close releases the QP.
func (m *Manager) Connect(raddr netip.AddrPort, p ConnParams) (*Conn, error) {
	p.defaults()
	dst := raddr.Addr().Unmap().WithZone("") // GIDs have no zone; the device has one link
	local := p.Local.Unmap()
	if !local.IsValid() {
		local = m.LocalFor(dst)
	}
	sgid := m.dev.GIDIndex(local)
	if sgid < 0 {
		return nil, fmt.Errorf("cm: dial %v: no local address of its family (device GIDs %v)", raddr, m.dev.GIDs())
	}
	if len(p.PrivateData) > cm.REQPrivateDataLen-cm.CMAHeaderLen {
		return nil, fmt.Errorf("cm: dial %v: %d bytes of private data, a REQ carries %d", raddr, len(p.PrivateData), cm.REQPrivateDataLen-cm.CMAHeaderLen)
	}
	q, err := m.newQP(p)
	if err != nil {
		return nil, err
	}
	mtu := min(m.dev.MTU(), orMTU(p.MTU))
	srcPort := m.ephemeralPort()
	req := &cm.REQ{
		ServiceID:               cm.ServiceID(cm.PortSpaceTCP, raddr.Port()),
		LocalCAGUID:             m.guid,
		LocalQPN:                qpNum(q, p),
		ResponderResources:      p.ResponderResources,
		InitiatorDepth:          p.InitiatorDepth,
		RemoteCMResponseTimeout: m.cfg.ResponseTimeout,
		TransportType:           cm.TransportRC,
		StartingPSN:             m.randomPSN(),
		LocalCMResponseTimeout:  m.cfg.ResponseTimeout,
		RetryCount:              p.RetryCount,
		PKey:                    bth.DefaultPKey,
		PathMTU:                 mtu,
		RNRRetryCount:           p.RNRRetryCount,
		MaxCMRetries:            m.cfg.MaxRetries,
		Primary: cm.Path{
			// A routed path: rdma_cm's permissive LIDs (hop limit > 1).
			LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: local, RemoteGID: dst,
			Rate: 3, TrafficClass: p.TrafficClass, HopLimit: 64, LocalACKTimeout: p.ACKTimeout,
		},
	}
	hdr := cm.CMAHeader{SrcPort: srcPort, Src: local, Dst: dst}
	if err := hdr.Encode(req.PrivateData[:]); err != nil {
		release(q, p)
		return nil, fmt.Errorf("cm: dial %v: %w", raddr, err)
	}
	copy(req.PrivateData[cm.CMAHeaderLen:], p.PrivateData)

	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		release(q, p)
		return nil, ErrClosed
	}
	c := &Conn{
		m: m, active: true, state: stReqSent, peer: peerAddr{src: dst, dst: local}, peerPort: raddr.Port(),
		qp: q, ownQP: p.QP == nil && q != nil, req: req, decided: make(chan struct{}), disconnected: make(chan struct{}),
	}
	c.localID = m.newCommID()
	req.LocalCommID = c.localID
	c.tid = m.newTID(c.localID)
	c.params(p)
	m.conns[c.localID] = c
	m.sendLocked(c.peer, c.tid, req)
	c.arm(m.responseTime(m.cfg.ResponseTimeout))
	m.mu.Unlock()
	return c, nil
}

// connParams are the parts of ConnParams a connection keeps for its
// handshake's second half.
type connParams struct {
	access     mr.Access
	resp, init uint8
	rnrRetry   uint8
	ackTimeout uint8
	mtu        qp.MTU
	tclass     uint8
}

func (c *Conn) params(p ConnParams) {
	c.cp = connParams{access: p.Access, resp: p.ResponderResources, init: p.InitiatorDepth,
		rnrRetry: p.RNRRetryCount, ackTimeout: p.ACKTimeout, mtu: orMTU(p.MTU), tclass: p.TrafficClass}
}

// newQP creates an RC QP from p, or takes p.QP, and moves it to INIT,
// posting p.Receives. It returns nil for a connection without a QP.
func (m *Manager) newQP(p ConnParams) (*rnic.QP, error) {
	if p.qpLess() {
		return nil, nil
	}
	q := p.QP
	if q == nil {
		var err error
		if q, err = m.dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: p.PD, SendCQ: p.SendCQ, RecvCQ: p.RecvCQ, Cap: p.Cap, SigAll: p.SigAll}); err != nil {
			return nil, fmt.Errorf("cm: %w", err)
		}
	}
	switch st := q.State(); st {
	case qp.StateReset:
		if err := q.Modify(&qp.Attr{State: qp.StateInit, Port: 1, AccessFlags: p.Access},
			qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags); err != nil {
			release(q, p)
			return nil, fmt.Errorf("cm: %w", err)
		}
	case qp.StateInit:
	default:
		return nil, fmt.Errorf("cm: QP %#x is in %v, not RESET or INIT", uint32(q.Num()), st)
	}
	if len(p.Receives) > 0 {
		if _, err := q.PostRecv(p.Receives); err != nil {
			release(q, p)
			return nil, fmt.Errorf("cm: posting the receives: %w", err)
		}
	}
	return q, nil
}

// release destroys q if the manager created it, not if p gave it.
func release(q *rnic.QP, p ConnParams) {
	if p.QP == nil && q != nil {
		q.Destroy()
	}
}

// qpNum returns the number a REQ or REP names: q's, or p.QPNum for a
// connection without a QP.
func qpNum(q *rnic.QP, p ConnParams) bth.QPN {
	if q == nil {
		return p.QPNum
	}
	return q.Num()
}

// toRTS moves the connection's QP from INIT through RTR to RTS, to the
// peer's QP remoteQP whose first PSN is rq, sending from sq.
func (c *Conn) toRTS(remoteQP bth.QPN, rq, sq bth.PSN, mtu qp.MTU, destRd, rd, retry, rnrRetry, timeout uint8) error {
	if c.qp == nil {
		return nil
	}
	av := qp.AddressVector{DGID: c.peer.src, SGIDIndex: uint8(c.m.dev.GIDIndex(c.peer.dst)), HopLimit: 64, TrafficClass: c.cp.tclass}
	rtr := qp.Attr{State: qp.StateRTR, PathMTU: mtu, DestQPNum: remoteQP, RQPSN: rq, MaxDestRdAtomic: destRd, MinRNRTimer: 12, AV: av}
	if err := c.qp.Modify(&rtr, qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN|qp.AttrMaxDestRdAtomic|qp.AttrMinRNRTimer); err != nil {
		return err
	}
	rts := qp.Attr{State: qp.StateRTS, SQPSN: sq, Timeout: timeout, RetryCnt: retry, RNRRetry: rnrRetry, MaxRdAtomic: rd}
	return c.qp.Modify(&rts, qp.AttrState|qp.AttrSQPSN|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|qp.AttrMaxQPRdAtomic)
}

// handleREP: the active side's QP goes to RTS and the RTU goes out; a
// duplicate REP (the RTU was lost) gets the RTU again.
func (c *Conn) handleREP(rep *cm.REP) {
	switch c.state {
	case stReqSent:
	case stEstablished:
		if c.active && c.rtu != nil && rep.LocalCommID == c.remoteID {
			c.m.sendLocked(c.peer, c.tid, c.rtu)
		}
		return
	default:
		return
	}
	c.stop()
	c.remoteID, c.remoteGUID, c.remoteQP, c.rep = rep.LocalCommID, rep.LocalCAGUID, rep.LocalQPN, rep
	mtu := min(c.cp.mtu, c.req.PathMTU)
	// A REQ's starting PSN is the one its sender receives from, and the
	// REP's the one the passive side receives from (the kernel's CM:
	// each side's rq_psn is the PSN it announced, its sq_psn the peer's).
	err := c.toRTS(rep.LocalQPN, c.req.StartingPSN, rep.StartingPSN, mtu,
		c.cp.resp, min(c.cp.init, rep.ResponderResources), c.req.RetryCount, rep.RNRRetryCount, c.cp.ackTimeout)
	if err != nil {
		c.reject(cm.RejConsumerDefined, cm.MsgREP, nil)
		c.endLocked(fmt.Errorf("moving the QP to RTS: %w", err))
		return
	}
	c.remotePriv = append([]byte(nil), rep.PrivateData[:]...)
	c.rtu = &cm.RTU{LocalCommID: c.localID, RemoteCommID: c.remoteID}
	c.m.sendLocked(c.peer, c.tid, c.rtu)
	c.establish()
}

// handleRTU: the passive side's connection is established.
func (c *Conn) handleRTU() {
	if c.state == stRepSent {
		c.stop()
		c.establish()
	}
}

// establishedByData establishes a passive connection still waiting for
// its RTU if its QP has received a packet: the active side's QP sends
// only once it has taken the REP, so its RTU is late or lost, and the
// data stands for it, as a NIC's communication-established event lets
// the CM take it. A program that received the peer's first message and
// disconnects at once (rdma_xserver) then disconnects, where it would
// have rejected a connection its peer holds established. m.mu is held.
func (c *Conn) establishedByData() {
	if c.state == stRepSent && c.qp != nil && c.qp.Stats().RcvdPkts > 0 {
		c.m.tracef("conn %#x: data before the RTU: taken for it", c.localID)
		c.stop()
		c.establish()
	}
}

func (c *Conn) establish() {
	c.state = stEstablished
	c.m.tracef("conn %#x: ESTABLISHED with %v QP %#x", c.localID, c.peer.src, uint32(c.remoteQP))
	close(c.decided)
}

// handleREJ ends a handshake the peer refused. A REJ of the REP after
// the RTU went (the passive side gave up before the RTU reached it, or
// was closed before it came) ends the established connection, as the
// kernel's CM does (timewait, rdma_cm's REJECTED event): the peer has
// no connection left to answer a DREQ.
func (c *Conn) handleREJ(rej *cm.REJ) {
	switch c.state {
	case stReqSent, stRepSent, stReqRcvd:
		c.stop()
		c.endLocked(&Rejected{Reason: rej.Reason, PrivateData: append([]byte(nil), rej.PrivateData[:]...)})
	case stEstablished, stDreqSent:
		c.m.tracef("conn %#x: the peer rejected the connection after it was established (reason %d)", c.localID, rej.Reason)
		c.stop()
		c.toErr()
		c.endLocked(nil)
	}
}

// handleMRA: the peer needs longer; wait its service timeout before
// sending again.
func (c *Conn) handleMRA(mra *cm.MRA) {
	if c.state == stReqSent || c.state == stRepSent || c.state == stDreqSent {
		c.m.tracef("conn %#x: MRA: waiting %v", c.localID, c.m.responseTime(mra.ServiceTimeout))
		c.arm(c.m.responseTime(mra.ServiceTimeout))
	}
}

// handleDREQ: the peer disconnects; its DREP is sent by the manager.
func (c *Conn) handleDREQ() {
	switch c.state {
	case stEstablished, stDreqSent, stRepSent:
		c.stop()
		c.toErr()
		c.endLocked(nil)
	}
}

// handleDREP: this side's Disconnect is answered.
func (c *Conn) handleDREP() {
	if c.state == stDreqSent {
		c.stop()
		c.endLocked(nil)
	}
}

func (c *Conn) toErr() {
	if c.qp == nil {
		return
	}
	_ = c.qp.Modify(&qp.Attr{State: qp.StateErr}, qp.AttrState)
}

// Disconnect ends an established connection, as rdma_disconnect: the QP
// goes to ERR (its outstanding work completes flushed) and a DREQ goes
// to the peer; Disconnect returns when the DREP comes or the retries run
// out. Disconnecting a connection that has ended already does nothing.
// With a ctx that ends first, Disconnect stops retrying and returns ctx's
// cause: the peer has had one DREQ.
func (c *Conn) Disconnect(ctx context.Context) error {
	m := c.m
	m.mu.Lock()
	c.establishedByData()
	if c.state != stEstablished {
		m.mu.Unlock()
		return nil
	}
	c.sendDREQ()
	c.retries = 0
	c.arm(m.responseTime(m.cfg.ResponseTimeout))
	m.mu.Unlock()
	select {
	case <-c.disconnected:
		return nil
	case <-ctx.Done():
		m.mu.Lock()
		defer m.mu.Unlock()
		select {
		case <-c.disconnected:
			// Both were ready, as for a ctx that ends with the
			// connection (rping's): the DREP came.
			return nil
		default:
		}
		c.endLocked(context.Cause(ctx))
		return context.Cause(ctx)
	}
}

// sendDREQ moves an established connection to DREQ_SENT: its QP to ERR,
// and a DREQ to the peer.
func (c *Conn) sendDREQ() {
	c.state = stDreqSent
	c.toErr()
	c.dreq = &cm.DREQ{LocalCommID: c.localID, RemoteCommID: c.remoteID, RemoteQPN: c.remoteQP}
	c.tid = c.m.newTID(c.localID)
	c.m.sendLocked(c.peer, c.tid, c.dreq)
}

// Close ends the connection and destroys its QP, unless the caller gave
// it (ConnParams.QP), as rdma_destroy_id: a handshake under way is
// rejected, an established connection is sent one DREQ, and a Disconnect
// under way stops retrying. Close waits for nothing from the peer: the
// kernel's CM sends the one DREQ and enters timewait, so that destroying
// the connection of a peer that died does not wait out the retries. A
// program that wants the peer's DREP calls Disconnect first.
func (c *Conn) Close() error {
	c.m.mu.Lock()
	c.destroyLocked(ErrClosed)
	c.m.mu.Unlock()
	if !c.ownQP || c.qp == nil {
		return nil
	}
	return c.qp.Destroy()
}

// destroyLocked ends the connection as rdma_destroy_id does (Close, and
// the manager's Close for every connection it has), with err for a
// handshake it cuts short.
func (c *Conn) destroyLocked(err error) {
	c.establishedByData()
	c.abandonLocked(err) // a handshake under way (Connect, Accept)
	switch c.state {
	case stReqRcvd: // a request taken from the listener and not answered
		c.reject(cm.RejConsumerDefined, cm.MsgREQ, nil)
		c.endLocked(err)
	case stEstablished:
		c.sendDREQ()
		c.endLocked(nil)
	case stDreqSent:
		c.endLocked(nil)
	}
}

// arm (re)starts the retransmission timer: the handshake's message goes
// again after d, up to the manager's retries.
func (c *Conn) arm(d time.Duration) {
	c.wait = d
	if c.timer == nil {
		c.timer = c.m.newAlarm(c.expired)
	}
	c.timer.set(d)
}

func (c *Conn) stop() {
	if c.timer != nil {
		c.timer.stop()
	}
}

// expired sends the handshake's last message again, or gives up.
func (c *Conn) expired() {
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	var msg cm.Message
	switch c.state {
	case stReqSent:
		msg = c.req
	case stRepSent:
		msg = c.rep
	case stDreqSent:
		msg = c.dreq
	default:
		return
	}
	if c.retries >= m.cfg.MaxRetries {
		m.tracef("conn %#x: no answer to %v after %d retries", c.localID, msg, c.retries)
		if c.state == stDreqSent {
			c.endLocked(nil) // the QP is in ERR already; the peer is gone
			return
		}
		c.abandonLocked(ErrTimeout)
		return
	}
	c.retries++
	m.stats.Retransmitted++
	m.sendLocked(c.peer, c.tid, msg)
	c.arm(c.wait)
}

// abandonLocked gives up a handshake that waits for the peer's REP or
// RTU, with err. A handshake the program ends (Close, Dial's ctx, the
// manager's Close) is rejected as the kernel's rdma_destroy_id rejects
// it: a REQ with reason timeout (4) and this CA's GUID, a REP with reason
// consumer defined (28). One whose retries ran out (ErrTimeout) ends with
// no REJ, as the kernel's CM resets the connection to idle when its MAD
// times out (IB_CM_REQ_ERROR, IB_CM_REP_ERROR). In any other state it
// does nothing.
func (c *Conn) abandonLocked(err error) {
	var reason cm.RejReason
	var rejected cm.MsgType
	switch c.state {
	case stReqSent:
		reason, rejected = cm.RejTimeout, cm.MsgREQ
	case stRepSent:
		reason, rejected = cm.RejConsumerDefined, cm.MsgREP
	default:
		return
	}
	if !errors.Is(err, ErrTimeout) {
		c.reject(reason, rejected, nil)
	}
	c.endLocked(err)
}

// reject sends a REJ for the message rejected with reason.
func (c *Conn) reject(reason cm.RejReason, rejected cm.MsgType, priv []byte) {
	rej := &cm.REJ{LocalCommID: c.localID, RemoteCommID: c.remoteID, MsgRejected: rejected, Reason: reason}
	if reason == cm.RejTimeout {
		// ARI: the CA GUID of the side that timed out (IBTA Table 109).
		rej.ARILength = 8
		binary.BigEndian.PutUint64(rej.ARI[:], c.m.guid)
	}
	copy(rej.PrivateData[:], priv)
	c.m.sendLocked(c.peer, c.tid, rej)
}

// endLocked ends the connection with err (nil: a clean disconnect): it
// leaves the manager's table and wakes who waits.
func (c *Conn) endLocked(err error) {
	if c.state == stClosed {
		return
	}
	prev := c.state
	c.state = stClosed
	c.stop()
	delete(c.m.conns, c.localID)
	if prev != stEstablished && prev != stDreqSent {
		c.err = err
		if err == nil {
			c.err = ErrClosed
		}
		close(c.decided)
	}
	close(c.disconnected)
	c.m.tracef("conn %#x: %v -> CLOSED (%v)", c.localID, prev, err)
}

func orMTU(m qp.MTU) qp.MTU {
	if m == 0 {
		return qp.MTU4096
	}
	return m
}

func (m *Manager) randomPSN() bth.PSN {
	var b [4]byte
	m.random(b[:])
	return bth.PSN(binary.BigEndian.Uint32(b[:])) & bth.PSNMask
}

// ephemeralPort returns a port in the range rdma_cm binds an active id
// to (the kernel's ip_local_port_range by default).
func (m *Manager) ephemeralPort() uint16 {
	var b [2]byte
	m.random(b[:])
	return 32768 + binary.BigEndian.Uint16(b[:])%28232
}

// contextDone returns a context that ends when done is closed.
func contextDone(done <-chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-done
		cancel()
	}()
	return ctx
}

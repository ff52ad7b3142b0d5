package cm

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/gorxe/gorxe/wire/cm"
)

// Listener takes connection requests for one rdma_cm port (the TCP port
// space's service ID 0x0000000001060000 | port), on one address of the
// device or on all of them.
type Listener struct{ listening[*Request] }

// listening is what a Listener and a UDListener share: the port and
// address they take requests on, and the requests waiting for Accept.
type listening[R any] struct {
	m       *Manager
	port    uint16
	addr    netip.Addr // the zero Addr: every address of the device
	backlog chan R
	closed  bool
	done    chan struct{}
}

// newListening checks addr, a device address or unspecified (the zero
// Addr: every address), for a listener on port. m.mu is held.
func newListening[R any](m *Manager, addr netip.Addr, port uint16) (listening[R], error) {
	addr = addr.Unmap().WithZone("") // GIDs have no zone; the device has one link
	if addr.IsUnspecified() {
		addr = netip.Addr{}
	}
	if addr.IsValid() && m.dev.GIDIndex(addr) < 0 {
		return listening[R]{}, fmt.Errorf("cm: listen on %v: not an address of device %s", addr, m.dev.Name())
	}
	return listening[R]{m: m, port: port, addr: addr, backlog: make(chan R, backlog), done: make(chan struct{})}, nil
}

// accept waits for the next request. A request waiting is taken even
// when ctx is done: a program on a Loop takes them so.
func (l *listening[R]) accept(ctx context.Context) (R, error) {
	var none R
	select {
	case r := <-l.backlog:
		return r, nil
	default:
	}
	select {
	case r := <-l.backlog:
		return r, nil
	case <-l.done:
		return none, ErrClosed
	case <-ctx.Done():
		return none, context.Cause(ctx)
	}
}

// Request is a connection request a Listener took: Accept or Reject it.
type Request struct {
	c    *Conn
	priv []byte
}

// Listen takes connection requests to port, on addr if it is valid, or
// on every address of the device (rdma_bind_addr, rdma_listen).
func (m *Manager) Listen(addr netip.Addr, port uint16) (*Listener, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	ln, err := newListening[*Request](m, addr, port)
	if err != nil {
		return nil, err
	}
	if m.listeners[port] != nil {
		return nil, fmt.Errorf("cm: listen on port %d: the port is in use", port)
	}
	l := &Listener{ln}
	m.listeners[port] = l
	return l, nil
}

// backlog is how many requests wait for Accept; more are dropped, and
// their senders try again after their response timeout.
const backlog = 64

// Accept waits for the next connection request.
func (l *Listener) Accept(ctx context.Context) (*Request, error) { return l.accept(ctx) }

// Close stops taking requests; those not yet accepted are rejected.
func (l *Listener) Close() error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	l.closeLocked()
	return nil
}

func (l *Listener) closeLocked() {
	l.closed = true
	close(l.done)
	if l.m.listeners[l.port] == l {
		delete(l.m.listeners, l.port)
	}
	for {
		select {
		case r := <-l.backlog:
			if r.c.state == stReqRcvd { // not rejected by the manager's Close already
				r.c.reject(cm.RejConsumerDefined, cm.MsgREQ, nil)
				r.c.endLocked(ErrClosed)
			}
		default:
			return
		}
	}
}

// Port returns the port the listener takes requests for.
func (l *Listener) Port() uint16 { return l.port }

// RemoteAddr returns the requester's address and rdma_cm port.
func (r *Request) RemoteAddr() netip.AddrPort { return r.c.RemoteAddr() }

// LocalAddr returns the address the request was sent to.
func (r *Request) LocalAddr() netip.Addr { return r.c.peer.dst }

// PrivateData returns the requester's private data, behind rdma_cm's
// header: 56 bytes.
func (r *Request) PrivateData() []byte { return r.priv }

// ResponderResources and InitiatorDepth return the REQ's: how many READs
// and atomics the requester takes at once, and keeps outstanding.
func (r *Request) ResponderResources() uint8 { return r.c.req.ResponderResources }

// InitiatorDepth returns how many READs and atomics the requester keeps
// outstanding.
func (r *Request) InitiatorDepth() uint8 { return r.c.req.InitiatorDepth }

// Accept creates the connection's QP from p (or takes p.QP), moves it to RTS with the
// REQ's attributes (the requester's QPN, first PSN, path MTU, ACK timeout
// and retry counts) and sends the REP (rdma_accept). The connection is
// established when the RTU comes: Conn.Established waits for it. The QP
// may be used (receives posted, sends queued) as soon as Accept returns.
func (r *Request) Accept(p ConnParams) (*Conn, error) {
	p.defaults()
	c := r.c
	m := c.m
	if len(p.PrivateData) > cm.REPPrivateDataLen {
		return nil, fmt.Errorf("cm: accept: %d bytes of private data, a REP carries %d", len(p.PrivateData), cm.REPPrivateDataLen)
	}
	q, err := m.newQP(p)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.state != stReqRcvd {
		release(q, p)
		if c.err != nil {
			return nil, fmt.Errorf("cm: accept: %w", c.err)
		}
		return nil, fmt.Errorf("cm: accept: the request is %v", c.state)
	}
	req := c.req
	c.qp, c.ownQP = q, p.QP == nil && q != nil
	c.params(p)
	if c.cp.resp == 0 {
		c.cp.resp = req.InitiatorDepth
	}
	if c.cp.init == 0 {
		c.cp.init = req.ResponderResources
	}
	if c.cp.tclass == 0 {
		// The path's, as the kernel's passive side takes it from the REQ.
		c.cp.tclass = req.Primary.TrafficClass
	}
	// The REQ's path MTU is the path's: both ends must send with it
	// (C9-92 holds every packet but a message's last to it exactly), so
	// a passive side that cannot carry it refuses rather than send with
	// a smaller one.
	mtu := req.PathMTU
	if carried := min(m.dev.MTU(), c.cp.mtu); mtu > carried {
		release(q, p)
		c.reject(cm.RejConsumerDefined, cm.MsgREQ, nil)
		err := fmt.Errorf("the REQ's path MTU %d is more than this side carries (%d)", mtu.Bytes(), carried.Bytes())
		c.endLocked(err)
		return nil, fmt.Errorf("cm: accept: %w", err)
	}
	psn := m.randomPSN()
	c.remoteQP = req.LocalQPN
	err = c.toRTS(req.LocalQPN, psn, req.StartingPSN, mtu, c.cp.resp, min(c.cp.init, req.ResponderResources),
		req.RetryCount, req.RNRRetryCount, req.Primary.LocalACKTimeout)
	if err != nil {
		c.qp = nil
		release(q, p)
		c.reject(cm.RejConsumerDefined, cm.MsgREQ, nil)
		c.endLocked(err)
		return nil, fmt.Errorf("cm: accept: moving the QP to RTS: %w", err)
	}
	c.rep = &cm.REP{
		LocalCommID: c.localID, RemoteCommID: c.remoteID, LocalQPN: qpNum(q, p), StartingPSN: psn,
		ResponderResources: c.cp.resp, InitiatorDepth: min(c.cp.init, req.ResponderResources),
		EndToEndFlowControl: true, RNRRetryCount: p.RNRRetryCount, LocalCAGUID: m.guid,
	}
	copy(c.rep.PrivateData[:], p.PrivateData)
	c.state = stRepSent
	m.sendLocked(c.peer, c.tid, c.rep)
	c.arm(m.responseTime(req.LocalCMResponseTimeout))
	return c, nil
}

// Reject refuses the request with a REJ, reason "consumer defined" (28),
// carrying priv (rdma_reject).
func (r *Request) Reject(priv []byte) error {
	c := r.c
	m := c.m
	if len(priv) > cm.REJPrivateDataLen {
		return fmt.Errorf("cm: reject: %d bytes of private data, a REJ carries %d", len(priv), cm.REJPrivateDataLen)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.state != stReqRcvd {
		return fmt.Errorf("cm: reject: the request is %v", c.state)
	}
	c.reject(cm.RejConsumerDefined, cm.MsgREQ, priv)
	c.endLocked(&Rejected{Reason: cm.RejConsumerDefined})
	return nil
}

// handleREQ takes a REQ: a duplicate is answered as the kernel's CM does
// (the REP again, or an MRA while the listener has not answered), one for
// nobody is rejected with the kernel's reason, and a new one goes to its
// listener's backlog. m.mu is held.
func (m *Manager) handleREQ(peer peerAddr, tid uint64, req *cm.REQ) {
	for _, c := range m.conns {
		if c.active || c.remoteID != req.LocalCommID || c.remoteGUID != req.LocalCAGUID {
			continue
		}
		switch c.state {
		case stRepSent:
			m.sendLocked(c.peer, c.tid, c.rep)
		case stReqRcvd:
			// The application has not answered yet: ask for patience
			// (the kernel's MRA with service timeout 24, about 69 s).
			m.sendLocked(c.peer, c.tid, &cm.MRA{LocalCommID: c.localID, RemoteCommID: c.remoteID, MsgMRAed: cm.MsgREQ, ServiceTimeout: mraServiceTimeout})
		}
		return
	}
	c := &Conn{
		m: m, state: stReqRcvd, remoteID: req.LocalCommID, remoteGUID: req.LocalCAGUID, peer: peer, tid: tid,
		req: req, remoteQP: req.LocalQPN, decided: make(chan struct{}), disconnected: make(chan struct{}),
	}
	c.localID = m.newCommID()
	refuse := func(reason cm.RejReason, why string) {
		m.tracef("REQ %#x from %v: %s: REJ %v", req.LocalCommID, peer.src, why, reason)
		c.reject(reason, cm.MsgREQ, nil)
	}
	ps, port, ok := cm.SplitServiceID(req.ServiceID)
	l := m.listeners[port]
	switch {
	case !ok || ps != cm.PortSpaceTCP || l == nil:
		refuse(cm.RejInvalidServiceID, fmt.Sprintf("no listener for service ID %#016x", req.ServiceID))
		return
	case req.TransportType != cm.TransportRC:
		refuse(cm.RejInvalidTransportType, "not RC")
		return
	case m.dev.GIDIndex(req.Primary.RemoteGID) < 0 || req.Primary.RemoteGID.Unmap() != peer.dst:
		refuse(cm.RejInvalidGID, fmt.Sprintf("the path's GID %v is not the address the REQ came to", req.Primary.RemoteGID))
		return
	}
	hdr, err := cm.ParseCMAHeader(req.PrivateData[:])
	if err != nil || hdr.Dst.Unmap() != peer.dst || l.addr.IsValid() && l.addr != peer.dst {
		refuse(cm.RejConsumerDefined, "rdma_cm's header does not match the listener")
		return
	}
	for _, o := range m.conns {
		if o.remoteQP == req.LocalQPN && o.peer.src == peer.src && o.state != stClosed {
			// The requester reuses a QP still connected here (IBTA
			// §12.9.8.3.2, the kernel's cm_find_remote_qpn).
			refuse(cm.RejStaleConn, fmt.Sprintf("QP %#x of %v is connected here already", uint32(req.LocalQPN), peer.src))
			return
		}
	}
	c.peerPort = hdr.SrcPort
	r := &Request{c: c, priv: append([]byte(nil), req.PrivateData[cm.CMAHeaderLen:]...)}
	c.remotePriv = r.priv
	select {
	case l.backlog <- r:
		m.conns[c.localID] = c
	default:
		m.tracef("REQ %#x from %v: the listener's backlog is full: dropped", req.LocalCommID, peer.src)
	}
}

// mraServiceTimeout is the service timeout of the kernel's MRA
// (CMA_CM_MRA_SETTING): 4.096 µs × 2^24, about 69 s.
const mraServiceTimeout = 24

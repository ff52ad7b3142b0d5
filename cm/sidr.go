package cm

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/cm"
)

// UDPQKey is the Q_Key rdma_cm gives the UD QPs of its UDP port space
// (RDMA_UDP_QKEY): a SIDR_REP carries it, and both sides' QPs use it.
const UDPQKey = 0x01234567

// UDService is what service ID resolution (SIDR, IBTA Vol 1 §12.11)
// tells a UD sender: the remote UD QP and its Q_Key, at the peer's
// address, and the private data of the answer.
type UDService struct {
	Addr        netip.AddrPort
	QPN         bth.QPN
	QKey        uint32
	PrivateData []byte
}

// ErrSIDR wraps a SIDR_REP's status other than success.
type ErrSIDR struct{ Status cm.SIDRStatus }

func (e *ErrSIDR) Error() string {
	return fmt.Sprintf("cm: service ID resolution: %v (%d)", e.Status, uint8(e.Status))
}

// sidrWait is an outstanding SIDR_REQ of this side.
type sidrWait struct {
	peer    peerAddr
	req     *cm.SIDRREQ
	tid     uint64
	retries uint8
	timer   *alarm
	done    chan struct{}
	svc     UDService
	err     error
}

// ResolveUD asks the listener at raddr, in rdma_cm's UDP port space, for
// its UD QP (rdma_connect on an RDMA_PS_UDP id): it sends a SIDR_REQ with
// rdma_cm's header and priv (at most 180 bytes), again after the response
// timeout up to the retries, and returns the SIDR_REP's QPN and Q_Key.
func (m *Manager) ResolveUD(ctx context.Context, raddr netip.AddrPort, local netip.Addr, priv []byte) (UDService, error) {
	dst := raddr.Addr().Unmap().WithZone("") // GIDs have no zone; the device has one link
	local = local.Unmap()
	if !local.IsValid() {
		local = m.LocalFor(dst)
	}
	if m.dev.GIDIndex(local) < 0 {
		return UDService{}, fmt.Errorf("cm: resolve %v: no local address of its family", raddr)
	}
	if len(priv) > cm.SIDRREQPrivateDataLen-cm.CMAHeaderLen {
		return UDService{}, fmt.Errorf("cm: resolve %v: %d bytes of private data, a SIDR_REQ carries %d", raddr, len(priv), cm.SIDRREQPrivateDataLen-cm.CMAHeaderLen)
	}
	req := &cm.SIDRREQ{PKey: bth.DefaultPKey, ServiceID: cm.ServiceID(cm.PortSpaceUDP, raddr.Port())}
	hdr := cm.CMAHeader{SrcPort: m.ephemeralPort(), Src: local, Dst: dst}
	if err := hdr.Encode(req.PrivateData[:]); err != nil {
		return UDService{}, fmt.Errorf("cm: resolve %v: %w", raddr, err)
	}
	copy(req.PrivateData[cm.CMAHeaderLen:], priv)

	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return UDService{}, ErrClosed
	}
	w := &sidrWait{peer: peerAddr{src: dst, dst: local}, req: req, done: make(chan struct{})}
	for req.RequestID == 0 || m.sidr[req.RequestID] != nil {
		var b [4]byte
		m.random(b[:])
		req.RequestID = binary.BigEndian.Uint32(b[:])
	}
	w.tid = m.newTID(req.RequestID)
	m.sidr[req.RequestID] = w
	m.sendLocked(w.peer, w.tid, req)
	d := m.responseTime(m.cfg.ResponseTimeout)
	w.timer = m.newAlarm(func() { m.sidrExpired(w, d) })
	w.timer.set(d)
	m.mu.Unlock()

	select {
	case <-w.done:
	case <-ctx.Done():
		m.mu.Lock()
		m.sidrEnd(w, context.Cause(ctx))
		m.mu.Unlock()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.err != nil {
		return UDService{}, fmt.Errorf("cm: resolve %v: %w", raddr, w.err)
	}
	w.svc.Addr = raddr
	return w.svc, nil
}

// sidrExpired sends a SIDR_REQ again, or gives up.
func (m *Manager) sidrExpired(w *sidrWait, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sidr[w.req.RequestID] != w {
		return
	}
	if w.retries >= m.cfg.MaxRetries {
		m.sidrEnd(w, ErrTimeout)
		return
	}
	w.retries++
	m.stats.Retransmitted++
	m.sendLocked(w.peer, w.tid, w.req)
	w.timer.set(d)
}

func (m *Manager) sidrEnd(w *sidrWait, err error) {
	if m.sidr[w.req.RequestID] != w {
		return
	}
	delete(m.sidr, w.req.RequestID)
	w.timer.stop()
	w.err = err
	close(w.done)
}

// handleSIDRREP ends the resolution it answers. m.mu is held.
func (m *Manager) handleSIDRREP(peer peerAddr, rep *cm.SIDRREP) {
	w := m.sidr[rep.RequestID]
	if w == nil || w.peer.src != peer.src {
		m.stats.Dropped++
		return
	}
	if rep.Status != cm.SIDRSuccess {
		m.sidrEnd(w, &ErrSIDR{Status: rep.Status})
		return
	}
	w.svc = UDService{QPN: rep.QPN, QKey: rep.QKey, PrivateData: append([]byte(nil), rep.PrivateData[:]...)}
	m.sidrEnd(w, nil)
}

// UDListener takes service ID resolution requests for one port of
// rdma_cm's UDP port space.
type UDListener struct{ listening[*UDRequest] }

// UDRequest is a SIDR_REQ a UDListener took: Answer it with a UD QP, or
// Reject it.
type UDRequest struct {
	l        *UDListener
	peer     peerAddr
	peerPort uint16
	tid      uint64
	req      *cm.SIDRREQ
	priv     []byte
	rep      *cm.SIDRREP // the answer, once sent: sent again for a duplicate
}

// ListenUD takes SIDR_REQs for port in rdma_cm's UDP port space, on addr
// or (the zero Addr) every address of the device.
func (m *Manager) ListenUD(addr netip.Addr, port uint16) (*UDListener, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	ln, err := newListening[*UDRequest](m, addr, port)
	if err != nil {
		return nil, err
	}
	if m.udListeners[port] != nil {
		return nil, fmt.Errorf("cm: listen on UDP port %d: the port is in use", port)
	}
	l := &UDListener{ln}
	m.udListeners[port] = l
	return l, nil
}

// Accept waits for the next service ID resolution request.
func (l *UDListener) Accept(ctx context.Context) (*UDRequest, error) { return l.accept(ctx) }

// Close stops taking requests.
func (l *UDListener) Close() error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	l.closeLocked()
	return nil
}

func (l *UDListener) closeLocked() {
	l.closed = true
	close(l.done)
	if l.m.udListeners[l.port] == l {
		delete(l.m.udListeners, l.port)
	}
}

// RemoteAddr returns the requester's address and rdma_cm port.
func (r *UDRequest) RemoteAddr() netip.AddrPort { return netip.AddrPortFrom(r.peer.src, r.peerPort) }

// PrivateData returns the requester's private data behind rdma_cm's
// header.
func (r *UDRequest) PrivateData() []byte { return r.priv }

// Answer sends the SIDR_REP that names the UD QP qpn and its Q_Key
// (rdma_accept on a UDP id), with priv (at most 136 bytes).
func (r *UDRequest) Answer(qpn bth.QPN, qkey uint32, priv []byte) error {
	return r.answer(cm.SIDRSuccess, qpn, qkey, priv)
}

// Reject answers with status "reject" (rdma_reject on a UDP id).
func (r *UDRequest) Reject(priv []byte) error { return r.answer(cm.SIDRReject, 0, 0, priv) }

func (r *UDRequest) answer(status cm.SIDRStatus, qpn bth.QPN, qkey uint32, priv []byte) error {
	if len(priv) > cm.SIDRREPPrivateDataLen {
		return fmt.Errorf("cm: %d bytes of private data, a SIDR_REP carries %d", len(priv), cm.SIDRREPPrivateDataLen)
	}
	m := r.l.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if r.rep != nil {
		return fmt.Errorf("cm: the request was answered already")
	}
	r.rep = &cm.SIDRREP{RequestID: r.req.RequestID, Status: status, QPN: qpn, QKey: qkey, ServiceID: r.req.ServiceID}
	copy(r.rep.PrivateData[:], priv)
	m.sendLocked(r.peer, r.tid, r.rep)
	key := sidrKey{r.peer.src, r.req.RequestID}
	delete(m.sidrPending, key)
	m.sidrAnswered[key] = r
	// A duplicate comes within the requester's retries; then the
	// answer is forgotten.
	m.newAlarm(func() {
		m.mu.Lock()
		if m.sidrAnswered[key] == r {
			delete(m.sidrAnswered, key)
		}
		m.mu.Unlock()
	}).set(m.responseTime(m.cfg.ResponseTimeout) * time.Duration(m.cfg.MaxRetries+1))
	return nil
}

type sidrKey struct {
	src netip.Addr
	id  uint32
}

// handleSIDRREQ takes a SIDR_REQ: a duplicate of one answered gets the
// answer again, one for nobody gets "unsupported" as from the kernel's
// CM, a new one goes to its listener's backlog. m.mu is held.
func (m *Manager) handleSIDRREQ(peer peerAddr, tid uint64, req *cm.SIDRREQ) {
	key := sidrKey{peer.src, req.RequestID}
	if r := m.sidrAnswered[key]; r != nil {
		m.sendLocked(peer, tid, r.rep)
		return
	}
	if m.sidrPending[key] {
		return // the listener has it; the requester tries again
	}
	ps, port, ok := cm.SplitServiceID(req.ServiceID)
	l := m.udListeners[port]
	hdr, err := cm.ParseCMAHeader(req.PrivateData[:])
	if !ok || ps != cm.PortSpaceUDP || l == nil || err != nil || hdr.Dst.Unmap() != peer.dst || l.addr.IsValid() && l.addr != peer.dst {
		m.sendLocked(peer, tid, &cm.SIDRREP{RequestID: req.RequestID, Status: cm.SIDRUnsupported, ServiceID: req.ServiceID})
		return
	}
	r := &UDRequest{l: l, peer: peer, peerPort: hdr.SrcPort, tid: tid, req: req,
		priv: append([]byte(nil), req.PrivateData[cm.CMAHeaderLen:]...)}
	select {
	case l.backlog <- r:
		m.sidrPending[key] = true
	default:
	}
}

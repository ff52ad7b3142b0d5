// Package cm is gorxe's connection manager: it opens RC connections the
// way rdma_cm does on RoCE, with Communication Manager MADs (IBTA Vol 1
// ch. 12) on each device's QP 1, and no side channel.
//
// A Manager owns one device's General Services QP. Dial sends a REQ to an
// IP address and port (rdma_cm's TCP port space: the service ID is
// 0x0000000001060000 | port, and the private data starts with rdma_cm's
// 36-byte header); the passive side's Listener hands the request to
// Accept, which creates the QP (or takes the caller's, ConnParams.QP),
// moves it to RTS from the REQ's attributes
// and answers with a REP; the active side moves its QP the same way and
// ends the handshake with an RTU. Disconnect sends a DREQ, answered by a
// DREP. Lost MADs are sent again after the response timeout, up to the
// retry count, as the kernel's CM does; a duplicate REQ is answered with
// the same REP, a duplicate REP with the same RTU; a REJ ends the attempt
// with its reason, as rdma_cm reports it.
//
// The peer may be gorxe or the kernel's rdma_cm over rxe or a RoCE NIC:
// the messages, their fields and their timing are the kernel's.
package cm

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/cm"
	"github.com/gorxe/gorxe/wire/deth"
	"github.com/gorxe/gorxe/wire/mad"
)

// Config tunes a Manager. The zero Config is the kernel's behaviour.
type Config struct {
	// ResponseTimeout is the CM response timeout this side announces and
	// waits with, as an exponent: 4.096 µs × 2^ResponseTimeout. 0 means
	// 20 (4.3 s), rdma_cm's CMA_CM_RESPONSE_TIMEOUT.
	ResponseTimeout uint8
	// MaxRetries is how many times a REQ, REP or DREQ is sent again
	// before the attempt fails. 0 means 15, rdma_cm's CMA_MAX_CM_RETRIES.
	MaxRetries uint8
	// Trace, when set, sees a line for every message sent and received,
	// and every state change.
	Trace func(line string)
	// Rand is where the manager's random numbers come from: its CA GUID,
	// communication and transaction IDs, first PSNs and source ports.
	// Nil is crypto/rand, as a real network needs; a simulation gives a
	// seeded one, to repeat itself byte for byte.
	Rand io.Reader
}

// Errors a connection attempt ends with.
var (
	// ErrRejected wraps the REJ's reason: see Rejected.
	ErrRejected = errors.New("cm: connection rejected")
	// ErrTimeout: the peer did not answer within the retries
	// (RDMA_CM_EVENT_UNREACHABLE, ETIMEDOUT).
	ErrTimeout = errors.New("cm: no answer from the peer")
	// ErrClosed: the Manager, Listener or connection is closed.
	ErrClosed = errors.New("cm: closed")
)

// Rejected is the error of a REJ: its reason, and its private data.
type Rejected struct {
	Reason      cm.RejReason
	PrivateData []byte
}

func (r *Rejected) Error() string {
	return fmt.Sprintf("cm: connection rejected: %v (%d)", r.Reason, uint16(r.Reason))
}

// Unwrap makes errors.Is(err, ErrRejected) true.
func (r *Rejected) Unwrap() error { return ErrRejected }

// Manager is the connection manager of one device. It owns the device's
// QP 1 from New to Close.
//
// On a device that runs on a Loop (rnic.Config.Loop), the manager starts
// no goroutine: its timers are events of the loop, and the program calls
// Poll to have it handle what QP 1 received, on the loop's goroutine, as
// it polls its own CQs. Connect stands for Dial there, and Accept and
// Established take a ctx that is done, to take what is there without
// waiting; Disconnect and ResolveUD wait for the peer, and are not for a
// Loop.
type Manager struct {
	dev  *rnic.Device
	cfg  Config
	loop rnic.Loop // the device's, or nil
	pd   *mr.PD
	scq  *cq.CQ
	rcq  *cq.CQ
	gsi  *rnic.QP
	buf  []byte // the receive slots, slot i at i*slotLen
	mr   *mr.MR
	guid uint64 // this side's CA GUID in the messages

	mu        sync.Mutex
	closed    bool
	listeners map[uint16]*Listener // by port
	conns     map[uint32]*Conn     // by local communication ID

	// Service ID resolution (sidr.go): this side's outstanding
	// SIDR_REQs by request ID, the UDP port space's listeners, and the
	// requests taken (pending) and answered, for duplicates.
	sidr         map[uint32]*sidrWait
	udListeners  map[uint16]*UDListener
	sidrPending  map[sidrKey]bool
	sidrAnswered map[sidrKey]*UDRequest
	ahs          map[ahKey]*qp.AH
	tidHi        uint32
	stats        Stats

	done chan struct{}
	wg   sync.WaitGroup
}

// Stats are a Manager's counts of MADs.
type Stats struct {
	Sent, Received uint64 // CM MADs
	Retransmitted  uint64 // REQs, REPs and DREQs sent again
	Dropped        uint64 // received MADs that are not CM messages, or for no connection
}

type ahKey struct {
	dst  netip.Addr
	sgid uint8
}

// The receive slots: the GRH area and one MAD.
const (
	slots   = 64
	slotLen = wire.GRHLen + mad.Len
)

// New starts the connection manager of dev: it creates QP 1 and receives
// on it until Close.
func New(dev *rnic.Device, cfg Config) (*Manager, error) {
	if cfg.ResponseTimeout == 0 {
		cfg.ResponseTimeout = 20
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 15
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	m := &Manager{
		dev: dev, cfg: cfg, loop: dev.Loop(), pd: dev.AllocPD(), buf: make([]byte, slots*slotLen),
		listeners: make(map[uint16]*Listener), conns: make(map[uint32]*Conn), ahs: make(map[ahKey]*qp.AH),
		sidr: make(map[uint32]*sidrWait), udListeners: make(map[uint16]*UDListener),
		sidrPending: make(map[sidrKey]bool), sidrAnswered: make(map[sidrKey]*UDRequest),
		done: make(chan struct{}),
	}
	var b [12]byte
	m.random(b[:])
	m.tidHi = binary.BigEndian.Uint32(b[:4])
	m.guid = binary.BigEndian.Uint64(b[4:]) | 0x0200000000000000 // locally administered
	var err error
	if m.mr, err = dev.RegMR(m.pd, m.buf, mr.LocalWrite); err != nil {
		return nil, err
	}
	if m.scq, err = dev.CreateCQ(4 * slots); err != nil {
		return nil, err
	}
	if m.rcq, err = dev.CreateCQ(slots); err != nil {
		return nil, err
	}
	m.gsi, err = dev.CreateGSI(qp.InitAttr{PD: m.pd, SendCQ: m.scq, RecvCQ: m.rcq,
		Cap: qp.Cap{MaxSendWR: 4 * slots, MaxRecvWR: slots, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: mad.Len}})
	if err != nil {
		return nil, fmt.Errorf("cm: %w", err)
	}
	if err := InitUD(m.gsi, deth.GSIQKey); err != nil {
		return nil, fmt.Errorf("cm: QP 1: %w", err)
	}
	for i := range slots {
		if err := m.postRecv(i); err != nil {
			return nil, err
		}
	}
	if m.loop == nil {
		m.wg.Add(1)
		go m.receive()
	}
	return m, nil
}

// Close stops the manager: connections in progress are rejected and fail
// with ErrClosed, established ones are sent a DREQ each (their QPs go to
// ERR), listeners close. It waits for no answer.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	m.closed = true
	for _, c := range m.conns {
		// As the kernel's rdma_cm when a program's file closes (it
		// exits): each connection is destroyed, an established one
		// with a DREQ, so that its peer learns of the end.
		c.destroyLocked(ErrClosed)
		c.endLocked(ErrClosed)
	}
	for _, l := range m.listeners {
		l.closeLocked()
	}
	for _, l := range m.udListeners {
		l.closeLocked()
	}
	for _, w := range m.sidr {
		m.sidrEnd(w, ErrClosed)
	}
	m.mu.Unlock()
	close(m.done)
	m.rcq.Close()
	m.wg.Wait()
	return m.gsi.Destroy()
}

// Device returns the device whose QP 1 the manager owns.
func (m *Manager) Device() *rnic.Device { return m.dev }

// Stats returns the manager's counts.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

func (m *Manager) tracef(format string, args ...any) {
	if m.cfg.Trace != nil {
		m.cfg.Trace(fmt.Sprintf(format, args...))
	}
}

func (m *Manager) postRecv(i int) error {
	_, err := m.gsi.PostRecv([]qp.RecvWR{{WRID: uint64(i), SGList: []qp.SGE{{
		Addr: m.mr.IOVA() + uint64(i*slotLen), Length: slotLen, LKey: m.mr.LKey()}}}})
	return err
}

// receive takes the MADs QP 1 receives, one at a time, until Close.
func (m *Manager) receive() {
	defer m.wg.Done()
	ctx := contextDone(m.done)
	var wcs [16]cq.WC
	for {
		n, err := m.rcq.Wait(ctx, wcs[:])
		if err != nil {
			return
		}
		m.take(wcs[:n])
	}
}

// Poll handles the MADs QP 1 has received, without waiting, and returns
// how many there were. A manager on a device on a Loop needs it (see
// Manager); on goroutines the manager receives by itself, and Poll takes
// only what it has not taken yet.
func (m *Manager) Poll() (int, error) {
	var wcs [16]cq.WC
	total := 0
	for {
		n, err := m.rcq.Poll(wcs[:])
		if errors.Is(err, cq.ErrClosed) {
			return total, ErrClosed
		}
		if err != nil {
			return total, fmt.Errorf("cm: QP 1's receive CQ: %w", err)
		}
		m.take(wcs[:n])
		total += n
		if n < len(wcs) {
			return total, nil
		}
	}
}

// take handles received MADs and gives their slots back to QP 1.
func (m *Manager) take(wcs []cq.WC) {
	for _, wc := range wcs {
		if wc.Status != cq.StatusSuccess {
			continue
		}
		i := int(wc.WRID)
		slot := m.buf[i*slotLen : (i+1)*slotLen]
		m.handle(slot[:wire.GRHLen], slot[wire.GRHLen:min(int(wc.ByteLen), slotLen)])
		_ = m.postRecv(i)
	}
}

// random fills b from the manager's source of random numbers.
func (m *Manager) random(b []byte) {
	if _, err := io.ReadFull(m.cfg.Rand, b); err != nil {
		rand.Read(b) // a caller's source that ran dry: crypto/rand's, never the zeros
	}
}

// handle dispatches one received MAD, sent from the GRH's source address
// to its destination.
func (m *Manager) handle(grh, b []byte) {
	g, err := wire.ParseGRH(grh)
	src, dst := g.Src, g.Dst
	msg, tid, derr := cm.Decode(b)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	if err != nil || derr != nil {
		m.stats.Dropped++
		m.tracef("drop MAD from %v: %v", src, errors.Join(err, derr))
		return
	}
	m.stats.Received++
	m.tracef("recv %v from %v", msg, src)
	peer := peerAddr{src: src, dst: dst}
	switch msg := msg.(type) {
	case *cm.REQ:
		m.handleREQ(peer, tid, msg)
	case *cm.REP:
		if c := m.lookup(msg.RemoteCommID, peer, 0); c != nil {
			c.handleREP(msg)
		}
	case *cm.RTU:
		if c := m.lookup(msg.RemoteCommID, peer, msg.LocalCommID); c != nil {
			c.handleRTU()
		}
	case *cm.REJ:
		c := m.find(msg.RemoteCommID, peer, msg.LocalCommID)
		if c == nil && msg.RemoteCommID == 0 {
			// The REJ of a side that gave up before it knew our ID (an
			// active side abandoning its REQ): the kernel's CM finds
			// the connection by the peer's own ID.
			c = m.byRemoteID(peer, msg.LocalCommID)
		}
		if c == nil {
			m.stats.Dropped++
			return
		}
		c.handleREJ(msg)
	case *cm.MRA:
		if c := m.lookup(msg.RemoteCommID, peer, msg.LocalCommID); c != nil {
			c.handleMRA(msg)
		}
	case *cm.DREQ:
		if c := m.lookup(msg.RemoteCommID, peer, msg.LocalCommID); c != nil {
			c.handleDREQ()
		}
		// A DREQ is answered even for a connection gone (IBTA §12.9.7.1).
		drep := &cm.DREP{LocalCommID: msg.RemoteCommID, RemoteCommID: msg.LocalCommID}
		m.sendLocked(peer, tid, drep)
	case *cm.DREP:
		if c := m.lookup(msg.RemoteCommID, peer, msg.LocalCommID); c != nil {
			c.handleDREP()
		}
	case *cm.SIDRREQ:
		m.handleSIDRREQ(peer, tid, msg)
	case *cm.SIDRREP:
		m.handleSIDRREP(peer, msg)
	default:
		m.stats.Dropped++
	}
}

// lookup returns the connection a message is for: the one whose local
// communication ID the message names, if it came from that connection's
// peer and, once the peer's own ID is known, names it too (theirs; 0 for
// a REP, which brings it). Anything else is counted and dropped, as the
// kernel's CM drops what matches no cm_id.
func (m *Manager) lookup(ours uint32, peer peerAddr, theirs uint32) *Conn {
	c := m.find(ours, peer, theirs)
	if c == nil {
		m.stats.Dropped++
	}
	return c
}

// find is lookup without the count.
func (m *Manager) find(ours uint32, peer peerAddr, theirs uint32) *Conn {
	c := m.conns[ours]
	if c == nil || c.peer.src != peer.src || theirs != 0 && c.remoteID != 0 && c.remoteID != theirs {
		return nil
	}
	return c
}

// byRemoteID returns the connection with peer whose peer's communication
// ID is theirs, or nil.
func (m *Manager) byRemoteID(peer peerAddr, theirs uint32) *Conn {
	for _, c := range m.conns {
		if c.remoteID == theirs && c.peer.src == peer.src {
			return c
		}
	}
	return nil
}

// LocalFor returns the device's address that a connection to dst leaves
// from when the caller names none, as the kernel's source address
// selection would pick among them: the first of dst's family and scope
// (link-local for a link-local dst, else not link-local), or the zero
// Addr.
func (m *Manager) LocalFor(dst netip.Addr) netip.Addr {
	dst = dst.Unmap()
	for _, g := range m.dev.GIDs() {
		if g := g.Unmap(); g.Is4() == dst.Is4() && g.IsLinkLocalUnicast() == dst.IsLinkLocalUnicast() {
			return g
		}
	}
	return netip.Addr{}
}

// peerAddr is a peer's address and the local address it talks to.
type peerAddr struct{ src, dst netip.Addr }

// sendLocked sends one CM MAD to QP 1 at the peer, from the device's
// address peer.dst. m.mu must be held.
func (m *Manager) sendLocked(peer peerAddr, tid uint64, msg cm.Message) {
	sgid := m.dev.GIDIndex(peer.dst)
	if sgid < 0 {
		m.tracef("cannot send %v: %v is not the device's", msg, peer.dst)
		return
	}
	key := ahKey{peer.src, uint8(sgid)}
	ah := m.ahs[key]
	if ah == nil {
		var err error
		if ah, err = m.dev.CreateAH(m.pd, qp.AddressVector{DGID: peer.src, SGIDIndex: uint8(sgid), HopLimit: 64}); err != nil {
			m.tracef("cannot send %v to %v: %v", msg, peer.src, err)
			return
		}
		m.ahs[key] = ah
	}
	b := cm.Append(make([]byte, 0, mad.Len), tid, msg)
	wr := qp.SendWR{Opcode: qp.WRSend, Flags: qp.SendInline, Inline: b, AH: ah,
		RemoteQPN: rnic.GSIQPN, RemoteQKey: deth.GSIQKey}
	if _, err := m.gsi.PostSend([]qp.SendWR{wr}); err != nil {
		m.tracef("cannot send %v: %v", msg, err)
		return
	}
	m.stats.Sent++
	m.tracef("send %v to %v", msg, peer.src)
}

// newCommID returns a local communication ID no connection uses.
func (m *Manager) newCommID() uint32 {
	for {
		var b [4]byte
		m.random(b[:])
		if id := binary.BigEndian.Uint32(b[:]); id != 0 && m.conns[id] == nil {
			return id
		}
	}
}

// newTID returns a transaction ID for a message this side starts: the
// kernel's form, a per-agent high half and the local communication ID,
// with a count in the high half so that each is new.
func (m *Manager) newTID(localID uint32) uint64 {
	m.tidHi++
	return uint64(m.tidHi)<<32 | uint64(localID)
}

// responseTime is how long this side waits for an answer before it sends
// again: the response timeout plus two packet lifetimes, as the kernel
// (cm_convert_to_ms of the timeout, and 2 × CMA_IBOE_PACKET_LIFETIME).
func (m *Manager) responseTime(exp uint8) time.Duration {
	return timeoutDuration(exp) + 2*timeoutDuration(packetLifetime)
}

// packetLifetime is rdma_cm's packet lifetime on RoCE
// (CMA_IBOE_PACKET_LIFETIME), as an exponent of 4.096 µs.
const packetLifetime = 16

// timeoutDuration is 4.096 µs × 2^exp, the IBTA's encoding of timeouts.
func timeoutDuration(exp uint8) time.Duration {
	return time.Duration(4096<<min(exp, 31)) * time.Nanosecond
}

// InitUD brings a UD QP (or QP 1) from RESET to RTS as rdma_create_qp does
// for an id of the UDP port space (ucma_init_ud_qp): INIT on port 1 with
// P_Key index 0 and qkey, RTR, and RTS with send PSN 0.
func InitUD(q *rnic.QP, qkey uint32) error {
	for _, s := range []struct {
		a    qp.Attr
		mask qp.AttrMask
	}{
		{qp.Attr{State: qp.StateInit, Port: 1, QKey: qkey}, qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrQKey},
		{qp.Attr{State: qp.StateRTR}, qp.AttrState},
		{qp.Attr{State: qp.StateRTS}, qp.AttrState | qp.AttrSQPSN},
	} {
		if err := q.Modify(&s.a, s.mask); err != nil {
			return err
		}
	}
	return nil
}

// Package rsocket speaks librdmacm's rsockets (librdmacm/rsocket.c) on a
// gorxe device: a byte stream over an RC connection made with rdma_cm,
// interoperable with rstream and any program using rsockets' stream calls
// (rsocket, rsend, rrecv) on rxe or a RoCE NIC, and its I/O-mapped writes
// (riomap, riowrite, riounmap: IOMap, IOWrite) as riostream runs them.
//
// The protocol, as rsocket.c runs it over RoCE:
//
//   - The connection's private data (REQ behind rdma_cm's header, REP) is
//     struct rs_conn_data, 40 bytes: version 1, flags (IOMAP 2, NET 1 when
//     the host is big-endian), the receive credits (be16, the receive
//     queue's size), the target SGL (be64 address, be32 rkey, be32 count
//     2) where the peer writes the sender's next buffers, and the first
//     half of the receive buffer (be64, be32 rkey, be32 length).
//   - Data goes as RDMA WRITE with immediate into the peer's receive
//     buffer, sequentially, each write within the target SGE it started
//     in; the immediate is the operation in its top 3 bits (0: data) and
//     the byte count in the other 29. A write takes a receive WQE (posted
//     with no SGE) and a credit.
//   - The receiver gives credits back with a WRITE with immediate whose
//     operation is 4 (SGL) and whose count is its receive sequence number
//     plus its queue's size: the sender may send until its own sequence
//     number reaches that. When half of the receive buffer is free again
//     the write carries a struct rs_sge (in the host's byte order, which
//     RS_CONN_FLAG_NET announces: little-endian here) naming that half, into
//     the next slot of the sender's target SGL; otherwise it carries
//     nothing.
//   - Control messages are zero-length WRITEs with immediate, operation 7:
//     0 disconnect, 1 keepalive, 2 shutdown (of writing). At most four are
//     outstanding.
//   - Closing sends a disconnect, waits for the sends to complete, and
//     destroys the rdma_cm id: the peer gets a DREQ.
package rsocket

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// The immediate data's operations (rsocket.c's RS_OP_*) and control
// messages (RS_CTRL_*).
const (
	opData     = 0
	opSGL      = 4
	opIOMapSGL = 6
	opCtrl     = 7

	ctrlDisconnect = 0
	ctrlKeepalive  = 1
	ctrlShutdown   = 2
)

func msg(op, data uint32) uint32 { return op<<29 | data&0x1FFFFFFF }

const (
	connDataLen = 40
	sgeLen      = 16 // struct rs_sge: u64 addr, u32 key, u32 length
	sglSize     = 2  // RS_SGL_SIZE: the target SGL's slots
	ctrlSize    = 4  // RS_QP_CTRL_SIZE: control messages outstanding
	sndLowat    = 2048
	maxTransfer = 65536
	olapStart   = 2048
)

// Options size a connection. The zero value is rsockets' defaults.
type Options struct {
	// SQSize and RQSize are the QP's queues (384 each): RQSize receives
	// are posted, and that many credits given to the peer.
	SQSize, RQSize uint16
	// RBufSize and SBufSize are the receive and send buffers' bytes
	// (128 KiB each); rstream asks for 1 MiB (SO_RCVBUF 512 KiB, doubled).
	RBufSize, SBufSize uint32
	// Inline is the largest write sent inline (64; NoInline for none).
	// Whether a write goes inline changes nothing on the wire.
	Inline uint32
	// IOMapSize is how many of the peer's I/O mappings (riomap) this
	// side takes: rsockets' RDMA_IOMAPSIZE, 0 by default, as riostream
	// sets it to 1. The peer may IOWrite only into memory a mapping
	// names.
	IOMapSize uint8
	// KeepAlive, when not zero, sends a keepalive control message every
	// KeepAlive while the connection is up, idle or not, as rsockets'
	// keepalive service does for a socket with SO_KEEPALIVE (every
	// TCP_KEEPIDLE seconds). The peer ignores it; a peer that is gone
	// fails its write after the QP's retries, which ends the connection,
	// and a Read waiting on it returns the error.
	KeepAlive time.Duration
}

// NoInline, as Options.Inline, sends no data write inline (rsockets'
// RDMA_INLINE 0).
const NoInline = ^uint32(0)

func (o *Options) defaults() {
	def := func(v *uint16, d uint16) {
		if *v == 0 {
			*v = d
		}
		*v = min(max(*v, 16), 0xFFFE) // RS_QP_MIN_SIZE, RS_QP_MAX_SIZE
	}
	def(&o.SQSize, 384)
	def(&o.RQSize, 384)
	if o.RBufSize == 0 {
		o.RBufSize = 1 << 17
	}
	if o.SBufSize == 0 {
		o.SBufSize = 1 << 17
	}
	o.RBufSize = max(o.RBufSize, 2*sndLowat) &^ 1
	o.SBufSize = max(o.SBufSize, 2*sndLowat)
	switch o.Inline {
	case 0:
		o.Inline = 64
	case NoInline:
		o.Inline = 0
	}
}

// sge is struct rs_sge.
type sge struct {
	addr   uint64
	key    uint32
	length uint32
}

// rmsg is a data message received and not yet read.
type rmsg struct{ left uint32 }

// ErrClosed is returned by a Conn's Read and Write once it is closed.
var ErrClosed = errors.New("rsocket: connection closed")

// Conn is an rsocket connection. Its Read and Write may run on two
// goroutines at once, each on one; Close ends both.
type Conn struct {
	o    Options
	conn *cm.Conn
	q    *rnic.QP
	cq   *cq.CQ
	dev  *rnic.Device // for the memory IOMap registers
	pd   *mr.PD

	rmr  *mr.MR // the receive buffer, RBufSize, written by the peer
	tmr  *mr.MR // the target SGL, where the peer writes the next buffers
	sbuf []byte // the send buffer, a ring of SBufSize
	smr  *mr.MR

	mu   sync.Mutex // everything below, and the CQ's polling
	cond sync.Cond  // signalled when a completion changed the state

	readable, writable, connected bool
	err                           error

	sseqNo, sseqComp uint16 // data messages sent; the peer's credit limit
	rseqNo, rseqComp uint16 // data messages read; when credits are due
	ctrlSeqno        uint32 // control messages posted
	ctrlMaxSeqno     uint32 // ... and the most that may be

	remoteSGL   sge      // the peer's target SGL
	remoteIOMap sge      // the peer's iomap table: its address, key and entries
	iomaps      []*IOMap // this side's mappings, by their index in the peer's table
	iomapQueue  []*IOMap // mappings not yet written there
	remoteSGE   int      // its slot the next credits go to
	targetSGE   int      // our target SGL's slot the next write goes to

	sqeAvail       int
	sbufBytesAvail uint32
	sbufHead       uint32 // where the next write's bytes go in sbuf

	rmsgs          []rmsg
	unread         uint32 // the bytes of rmsgs
	rbufOffset     uint32 // where the next byte to read is
	rbufFreeOffset uint32 // the half given to the peer next
	rbufBytesAvail uint32

	polling bool // a goroutine waits on the CQ
	wcs     [16]cq.WC

	// ctx ends when the peer's DREQ ends the connection, waking the
	// goroutine waiting on the CQ.
	ctx    context.Context
	cancel context.CancelFunc
}

// The work request IDs: receives, control messages; a data write's is
// its length.
const (
	wridRecv uint64 = 1 << 63
	wridCtrl uint64 = 1 << 62
)

// newConn makes a connection's resources: the CQ, the buffers, and the
// receives to post before the handshake.
func newConn(dev *rnic.Device, o Options) (*Conn, error) {
	o.defaults()
	c := &Conn{o: o, dev: dev, pd: dev.AllocPD(), ctrlMaxSeqno: ctrlSize}
	c.cond.L = &c.mu
	var err error
	if c.cq, err = dev.CreateCQ(int(o.SQSize) + int(o.RQSize)); err != nil {
		return nil, err
	}
	if c.rmr, err = dev.RegMR(c.pd, make([]byte, o.RBufSize), mr.LocalWrite|mr.RemoteWrite); err != nil {
		return nil, err
	}
	if c.tmr, err = dev.RegMR(c.pd, make([]byte, sglSize*sgeLen+int(o.IOMapSize)*iomapLen), mr.LocalWrite|mr.RemoteWrite); err != nil {
		return nil, err
	}
	c.sbuf = make([]byte, o.SBufSize)
	if c.smr, err = dev.RegMR(c.pd, c.sbuf, 0); err != nil {
		return nil, err
	}
	c.sqeAvail = int(o.SQSize) - ctrlSize
	c.sbufBytesAvail = o.SBufSize
	c.rbufFreeOffset = o.RBufSize / 2
	c.rbufBytesAvail = o.RBufSize / 2
	c.rseqComp = o.RQSize / 2
	return c, nil
}

// params are the connection's ConnParams: a QP of the options' sizes,
// every send signaled (sq_sig_all), remote writes allowed, its receives
// posted, and the connection data as private data.
func (c *Conn) params() cm.ConnParams {
	p := cm.ConnParams{PD: c.pd, SendCQ: c.cq, RecvCQ: c.cq, SigAll: true, Access: mr.RemoteWrite,
		Cap:        qp.Cap{MaxSendWR: uint32(c.o.SQSize), MaxRecvWR: uint32(c.o.RQSize), MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: max(c.o.Inline, sgeLen)},
		RetryCount: 7, RNRRetryCount: 7, PrivateData: c.connData(),
	}
	for range c.o.RQSize {
		p.Receives = append(p.Receives, qp.RecvWR{WRID: wridRecv})
	}
	return p
}

// connData is rs_format_conn_data's struct rs_conn_data.
func (c *Conn) connData() []byte {
	b := make([]byte, connDataLen)
	b[0] = 1 // version
	b[1] = 2 // RS_CONN_FLAG_IOMAP, and not NET: this side's SGEs are little-endian
	binary.BigEndian.PutUint16(b[2:], c.o.RQSize)
	// reserved[3], then target_iomap_size
	b[7] = byte(valueToScale(int(c.o.IOMapSize)))
	binary.BigEndian.PutUint64(b[8:], c.tmr.IOVA())
	binary.BigEndian.PutUint32(b[16:], uint32(c.tmr.RKey()))
	binary.BigEndian.PutUint32(b[20:], sglSize)
	binary.BigEndian.PutUint64(b[24:], c.rmr.IOVA())
	binary.BigEndian.PutUint32(b[32:], uint32(c.rmr.RKey()))
	binary.BigEndian.PutUint32(b[36:], c.o.RBufSize/2)
	return b
}

// saveConnData is rs_save_conn_data: the peer's target SGL, its first
// buffer (into our target SGL's slot 0), and its credits.
func (c *Conn) saveConnData(b []byte) error {
	if len(b) < connDataLen || b[0] != 1 {
		return fmt.Errorf("rsocket: the peer's connection data is not version 1 (%d bytes)", len(b))
	}
	if b[1]&1 != 0 {
		return errors.New("rsocket: the peer's SGEs are big-endian (RS_CONN_FLAG_NET): not supported")
	}
	c.remoteSGL = sge{addr: binary.BigEndian.Uint64(b[8:]), key: binary.BigEndian.Uint32(b[16:]), length: binary.BigEndian.Uint32(b[20:])}
	if c.remoteSGL.length == 0 {
		return errors.New("rsocket: the peer's target SGL has no slot")
	}
	c.remoteSGE = 1
	if b[1]&2 != 0 { // RS_CONN_FLAG_IOMAP: its iomap table follows its target SGL
		c.remoteIOMap = sge{addr: c.remoteSGL.addr + uint64(sgeLen)*uint64(c.remoteSGL.length), key: c.remoteSGL.key, length: uint32(scaleToValue(int(b[7])))}
		c.iomaps = make([]*IOMap, min(c.remoteIOMap.length, 1<<16))
	}
	first := sge{addr: binary.BigEndian.Uint64(b[24:]), key: binary.BigEndian.Uint32(b[32:]), length: binary.BigEndian.Uint32(b[36:])}
	c.putTarget(0, first)
	c.sseqComp = binary.BigEndian.Uint16(b[2:])
	return nil
}

// target reads slot i of our target SGL, which the peer writes.
func (c *Conn) target(i int) sge {
	var b [sgeLen]byte
	c.tmr.Peek(c.tmr.IOVA()+uint64(i*sgeLen), b[:])
	return sge{addr: binary.LittleEndian.Uint64(b[0:]), key: binary.LittleEndian.Uint32(b[8:]), length: binary.LittleEndian.Uint32(b[12:])}
}

func (c *Conn) putTarget(i int, s sge) {
	c.tmr.WriteAt(c.tmr.IOVA()+uint64(i*sgeLen), encodeSGE(s))
}

func encodeSGE(s sge) []byte {
	b := make([]byte, sgeLen)
	binary.LittleEndian.PutUint64(b[0:], s.addr)
	binary.LittleEndian.PutUint32(b[8:], s.key)
	binary.LittleEndian.PutUint32(b[12:], s.length)
	return b
}

// Dial connects to the rsocket listener at raddr (rsocket, rconnect) from
// local (the device's address of raddr's family when not valid).
func Dial(ctx context.Context, m *cm.Manager, raddr netip.AddrPort, local netip.Addr, o Options) (*Conn, error) {
	c, err := newConn(m.Device(), o)
	if err != nil {
		return nil, err
	}
	p := c.params()
	p.Local = local
	conn, err := m.Dial(ctx, raddr, p)
	if err != nil {
		return nil, err
	}
	if err := c.saveConnData(conn.PrivateData()); err != nil {
		conn.Close()
		return nil, err
	}
	c.start(conn)
	return c, nil
}

// Listener takes rsocket connections (rlisten, raccept).
type Listener struct {
	l   *cm.Listener
	dev *rnic.Device
	o   Options
}

// Listen listens for rsocket connections on port at addr (every address
// of the device's when not valid).
func Listen(m *cm.Manager, addr netip.Addr, port uint16, o Options) (*Listener, error) {
	l, err := m.Listen(addr, port)
	if err != nil {
		return nil, err
	}
	return &Listener{l: l, dev: m.Device(), o: o}, nil
}

// Accept takes the next connection request and accepts it, as raccept;
// a request that is not an rsocket's is rejected and the next one taken.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) { return l.AcceptOptions(ctx, l.o) }

// AcceptOptions is Accept with the connection sized by o instead of the
// listener's options.
func (l *Listener) AcceptOptions(ctx context.Context, o Options) (*Conn, error) {
	for {
		r, err := l.l.Accept(ctx)
		if err != nil {
			return nil, err
		}
		c, err := newConn(l.dev, o)
		if err != nil {
			r.Reject(nil)
			return nil, err
		}
		if err := c.saveConnData(r.PrivateData()); err != nil {
			r.Reject(nil)
			continue
		}
		p := c.params()
		// rsocket accepts with the request's own parameters.
		p.ResponderResources, p.InitiatorDepth = r.InitiatorDepth(), r.ResponderResources()
		conn, err := r.Accept(p)
		if err != nil {
			continue
		}
		if err := conn.Established(ctx); err != nil {
			conn.Close()
			continue
		}
		c.start(conn)
		return c, nil
	}
}

// Close stops listening.
func (l *Listener) Close() error { return l.l.Close() }

func (c *Conn) start(conn *cm.Conn) {
	c.conn, c.q = conn, conn.QP()
	c.mu.Lock()
	c.readable, c.writable, c.connected = true, true, true
	c.mu.Unlock()
	// The peer's DREQ (its rclose) ends the connection: the goroutine
	// waiting on the CQ wakes, and what the peer sent before is read.
	c.ctx, c.cancel = context.WithCancel(context.Background())
	go func() {
		<-conn.Disconnected()
		c.cancel()
	}()
	if c.o.KeepAlive > 0 {
		go c.keepalive()
	}
}

// keepalive sends a keepalive control message every KeepAlive until the
// connection ends, as rsocket.c's tcp_svc_send_keepalive: only when a
// control message may go (at most four outstanding).
func (c *Conn) keepalive() {
	t := time.NewTicker(c.o.KeepAlive)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		c.poll()
		if c.connected && c.ctrlSeqno != c.ctrlMaxSeqno {
			c.postCtrl(ctrlKeepalive)
		}
		up := c.connected
		c.mu.Unlock()
		if !up {
			return
		}
	}
}

// RemoteAddr returns the peer's address and rdma_cm port.
func (c *Conn) RemoteAddr() netip.AddrPort { return c.conn.RemoteAddr() }

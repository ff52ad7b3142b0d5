package rsocket

// Datagram rsockets (SOCK_DGRAM), as rsocket.c's ds_* functions and its
// UDP service run them, and librdmacm's udpong uses them:
//
//   - Each socket has a kernel UDP socket, bound where the program binds
//     it; peers name each other by its address. Each source address the
//     socket sends from has a UD QP (rdma_cm's UDP Q_Key, 0x01234567),
//     and each peer address a destination: the QP it is reached from,
//     and, once learnt, its QPN and an address handle.
//   - To a peer whose QPN is not yet known a datagram goes over the UDP
//     socket behind a struct ds_udp_header: be32 tag 0x55555555, version
//     (4 or 6), op (0 data, 7 control), length (16 or 28), a reserved
//     byte, be32 the sender's QPN, and its address (4 or 16 bytes).
//   - The UDP service answers a data message with a control one, a header
//     alone that carries its own QPN, makes the address handle back to the
//     sender from the QPN it read, and delivers the data as if it had come
//     over its QP (rsocket.c sends it to itself through its own QP).
//   - Once a peer's QPN is known, datagrams go as UD SENDs to it behind a
//     struct ds_header: version, length (8 or 24), be16 the sender's
//     port, and its address (IPv4; or be32 flow info and IPv6), which is
//     what the receiver returns as the datagram's source.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

const (
	dsUDPTag     = 0x55555555
	dsUDPHdrLen4 = 16 // DS_UDP_IPV4_HDR_LEN
	dsUDPHdrLen6 = 28
	dsHdrLen4    = 8 // DS_IPV4_HDR_LEN
	dsHdrLen6    = 24
	dsMaxDests   = 4096    // peers a socket keeps; a flood of strangers gets no more
	dsMaxQPs     = 4       // source addresses a socket sends from
	recvFlag     = 1 << 32 // in a receive's work request ID, beside its slot
)

// PacketOptions size a datagram socket. The zero value is what udpong
// asks for: 512 KiB buffers, so 256 messages each way.
type PacketOptions struct {
	// BufferSize is SO_SNDBUF and SO_RCVBUF: the send and receive queues
	// hold a message of 2 KiB for each 2 KiB of it, at most 384.
	BufferSize int
}

// PacketConn is a datagram rsocket. Its methods may be called from
// several goroutines at once. A read with no datagram waiting, and a write
// with no send slot free, process the socket's completion queue
// themselves; the socket's one goroutine serves its UDP port.
type PacketConn struct {
	dev   *rnic.Device
	udp   *net.UDPConn
	local netip.AddrPort
	pd    *mr.PD
	cq    *cq.CQ
	sbuf  []byte
	smr   *mr.MR
	rq    int // receive slots per QP

	ctx    context.Context
	cancel context.CancelFunc
	done   sync.WaitGroup
	inbox  chan datagram
	bufs   chan []byte // datagram buffers the reads gave back
	slots  chan int    // free send slots
	// poll holds the right to take completions from the CQ: the reads,
	// and the writes that wait for a send slot, process the CQ
	// themselves, one at a time, as rsocket.c's callers of
	// ds_process_cqs do, so that a datagram reaches a waiting read with
	// no hand-off between goroutines. wcs is its holder's.
	poll chan struct{}
	wcs  []cq.WC

	mu       sync.Mutex
	qps      map[netip.Addr]*dsQP // by source address
	byQPN    map[bth.QPN]*dsQP
	dests    map[netip.AddrPort]*dsDest
	conn     *dsDest // after Connect
	deadline *deadline
	err      error // why the socket stopped
	dropped  uint64
}

type datagram struct {
	data []byte
	from netip.AddrPort
}

// dsQP is the UD QP of one source address, and its receive buffer: a slot
// of the GRH area and 2 KiB for each receive.
type dsQP struct {
	qp   *rnic.QP
	src  netip.AddrPort
	gid  uint8  // the source's index in the device's GID table
	hdr  []byte // its ds_header
	rbuf []byte
	rmr  *mr.MR

	sendMu sync.Mutex // a send's work request, kept here so that a send allocates nothing
	wr     [1]qp.SendWR
	sge    [1]qp.SGE
}

// dsDest is a peer: the QP that reaches it and, once known, its QPN and
// address handle.
type dsDest struct {
	addr netip.AddrPort
	qp   *dsQP
	ah   *qp.AH
	qpn  bth.QPN
}

const dsSlot = wire.GRHLen + sndLowat

// ListenPacket opens a datagram rsocket on dev bound to laddr (rbind): its
// UDP socket takes laddr, port 0 choosing one. An unspecified address
// sends from the address the route to each peer gives, which must be one
// of the device's GIDs.
func ListenPacket(dev *rnic.Device, laddr netip.AddrPort, o PacketOptions) (*PacketConn, error) {
	if o.BufferSize == 0 {
		o.BufferSize = 1 << 19
	}
	depth := min(max(o.BufferSize/sndLowat, 16), 384) // RS_QP_MIN_SIZE, RS_QP_MAX_SIZE
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(laddr))
	if err != nil {
		return nil, fmt.Errorf("rsocket: bind: %w", err)
	}
	c := &PacketConn{dev: dev, udp: udp, local: unmapped(udp.LocalAddr().(*net.UDPAddr).AddrPort()), pd: dev.AllocPD(), rq: depth,
		inbox: make(chan datagram, depth), slots: make(chan int, depth), bufs: make(chan []byte, depth), poll: make(chan struct{}, 1), wcs: make([]cq.WC, 32),
		qps: map[netip.Addr]*dsQP{}, byQPN: map[bth.QPN]*dsQP{}, dests: map[netip.AddrPort]*dsDest{}}
	if c.cq, err = dev.CreateCQ(2 * depth * dsMaxQPs); err != nil {
		udp.Close()
		return nil, err
	}
	c.sbuf = make([]byte, depth*sndLowat)
	if c.smr, err = dev.RegMR(c.pd, c.sbuf, 0); err != nil {
		udp.Close()
		return nil, err
	}
	for i := range depth {
		c.slots <- i
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.deadline = newDeadline(c.ctx)
	c.poll <- struct{}{}
	c.done.Add(1)
	go c.udpService()
	return c, nil
}

// LocalAddr returns the address the socket is bound to.
func (c *PacketConn) LocalAddr() netip.AddrPort { return c.local }

// Dropped returns how many datagrams were lost on arrival: those its UD
// QPs found no receive posted for (the receive queue is reposted as the
// reads take datagrams), and those from the UDP socket that found the
// queue of datagrams for the reads full.
func (c *PacketConn) Dropped() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.dropped
	for _, q := range c.qps {
		n += q.qp.Stats().UDDropped
	}
	return n
}

// MaxPayload returns the longest datagram the socket sends: what the path
// MTU (and rsockets' 2 KiB messages) leave after its header, 8 bytes for
// an IPv4 address, 24 for an IPv6 one.
func (c *PacketConn) MaxPayload() int {
	hdr := dsHdrLen4
	if a := c.local.Addr(); a.Is6() && !a.IsUnspecified() {
		hdr = dsHdrLen6
	}
	return c.maxPayload(hdr)
}

// maxPayload is the longest datagram behind a header of hdrLen bytes.
func (c *PacketConn) maxPayload(hdrLen int) int { return min(sndLowat, c.dev.MTU().Bytes()) - hdrLen }

// unmapped returns a with an IPv4-mapped address as the IPv4 one.
func unmapped(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) }

// Connect sets the peer that Write sends to (rconnect on a datagram
// rsocket). Datagrams from others are still received.
func (c *PacketConn) Connect(raddr netip.AddrPort) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, err := c.destLocked(raddr)
	if err != nil {
		return err
	}
	c.conn = d
	return nil
}

// Write sends p to the peer Connect named.
func (c *PacketConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	d := c.conn
	c.mu.Unlock()
	if d == nil {
		return 0, errors.New("rsocket: write: not connected")
	}
	return c.WriteToAddrPort(p, d.addr)
}

// Read receives a datagram, as ReadFromAddrPort.
func (c *PacketConn) Read(p []byte) (int, error) {
	n, _, err := c.ReadFromAddrPort(p)
	return n, err
}

// SetReadDeadline makes reads fail with os.ErrDeadlineExceeded after t,
// those already waiting too, as a net.PacketConn's; the zero time waits
// for ever.
func (c *PacketConn) SetReadDeadline(t time.Time) error {
	c.deadline.set(t)
	return nil
}

// ReadFromAddrPort receives one datagram into p, and where it came from.
// A datagram longer than p is cut to it, as rrecvfrom cuts it. While no
// datagram waits, the read processes the completion queue itself.
func (c *PacketConn) ReadFromAddrPort(p []byte) (int, netip.AddrPort, error) {
	for {
		ctx := c.deadline.context()
		if d, ok := await(c, c.inbox, ctx); ok {
			return c.take(p, d)
		}
		switch {
		case c.deadline.context() != ctx:
			// The deadline set again, or a datagram delivered from the
			// UDP socket: look again.
		case c.ctx.Err() != nil:
			return 0, netip.AddrPort{}, c.stopErr()
		default:
			return 0, netip.AddrPort{}, os.ErrDeadlineExceeded
		}
	}
}

// await returns the next value of ch, processing the completion queue
// while none comes and no other caller does, or false once ctx has ended.
func await[T any](c *PacketConn, ch <-chan T, ctx context.Context) (T, bool) {
	for {
		select {
		case v := <-ch:
			return v, true
		default:
		}
		if ctx.Err() != nil {
			var none T
			return none, false
		}
		select {
		case v := <-ch:
			return v, true
		case <-c.poll:
			c.progress(ctx)
			c.poll <- struct{}{}
		case <-ctx.Done(): // a datagram may have come with it: look once more
		}
	}
}

// take copies d into p and keeps its buffer for another datagram.
func (c *PacketConn) take(p []byte, d datagram) (int, netip.AddrPort, error) {
	n := copy(p, d.data)
	select {
	case c.bufs <- d.data:
	default:
	}
	return n, d.from, nil
}

// progress waits for completions until ctx ends, and processes them;
// the caller holds c.poll.
func (c *PacketConn) progress(ctx context.Context) {
	n, err := c.cq.Wait(ctx, c.wcs)
	if err != nil {
		if ctx.Err() == nil && c.ctx.Err() == nil {
			c.stop(fmt.Errorf("rsocket: completion queue: %w", err))
		}
		return
	}
	c.process(c.wcs[:n])
}

// WriteToAddrPort sends p to addr: over the UDP socket while addr's QPN
// is not known, as a UD SEND once it is. It waits for a send slot.
func (c *PacketConn) WriteToAddrPort(p []byte, addr netip.AddrPort) (int, error) {
	addr = unmapped(addr)
	c.mu.Lock()
	d, err := c.destLocked(addr)
	if err != nil {
		c.mu.Unlock()
		return 0, err
	}
	ah, qpn, hdr := d.ah, d.qpn, d.qp.hdr
	c.mu.Unlock()
	if max := c.maxPayload(len(hdr)); len(p) > max {
		return 0, fmt.Errorf("rsocket: send: %d bytes: behind its %d-byte header a datagram is at most %d (the path MTU, %d, and rsockets' 2 KiB messages)", len(p), len(hdr), max, c.dev.MTU().Bytes())
	}
	if ah == nil {
		if _, err := c.udp.WriteToUDPAddrPort(append(d.qp.udpHeader(0), p...), addr); err != nil {
			return 0, fmt.Errorf("rsocket: send: %w", err)
		}
		return len(p), nil
	}
	slot, ok := await(c, c.slots, c.ctx) // a free send slot
	if !ok {
		return 0, c.stopErr()
	}
	if err := c.postSend(d.qp, slot, hdr, p, ah, qpn); err != nil {
		c.slots <- slot
		return 0, fmt.Errorf("rsocket: send: %w", err)
	}
	return len(p), nil
}

// postSend sends hdr and p from slot of the send buffer, on q, to qpn.
func (c *PacketConn) postSend(q *dsQP, slot int, hdr, p []byte, ah *qp.AH, qpn bth.QPN) error {
	b := c.sbuf[slot*sndLowat:]
	n := copy(b, hdr)
	n += copy(b[n:], p)
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	q.sge[0] = qp.SGE{Addr: c.smr.IOVA() + uint64(slot*sndLowat), Length: uint32(n), LKey: c.smr.LKey()}
	q.wr[0] = qp.SendWR{WRID: uint64(slot), Opcode: qp.WRSend, Flags: qp.SendSignaled, AH: ah, RemoteQPN: qpn, RemoteQKey: cm.UDPQKey, SGList: q.sge[:]}
	_, err := q.qp.PostSend(q.wr[:])
	return err
}

// Close stops the socket: its UDP socket, its QPs, the goroutines.
func (c *PacketConn) Close() error {
	c.mu.Lock()
	if c.err == nil {
		c.err = net.ErrClosed
	}
	c.mu.Unlock()
	c.cancel()
	err := c.udp.Close()
	c.done.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, q := range c.qps {
		q.qp.Destroy()
	}
	c.cq.Close()
	return err
}

func (c *PacketConn) stopErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	return net.ErrClosed
}

// destLocked returns addr's destination, made with the QP of the source
// address that reaches it (ds_get_dest); c.mu is held.
func (c *PacketConn) destLocked(addr netip.AddrPort) (*dsDest, error) {
	if d := c.dests[addr]; d != nil {
		return d, nil
	}
	if !addr.IsValid() || addr.Port() == 0 {
		return nil, fmt.Errorf("rsocket: %v: not a peer's address", addr)
	}
	if len(c.dests) >= dsMaxDests {
		return nil, fmt.Errorf("rsocket: %v: the socket has %d peers already", addr, dsMaxDests)
	}
	src, err := c.sourceFor(addr)
	if err != nil {
		return nil, err
	}
	q := c.qps[src.Addr()]
	if q == nil {
		if len(c.qps) >= dsMaxQPs {
			return nil, fmt.Errorf("rsocket: %v: the socket sends from %d addresses already", src.Addr(), dsMaxQPs)
		}
		if q, err = c.newQP(src); err != nil {
			return nil, err
		}
	}
	d := &dsDest{addr: addr, qp: q}
	c.dests[addr] = d
	return d, nil
}

// sourceFor returns the address datagrams to addr leave from: the bound
// one, or the route's (ds_get_src_addr), with the socket's port.
func (c *PacketConn) sourceFor(addr netip.AddrPort) (netip.AddrPort, error) {
	if !c.local.Addr().IsUnspecified() {
		return c.local, nil
	}
	probe, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("rsocket: no route to %v: %w", addr, err)
	}
	defer probe.Close()
	ip := probe.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
	return netip.AddrPortFrom(ip, c.local.Port()), nil
}

// newQP makes the UD QP that sends from src, with its receives posted
// (ds_create_qp); c.mu is held.
func (c *PacketConn) newQP(src netip.AddrPort) (*dsQP, error) {
	gid := c.dev.GIDIndex(src.Addr())
	if gid < 0 {
		return nil, fmt.Errorf("rsocket: %v is not an address of the device (its GIDs: %v)", src.Addr(), c.dev.GIDs())
	}
	q := &dsQP{src: src, gid: uint8(gid), hdr: dsHeader(src), rbuf: make([]byte, c.rq*dsSlot)}
	var err error
	if q.rmr, err = c.dev.RegMR(c.pd, q.rbuf, mr.LocalWrite); err != nil {
		return nil, err
	}
	if q.qp, err = c.dev.CreateQP(qp.InitAttr{Type: qp.TypeUD, PD: c.pd, SendCQ: c.cq, RecvCQ: c.cq,
		Cap: qp.Cap{MaxSendWR: uint32(c.rq), MaxRecvWR: uint32(c.rq), MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	if err := cm.InitUD(q.qp, cm.UDPQKey); err != nil {
		q.qp.Destroy()
		return nil, err
	}
	for i := range c.rq {
		if err := q.postRecv(i); err != nil {
			q.qp.Destroy()
			return nil, err
		}
	}
	c.qps[src.Addr()] = q
	c.byQPN[q.qp.Num()] = q
	return q, nil
}

func (q *dsQP) postRecv(slot int) error {
	_, err := q.qp.PostRecv([]qp.RecvWR{{WRID: recvFlag | uint64(slot), SGList: []qp.SGE{{Addr: q.rmr.IOVA() + uint64(slot*dsSlot), Length: dsSlot, LKey: q.rmr.LKey()}}}})
	return err
}

// dsHeader returns the struct ds_header of datagrams sent from src.
func dsHeader(src netip.AddrPort) []byte {
	if a := src.Addr(); a.Is4() {
		h := make([]byte, dsHdrLen4)
		h[0], h[1] = 4, dsHdrLen4
		binary.BigEndian.PutUint16(h[2:], src.Port())
		ip := a.As4()
		copy(h[4:], ip[:])
		return h
	}
	h := make([]byte, dsHdrLen6)
	h[0], h[1] = 6, dsHdrLen6
	binary.BigEndian.PutUint16(h[2:], src.Port())
	ip := src.Addr().As16()
	copy(h[8:], ip[:]) // after the flow info, 0
	return h
}

// parseDSHeader returns the source a received ds_header names and its
// length, or false when it is not one (ds_valid_recv).
func parseDSHeader(b []byte) (netip.AddrPort, int, bool) {
	if len(b) < dsHdrLen4 {
		return netip.AddrPort{}, 0, false
	}
	port := binary.BigEndian.Uint16(b[2:])
	switch {
	case b[0] == 4 && b[1] == dsHdrLen4:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), dsHdrLen4, true
	case b[0] == 6 && b[1] == dsHdrLen6 && len(b) >= dsHdrLen6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), port), dsHdrLen6, true
	}
	return netip.AddrPort{}, 0, false
}

// udpHeader returns the struct ds_udp_header of a message sent over UDP
// from q with op (0 data, 7 control).
func (q *dsQP) udpHeader(op uint8) []byte {
	n, ver := dsUDPHdrLen4, uint8(4)
	if !q.src.Addr().Is4() {
		n, ver = dsUDPHdrLen6, 6
	}
	h := make([]byte, n)
	binary.BigEndian.PutUint32(h, dsUDPTag)
	h[4], h[5], h[6] = ver, op, uint8(n)
	binary.BigEndian.PutUint32(h[8:], uint32(q.qp.Num())&0xFFFFFF)
	ip := q.src.Addr().AsSlice()
	copy(h[12:], ip)
	return h
}

// udpService is rsocket.c's udp_svc for this socket: it reads what comes
// over the UDP socket, learns each sender's QPN, answers a data message
// with its own, and delivers the data.
func (c *PacketConn) udpService() {
	defer c.done.Done()
	buf := make([]byte, dsUDPHdrLen6+sndLowat) // room for the longest datagram and any header
	for {
		n, from, err := c.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if c.ctx.Err() == nil {
				c.stop(fmt.Errorf("rsocket: UDP socket: %w", err))
			}
			return
		}
		c.udpMessage(buf[:n], unmapped(from))
	}
}

// udpMessage handles one message from the UDP socket (udp_svc_process_rs).
func (c *PacketConn) udpMessage(b []byte, from netip.AddrPort) {
	if len(b) < dsUDPHdrLen4 || binary.BigEndian.Uint32(b) != dsUDPTag {
		return
	}
	ver, op, hlen := b[4], b[5], int(b[6])
	if !(ver == 4 && from.Addr().Is4() && hlen == dsUDPHdrLen4 || ver == 6 && from.Addr().Is6() && hlen == dsUDPHdrLen6) || len(b) < hlen {
		return
	}
	qpn := bth.QPN(binary.BigEndian.Uint32(b[8:]) & 0xFFFFFF)
	c.mu.Lock()
	d, err := c.destLocked(from)
	if err != nil {
		c.mu.Unlock()
		return
	}
	var reply []byte
	if op == opData {
		reply = d.qp.udpHeader(opCtrl)
	}
	if d.ah == nil || d.qpn != qpn {
		ah, err := c.dev.CreateAH(c.pd, qp.AddressVector{DGID: from.Addr(), SGIDIndex: d.qp.gid, HopLimit: 64})
		if err == nil {
			d.ah, d.qpn = ah, qpn
		}
	}
	c.mu.Unlock()
	if op != opData {
		return
	}
	c.udp.WriteToUDPAddrPort(reply, from)
	c.deliver(b[hlen:], from)
	c.deadline.wake() // a read may be waiting on the CQ
}

// deliver queues a datagram for ReadFromAddrPort, or drops it when the
// queue is full, as a UD QP with no receive posted would.
func (c *PacketConn) deliver(data []byte, from netip.AddrPort) {
	var b []byte
	select {
	case b = <-c.bufs:
	default:
		b = make([]byte, 0, sndLowat)
	}
	select {
	case c.inbox <- datagram{append(b[:0], data...), from}:
	default:
		select {
		case c.bufs <- b:
		default:
		}
		c.mu.Lock()
		c.dropped++
		c.mu.Unlock()
	}
}

// process handles completions: receives are datagrams behind a
// ds_header, queued for the reads, and posted again; sends give their
// slot back.
func (c *PacketConn) process(wcs []cq.WC) {
	for _, wc := range wcs {
		if wc.WRID&recvFlag == 0 {
			select {
			case c.slots <- int(wc.WRID):
			default: // not one of ours: the channel holds every slot
			}
			continue
		}
		c.mu.Lock()
		q := c.byQPN[bth.QPN(wc.QPNum)]
		c.mu.Unlock()
		if q == nil || wc.Status == cq.StatusWRFlushErr {
			continue
		}
		slot := int(wc.WRID &^ recvFlag)
		if slot >= c.rq {
			continue
		}
		if wc.Status == cq.StatusSuccess && wc.ByteLen >= wire.GRHLen && int(wc.ByteLen) <= dsSlot {
			b := q.rbuf[slot*dsSlot+wire.GRHLen : slot*dsSlot+int(wc.ByteLen)]
			if from, hlen, ok := parseDSHeader(b); ok {
				c.deliver(b[hlen:], unmapped(from))
			}
		}
		if err := q.postRecv(slot); err != nil && c.ctx.Err() == nil {
			c.stop(fmt.Errorf("rsocket: post receive: %w", err))
			return
		}
	}
}

// stop ends the socket with err, the reason its calls give.
func (c *PacketConn) stop(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.cancel()
}

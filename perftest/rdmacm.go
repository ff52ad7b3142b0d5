package perftest

// perftest's exchange over rdma_cm (-R, --rdma_cm, and -z,
// --comm_rdma_cm): no TCP; the out-of-band messages travel as SENDs on a
// "comm" RC QP that rdma_cm connects on the test's port, and with -R the
// test QPs are connected with rdma_cm too. PROTOCOL.md, "rdma_cm", has the
// sequence and where in perftest's source each step comes from.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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
	"github.com/gorxe/gorxe/wire/bth"
)

// Sizes of perftest's struct pingpong_dest, which rdma_write_keys sends
// as it is in memory (the integers big-endian): 56 bytes, and 64 from
// 6.29, which added tail_markers_vaddr after vaddr (commit 4f48008). A
// perftest posts its comm QP's receive with its own sizeof.
const (
	cmKeySize      = 56
	cmKeySize629   = 64
	verTailMarkers = 6.29
)

// commSlot is the size of each receive the comm QP posts: more than
// any message of the exchange (6.29's negotiate_params, which gorxe never
// runs, is 320 bytes).
const (
	commSlot     = 512
	commReceives = 4
)

// cmKey returns d as rdma_write_keys sends it, size bytes: lid,
// out_reads, qpn, psn, rkey (big-endian 32 bits each), 4 bytes of
// padding, vaddr (64 bits), [tail_markers_vaddr, 64 bits, from 6.29],
// the GID, srqn and gid_index.
func (d Dest) cmKey(size int) []byte {
	b := make([]byte, size)
	be := binary.BigEndian
	be.PutUint32(b[0:], uint32(d.LID))
	be.PutUint32(b[4:], uint32(d.OutReads))
	be.PutUint32(b[8:], d.QPN)
	be.PutUint32(b[12:], d.PSN)
	be.PutUint32(b[16:], d.RKey)
	be.PutUint64(b[24:], d.VAddr)
	g := 32
	if size == cmKeySize629 {
		g = 40 // tail_markers_vaddr (data validation, which gorxe does not do): 0
	}
	copy(b[g:], d.GID[:])
	be.PutUint32(b[g+16:], d.SRQN)
	be.PutUint32(b[g+20:], uint32(d.GIDIndex))
	return b
}

// parseCMKey reads a key rdma_read_keys takes, of either size: the
// padding (a perftest's uninitialised stack) and tail_markers_vaddr are
// ignored.
func parseCMKey(b []byte) (Dest, error) {
	var d Dest
	g := 32
	switch len(b) {
	case cmKeySize:
	case cmKeySize629:
		g = 40
	default:
		return d, fmt.Errorf("rdma_cm key message is %d bytes, want %d (perftest before 6.29) or %d", len(b), cmKeySize, cmKeySize629)
	}
	be := binary.BigEndian
	lid, outReads := be.Uint32(b[0:]), be.Uint32(b[4:])
	if lid > 0xffff || outReads > 0xffff {
		return d, fmt.Errorf("rdma_cm key message: lid %#x or out_reads %#x does not fit 16 bits", lid, outReads)
	}
	d.LID, d.OutReads = uint16(lid), uint16(outReads)
	d.QPN, d.PSN, d.RKey = be.Uint32(b[8:])&0xffffff, be.Uint32(b[12:])&0xffffff, be.Uint32(b[16:])
	d.VAddr = be.Uint64(b[24:])
	copy(d.GID[:], b[g:g+16])
	d.SRQN, d.GIDIndex = be.Uint32(b[g+16:]), int32(be.Uint32(b[g+20:]))
	return d, nil
}

// cmKeySizeFor is the key size a peer of version ver takes.
func cmKeySizeFor(ver float64) int {
	if ver >= verTailMarkers {
		return cmKeySize629
	}
	return cmKeySize
}

// comm is perftest's comm QP (create_comm_struct with use_rdma_cm: tx
// and rx depth 1, RC, SEND): an rdma_cm connection on the test's port
// that carries every message of the exchange as one SEND
// (ctx_xchg_data_rdma). It is the net.Conn of a Conn made by DialCM or
// ListenCM; reads go through recv, which keeps message boundaries.
type comm struct {
	m     *cm.Manager
	conn  *cm.Conn
	q     *rnic.QP
	pd    *mr.PD
	scq   *cq.CQ
	rcq   *cq.CQ
	mr    *mr.MR
	buf   []byte // commReceives receive slots, then the send slot
	local netip.AddrPort

	// tests are the test QPs' connections (-R), disconnected by Close
	// before the comm connection.
	tests []*cm.Conn
	// connectQPs connects the test QPs (-R): Setup calls it between
	// create_rdma_cm_connection's handshakes, a server with the listener
	// it opened before the first (ud, on UD QPs: rdma_cm's UDP port
	// space).
	connectQPs func(mtu qp.MTU, l *cm.Listener, ud *cm.UDListener) error
	// ud says the test QPs are UD (-c UD): rdma_cm resolves them with
	// SIDR instead of connecting them.
	ud bool

	mu      sync.Mutex
	rdl     time.Time     // read deadline
	wdl     time.Time     // write deadline
	kick    chan struct{} // closed when a deadline changes or the connection ends
	got     [][]byte      // messages received and not read yet
	sendErr error
	closed  bool
	peerEnd bool // the peer disconnected
}

// params are the comm QP's connection parameters: rdma_client_connect
// and rdma_server_connect's, whose comm parameters have the verb SEND (no
// READs), the user's retry_count and rnr_retry_count 7. retryCount is as
// Params.RetryCount.
func (c *comm) params(retryCount int) cm.ConnParams {
	recvs := make([]qp.RecvWR, commReceives)
	for i := range recvs {
		recvs[i] = qp.RecvWR{WRID: uint64(i), SGList: []qp.SGE{{Addr: c.mr.IOVA() + uint64(i*commSlot), Length: commSlot, LKey: c.mr.LKey()}}}
	}
	return cm.ConnParams{
		PD: c.pd, SendCQ: c.scq, RecvCQ: c.rcq, Access: mr.LocalWrite,
		Cap:        qp.Cap{MaxSendWR: 4, MaxRecvWR: commReceives, MaxSendSGE: 1, MaxRecvSGE: 1},
		RetryCount: cmRetries(retryCount), RNRRetryCount: 7, Receives: recvs,
	}
}

func newComm(m *cm.Manager) (*comm, error) {
	dev := m.Device()
	c := &comm{m: m, pd: dev.AllocPD(), buf: make([]byte, (commReceives+1)*commSlot), kick: make(chan struct{})}
	var err error
	if c.scq, err = dev.CreateCQ(8); err != nil {
		return nil, err
	}
	if c.rcq, err = dev.CreateCQ(2 * commReceives); err != nil {
		c.scq.Close()
		return nil, err
	}
	if c.mr, err = dev.RegMR(c.pd, c.buf, mr.LocalWrite); err != nil {
		c.scq.Close()
		c.rcq.Close()
		return nil, err
	}
	return c, nil
}

// release frees what newComm made, and the QP if there is one.
func (c *comm) release() {
	if c.q != nil {
		c.q.Destroy()
	}
	c.mr.Deregister()
	c.scq.Close()
	c.rcq.Close()
}

// established starts watching the connection once it is up.
func (c *comm) established(conn *cm.Conn) {
	c.conn, c.q = conn, conn.QP()
	go func() {
		<-conn.Disconnected()
		c.mu.Lock()
		c.peerEnd = true
		c.kickLocked()
		c.mu.Unlock()
	}()
}

// DialCM is perftest's client side of establish_connection with -R or
// -z (rdma_client_connect): it connects the comm QP with rdma_cm to the
// server at raddr (its address and perftest's port, -p), from local (the
// zero Addr: the device's address of raddr's family), with retryCount
// (as Params.RetryCount: --retry_count) as its retry count. perftest
// retries an unresolved address only; DialCM, like Dial, retries for up
// to DialRetry while the server rejects the connection as nobody listens
// yet.
func DialCM(ctx context.Context, m *cm.Manager, raddr netip.AddrPort, local netip.Addr, retryCount int) (*Conn, error) {
	c, err := newComm(m)
	if err != nil {
		return nil, err
	}
	p := c.params(retryCount)
	p.Local = local
	give := time.Now().Add(DialRetry)
	for {
		conn, err := m.Dial(ctx, raddr, p)
		if err == nil {
			c.established(conn)
			c.local = netip.AddrPortFrom(conn.LocalAddr(), 0)
			return newCMConn(ctx, c, false), nil
		}
		var rej *cm.Rejected
		if ctx.Err() != nil || !errors.As(err, &rej) || time.Now().After(give) {
			c.release()
			return nil, fmt.Errorf("perftest: connecting to %v with rdma_cm: %w", raddr, err)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			c.release()
			return nil, fmt.Errorf("perftest: connecting to %v with rdma_cm: %w", raddr, err)
		}
	}
}

// ListenCM is perftest's server side of establish_connection with -R or
// -z (rdma_server_connect): it listens with rdma_cm on addr (the zero
// Addr: every address of the device) and port, accepts one connection
// request as the comm QP (its receive posted before the REP goes out;
// retryCount as DialCM's), and stops listening.
func ListenCM(ctx context.Context, m *cm.Manager, addr netip.Addr, port uint16, retryCount int) (*Conn, error) {
	l, err := m.Listen(addr, port)
	if err != nil {
		return nil, fmt.Errorf("perftest: listening with rdma_cm on port %d: %w", port, err)
	}
	defer l.Close()
	r, err := l.Accept(ctx)
	if err != nil {
		return nil, fmt.Errorf("perftest: waiting for the client's rdma_cm connection on port %d: %w", port, err)
	}
	c, err := newComm(m)
	if err != nil {
		r.Reject(nil)
		return nil, err
	}
	conn, err := r.Accept(c.params(retryCount))
	if err != nil {
		c.release()
		return nil, fmt.Errorf("perftest: accepting the client's rdma_cm connection: %w", err)
	}
	c.established(conn)
	c.local = netip.AddrPortFrom(r.LocalAddr(), port)
	return newCMConn(ctx, c, true), nil
}

func newCMConn(ctx context.Context, c *comm, server bool) *Conn {
	conn := NewConn(ctx, c, server)
	conn.comm = c
	return conn
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (c *comm) kickLocked() {
	close(c.kick)
	c.kick = make(chan struct{})
}

// wait waits for completions on q until the read (or write) deadline,
// the connection's end, or Close.
func (c *comm) wait(q *cq.CQ, read bool, dst []cq.WC) (int, error) {
	for {
		if n, err := q.Poll(dst); n > 0 || err != nil {
			return n, err
		}
		c.mu.Lock()
		dl, kick, closed, ended := c.wdl, c.kick, c.closed, c.peerEnd
		if read {
			dl = c.rdl
		}
		c.mu.Unlock()
		switch {
		case closed:
			return 0, net.ErrClosed
		case ended:
			if n, err := q.Poll(dst); n > 0 || err != nil {
				return n, err
			}
			return 0, io.EOF
		case !dl.IsZero() && !time.Now().Before(dl):
			return 0, os.ErrDeadlineExceeded
		}
		ctx, cancel := context.WithCancel(context.Background())
		if !dl.IsZero() {
			ctx, cancel = context.WithDeadline(context.Background(), dl)
		}
		go func() {
			select {
			case <-kick:
				cancel()
			case <-ctx.Done():
			}
		}()
		n, err := q.Wait(ctx, dst)
		cancel()
		if n > 0 {
			return n, nil
		}
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			return 0, err
		}
	}
}

// take waits for the next message and queues it; the slot's receive is
// posted again at once.
func (c *comm) take() error {
	var wc [1]cq.WC
	if _, err := c.wait(c.rcq, true, wc[:]); err != nil {
		return err
	}
	if wc[0].Status != cq.StatusSuccess {
		if wc[0].Status == cq.StatusWRFlushErr {
			return io.EOF // the connection ended: its QP is in ERR
		}
		return fmt.Errorf("receive completion %v", wc[0])
	}
	i := int(wc[0].WRID)
	n := min(int(wc[0].ByteLen), commSlot)
	msg := append([]byte(nil), c.buf[i*commSlot:i*commSlot+n]...)
	c.mu.Lock()
	c.got = append(c.got, msg)
	c.mu.Unlock()
	_, err := c.q.PostRecv([]qp.RecvWR{{WRID: uint64(i), SGList: []qp.SGE{{Addr: c.mr.IOVA() + uint64(i*commSlot), Length: commSlot, LKey: c.mr.LKey()}}}})
	return err
}

// next returns the next message, waiting for it.
func (c *comm) next() ([]byte, error) {
	for {
		c.mu.Lock()
		if len(c.got) > 0 {
			msg := c.got[0]
			c.got = c.got[1:]
			c.mu.Unlock()
			return msg, nil
		}
		c.mu.Unlock()
		if err := c.take(); err != nil {
			return nil, err
		}
	}
}

// recv is rdma_read_data: the next message, which must be n bytes
// (n < 0: any size, the keys).
func (c *comm) recv(n int) ([]byte, error) {
	msg, err := c.next()
	switch {
	case errors.Is(err, io.EOF):
		return nil, fmt.Errorf("the peer closed the rdma_cm connection: %w", io.EOF)
	case err != nil:
		return nil, fmt.Errorf("receiving a message: %w", err)
	case n >= 0 && len(msg) != n:
		return nil, fmt.Errorf("the peer sent %d bytes, want %d", len(msg), n)
	}
	return msg, nil
}

// Write is rdma_write_data: msg goes as one signaled SEND, and Write
// waits for its completion.
func (c *comm) Write(msg []byte) (int, error) {
	if len(msg) > commSlot {
		return 0, fmt.Errorf("a %d-byte message: the comm QP sends at most %d", len(msg), commSlot)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, net.ErrClosed
	}
	c.mu.Unlock()
	off := commReceives * commSlot
	copy(c.buf[off:], msg)
	wr := qp.SendWR{WRID: 1, Opcode: qp.WRSend, Flags: qp.SendSignaled,
		SGList: []qp.SGE{{Addr: c.mr.IOVA() + uint64(off), Length: uint32(len(msg)), LKey: c.mr.LKey()}}}
	if _, err := c.q.PostSend([]qp.SendWR{wr}); err != nil {
		return 0, err
	}
	var wc [1]cq.WC
	if _, err := c.wait(c.scq, false, wc[:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("the peer closed the rdma_cm connection: %w", io.EOF)
		}
		return 0, err
	}
	if wc[0].Status != cq.StatusSuccess {
		if wc[0].Status == cq.StatusWRFlushErr {
			return 0, fmt.Errorf("the peer closed the rdma_cm connection: %w", io.EOF)
		}
		return 0, fmt.Errorf("send completion %v", wc[0])
	}
	return len(msg), nil
}

// Read reads the next message into b (what does not fit is lost).
func (c *comm) Read(b []byte) (int, error) {
	msg, err := c.next()
	if err != nil {
		return 0, err
	}
	return copy(b, msg), nil
}

// watch is Conn.WatchPeer on the comm QP: the channel is closed when the
// peer's next message has come (it stays queued for the next step).
func (c *comm) watch() (spoke <-chan struct{}, stop func()) {
	ch := make(chan struct{})
	ended := make(chan struct{})
	c.SetReadDeadline(time.Time{})
	go func() {
		defer close(ended)
		c.mu.Lock()
		have := len(c.got) > 0
		c.mu.Unlock()
		if !have {
			c.take()
		}
		close(ch)
	}()
	return ch, func() {
		c.SetReadDeadline(aLongTimeAgo)
		<-ended
		c.SetReadDeadline(time.Time{})
	}
}

func (c *comm) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl, c.wdl = t, t
	c.kickLocked()
	return nil
}

func (c *comm) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl = t
	c.kickLocked()
	return nil
}

func (c *comm) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wdl = t
	c.kickLocked()
	return nil
}

func (c *comm) LocalAddr() net.Addr { return net.TCPAddrFromAddrPort(c.local) }

func (c *comm) RemoteAddr() net.Addr { return net.TCPAddrFromAddrPort(c.conn.RemoteAddr()) }

// disconnectWait bounds how long Close waits for the peer's DREPs.
const disconnectWait = 3 * time.Second

// Close ends the test QPs' connections and then the comm QP's, as a
// perftest's destroy_ctx and exit do: a DREQ each (the peer's own
// DREQs may cross them), waiting up to disconnectWait for the DREPs; it
// destroys the comm QP but not the test QPs, which are the Side's.
func (c *comm) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.kickLocked()
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), disconnectWait)
	defer cancel()
	var wg sync.WaitGroup
	for _, t := range c.tests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Disconnect(ctx)
		}()
	}
	wg.Wait()
	c.conn.Disconnect(ctx)
	c.release()
	return nil
}

// connectCM is create_rdma_cm_connection's middle part: the client
// connects each of the side's QPs with rdma_cm to the server's port, in
// order, and the server accepts them on l, listening on that port again
// (its comm listener is gone), in the order they come, as perftest's
// servers do (rdma_cm_connection_request_handler). rdma_cm sets every QP
// attribute: the peer's QPN and PSN, the READs and atomics outstanding
// (out_reads for the READ and atomic tests, none for the others), the
// retry counts (--retry_count, 7 by default), and the path MTU, which is
// the REQ's: a perftest client's route's (its -m does not apply), gorxe's
// the MTU both sides agreed on (check_mtu), which a passive side of
// either takes. --tos is the path's traffic class.
func (c *Conn) connectCM(s *Side, p *Params, mtu qp.MTU, l *cm.Listener) error {
	cc := c.comm
	params := func(i int) cm.ConnParams {
		q := s.qps[i]
		cp := cm.ConnParams{QP: q.qp, Access: q.mr.Access(), RetryCount: cmRetries(p.RetryCount), RNRRetryCount: cmRetries(p.RetryCount),
			ACKTimeout: p.Timeout, TrafficClass: p.TrafficClass}
		if !c.server {
			cp.MTU = mtu
		}
		if p.Test.readsOrAtomics() {
			cp.ResponderResources, cp.InitiatorDepth = uint8(min(int(p.outReads()), 255)), uint8(min(int(p.outReads()), 255))
		}
		return cp
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout())
	defer cancel()
	n := len(s.qps)
	if c.server {
		for i := range n {
			r, err := l.Accept(ctx)
			if err != nil {
				return fmt.Errorf("perftest: waiting for the rdma_cm connection of QP %d of %d: %w", i, n, err)
			}
			conn, err := r.Accept(params(i))
			if err != nil {
				return fmt.Errorf("perftest: accepting the rdma_cm connection of QP %d of %d: %w", i, n, err)
			}
			cc.tests = append(cc.tests, conn)
		}
		return nil
	}
	raddr := cc.conn.RemoteAddr()
	for i := range n {
		// rdma_cm_client_connection: up to 10 tries, 100 ms apart, of
		// whatever fails (the server may not listen yet).
		var err error
		for try := 0; try < 10; try++ {
			var conn *cm.Conn
			if conn, err = cc.m.Dial(ctx, raddr, params(i)); err == nil {
				cc.tests = append(cc.tests, conn)
				break
			}
			if ctx.Err() != nil || sleepCtx(ctx, 100*time.Millisecond) != nil {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("perftest: connecting QP %d of %d with rdma_cm: %w", i, n, err)
		}
	}
	return nil
}

// connectCMUD is create_rdma_cm_connection's middle part on UD QPs
// (-R -c UD), in rdma_cm's UDP port space: every QP is ready at once, as
// rdma_create_qp leaves a UD QP of that space, with rdma_cm's Q_Key
// (UDPQKey, not perftest's own QKey); the client resolves each of its
// QPs in order with a SIDR_REQ to the server's port (rdma_connect) and
// sends to the QPN and Q_Key of the SIDR_REP through an address handle
// to the server's address (the ESTABLISHED event's ah_attr; --tos its
// traffic class); the server answers the k-th request with its QP k
// (rdma_accept with conn_param.qp_num). When the server sends too
// (send_lat, send_bw -b), the client then tells it its QPN, a 4-byte
// SEND with immediate (the QPN) from each QP right after its answer
// (rdma_cm_send_ud_connection_parameters), for which the server posted
// a receive before answering, and from which it makes its address
// handle back (rdma_cm_initialize_ud_connection_parameters: the sender's
// GRH, the immediate, its own Q_Key). perftest's server waits for that
// message forever; gorxe's for the exchange's timeout.
func (c *Conn) connectCMUD(s *Side, p *Params, ul *cm.UDListener) error {
	cc := c.comm
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout())
	defer cancel()
	n := len(s.qps)
	for i := range n {
		if err := s.readyUD(i, 0, cm.UDPQKey); err != nil {
			return err
		}
	}
	var h *udHello
	if p.Test.IsLatency() || p.Duplex {
		var err error
		if h, err = newUDHello(s); err != nil {
			return err
		}
		defer h.release()
	}
	if c.server {
		for i := range n {
			r, err := ul.Accept(ctx)
			if err != nil {
				return fmt.Errorf("perftest: waiting for the rdma_cm (SIDR) request of UD QP %d of %d: %w", i, n, err)
			}
			if h != nil {
				if err := h.post(s, i); err != nil {
					r.Reject(nil)
					return err
				}
			}
			if err := r.Answer(s.qps[i].qp.Num(), cm.UDPQKey, nil); err != nil {
				return fmt.Errorf("perftest: answering the rdma_cm (SIDR) request of UD QP %d of %d: %w", i, n, err)
			}
			if h != nil {
				if err := h.receive(ctx, s, i); err != nil {
					return err
				}
			}
		}
		return nil
	}
	raddr, local := cc.conn.RemoteAddr(), cc.conn.LocalAddr()
	sgid := s.Dev.GIDIndex(local)
	if sgid < 0 {
		return fmt.Errorf("perftest: the rdma_cm connection's address %v is none of the device's GIDs", local)
	}
	for i := range n {
		// rdma_cm_client_connection: up to 10 tries, 100 ms apart, of
		// whatever fails (a server that does not listen yet answers
		// "unsupported").
		var svc cm.UDService
		var err error
		for try := 0; try < 10; try++ {
			if svc, err = cc.m.ResolveUD(ctx, raddr, local, nil); err == nil {
				break
			}
			if ctx.Err() != nil || sleepCtx(ctx, 100*time.Millisecond) != nil {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("perftest: resolving UD QP %d of %d with rdma_cm: %w", i, n, err)
		}
		ah, err := s.Dev.CreateAH(s.PD, qp.AddressVector{DGID: raddr.Addr(), SGIDIndex: uint8(sgid), HopLimit: 64, TrafficClass: p.TrafficClass})
		if err != nil {
			return fmt.Errorf("perftest: Failed to create AH for RDMA CM connection: %w", err)
		}
		l := s.qps[i]
		l.ah, l.remoteQPN, l.remoteQKey = ah, svc.QPN, svc.QKey
		if h != nil {
			if err := h.send(ctx, s, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// udHello is the memory of the message that tells a -R UD server the
// client's QPN: room for the GRH and the 4 bytes sent.
type udHello struct {
	buf []byte
	mr  *mr.MR
}

func newUDHello(s *Side) (*udHello, error) {
	h := &udHello{buf: make([]byte, GRHLen+4)}
	var err error
	if h.mr, err = s.Dev.RegMR(s.PD, h.buf, mr.LocalWrite); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *udHello) release() { h.mr.Deregister() }

// post posts the receive of the client's QPN on QP i.
func (h *udHello) post(s *Side, i int) error {
	wr := qp.RecvWR{WRID: 0, SGList: []qp.SGE{{Addr: h.mr.IOVA(), Length: uint32(len(h.buf)), LKey: h.mr.LKey()}}}
	if _, err := s.qps[i].qp.PostRecv([]qp.RecvWR{wr}); err != nil {
		return fmt.Errorf("perftest: posting the receive of the client's QPN on UD QP %d: %w", i, err)
	}
	return nil
}

// receive waits for the client's QPN on QP i and makes the address
// handle to it.
func (h *udHello) receive(ctx context.Context, s *Side, i int) error {
	var wc [1]cq.WC
	if _, err := s.RCQ.Wait(ctx, wc[:]); err != nil {
		return fmt.Errorf("perftest: waiting for the client's QPN on UD QP %d (perftest's client sends it once the SIDR_REP came): %w", i, err)
	}
	l := s.qps[i]
	if wc[0].Status != cq.StatusSuccess || wc[0].Opcode != cq.OpRecv || wc[0].Flags&cq.FlagWithImm == 0 || wc[0].QPNum != uint32(l.qp.Num()) {
		return fmt.Errorf("perftest: the client's QPN on UD QP %d: completion %v, want a RECV with immediate", i, wc[0])
	}
	ah, err := s.Dev.CreateAHFromWC(s.PD, &wc[0], h.buf[:GRHLen])
	if err != nil {
		return fmt.Errorf("perftest: AH for UD connection in RDMA CM: %w", err)
	}
	l.ah, l.remoteQPN, l.remoteQKey = ah, bth.QPN(wc[0].ImmData&0xffffff), cm.UDPQKey
	return nil
}

// send sends QP i's QPN to its peer and waits for the completion.
func (h *udHello) send(ctx context.Context, s *Side, i int) error {
	l := s.qps[i]
	binary.BigEndian.PutUint32(h.buf[GRHLen:], uint32(l.qp.Num()))
	wr := qp.SendWR{Opcode: qp.WRSendWithImm, Flags: qp.SendSignaled, ImmData: uint32(l.qp.Num()),
		AH: l.ah, RemoteQPN: l.remoteQPN, RemoteQKey: l.remoteQKey,
		SGList: []qp.SGE{{Addr: h.mr.IOVA() + GRHLen, Length: 4, LKey: h.mr.LKey()}}}
	if _, err := l.qp.PostSend([]qp.SendWR{wr}); err != nil {
		return fmt.Errorf("perftest: sending UD QP %d's QPN to the server: %w", i, err)
	}
	var wc [1]cq.WC
	if _, err := s.SCQ.Wait(ctx, wc[:]); err != nil {
		return fmt.Errorf("perftest: sending UD QP %d's QPN to the server: %w", i, err)
	}
	if wc[0].Status != cq.StatusSuccess || wc[0].Opcode != cq.OpSend {
		return fmt.Errorf("perftest: sending UD QP %d's QPN to the server: completion %v", i, wc[0])
	}
	return nil
}

// handShakeCM is ctx_hand_shake over rdma_cm (rdma_write_keys,
// rdma_read_keys): each side's struct pingpong_dest as one SEND, of the
// size the peer's version takes; the peer's of either size.
func (c *Conn) handShakeCM(step string, timeout time.Duration, local Dest) (Dest, error) {
	if local.QPN > 0xffffff || local.PSN > 0xffffff {
		return Dest{}, fmt.Errorf("perftest: %s: QPN %#x and PSN %#x must fit 24 bits", step, local.QPN, local.PSN)
	}
	got, err := c.xchg(step, timeout, local.cmKey(cmKeySizeFor(c.remoteVer)), -1)
	if err != nil {
		return Dest{}, err
	}
	d, err := parseCMKey(got)
	if err != nil {
		return Dest{}, fmt.Errorf("perftest: %s: %w", step, err)
	}
	return d, nil
}

// createCMConnection is create_rdma_cm_connection (-R): a handshake of
// the dests main() zeroed, the test QPs connected with rdma_cm (mtu is
// what check_mtu agreed), and another handshake.
func (c *Conn) createCMConnection(mtu qp.MTU) error {
	if c.comm == nil || c.comm.connectQPs == nil {
		return errors.New("perftest: setup: -R (rdma_cm QPs) needs a connection made with DialCM or ListenCM, and its test QPs")
	}
	var l *cm.Listener
	var ul *cm.UDListener
	if c.server {
		// perftest's server listens once its side of the handshake is
		// done, and a client whose first REQ comes sooner is rejected
		// (8) and tries again, which 6.2x's client cannot do: it
		// crashes (rdma_cm_client_connection retries with the nodes
		// it freed; fixed at 6.29). gorxe listens before. UD QPs are
		// resolved in rdma_cm's UDP port space, on the same port.
		var err error
		port := uint16(c.comm.local.Port())
		if c.comm.ud {
			ul, err = c.comm.m.ListenUD(netip.Addr{}, port)
		} else {
			l, err = c.comm.m.Listen(netip.Addr{}, port)
		}
		if err != nil {
			return fmt.Errorf("perftest: listening with rdma_cm for the test QPs: %w", err)
		}
		if ul != nil {
			defer ul.Close()
		} else {
			defer l.Close()
		}
	}
	if _, err := c.handShake("handshake before connecting the QPs with rdma_cm", c.timeout(), Dest{}); err != nil {
		return err
	}
	if err := c.comm.connectQPs(mtu, l, ul); err != nil {
		return err
	}
	_, err := c.handShake("handshake after connecting the QPs with rdma_cm", c.timeout(), Dest{})
	return err
}

// prepareCM readies c for a run with p: with -R, Setup connects the
// side's QPs with rdma_cm; the dests carry the GID index, which the
// binary keys send.
func (c *Conn) prepareCM(p *Params, s *Side, local []Dest, gidIndex int) error {
	if p.RDMACM || p.CommRDMACM {
		if c.comm == nil {
			return errors.New("perftest: -R and -z need a connection made with DialCM or ListenCM")
		}
	} else if c.comm != nil {
		return errors.New("perftest: a connection made with DialCM or ListenCM needs -R or -z")
	}
	if c.comm == nil {
		return nil
	}
	for i := range local {
		local[i].GIDIndex = int32(gidIndex)
	}
	if p.RDMACM {
		c.comm.ud = p.datagram()
		c.comm.connectQPs = func(mtu qp.MTU, l *cm.Listener, ul *cm.UDListener) error {
			if c.comm.ud {
				return c.connectCMUD(s, p, ul)
			}
			return c.connectCM(s, p, mtu, l)
		}
	}
	return nil
}

// connectedCM records the peer's target regions once rdma_cm has
// connected the QPs (-R): ctx_connect does not run.
func (s *Side) connectedCM(remote []Dest) {
	for i := range s.qps {
		s.setRemote(i, remote[i].VAddr, mr.Key(remote[i].RKey))
	}
}

// printCMBanner prints the banner's lines on rdma_cm
// (ctx_print_test_info): "rdma_cm QPs" ON with -R, the data exchange
// method rdma_cm with -R or -z, -R's --tos, and on a server with -R what
// it waits for.
func printCMBanner(w io.Writer, p *Params, b BannerInfo) {
	fmt.Fprintf(w, " rdma_cm QPs\t : %s\n", onOff(p.RDMACM))
	method := "Ethernet"
	switch {
	case b.InProcess:
		method = "in-process"
	case p.RDMACM || p.CommRDMACM:
		method = "rdma_cm"
	}
	fmt.Fprintf(w, " Data ex. method : %s", method)
	if p.RDMACM && p.TrafficClass != 0 {
		fmt.Fprintf(w, " \tTOS    : %d", p.TrafficClass)
	}
	if p.RDMACM && b.Server && !b.InProcess {
		fmt.Fprintf(w, "\n%s\n Waiting for client rdma_cm QP to connect\n Please run the same command with the IB/RoCE interface IP", rule)
	}
	fmt.Fprintln(w)
}

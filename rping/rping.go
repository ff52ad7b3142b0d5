// Package rping speaks librdmacm's rping (librdmacm/examples/rping.c),
// the classic soft-RoCE smoke test, on a gorxe device: either side may be
// the stock tool on rxe or a RoCE NIC.
//
// The client connects with rdma_cm to port 7174 (package cm), and then for
// each ping: it fills a buffer with "rdma-ping-N: " and letters, and SENDs
// its address, rkey and size (a 16-byte struct rping_rdma_info, big
// endian); the server RDMA READs it, SENDs a go-ahead, receives the
// address of the client's sink the same way, RDMA WRITEs the text back
// there and SENDs a go-ahead again. The client checks the echo (-V) and
// prints it (-v); after the count it disconnects, which ends the server.
package rping

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// Params are rping's options that change a run.
type Params struct {
	Count    int  // -C: pings; 0 pings until interrupted
	Size     int  // -S: bytes of ping data
	Verbose  bool // -v: print the ping data
	Validate bool // -V: check that the echo is what was sent
	Debug    bool // -d: print each step to stdout
	// TrafficClass is -t: the connection's IP traffic class (the
	// client's; a server answers with the REQ's).
	TrafficClass uint8
	// GiveUp bounds each wait for a completion once connected: a run in
	// which nothing completes for this long fails with ErrStalled. The
	// kernel tells a C rping that its peer died (the dead process's CM
	// sends a DREQ); a gorxe peer that is killed sends nothing, and a
	// side waiting for its next message would wait for ever. 0 waits
	// for ever, as rping does.
	GiveUp time.Duration
}

// DefaultPort is rping's rdma_cm port.
const DefaultPort = 7174

// Size limits of -S, as rping.c has them: its minimum is
// sizeof(stringify(INT_MAX)) + sizeof("rdma-ping-%d: "), 11 + 15 bytes.
const (
	DefaultSize = 64
	MinSize     = 26
	MaxSize     = 64*1024 - 1
)

// Check checks the parameters as rping's option parser does.
func (p *Params) Check() error {
	if p.Size < MinSize || p.Size > MaxSize {
		return fmt.Errorf("Invalid size %d (valid range is %d to %d)", p.Size, MinSize, MaxSize+1)
	}
	if p.Count < 0 {
		return fmt.Errorf("Invalid count %d", p.Count)
	}
	return nil
}

// infoLen is the size of struct rping_rdma_info: be64 buf, be32 rkey,
// be32 size.
const infoLen = 16

// ErrDisconnected is what a wait ends with when the peer disconnects.
var ErrDisconnected = errors.New("rping: disconnected")

// ErrStalled is what a wait ends with when nothing completed for
// Params.GiveUp.
var ErrStalled = errors.New("rping: stalled")

// side is one end's resources: the control buffers (the receive and send
// infos), the data buffers (the sink, and the client's source), the CQ
// both queues share, and the connection.
type side struct {
	dev    *rnic.Device
	pd     *mr.PD
	cq     *cq.CQ
	ctl    []byte // recv info at 0, send info at infoLen
	ctlMR  *mr.MR
	data   []byte // rdma_buf at 0, start_buf at size (client)
	dMR    *mr.MR
	size   int
	conn   *cm.Conn
	debug  io.Writer
	giveUp time.Duration // Params.GiveUp
}

func newSide(dev *rnic.Device, p Params, debug io.Writer) (*side, error) {
	s := &side{dev: dev, pd: dev.AllocPD(), ctl: make([]byte, 2*infoLen), data: make([]byte, 2*p.Size), size: p.Size, debug: debug, giveUp: p.GiveUp}
	var err error
	if s.cq, err = dev.CreateCQ(2 * sqDepth); err != nil {
		return nil, err
	}
	if s.ctlMR, err = dev.RegMR(s.pd, s.ctl, mr.LocalWrite); err != nil {
		return nil, err
	}
	if s.dMR, err = dev.RegMR(s.pd, s.data, mr.LocalWrite|mr.RemoteRead|mr.RemoteWrite); err != nil {
		return nil, err
	}
	return s, nil
}

// sqDepth is rping's RPING_SQ_DEPTH; its QP takes 2 receives.
const sqDepth = 16

// params are rping's QP and connection parameters; its receive is posted
// before the handshake, as rping posts it before rdma_connect and
// rdma_accept.
func (s *side) params() cm.ConnParams {
	return cm.ConnParams{PD: s.pd, SendCQ: s.cq, RecvCQ: s.cq,
		Cap:    qp.Cap{MaxSendWR: sqDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1},
		Access: mr.LocalWrite | mr.RemoteRead | mr.RemoteWrite, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7,
		Receives: []qp.RecvWR{s.recvWR()}}
}

func (s *side) recvWR() qp.RecvWR {
	return qp.RecvWR{WRID: 1, SGList: []qp.SGE{{Addr: s.ctlMR.IOVA(), Length: infoLen, LKey: s.ctlMR.LKey()}}}
}

func (s *side) debugf(format string, args ...any) {
	if s.debug != nil {
		fmt.Fprintf(s.debug, format, args...)
	}
}

func (s *side) postRecv() error {
	_, err := s.conn.QP().PostRecv([]qp.RecvWR{s.recvWR()})
	return err
}

// sendInfo SENDs the send info: the address, rkey and size of the data
// buffer at off, or (server) whatever the send buffer holds.
func (s *side) sendInfo(off int, format bool) error {
	info := s.ctl[infoLen:]
	if format {
		binary.BigEndian.PutUint64(info, s.dMR.IOVA()+uint64(off))
		binary.BigEndian.PutUint32(info[8:], uint32(s.dMR.RKey()))
		binary.BigEndian.PutUint32(info[12:], uint32(s.size))
		s.debugf("RDMA addr %x rkey %x len %d\n", s.dMR.IOVA()+uint64(off), uint32(s.dMR.RKey()), s.size)
	}
	wr := qp.SendWR{WRID: 2, Opcode: qp.WRSend, Flags: qp.SendSignaled,
		SGList: []qp.SGE{{Addr: s.ctlMR.IOVA() + infoLen, Length: infoLen, LKey: s.ctlMR.LKey()}}}
	_, err := s.conn.QP().PostSend([]qp.SendWR{wr})
	return err
}

// rdma posts an RDMA READ or WRITE of n bytes between the sink and the
// peer's buffer the last received info names.
func (s *side) rdma(op qp.WROpcode, n int) error {
	info := s.ctl[:infoLen]
	wr := qp.SendWR{WRID: 3, Opcode: op, Flags: qp.SendSignaled,
		RemoteAddr: binary.BigEndian.Uint64(info), RKey: mr.Key(binary.BigEndian.Uint32(info[8:])),
		SGList: []qp.SGE{{Addr: s.dMR.IOVA(), Length: uint32(n), LKey: s.dMR.LKey()}}}
	_, err := s.conn.QP().PostSend([]qp.SendWR{wr})
	return err
}

// untilDisconnected returns a context that also ends when the connection
// does, for the waits on the CQ: one watcher for the connection's life,
// not one a wait.
func (s *side) untilDisconnected(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.conn.Disconnected():
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx
}

// wait returns the next completion that is not a SEND's: a receive
// (reposted, as rping's CQ thread does) or an RDMA READ or WRITE. It
// fails with ErrDisconnected once the peer has disconnected and what it
// waited for was flushed.
func (s *side) wait(ctx context.Context) (cq.WC, error) {
	var wcs [1]cq.WC
	if s.giveUp > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, s.giveUp, fmt.Errorf("%w: nothing completed for %v: the peer is gone", ErrStalled, s.giveUp))
		defer cancel()
	}
	for {
		n, err := s.cq.Wait(ctx, wcs[:])
		if err != nil {
			select {
			case <-s.conn.Disconnected():
				return cq.WC{}, ErrDisconnected
			default:
				return cq.WC{}, cmp.Or(context.Cause(ctx), err)
			}
		}
		if n == 0 {
			continue
		}
		wc := wcs[0]
		switch {
		case wc.Status == cq.StatusWRFlushErr:
			return cq.WC{}, ErrDisconnected
		case wc.Status != cq.StatusSuccess:
			return cq.WC{}, fmt.Errorf("cq completion failed status %d", wc.Status)
		case wc.Opcode == cq.OpSend:
			s.debugf("send completion\n")
			continue
		case wc.Opcode == cq.OpRecv:
			s.debugf("recv completion\n")
			if wc.ByteLen != infoLen {
				return wc, fmt.Errorf("Received bogus data, size %d", wc.ByteLen)
			}
			if err := s.postRecv(); err != nil {
				return wc, fmt.Errorf("post recv error: %w", err)
			}
		}
		return wc, nil
	}
}

// Client runs rping's client against the server at addr, from local
// (the zero Addr lets the manager choose), printing to stdout as rping
// does. It returns nil once it has pinged Count times and disconnected.
func Client(ctx context.Context, m *cm.Manager, dev *rnic.Device, addr netip.AddrPort, local netip.Addr, p Params, stdout io.Writer) (err error) {
	var debug io.Writer
	if p.Debug {
		debug = stdout
	}
	s, err := newSide(dev, p, debug)
	if err != nil {
		return err
	}
	cp := s.params()
	cp.Local, cp.TrafficClass = local, p.TrafficClass
	if s.conn, err = m.Dial(ctx, addr, cp); err != nil {
		return fmt.Errorf("connect error: %w", err)
	}
	defer s.conn.Close() // one DREQ, if the run did not disconnect: a peer that died is not waited for
	parent := ctx
	ctx = s.untilDisconnected(ctx)
	sink, start := s.data[:p.Size], s.data[p.Size:]
	c0 := byte(65)
	for ping := 0; p.Count == 0 || ping < p.Count; ping++ {
		fill(start, ping, c0)
		if c0++; c0 > 122 {
			c0 = 65
		}
		if err := s.sendInfo(p.Size, true); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := s.wait(ctx); err != nil { // the go-ahead after the server's READ
			return fmt.Errorf("rping client failed: %w", err)
		}
		if err := s.sendInfo(0, true); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := s.wait(ctx); err != nil { // the go-ahead after its WRITE
			return fmt.Errorf("rping client failed: %w", err)
		}
		if p.Validate && !bytes.Equal(start, sink) {
			return errors.New("data mismatch!")
		}
		if p.Verbose {
			fmt.Fprintf(stdout, "ping data: %s\n", cString(sink))
		}
	}
	// Not ctx, which ends as the connection does: the DREP that ends
	// the connection would race Disconnect's own wait for it.
	return s.conn.Disconnect(parent)
}

// fill writes rping's ping text: "rdma-ping-N: ", then letters from c0
// on, 'A' to 'z' and round again, and a NUL at the end.
func fill(b []byte, ping int, c0 byte) {
	n := copy(b, fmt.Sprintf("rdma-ping-%d: ", ping))
	c := c0
	for i := n; i < len(b); i++ {
		b[i] = c
		if c++; c > 122 {
			c = 65
		}
	}
	b[len(b)-1] = 0
}

// cString returns b up to its first NUL.
func cString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// Server answers one client's connection request from l with rping's
// server loop, printing to stdout as rping does, and returns nil when the
// client disconnects.
func Server(ctx context.Context, dev *rnic.Device, l *cm.Listener, p Params, stdout, stderr io.Writer) (err error) {
	var debug io.Writer
	if p.Debug {
		debug = stdout
	}
	s, err := newSide(dev, p, debug)
	if err != nil {
		return err
	}
	req, err := l.Accept(ctx)
	if err != nil {
		return err
	}
	if s.conn, err = req.Accept(s.params()); err != nil {
		return fmt.Errorf("connect error: %w", err)
	}
	defer s.conn.Close() // one DREQ, if the run did not disconnect: a peer that died is not waited for
	ctx = s.untilDisconnected(ctx)
	sink := s.data[:p.Size]
	err = s.serve(ctx, sink, p.Verbose, stdout)
	if errors.Is(err, ErrDisconnected) {
		fmt.Fprintln(stderr, "server DISCONNECT EVENT...")
		return nil
	}
	return fmt.Errorf("rping server failed: %w", err)
}

func (s *side) serve(ctx context.Context, sink []byte, verbose bool, stdout io.Writer) error {
	for {
		if _, err := s.wait(ctx); err != nil { // the source's info
			return err
		}
		n := int(binary.BigEndian.Uint32(s.ctl[12:]))
		if n > len(sink) {
			return fmt.Errorf("the client's %d bytes do not fit the server's %d", n, len(sink))
		}
		if err := s.rdma(qp.WRRDMARead, n); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := s.wait(ctx); err != nil {
			return err
		}
		if verbose {
			fmt.Fprintf(stdout, "server ping data: %s\n", cString(sink))
		}
		if err := s.sendInfo(0, false); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := s.wait(ctx); err != nil { // the sink's info
			return err
		}
		if err := s.rdma(qp.WRRDMAWrite, len(cString(sink))+1); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if _, err := s.wait(ctx); err != nil {
			return err
		}
		if err := s.sendInfo(0, false); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
	}
}

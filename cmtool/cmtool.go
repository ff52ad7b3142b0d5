// Package cmtool speaks librdmacm's example programs on a gorxe device,
// each over a connection made with rdma_cm (package cm), so that either
// side may be the stock program on rxe or a RoCE NIC:
//
//   - rdma_server and rdma_client (librdmacm/examples/rdma_server.c,
//     rdma_client.c): one 16-byte SEND each way, the client's first, then
//     both disconnect; rdma_xserver and rdma_xclient over RC (their -c r):
//     one 16-byte SEND, the client's, then both disconnect;
//   - ucmatose (cmatose.c): the server SENDs each of its connections
//     message_count messages of message_size bytes, the client answers
//     with as many, and the server disconnects;
//   - udaddy: UD QPs found with service ID resolution, SENDs both ways;
//   - mckey: UD SENDs to an IPv4 multicast group its QPs joined.
//
// Each prints what the C program prints, so that a script reading their
// output reads gorxe's.
package cmtool

import (
	"context"
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

// DefaultPort is the port of rdma_server, rdma_client and ucmatose.
const DefaultPort = 7471

// msgLen is the size of rdma_server's and rdma_client's messages.
const msgLen = 16

// endpoint is a connection's resources: a PD, a CQ for each queue, and a
// registered buffer.
type endpoint struct {
	pd     *mr.PD
	scq    *cq.CQ
	rcq    *cq.CQ
	buf    []byte
	mr     *mr.MR
	conn   *cm.Conn
	sigAll bool
}

func newEndpoint(dev *rnic.Device, size, depth int) (*endpoint, error) {
	e := &endpoint{pd: dev.AllocPD(), buf: make([]byte, max(size, 1)), sigAll: true}
	var err error
	if e.scq, err = dev.CreateCQ(depth); err != nil {
		return nil, err
	}
	if e.rcq, err = dev.CreateCQ(depth); err != nil {
		return nil, err
	}
	if e.mr, err = dev.RegMR(e.pd, e.buf, mr.LocalWrite); err != nil {
		return nil, err
	}
	return e, nil
}

// params returns the connection's parameters: depth send and receive
// WRs, every send signaled (sq_sig_all), and recvs receives of the
// buffer posted before the handshake.
func (e *endpoint) params(depth, recvs int, inline uint32) cm.ConnParams {
	p := cm.ConnParams{PD: e.pd, SendCQ: e.scq, RecvCQ: e.rcq, SigAll: e.sigAll,
		Cap: qp.Cap{MaxSendWR: uint32(depth), MaxRecvWR: uint32(depth), MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: inline}}
	for range recvs {
		p.Receives = append(p.Receives, e.recvWR())
	}
	return p
}

func (e *endpoint) recvWR() qp.RecvWR {
	return qp.RecvWR{SGList: []qp.SGE{{Addr: e.mr.IOVA(), Length: uint32(len(e.buf)), LKey: e.mr.LKey()}}}
}

// send posts n SENDs of the buffer.
func (e *endpoint) send(n int, inline bool) error {
	wr := qp.SendWR{Opcode: qp.WRSend, SGList: []qp.SGE{{Addr: e.mr.IOVA(), Length: uint32(len(e.buf)), LKey: e.mr.LKey()}}}
	if inline {
		wr.Flags |= qp.SendInline
	}
	for range n {
		if _, err := e.conn.QP().PostSend([]qp.SendWR{wr}); err != nil {
			return err
		}
	}
	return nil
}

// ErrStalled is what a run's wait ends with when nothing came for its
// give-up time: the peer is taken for gone. The kernel tells a C program
// that its peer died (the dead process's rdma_cm sends a DREQ, which
// flushes the survivor's work); a gorxe that is killed sends nothing, and
// a side waiting for its next message would wait for ever.
var ErrStalled = errors.New("stalled")

// withGiveUp bounds a wait for the peer by d (none when d is 0): the wait's
// ctx ends with ErrStalled, naming what did not come.
func withGiveUp(ctx context.Context, d time.Duration, what string) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, d, fmt.Errorf("%w: %s for %v: the peer is gone", ErrStalled, what, d))
}

// waitCQ waits for completions on c, as cq.Wait, for at most d: a wait
// that d ends returns ErrStalled.
func waitCQ(ctx context.Context, c *cq.CQ, wcs []cq.WC, d time.Duration) (int, error) {
	wctx, cancel := withGiveUp(ctx, d, "nothing completed")
	defer cancel()
	n, err := c.Wait(wctx, wcs)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		return n, context.Cause(wctx)
	}
	return n, err
}

// disconnect disconnects conn, waiting for the DREP for at most d.
func disconnect(ctx context.Context, conn *cm.Conn, d time.Duration) error {
	ctx, cancel := withGiveUp(ctx, d, "no DREP")
	defer cancel()
	return conn.Disconnect(ctx)
}

// complete waits for n completions on c, each a success, giving up when
// none comes for d.
func complete(ctx context.Context, c *cq.CQ, n int, d time.Duration) error {
	wcs := make([]cq.WC, 8)
	for done := 0; done < n; {
		k, err := waitCQ(ctx, c, wcs[:min(len(wcs), n-done)], d)
		if err != nil {
			return err
		}
		for _, wc := range wcs[:k] {
			if wc.Status != cq.StatusSuccess {
				return fmt.Errorf("completion %v", wc)
			}
		}
		done += k
	}
	return nil
}

// RdmaServer is librdmacm's rdma_server: it takes one connection request
// from l, receives the client's 16-byte message, answers with its own,
// and disconnects. It prints "rdma_server: start" and "rdma_server: end
// N" around the run, as the C program, and returns N's error. Once
// connected, a wait in which nothing comes for giveUp (a completion, the
// DREP) fails with ErrStalled; 0 waits for ever, as the C program.
func RdmaServer(ctx context.Context, dev *rnic.Device, l *cm.Listener, giveUp time.Duration, stdout io.Writer) error {
	return program(stdout, "rdma_server", func() error { return rdmaServer(ctx, dev, l, giveUp, false) })
}

// RdmaXServer is librdmacm's rdma_xserver with -c r (RC, its default):
// rdma_server but that it accepts with its SRQ number as private data (4
// bytes, 0 without XRC) and does not answer. It prints
// "rdma_xserver: start" and "rdma_xserver: end N", as the C program run
// under that name.
func RdmaXServer(ctx context.Context, dev *rnic.Device, l *cm.Listener, giveUp time.Duration, stdout io.Writer) error {
	return program(stdout, "rdma_xserver", func() error { return rdmaServer(ctx, dev, l, giveUp, true) })
}

// rdmaServer runs rdma_server, or with x rdma_xserver.
func rdmaServer(ctx context.Context, dev *rnic.Device, l *cm.Listener, giveUp time.Duration, x bool) error {
	e, err := newEndpoint(dev, msgLen, 1)
	if err != nil {
		return err
	}
	req, err := l.Accept(ctx)
	if err != nil {
		return fmt.Errorf("rdma_get_request: %w", err)
	}
	var p cm.ConnParams
	if x {
		p = e.params(1, 1, 0)           // it sends nothing
		p.PrivateData = make([]byte, 4) // the SRQ number, big-endian: none over RC
	} else {
		p = e.params(1, 1, msgLen)
	}
	if e.conn, err = req.Accept(p); err != nil {
		return fmt.Errorf("rdma_accept: %w", err)
	}
	defer e.conn.Close()
	if err := complete(ctx, e.rcq, 1, giveUp); err != nil {
		return fmt.Errorf("rdma_get_recv_comp: %w", err)
	}
	if !x {
		if err := e.send(1, true); err != nil {
			return fmt.Errorf("rdma_post_send: %w", err)
		}
		if err := complete(ctx, e.scq, 1, giveUp); err != nil {
			return fmt.Errorf("rdma_get_send_comp: %w", err)
		}
	}
	return disconnect(ctx, e.conn, giveUp)
}

// RdmaClient is librdmacm's rdma_client: it connects to server, sends a
// 16-byte message, receives the server's, and disconnects, giving up as
// RdmaServer does.
func RdmaClient(ctx context.Context, m *cm.Manager, dev *rnic.Device, server netip.AddrPort, local netip.Addr, giveUp time.Duration, stdout io.Writer) error {
	return program(stdout, "rdma_client", func() error { return rdmaClient(ctx, m, dev, server, local, giveUp, false) })
}

// RdmaXClient is librdmacm's rdma_xclient with -c r: rdma_client but that
// it posts no receive and waits for no answer.
func RdmaXClient(ctx context.Context, m *cm.Manager, dev *rnic.Device, server netip.AddrPort, local netip.Addr, giveUp time.Duration, stdout io.Writer) error {
	return program(stdout, "rdma_xclient", func() error { return rdmaClient(ctx, m, dev, server, local, giveUp, true) })
}

// rdmaClient runs rdma_client, or with x rdma_xclient.
func rdmaClient(ctx context.Context, m *cm.Manager, dev *rnic.Device, server netip.AddrPort, local netip.Addr, giveUp time.Duration, x bool) error {
	e, err := newEndpoint(dev, msgLen, 1)
	if err != nil {
		return err
	}
	recvs := 1
	if x {
		recvs = 0
	}
	p := e.params(1, recvs, msgLen)
	p.Local = local
	if e.conn, err = m.Dial(ctx, server, p); err != nil {
		return fmt.Errorf("rdma_connect: %w", err)
	}
	defer e.conn.Close()
	if err := e.send(1, true); err != nil {
		return fmt.Errorf("rdma_post_send: %w", err)
	}
	if err := complete(ctx, e.scq, 1, giveUp); err != nil {
		return fmt.Errorf("rdma_get_send_comp: %w", err)
	}
	if !x {
		if err := complete(ctx, e.rcq, 1, giveUp); err != nil {
			return fmt.Errorf("rdma_get_recv_comp: %w", err)
		}
	}
	return disconnect(ctx, e.conn, giveUp)
}

// program prints name's "start" and "end N" lines around run, as the C
// programs print them, and returns run's error.
func program(stdout io.Writer, name string, run func() error) error {
	fmt.Fprintf(stdout, "%s: start\n", name)
	err := run()
	fmt.Fprintf(stdout, "%s: end %d\n", name, status(err))
	return err
}

// status is the C programs' return value for err: 0, or -1.
func status(err error) int {
	if err != nil {
		return -1
	}
	return 0
}

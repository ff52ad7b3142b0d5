package cmtool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// CMAToseParams are ucmatose's options that change a run.
type CMAToseParams struct {
	Connections  int   // -c (1)
	MessageCount int   // -C (10)
	MessageSize  int   // -S (100)
	TOS          uint8 // -t: the connections' traffic class (client)
	// GiveUp bounds each wait for the peer once connected (a completion,
	// the server's DREP, the client's DREQ): nothing for this long fails
	// the run with ErrStalled. 0 waits for ever, as the C programs do;
	// mckey's receivers always do, a group's sender may come at any time.
	GiveUp time.Duration
}

// DefaultCMAToseParams returns ucmatose's defaults.
func DefaultCMAToseParams() CMAToseParams {
	return CMAToseParams{Connections: 1, MessageCount: 10, MessageSize: 100}
}

// Check refuses what ucmatose cannot run.
func (p *CMAToseParams) Check() error {
	switch {
	case p.Connections < 1:
		return fmt.Errorf("-c %d: at least one connection", p.Connections)
	case p.MessageCount < 0 || p.MessageSize < 0:
		return errors.New("-C and -S are not negative")
	}
	return nil
}

// messages returns the count of messages each way: none when the size is
// 0, as cmatose's create_message has it.
func (p *CMAToseParams) messages() int {
	if p.MessageSize == 0 {
		return 0
	}
	return p.MessageCount
}

// CMAToseServer is ucmatose's server: it accepts Connections requests
// from l, each with MessageCount receives posted before it accepts; then
// SENDs MessageCount messages on each, waits for its sends and for the
// client's as many replies, and disconnects them all. It prints the C
// program's lines and returns ucmatose's status (0 on success).
func CMAToseServer(ctx context.Context, dev *rnic.Device, l *cm.Listener, p CMAToseParams, stdout io.Writer) int {
	fmt.Fprintln(stdout, "cmatose: starting server")
	ret := cmatoseServer(ctx, dev, l, p, stdout)
	fmt.Fprintln(stdout, "test complete")
	fmt.Fprintf(stdout, "return status %d\n", ret)
	return ret
}

func cmatoseServer(ctx context.Context, dev *rnic.Device, l *cm.Listener, p CMAToseParams, stdout io.Writer) int {
	n := p.messages()
	depth := max(n, 1)
	var eps []*endpoint
	defer func() {
		for _, e := range eps {
			e.conn.QP().Destroy()
		}
	}()
	for len(eps) < p.Connections {
		req, err := l.Accept(ctx)
		if err != nil {
			fmt.Fprintf(stdout, "cmatose: failure in rdma_get_cm_event in connect events: %v\n", err)
			return -1
		}
		e, err := newEndpoint(dev, p.MessageSize, depth)
		if err == nil {
			e.conn, err = req.Accept(e.params(depth, n, 0))
		}
		if err != nil {
			// As connect_handler: the QP, or the accept, failed.
			if errors.Is(err, qp.ErrAttr) {
				fmt.Fprintf(stdout, "cmatose: unable to create QP: %v\n", err)
			} else {
				fmt.Fprintf(stdout, "cmatose: failure accepting: %v\n", err)
			}
			fmt.Fprintln(stdout, "cmatose: failing connection request")
			req.Reject(nil)
			return -1
		}
		if err = e.conn.Established(ctx); err != nil {
			fmt.Fprintf(stdout, "cmatose: failure accepting: %v\n", err)
			return -1
		}
		eps = append(eps, e)
	}
	if n > 0 {
		fmt.Fprintln(stdout, "initiating data transfers")
		for _, e := range eps {
			if err := e.send(n, false); err != nil {
				fmt.Fprintf(stdout, "failed to post sends: %v\n", err)
				return -1
			}
		}
		fmt.Fprintln(stdout, "completing sends")
		for _, e := range eps {
			if err := complete(ctx, e.scq, n, p.GiveUp); err != nil {
				fmt.Fprintf(stdout, "cmatose: failed polling CQ: %v\n", err)
				return -1
			}
		}
		fmt.Fprintln(stdout, "receiving data transfers")
		for _, e := range eps {
			if err := complete(ctx, e.rcq, n, p.GiveUp); err != nil {
				fmt.Fprintf(stdout, "cmatose: failed polling CQ: %v\n", err)
				return -1
			}
		}
		fmt.Fprintln(stdout, "data transfers complete")
	}
	fmt.Fprintln(stdout, "cmatose: disconnecting")
	for _, e := range eps {
		if err := disconnect(ctx, e.conn, p.GiveUp); err != nil {
			fmt.Fprintf(stdout, "cmatose: disconnect: %v\n", err)
			return -1
		}
	}
	fmt.Fprintln(stdout, "disconnected")
	return 0
}

// CMAToseClient is ucmatose's client: it opens Connections connections to
// server, each with MessageCount receives posted before it connects (and
// retry count 5, as cmatose.c); it waits for the server's messages on each,
// replies with as many, and waits for the server to disconnect.
func CMAToseClient(ctx context.Context, m *cm.Manager, dev *rnic.Device, server netip.AddrPort, local netip.Addr, p CMAToseParams, stdout io.Writer) int {
	fmt.Fprintln(stdout, "cmatose: starting client")
	ret := cmatoseClient(ctx, m, dev, server, local, p, stdout)
	fmt.Fprintln(stdout, "test complete")
	fmt.Fprintf(stdout, "return status %d\n", ret)
	return ret
}

func cmatoseClient(ctx context.Context, m *cm.Manager, dev *rnic.Device, server netip.AddrPort, local netip.Addr, p CMAToseParams, stdout io.Writer) int {
	n := p.messages()
	depth := max(n, 1)
	fmt.Fprintln(stdout, "cmatose: connecting")
	var eps []*endpoint
	defer func() {
		for _, e := range eps {
			e.conn.QP().Destroy()
		}
	}()
	for range p.Connections {
		e, err := newEndpoint(dev, p.MessageSize, depth)
		if err != nil {
			fmt.Fprintf(stdout, "cmatose: unable to create QP: %v\n", err)
			return -1
		}
		cp := e.params(depth, n, 0)
		cp.Local, cp.TrafficClass = local, p.TOS
		cp.ResponderResources, cp.InitiatorDepth, cp.RetryCount = 1, 1, 5
		if e.conn, err = m.Dial(ctx, server, cp); err != nil {
			var rej *cm.Rejected
			if errors.Is(err, qp.ErrAttr) { // the QP, made before the REQ
				fmt.Fprintf(stdout, "cmatose: unable to create QP: %v\n", err)
			} else if errors.As(err, &rej) {
				fmt.Fprintf(stdout, "cmatose: event: RDMA_CM_EVENT_REJECTED, error: %d\n", rej.Reason)
			} else {
				fmt.Fprintf(stdout, "cmatose: event: RDMA_CM_EVENT_UNREACHABLE, error: %v\n", err)
			}
			return -1
		}
		eps = append(eps, e)
	}
	if n > 0 {
		fmt.Fprintln(stdout, "receiving data transfers")
		for _, e := range eps {
			if err := complete(ctx, e.rcq, n, p.GiveUp); err != nil {
				fmt.Fprintf(stdout, "cmatose: failed polling CQ: %v\n", err)
				return -1
			}
		}
		fmt.Fprintln(stdout, "sending replies")
		for _, e := range eps {
			if err := e.send(n, false); err != nil {
				fmt.Fprintf(stdout, "failed to post sends: %v\n", err)
				return -1
			}
		}
		fmt.Fprintln(stdout, "data transfers complete")
	}
	for _, e := range eps {
		if err := disconnected(ctx, e.conn, p.GiveUp); err != nil {
			fmt.Fprintf(stdout, "cmatose: failure in rdma_get_cm_event in disconnect events: %v\n", err)
			return -1
		}
	}
	return 0
}

// disconnected waits for the peer to end conn, for at most d.
func disconnected(ctx context.Context, conn *cm.Conn, d time.Duration) error {
	ctx, cancel := withGiveUp(ctx, d, "no DREQ")
	defer cancel()
	select {
	case <-conn.Disconnected():
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

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
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// UDAddyPort is udaddy's port (it has no option for it), in rdma_cm's UDP
// port space.
const UDAddyPort = 7174

// udNode is one of udaddy's UD endpoints: a UD QP with rdma_cm's UDP
// Q_Key, one CQ for both queues, and where replies go. Its buffer has a
// slot (the GRH area and a message) for each receive, and one more that
// its sends carry: udaddy posts every receive on one buffer, but then a
// receive's GRH, read for the reply's address handle, would be written
// over by the next message as it is read.
type udNode struct {
	dev       *rnic.Device
	pd        *mr.PD
	cq        *cq.CQ
	qp        *rnic.QP
	buf       []byte
	mr        *mr.MR
	size      int
	slot      int // GRH area and message
	depth     int // receive slots; the send slot follows them
	ah        *qp.AH
	remoteQPN bth.QPN
	qkey      uint32
}

// newUDNode makes a node for p's messages, with a receive posted for
// each unless noRecvs.
func newUDNode(dev *rnic.Device, p CMAToseParams, noRecvs bool) (*udNode, error) {
	n := p.messages()
	depth := max(n, 1)
	if mtu := dev.MTU().Bytes(); n > 0 && p.MessageSize > mtu {
		return nil, fmt.Errorf("message_size %d is larger than active mtu %d", p.MessageSize, mtu)
	}
	u := &udNode{dev: dev, pd: dev.AllocPD(), size: p.MessageSize, slot: wire.GRHLen + max(p.MessageSize, 1), depth: depth}
	u.buf = make([]byte, (depth+1)*u.slot)
	var err error
	if u.cq, err = dev.CreateCQ(2 * depth); err != nil {
		return nil, err
	}
	if u.mr, err = dev.RegMR(u.pd, u.buf, mr.LocalWrite); err != nil {
		return nil, err
	}
	if u.qp, err = dev.CreateQP(qp.InitAttr{Type: qp.TypeUD, PD: u.pd, SendCQ: u.cq, RecvCQ: u.cq,
		Cap: qp.Cap{MaxSendWR: uint32(depth), MaxRecvWR: uint32(depth), MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	if err := cm.InitUD(u.qp, cm.UDPQKey); err != nil {
		return nil, err
	}
	recvs := n
	if noRecvs {
		recvs = 0
	}
	for i := range recvs {
		recv := qp.RecvWR{WRID: uint64(i), SGList: []qp.SGE{{Addr: u.mr.IOVA() + uint64(i*u.slot), Length: uint32(u.slot), LKey: u.mr.LKey()}}}
		if _, err := u.qp.PostRecv([]qp.RecvWR{recv}); err != nil {
			return nil, fmt.Errorf("failed to post receives: %w", err)
		}
	}
	return u, nil
}

// send posts n UD SENDs with immediate data, the immediate being this
// node's QPN (so that the peer knows whom to answer).
func (u *udNode) send(n int, signaled bool) error {
	wr := qp.SendWR{Opcode: qp.WRSendWithImm, ImmData: uint32(u.qp.Num()), AH: u.ah, RemoteQPN: u.remoteQPN, RemoteQKey: u.qkey,
		SGList: []qp.SGE{{Addr: u.mr.IOVA() + uint64(u.depth*u.slot+wire.GRHLen), Length: uint32(u.size), LKey: u.mr.LKey()}}}
	if signaled {
		wr.Flags = qp.SendSignaled
	}
	for range n {
		if _, err := u.qp.PostSend([]qp.SendWR{wr}); err != nil {
			return fmt.Errorf("failed to post sends: %w", err)
		}
	}
	return nil
}

// poll waits for n completions, giving up when none comes for giveUp;
// with the first receive it makes the reply's address handle, as udaddy's
// server does (the sender's QPN is the immediate data).
func (u *udNode) poll(ctx context.Context, n int, giveUp time.Duration) error {
	wcs := make([]cq.WC, 8)
	for done := 0; done < n; {
		k, err := waitCQ(ctx, u.cq, wcs[:min(len(wcs), n-done)], giveUp)
		if err != nil {
			return err
		}
		for _, wc := range wcs[:k] {
			if wc.Status != cq.StatusSuccess {
				return fmt.Errorf("completion %v", wc)
			}
			if wc.Opcode == cq.OpRecv && u.ah == nil {
				grh := u.buf[int(wc.WRID)*u.slot:][:wire.GRHLen]
				if u.ah, err = u.dev.CreateAHFromWC(u.pd, &wc, grh); err != nil {
					return fmt.Errorf("failed to create reply AH: %w", err)
				}
				u.remoteQPN, u.qkey = bth.QPN(wc.ImmData), cm.UDPQKey
			}
		}
		done += k
	}
	return nil
}

// UDAddyServer is librdmacm's udaddy as server: for each of Connections
// service ID resolution requests on l (rdma_cm's UDP port space, port
// 7174) it makes a UD QP with MessageCount receives posted and answers
// with its QPN; it then receives the clients' messages, answers each
// client with as many, and waits for those sends.
func UDAddyServer(ctx context.Context, dev *rnic.Device, l *cm.UDListener, p CMAToseParams, stdout io.Writer) int {
	fmt.Fprintln(stdout, "udaddy: starting server")
	ret := udaddyServer(ctx, dev, l, p, stdout)
	fmt.Fprintln(stdout, "test complete")
	fmt.Fprintf(stdout, "return status %d\n", ret)
	return ret
}

func udaddyServer(ctx context.Context, dev *rnic.Device, l *cm.UDListener, p CMAToseParams, stdout io.Writer) int {
	n := p.messages()
	var nodes []*udNode
	defer func() {
		for _, u := range nodes {
			u.qp.Destroy()
		}
	}()
	for len(nodes) < p.Connections {
		req, err := l.Accept(ctx)
		if err != nil {
			fmt.Fprintf(stdout, "udaddy: failure accepting: %v\n", err)
			return -1
		}
		u, err := newUDNode(dev, p, false)
		if err != nil {
			fmt.Fprintf(stdout, "udaddy: %v\nudaddy: failing connection request\n", err)
			req.Reject(nil)
			return -1
		}
		if err := req.Answer(u.qp.Num(), cm.UDPQKey, nil); err != nil {
			fmt.Fprintf(stdout, "udaddy: failure accepting: %v\n", err)
			return -1
		}
		nodes = append(nodes, u)
	}
	if n == 0 {
		return 0
	}
	fmt.Fprintln(stdout, "receiving data transfers")
	for _, u := range nodes {
		if err := u.poll(ctx, n, p.GiveUp); err != nil {
			fmt.Fprintf(stdout, "udaddy: failed polling CQ: %v\n", err)
			return -1
		}
	}
	fmt.Fprintln(stdout, "sending replies")
	for _, u := range nodes {
		if err := u.send(n, true); err != nil {
			fmt.Fprintln(stdout, err)
			return -1
		}
	}
	for _, u := range nodes {
		if err := u.poll(ctx, n, p.GiveUp); err != nil {
			fmt.Fprintf(stdout, "udaddy: failed polling CQ: %v\n", err)
			return -1
		}
	}
	fmt.Fprintln(stdout, "data transfers complete")
	return 0
}

// UDAddyClient is udaddy as client: it resolves the server's UD QP for
// each of Connections nodes (SIDR), sends MessageCount messages from each
// and receives the server's replies.
func UDAddyClient(ctx context.Context, m *cm.Manager, dev *rnic.Device, server netip.Addr, local netip.Addr, p CMAToseParams, stdout io.Writer) int {
	fmt.Fprintln(stdout, "udaddy: starting client")
	ret := udaddyClient(ctx, m, dev, server, local, p, stdout)
	fmt.Fprintln(stdout, "test complete")
	fmt.Fprintf(stdout, "return status %d\n", ret)
	return ret
}

func udaddyClient(ctx context.Context, m *cm.Manager, dev *rnic.Device, server netip.Addr, local netip.Addr, p CMAToseParams, stdout io.Writer) int {
	n := p.messages()
	fmt.Fprintln(stdout, "udaddy: connecting")
	var nodes []*udNode
	defer func() {
		for _, u := range nodes {
			u.qp.Destroy()
		}
	}()
	for range p.Connections {
		u, err := newUDNode(dev, p, false)
		if err != nil {
			fmt.Fprintf(stdout, "udaddy: %v\n", err)
			return -1
		}
		nodes = append(nodes, u)
		svc, err := m.ResolveUD(ctx, netip.AddrPortFrom(server, UDAddyPort), local, nil)
		if err != nil {
			var se *cm.ErrSIDR
			if errors.As(err, &se) {
				fmt.Fprintf(stdout, "udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: %d\n", se.Status)
			} else {
				fmt.Fprintf(stdout, "udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: %v\n", err)
			}
			return -1
		}
		av := qp.AddressVector{DGID: server, HopLimit: 64, TrafficClass: p.TOS}
		src := local
		if !src.IsValid() {
			src = m.LocalFor(server)
		}
		if i := dev.GIDIndex(src); i >= 0 {
			av.SGIDIndex = uint8(i)
		}
		if u.ah, err = dev.CreateAH(u.pd, av); err != nil {
			fmt.Fprintf(stdout, "udaddy: failure creating address handle: %v\n", err)
			return -1
		}
		u.remoteQPN, u.qkey = svc.QPN, svc.QKey
	}
	if n == 0 {
		return 0
	}
	fmt.Fprintln(stdout, "initiating data transfers")
	for _, u := range nodes {
		if err := u.send(n, false); err != nil {
			fmt.Fprintln(stdout, err)
			return -1
		}
	}
	fmt.Fprintln(stdout, "receiving data transfers")
	for _, u := range nodes {
		if err := u.poll(ctx, n, p.GiveUp); err != nil {
			fmt.Fprintf(stdout, "udaddy: failed polling CQ: %v\n", err)
			return -1
		}
	}
	fmt.Fprintln(stdout, "data transfers complete")
	return 0
}

package cm_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// Two devices on an in-memory fabric: one listens on port 7471, the other
// dials it, and the QPs the connection manager made carry a SEND. Over
// the udp link, the same code connects two hosts, or gorxe and the
// kernel's rdma_cm.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f := mem.NewFabric()
	open := func(addr string) (*rnic.Device, *cm.Manager) {
		l, _ := f.NewLink(netip.MustParseAddr(addr))
		dev, _ := rnic.Open(rnic.Config{Link: l})
		m, _ := cm.New(dev, cm.Config{})
		return dev, m
	}
	sdev, server := open("10.0.0.2")
	cdev, client := open("10.0.0.1")
	defer sdev.Close()
	defer cdev.Close()

	params := func(dev *rnic.Device, buf []byte) cm.ConnParams {
		pd := dev.AllocPD()
		c, _ := dev.CreateCQ(16)
		m, _ := dev.RegMR(pd, buf, mr.LocalWrite)
		return cm.ConnParams{PD: pd, SendCQ: c, RecvCQ: c,
			Cap:      qp.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64},
			Receives: []qp.RecvWR{{WRID: 1, SGList: []qp.SGE{{Addr: m.IOVA(), Length: uint32(len(buf)), LKey: m.LKey()}}}}}
	}
	l, _ := server.Listen(netip.Addr{}, 7471)
	got := make([]byte, 64)
	done := make(chan string)
	go func() {
		req, _ := l.Accept(ctx)
		p := params(sdev, got)
		conn, _ := req.Accept(p)
		var wc [1]cq.WC
		n, _ := p.RecvCQ.Wait(ctx, wc[:])
		done <- fmt.Sprintf("server: %d completion, %q from %v", n, got[:wc[0].ByteLen], conn.RemoteAddr().Addr())
	}()

	conn, err := client.Dial(ctx, netip.MustParseAddrPort("10.0.0.2:7471"), params(cdev, make([]byte, 64)))
	if err != nil {
		fmt.Println(err)
		return
	}
	msg := []byte("hello over rdma_cm")
	conn.QP().PostSend([]qp.SendWR{{Opcode: qp.WRSend, Flags: qp.SendInline, Inline: msg}})
	fmt.Println(<-done)
	conn.Disconnect(ctx)
	// Output: server: 1 completion, "hello over rdma_cm" from 10.0.0.1
}

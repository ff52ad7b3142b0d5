package rnic_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/netip"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/link/udp"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire/bth"
)

// host is one end of the examples: a device, a registered buffer and a
// connected QP with its completion queues.
type host struct {
	dev      *rnic.Device
	buf      []byte
	mr       *mr.MR
	qp       *rnic.QP
	scq, rcq *cq.CQ
}

// newHost opens a device on l, registers a 4 KiB buffer that the peer may
// write, read and use for atomics, and creates an RC QP.
func newHost(l *mem.Link) (*host, error) {
	dev, err := rnic.Open(rnic.Config{Link: l})
	if err != nil {
		return nil, err
	}
	return setUp(dev)
}

func setUp(dev *rnic.Device) (*host, error) {
	h := &host{dev: dev, buf: make([]byte, 4096)}
	pd := dev.AllocPD()
	var err error
	if h.mr, err = dev.RegMR(pd, h.buf, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead|mr.RemoteAtomic); err != nil {
		return nil, err
	}
	if h.scq, err = dev.CreateCQ(16); err != nil {
		return nil, err
	}
	if h.rcq, err = dev.CreateCQ(16); err != nil {
		return nil, err
	}
	h.qp, err = dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: pd, SendCQ: h.scq, RecvCQ: h.rcq,
		Cap: qp.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	return h, err
}

// sge names n bytes of h's buffer from off.
func (h *host) sge(off, n int) []qp.SGE {
	return []qp.SGE{{Addr: h.mr.IOVA() + uint64(off), Length: uint32(n), LKey: h.mr.LKey()}}
}

// await waits for one completion on c.
func await(c *cq.CQ) cq.WC {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wc [1]cq.WC
	if _, err := c.Wait(ctx, wc[:]); err != nil {
		log.Fatal(err)
	}
	return wc[0]
}

// Example shows the verbs end to end on two devices joined by an
// in-process fabric: register memory, connect two RC QPs, and run an RDMA
// WRITE, an RDMA READ, a SEND to a posted receive, and an atomic
// fetch-and-add, each completing on a CQ with rdma-core's status.
func Example() {
	fabric := mem.NewFabric()
	la, _ := fabric.NewLink(netip.MustParseAddr("10.0.0.1"))
	lb, _ := fabric.NewLink(netip.MustParseAddr("10.0.0.2"))
	a, err := newHost(la)
	if err != nil {
		log.Fatal(err)
	}
	defer a.dev.Close()
	b, err := newHost(lb)
	if err != nil {
		log.Fatal(err)
	}
	defer b.dev.Close()

	// Each side learns the other's QPN, first PSN and GID out of band
	// (perftest uses a TCP connection), then moves RESET -> INIT -> RTR -> RTS.
	if err := a.qp.Connect(rnic.ConnectAttr{Local: a.qp.Local(100), Remote: b.qp.Local(200),
		Access: mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic}); err != nil {
		log.Fatal(err)
	}
	if err := b.qp.Connect(rnic.ConnectAttr{Local: b.qp.Local(200), Remote: a.qp.Local(100),
		Access: mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic}); err != nil {
		log.Fatal(err)
	}

	// RDMA WRITE: A's bytes land in B's buffer; B's CPU takes no part.
	copy(a.buf, "hello, RDMA")
	a.qp.PostSend([]qp.SendWR{{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGList: a.sge(0, 11), RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}})
	wc := await(a.scq)
	fmt.Printf("%v %v: B holds %q\n", wc.Opcode, wc.Status, b.buf[:11])

	// RDMA READ: A fetches those bytes back into another part of its buffer.
	a.qp.PostSend([]qp.SendWR{{WRID: 2, Opcode: qp.WRRDMARead, Flags: qp.SendSignaled,
		SGList: a.sge(100, 5), RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}})
	wc = await(a.scq)
	fmt.Printf("%v %v: %d bytes, %q\n", wc.Opcode, wc.Status, wc.ByteLen, a.buf[100:105])

	// SEND and RECV: B posts a receive; A's message fills it.
	b.qp.PostRecv([]qp.RecvWR{{WRID: 7, SGList: b.sge(1024, 64)}})
	copy(a.buf[200:], "a message")
	a.qp.PostSend([]qp.SendWR{{WRID: 3, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: a.sge(200, 9)}})
	await(a.scq)
	wc = await(b.rcq)
	fmt.Printf("%v %v: receive %d got %q\n", wc.Opcode, wc.Status, wc.WRID, b.buf[1024:1024+wc.ByteLen])

	// Atomic fetch-and-add on an 8-byte word in B's memory; the original
	// value comes back into A's buffer.
	binary.NativeEndian.PutUint64(b.buf[512:], 40)
	a.qp.PostSend([]qp.SendWR{{WRID: 4, Opcode: qp.WRAtomicFetchAndAdd, Flags: qp.SendSignaled,
		SGList: a.sge(300, 8), RemoteAddr: b.mr.IOVA() + 512, RKey: b.mr.RKey(), CompareAdd: 2}})
	wc = await(a.scq)
	fmt.Printf("%v %v: was %d, now %d\n", wc.Opcode, wc.Status,
		binary.NativeEndian.Uint64(a.buf[300:]), binary.NativeEndian.Uint64(b.buf[512:]))
	// Output:
	// RDMA_WRITE success: B holds "hello, RDMA"
	// RDMA_READ success: 5 bytes, "hello"
	// RECV success: receive 7 got "a message"
	// FETCH_ADD success: was 40, now 42
}

// Example_udp shows what two processes do to connect over the network:
// each opens a device on a kernel UDP socket (no privilege needed), tells
// the other its QP number, first PSN, GID, buffer address and rkey in its
// own way (here JSON over a TCP connection), and connects. The client then
// writes into the server's buffer with an RDMA WRITE with immediate, whose
// immediate data consumes a receive the server posted: the server learns
// of the WRITE from a completion, as RDMA programs do. Both run in this one
// program, on two loopback addresses, with a RoCE port of their own.
func Example_udp() {
	const rocePort = 47913
	type hello struct { // what the two sides exchange
		End  rnic.Endpoint
		Addr uint64
		RKey mr.Key
	}
	open := func(addr string) *host {
		l, err := udp.Open(udp.Config{Addr: netip.MustParseAddr(addr), Port: rocePort})
		if err != nil {
			log.Fatal(err)
		}
		dev, err := rnic.Open(rnic.Config{Link: l, Port: rocePort})
		if err != nil {
			log.Fatal(err)
		}
		h, err := setUp(dev)
		if err != nil {
			log.Fatal(err)
		}
		return h
	}
	// exchange sends ours on c and returns the peer's.
	exchange := func(c net.Conn, ours hello) hello {
		go json.NewEncoder(c).Encode(ours)
		var theirs hello
		if err := json.NewDecoder(c).Decode(&theirs); err != nil {
			log.Fatal(err)
		}
		return theirs
	}
	connect := func(h *host, c net.Conn, psn bth.PSN) hello {
		peer := exchange(c, hello{End: h.qp.Local(psn), Addr: h.mr.IOVA(), RKey: h.mr.RKey()})
		if err := h.qp.Connect(rnic.ConnectAttr{Local: h.qp.Local(psn), Remote: peer.End,
			Access: mr.RemoteWrite}); err != nil {
			log.Fatal(err)
		}
		return peer
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() { // the server process
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		srv := open("127.0.0.12")
		defer srv.dev.Close()
		connect(srv, c, 0x2000)
		// A WRITE that comes before this receive is posted is told to
		// retry (an RNR NAK), and does.
		srv.qp.PostRecv([]qp.RecvWR{{WRID: 1}})
		wc := await(srv.rcq)
		fmt.Printf("server: %v imm=%d, buffer holds %q\n", wc.Opcode, wc.ImmData, srv.buf[:wc.ByteLen])
	}()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	cli := open("127.0.0.11")
	defer cli.dev.Close()
	peer := connect(cli, c, 0x1000)
	copy(cli.buf, "over real UDP!")
	cli.qp.PostSend([]qp.SendWR{{Opcode: qp.WRRDMAWriteWithImm, Flags: qp.SendSignaled, ImmData: 7,
		SGList: cli.sge(0, 14), RemoteAddr: peer.Addr, RKey: peer.RKey}})
	wc := await(cli.scq)
	<-done
	fmt.Printf("client: %v %v\n", wc.Opcode, wc.Status)
	c.Close()
	// Output:
	// server: RECV_RDMA_WITH_IMM imm=7, buffer holds "over real UDP!"
	// client: RDMA_WRITE success
}

// Package rnictest is a scripted peer for testing a gorxe device one
// packet at a time, after gVisor's tcp testing context
// (pkg/tcpip/transport/tcp/testing/context: SendPacket, GetPacket).
//
// New opens a device on an in-memory fabric and connects one RC QP to a
// peer that is nothing but a bare link the test drives: the test crafts
// each packet the peer sends (Send, SendRaw) and reads, parsed, each one
// the device sends back (Next, Expect, ExpectAck). Sync is a barrier: once
// it returns, the device has handled every packet sent before it, and the
// packets it answered with wait in order for Next. Nothing sleeps; every
// wait is bounded and fails the test saying what it waited for.
//
// The QP's memory sits in one allocation with guard bytes on both sides
// of each registered region (Mem, Region, Local), so a test or a fuzzer
// can check that nothing outside a region changed (CheckGuards).
package rnictest

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/gorxe/gorxe/congestion"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
)

// Timeout bounds every wait of the harness.
const Timeout = 2 * time.Second

// Options tune New. The zero value is a QP with every remote access
// right, a 1024-byte path MTU, no local ACK timeout and no tail-loss
// probe, so that the device sends nothing the test did not provoke.
type Options struct {
	MTU         qp.MTU    // qp.MTU1024 when zero
	Access      mr.Access // the QP's and the region's access; every remote right when zero
	RegionSize  int       // bytes of the responder's region; 16 KiB when zero
	LocalSize   int       // bytes of the requester's local buffer; 16 KiB when zero
	Guard       int       // guard bytes around each region; 4096 when zero
	MinRNRTimer uint8     // the responder's RNR timer code
	MaxDestRd   uint8     // max_dest_rd_atomic; 16 when zero
	MaxRd       uint8     // max_rd_atomic; 16 when zero
	Timeout     uint8     // the requester's local ACK timeout code; 0 is none
	RetryCnt    uint8
	RNRRetry    uint8
	TailProbe   bool         // leave the requester's tail-loss probe on
	SRQ         bool         // the QP receives from a shared receive queue, Peer.SRQ
	PeerPSN     bth.PSN      // the first PSN the peer sends; 0x1000 when zero
	DevPSN      bth.PSN      // the first PSN the device sends; 0x2000 when zero
	PeerQPN     bth.QPN      // the peer's QPN; 0x100 when zero
	DevAddrs    []netip.Addr // the device's addresses; 10.0.0.1 when empty
	PeerAddr    netip.Addr   // the peer's address; 10.0.0.2 when zero
	// The device's congestion control (rnic.Config's CC, CCParams,
	// LineRate, PacingBurst): DCQCN with ConnectX's parameters from
	// 100 Gb/s in 64 KiB bursts when zero, as rnic.Open's defaults.
	CC          rnic.CCMode
	CCParams    congestion.Params
	LineRate    congestion.Rate
	PacingBurst int
}

func (o *Options) defaults() {
	if o.MTU == 0 {
		o.MTU = qp.MTU1024
	}
	if o.Access == 0 {
		o.Access = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic
	}
	if o.RegionSize == 0 {
		o.RegionSize = 16 << 10
	}
	if o.LocalSize == 0 {
		o.LocalSize = 16 << 10
	}
	if o.Guard == 0 {
		o.Guard = 4096
	}
	if o.MaxDestRd == 0 {
		o.MaxDestRd = 16
	}
	if o.MaxRd == 0 {
		o.MaxRd = 16
	}
	if o.PeerPSN == 0 {
		o.PeerPSN = 0x1000
	}
	if o.DevPSN == 0 {
		o.DevPSN = 0x2000
	}
	if o.PeerQPN == 0 {
		o.PeerQPN = 0x100
	}
	if len(o.DevAddrs) == 0 {
		o.DevAddrs = []netip.Addr{netip.MustParseAddr("10.0.0.1")}
	}
	if !o.PeerAddr.IsValid() {
		o.PeerAddr = netip.MustParseAddr("10.0.0.2")
	}
}

// RegionIOVA and LocalIOVA are the IOVAs of Region and Local: fixed, so
// that packets (and fuzz seeds) can name them.
const (
	RegionIOVA = 0x10000
	LocalIOVA  = 0x80000
)

// Peer is a device with one RC QP, connected to a scripted peer.
type Peer struct {
	Dev            *rnic.Device
	QP             *rnic.QP
	SRQ            *rnic.SRQ // the QP's shared receive queue, with Options.SRQ
	PD             *mr.PD
	SendCQ, RecvCQ *cq.CQ

	Mem     []byte // guard, Region, guard, Local, guard
	Region  []byte // the responder's memory region: MR, at RegionIOVA
	MR      *mr.MR
	Local   []byte // the requester's local buffer: LocalMR, at LocalIOVA
	LocalMR *mr.MR

	Addr    netip.Addr // the peer's address: the IP source of what it sends
	DevAddr netip.Addr // the QP's GID, as an address
	QPN     bth.QPN    // the peer's QPN: the DestQP of what the device sends
	Opts    Options    // with the defaults filled in

	link   *mem.Link // the peer's end of the fabric
	fabric *mem.Fabric
	rx     chan []byte // packets the device sent, in order
	queued []*Packet   // packets Sync read past, for Next

	// The barrier QP: a second QP of the device, connected to the peer's
	// QPN+1, that Sync writes zero bytes to.
	bar    *rnic.QP
	barPSN bth.PSN
}

// Open opens a device at addr on the in-memory fabric f, closed when the
// test ends.
func Open(t testing.TB, f *mem.Fabric, addr string) *rnic.Device {
	t.Helper()
	l, err := f.NewLink(netip.MustParseAddr(addr))
	must(t, err)
	dev, err := rnic.Open(rnic.Config{Link: l})
	must(t, err)
	t.Cleanup(func() { dev.Close() })
	return dev
}

// New opens a device with one RC QP in RTS, connected to the peer. The
// device, the fabric and the peer's link close when the test ends.
func New(t testing.TB, o Options) *Peer {
	t.Helper()
	o.defaults()
	p := &Peer{Opts: o, Addr: o.PeerAddr, DevAddr: o.DevAddrs[0], QPN: o.PeerQPN, fabric: mem.NewFabric()}
	devLink, err := p.fabric.NewLink(o.DevAddrs...)
	must(t, err)
	p.link, err = p.fabric.NewLink(o.PeerAddr)
	must(t, err)
	p.Dev, err = rnic.Open(rnic.Config{Link: devLink, Name: "dut", NoTailProbe: !o.TailProbe,
		CC: o.CC, CCParams: o.CCParams, LineRate: o.LineRate, PacingBurst: o.PacingBurst})
	must(t, err)
	p.rx = make(chan []byte, 1<<16)
	done := make(chan struct{})
	go p.receive(done)
	t.Cleanup(func() {
		p.Dev.Close()
		p.link.Close()
		<-done
	})

	p.PD = p.Dev.AllocPD()
	p.SendCQ, err = p.Dev.CreateCQ(1024)
	must(t, err)
	p.RecvCQ, err = p.Dev.CreateCQ(1024)
	must(t, err)
	g := o.Guard
	p.Mem = make([]byte, 3*g+o.RegionSize+o.LocalSize)
	p.Region = p.Mem[g : g+o.RegionSize : g+o.RegionSize]
	p.Local = p.Mem[2*g+o.RegionSize : 2*g+o.RegionSize+o.LocalSize : 2*g+o.RegionSize+o.LocalSize]
	p.FillGuards()
	p.MR, err = p.Dev.RegMRIOVA(p.PD, p.Region, RegionIOVA, o.Access)
	must(t, err)
	p.LocalMR, err = p.Dev.RegMRIOVA(p.PD, p.Local, LocalIOVA, mr.LocalWrite)
	must(t, err)
	ia := qp.InitAttr{
		Type: qp.TypeRC, PD: p.PD, SendCQ: p.SendCQ, RecvCQ: p.RecvCQ,
		Cap: qp.Cap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64},
	}
	if o.SRQ {
		p.SRQ, err = p.Dev.CreateSRQ(p.PD, qp.SRQAttr{MaxWR: 64, MaxSGE: 4})
		must(t, err)
		ia.SRQ = p.SRQ
	}
	p.QP, err = p.Dev.CreateQP(ia)
	must(t, err)
	must(t, p.connect(p.QP, o.Access, o.PeerQPN, o.PeerPSN, o.DevPSN))

	bcq, err := p.Dev.CreateCQ(16)
	must(t, err)
	p.bar, err = p.Dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: p.PD, SendCQ: bcq, RecvCQ: bcq,
		Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1}})
	must(t, err)
	must(t, p.connect(p.bar, mr.RemoteWrite, o.PeerQPN+1, 0, 0))
	return p
}

// connect takes q from RESET to RTS, connected to the peer's QP qpn.
func (p *Peer) connect(q *rnic.QP, access mr.Access, qpn bth.QPN, rqPSN, sqPSN bth.PSN) error {
	o := &p.Opts
	if err := q.Modify(&qp.Attr{State: qp.StateInit, Port: 1, AccessFlags: access},
		qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags); err != nil {
		return err
	}
	if err := q.Modify(&qp.Attr{
		State: qp.StateRTR, PathMTU: o.MTU, DestQPNum: qpn, RQPSN: rqPSN,
		MaxDestRdAtomic: o.MaxDestRd, MinRNRTimer: o.MinRNRTimer,
		AV: qp.AddressVector{DGID: p.Addr, HopLimit: 64},
	}, qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN|qp.AttrMaxDestRdAtomic|qp.AttrMinRNRTimer); err != nil {
		return err
	}
	return q.Modify(&qp.Attr{
		State: qp.StateRTS, SQPSN: sqPSN, Timeout: o.Timeout, RetryCnt: o.RetryCnt,
		RNRRetry: o.RNRRetry, MaxRdAtomic: o.MaxRd,
	}, qp.AttrState|qp.AttrSQPSN|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|qp.AttrMaxQPRdAtomic)
}

// BarrierQPN returns the number of the device's second QP, which Sync
// uses. A test that sends packets to it can break Sync.
func (p *Peer) BarrierQPN() bth.QPN { return p.bar.Num() }

// Reconnect takes the QP through RESET back to RTS, with the PSNs it
// started with and empty queues, as after New.
func (p *Peer) Reconnect(t testing.TB) {
	t.Helper()
	must(t, p.QP.Modify(&qp.Attr{State: qp.StateReset}, qp.AttrState))
	must(t, p.connect(p.QP, p.Opts.Access, p.Opts.PeerQPN, p.Opts.PeerPSN, p.Opts.DevPSN))
}

// receive moves what the device sends to the peer into p.rx, until the
// peer's link closes.
func (p *Peer) receive(done chan<- struct{}) {
	defer close(done)
	bufs := make([][]byte, link.BatchSize)
	for i := range bufs {
		bufs[i] = make([]byte, link.BufferSize)
	}
	sizes := make([]int, len(bufs))
	for {
		n, err := p.link.Receive(bufs, sizes)
		for i := range n {
			p.rx <- append([]byte(nil), bufs[i][link.Headroom:link.Headroom+sizes[i]]...)
		}
		if err != nil {
			return
		}
	}
}

// Req returns the headers of a request the peer sends the QP: opcode op
// at psn, the default P_Key, AckReq set.
func (p *Peer) Req(op bth.Opcode, psn bth.PSN) wire.Headers {
	return wire.Headers{BTH: bth.Fields{Opcode: op, PKey: bth.DefaultPKey, DestQP: p.QP.Num(), AckReq: true, PSN: psn}}
}

// Resp returns the headers of a response the peer sends the QP's
// requester: opcode op at psn, carrying syn and msn if it has an AETH.
func (p *Peer) Resp(op bth.Opcode, psn bth.PSN, syn aeth.Syndrome, msn aeth.MSN) wire.Headers {
	h := wire.Headers{BTH: bth.Fields{Opcode: op, PKey: bth.DefaultPKey, DestQP: p.QP.Num(), PSN: psn}}
	h.AETH.Syndrome, h.AETH.MSN = syn, msn
	return h
}

// Frame returns a whole packet from the peer to the device with headers h
// and payload.
func (p *Peer) Frame(h wire.Headers, payload []byte) wire.Frame {
	return wire.Frame{
		IP:      wire.IPFields{Src: p.Addr, Dst: p.DevAddr, HopLimit: 64, DontFrag: true},
		SrcPort: 0xc000 | uint16(p.QPN&0x3fff), DstPort: wire.UDPPort,
		Headers: h, Payload: payload,
	}
}

// Build returns the IP packet f describes. An opcode the builder refuses
// (a reserved one) is built as a SEND ONLY and then written over, so the
// payload must hold any headers it should carry. If edit is not nil it
// may change the transport bytes (BTH through pad) before the ICRC is
// computed: the packet is then hostile, but not corrupt.
func Build(f wire.Frame, edit func(transport []byte)) ([]byte, error) {
	op := f.BTH.Opcode
	_, known := wire.Lookup(op)
	if !known {
		f.BTH.Opcode = bth.RCSendOnly
	}
	pkt, err := f.Append(nil)
	if err != nil || known && edit == nil {
		return pkt, err
	}
	var q wire.Packet
	if err := wire.ParseIP(&q, pkt); err != nil {
		return nil, err
	}
	tr := pkt[len(q.IP)+wire.UDPLen : len(pkt)-wire.ICRCLen]
	tr[0] = byte(op)
	if edit != nil {
		edit(tr)
	}
	binary.LittleEndian.PutUint32(pkt[len(pkt)-wire.ICRCLen:], wire.ComputeICRC(q.IP, q.UDP, tr))
	return pkt, nil
}

// Send sends the device a packet from the peer with headers h and payload.
func (p *Peer) Send(t testing.TB, h wire.Headers, payload []byte) {
	t.Helper()
	p.SendFrame(t, p.Frame(h, payload))
}

// SendFrame sends the device the packet f describes.
func (p *Peer) SendFrame(t testing.TB, f wire.Frame) {
	t.Helper()
	pkt, err := Build(f, nil)
	must(t, err)
	p.SendRaw(t, pkt)
}

// SendRaw sends pkt, an IP packet, from the peer's link. Its IP source
// may be any address: the fabric routes by destination.
func (p *Peer) SendRaw(t testing.TB, pkts ...[]byte) {
	t.Helper()
	bufs := make([][]byte, len(pkts))
	for i, pkt := range pkts {
		bufs[i] = append(make([]byte, link.Headroom, link.Headroom+len(pkt)), pkt...)
	}
	must(t, p.link.Send(bufs))
}

// Packet is a packet the device sent, parsed.
type Packet struct {
	wire.Packet
	Raw []byte // the IP packet
}

// String describes the packet as a test failure shows it.
func (k *Packet) String() string {
	s := fmt.Sprintf("%v PSN %#x DestQP %#x", k.BTH.Opcode(), uint32(k.BTH.PSN()), uint32(k.BTH.DestQP()))
	if k.AETH != nil {
		s += fmt.Sprintf(" AETH %v MSN %d", k.AETH.Syndrome(), k.AETH.MSN())
	}
	if len(k.Payload) > 0 {
		s += fmt.Sprintf(" %d bytes", len(k.Payload))
	}
	return s
}

// Next returns the next packet the device sent the QP's peer, waiting up
// to timeout for it, or nil. Packets of the barrier QP are skipped.
func (p *Peer) Next(timeout time.Duration) *Packet {
	if len(p.queued) > 0 {
		k := p.queued[0]
		p.queued = p.queued[1:]
		return k
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case raw, ok := <-p.rx:
			if !ok {
				return nil
			}
			k := p.parse(raw)
			if k.Info != nil && k.BTH.DestQP() == p.QPN+1 {
				continue // the barrier QP's
			}
			return k
		case <-deadline.C:
			return nil
		}
	}
}

// parse parses a packet the device sent; a packet that does not parse is
// returned with only Raw set, for the test to fail on.
func (p *Peer) parse(raw []byte) *Packet {
	k := &Packet{Raw: raw}
	if wire.ParseIP(&k.Packet, raw) != nil || k.CheckICRC() != nil {
		k.Packet = wire.Packet{}
	}
	return k
}

// Expect returns the next packet the device sent, failing the test if
// none comes within Timeout or it is not a valid RoCE packet to the peer.
func (p *Peer) Expect(t testing.TB) *Packet {
	t.Helper()
	k := p.Next(Timeout)
	switch {
	case k == nil:
		t.Fatalf("no packet from the device within %v", Timeout)
	case k.Info == nil:
		t.Fatalf("the device sent a packet that does not parse or fails its ICRC: % x", k.Raw)
	case k.Src().Unmap() != p.DevAddr.Unmap() || k.Dst().Unmap() != p.Addr.Unmap() || k.BTH.DestQP() != p.QPN:
		t.Fatalf("the device sent %v from %v to %v, want from %v to %v QP %#x", k, k.Src(), k.Dst(), p.DevAddr, p.Addr, uint32(p.QPN))
	}
	return k
}

// ExpectOp returns the next packet the device sent, failing the test
// unless it has opcode op and PSN psn.
func (p *Peer) ExpectOp(t testing.TB, op bth.Opcode, psn bth.PSN) *Packet {
	t.Helper()
	k := p.Expect(t)
	if k.BTH.Opcode() != op || k.BTH.PSN() != psn {
		t.Fatalf("the device sent %v, want %v PSN %#x", k, op, uint32(psn))
	}
	return k
}

// ExpectAck returns the next packet the device sent, failing the test
// unless it is an ACKNOWLEDGE for psn carrying syn and msn: an ACK, an
// RNR NAK or a NAK.
func (p *Peer) ExpectAck(t testing.TB, syn aeth.Syndrome, psn bth.PSN, msn aeth.MSN) *Packet {
	t.Helper()
	k := p.ExpectOp(t, bth.RCAcknowledge, psn)
	if k.AETH.Syndrome() != syn || k.AETH.MSN() != msn {
		t.Fatalf("the device sent %v, want AETH %v MSN %d", k, syn, msn)
	}
	return k
}

// Sync returns once the device has handled every packet sent to it
// before: it writes zero bytes to the barrier QP and waits for the ACK,
// which the device sends after whatever the earlier packets made it send.
// Those packets wait for Next. It fails the test if the ACK does not come
// within Timeout: the device hangs.
func (p *Peer) Sync(t testing.TB) {
	t.Helper()
	if err := p.sync(); err != nil {
		t.Fatal(err)
	}
}

func (p *Peer) sync() error {
	psn := p.barPSN
	p.barPSN = psn.Add(1)
	h := wire.Headers{BTH: bth.Fields{Opcode: bth.RCRDMAWriteOnly, PKey: bth.DefaultPKey, DestQP: p.bar.Num(), AckReq: true, PSN: psn}}
	f := p.Frame(h, nil)
	pkt, err := Build(f, nil)
	if err != nil {
		return err
	}
	if err := p.link.Send([][]byte{append(make([]byte, link.Headroom), pkt...)}); err != nil {
		return err
	}
	deadline := time.NewTimer(Timeout)
	defer deadline.Stop()
	for {
		select {
		case raw, ok := <-p.rx:
			if !ok {
				return fmt.Errorf("rnictest: the peer's link closed while waiting for the barrier ACK")
			}
			k := p.parse(raw)
			if k.Info != nil && k.BTH.DestQP() == p.QPN+1 {
				if k.BTH.Opcode() == bth.RCAcknowledge && k.BTH.PSN() == psn {
					return nil
				}
				continue
			}
			p.queued = append(p.queued, k)
		case <-deadline.C:
			return fmt.Errorf("rnictest: the device did not answer the barrier PSN %#x within %v: it hangs", uint32(psn), Timeout)
		}
	}
}

// ExpectNone syncs with the device and fails the test if it sent the
// peer anything since the last packet the test read.
func (p *Peer) ExpectNone(t testing.TB) {
	t.Helper()
	p.Sync(t)
	if len(p.queued) > 0 {
		t.Fatalf("the device sent %v, want nothing", p.queued)
	}
}

// Drain syncs with the device and discards what it sent the peer.
func (p *Peer) Drain(t testing.TB) {
	t.Helper()
	p.Sync(t)
	p.queued = p.queued[:0]
}

// ExpectWC waits for len(want) completions on c and fails the test
// unless they have the statuses want, in order. It returns them.
func ExpectWC(t testing.TB, c *cq.CQ, want ...cq.Status) []cq.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	got := make([]cq.WC, 0, len(want))
	buf := make([]cq.WC, 16)
	for len(got) < len(want) {
		n, err := c.Wait(ctx, buf[:min(len(buf), len(want)-len(got))])
		if err != nil {
			t.Fatalf("waiting for %d completions, have %v: %v", len(want), got, err)
		}
		got = append(got, buf[:n]...)
	}
	for i, wc := range got {
		if wc.Status != want[i] {
			t.Fatalf("completion %d (wr_id %d) has status %v, want %v; all: %+v", i, wc.WRID, wc.Status, want[i], got)
		}
	}
	ExpectNoWC(t, c)
	return got
}

// ExpectNoWC fails the test if c holds a completion. After Sync, every
// completion the packets before it made is there.
func ExpectNoWC(t testing.TB, c *cq.CQ) {
	t.Helper()
	var buf [4]cq.WC
	if n, _ := c.Poll(buf[:]); n > 0 {
		t.Fatalf("unexpected completions %+v", buf[:n])
	}
}

// ExpectState fails the test unless the QP is in state want.
func (p *Peer) ExpectState(t testing.TB, want qp.State) {
	t.Helper()
	if st := p.QP.State(); st != want {
		t.Fatalf("QP in %v, want %v", st, want)
	}
}

// PostRecv posts a receive of n bytes at off in Local, for the device's
// responder to fill with a SEND of the peer's: on the QP, or with
// Options.SRQ on its shared receive queue.
func (p *Peer) PostRecv(t testing.TB, wrid uint64, off, n int) {
	t.Helper()
	wr := []qp.RecvWR{{WRID: wrid, SGList: []qp.SGE{p.LocalSGE(off, n)}}}
	var err error
	if p.SRQ != nil {
		_, err = p.SRQ.PostRecv(wr)
	} else {
		_, err = p.QP.PostRecv(wr)
	}
	must(t, err)
}

// PostSend posts work requests on the QP.
func (p *Peer) PostSend(t testing.TB, wrs ...qp.SendWR) {
	t.Helper()
	_, err := p.QP.PostSend(wrs)
	must(t, err)
}

// LocalSGE returns an SGE for n bytes at off in Local.
func (p *Peer) LocalSGE(off, n int) qp.SGE {
	return qp.SGE{Addr: LocalIOVA + uint64(off), Length: uint32(n), LKey: p.LocalMR.LKey()}
}

// RegionVA returns the IOVA of Region[off].
func (p *Peer) RegionVA(off int) uint64 { return RegionIOVA + uint64(off) }

// RKey returns the region's rkey, as a RETH carries it.
func (p *Peer) RKey() uint32 { return uint32(p.MR.RKey()) }

// guardByte is the pattern guard byte i holds.
func guardByte(i int) byte { return byte(i*7 + 0xa5) }

// FillGuards writes the guard pattern around Region and Local.
func (p *Peer) FillGuards() {
	for _, g := range p.guards() {
		for i := range g {
			g[i] = guardByte(i)
		}
	}
}

func (p *Peer) guards() [3][]byte {
	g, r, l := p.Opts.Guard, len(p.Region), len(p.Local)
	return [3][]byte{p.Mem[:g], p.Mem[g+r : 2*g+r], p.Mem[2*g+r+l:]}
}

// GuardsIntact returns an error naming the first byte outside Region and
// Local that changed.
func (p *Peer) GuardsIntact() error {
	for k, g := range p.guards() {
		for i, b := range g {
			if b != guardByte(i) {
				return fmt.Errorf("rnictest: guard %d byte %d changed from %#x to %#x: memory outside a registered region was written", k, i, guardByte(i), b)
			}
		}
	}
	return nil
}

// CheckGuards fails the test if a byte outside Region and Local changed.
func (p *Peer) CheckGuards(t testing.TB) {
	t.Helper()
	if err := p.GuardsIntact(); err != nil {
		t.Fatal(err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

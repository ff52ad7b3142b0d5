// Package scene plays short, scripted RDMA conversations between two
// gorxe devices, A and B, on a simulated switch in virtual time: each
// scene shows one rule of the reliable transport at work (go-back-N after
// a loss, the tail-loss probe, receiver-not-ready, a READ retried from the
// middle, a duplicate atomic, PSN wrap-around, a dead peer, an access
// error, a congestion notification). Everything runs on one goroutine on
// one clock, so a scene played twice with the same seed gives the same
// packets, the same events and the same text, byte for byte.
//
// A scene's result is its capture (taken where each packet leaves its
// NIC, so a packet the fabric drops is in it), the devices' own transport
// events, the program's account of what it did and checked, and the
// capture explained by package explain.
package scene

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/internal/capture"
	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/mem/fabric"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// The stage's fixed settings.
const (
	bufSize = 64 << 10
	access  = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic
	mtu     = qp.MTU1024
	// rate and delay are each link's: 10 Gb/s, 5 µs each way.
	rate  = 10e9
	delay = 5 * time.Microsecond
	// epoch is the capture's first timestamp: a fixed date, so that the
	// file is the same on every run.
	epochUnix = 1767225600 // 2026-01-01T00:00:00Z
)

// Stage is two devices, A and B, each on a port of a switch, with one
// RC QP each, connected to the other.
type Stage struct {
	clock *fabric.Clock
	rng   *rand.Rand
	A, B  *Host

	pcap    *pcapgo.NgWriter
	capture bytes.Buffer
	events  []trace.Event
	first   time.Duration // when the first packet was captured; -1 before
	closing bool          // the stage is closing: the CMs' last words (their traces, their DREQs) are not the scene's
	log     []string
	err     error // the first error of a device's event
}

// Host is one device and what a program has opened on it.
type Host struct {
	Name string
	Addr netip.Addr
	st   *Stage
	link *faultyLink
	dev  *rnic.Device
	pd   *mr.PD
	Buf  []byte
	MR   *mr.MR
	SCQ  *cq.CQ
	RCQ  *cq.CQ
	QP   *rnic.QP
	PSN  bth.PSN // the first PSN it sends
	// CM is the host's connection manager on QP 1, in a scene that
	// connects the QPs with it (setup.cm); nil otherwise.
	CM *cm.Manager

	iface int // its interface in the capture
}

// newStage builds the stage and connects the QPs; cfg adjusts what each
// QP's Connect gets. With withCM the QPs stay in RESET, and each host gets
// a connection manager, for the scene to connect them with.
func newStage(seed uint64, cc, withCM bool, psnA, psnB bth.PSN, conn func(*rnic.ConnectAttr)) (*Stage, error) {
	st := &Stage{clock: fabric.NewClock(), first: -1}
	// A capture at each NIC, as tcpdump on each host would take, in one
	// pcapng file with an interface per host: explain pairs a packet's
	// leaving and its arrival, and knows a lost packet for one.
	var err error
	st.pcap, err = pcapgo.NewNgWriterInterface(&st.capture, pcapgo.NgInterface{Name: "A", LinkType: layers.LinkTypeRaw, SnapLength: 65536, TimestampResolution: 9},
		pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "gorxe demo"}})
	if err != nil {
		return nil, err
	}
	if _, err := st.pcap.AddInterface(pcapgo.NgInterface{Name: "B", LinkType: layers.LinkTypeRaw, SnapLength: 65536, TimestampResolution: 9}); err != nil {
		return nil, err
	}
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	sw, err := fabric.NewSwitch(st.clock, fabric.Config{
		Ports:  []fabric.PortConfig{{Rate: rate, Delay: delay, Addrs: []netip.Addr{a}}, {Rate: rate, Delay: delay, Addrs: []netip.Addr{b}}},
		Buffer: 1 << 20,
		Seed:   seed,
	})
	if err != nil {
		return nil, err
	}
	st.A = &Host{Name: "A", Addr: a, st: st, PSN: psnA}
	st.B = &Host{Name: "B", Addr: b, st: st, PSN: psnB, iface: 1}
	for port, h := range []*Host{st.A, st.B} {
		if err := h.open(sw, port, seed, cc); err != nil {
			st.close()
			return nil, fmt.Errorf("NIC %s: %w", h.Name, err)
		}
	}
	if withCM {
		for port, h := range []*Host{st.A, st.B} {
			h.CM, err = cm.New(h.dev, cm.Config{
				Rand: rand.NewChaCha8(chachaSeed(seed, port)),
				// The CM's own account, but for the messages, which
				// the capture explained tells.
				Trace: func(line string) {
					if !st.closing && !strings.HasPrefix(line, "send ") && !strings.HasPrefix(line, "recv ") {
						st.say("%s's CM: %s", h.Name, line)
					}
				},
			})
			if err != nil {
				st.close()
				return nil, fmt.Errorf("NIC %s: %w", h.Name, err)
			}
		}
		return st, nil
	}
	for _, h := range []*Host{st.A, st.B} {
		c := rnic.ConnectAttr{Local: h.QP.Local(h.PSN), Remote: st.peer(h).QP.Local(st.peer(h).PSN), MTU: mtu, Access: access}
		if conn != nil {
			conn(&c)
		}
		if err := h.QP.Connect(c); err != nil {
			st.close()
			return nil, fmt.Errorf("NIC %s: connect: %w", h.Name, err)
		}
	}
	return st, nil
}

// chachaSeed is the seed of port's connection manager's random numbers.
func chachaSeed(seed uint64, port int) (b [32]byte) {
	binary.LittleEndian.PutUint64(b[:], seed)
	b[8] = byte(port)
	copy(b[16:], "gorxe cm")
	return b
}

// newRand returns the scene's random numbers for seed.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

// randPSN returns a first PSN, at random as a real QP's is.
func randPSN(r *rand.Rand) bth.PSN { return bth.PSN(r.Uint32() & bth.PSNMask) }

// peer returns the other host.
func (st *Stage) peer(h *Host) *Host {
	if h == st.A {
		return st.B
	}
	return st.A
}

func (h *Host) open(sw *fabric.Switch, port int, seed uint64, cc bool) error {
	l, err := sw.Attach(port)
	if err != nil {
		return err
	}
	h.link = &faultyLink{HostLink: l}
	st := h.st
	cfg := rnic.Config{
		Link: h.link, Name: h.Name, Loop: stageLoop{st}, KeySeed: seed + uint64(port) + 1,
		Trace: func(e trace.Event) {
			if !st.closing { // closing, the CMs' DREQs move the QPs to ERR
				st.events = append(st.events, e)
			}
		},
		PacketTrace: h.capture,
	}
	if !cc {
		cfg.CC = rnic.CCNone
	}
	if h.dev, err = rnic.Open(cfg); err != nil {
		l.Close()
		return err
	}
	h.pd = h.dev.AllocPD()
	h.Buf = make([]byte, bufSize)
	// A fixed IOVA, as a C program's buffer would have one of its own:
	// the same address on every run.
	if h.MR, err = h.dev.RegMRIOVA(h.pd, h.Buf, 0x7f0000000000+uint64(port)<<32, access); err != nil {
		return err
	}
	if h.SCQ, err = h.dev.CreateCQ(64); err != nil {
		return err
	}
	if h.RCQ, err = h.dev.CreateCQ(64); err != nil {
		return err
	}
	h.QP, err = h.dev.CreateQP(qp.InitAttr{
		Type: qp.TypeRC, PD: h.pd, SendCQ: h.SCQ, RecvCQ: h.RCQ,
		Cap: qp.Cap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1},
	})
	return err
}

// capture writes a packet the device sends or receives to the stage's
// capture, on the host's interface, at the clock's time.
func (h *Host) capture(dir rnic.Direction, pkt []byte) {
	st := h.st
	if st.closing {
		return // the DREQs of the CMs' Close, which no scene shows
	}
	if st.first < 0 {
		st.first = st.now()
	}
	ts := time.Unix(epochUnix, 0).Add(st.now())
	ci := gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(pkt), Length: len(pkt), InterfaceIndex: h.iface}
	if err := st.pcap.WritePacket(ci, pkt); err != nil && st.err == nil {
		st.err = err
	}
}

// close closes both devices, and their connection managers first.
func (st *Stage) close() {
	st.closing = true
	for _, h := range []*Host{st.A, st.B} {
		if h != nil && h.CM != nil {
			h.CM.Close()
		}
	}
	for _, h := range []*Host{st.A, st.B} {
		if h != nil && h.dev != nil {
			h.dev.Close()
		}
	}
}

// now returns the stage's time since it began.
func (st *Stage) now() time.Duration { return time.Duration(st.clock.Now() - 1) }

// stageLoop is the devices' rnic.Loop: the stage's clock.
type stageLoop struct{ st *Stage }

func (l stageLoop) Now() time.Duration { return l.st.now() }

func (l stageLoop) At(t time.Duration, fn func()) {
	l.st.clock.At(monotime.Time(t)+1, fabric.HandlerFunc(func(monotime.Time, any) { fn() }), nil)
}

// say adds a line to the scene's account, stamped with the clock.
func (st *Stage) say(format string, args ...any) {
	st.log = append(st.log, fmt.Sprintf("%10s  ", capture.Seconds(st.now()))+fmt.Sprintf(format, args...))
}

// run steps the clock until done reports true, the clock passes limit
// from now, or nothing is left to happen.
func (st *Stage) run(limit time.Duration, done func() bool) {
	until := st.clock.Now().Add(limit)
	for st.err == nil && !st.pollCM() && !done() {
		next, ok := st.clock.Next()
		if !ok || next > until {
			return
		}
		st.clock.Step()
	}
}

// pollCM has the connection managers handle what their QP 1 received, as
// a program on a Loop does. It reports whether that failed (st.err).
func (st *Stage) pollCM() bool {
	for _, h := range []*Host{st.A, st.B} {
		if h.CM == nil {
			continue
		}
		if _, err := h.CM.Poll(); err != nil && st.err == nil {
			st.err = fmt.Errorf("%s's CM: %w", h.Name, err)
		}
	}
	return st.err != nil
}

// idle runs the clock for d.
func (st *Stage) idle(d time.Duration) { st.run(d, func() bool { return false }) }

// wait runs the clock until c has a completion, or limit passes, and
// returns it.
func (st *Stage) wait(c *cq.CQ, limit time.Duration) (cq.WC, bool) {
	var wc [1]cq.WC
	got := false
	st.run(limit, func() bool {
		n, err := c.Poll(wc[:])
		if err != nil && st.err == nil {
			st.err = err
		}
		got = n == 1
		return got
	})
	return wc[0], got
}

// post posts one signaled work request on h's QP.
func (h *Host) post(wr qp.SendWR) error {
	wr.Flags |= qp.SendSignaled
	if _, err := h.QP.PostSend([]qp.SendWR{wr}); err != nil {
		return fmt.Errorf("%s: post %v: %w", h.Name, wr.Opcode, err)
	}
	return nil
}

// sge returns an SGE over n bytes at off of h's buffer.
func (h *Host) sge(off, n int) []qp.SGE {
	return []qp.SGE{{Addr: h.MR.IOVA() + uint64(off), Length: uint32(n), LKey: h.MR.LKey()}}
}

// va returns the address of byte off of h's buffer.
func (h *Host) va(off int) uint64 { return h.MR.IOVA() + uint64(off) }

// faultyLink is a host's port with the scene's faults: a packet it sends
// may be dropped or marked ECN CE before the switch sees it. The capture
// has the packet as it left the NIC.
type faultyLink struct {
	*fabric.HostLink
	// drop and mark see each packet the host sends, in order.
	drop func(pkt *wire.Packet) bool
	mark func(pkt *wire.Packet) bool
	// dead drops everything.
	dead bool
}

// Send passes the packets the faults let through to the switch.
func (l *faultyLink) Send(bufs [][]byte) error {
	for _, b := range bufs {
		var p wire.Packet
		// A send buffer starts with link.Headroom bytes for the link's
		// own headers, then the IP packet.
		parsed := len(b) > link.Headroom && wire.ParseIP(&p, b[link.Headroom:]) == nil
		switch {
		case l.dead:
			continue
		case parsed && l.drop != nil && l.drop(&p):
			continue
		case parsed && l.mark != nil && l.mark(&p):
			b = append([]byte(nil), b...)
			wire.MarkCE(b[link.Headroom:])
		}
		if err := l.HostLink.Send([][]byte{b}); err != nil {
			return err
		}
	}
	return nil
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/scene"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

const demoUsage = `usage: gorxe demo [--quiet] [--pcap FILE] [--cc dcqcn|none] [--cc-profile connectx|paper]
       gorxe demo SCENE|all [--seed N] [--out DIR] [--pcap FILE] [--html FILE] [--events FILE]
       gorxe demo --list

Without a scene, demo runs two gorxe NICs in this process, A at 10.0.0.1 and
B at 10.0.0.2, joined by an in-memory fabric, connects an RC queue pair on
each to the other, and shows the verbs at work scene by scene: connect,
SEND/RECV, RDMA WRITE, RDMA READ, atomics, a lost packet recovered by
go-back-N, and an ECN mark answered by a CNP and a rate cut (DCQCN).
Every packet is printed as it leaves its NIC, and every queue pair state
change and transport event as it happens. The exit status is 0 when every
scene's checks pass. With --pcap the packets are also written to FILE
(pcap, raw IP link type) for Wireshark or "gorxe decode FILE"; they are
captured where they leave each NIC, so the capture holds the packet the
fabric drops, too.

With a SCENE (--list names them and says what each teaches), demo plays
one rule of the transport at work, on a simulated switch in virtual time:
the same seed gives the same packets, events and text, byte for byte
(--seed changes which packet is lost, the PSNs, keys and data). It prints
what the program did and checked, every packet explained as "gorxe
explain" explains a capture, and the devices' own transport events. --out
DIR writes SCENE.pcap, SCENE.txt (the printed text), SCENE.html (the
ladder diagram) and SCENE.events.jsonl (the events, JSON Lines) there;
--pcap, --html and --events write one each. "all" plays every scene.

Flags:
`

// The demo's fixed settings: the same PSNs and buffer contents on every
// run, so only addresses and keys (which are real) change from run to run.
const (
	demoMTU  = qp.MTU1024
	demoPSNA = 0x123456 // the first PSN A sends
	demoPSNB = 0x654321 // the first PSN B sends
	// demoACKTimeout is the local ACK timeout exponent, 4.096 µs × 2^14 =
	// 67 ms: far longer than a NAK takes to come back in one process, so
	// the loss scene recovers by NAK, and a timeout shows as a failure.
	demoACKTimeout = 14
	// demoWait bounds every wait for a completion.
	demoWait = 2 * time.Second

	demoBufSize = 64 << 10
	demoAccess  = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic
)

// Where each scene's data lives in the sides' buffers.
const (
	sendOff   = 0
	recvLen   = 64
	writeOff  = 4 << 10
	writeLen  = 3000 // three packets at MTU 1024
	readOff   = 16 << 10
	readLen   = 3000
	atomicOff = 32 << 10 // 8-byte aligned, as atomics must be
	lossOff   = 40 << 10
	lossLen   = 5000 // five packets; the fabric drops the third
	lossDrop  = 3
	ccOff     = 48 << 10
	ccLen     = 1000 // one packet, which the fabric marks CE
	// demoCNPDelay is how long B's packets take to reach A in the
	// congestion scene.
	demoCNPDelay = 20 * time.Millisecond
)

// lossPackets is how many packets the loss scene's WRITE takes.
var lossPackets = (lossLen + demoMTU.Bytes() - 1) / demoMTU.Bytes()

// What the scenes move.
const (
	demoMessage   = "hello, RDMA"
	demoAtomicOld = 100 // B's word before the atomics
	demoAdd       = 5
	demoSwap      = 7
)

// runDemo is the demo subcommand.
func runDemo(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("demo", flag.ContinueOnError)
	flags.SetOutput(stderr)
	quiet := flags.Bool("quiet", false, "print only the scene headers and results")
	pcapName := flags.String("pcap", "", "also write every packet to `FILE` (pcap)")
	list := flags.Bool("list", false, "list the scenes and what each teaches")
	flags.Uint64("seed", scene.DefaultSeed, "a scene's `seed`: which packet is lost, the PSNs, keys and data")
	outDir := flags.String("out", "", "write a scene's pcap, text, HTML and events to `DIR`")
	htmlName := flags.String("html", "", "write a scene's ladder diagram to `FILE`")
	eventsName := flags.String("events", "", "write a scene's transport events, JSON Lines, to `FILE`")
	var lf linkFlags
	flags.Func("cc", ccHelp, lf.setCC)
	flags.Func("cc-profile", ccProfileHelp, lf.setCCProfile)
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), demoUsage)
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if flags.NArg() != 0 || *list {
		return runScenes(flags, stdout, stderr)
	}
	if *htmlName != "" || *eventsName != "" || *outDir != "" {
		fmt.Fprintln(stderr, "gorxe demo: --html, --events and --out are for a scene: gorxe demo --list names them")
		return exitUsage
	}
	if err := lf.validateCC(); err != nil {
		fmt.Fprintf(stderr, "gorxe demo: %v\n", err)
		return exitUsage
	}
	log := &demoLog{w: stdout, quiet: *quiet, cc: lf}
	var (
		file    *os.File
		capture *bufio.Writer
	)
	if *pcapName != "" {
		var err error
		if file, err = os.Create(*pcapName); err != nil {
			fmt.Fprintf(stderr, "gorxe demo: %v\n", err)
			return exitError
		}
		capture = bufio.NewWriter(file)
		log.pcap = pcapgo.NewWriter(capture)
		// Raw IP: the fabric carries IP packets, with no Ethernet header to
		// make up; Wireshark and gorxe decode both read it.
		if err := log.pcap.WriteFileHeader(65536, layers.LinkTypeRaw); err != nil {
			file.Close()
			fmt.Fprintf(stderr, "gorxe demo: %s: %v\n", *pcapName, err)
			return exitError
		}
	}
	err := playDemo(log)
	if file != nil {
		cerr := log.pcapErr // playDemo has closed the devices: no packet comes after this
		if cerr == nil {
			cerr = capture.Flush()
		}
		if e := file.Close(); cerr == nil {
			cerr = e
		}
		if cerr != nil && err == nil {
			err = fmt.Errorf("%s: %w", *pcapName, cerr)
		}
	}
	if err == nil {
		err = log.writeErr
	}
	if err != nil {
		fmt.Fprintf(stderr, "gorxe demo: %v\n", err)
		return exitError
	}
	return exitOK
}

// demoScene is one step of the demo.
type demoScene struct {
	title string
	about string // what the verb does and what to look for
	run   func(*demo) error
}

var demoScenes = []demoScene{
	{"Connect",
		"An RC queue pair is one end of a reliable connection. The sides swap QP number, first PSN\n" +
			"(packet sequence number) and GID out of band, then step each QP RESET -> INIT -> RTR -> RTS.",
		(*demo).connect},
	{"SEND / RECV",
		"Two-sided: B posts a receive buffer, A's SEND fills it. Look for one SEND_ONLY packet asking\n" +
			"for an ACK (ackreq), B's ACK of that PSN, and a work completion on each side.",
		(*demo).sendRecv},
	{"RDMA WRITE",
		"One-sided: A writes 3000 bytes into B's memory, named by address and rkey; B's CPU is not told.\n" +
			"Look for FIRST/MIDDLE/LAST packets of at most the path MTU, the RETH on the first, ackreq on the last.",
		(*demo).write},
	{"RDMA READ",
		"One-sided: A reads 3000 bytes of B's memory. Look for one READ_REQUEST carrying a RETH, answered\n" +
			"by READ_RESPONSE FIRST/MIDDLE/LAST; the AETH on the first and last makes them the acknowledgement.",
		(*demo).read},
	{"Atomics",
		"FETCH_AND_ADD and COMPARE_AND_SWAP change an 8-byte word in B's memory in one step and return\n" +
			"its old value. Look for the AtomicETH in each request and the original value in ATOMIC_ACKNOWLEDGE.",
		(*demo).atomics},
	{"Loss and go-back-N",
		"The fabric drops the 3rd packet of a 5-packet RDMA WRITE. Look for B's NAK (PSN sequence error)\n" +
			"naming the missing PSN, A going back to it and resending from there, and the data arriving intact.",
		(*demo).loss},
	{"Congestion: ECN and DCQCN",
		"A switch whose queue builds up marks packets ECN CE rather than drop them. The fabric marks A's next\n" +
			"WRITE so, after it leaves A. Look for B's NIC (DCQCN's notification point) answering with a CNP (opcode\n" +
			"0x81, becn) to A's QP before its ACK, and A's NIC (the reaction point) cutting the QP's rate.",
		(*demo).congestion},
}

// demoLegend explains the lines the demo prints.
const demoLegend = `
Each "A -> B" line is one RoCE v2 packet (IP, UDP to port 4791, InfiniBand transport headers)
as it leaves a NIC: its opcode, destination QP, PSN (packet sequence number), "ackreq" when it
asks for an acknowledgement, then its extended headers: reth (where a WRITE or READ goes:
address, rkey, length), atomiceth (the same for an atomic, with its operands), aeth (ACK or
NAK, and msn, the number of messages the responder has completed), and the payload length.
[Bracketed] lines are queue pair events; => lines are results.
`

// playDemo sets up the two NICs, runs the scenes, and closes everything,
// stopping at the first scene whose checks fail.
func playDemo(log *demoLog) error {
	log.printf(true, "gorxe demo: two software RDMA NICs, A (10.0.0.1) and B (10.0.0.2), on an in-memory fabric\n")
	log.printf(false, "%s", demoLegend)
	d, err := newDemo(log)
	if err != nil {
		return err
	}
	err = d.play()
	if cerr := d.close(); err == nil {
		err = cerr
	}
	return err
}

func (d *demo) play() error {
	for i, s := range demoScenes {
		d.log.header(i+1, s.title, s.about)
		if err := s.run(d); err != nil {
			return fmt.Errorf("scene %d (%s): %w", i+1, s.title, err)
		}
	}
	d.log.printf(true, "\n")
	d.log.result("all %d scenes passed; %d packets, %d dropped by the fabric", len(demoScenes), d.log.packets, d.log.dropped)
	return nil
}

// demo is the two NICs and the log they print to.
type demo struct {
	log  *demoLog
	a, b *demoSide
}

// demoSide is one NIC with its buffer, CQs and the one QP.
type demoSide struct {
	name string
	addr netip.Addr
	link *mem.Link
	dev  *rnic.Device
	pd   *mr.PD
	buf  []byte
	mr   *mr.MR
	scq  *cq.CQ
	rcq  *cq.CQ
	qp   *rnic.QP
	psn  bth.PSN
}

func newDemo(log *demoLog) (*demo, error) {
	fabric := mem.NewFabric()
	d := &demo{log: log}
	d.a = &demoSide{name: "A", addr: netip.MustParseAddr("10.0.0.1"), psn: demoPSNA}
	d.b = &demoSide{name: "B", addr: netip.MustParseAddr("10.0.0.2"), psn: demoPSNB}
	for _, s := range []*demoSide{d.a, d.b} {
		if err := s.open(fabric, log, d.peer(s).name); err != nil {
			d.close()
			return nil, fmt.Errorf("NIC %s: %w", s.name, err)
		}
	}
	return d, nil
}

func (d *demo) peer(s *demoSide) *demoSide {
	if s == d.a {
		return d.b
	}
	return d.a
}

func (s *demoSide) open(fabric *mem.Fabric, log *demoLog, peer string) error {
	var err error
	// The link's DropFunc sees every packet the NIC sends, in order, before
	// the fabric delivers it: the tap that prints, captures and drops.
	s.link, err = fabric.NewLinkConfig(mem.Config{
		Addrs:  []netip.Addr{s.addr},
		Faults: mem.Faults{DropFunc: log.tap(s.name, peer)},
	})
	if err != nil {
		return err
	}
	// The demo shows the IBTA's recovery, NAK and timer; gorxe's tail-loss
	// probe, which could fire on a busy machine before a NAK arrives, is off.
	cfg := rnic.Config{Link: s.link, Name: s.name, Trace: log.event, NoTailProbe: true}
	log.cc.applyDevice(&cfg)
	s.dev, err = rnic.Open(cfg)
	if err != nil {
		s.link.Close()
		return err
	}
	s.pd = s.dev.AllocPD()
	s.buf = make([]byte, demoBufSize)
	if s.mr, err = s.dev.RegMR(s.pd, s.buf, demoAccess); err != nil {
		return err
	}
	if s.scq, err = s.dev.CreateCQ(16); err != nil {
		return err
	}
	if s.rcq, err = s.dev.CreateCQ(16); err != nil {
		return err
	}
	s.qp, err = s.dev.CreateQP(qp.InitAttr{
		Type: qp.TypeRC, PD: s.pd, SendCQ: s.scq, RecvCQ: s.rcq,
		Cap: qp.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1},
	})
	return err
}

// close closes both devices, and with them their links; it returns when
// all their goroutines have.
func (d *demo) close() error {
	var errs []error
	for _, s := range []*demoSide{d.a, d.b} {
		if s.dev != nil {
			errs = append(errs, s.dev.Close())
		}
	}
	return errors.Join(errs...)
}

// va returns the address of byte off of the side's registered buffer.
func (s *demoSide) va(off int) uint64 { return s.mr.IOVA() + uint64(off) }

func (s *demoSide) sge(off, n int) []qp.SGE {
	return []qp.SGE{{Addr: s.va(off), Length: uint32(n), LKey: s.mr.LKey()}}
}

// postSend posts one signaled work request and returns its completion.
func (s *demoSide) postSend(wr qp.SendWR) (cq.WC, error) {
	wr.Flags |= qp.SendSignaled
	if _, err := s.qp.PostSend([]qp.SendWR{wr}); err != nil {
		return cq.WC{}, fmt.Errorf("%s: post %v: %w", s.name, wr.Opcode, err)
	}
	return waitWC(s.scq, s.name+"'s send CQ")
}

// waitWC returns the next completion of c, or an error if none arrives in
// time or it is not a success.
func waitWC(c *cq.CQ, what string) (cq.WC, error) {
	ctx, cancel := context.WithTimeout(context.Background(), demoWait)
	defer cancel()
	var wc [1]cq.WC
	if _, err := c.Wait(ctx, wc[:]); err != nil {
		return cq.WC{}, fmt.Errorf("no completion on %s: %w", what, err)
	}
	if wc[0].Status != cq.StatusSuccess {
		return wc[0], fmt.Errorf("%s: %v", what, wc[0])
	}
	return wc[0], nil
}

// Scene 1.
func (d *demo) connect() error {
	eps := make(map[*demoSide]rnic.Endpoint)
	for _, s := range []*demoSide{d.a, d.b} {
		ep := s.qp.Local(s.psn)
		eps[s] = ep
		d.log.result("%s: QP %#x, first PSN %d (%#x), GID %v, path MTU %d", s.name, ep.QPN, ep.PSN, ep.PSN, ep.GID, demoMTU.Bytes())
	}
	for _, s := range []*demoSide{d.a, d.b} {
		err := s.qp.Connect(rnic.ConnectAttr{
			Local: eps[s], Remote: eps[d.peer(s)], MTU: demoMTU, Access: demoAccess, Timeout: demoACKTimeout,
		})
		if err != nil {
			return err
		}
	}
	for _, s := range []*demoSide{d.a, d.b} {
		if a := s.qp.Query(); a.State != qp.StateRTS || a.PathMTU != demoMTU {
			return fmt.Errorf("%s's QP is in %v with path MTU %d, want RTS and %d", s.name, a.State, a.PathMTU.Bytes(), demoMTU.Bytes())
		}
	}
	d.log.result("both QPs are in RTS: A numbers its requests from PSN %d, B expects exactly that", demoPSNA)
	return nil
}

// Scene 2.
func (d *demo) sendRecv() error {
	a, b := d.a, d.b
	copy(a.buf[sendOff:], demoMessage)
	d.log.detail("B posts a receive of %d bytes (wr_id 1); A posts a SEND of %q (wr_id 2)", recvLen, demoMessage)
	if _, err := b.qp.PostRecv([]qp.RecvWR{{WRID: 1, SGList: b.sge(sendOff, recvLen)}}); err != nil {
		return err
	}
	swc, err := a.postSend(qp.SendWR{WRID: 2, Opcode: qp.WRSend, SGList: a.sge(sendOff, len(demoMessage))})
	if err != nil {
		return err
	}
	rwc, err := waitWC(b.rcq, "B's receive CQ")
	if err != nil {
		return err
	}
	d.log.result("A's send CQ:    %v", swc)
	d.log.result("B's receive CQ: %v", rwc)
	got := b.buf[sendOff : sendOff+int(rwc.ByteLen)]
	d.log.result("B's receive buffer holds %q", got)
	if rwc.Opcode != cq.OpRecv || string(got) != demoMessage {
		return fmt.Errorf("B received %q (%v), want %q", got, rwc.Opcode, demoMessage)
	}
	return nil
}

// fillText fills b with text, repeated.
func fillText(b []byte, text string) {
	for i := 0; i < len(b); i += copy(b[i:], text) {
	}
}

// sameBytes checks that dst holds what src does.
func sameBytes(dst, src []byte, what string) error {
	if i := diffIndex(dst, src); i >= 0 {
		return fmt.Errorf("%s: byte %d is %#02x, want %#02x", what, i, dst[i], src[i])
	}
	return nil
}

// diffIndex returns the index of the first byte where a and b differ, or -1.
func diffIndex(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Scene 3.
func (d *demo) write() error {
	a, b := d.a, d.b
	src, dst := a.buf[writeOff:writeOff+writeLen], b.buf[writeOff:writeOff+writeLen]
	fillText(src, "RDMA WRITE puts A's bytes straight into B's memory. ")
	d.log.detail("A posts an RDMA WRITE of %d bytes to B's va=%#x rkey=%v (wr_id 3)", writeLen, b.va(writeOff), b.mr.RKey())
	wc, err := a.postSend(qp.SendWR{WRID: 3, Opcode: qp.WRRDMAWrite, SGList: a.sge(writeOff, writeLen),
		RemoteAddr: b.va(writeOff), RKey: b.mr.RKey()})
	if err != nil {
		return err
	}
	d.log.result("A's send CQ: %v", wc)
	if err := sameBytes(dst, src, "B's memory"); err != nil {
		return err
	}
	d.log.result("B's memory at va=%#x now holds A's %d bytes: %s", b.va(writeOff), writeLen, preview(dst))
	var none [1]cq.WC
	if n, _ := b.rcq.Poll(none[:]); n != 0 {
		return fmt.Errorf("B got a completion for a WRITE: %v", none[0])
	}
	d.log.result("B's receive CQ is empty: a WRITE completes only at the requester")
	return nil
}

// preview quotes the start of b.
func preview(b []byte) string {
	const n = 24
	if len(b) <= n {
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("%q...", b[:n])
}

// Scene 4.
func (d *demo) read() error {
	a, b := d.a, d.b
	src, dst := b.buf[readOff:readOff+readLen], a.buf[readOff:readOff+readLen]
	fillText(src, "RDMA READ brings B's bytes back to A. ")
	d.log.detail("A posts an RDMA READ of %d bytes from B's va=%#x rkey=%v (wr_id 4)", readLen, b.va(readOff), b.mr.RKey())
	wc, err := a.postSend(qp.SendWR{WRID: 4, Opcode: qp.WRRDMARead, SGList: a.sge(readOff, readLen),
		RemoteAddr: b.va(readOff), RKey: b.mr.RKey()})
	if err != nil {
		return err
	}
	d.log.result("A's send CQ: %v", wc)
	if wc.ByteLen != readLen {
		return fmt.Errorf("READ completed %d bytes, want %d", wc.ByteLen, readLen)
	}
	if err := sameBytes(dst, src, "A's memory"); err != nil {
		return err
	}
	d.log.result("A's memory at va=%#x now holds B's %d bytes: %s", a.va(readOff), readLen, preview(dst))
	return nil
}

// Scene 5.
func (d *demo) atomics() error {
	a, b := d.a, d.b
	word := b.buf[atomicOff : atomicOff+8]
	binary.NativeEndian.PutUint64(word, demoAtomicOld)
	d.log.detail("B's word at va=%#x holds %d", b.va(atomicOff), demoAtomicOld)
	steps := []struct {
		wr        qp.SendWR
		what      string
		orig, now uint64
	}{
		{qp.SendWR{WRID: 5, Opcode: qp.WRAtomicFetchAndAdd, CompareAdd: demoAdd},
			fmt.Sprintf("FETCH_AND_ADD %d", demoAdd), demoAtomicOld, demoAtomicOld + demoAdd},
		{qp.SendWR{WRID: 6, Opcode: qp.WRAtomicCmpAndSwp, CompareAdd: demoAtomicOld + demoAdd, Swap: demoSwap},
			fmt.Sprintf("COMPARE_AND_SWAP compare=%d swap=%d", demoAtomicOld+demoAdd, demoSwap), demoAtomicOld + demoAdd, demoSwap},
	}
	for i, st := range steps {
		off := atomicOff + 8*i // where A keeps the original value
		st.wr.SGList, st.wr.RemoteAddr, st.wr.RKey = a.sge(off, 8), b.va(atomicOff), b.mr.RKey()
		d.log.detail("A posts %s on that word (wr_id %d); the old value lands in A's buffer at va=%#x", st.what, st.wr.WRID, a.va(off))
		wc, err := a.postSend(st.wr)
		if err != nil {
			return err
		}
		orig, now := binary.NativeEndian.Uint64(a.buf[off:]), binary.NativeEndian.Uint64(word)
		d.log.result("A's send CQ: %v", wc)
		d.log.result("%s: A's local result (the original value) %d, B's word now %d", st.what, orig, now)
		if orig != st.orig || now != st.now {
			return fmt.Errorf("%s: original %d, word %d; want %d and %d", st.what, orig, now, st.orig, st.now)
		}
	}
	return nil
}

// Scene 6.
func (d *demo) loss() error {
	a, b := d.a, d.b
	src, dst := a.buf[lossOff:lossOff+lossLen], b.buf[lossOff:lossOff+lossLen]
	fillText(src, "go-back-N resends from the lost PSN on. ")
	before := map[*demoSide]rnic.Counters{a: a.dev.Counters(), b: b.dev.Counters()}
	d.log.armDrop(a.name, lossDrop)
	d.log.detail("A posts an RDMA WRITE of %d bytes to B's va=%#x (wr_id 7); the fabric will drop packet %d", lossLen, b.va(lossOff), lossDrop)
	wc, err := a.postSend(qp.SendWR{WRID: 7, Opcode: qp.WRRDMAWrite, SGList: a.sge(lossOff, lossLen),
		RemoteAddr: b.va(lossOff), RKey: b.mr.RKey()})
	if err != nil {
		return err
	}
	d.log.result("A's send CQ: %v", wc)
	if err := sameBytes(dst, src, "B's memory"); err != nil {
		return err
	}
	d.log.result("B's memory holds all %d bytes, intact: %s", lossLen, preview(dst))
	ca, cb := a.dev.Counters(), b.dev.Counters()
	ba, bb := before[a], before[b]
	counters := []struct {
		side      string
		name      string
		got, want uint64
		means     string
	}{
		{"A", "rcvd_seq_err", ca.RcvdSeqErr - ba.RcvdSeqErr, 1, "PSN sequence error NAKs A received"},
		{"A", "completer_retry_err", ca.CompleterRetryErr - ba.CompleterRetryErr, 1, "times A went back N"},
		{"A", "retransmit_timeouts", ca.RetransmitTimeouts - ba.RetransmitTimeouts, 0, "the timer never fired: the NAK did the work"},
		{"B", "out_of_seq_request", cb.OutOfSeqRequest - bb.OutOfSeqRequest, uint64(lossPackets - lossDrop), "packets B dropped because one before them was missing"},
		{"B", "duplicate_request", cb.DuplicateRequest - bb.DuplicateRequest, 0, "packets B had seen already"},
	}
	var bad []string
	for _, c := range counters {
		d.log.result("%s %-22s %s", c.side, fmt.Sprintf("%s=%d", c.name, c.got), c.means)
		if c.got != c.want {
			bad = append(bad, fmt.Sprintf("%s %s=%d, want %d", c.side, c.name, c.got, c.want))
		}
	}
	if n := d.log.dropsLeft(); n != 0 {
		bad = append(bad, "the fabric did not drop the packet")
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// Scene 7.
func (d *demo) congestion() error {
	a, b := d.a, d.b
	src, dst := a.buf[ccOff:ccOff+ccLen], b.buf[ccOff:ccOff+ccLen]
	fillText(src, "DCQCN: an ECN mark, a CNP, a slower sender. ")
	_, ba := a.qp.Congestion()
	_, bb := b.qp.Congestion()
	f := a.link.Faults()
	f.ECN = 1 // every ECN-capable packet A sends: the one WRITE
	a.link.SetFaults(f)
	// B sends its CNP at once and its ACK at the end of the batch of
	// packets it received: two sends. Its packets cross the fabric
	// slowly for this scene, so that A takes the CNP only after B's ACK
	// is on the page, and every run prints the same.
	g := b.link.Faults()
	g.Delay = demoCNPDelay
	b.link.SetFaults(g)
	defer func() {
		f.ECN, g.Delay = 0, 0
		a.link.SetFaults(f)
		b.link.SetFaults(g)
	}()
	d.log.detail("A posts an RDMA WRITE of %d bytes to B's va=%#x (wr_id 8); the fabric marks it CE", ccLen, b.va(ccOff))
	wc, err := a.postSend(qp.SendWR{WRID: 8, Opcode: qp.WRRDMAWrite, SGList: a.sge(ccOff, ccLen),
		RemoteAddr: b.va(ccOff), RKey: b.mr.RKey()})
	if err != nil {
		return err
	}
	d.log.result("A's send CQ: %v", wc)
	if err := sameBytes(dst, src, "B's memory"); err != nil {
		return err
	}
	st, ca := a.qp.Congestion()
	_, cb := b.qp.Congestion()
	on := d.log.cc.cc == rnic.CCDCQCN
	cnps, handled, ignored := uint64(0), uint64(0), uint64(0)
	if on {
		cnps, handled = 1, 1
		d.log.result("A's QP now sends at most %v: DCQCN's rate, which silence raises back to the line", st.Rate)
	} else {
		d.log.result("congestion control is off (--cc none): B counts the mark and sends no CNP")
	}
	counters := []struct {
		side      string
		name      string
		got, want uint64
		means     string
	}{
		{"B", "np_ecn_marked_roce_packets", cb.NPECNMarkedRoCEPackets - bb.NPECNMarkedRoCEPackets, 1, "packets B received marked CE"},
		{"B", "np_cnp_sent", cb.NPCNPSent - bb.NPCNPSent, cnps, "CNPs B's notification point sent"},
		{"A", "rp_cnp_handled", ca.RPCNPHandled - ba.RPCNPHandled, handled, "CNPs A's reaction point acted on"},
		{"A", "rp_cnp_ignored", ca.RPCNPIgnored - ba.RPCNPIgnored, ignored, "CNPs A could not act on"},
	}
	var bad []string
	for _, c := range counters {
		d.log.result("%s %-29s %s", c.side, fmt.Sprintf("%s=%d", c.name, c.got), c.means)
		if c.got != c.want {
			bad = append(bad, fmt.Sprintf("%s %s=%d, want %d", c.side, c.name, c.got, c.want))
		}
	}
	if on && !st.Started {
		bad = append(bad, "A's rate was not cut")
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// demoLog writes the demo's lines, from the main goroutine, the devices'
// trace callbacks and the links' taps, one whole line at a time, so the
// order on the page is the order things happened in. It also captures the
// packets and drops the one the loss scene asks for.
type demoLog struct {
	mu       sync.Mutex
	w        io.Writer
	quiet    bool
	cc       linkFlags // --cc and --cc-profile, for the NICs
	writeErr error     // the first error writing w
	pcap     *pcapgo.Writer
	pcapErr  error

	packets int // packets printed (and captured)
	dropped int

	// The drop armDrop asks for: the nth packet from dropFrom after it.
	dropFrom string
	dropNth  int

	sb strings.Builder
	p  wire.Packet
}

func (l *demoLog) print(s string) {
	if l.writeErr == nil {
		_, l.writeErr = io.WriteString(l.w, s)
	}
}

func (l *demoLog) printf(quiet bool, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.quiet && !quiet {
		return
	}
	l.print(fmt.Sprintf(format, args...))
}

// header starts scene n.
func (l *demoLog) header(n int, title, about string) {
	l.printf(true, "\n=== Scene %d: %s ===\n", n, title)
	for line := range strings.SplitSeq(about, "\n") {
		l.printf(true, "%s\n", line)
	}
	l.printf(false, "\n")
}

// result prints an outcome; it shows with --quiet.
func (l *demoLog) result(format string, args ...any) {
	l.printf(true, "  => "+format+"\n", args...)
}

// detail prints what the program is about to do.
func (l *demoLog) detail(format string, args ...any) {
	l.printf(false, "  "+format+"\n", args...)
}

// event prints a device's event as "[A qp 0x11] go back to PSN 1193048: NAK".
func (l *demoLog) event(ev trace.Event) {
	l.printf(false, "  [%s qp %#x] %v\n", ev.Device, ev.QP, ev)
}

// armDrop makes the fabric drop the nth packet side sends from now on.
func (l *demoLog) armDrop(side string, nth int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropFrom, l.dropNth = side, nth
}

// dropsLeft returns how many packets of the armed drop are still to come.
func (l *demoLog) dropsLeft() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropNth
}

// tap returns the DropFunc of from's link: it prints and captures every
// packet from sends to peer, and drops the one armDrop asked for.
func (l *demoLog) tap(from, peer string) func(pkt []byte, seq uint64) bool {
	return func(pkt []byte, _ uint64) bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		drop := false
		if l.dropNth > 0 && l.dropFrom == from {
			l.dropNth--
			if l.dropNth == 0 {
				drop = true
				l.dropped++
			}
		}
		l.packets++
		if l.pcap != nil && l.pcapErr == nil {
			ci := gopacket.CaptureInfo{Timestamp: time.Now(), CaptureLength: len(pkt), Length: len(pkt)}
			l.pcapErr = l.pcap.WritePacket(ci, pkt)
		}
		if !l.quiet {
			l.print(l.formatPacket(from, peer, pkt, drop))
		}
		return drop
	}
}

// formatPacket describes one packet on one line: who sent it to whom, the
// BTH and each extended header the opcode carries.
func (l *demoLog) formatPacket(from, to string, pkt []byte, dropped bool) string {
	sb, p := &l.sb, &l.p
	sb.Reset()
	fmt.Fprintf(sb, "  %s -> %s  ", from, to)
	if err := wire.ParseIP(p, pkt); err != nil {
		fmt.Fprintf(sb, "malformed packet of %d bytes: %v\n", len(pkt), err)
		return sb.String()
	}
	h := p.BTH
	fmt.Fprintf(sb, "%-28v qp=%#x psn=%d", h.Opcode(), uint32(h.DestQP()), uint32(h.PSN()))
	if h.AckReq() {
		sb.WriteString(" ackreq")
	}
	if h.BECN() {
		sb.WriteString(" becn")
	}
	if p.RETH != nil {
		fmt.Fprintf(sb, " reth(va=%#x rkey=%#08x len=%d)", p.RETH.VA(), uint32(p.RETH.RKey()), p.RETH.DMALen())
	}
	if a := p.AtomicETH; a != nil {
		fmt.Fprintf(sb, " atomiceth(va=%#x rkey=%#08x", a.VA(), uint32(a.RKey()))
		if h.Opcode() == bth.RCCompareSwap {
			fmt.Fprintf(sb, " compare=%d swap=%d)", a.Compare(), a.SwapAdd())
		} else {
			fmt.Fprintf(sb, " add=%d)", a.SwapAdd())
		}
	}
	if p.AETH != nil {
		fmt.Fprintf(sb, " aeth(%v msn=%d)", p.AETH.Syndrome(), uint32(p.AETH.MSN()))
	}
	if p.AtomicAck != nil {
		fmt.Fprintf(sb, " orig=%d", p.AtomicAck.OrigData())
	}
	if p.ImmDt != nil {
		fmt.Fprintf(sb, " imm=%#08x", p.ImmDt.Imm())
	}
	if p.Info.Payload {
		fmt.Fprintf(sb, " payload=%d", len(p.Payload))
		if pad := h.PadCnt(); pad > 0 {
			fmt.Fprintf(sb, " pad=%d", pad)
		}
		if printable(p.Payload) && len(p.Payload) <= 32 {
			fmt.Fprintf(sb, " %q", p.Payload)
		}
	}
	if dropped {
		sb.WriteString("   ** dropped by the fabric **")
	}
	sb.WriteByte('\n')
	return sb.String()
}

func printable(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 || !unicode.IsPrint(rune(c)) {
			return false
		}
	}
	return len(b) > 0
}

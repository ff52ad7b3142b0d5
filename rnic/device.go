// Package rnic is the gorxe device: it owns a link, the protection
// domains, memory regions, completion queues and queue pairs, and moves
// packets between the link and the queue pairs. Its methods are the verbs
// API, shaped after rdma-core's: Open a device on a link, AllocPD, RegMR,
// CreateCQ, CreateQP, then Modify, PostSend, PostRecv and Poll.
//
// Inside, a packet is handled on the goroutine that receives it: the
// device's receive goroutine, or a program's own goroutine that busy polls
// with Poll (on links that can receive without blocking), which then needs
// no wake-up between a packet's arrival and the program seeing its effect.
// Either way the packet's ICRC is checked and its QP runs its responder or
// completer at once; PostSend builds and sends on the caller's goroutine.
// Worker goroutines, each owning a fixed set of QPs (hashed by QPN), run
// the QPs' timers and the sends a QP leaves for later: the rest of a
// READ's responses beyond the first burst, and the rest of a long send.
//
// Every QP runs DCQCN by default (Config.CC), as ConnectX NICs do: its
// packets leave ECN-capable, it answers CE-marked data with CNPs, and a
// CNP from its peer cuts its rate, to which its sends are then paced in
// bursts on its worker's timers (congestion.go here, internal/rc's
// congestion.go, and package congestion).
//
// Lock order (a lock may be taken while holding those left of it):
//
//	receiver.mu (the receive path) > rc.QP.mu > rc.SRQ.mu, worker.mu, cq.CQ.mu, mr.Table's, events.mu
//	Device.mu is never held while a QP's lock is taken.
//
// A QP holds its lock while it hands packets to the link, so that its
// packets leave in PSN order whichever goroutine drives it; so the receive
// path, which holds receiver.mu while it runs a QP, waits for a link send
// to return. A QP bounds what one call sends (maxBurst packets for the
// requester, a burst of READ responses for the responder) and leaves the
// rest to its worker, so no QP holds the receive path for long.
package rnic

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorxe/gorxe/congestion"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/internal/pages"
	"github.com/gorxe/gorxe/internal/rc"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/immdt"
	"github.com/gorxe/gorxe/wire/reth"
)

// Config says how to open a device.
type Config struct {
	Link    link.Link
	Name    string // for logs and traces; "gorxe0" when empty
	Workers int    // QP worker goroutines; 1 when zero
	// Window is the requester's limit of unacknowledged PSNs per QP;
	// qp.DefaultWindow when zero.
	Window int
	// Port is the UDP destination port of RoCE v2 packets, sent and
	// received; 4791 (wire.UDPPort) when zero.
	Port uint16
	// NoTailProbe turns the requester's tail-loss probe off for every QP,
	// leaving the local ACK timeout alone to recover a lost last packet
	// (qp.InitAttr.NoTailProbe).
	NoTailProbe bool
	// Trace, when set, is told of every QP state change and transport
	// event (package trace): the NAKs, RNR NAKs, duplicate answers and
	// CNPs the QPs' responders send, their requesters' go-back-N,
	// timeouts, probes and RNR waits, failed work requests, DCQCN's rate
	// changes, and CNPs that find no QP. Each event carries the device's
	// Name, the QP's number and the time on the device's clock since it
	// opened (the Loop's time, on a Loop). Trace is called from the
	// device's goroutines, or whichever of the program's drives a QP,
	// with the QP's lock held: it must not call the QP, and should return
	// soon. An event's strings are constants but for a rare error's, so
	// tracing allocates nothing that Trace itself does not.
	Trace func(trace.Event)
	// PollGrace is how long after a program's last Poll the device takes
	// back its receive path: its receive goroutine handles packets again,
	// and sends what Poll left pending. DefaultPollGrace when zero.
	PollGrace time.Duration
	// BusyPoll is how long the receive goroutine keeps polling the link
	// after a batch before it sleeps in the kernel, on a link whose polls
	// cost no system call (link.FlagCheapPoll: the xdp link's rings), as
	// Linux's busy_poll keeps polling a socket's queue. A peer streaming
	// to a device whose program does not poll it (a passive ib_write_bw
	// server) then wakes no thread here per batch: on AF_XDP the sender's
	// CPU pays for that wake-up. Zero means DefaultBusyPoll when Go runs
	// goroutines on two CPUs or more (GOMAXPROCS), and none on one, where
	// polling would take the only CPU from the program; negative means
	// never. The receive goroutine stops as soon as a program polls or
	// waits on the device (Poll, Drive), and lets other goroutines run
	// as it polls.
	BusyPoll time.Duration
	// PacketTrace, when set, sees every RoCE packet the device sends and
	// receives, from its IP header on, before it is sent or after its ICRC
	// was checked. It must not keep the slice.
	PacketTrace func(dir Direction, pkt []byte)

	// CC is the congestion control the device's QPs run: CCDCQCN, the
	// default as on ConnectX NICs, or CCNone. Either way every packet
	// leaves ECN-capable (ECT(0)) unless its address vector's traffic
	// class sets the ECN bits, and marks are counted
	// (np_ecn_marked_roce_packets).
	CC CCMode
	// CCParams are DCQCN's parameters: congestion.ConnectX() (the
	// default, when CCParams is zero) or congestion.Paper(), with any
	// field changed.
	CCParams congestion.Params
	// LineRate is the port's rate, where each QP's DCQCN starts and which
	// it never exceeds: when zero, the link's (link.LineRater) or
	// DefaultLineRate. Nothing is paced at the line rate.
	LineRate congestion.Rate
	// PacingBurst is how many bytes a QP that DCQCN paces sends at a
	// time, waking once per burst. When zero, DefaultPacingBurst or what
	// the QP's rate moves in DefaultPacingTime, whichever is less.
	PacingBurst int

	// KeySeed, when not zero, makes the device's memory keys a function of
	// it (mr.NewSeededTable), for demonstrations and simulations that must
	// repeat byte for byte. Left zero, keys are unpredictable, as they
	// must be on a real network.
	KeySeed uint64

	// Loop, when set, runs the device on an event loop of the caller's
	// (a simulator's) instead of on goroutines and the time package's
	// clock; see Loop.
	Loop Loop
}

// Loop is an event loop that runs devices in virtual time: a
// simulator's, which runs many devices and the network between them on
// one goroutine, so that a run is exact and repeatable.
//
// A device on a Loop starts no goroutine. It reads the loop's clock, and
// asks the loop to call it back when its workers' turns come (their QPs'
// timers, DCQCN's pacing, deferred sends) and when its link, which must
// be a link.Notifier, has packets for it. Everything it does happens
// inside a call from the loop or from the program, which must make its
// own calls (PostSend, polling its CQs with cq.CQ.Poll) on the loop's
// goroutine too. The device's methods that wait (Poll, Drive, a CQ's
// Wait) must not be used: nothing else would run while they wait.
type Loop interface {
	// Now returns the loop's time, from its epoch.
	Now() time.Duration
	// At has the loop call fn at t, or at Now if t has passed, after
	// whatever it was due to run at that time already.
	At(t time.Duration, fn func())
}

// Direction tells PacketTrace whether a packet was sent or received.
type Direction uint8

// Packet directions.
const (
	Sent Direction = iota
	Received
)

// ErrClosed is returned by a closed device's methods.
var ErrClosed = errors.New("rnic: device closed")

// Device is an open gorxe device.
type Device struct {
	cfg     Config
	name    string
	link    link.Link
	mrs     *mr.Table
	gids    []netip.Addr
	workers []*worker
	ports   []*port // the rc.Port of each worker's QPs
	tx      transmitter
	cc      *congestion.Config // each QP's DCQCN; nil when off

	mu      sync.RWMutex
	qps     map[bth.QPN]*QP
	mcast   map[netip.Addr][]*QP // the QPs attached to each multicast group (mcast.go), by its unmapped address
	nextQPN bth.QPN
	retired qp.Counters // counters of destroyed QPs
	retCC   congestion.Counters
	closed  bool

	icrcErrors atomic.Uint64
	malformed  atomic.Uint64
	noQP       atomic.Uint64
	rcvd       atomic.Uint64
	noRoute    atomic.Uint64
	sendErr    atomic.Uint64 // send_err: packets of link sends that failed
	cnpIgnored atomic.Uint64 // rp_cnp_ignored: CNPs for QPs that do not exist

	badOpcode      atomic.Uint64 // receive_checks.go
	addrMismatch   atomic.Uint64
	pkeyViolations atomic.Uint64

	events    events // asynchronous events (GetAsyncEvent)
	rx        receiver
	pollGrace time.Duration
	busyPoll  time.Duration // the receive goroutine's (Config.BusyPoll), 0 for none
	clock     *monotime.Clock

	done chan struct{}
	wg   sync.WaitGroup
}

// Open starts a device on cfg.Link. Its GID table holds the link's
// addresses in order, IPv4 ones IPv4-mapped (::ffff:a.b.c.d), as RoCE v2
// GIDs are.
func Open(cfg Config) (*Device, error) {
	if cfg.Link == nil {
		return nil, errors.New("rnic: no link")
	}
	d := &Device{
		cfg:     cfg,
		name:    cfg.Name,
		link:    cfg.Link,
		mrs:     newTable(cfg.KeySeed),
		qps:     make(map[bth.QPN]*QP),
		nextQPN: firstQPN,
		done:    make(chan struct{}),
		clock:   monotime.NewClock(),
	}
	d.events.ready = make(chan struct{}, 1)
	var notifier link.Notifier
	if cfg.Loop != nil {
		var ok bool
		if notifier, ok = cfg.Link.(link.Notifier); !ok {
			return nil, fmt.Errorf("rnic: a device on a Loop needs a link that notifies (link.Notifier), not a %T", cfg.Link)
		}
		d.clock = monotime.NewClockFrom(cfg.Loop.Now)
	}
	if d.name == "" {
		d.name = "gorxe0"
	}
	if d.cfg.Port == 0 {
		d.cfg.Port = wire.UDPPort
	}
	for _, a := range cfg.Link.Addrs() {
		d.gids = append(d.gids, netip.AddrFrom16(a.As16()))
	}
	if len(d.gids) == 0 {
		return nil, errors.New("rnic: the link has no address")
	}
	cc, err := ccConfig(&cfg, cfg.Link)
	if err != nil {
		return nil, err
	}
	d.cc = cc
	d.tx = transmitter{link: cfg.Link, gids: d.gids, dport: d.cfg.Port, trace: cfg.PacketTrace,
		noRoute: func() { d.noRoute.Add(1) }, sendErr: func(n int) { d.sendErr.Add(uint64(n)) }}
	if sp, ok := cfg.Link.(link.SourcePorter); ok {
		d.tx.srcPort = sp.SourcePort()
	}
	if df, ok := cfg.Link.(link.Deferrer); ok && cfg.Loop == nil {
		d.tx.deferrer, d.tx.polling, d.tx.deferred = df, d.programPolls, d.deferredSend
	}
	if j, ok := cfg.Link.(link.Joiner); ok {
		d.tx.joiner, d.tx.busyPolled = j, d.busyPolled
	}
	n := max(cfg.Workers, 1)
	for range n {
		w := newWorker(d)
		d.workers = append(d.workers, w)
		d.ports = append(d.ports, &port{transmitter: &d.tx, worker: w, mrs: d.mrs, clock: d.clock})
		if cfg.Loop == nil {
			d.wg.Add(1)
			go w.run()
		}
	}
	d.pollGrace = cmp.Or(cfg.PollGrace, DefaultPollGrace)
	d.busyPoll = busyPollFor(cfg, runtime.GOMAXPROCS(0))
	d.rx.init(d, cfg.Link)
	if notifier != nil {
		notifier.Notify(d.notified)
		return d, nil
	}
	d.wg.Add(1)
	go d.receiveLoop()
	return d, nil
}

// firstQPN is the first QPN handed out; 0 and 1 are the special QPs and
// rxe starts its RC QPs at 17 (0x11).
const firstQPN = 0x11

// Name returns the device's name.
func (d *Device) Name() string { return d.name }

// Loop returns the event loop the device runs on (Config.Loop), or nil
// for a device on goroutines and the time package's clock. What runs
// beside a device, such as its connection manager, keeps its time and its
// timers on the same loop.
func (d *Device) Loop() Loop { return d.cfg.Loop }

// GIDs returns the device's GID table.
func (d *Device) GIDs() []netip.Addr { return append([]netip.Addr(nil), d.gids...) }

// GIDIndex returns the index of the GID that holds addr (IPv4, IPv4-mapped
// or IPv6), or -1.
func (d *Device) GIDIndex(addr netip.Addr) int {
	for i, g := range d.gids {
		if g == netip.AddrFrom16(addr.As16()) {
			return i
		}
	}
	return -1
}

// MTU returns the largest path MTU the link allows: the IB MTU whose
// packets, with every header, fit the link's MTU (as rxe derives it).
func (d *Device) MTU() qp.MTU {
	for m := qp.MTU4096; m > qp.MTU256; m-- {
		if m.Bytes()+maxHeaders <= d.link.MTU() {
			return m
		}
	}
	return qp.MTU256
}

// maxHeaders is the most a RoCE v2 packet adds to a whole MTU of payload:
// IPv6, UDP, the longest header chain that carries a payload (BTH, RETH
// and ImmDt: an RDMA WRITE with immediate) and the ICRC; a whole MTU needs
// no pad. 84 bytes: a 4176-byte link carries path MTU 2048, where rxe,
// which allows 80 (RXE_MAX_HDR_LENGTH), takes 4096 and sends such a WRITE
// over IPv6 4 bytes above the link's MTU.
const maxHeaders = wire.IPv6Len + wire.UDPLen + bth.Len + reth.Len + immdt.Len + wire.ICRCLen

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() *mr.PD { return d.mrs.AllocPD() }

// RegMR registers buf as a memory region in pd with the given access
// rights. Its IOVA is the slice's address, as a C program's would be.
// Every page of buf is made present, as rxe's and a NIC's registration
// pins them (internal/pages), so that the first packets to reach a page
// do not wait for it to be faulted in; what buf holds is unchanged. A
// region larger than populateMax is left to fault in as it is used.
func (d *Device) RegMR(pd *mr.PD, buf []byte, access mr.Access) (*mr.MR, error) {
	return d.RegMRIOVA(pd, buf, 0, access)
}

// RegMRIOVA registers buf with an explicit IOVA, as RegMR does.
func (d *Device) RegMRIOVA(pd *mr.PD, buf []byte, iova uint64, access mr.Access) (*mr.MR, error) {
	m, err := d.mrs.Register(pd, buf, iova, access)
	if err == nil && uint64(len(buf)) <= populateMax {
		pages.Populate(buf) // best effort: without it, only slower
	}
	return m, err
}

// populateMax is the largest region RegMR makes present: a quarter of
// the machine's memory. A program may register a mapping far larger
// than what it touches (a reserved window it fills sparsely); making all
// of it present could bring the kernel's OOM killer, where rxe would
// refuse to pin it (RLIMIT_MEMLOCK) and a NIC's driver would fail.
var populateMax = pages.Memory() / 4

// CreateCQ creates a completion queue of depth entries.
// A goroutine that waits on it (cq.CQ.Wait) runs the device's receive
// path itself while packets keep coming (Drive).
func (d *Device) CreateCQ(depth int) (*cq.CQ, error) {
	c, err := d.rx.wakes.NewCQ(depth, d)
	if err != nil {
		return nil, err
	}
	c.OnOverflow(func() { d.events.post(AsyncEvent{Type: EventCQErr, CQ: c}) })
	return c, nil
}

// QP is a queue pair of this device. Its methods are the verbs of an
// ibv_qp; the transport engine behind them is driven by the device alone.
type QP struct {
	e engine
	// rcq or udq is e by its concrete type, for PostSend and PostRecv: a
	// call through the engine interface makes escape analysis assume the
	// engine keeps the caller's slice, so every post of work requests
	// built on the caller's stack (as a C program fills its ibv_send_wr)
	// allocated them on the heap.
	rcq *rc.QP
	udq *rc.UD
	// unreliable says the QP is a program's UC or UD QP, whose sends
	// wait for the device to take in what waits on the link
	// (Device.receiveFirst).
	unreliable bool
	dev        *Device
	w          *worker
	timer      *timerEntry // its place in w's timer heap
	srq        *SRQ        // the shared receive queue it was created with, or nil
	// path is the QP's peer and local GID as its last Modify left them,
	// for the receive path's address check without the QP's lock; nil
	// while the QP has no address vector.
	path atomic.Pointer[qpPath]
}

type qpPath struct {
	dgid      netip.Addr
	sgidIndex uint8
}

// Num returns the QP number.
func (q *QP) Num() bth.QPN { return q.e.Num() }

// Modify changes the QP's attributes and state, as ibv_modify_qp: mask
// says which fields of attr apply (rc.QP.Modify has the rules).
func (q *QP) Modify(attr *qp.Attr, mask qp.AttrMask) error {
	err := q.e.Modify(attr, mask)
	if dgid, sgid, ok := q.e.Path(); ok {
		q.path.Store(&qpPath{dgid, sgid})
		if err == nil && mask&qp.AttrAV != 0 {
			q.dev.resolve(dgid)
		}
	} else {
		q.path.Store(nil)
	}
	return err
}

// Query returns the QP's attributes, as ibv_query_qp.
func (q *QP) Query() qp.Attr { return q.e.Query() }

// Congestion returns the state of the QP's DCQCN reaction point (its
// rate, target rate and α) and the counters of its reaction and
// notification points.
func (q *QP) Congestion() (congestion.State, congestion.Counters) { return q.e.Congestion() }

// State returns the QP's current state.
func (q *QP) State() qp.State { return q.e.State() }

// Stats returns a copy of the QP's counters.
func (q *QP) Stats() qp.Counters { return q.e.Stats() }

// PostSend queues send work requests, as ibv_post_send, and starts
// sending them on the caller's goroutine. On error it returns the index
// of the first request it did not queue.
func (q *QP) PostSend(wrs []qp.SendWR) (int, error) {
	if q.unreliable {
		q.dev.receiveFirst()
	}
	if q.udq != nil {
		return q.udq.PostSend(wrs)
	}
	return q.rcq.PostSend(wrs)
}

// PostRecv queues receive work requests, as ibv_post_recv. On error it
// returns the index of the first request it did not queue. A QP created
// with an SRQ refuses it (qp.ErrBadWR), as rdma-core's rxe does.
func (q *QP) PostRecv(wrs []qp.RecvWR) (int, error) {
	if q.udq != nil {
		return q.udq.PostRecv(wrs)
	}
	return q.rcq.PostRecv(wrs)
}

// engine is what a QP's transport engine does for the device and for
// the verbs: internal/rc's QP for RC and UC, its UD for UD.
type engine interface {
	rc.Runner
	Num() bth.QPN
	// Service returns the transport the QP runs, whose opcodes it takes.
	Service() bth.Service
	Modify(attr *qp.Attr, mask qp.AttrMask) error
	Query() qp.Attr
	State() qp.State
	Stats() qp.Counters
	Congestion() (congestion.State, congestion.Counters)
	// The posts are not here: QP calls them on the engine's concrete
	// type (QP.rcq, QP.udq).
	// HandlePacket takes a packet for the QP and reports whether the QP
	// now owes an ACK, which FlushAck sends.
	HandlePacket(p *wire.Packet) bool
	FlushAck()
	HandleCNP()
	// Path returns the peer's GID and the QP's own GID index, once the
	// QP has an address vector.
	Path() (dgid netip.Addr, sgidIndex uint8, ok bool)
}

// CreateQP creates a queue pair in the RESET state: RC, UC or UD
// (ia.Type). With ia.SRQ, an SRQ of this device, the QP receives from
// that shared queue and its own PostRecv is refused.
func (d *Device) CreateQP(ia qp.InitAttr) (*QP, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	num, err := d.allocQPN()
	if err != nil {
		return nil, err
	}
	w := d.workers[int(num)%len(d.workers)]
	if ia.Window == 0 {
		ia.Window = d.cfg.Window
	}
	ia.NoTailProbe = ia.NoTailProbe || d.cfg.NoTailProbe
	port := d.qpPort(num)
	srq, err := d.attachSRQ(&ia)
	if err != nil {
		return nil, err
	}
	dq := &QP{dev: d, w: w, srq: srq, timer: port.timer}
	switch ia.Type {
	case qp.TypeUD:
		q, err := rc.NewUD(port, num, ia, d.MTU().Bytes())
		if err != nil {
			return nil, err
		}
		if d.cfg.Trace != nil {
			q.SetTrace(d.traceEvent)
		}
		q.SetAsync(dq.asyncEvent)
		dq.e, dq.udq = q, q
	default: // RC and UC: rc.New refuses the rest
		q, err := rc.New(port, num, ia)
		if err != nil {
			return nil, err
		}
		if err := q.SetCongestion(d.cc); err != nil {
			return nil, err // Open checked the configuration
		}
		if d.cfg.Trace != nil {
			q.SetTrace(d.traceEvent)
		}
		q.SetAsync(dq.asyncEvent)
		dq.e, dq.rcq = q, q
	}
	dq.unreliable = unreliable(dq.e)
	d.qps[num] = dq
	if srq != nil {
		srq.users++
	}
	w.add(dq)
	return dq, nil
}

// GSIQPN is the General Services QP's number: QP 1, which carries the
// connection manager's MADs (IBTA Vol 1 §13.5).
const GSIQPN bth.QPN = 1

// CreateGSI creates the device's General Services QP, QP 1: a UD QP in
// the RESET state whose packets carry source QP 1 and which receives what
// is sent to QP 1 with the GSI's Q_Key, 0x80010000, whatever Q_Key its
// attributes hold. A device has one; the connection manager (package cm)
// owns it.
func (d *Device) CreateGSI(ia qp.InitAttr) (*QP, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if _, used := d.qps[GSIQPN]; used {
		return nil, errors.New("rnic: the device has a GSI QP already")
	}
	ia.Type = qp.TypeUD
	port := d.qpPort(GSIQPN)
	q, err := rc.NewUD(port, GSIQPN, ia, d.MTU().Bytes())
	if err != nil {
		return nil, err
	}
	if d.cfg.Trace != nil {
		q.SetTrace(d.traceEvent)
	}
	w := d.workers[int(GSIQPN)%len(d.workers)]
	dq := &QP{e: q, udq: q, dev: d, w: w, timer: port.timer}
	d.qps[GSIQPN] = dq
	w.add(dq)
	return dq, nil
}

// traceEvent tells Config.Trace of ev, an event of one of the device's
// QPs or its own, as the device's.
func (d *Device) traceEvent(ev trace.Event) {
	ev.Device = d.name
	d.cfg.Trace(ev)
}

func (d *Device) allocQPN() (bth.QPN, error) {
	for range bth.QPNMask {
		n := d.nextQPN
		d.nextQPN = (d.nextQPN + 1) & bth.QPNMask
		if d.nextQPN < firstQPN || d.nextQPN == bth.MulticastQPN {
			d.nextQPN = firstQPN
		}
		if _, used := d.qps[n]; !used {
			return n, nil
		}
	}
	return 0, errors.New("rnic: no free QP number")
}

// Destroy removes the QP from its device; packets for it are dropped from
// then on. No completions are generated for its outstanding work.
func (q *QP) Destroy() error {
	d := q.dev
	d.mu.Lock()
	if d.qps[q.Num()] != q {
		d.mu.Unlock()
		return fmt.Errorf("rnic: QP %#x already destroyed", uint32(q.Num()))
	}
	delete(d.qps, q.Num())
	d.detachAllMcastLocked(q)
	if q.srq != nil {
		q.srq.users--
	}
	st := q.Stats()
	d.retired.Add(&st)
	_, cc := q.e.Congestion()
	d.retCC.Add(&cc)
	d.mu.Unlock()
	d.rx.forget(q)
	q.w.remove(q)
	return nil
}

// lookup returns the QP numbered n, or nil.
func (d *Device) lookup(n bth.QPN) *QP {
	d.mu.RLock()
	q := d.qps[n]
	d.mu.RUnlock()
	return q
}

// Counters are a device's counters: the sum of its QPs' (qp.Counters,
// named as rxe's hw_counters), plus what happens before a packet reaches
// a QP.
type Counters struct {
	qp.Counters
	RcvdAll    uint64 // RoCE packets received from the link
	ICRCErrors uint64 // icrc_errors: dropped for a bad ICRC
	Malformed  uint64 // dropped as not a RoCE v2 packet gorxe can parse
	NoQP       uint64 // dropped for a destination QP that does not exist
	NoRoute    uint64 // not sent: no source GID of the destination's family
	// CC are DCQCN's counters, named as mlx5's: np_cnp_sent,
	// np_ecn_marked_roce_packets, rp_cnp_handled, rp_cnp_ignored (CNPs
	// with congestion control off, for a QP that does not exist, or to
	// one in a state that sends nothing), then gorxe's own.
	CC congestion.Counters
	// The drops of receive_checks.go; rxe counts none of them but the
	// P_Key one, in its port's bad_pkey_cntr.
	BadOpcode      uint64 // dropped for a reserved opcode, or one of a service the QP does not run
	AddrMismatch   uint64 // dropped for IP addresses other than the QP's peer and GID
	PKeyViolations uint64 // dropped for a P_Key the QP's partition does not admit
	// RxBatches says who processed the batches of packets received:
	// the device's own receive goroutine (or its Loop), a wake-up each,
	// or the same goroutine polling a while before it sleeps, none each;
	// a program busy polling (Device.Poll); a goroutine waiting on a CQ
	// (Device.Drive). A program that means to answer without wake-ups
	// sees its batches counted as polled. CaughtUp counts the own
	// batches the timer worker read before running timers that fired
	// late: the device had been stopped, and the answers they waited
	// for were waiting on the link.
	// BusyPolled counts the batches the receive goroutine found while it
	// kept polling the link (Config.BusyPoll), with no wake-up.
	// BeforeTx counts the own batches a sender read before it sent
	// more, the link having more waiting (the device's receive work
	// goes first).
	RxBatches struct{ Own, BusyPolled, Polled, Driven, CaughtUp, BeforeTx uint64 }
	// Link are the link's own counters, if it keeps any
	// (link.Counterer): udp_..., tap_..., xdp_....
	Link []link.Counter
}

// Named returns the counters with their names: rxe's, the device's own,
// then DCQCN's, mlx5's first, then the link's.
func (c *Counters) Named() []qp.NamedCounter {
	n := append(c.Counters.Named(),
		qp.NamedCounter{Name: "icrc_errors", Value: c.ICRCErrors},
		qp.NamedCounter{Name: "malformed", Value: c.Malformed},
		qp.NamedCounter{Name: "no_qp", Value: c.NoQP},
		qp.NamedCounter{Name: "no_route", Value: c.NoRoute},
		qp.NamedCounter{Name: "bad_opcode", Value: c.BadOpcode},
		qp.NamedCounter{Name: "addr_mismatch", Value: c.AddrMismatch},
		qp.NamedCounter{Name: "pkey_violations", Value: c.PKeyViolations},
		qp.NamedCounter{Name: "rx_batches_own", Value: c.RxBatches.Own},
		qp.NamedCounter{Name: "rx_batches_busy_polled", Value: c.RxBatches.BusyPolled},
		qp.NamedCounter{Name: "rx_batches_polled", Value: c.RxBatches.Polled},
		qp.NamedCounter{Name: "rx_batches_driven", Value: c.RxBatches.Driven},
		qp.NamedCounter{Name: "rx_batches_caught_up", Value: c.RxBatches.CaughtUp},
		qp.NamedCounter{Name: "rx_batches_before_tx", Value: c.RxBatches.BeforeTx},
	)
	for _, cc := range c.CC.Named() {
		n = append(n, qp.NamedCounter{Name: cc.Name, Value: cc.Value})
	}
	for _, lc := range c.Link {
		n = append(n, qp.NamedCounter{Name: lc.Name, Value: lc.Value})
	}
	return n
}

// Counters returns the device's counters.
func (d *Device) Counters() Counters {
	d.mu.RLock()
	c := Counters{Counters: d.retired, CC: d.retCC}
	qps := make([]*QP, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	d.mu.RUnlock()
	for _, q := range qps {
		st := q.Stats()
		c.Counters.Add(&st)
		_, cc := q.Congestion()
		c.CC.Add(&cc)
	}
	c.RcvdAll = d.rcvd.Load()
	c.ICRCErrors = d.icrcErrors.Load()
	c.Malformed = d.malformed.Load()
	c.NoQP = d.noQP.Load()
	c.NoRoute = d.noRoute.Load()
	c.SendErr = d.sendErr.Load()
	c.CC.RPCNPIgnored += d.cnpIgnored.Load()
	c.BadOpcode = d.badOpcode.Load()
	c.AddrMismatch = d.addrMismatch.Load()
	c.PKeyViolations = d.pkeyViolations.Load()
	c.RxBatches.Own = d.rx.ownBatches.Load()
	c.RxBatches.BusyPolled = d.rx.busyPolledBatches.Load()
	c.RxBatches.Polled = d.rx.polledBatches.Load()
	c.RxBatches.Driven = d.rx.drivenBatches.Load()
	c.RxBatches.CaughtUp = d.rx.caughtUp.Load()
	c.RxBatches.BeforeTx = d.rx.helped.Load()
	if lc, ok := d.link.(link.Counterer); ok {
		c.Link = lc.Counters()
	}
	return c
}

// Close stops the device: its link is closed and its goroutines have
// returned when Close returns. Queue pairs stop where they are.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	d.closed = true
	d.mu.Unlock()
	d.Flush() // the ACKs Poll left pending are owed to the peers
	close(d.done)
	d.rx.backstop.Stop()
	err := d.link.Close()
	d.wg.Wait()
	return err
}

// newTable returns the device's key table: seeded when seed is not zero.
func newTable(seed uint64) *mr.Table {
	if seed != 0 {
		return mr.NewSeededTable(seed)
	}
	return mr.NewTable()
}

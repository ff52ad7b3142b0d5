package qperf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	wirecm "github.com/gorxe/gorxe/wire/cm"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// qperf's constants for its RDMA tests.
const (
	ncqe        = 1024 // NCQE: work requests kept posted, CQEs polled at once
	k64         = 64 * 1024
	rdAtomicMax = 128 // what qperf reads as max_qp_rd_atom: rxe's

	wridSend = 1
	wridRecv = 2
	wridRDMA = 3

	tick = 100 // clock ticks a second (USER_HZ): the unit of a STAT's times
)

// Opener opens a device and its connection manager on the local
// address, the one the TCP connection to the peer runs from. A run keeps
// each device it opens for its whole life (a server's, or a client's
// list of tests) and closes it at the end, as a NIC outlives the tests
// that use it: QP numbers go on rising from one test to the next, and a
// capture of several tests tells their connections apart.
type Opener func(local netip.Addr) (*rnic.Device, *cm.Manager, error)

// devices is the devices a run has opened, by local address. A run's
// tests come one at a time (a server serves one request, a client runs
// its list in order), so one goroutine uses it.
type devices struct {
	open Opener
	at   map[netip.Addr]device
}

type device struct {
	dev *rnic.Device
	m   *cm.Manager
}

func newDevices(open Opener) *devices {
	return &devices{open: open, at: make(map[netip.Addr]device)}
}

// get returns the device on local, opening it the first time.
func (d *devices) get(local netip.Addr) (*rnic.Device, *cm.Manager, error) {
	if o, ok := d.at[local]; ok {
		return o.dev, o.m, nil
	}
	dev, m, err := d.open(local)
	if err != nil {
		return nil, nil, err
	}
	d.at[local] = device{dev, m}
	return dev, m, nil
}

// close closes every device the run opened.
func (d *devices) close() {
	for _, o := range d.at {
		o.m.Close()
		o.dev.Close()
	}
	clear(d.at)
}

// side is one end of a running test: the request it runs by, the TCP
// connection, the device's QP, CQ and buffer, and its counters.
type side struct {
	client bool
	test   string
	req    Request
	ctl    *ctl
	open   Opener
	debugf func(format string, args ...any)

	dev     *rnic.Device
	m       *cm.Manager
	pd      *mr.PD
	cq      *cq.CQ
	conn    *cm.Conn
	q       *rnic.QP
	buf     []byte
	mr      *mr.MR
	msgSize int
	lnode   Node
	rnode   Node

	peer    net.Addr // a UDP latency test's client, as its last message came from
	scratch []byte   // what -ar reads a received message into

	stat   Stat
	cancel context.CancelFunc
	timer  *time.Timer
	end    sync.Once
}

// epoch is the start of the clock a STAT's real time counts from.
var epoch = time.Now()

// readTimes reads the clock and the CPU times, in clock ticks, as
// qperf's get_times reads times() and /proc/stat.
func readTimes(t *[tN]uint64) {
	t[tReal] = uint64(time.Since(epoch) * tick / time.Second)
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != "cpu" {
		return
	}
	for i := 1; i < tN && i < len(f); i++ {
		t[i], _ = strconv.ParseUint(f[i], 10, 64)
	}
}

func newStat() Stat { return Stat{CPUs: uint32(runtime.NumCPU()), Ticks: tick} }

// errNeedCM refuses a test without rdma_cm: qperf then connects QPs from
// LIDs, and a RoCE QP cannot be reached without a GID.
var errNeedCM = errors.New("without -cm1 qperf connects its QPs by LID, which RoCE has none of: use -cm1 (rdma_cm)")

// openQP is qperf's rd_open with rdma_cm: the server listens on a port
// of its own choosing and sends it; the client connects there. The QP can
// hold maxSend sends and maxRecv receives, on one CQ.
func (s *side) openQP(ctx context.Context, maxSend, maxRecv int) error {
	if s.req.UseCM == 0 {
		return errNeedCM
	}
	local, peer := addrOf(s.ctl.c.LocalAddr().String()), addrOf(s.ctl.c.RemoteAddr().String())
	var err error
	if s.dev, s.m, err = s.open(local); err != nil {
		return err
	}
	s.pd = s.dev.AllocPD()
	if s.cq, err = s.dev.CreateCQ(max(maxSend+maxRecv, 1)); err != nil {
		return fmt.Errorf("failed to create completion queue: %w", err)
	}
	cp := cm.ConnParams{PD: s.pd, SendCQ: s.cq, RecvCQ: s.cq,
		Cap:    qp.Cap{MaxSendWR: uint32(max(maxSend, 1)), MaxRecvWR: uint32(max(maxRecv, 1)), MaxSendSGE: 1, MaxRecvSGE: 1},
		Access: mr.LocalWrite | mr.RemoteRead | mr.RemoteWrite | mr.RemoteAtomic, ResponderResources: 1, InitiatorDepth: 1,
		RetryCount: 7, RNRRetryCount: 7, Local: local}
	wait := time.Duration(max(s.req.Timeout, 5)) * 4 * time.Second
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if s.client {
		b, err := s.ctl.recv(4, "RDMA CM TCP IPv4 server port")
		if err != nil {
			return err
		}
		port := uint16(binary.LittleEndian.Uint32(b))
		for {
			s.conn, err = s.m.Dial(ctx, netip.AddrPortFrom(peer, port), cp)
			var rej *cm.Rejected
			// qperf 0.4.11 sends the port before it listens: a REQ
			// may find nobody there yet.
			if errors.As(err, &rej) && rej.Reason == wirecm.RejInvalidServiceID && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			break
		}
		if err != nil {
			return fmt.Errorf("rdma_connect failed: %w", err)
		}
	} else {
		var l *cm.Listener
		var port uint16
		for range 100 {
			port = uint16(32768 + rand.IntN(28232))
			if l, err = s.m.Listen(netip.Addr{}, port); err == nil {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("rdma_listen failed: %w", err)
		}
		defer l.Close()
		var b [4]byte
		(&le{b: b[:]}).u32(uint32(port))
		if err := s.ctl.send(b[:], "RDMA CM TCP IPv4 server port"); err != nil {
			return err
		}
		r, err := l.Accept(ctx)
		if err != nil {
			return fmt.Errorf("no connect request from the client: %w", err)
		}
		if s.conn, err = r.Accept(cp); err != nil {
			return fmt.Errorf("rdma_accept failed: %w", err)
		}
		if err := s.conn.Established(ctx); err != nil {
			return fmt.Errorf("rdma_accept failed: %w", err)
		}
	}
	s.q = s.conn.QP()
	return nil
}

// addrOf returns the address of a "host:port" string, unmapped.
func addrOf(hostport string) netip.Addr {
	ap, err := netip.ParseAddrPort(hostport)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// prep is qperf's rd_prep: a buffer of size bytes (the message size for
// 0) registered for every access, and the nodes traded.
func (s *side) prep(size int) error {
	if size == 0 {
		s.msgSize = int(s.req.MsgSize)
		size = s.msgSize
	}
	if size == 0 {
		size = 1
	}
	s.buf = make([]byte, size)
	var err error
	if s.mr, err = s.dev.RegMR(s.pd, s.buf, mr.LocalWrite|mr.RemoteRead|mr.RemoteWrite|mr.RemoteAtomic); err != nil {
		return fmt.Errorf("failed to allocate memory region: %w", err)
	}
	s.lnode = Node{VAddr: s.mr.IOVA(), RKey: uint32(s.mr.RKey()), QPN: uint32(s.q.Num()), RdAtomic: rdAtomicMax}
	if s.req.RdAtomic > rdAtomicMax {
		return fmt.Errorf("device only supports %d (< %d) RDMA reads or atomics", rdAtomicMax, s.req.RdAtomic)
	} else if s.req.RdAtomic != 0 {
		s.lnode.RdAtomic = s.req.RdAtomic
	}
	if err := s.ctl.send(s.lnode.Marshal(), "node information"); err != nil {
		return err
	}
	b, err := s.ctl.recv(nodeLen, "node information")
	if err != nil {
		return err
	}
	if s.rnode, err = ParseNode(b); err != nil {
		return err
	}
	s.debugf("L: rkey=%08x vaddr=%010x", s.lnode.RKey, s.lnode.VAddr)
	s.debugf("R: rkey=%08x vaddr=%010x", s.rnode.RKey, s.rnode.VAddr)
	return nil
}

// start is qperf's sync_test: a synchronization each way, then the
// test's clock. The context ends when the test's time is up.
func (s *side) start(ctx context.Context) (context.Context, error) {
	if err := s.ctl.sync(syncBefore); err != nil {
		return nil, err
	}
	readTimes(&s.stat.Start)
	ctx, s.cancel = context.WithCancel(ctx)
	if s.req.Time > 0 {
		s.timer = time.AfterFunc(time.Duration(s.req.Time)*time.Second, s.finish)
	}
	return ctx, nil
}

// finish ends the test the first time it is called: the end times are
// read then, as qperf's set_finished.
func (s *side) finish() {
	s.end.Do(func() {
		readTimes(&s.stat.End)
		if s.cancel != nil {
			s.cancel()
		}
	})
}

// stop is qperf's stop_test_timer.
func (s *side) stop() {
	if s.timer != nil {
		s.timer.Stop()
	}
	s.finish()
}

// exchange is qperf's exchange_results: the server sends its stat, and
// the client answers with a synchronization.
func (s *side) exchange() (Stat, error) {
	if s.client {
		b, err := s.ctl.recv(statLen, "results")
		if err != nil {
			return Stat{}, err
		}
		st, err := ParseStat(b)
		if err != nil {
			return Stat{}, err
		}
		return st, s.ctl.send([]byte(syncAfter), syncAfter)
	}
	if err := s.ctl.send(s.stat.Marshal(), "results"); err != nil {
		return Stat{}, err
	}
	return Stat{}, s.ctl.recvSync(syncAfter)
}

// close is qperf's rd_close: the client disconnects, the server waits
// for it, and the test's QP, CQ and memory go; the device stays for the
// next test.
func (s *side) close() {
	if s.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(max(s.req.Timeout, 1))*time.Second)
		if s.client {
			s.conn.Disconnect(ctx)
		} else {
			select {
			case <-s.conn.Disconnected():
			case <-ctx.Done():
			}
		}
		cancel()
		s.conn.Close()
	}
	if s.mr != nil {
		s.mr.Deregister()
	}
	if s.cq != nil {
		s.cq.Close()
	}
}

// run runs body, this side's part of the test, then ends it as qperf's
// tests do: the clock stopped, the stats exchanged (the server's come
// back to a client), the device closed. An error of this side's goes to
// the peer.
func (s *side) run(ctx context.Context, body func(context.Context, *side) error) (Stat, error) {
	err := body(ctx, s)
	s.stop()
	var rstat Stat
	if err == nil {
		if rstat, err = s.exchange(); err == nil {
			s.close()
			return rstat, nil
		}
	}
	var pe *PeerError
	if !errors.As(err, &pe) {
		s.ctl.sendError(err)
	}
	s.close()
	return Stat{}, err
}

// poll waits for completions into wcs; done is true when the test's time
// is up (or the program is stopping), as qperf's loops test Finished.
func (s *side) poll(ctx context.Context, wcs []cq.WC) (n int, done bool, err error) {
	n, err = s.cq.Wait(ctx, wcs)
	if ctx.Err() != nil {
		return 0, true, nil
	}
	if err != nil {
		return 0, true, fmt.Errorf("CQ poll failed: %w", err)
	}
	s.stat.MaxCQEs = max(s.stat.MaxCQEs, uint32(n))
	return n, false, nil
}

// errTestDone, returned by a completions function, ends the test well:
// the messages it was to send (-n) are all done.
var errTestDone = errors.New("the test's messages are done")

// completions is the loop of qperf's tests around ibv_poll_cq: it waits
// for completions into wcs and hands each batch to fn, until the test's
// time is up, the CQ fails, or fn returns an error (errTestDone: none).
func (s *side) completions(ctx context.Context, wcs []cq.WC, fn func(batch []cq.WC) error) error {
	for {
		n, done, err := s.poll(ctx, wcs)
		if err != nil || done {
			return err
		}
		if err := fn(wcs[:n]); err != nil {
			if err == errTestDone {
				return nil
			}
			return err
		}
	}
}

// received checks a receive's completion and counts it, a message of the
// test's size, as qperf does.
func (s *side) received(wc cq.WC) error {
	if err := s.check(wc, &s.stat.R); err != nil {
		return err
	}
	s.stat.R.Bytes += uint64(s.msgSize)
	s.stat.R.Msgs++
	return nil
}

// setup is qperf's rd_open and rd_prep: the QP connected, and a buffer
// of size bytes (the message size for 0) registered and traded.
func (s *side) setup(ctx context.Context, maxSend, maxRecv, size int) error {
	if err := s.openQP(ctx, maxSend, maxRecv); err != nil {
		return err
	}
	return s.prep(size)
}

// check returns nil for a successful completion; for a failed one it
// counts an error in u and returns it as qperf reports it, fatal.
func (s *side) check(wc cq.WC, u *UStat) error {
	if wc.Status == cq.StatusSuccess {
		return nil
	}
	u.Errs++
	return fmt.Errorf("%s failed: %s", s.test, statusText(wc.Status))
}

// statusText returns qperf's words for a completion status.
func statusText(st cq.Status) string {
	words := map[cq.Status]string{
		cq.StatusSuccess: "Success", cq.StatusLocLenErr: "Local length error", cq.StatusLocQPOpErr: "Local QP operation failure",
		cq.StatusLocProtErr: "Local protection error", cq.StatusWRFlushErr: "WR flush failure",
		cq.StatusBadRespErr: "Bad response", cq.StatusLocAccessErr: "Local access failure",
		cq.StatusRemInvReqErr: "Remote invalid request", cq.StatusRemAccessErr: "Remote access failure",
		cq.StatusRemOpErr: "Remote operation failure", cq.StatusRetryExcErr: "Retries exceeded",
		cq.StatusRNRRetryExcErr: "RNR retry exceeded", cq.StatusFatalErr: "Fatal error", cq.StatusGeneralErr: "General error",
	}
	if w, ok := words[st]; ok {
		return w
	}
	return fmt.Sprintf("CQ error %d", int(st))
}

// postSends posts n SENDs of the message, counting them as sent.
func (s *side) postSends(n int) error {
	if n <= 0 {
		return nil
	}
	wr := qp.SendWR{WRID: wridSend, Opcode: qp.WRSend, Flags: qp.SendSignaled,
		SGList: []qp.SGE{{Addr: s.mr.IOVA(), Length: uint32(s.msgSize), LKey: s.mr.LKey()}}}
	return s.postN(wr, n, true)
}

// postRDMA posts n RDMA operations of the message to the peer's buffer;
// all but READs count as sent.
func (s *side) postRDMA(op qp.WROpcode, n int) error {
	wr := qp.SendWR{WRID: wridRDMA, Opcode: op, Flags: qp.SendSignaled, RemoteAddr: s.rnode.VAddr, RKey: mr.Key(s.rnode.RKey),
		SGList: []qp.SGE{{Addr: s.mr.IOVA(), Length: uint32(s.msgSize), LKey: s.mr.LKey()}}}
	return s.postN(wr, n, op != qp.WRRDMARead)
}

func (s *side) postN(wr qp.SendWR, n int, count bool) error {
	if n <= 0 {
		return nil
	}
	wrs := make([]qp.SendWR, n)
	for i := range wrs {
		wrs[i] = wr
	}
	k, err := s.q.PostSend(wrs)
	if count {
		s.stat.S.Bytes += uint64(k * s.msgSize)
		s.stat.S.Msgs += uint64(k)
	}
	if err != nil {
		return fmt.Errorf("failed to post %s: %w", opName(wr.Opcode), err)
	}
	return nil
}

func opName(op qp.WROpcode) string {
	switch op {
	case qp.WRSend:
		return "send"
	case qp.WRRDMARead:
		return "RDMA read"
	case qp.WRRDMAWrite:
		return "RDMA write"
	case qp.WRRDMAWriteWithImm:
		return "RDMA write with immediate data"
	case qp.WRAtomicCmpAndSwp:
		return "compare and swap"
	case qp.WRAtomicFetchAndAdd:
		return "fetch and add"
	}
	return "unknown operation"
}

// postRecvs posts n receives of the whole buffer.
func (s *side) postRecvs(n int) error {
	if n <= 0 {
		return nil
	}
	wrs := make([]qp.RecvWR, n)
	for i := range wrs {
		wrs[i] = qp.RecvWR{WRID: wridRecv, SGList: []qp.SGE{{Addr: s.mr.IOVA(), Length: uint32(len(s.buf)), LKey: s.mr.LKey()}}}
	}
	if _, err := s.q.PostRecv(wrs); err != nil {
		return fmt.Errorf("failed to post receive: %w", err)
	}
	return nil
}

// postAtomic posts one atomic to the peer's first 8 bytes, the original
// value landing at off in this side's buffer; it counts as 8 bytes sent.
func (s *side) postAtomic(op qp.WROpcode, wrid uint64, off int, compareAdd, swap uint64) error {
	wr := qp.SendWR{WRID: wrid, Opcode: op, Flags: qp.SendSignaled, RemoteAddr: s.rnode.VAddr, RKey: mr.Key(s.rnode.RKey),
		CompareAdd: compareAdd, Swap: swap, SGList: []qp.SGE{{Addr: s.mr.IOVA() + uint64(off), Length: 8, LKey: s.mr.LKey()}}}
	if _, err := s.q.PostSend([]qp.SendWR{wr}); err != nil {
		return fmt.Errorf("failed to post %s: %w", opName(op), err)
	}
	s.stat.S.Bytes += 8
	s.stat.S.Msgs++
	return nil
}

package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"syscall"
	"time"

	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire/bth"
)

// RemoteOptions say how one side of a test across hosts runs.
type RemoteOptions struct {
	Dev      *rnic.Device
	Conn     *Conn // the out-of-band connection, client or server
	GIDIndex int   // the device GID this side uses (perftest's -x)
	// Warn, when set, takes what perftest says on stderr and goes on:
	// on UD, that the message size was cut to the MTU (Params.FitUD).
	Warn io.Writer
	// Addresses, when set, gets this side's and the peer's address
	// information, every QP's, once the keys are exchanged and before
	// the run, when perftest prints its address lines.
	Addresses func(local, remote []Info)
}

// maxOutReads is what gorxe offers as out_reads for READ and atomic tests
// unless -o says otherwise: as perftest offers its device's
// max_qp_rd_atom, the outstanding READs and atomics gorxe's responder
// takes (qp.MaxRdAtomic, rxe's 128).
const maxOutReads = qp.MaxRdAtomic

// PortMTU returns the path MTU perftest's set_mtu takes on a port whose
// active MTU is active: the port's when -m is not given (want 0), else
// want, but never more than the port's. When it lowers want it also
// returns the lines perftest prints then, which name the active MTU by
// its enum value (3 for 1024), as perftest's do.
func PortMTU(want, active qp.MTU) (qp.MTU, string) {
	switch {
	case want == 0:
		return active, ""
	case want > active:
		return active, fmt.Sprintf("Requested mtu is higher than active mtu \nChanging to active mtu - %d\n", active)
	}
	return want, ""
}

// RunRemote runs one side of test p with its peer on another host,
// speaking perftest's exchange on opt.Conn. The client drives the traffic
// and returns its measurements; the server returns the client's
// (bandwidth tests with a passive server) or its own (the others), as
// perftest prints them. With Duplex each side returns the sum of both
// sides' rates, as perftest prints it. With Reversed the side that
// listened on opt.Conn is the test's client, and the side that dialled its
// server.
func RunRemote(ctx context.Context, p Params, opt RemoteOptions) ([]Result, error) {
	p.MTU, _ = PortMTU(p.MTU, opt.Dev.MTU())
	p.Defaults()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	// server is this side's role in the test; the Conn's role (who
	// listened) orders the exchange's reads and writes.
	server := opt.Conn.IsServer() != p.Reversed
	sizes := p.Sizes()
	maxSize := sizes[len(sizes)-1]
	side, err := NewSide(opt.Dev, &p, maxSize, server)
	if err != nil {
		return nil, err
	}
	defer side.Close()
	gids := opt.Dev.GIDs()
	if opt.GIDIndex < 0 || opt.GIDIndex >= len(gids) {
		return nil, fmt.Errorf("perftest: GID index %d: the device has %d GIDs", opt.GIDIndex, len(gids))
	}
	local := side.dests(&p, gids[opt.GIDIndex])
	// The patterns --check verifies are in place before the peer can
	// touch this side's memory.
	seed, peerSeed := uint64(clientSeed), uint64(serverSeed)
	if server {
		seed, peerSeed = serverSeed, clientSeed
	}
	if p.Check {
		side.fillPattern(seed)
	}
	if p.Test.IsAtomic() {
		side.zeroAtomicWords()
	}
	flow := p.flow()
	if err := opt.Conn.prepareCM(&p, side, local, opt.GIDIndex); err != nil {
		return nil, err
	}
	remote, mtu, err := opt.Conn.Setup(flow, local, p.MTU)
	if err != nil {
		return nil, err
	}
	if opt.Addresses != nil {
		opt.Addresses(destInfos(local), destInfos(remote))
	}
	p.MTU = mtu
	if p.datagram() {
		note, err := p.FitUD()
		if err != nil {
			return nil, err
		}
		if note != "" && opt.Warn != nil {
			io.WriteString(opt.Warn, note)
		}
		sizes = p.Sizes()
	}
	if p.RDMACM {
		side.connectedCM(remote) // rdma_cm connected the QPs in Setup
	} else if err := side.connect(&p, local, remote, opt.GIDIndex); err != nil {
		return nil, err
	}
	if err := opt.Conn.Connected(local, remote); err != nil {
		return nil, err
	}
	info := destInfo
	infos := func(ds []Dest) []Info {
		if len(ds) < 2 {
			return nil
		}
		return destInfos(ds)
	}
	// The server of a WRITE, READ or atomic test is passive: it takes no
	// part in the run and waits in Finish for the client's report.
	passive := server && flow.PassiveServer()
	caller := ctx
	ctx, stop := p.watch(ctx)
	defer stop()
	var origs [][]uint64
	var want *Side
	if p.Check {
		if p.Test == AtomicBW && p.sends(server) {
			origs = make([][]uint64, len(side.qps))
			for i := range origs {
				origs[i] = make([]uint64, p.Iters)
			}
		}
		if p.receives(server) && p.Test == SendBW {
			want = patternSide(side, peerSeed) // what the peer sends
		}
	}
	var out []Result
	var last BWReport
	var lastInterval *BWResult // an infinite run's last report
	if p.servesPassively(server) {
		defer side.serve()()
	}
	for _, size := range sizes {
		if passive {
			break
		}
		ps := p
		ps.Size, ps.AllSize = size, false
		side.Size = size
		if want != nil {
			want.Size = size
		}
		r := Result{Test: p.Test, Local: info(local[0]), Remote: info(remote[0]), Locals: infos(local), Remotes: infos(remote)}
		// Receives are posted before the handshake that lets the peer
		// send, as perftest does.
		posted := 0
		switch {
		case p.postsReceives():
			if err = side.postRecv(0, qp.RecvWR{WRID: 0, SGList: side.rsge(1)}); err != nil {
				return out, err
			}
		case !p.Test.IsLatency() && p.receives(server):
			if posted, err = postReceives(side, &ps); err != nil {
				return out, err
			}
		}
		ac := countAllocs() // before the handshake: it stops the world
		if err := opt.Conn.BeforeRun(); err != nil {
			return out, err
		}
		pk0 := packets(opt.Dev.Counters())
		switch {
		case !p.Test.IsLatency():
			var stopWatch func()
			if p.unreliable() && p.receives(server) && !p.sends(server) && !p.timed() {
				// The peer's next message on the connection says its run
				// is over; messages still missing then were lost.
				ps.peerDone, stopWatch = opt.Conn.WatchPeer()
			}
			var b BWResult
			b, err = runBWSide(ctx, &ps, side, server, posted, want, origs, reporter(&p, &r, &lastInterval))
			r.BW = &b
			if stopWatch != nil {
				stopWatch()
			}
		case server:
			err = runServer(ctx, &ps, side, &r)
		default:
			err = runClient(ctx, &ps, side, &r)
		}
		allocs := ac.since()
		if err != nil {
			return out, err
		}
		if p.Infinite {
			return out, finishInfinite(caller, &p, opt.Conn, server, flow, lastInterval)
		}
		r.Allocs, r.Packets = allocs, packets(opt.Dev.Counters())-pk0
		if r.BW != nil {
			last = reportOf(&p, r.BW)
		}
		theirs, err := opt.Conn.AfterRun(last)
		if err != nil {
			return out, err
		}
		if flow.ReportsPerSize() {
			own, peer := *r.BW, resultOf(&p, theirs)
			sum := sumBW(own, peer)
			r.BW, r.OwnBW, r.PeerBW = &sum, &own, &peer
		}
		if p.Check && !p.Test.IsLatency() {
			// After AfterRun: with Duplex the peer's run is over too.
			if err := checkBW(&ps, side, server, peerSeed, origs); err != nil {
				return out, err
			}
		}
		r.Checked = p.Check
		out = append(out, r)
	}
	if passive && p.Infinite {
		// The client of --run_infinitely runs until it is stopped, and
		// perftest's server waits in the handshake after the run until
		// then: a perftest before 6.24 is killed, which closes the
		// connection; from 6.24 (f51c4f0) it finishes on SIGINT as after
		// a run, and the server prints " Client closed connection".
		// Either, or the caller's context, ends gorxe's without an error
		// and without a result.
		opt.Conn.RunTimeout = forever
		_, err := opt.Conn.Finish(last)
		if err == nil || peerClosed(err) || caller.Err() != nil ||
			errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			err = nil
		}
		return nil, err
	}
	theirs, err := opt.Conn.Finish(last)
	if err != nil {
		return out, err
	}
	if passive {
		// perftest's server prints the client's report, as the client
		// sent it: in the client's unit.
		b := resultOf(&p, theirs)
		r := Result{Test: p.Test, Local: info(local[0]), Remote: info(remote[0]), Locals: infos(local), Remotes: infos(remote), BW: &b}
		if p.Check {
			ps := p
			ps.Size, ps.AllSize = int(theirs.Size), false
			side.Size = ps.Size
			if ps.Size > 0 && ps.Size <= maxSize {
				if err := checkBW(&ps, side, server, peerSeed, nil); err != nil {
					return nil, err
				}
			}
			r.Checked = true
		}
		out = append(out, r)
	}
	for i := range out {
		out[i].Client = opt.Dev.Counters()
	}
	return out, nil
}

// dests returns the side's key message of each QP, as perftest's
// set_up_connection fills them: the QP's number, a random first PSN, the
// rkey of its region and the address of its target region, the out_reads
// it offers, the GID.
func (s *Side) dests(p *Params, gid netip.Addr) []Dest {
	d := make([]Dest, len(s.qps))
	for i, l := range s.qps {
		d[i] = Dest{
			OutReads: p.outReads(),
			QPN:      uint32(l.qp.Num()),
			PSN:      rand.Uint32() & 0xffffff,
			RKey:     uint32(l.mr.RKey()),
			VAddr:    s.targetAddr(i),
			GID:      gid.As16(),
		}
	}
	return d
}

// connect moves each of the side's QPs to RTS, connected to the peer's
// QP of the same index, as perftest's ctx_connect: the responder takes as
// many READs and atomics as this side offered (max_dest_rd_atomic = its
// out_reads), the requester keeps as many outstanding as the peer
// offered (max_rd_atomic = the peer's out_reads), cut to what the device
// takes.
func (s *Side) connect(p *Params, local, remote []Dest, gidIndex int) error {
	for i, l := range s.qps {
		s.setRemote(i, remote[i].VAddr, mr.Key(remote[i].RKey))
		if p.datagram() {
			if err := s.connectUD(p, i, bth.PSN(local[i].PSN), bth.QPN(remote[i].QPN), netip.AddrFrom16(remote[i].GID), uint8(gidIndex)); err != nil {
				return err
			}
			continue
		}
		err := l.qp.Connect(rnic.ConnectAttr{
			Local:           rnic.Endpoint{PSN: bth.PSN(local[i].PSN)},
			Remote:          rnic.Endpoint{QPN: bth.QPN(remote[i].QPN), PSN: bth.PSN(remote[i].PSN), GID: netip.AddrFrom16(remote[i].GID)},
			MTU:             p.MTU,
			Access:          l.mr.Access(),
			SGIDIndex:       uint8(gidIndex),
			Timeout:         p.Timeout,
			MaxRdAtomic:     uint8(min(max(remote[i].OutReads, 1), qp.MaxRdAtomic)),
			MaxDestRdAtomic: uint8(min(max(local[i].OutReads, 1), qp.MaxRdAtomic)),
			TrafficClass:    p.TrafficClass,
			FlowLabel:       p.flowLabel(i),
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// bwUnit is what one MB/s (2^20 bytes) is in the unit p reports
// bandwidth in: 1, or in Gb/s 2^20·8/10^9 (perftest's format_factor,
// 0x100000 or 125000000 bytes).
func bwUnit(p *Params) float64 {
	if p.ReportGbits {
		return float64(1<<20) / 125e6
	}
	return 1
}

// reportOf is the bandwidth report this side sends its peer
// (xchg_bw_reports), in its own unit, as perftest's bw_report_data holds
// it.
func reportOf(p *Params, b *BWResult) BWReport {
	u := bwUnit(p)
	return BWReport{Size: uint64(b.Size), Iters: uint64(b.Iters), PeakMBps: b.PeakMBps * u, AvgMBps: b.AvgMBps * u, MsgRateMpps: b.MsgRate}
}

// resultOf is the peer's report as a result of this side: perftest
// prints and adds the peer's numbers as they came, in whatever unit the
// peer used, so they are taken to be in this side's.
func resultOf(p *Params, r BWReport) BWResult {
	u := bwUnit(p)
	return BWResult{Size: int(r.Size), Iters: int(r.Iters), PeakMBps: r.PeakMBps / u, AvgMBps: r.AvgMBps / u, MsgRate: r.MsgRateMpps}
}

// reporter returns the emit function of an infinite run, which keeps
// each report in *last and hands it to p.OnReport as a Result like r.
func reporter(p *Params, r *Result, last **BWResult) func(BWResult) {
	return func(b BWResult) {
		*last = &b
		if p.OnReport != nil {
			out := *r
			out.BW = &b
			p.OnReport(&out)
		}
	}
}

// finishInfinite ends an infinite run, which ended because its caller's
// context did. The client of a passive server finishes as perftest's
// does from 6.24 (f51c4f0: "User stopped traffic" on SIGINT): the
// handshake after the run, its last report, the close, under a context
// of its own, as the caller's has ended; a server of either 6.06 or 6.2x
// takes them. The other sides just stop, as perftest's, which are
// killed: their peers' next read fails.
func finishInfinite(caller context.Context, p *Params, c *Conn, server bool, flow Flow, last *BWResult) error {
	if server || !flow.PassiveServer() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(caller), finishTimeout)
	defer cancel()
	c.SetContext(ctx)
	var rep BWReport
	if last != nil {
		rep = reportOf(p, last)
	}
	_, err := c.AfterRun(rep)
	if err == nil {
		_, err = c.Finish(rep)
	}
	if peerClosed(err) {
		return nil // a peer that did not wait: nothing is left to finish
	}
	return err
}

// finishTimeout bounds how long a stopped infinite client waits for its
// peer to take its last exchange.
const finishTimeout = 5 * time.Second

// forever is the connection's RunTimeout while a passive server waits for
// a client that runs until it is stopped.
const forever = 100 * 365 * 24 * time.Hour

// peerClosed reports whether err is the peer closing the out-of-band
// connection, or resetting it.
func peerClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// destInfo is a key message's endpoint as perftest prints it.
func destInfo(d Dest) Info {
	return Info{QPN: d.QPN, PSN: d.PSN, OutReads: d.OutReads, RKey: d.RKey, VAddr: d.VAddr, GID: netip.AddrFrom16(d.GID)}
}

// destInfos returns destInfo of each of ds.
func destInfos(ds []Dest) []Info {
	is := make([]Info, len(ds))
	for i, d := range ds {
		is[i] = destInfo(d)
	}
	return is
}

// Patterns for --check between hosts: each side can compute the other's.
const (
	clientSeed = 1
	serverSeed = 2
)

// runClient runs the client side of a latency test.
func runClient(ctx context.Context, p *Params, s *Side, r *Result) error {
	var o latOut
	var err error
	switch p.Test {
	case WriteLat:
		o, err = writeLat(ctx, s, p, true)
	case SendLat:
		o, err = sendLat(ctx, s, p, true)
	default:
		o, err = readLat(ctx, s, p)
	}
	if err != nil {
		return err
	}
	l := latReport(p, o)
	r.Lat = &l
	if p.Check && p.Test == ReadLat && p.Size > 0 {
		return checkPlaced(s, patternSide(s, serverSeed), 1)
	}
	return nil
}

// runServer runs the server side of a latency test: the read_lat and
// atomic_lat servers take no part. A write_lat or send_lat server puts
// its own report in r, as perftest prints print_report_lat (or
// print_report_lat_duration) on both sides.
func runServer(ctx context.Context, p *Params, s *Side, r *Result) error {
	var o latOut
	var err error
	switch p.Test {
	case WriteLat:
		o, err = writeLat(ctx, s, p, false)
	case SendLat:
		o, err = sendLat(ctx, s, p, false)
	default:
		return nil
	}
	if err == nil {
		l := latReport(p, o)
		r.Lat = &l
	}
	return err
}

// checkBW verifies, after a size's run of a bandwidth test, what this
// side can: the results of its READs and atomics, and what the peer's
// WRITEs and atomics left in its memory (the server's, or with Duplex
// either's). SEND is checked as it arrives.
func checkBW(p *Params, s *Side, server bool, peerSeed uint64, origs [][]uint64) error {
	target := server || p.Duplex
	switch p.Test {
	case WriteBW:
		if target {
			if p.unreliable() {
				s.awaitArrivals(0) // the peer's count of packets sent is not told
			}
			return checkPlaced(patternSide(s, peerSeed), s, p.Iters)
		}
	case ReadBW:
		if p.sends(server) {
			return checkPlaced(s, patternSide(s, peerSeed), p.Iters)
		}
	case AtomicBW:
		for i := range s.qps {
			if origs != nil {
				if err := checkAtomicResults(p, origs[i]); err != nil {
					return fmt.Errorf("QP %d: %w", i, err)
				}
			}
			if !target {
				continue
			}
			v, err := s.atomicWord(i)
			if err != nil {
				return err
			}
			if v != uint64(p.Iters) {
				return fmt.Errorf("%w: the word the atomics of QP %d changed is %d after %d of them", ErrCheck, i, v, p.Iters)
			}
		}
	}
	return nil
}

// patternSide returns a side-shaped memory, the regions where s has
// them, holding the pattern seed fills into a side like s.
func patternSide(s *Side, seed uint64) *Side {
	w := &Side{Slots: s.Slots, Size: s.Size, grh: s.grh}
	var last []byte
	for i, l := range s.qps {
		b := last
		if i == 0 || &l.buf[0] != &s.qps[i-1].buf[0] {
			b = make([]byte, len(l.buf))
		}
		w.qps = append(w.qps, &sideQP{buf: b, src: l.src, dst: l.dst})
		last = b
	}
	w.Buf = w.qps[0].buf
	w.fillPattern(seed)
	return w
}

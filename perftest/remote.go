package perftest

import (
	"context"
	"encoding/binary"
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
}

// maxOutReads is what gorxe offers as out_reads for READ and atomic tests:
// its limit of outstanding READs and atomics, as rxe offers its own (128).
const maxOutReads = 16

// RunRemote runs one side of test p with its peer on another host,
// speaking perftest's exchange on opt.Conn. The client drives the traffic
// and returns its measurements; the server returns the client's
// (bandwidth tests) or its own (latency tests), as perftest prints them.
func RunRemote(ctx context.Context, p Params, opt RemoteOptions) ([]Result, error) {
	p.Defaults()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	server := opt.Conn.IsServer()
	sizes := p.Sizes()
	maxSize := sizes[len(sizes)-1]
	side, err := NewSide(opt.Dev, &p, maxSize)
	if err != nil {
		return nil, err
	}
	defer side.Close()
	gids := opt.Dev.GIDs()
	if opt.GIDIndex < 0 || opt.GIDIndex >= len(gids) {
		return nil, fmt.Errorf("perftest: GID index %d: the device has %d GIDs", opt.GIDIndex, len(gids))
	}
	outReads := uint16(1)
	if p.Test == ReadBW || p.Test == ReadLat || p.Test == AtomicBW {
		outReads = maxOutReads
	}
	local := Dest{
		OutReads: outReads,
		QPN:      uint32(side.QP.Num()),
		PSN:      rand.Uint32() & 0xffffff,
		RKey:     uint32(side.MR.RKey()),
		VAddr:    side.MR.IOVA(),
		GID:      gids[opt.GIDIndex].As16(),
	}
	// The patterns --check verifies are in place before the peer can
	// touch this side's memory.
	if p.Check {
		if server {
			side.fillPattern(serverSeed)
			if p.Test == AtomicBW {
				binary.NativeEndian.PutUint64(side.Buf, 0) // the word the atomics change
			}
		} else {
			side.fillPattern(clientSeed)
		}
	}
	remote, mtu, err := opt.Conn.Setup(p.Test, local, p.MTU)
	if err != nil {
		return nil, err
	}
	p.MTU = mtu
	side.RemoteAddr, side.RemoteKey = remote.VAddr, mr.Key(remote.RKey)
	rd := uint8(min(max(remote.OutReads, 1), maxOutReads))
	err = side.QP.Connect(rnic.ConnectAttr{
		Local:        rnic.Endpoint{PSN: bth.PSN(local.PSN)},
		Remote:       rnic.Endpoint{QPN: bth.QPN(remote.QPN), PSN: bth.PSN(remote.PSN), GID: netip.AddrFrom16(remote.GID)},
		MTU:          mtu,
		Access:       side.MR.Access(),
		SGIDIndex:    uint8(opt.GIDIndex),
		Timeout:      p.Timeout,
		MaxRdAtomic:  rd,
		TrafficClass: p.TrafficClass,
	})
	if err != nil {
		return nil, err
	}
	if err := opt.Conn.Connected(p.Test, local, remote); err != nil {
		return nil, err
	}
	info := func(d Dest) Info {
		return Info{QPN: d.QPN, PSN: d.PSN, RKey: d.RKey, VAddr: d.VAddr, GID: netip.AddrFrom16(d.GID)}
	}
	// The server of a WRITE, READ or atomic test is passive: it takes no
	// part in the run and waits in Finish for the client's report.
	passive := server && ExchangesBWReport(p.Test)
	caller := ctx
	ctx, stop := p.watch(ctx)
	defer stop()
	var out []Result
	var last BWReport
	for _, size := range sizes {
		if passive {
			break
		}
		ps := p
		ps.Size, ps.AllSize = size, false
		side.Size = size
		r := Result{Test: p.Test, Local: info(local), Remote: info(remote)}
		// Receives are posted before the handshake that lets the peer
		// send, as perftest does.
		posted := 0
		switch {
		case p.Test == SendBW && server:
			if posted, err = postReceives(side, &ps); err != nil {
				return out, err
			}
		case p.postsReceives():
			if _, err = side.QP.PostRecv([]qp.RecvWR{{WRID: 0, SGList: side.sge(1)}}); err != nil {
				return out, err
			}
		}
		if err := opt.Conn.BeforeRun(p.Test); err != nil {
			return out, err
		}
		pk0 := packets(opt.Dev.Counters())
		var allocs uint64
		if server {
			allocs, err = allocsDuring(func() error { return runServer(ctx, &ps, side, posted, &r) })
		} else {
			allocs, err = allocsDuring(func() error { return runClient(ctx, &ps, side, &r) })
		}
		if err != nil {
			return out, err
		}
		if p.Infinite {
			// Only the caller's context ends an infinite run, and
			// perftest's ends only when it is killed: no exchange
			// follows (the peer's next read fails).
			return out, nil
		}
		r.Allocs, r.Packets = allocs, packets(opt.Dev.Counters())-pk0
		if err := opt.Conn.AfterRun(p.Test, p.AllSize); err != nil {
			return out, err
		}
		if r.BW != nil {
			last = reportOf(&p, r.BW)
		}
		r.Checked = p.Check
		out = append(out, r)
	}
	if passive && p.Infinite {
		// The client of --run_infinitely never finishes: perftest's
		// server waits in the handshake after the run until the client
		// is killed and the connection closes. That, or the caller's
		// context, ends gorxe's without an error.
		opt.Conn.RunTimeout = forever
	}
	theirs, err := opt.Conn.Finish(p.Test, last)
	if passive && p.Infinite && (peerClosed(err) || caller.Err() != nil ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return out, nil
	}
	if err != nil {
		return out, err
	}
	if passive {
		// perftest's server prints the client's report, as the client
		// sent it: in the client's unit.
		b := resultOf(&p, theirs)
		r := Result{Test: p.Test, Local: info(local), Remote: info(remote), BW: &b}
		if p.Check {
			ps := p
			ps.Size, ps.AllSize = int(theirs.Size), false
			side.Size = ps.Size
			if ps.Size > 0 && ps.Size <= maxSize {
				if err := checkServerBW(&ps, side); err != nil {
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

// Patterns for --check between hosts: each side can compute the other's.
const (
	clientSeed = 1
	serverSeed = 2
)

func runClient(ctx context.Context, p *Params, s *Side, r *Result) error {
	switch p.Test {
	case WriteLat, SendLat, ReadLat:
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
			return checkAgainst(s, serverSeed, 1)
		}
		return nil
	}
	var origs []uint64
	if p.Test == AtomicBW && p.Check {
		origs = make([]uint64, p.Iters)
	}
	b, err := bw(ctx, s, p, origs, reporter(p, r))
	if err != nil || p.Infinite {
		return err
	}
	r.BW = &b
	if !p.Check {
		return nil
	}
	switch p.Test {
	case ReadBW:
		return checkAgainst(s, serverSeed, p.Iters)
	case AtomicBW:
		return checkAtomicResults(p, origs)
	}
	return nil
}

// runServer runs the server's part of the test, and puts what it reports
// itself in r: send_bw's server its receive rate, the timed write_lat and
// send_lat servers their latency (perftest's print_report_lat_duration on
// both sides).
func runServer(ctx context.Context, p *Params, s *Side, posted int, r *Result) error {
	switch p.Test {
	case SendBW:
		var want *Side
		if p.Check {
			want = patternSide(s, clientSeed)
		}
		b, err := consumeReceives(ctx, s, p, want, posted, reporter(p, r))
		if err == nil && !p.Infinite {
			r.BW = &b
		}
		return err
	case WriteLat, SendLat:
		var o latOut
		var err error
		if p.Test == WriteLat {
			o, err = writeLat(ctx, s, p, false)
		} else {
			o, err = sendLat(ctx, s, p, false)
		}
		if err == nil && p.Duration > 0 {
			l := latReport(p, o)
			r.Lat = &l
		}
		return err
	}
	return nil // WRITE, READ and atomics: the server's CPU takes no part
}

// reporter returns the emit function of an infinite run, which hands
// p.OnReport each report as a Result like r.
func reporter(p *Params, r *Result) func(BWResult) {
	return func(b BWResult) {
		if p.OnReport != nil {
			out := *r
			out.BW = &b
			p.OnReport(&out)
		}
	}
}

// forever is the connection's RunTimeout while a passive server waits for
// a client that runs until it is killed.
const forever = 100 * 365 * 24 * time.Hour

// peerClosed reports whether err is the peer closing the out-of-band
// connection, or resetting it.
func peerClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
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

// reportOf is the bandwidth report this side sends its peer, in its own
// unit, as perftest's bw_report_data holds it.
func reportOf(p *Params, b *BWResult) BWReport {
	u := bwUnit(p)
	return BWReport{Size: uint64(b.Size), Iters: uint64(b.Iters), PeakMBps: b.PeakMBps * u, AvgMBps: b.AvgMBps * u, MsgRateMpps: b.MsgRate}
}

// resultOf is the peer's report as a result this side prints: perftest
// prints the peer's numbers as they came, in whatever unit the peer
// used, so they are taken to be in this side's.
func resultOf(p *Params, r BWReport) BWResult {
	u := bwUnit(p)
	return BWResult{Size: int(r.Size), Iters: int(r.Iters), PeakMBps: r.PeakMBps / u, AvgMBps: r.AvgMBps / u, MsgRate: r.MsgRateMpps}
}

// checkServerBW verifies, after the client finished, what the client's
// operations left in the server's memory.
func checkServerBW(p *Params, s *Side) error {
	switch p.Test {
	case WriteBW:
		return checkAgainst(s, clientSeed, p.Iters)
	case AtomicBW:
		if v := binary.NativeEndian.Uint64(s.Buf); v != uint64(p.Iters) {
			return fmt.Errorf("%w: the word the atomics changed is %d after %d of them", ErrCheck, v, p.Iters)
		}
	}
	return nil
}

// patternSide returns a side-shaped buffer holding the pattern seed fills
// into a side like s.
func patternSide(s *Side, seed uint64) *Side {
	w := &Side{Buf: make([]byte, len(s.Buf)), Slots: s.Slots, Size: s.Size}
	w.fillPattern(seed)
	return w
}

// checkAgainst compares the first n slots of s with the pattern seed.
func checkAgainst(s *Side, seed uint64, n int) error {
	return checkSlots(s, patternSide(s, seed), n)
}

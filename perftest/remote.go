package perftest

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
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
		Local:       rnic.Endpoint{PSN: bth.PSN(local.PSN)},
		Remote:      rnic.Endpoint{QPN: bth.QPN(remote.QPN), PSN: bth.PSN(remote.PSN), GID: netip.AddrFrom16(remote.GID)},
		MTU:         mtu,
		Access:      side.MR.Access(),
		SGIDIndex:   uint8(opt.GIDIndex),
		Timeout:     p.Timeout,
		MaxRdAtomic: rd,
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
			start := time.Now()
			allocs, err = allocsDuring(func() error { return runServer(ctx, &ps, side, posted) })
			if p.Test == SendBW {
				// perftest's send_bw server reports what it received.
				el := time.Since(start)
				r.BW = &BWResult{Size: size, Iters: p.Iters, Elapsed: el,
					AvgMBps: float64(size) * float64(p.Iters) / el.Seconds() / (1 << 20),
					MsgRate: float64(p.Iters) / el.Seconds() / 1e6}
				r.BW.PeakMBps = r.BW.AvgMBps
			}
		} else {
			allocs, err = allocsDuring(func() error { return runClient(ctx, &ps, side, &r) })
		}
		if err != nil {
			return out, err
		}
		r.Allocs, r.Packets = allocs, packets(opt.Dev.Counters())-pk0
		if err := opt.Conn.AfterRun(p.Test, p.AllSize); err != nil {
			return out, err
		}
		if r.BW != nil {
			last = BWReport{Size: uint64(r.BW.Size), Iters: uint64(r.BW.Iters), PeakMBps: r.BW.PeakMBps, AvgMBps: r.BW.AvgMBps, MsgRateMpps: r.BW.MsgRate}
		}
		r.Checked = p.Check
		out = append(out, r)
	}
	theirs, err := opt.Conn.Finish(p.Test, last)
	if err != nil {
		return out, err
	}
	if passive {
		// perftest's server prints the client's report.
		r := Result{Test: p.Test, Local: info(local), Remote: info(remote),
			BW: &BWResult{Size: int(theirs.Size), Iters: int(theirs.Iters), PeakMBps: theirs.PeakMBps, AvgMBps: theirs.AvgMBps, MsgRate: theirs.MsgRateMpps}}
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
		var samples []time.Duration
		var err error
		switch p.Test {
		case WriteLat:
			samples, err = writeLat(ctx, s, p, true)
		case SendLat:
			samples, err = sendLat(ctx, s, p, true)
		default:
			samples, err = readLat(ctx, s, p)
		}
		if err != nil {
			return err
		}
		l := latStats(p.Size, samples, p.Test != ReadLat)
		l.Iters = p.Iters
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
	b, err := bw(ctx, s, p, origs)
	if err != nil {
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

func runServer(ctx context.Context, p *Params, s *Side, posted int) error {
	switch p.Test {
	case SendBW:
		var want *Side
		if p.Check {
			want = patternSide(s, clientSeed)
		}
		return consumeReceives(ctx, s, p, want, posted)
	case WriteLat, SendLat:
		var err error
		if p.Test == WriteLat {
			_, err = writeLat(ctx, s, p, false)
		} else {
			_, err = sendLat(ctx, s, p, false)
		}
		return err
	}
	return nil // WRITE, READ and atomics: the server's CPU takes no part
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

package perftest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire/bth"
)

// Result is what one size of a test produced.
type Result struct {
	Test    Test
	BW      *BWResult  // bandwidth tests
	Lat     *LatResult // latency tests
	Checked bool       // --check ran and passed
	// Counters of the client and server devices after the run.
	Client, Server rnic.Counters
	// Endpoints as perftest prints them: QP 0's, and with more QPs
	// (NumQPs) every QP's in Locals and Remotes (nil for one QP).
	Local, Remote   Info
	Locals, Remotes []Info
	// Allocs is how many heap allocations this process made during the
	// run itself (across hosts, with the handshake that starts it), and
	// Packets how many packets its devices sent and received meanwhile:
	// their ratio is 0 in the steady state.
	Allocs, Packets uint64
	// With Duplex, BW is the line perftest prints, the sum of both
	// sides' rates; OwnBW is this side's (the client's, in RunLocal)
	// and PeerBW the peer's.
	OwnBW, PeerBW *BWResult
}

// packets returns the packets a device has sent and received.
func packets(c rnic.Counters) uint64 { return c.SentPkts + c.RcvdPkts }

// Info is a side's address information, as perftest's banner shows it.
type Info struct {
	QPN      uint32
	PSN      uint32
	OutReads uint16 // the READs and atomics it takes at once, offered in its key message
	RKey     uint32
	VAddr    uint64
	GID      netip.Addr
}

// ParseFaults parses --fault's list, for example
// "drop=0.01,drop-every=256,reorder=8,dup=0.01,corrupt=0.001,delay=100us,ecn=0.1,seed=7".
func ParseFaults(s string) (mem.Faults, error) {
	var f mem.Faults
	if s == "" {
		return f, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return f, fmt.Errorf("fault %q: want NAME=VALUE", kv)
		}
		var err error
		prob := func(dst *float64) {
			*dst, err = strconv.ParseFloat(v, 64)
			if err == nil && (*dst < 0 || *dst > 1) {
				err = errors.New("probability outside 0..1")
			}
		}
		switch k {
		case "drop":
			prob(&f.Drop)
		case "dup":
			prob(&f.Duplicate)
		case "corrupt":
			prob(&f.Corrupt)
		case "ecn":
			prob(&f.ECN)
		case "drop-every":
			f.DropEvery, err = strconv.Atoi(v)
		case "reorder":
			f.Reorder, err = strconv.Atoi(v)
		case "delay":
			f.Delay, err = time.ParseDuration(v)
		case "bandwidth":
			f.Bandwidth, err = strconv.ParseInt(v, 10, 64)
		case "seed":
			f.Seed, err = strconv.ParseUint(v, 10, 64)
		default:
			return f, fmt.Errorf("unknown fault %q (want drop, drop-every, reorder, dup, corrupt, delay, ecn, bandwidth, seed)", k)
		}
		if err != nil {
			return f, fmt.Errorf("fault %s=%s: %v", k, v, err)
		}
	}
	return f, nil
}

// RunLocal runs the test for each of p's sizes with both sides in this
// process: two gorxe devices on an in-memory fabric that applies faults
// to the packets of both directions.
func RunLocal(ctx context.Context, p Params, faults mem.Faults) ([]Result, error) {
	p.Defaults()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if _, err := p.FitUD(); err != nil {
		return nil, err
	}
	var out []Result
	for _, size := range p.Sizes() {
		ps := p
		ps.Size = size
		r, err := runLocalSize(ctx, &ps, faults)
		if p.Infinite {
			return nil, err // the reports went to OnReport
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

func runLocalSize(ctx context.Context, p *Params, faults mem.Faults) (Result, error) {
	client, server, closeAll, err := localPair(p, faults)
	if err != nil {
		return Result{}, err
	}
	defer closeAll()
	res := Result{Test: p.Test, Local: info(client, p, localPSNs[0]), Remote: info(server, p, localPSNs[1])}
	if p.Check {
		client.fillPattern(1)
		server.fillPattern(2)
	}
	pk0 := packets(client.Dev.Counters()) + packets(server.Dev.Counters())
	ctx, stop := p.watch(ctx)
	defer stop()
	allocs, err := allocsDuring(func() error {
		if p.Test.IsLatency() {
			return runLat(ctx, p, client, server, &res)
		}
		return runBW(ctx, p, client, server, &res)
	})
	res.Client, res.Server = client.Dev.Counters(), server.Dev.Counters()
	res.Allocs, res.Packets = allocs, packets(res.Client)+packets(res.Server)-pk0
	if err == nil && p.Check {
		res.Checked = true
	}
	return res, err
}

// localPSNs are the two sides' first PSNs in a local run, fixed so that
// runs replay alike.
var localPSNs = [2]bth.PSN{0x3341fd, 0x1a2b3c}

// localPair opens two devices on an in-memory fabric, each with a side for
// p's messages, and connects the sides. closeAll closes both devices.
func localPair(p *Params, faults mem.Faults) (client, server *Side, closeAll func(), err error) {
	fab := mem.NewFabric()
	var devs []*rnic.Device
	closeAll = func() {
		for _, d := range devs {
			d.Close()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	var sides [2]*Side
	for i, a := range []string{"10.0.0.1", "10.0.0.2"} {
		l, err := fab.NewLink(netip.MustParseAddr(a))
		if err != nil {
			return nil, nil, nil, err
		}
		f := faults
		f.Seed += uint64(i) * 1000003
		l.SetFaults(f)
		d, err := rnic.Open(rnic.Config{Link: l, Name: []string{"client", "server"}[i], Window: p.Window, PacketTrace: p.packetTrace,
			CC: p.CC, CCParams: p.CCParams, LineRate: p.LineRate, PacingBurst: p.PacingBurst})
		if err != nil {
			return nil, nil, nil, err
		}
		devs = append(devs, d)
		if sides[i], err = NewSide(d, p, p.Size, i == 1); err != nil {
			return nil, nil, nil, err
		}
	}
	if err := connectSides(p, sides); err != nil {
		return nil, nil, nil, err
	}
	return sides[0], sides[1], closeAll, nil
}

// connectSides connects each QP of the two sides to the other side's QP
// of the same index, starting at localPSNs, as a local run does: without
// an exchange, each side reads the other's numbers and keys.
func connectSides(p *Params, sides [2]*Side) error {
	for i, s := range sides {
		peer := sides[1-i]
		for j, l := range s.qps {
			pl := peer.qps[j]
			s.setRemote(j, peer.targetAddr(j), pl.mr.RKey())
			if p.datagram() {
				if err := s.connectUD(p, j, localPSNs[i], pl.qp.Num(), peer.Dev.GIDs()[0], 0); err != nil {
					return err
				}
				continue
			}
			err := l.qp.Connect(rnic.ConnectAttr{
				Local: l.qp.Local(localPSNs[i]), Remote: pl.qp.Local(localPSNs[1-i]),
				MTU: p.MTU, Access: l.mr.Access(), Timeout: p.Timeout, TrafficClass: p.TrafficClass, FlowLabel: p.flowLabel(j),
				MaxRdAtomic: uint8(p.outReads()), MaxDestRdAtomic: uint8(p.outReads()),
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func info(s *Side, p *Params, psn bth.PSN) Info {
	return Info{QPN: uint32(s.QP.Num()), PSN: uint32(psn), OutReads: p.outReads(), RKey: uint32(s.MR.RKey()), VAddr: s.targetAddr(0), GID: s.Dev.GIDs()[0]}
}

func runBW(ctx context.Context, p *Params, client, server *Side, res *Result) error {
	sides := [2]*Side{client, server}
	var origs [2][][]uint64
	if p.Test == AtomicBW {
		for i, s := range sides {
			s.zeroAtomicWords()
			origs[i] = make([][]uint64, len(s.qps))
			for j := range origs[i] {
				origs[i][j] = make([]uint64, p.Iters)
			}
		}
	}
	// Receives are posted before either side starts, as perftest's
	// handshake before the run makes sure.
	var posted [2]int
	for i, s := range sides {
		if p.receives(i == 1) {
			var err error
			if posted[i], err = postReceives(s, p); err != nil {
				return err
			}
		}
	}
	type out struct {
		r   BWResult
		err error
	}
	var outs [2]chan out
	// On UC the receiving server ends, with what came, once the client's
	// run is over: a lost message is never sent again.
	ps, clientDone := p, make(chan struct{})
	if p.unreliable() && !p.Duplex {
		c := *p
		c.peerDone = clientDone
		ps = &c
	}
	for i, s := range sides {
		server := i == 1
		if !p.sends(server) && !p.receives(server) {
			continue // a passive server
		}
		var want *Side
		if p.Check {
			want = sides[1-i]
		}
		var emit func(BWResult)
		if !server && p.OnReport != nil {
			emit = func(b BWResult) {
				r := *res
				r.BW = &b
				p.OnReport(&r)
			}
		}
		outs[i] = make(chan out, 1)
		go func() {
			sp := p
			if server {
				sp = ps
			}
			r, err := runBWSide(ctx, sp, s, server, posted[i], want, origs[i], emit)
			if !server {
				close(clientDone)
			}
			outs[i] <- out{r, err}
		}()
	}
	var got [2]BWResult
	var err error
	for i, c := range outs {
		if c != nil {
			o := <-c
			got[i] = o.r
			if err == nil {
				err = o.err
			}
		}
	}
	if err != nil || p.Infinite {
		return err
	}
	res.BW = &got[0]
	if p.Duplex {
		sum := sumBW(got[0], got[1])
		res.BW, res.OwnBW, res.PeerBW = &sum, &got[0], &got[1]
	}
	if !p.Check {
		return nil
	}
	// The client's operations, and with Duplex the server's.
	for i, s := range sides {
		if !p.sends(i == 1) {
			continue
		}
		peer := sides[1-i]
		switch p.Test {
		case WriteBW, ReadBW:
			if p.Test == WriteBW && p.unreliable() {
				peer.awaitArrivals(s.Dev.Counters().SentPkts)
			}
			if err := checkPlaced(s, peer, p.Iters); err != nil {
				return err
			}
		case AtomicBW:
			for j := range s.qps {
				w, err := peer.atomicWord(j)
				if err == nil {
					err = checkAtomics(p, origs[i][j], w)
				}
				if err != nil {
					return fmt.Errorf("QP %d: %w", j, err)
				}
			}
		}
	}
	return nil
}

// checkAtomics verifies atomic_bw: FETCH_AND_ADD of 1 returned every value
// from 0 to iters-1 exactly once and left iters; CMP_AND_SWAP i -> i+1 in
// order returned i each time and left iters.
func checkAtomics(p *Params, origs []uint64, final uint64) error {
	if final != uint64(p.Iters) {
		return fmt.Errorf("%w: remote word is %d after %d atomics, want %d", ErrCheck, final, p.Iters, p.Iters)
	}
	return checkAtomicResults(p, origs)
}

// checkAtomicResults checks what the atomics returned, for a word that
// started at 0.
func checkAtomicResults(p *Params, origs []uint64) error {
	sorted := slices.Clone(origs)
	if p.Atomic == FetchAndAdd {
		slices.Sort(sorted)
	}
	for i, v := range sorted {
		if v != uint64(i) {
			return fmt.Errorf("%w: atomic %d returned %d, want %d", ErrCheck, i, v, i)
		}
	}
	return nil
}

func runLat(ctx context.Context, p *Params, client, server *Side, res *Result) error {
	if p.Test == AtomicLat {
		server.zeroAtomicWords()
	}
	type out struct{ err error }
	srv := make(chan out, 1)
	var samples latOut
	var err error
	if p.postsReceives() {
		for _, s := range []*Side{client, server} {
			if err := s.postRecv(0, qp.RecvWR{SGList: s.rsge(1)}); err != nil {
				return err
			}
		}
	}
	switch p.Test {
	case WriteLat:
		go func() { _, err := writeLat(ctx, server, p, false); srv <- out{err} }()
		samples, err = writeLat(ctx, client, p, true)
	case SendLat:
		go func() { _, err := sendLat(ctx, server, p, false); srv <- out{err} }()
		samples, err = sendLat(ctx, client, p, true)
	case ReadLat, AtomicLat:
		srv <- out{}
		samples, err = readLat(ctx, client, p)
	}
	if err != nil {
		return err
	}
	if o := <-srv; o.err != nil {
		return o.err
	}
	r := latReport(p, samples)
	res.Lat = &r
	if p.Check && p.Size > 0 {
		switch p.Test {
		case ReadLat:
			return checkPlaced(client, server, 1)
		case WriteLat:
			// Each side's slot 0 holds what the other sent from its
			// slot 1, up to the poll byte.
			n := p.Size - 1
			for _, pair := range [][2]*Side{{client, server}, {server, client}} {
				to, from := pair[0], pair[1]
				if string(to.Buf[:n]) != string(from.Buf[from.slot(1):from.slot(1)+n]) {
					return fmt.Errorf("%w: write_lat message differs", ErrCheck)
				}
			}
		}
	}
	return nil
}

// latReport is a latency test's table line from what one side measured.
func latReport(p *Params, o latOut) LatResult {
	half := !p.Test.oneSided()
	if p.Duration > 0 {
		return latDuration(p.Size, o, half)
	}
	r := latStats(p.Size, o.samples, half)
	r.Iters = p.Iters // as perftest reports it; write_lat has one sample fewer
	if p.Histogram || p.Unsorted {
		r.Samples = o.samples
	}
	return r
}

package rnic

import (
	"fmt"
	"time"

	"github.com/gorxe/gorxe/congestion"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire"
)

// CCMode is the congestion control a device's QPs run.
type CCMode uint8

const (
	// CCDCQCN is DCQCN (package congestion), on by default as on ConnectX
	// NICs: each QP paces its sends to a rate that the peer's CNPs cut and
	// silence raises again, and answers CE-marked data with CNPs.
	CCDCQCN CCMode = iota
	// CCNone turns congestion control off: QPs send as fast as their
	// window allows, count CNPs as ignored (rp_cnp_ignored) and send none.
	CCNone
)

// String returns the mode's name, as --cc takes it.
func (m CCMode) String() string {
	switch m {
	case CCDCQCN:
		return "dcqcn"
	case CCNone:
		return "none"
	}
	return fmt.Sprintf("CCMode(%d)", uint8(m))
}

// ParseCCMode returns the mode named s: "dcqcn" or "none".
func ParseCCMode(s string) (CCMode, error) {
	switch s {
	case "dcqcn":
		return CCDCQCN, nil
	case "none":
		return CCNone, nil
	}
	return 0, fmt.Errorf("congestion control %q: want dcqcn or none", s)
}

// DefaultLineRate is the line rate of a device whose link does not know
// its own (link.LineRater) and whose Config gives none: 100 Gb/s, a
// ConnectX-5's port. DCQCN paces nothing at the line rate, so an
// uncongested flow never waits for the pacer, however fast the link
// really is; a flow that CNPs cut must be cut below what it really moves
// before the cut slows it, which from 100 Gb/s takes a few CNPs more than
// from the link's real rate.
const DefaultLineRate = 100 * congestion.GbitPerSecond

// DefaultPacingBurst and DefaultPacingTime make the pacing burst when
// Config.PacingBurst is zero: 64 KiB (16 packets of 4 KiB) or what the
// QP's current rate moves in 50 µs, whichever is less, and at least
// congestion.MinBurst. A paced QP sends a burst, then sleeps until the
// pacer has earned the next whole one. At 10 Gb/s and above that is 64
// KiB every 52 µs or less: long enough that a timer's usual lateness on a
// busy host costs little of the rate, short enough that a burst is a few
// microseconds of a switch's queue. Below, the burst shrinks with the
// rate (6250 bytes at 1 Gb/s), so that a slow flow's burst is not a slow
// link's whole queue (64 KiB is 17 ms at 30 Mb/s).
const (
	DefaultPacingBurst = 64 << 10
	DefaultPacingTime  = 50 * time.Microsecond
)

// ccConfig returns the reaction point's configuration for the device's
// QPs, or nil when congestion control is off, or what is wrong with cfg.
func ccConfig(cfg *Config, l link.Link) (*congestion.Config, error) {
	switch cfg.CC {
	case CCNone:
		return nil, nil
	case CCDCQCN:
	default:
		return nil, fmt.Errorf("rnic: %v: no such congestion control", cfg.CC)
	}
	c := &congestion.Config{Params: cfg.CCParams, LineRate: cfg.LineRate, Burst: cfg.PacingBurst}
	if c.Params == (congestion.Params{}) {
		c.Params = congestion.ConnectX()
	}
	if c.Burst == 0 {
		c.Burst, c.BurstTime = DefaultPacingBurst, DefaultPacingTime
	}
	if c.LineRate == 0 {
		c.LineRate = linkRate(l, &c.Params)
	}
	if _, err := congestion.NewReactionPoint(*c); err != nil {
		return nil, fmt.Errorf("rnic: DCQCN: %w", err)
	}
	if _, err := congestion.NewNotificationPoint(c.Params); err != nil {
		return nil, fmt.Errorf("rnic: DCQCN: %w", err)
	}
	return c, nil
}

// linkRate returns the rate of l's port if l knows it, as the reaction
// point with parameters p can run it (at least rpg_min_rate, whole Mb/s
// in the ConnectX variant), or DefaultLineRate.
func linkRate(l link.Link, p *congestion.Params) congestion.Rate {
	lr, ok := l.(link.LineRater)
	if !ok || lr.LineRate() == 0 {
		return DefaultLineRate
	}
	r := min(congestion.Rate(lr.LineRate()), congestion.MaxLineRate)
	if p.Variant == congestion.VariantConnectX {
		r -= r % congestion.MbitPerSecond
	}
	return max(r, p.RPGMinRate, p.RateToSetOnFirstCNP)
}

// handleCNP takes a CNP (Annex A17.9.3) from the link: the peer's
// notification point saw packets of the destination QP's arrive
// CE-marked. Whatever its UDP source port (ConnectX sends 0), it goes to
// the QP's reaction point, which cuts the QP's rate; with congestion
// control off, or for a QP that does not exist, it is counted as
// rp_cnp_ignored, as mlx5 counts a CNP its reaction point does not act
// on. A CNP is never answered. pkt is the packet from its IP header on.
func (d *Device) handleCNP(p *wire.Packet, pkt []byte) {
	q := d.lookup(p.BTH.DestQP())
	if q == nil {
		d.cnpIgnored.Add(1)
		if d.cfg.Trace != nil {
			d.traceEvent(trace.Event{Time: d.clock.Now().SinceEpoch(), QP: uint32(p.BTH.DestQP()), Kind: trace.CNPReceived, Reason: "ignored: no such QP"})
		}
		return
	}
	if path := q.path.Load(); path != nil && !d.fromPeer(p, path.dgid, path.sgidIndex) {
		d.addrMismatch.Add(1)
		return
	}
	if !pkeyMatch(p.BTH.PKey(), defaultPKey) {
		d.pkeyViolations.Add(1)
		return
	}
	if d.cfg.PacketTrace != nil {
		d.cfg.PacketTrace(Received, pkt)
	}
	q.e.HandleCNP()
}

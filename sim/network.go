package sim

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/link/mem/fabric"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// Network is switches on one virtual clock, with gorxe devices on their
// ports and flows between them. Everything runs on the goroutine that
// calls Run.
type Network struct {
	clock    *fabric.Clock
	switches []*fabric.Switch
	hosts    []*Host
	flows    []*Flow
	cfg      rnic.Config // what every device is opened with, but its link and name
	err      error       // the first thing that went wrong inside an event
}

// New returns a network on clock whose devices are opened with dev's
// settings (its Link, Name and Loop are the network's to set).
func New(clock *fabric.Clock, dev rnic.Config) *Network {
	return &Network{clock: clock, cfg: dev}
}

// Clock returns the network's clock.
func (n *Network) Clock() *fabric.Clock { return n.clock }

// Now returns the time since the clock's epoch.
func (n *Network) Now() time.Duration { return time.Duration(n.clock.Now() - 1) }

// AddSwitch adds a switch on the network's clock.
func (n *Network) AddSwitch(c fabric.Config) (*fabric.Switch, error) {
	s, err := fabric.NewSwitch(n.clock, c)
	if err != nil {
		return nil, err
	}
	n.switches = append(n.switches, s)
	return s, nil
}

// Host is a gorxe device on a switch port, with one region that its
// flows write from and into, and one CQ for all its QPs.
type Host struct {
	Name string
	net  *Network
	link *fabric.HostLink
	dev  *rnic.Device
	pd   *mr.PD
	cq   *cq.CQ
	buf  []byte
	mr   *mr.MR
	wcs  []cq.WC
	// sending are the flows whose requester is this host, by WRID's top half.
	sending map[uint32]*Flow
}

// hostBuffer is each host's region: a flow's WRITEs cycle through it.
const hostBuffer = 1 << 20

// AddHost opens a gorxe device, named name, on port of s.
func (n *Network) AddHost(name string, s *fabric.Switch, port int) (*Host, error) {
	l, err := s.Attach(port)
	if err != nil {
		return nil, err
	}
	h := &Host{Name: name, net: n, link: l, buf: make([]byte, hostBuffer), wcs: make([]cq.WC, 64), sending: make(map[uint32]*Flow)}
	cfg := n.cfg
	cfg.Link, cfg.Name, cfg.Loop = l, name, hostLoop{h}
	if h.dev, err = rnic.Open(cfg); err != nil {
		return nil, err
	}
	h.pd = h.dev.AllocPD()
	if h.cq, err = h.dev.CreateCQ(1 << 16); err != nil {
		return nil, err
	}
	if h.mr, err = h.dev.RegMR(h.pd, h.buf, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead); err != nil {
		return nil, err
	}
	n.hosts = append(n.hosts, h)
	return h, nil
}

// Addr returns the host's first address.
func (h *Host) Addr() netip.Addr { return h.link.Addrs()[0] }

// Device returns the host's device.
func (h *Host) Device() *rnic.Device { return h.dev }

// hostLoop is a host's device's rnic.Loop: the network's clock, with the
// host's CQ polled after every event the device asked for, as a program
// busy polling would see each completion as it came.
type hostLoop struct{ h *Host }

func (l hostLoop) Now() time.Duration { return l.h.net.Now() }

func (l hostLoop) At(t time.Duration, fn func()) {
	l.h.net.clock.At(monotime.Time(t)+1, l.h, fn)
}

// Handle runs a device's event (fabric.Handler), then takes the
// completions it made.
func (h *Host) Handle(_ monotime.Time, arg any) {
	arg.(func())()
	h.poll()
}

// poll takes the host's completions and hands each to its flow.
func (h *Host) poll() {
	for {
		k, err := h.cq.Poll(h.wcs)
		if err != nil {
			h.net.fail(fmt.Errorf("%s: %w", h.Name, err))
			return
		}
		for _, wc := range h.wcs[:k] {
			f := h.sending[uint32(wc.WRID>>32)]
			if f == nil {
				h.net.fail(fmt.Errorf("%s: a completion for no flow: %+v", h.Name, wc))
				continue
			}
			f.completed(wc)
		}
		if k < len(h.wcs) {
			return
		}
	}
}

// fail records the first error an event met; Run returns it.
func (n *Network) fail(err error) {
	if n.err == nil {
		n.err = err
	}
}

// Run runs the network until the clock reads d after its epoch, or an
// event fails. It closes nothing: the network may run on.
func (n *Network) Run(d time.Duration) error {
	until := monotime.Time(d) + 1
	for n.err == nil {
		next, ok := n.clock.Next()
		if !ok || next > until {
			break
		}
		n.clock.Step()
	}
	if n.err != nil {
		return n.err
	}
	n.clock.RunUntil(until) // nothing is left before it; the clock moves to it
	return nil
}

// Close closes every device.
func (n *Network) Close() error {
	var errs []error
	for _, h := range n.hosts {
		if err := h.dev.Close(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", h.Name, err))
		}
	}
	return errors.Join(errs...)
}

// connect makes an RC QP on each of a and b and takes both to RTS, each
// the other's peer, as perftest does over its exchange.
func connect(a, b *Host, depth int) (qa, qb *rnic.QP, err error) {
	ends := [2]*Host{a, b}
	var qps [2]*rnic.QP
	for i, h := range ends {
		qps[i], err = h.dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: h.pd, SendCQ: h.cq, RecvCQ: h.cq,
			Cap: qp.Cap{MaxSendWR: uint32(depth), MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	for i, h := range ends {
		peer := ends[1-i]
		q := qps[i]
		steps := []struct {
			attr qp.Attr
			mask qp.AttrMask
		}{
			{qp.Attr{State: qp.StateInit, Port: 1, AccessFlags: mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead},
				qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrAccessFlags},
			{qp.Attr{State: qp.StateRTR, PathMTU: qp.MTU4096, DestQPNum: qps[1-i].Num(), RQPSN: 1, MaxDestRdAtomic: 16,
				AV: qp.AddressVector{DGID: peer.dev.GIDs()[0], HopLimit: 64}},
				qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer},
			{qp.Attr{State: qp.StateRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
				qp.AttrState | qp.AttrSQPSN | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic},
		}
		for _, s := range steps {
			if err := q.Modify(&s.attr, s.mask); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", h.Name, err)
			}
		}
	}
	return qps[0], qps[1], nil
}

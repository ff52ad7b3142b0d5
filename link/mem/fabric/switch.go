package fabric

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/wire"
)

// ErrConfig is wrapped by every error about a bad Config; the message
// names the parameter.
var ErrConfig = errors.New("fabric: bad configuration")

// ErrPort is returned for a port number the switch does not have.
var ErrPort = errors.New("fabric: no such port")

// PortConfig describes a port and the link from it to its host.
type PortConfig struct {
	// Rate is the link's line rate in bits per second of IP packets, in
	// both directions.
	Rate uint64

	// Delay is the link's one-way propagation delay.
	Delay time.Duration

	// Addrs are the addresses of the port's host: the switch routes a
	// packet to the port that owns its IP destination.
	Addrs []netip.Addr
}

// RED is the ECN marking rule of the egress queues, on the instantaneous
// queue length in bytes. The zero RED marks nothing.
type RED struct {
	Kmin, Kmax int     // bytes
	Pmax       float64 // marking probability at Kmax, 0 to 1
}

// Probability returns the probability that a packet leaving a queue of q
// bytes is marked.
func (r RED) Probability(q int) float64 {
	switch {
	case r.Kmax == 0 || q <= r.Kmin:
		return 0
	case q > r.Kmax:
		return 1
	}
	return r.Pmax * float64(q-r.Kmin) / float64(r.Kmax-r.Kmin)
}

// PFC is the pause rule of the ingress ports, on the bytes each has
// queued in the egress queues. A pause stops what sends into the port:
// its host, or the egress queue of the switch at the other end (Connect).
type PFC struct {
	XOFF int // pause the port's sender when its bytes exceed this
	XON  int // resume it when they fall to this or below
}

// Config describes a switch.
type Config struct {
	Ports []PortConfig

	// Buffer is each egress queue's size in bytes; a packet that does not
	// fit is dropped. It must hold at least one packet of MTU bytes.
	Buffer int

	// MTU is the largest IP packet the switch forwards; larger ones are
	// dropped and counted. Zero means link.MaxPacket.
	MTU int

	// ECN is the egress queues' marking rule.
	ECN RED

	// PFC, if not nil, turns on pause frames.
	PFC *PFC

	// Loss is the probability that a packet leaving an egress queue is
	// lost on its way to the host or switch beyond, as a frame corrupted
	// on the wire is: it costs the link's time and never arrives. Its
	// draws come after the marker's, from the same random numbers.
	Loss float64

	// Seed seeds the marker's and Loss's random numbers.
	Seed uint64

	// Trace, if not nil, receives a line per event: the time in
	// nanoseconds, what happened, the port, the packet's length (0 for
	// PFC's) and the bytes queued after it: the egress queue's, or for
	// xoff and xon the ingress port's, for paused and resumed the
	// sender's.
	Trace io.Writer
}

func (c *Config) check() error {
	if len(c.Ports) == 0 {
		return fmt.Errorf("%w: no ports", ErrConfig)
	}
	if c.MTU < 0 || c.MTU > link.MaxPacket {
		return fmt.Errorf("%w: MTU %d out of range (1 to %d)", ErrConfig, c.MTU, link.MaxPacket)
	}
	mtu := cmp0(c.MTU, link.MaxPacket)
	if c.Buffer < mtu {
		return fmt.Errorf("%w: Buffer %d bytes is smaller than one packet of MTU %d", ErrConfig, c.Buffer, mtu)
	}
	r := c.ECN
	switch {
	case r.Kmin < 0 || r.Kmax < 0:
		return fmt.Errorf("%w: negative ECN threshold (Kmin %d, Kmax %d)", ErrConfig, r.Kmin, r.Kmax)
	case r.Kmin > r.Kmax:
		return fmt.Errorf("%w: ECN Kmin %d is above Kmax %d", ErrConfig, r.Kmin, r.Kmax)
	case !(r.Pmax >= 0 && r.Pmax <= 1):
		return fmt.Errorf("%w: ECN Pmax %v is not a probability", ErrConfig, r.Pmax)
	}
	if !(c.Loss >= 0 && c.Loss < 1) {
		return fmt.Errorf("%w: Loss %v is not a probability below 1", ErrConfig, c.Loss)
	}
	if p := c.PFC; p != nil {
		if p.XON < 0 || p.XOFF <= p.XON {
			return fmt.Errorf("%w: PFC XOFF %d must be above XON %d, and XON at least 0", ErrConfig, p.XOFF, p.XON)
		}
	}
	seen := make(map[netip.Addr]int)
	for i, p := range c.Ports {
		if p.Rate == 0 {
			return fmt.Errorf("%w: port %d: zero rate", ErrConfig, i)
		}
		if p.Delay < 0 {
			return fmt.Errorf("%w: port %d: negative delay %v", ErrConfig, i, p.Delay)
		}
		for _, a := range p.Addrs {
			k := a.Unmap().WithZone("")
			if !k.IsValid() {
				return fmt.Errorf("%w: port %d: invalid address", ErrConfig, i)
			}
			if j, dup := seen[k]; dup {
				return fmt.Errorf("%w: address %v on ports %d and %d", ErrConfig, a, j, i)
			}
			seen[k] = i
		}
	}
	return nil
}

func cmp0(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Switch is an output-queued switch on a Clock, with a buffer per egress
// queue. Its methods must be called from the goroutine that runs the
// clock (RealTime serializes them with a lock).
type Switch struct {
	clock  *Clock
	ports  []port
	routes map[netip.Addr]int
	buffer int
	mtu    int
	red    RED
	loss   float64
	pfc    *PFC
	rng    *rand.Rand
	trace  io.Writer
	line   []byte
	free   []*frame
	flows  *flowTable // per flow counts, once SampleFlows asks for them
}

// frame is a packet inside the switch or on a link.
type frame struct {
	b  []byte
	in int // the port it came in on
}

// port is one switch port and its link: the host's transmitter towards
// the switch (up) and the egress queue's towards the host (down).
type port struct {
	up, down  transmitter
	ingress   int  // bytes from this port queued in egress queues, for PFC
	xoff      bool // a pause is in force (as the switch sees it)
	receive   func(now monotime.Time, pkt []byte)
	stats     PortStats
	queue     QueueStats
	pauseRecv pauseFrame // where this ingress's pause frames go
	atSwitch  arrival
	peer      *Switch // the switch the port's link goes to, if not a host
	atHost    arrival
}

// NewSwitch returns a switch configured by c on clock.
func NewSwitch(clock *Clock, c Config) (*Switch, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	s := &Switch{
		clock:  clock,
		ports:  make([]port, len(c.Ports)),
		routes: make(map[netip.Addr]int),
		buffer: c.Buffer,
		mtu:    cmp0(c.MTU, link.MaxPacket),
		red:    c.ECN,
		loss:   c.Loss,
		rng:    rand.New(rand.NewPCG(c.Seed, 0x6563_6e5f_6d61_726b)),
		trace:  c.Trace,
	}
	if c.PFC != nil {
		p := *c.PFC
		s.pfc = &p
	}
	for i, pc := range c.Ports {
		p := &s.ports[i]
		for _, a := range pc.Addrs {
			s.routes[a.Unmap().WithZone("")] = i
		}
		p.atSwitch = arrival{s: s, port: i, atSwitch: true}
		p.atHost = arrival{s: s, port: i}
		p.up = transmitter{s: s, port: i, rate: pc.Rate, delay: pc.Delay, far: &p.atSwitch}
		p.down = transmitter{s: s, port: i, rate: pc.Rate, delay: pc.Delay, far: &p.atHost, egress: true}
		p.pauseRecv = pauseFrame{t: &p.up}
	}
	return s, nil
}

// Now returns the time on the switch's clock.
func (s *Switch) Now() monotime.Time { return s.clock.Now() }

// Ports returns the number of ports.
func (s *Switch) Ports() int { return len(s.ports) }

// OnReceive sets the function that port's host receives packets with.
// pkt is the switch's until fn returns.
func (s *Switch) OnReceive(port int, fn func(now monotime.Time, pkt []byte)) error {
	if port < 0 || port >= len(s.ports) {
		return fmt.Errorf("%w: %d", ErrPort, port)
	}
	s.ports[port].receive = fn
	return nil
}

// Send queues a copy of pkt, an IP packet, for port's host to transmit
// to the switch; port must have a host, not another switch. The host's queue has no bound: a host whose sender
// paces itself keeps it short, and a paused host holds its packets there.
func (s *Switch) Send(port int, pkt []byte) error {
	if port < 0 || port >= len(s.ports) || s.ports[port].peer != nil {
		return fmt.Errorf("%w: %d", ErrPort, port)
	}
	if len(pkt) > s.mtu {
		s.ports[port].stats.TooBig++
		return nil
	}
	s.sendFrame(s.newFrame(pkt, port))
	return nil
}

// sendFrame queues f, which the switch now owns, at its host's
// transmitter.
func (s *Switch) sendFrame(f *frame) {
	p := &s.ports[f.in]
	p.stats.Sent++
	p.stats.SentBytes += uint64(len(f.b))
	p.up.push(f)
	p.up.start(s.clock.Now())
}

func (s *Switch) newFrame(pkt []byte, in int) *frame {
	var f *frame
	if n := len(s.free); n > 0 {
		f = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		f = &frame{b: make([]byte, 0, s.mtu)}
	}
	f.b = append(f.b[:0], pkt...)
	f.in = in
	return f
}

func (s *Switch) freeFrame(f *frame) { s.free = append(s.free, f) }

// arrival is the far end of a link: the switch's ingress, or the host.
type arrival struct {
	s        *Switch
	port     int
	atSwitch bool
}

// Handle takes a frame off the link.
func (a *arrival) Handle(now monotime.Time, arg any) {
	f := arg.(*frame)
	if a.atSwitch {
		f.in = a.port
		a.s.forward(now, f)
		return
	}
	p := &a.s.ports[a.port]
	p.stats.Delivered++
	p.stats.DeliveredBytes += uint64(len(f.b))
	a.s.tracef(now, "deliver", a.port, len(f.b), p.down.bytes)
	if a.s.flows != nil {
		a.s.flows.count(f.b)
	}
	if p.receive != nil {
		p.receive(now, f.b)
	}
	a.s.freeFrame(f)
}

// forward routes a frame that reached the switch to its egress queue.
func (s *Switch) forward(now monotime.Time, f *frame) {
	in := &s.ports[f.in]
	in.stats.Received++
	out, ok := s.route(f.b)
	if !ok {
		in.stats.NoRoute++
		s.tracef(now, "noroute", f.in, len(f.b), 0)
		s.freeFrame(f)
		return
	}
	o := &s.ports[out]
	n := len(f.b)
	if o.down.bytes+n > s.buffer {
		o.queue.Dropped++
		o.queue.DroppedBytes += uint64(n)
		s.tracef(now, "drop", out, n, o.down.bytes)
		s.freeFrame(f)
		return
	}
	o.queue.Enqueued++
	o.queue.EnqueuedBytes += uint64(n)
	o.down.push(f)
	o.queue.MaxBytes = max(o.queue.MaxBytes, o.down.bytes)
	s.tracef(now, "enqueue", out, n, o.down.bytes)
	in.ingress += n
	if s.pfc != nil && !in.xoff && in.ingress > s.pfc.XOFF {
		in.xoff = true
		in.stats.Pauses++
		s.tracef(now, "xoff", f.in, 0, in.ingress)
		s.clock.After(in.up.delay, &in.pauseRecv, true)
	}
	o.down.start(now)
}

// route returns the port that owns pkt's IP destination.
func (s *Switch) route(pkt []byte) (int, bool) {
	var dst netip.Addr
	switch {
	case len(pkt) >= wire.IPv4Len && pkt[0]>>4 == 4:
		dst = wire.IPv4(pkt).Dst()
	case len(pkt) >= wire.IPv6Len && pkt[0]>>4 == 6:
		dst = wire.IPv6(pkt).Dst().Unmap()
	default:
		return 0, false
	}
	out, ok := s.routes[dst]
	return out, ok
}

// dequeued does the egress queue's work as f leaves it: the ingress's
// PFC count, then ECN marking on the bytes still queued.
func (s *Switch) dequeued(now monotime.Time, out int, f *frame) {
	o := &s.ports[out]
	o.queue.Dequeued++
	in := &s.ports[f.in]
	in.ingress -= len(f.b)
	if in.xoff && in.ingress <= s.pfc.XON {
		in.xoff = false
		in.stats.Resumes++
		s.tracef(now, "xon", f.in, 0, in.ingress)
		s.clock.After(in.up.delay, &in.pauseRecv, false)
	}
	q := o.down.bytes
	p := s.red.Probability(q)
	if p <= 0 || !ect(f.b) {
		return
	}
	if p < 1 && s.rng.Float64() >= p {
		return
	}
	wire.MarkCE(f.b)
	o.queue.Marked++
	s.tracef(now, "mark", out, len(f.b), q)
}

// ect reports whether an IP packet is ECN-capable: ECT(0) or ECT(1).
func ect(pkt []byte) bool {
	var tc uint8
	if pkt[0]>>4 == 4 {
		tc = wire.IPv4(pkt).TOS()
	} else {
		tc = wire.IPv6(pkt).TrafficClass()
	}
	e := tc & 3
	return e == 1 || e == 2
}

func (s *Switch) tracef(now monotime.Time, what string, port, n, q int) {
	if s.trace == nil {
		return
	}
	b := strconv.AppendInt(s.line[:0], int64(now), 10)
	b = append(b, ' ')
	b = append(b, what...)
	b = append(b, " port="...)
	b = strconv.AppendInt(b, int64(port), 10)
	b = append(b, " len="...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, " q="...)
	b = strconv.AppendInt(b, int64(q), 10)
	b = append(b, '\n')
	s.line = b
	s.trace.Write(b)
}

// Connect joins port pa of switch a and port pb of switch b, switches on
// one clock, with a link in place of their hosts: each side's egress
// queue sends to the other's ingress at its own port's rate and delay,
// and each side's PFC pauses the other's egress queue. A port's
// PortConfig.Addrs are then the addresses routed through it: the hosts
// behind the other switch.
func Connect(a *Switch, pa int, b *Switch, pb int) error {
	switch {
	case a.clock != b.clock:
		return fmt.Errorf("%w: switches on different clocks", ErrConfig)
	case pa < 0 || pa >= len(a.ports) || a.ports[pa].peer != nil:
		return fmt.Errorf("%w: %d, or it is connected already", ErrPort, pa)
	case pb < 0 || pb >= len(b.ports) || b.ports[pb].peer != nil:
		return fmt.Errorf("%w: %d, or it is connected already", ErrPort, pb)
	case a == b && pa == pb:
		return fmt.Errorf("%w: port %d to itself", ErrPort, pa)
	}
	x, y := &a.ports[pa], &b.ports[pb]
	x.peer, y.peer = b, a
	x.down.far, y.down.far = &y.atSwitch, &x.atSwitch
	x.pauseRecv.t, y.pauseRecv.t = &y.down, &x.down
	return nil
}

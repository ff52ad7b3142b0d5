package fabric

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/wire"
)

// RealTime runs a switch on the time package's clock and gives each port
// a link.Link, so that gorxe devices talk through the switch as through
// a wire.
//
// Inside a testing/synctest bubble that clock is the bubble's, which
// moves only when every goroutine in the bubble is durably blocked. The
// devices' timers and the switch's events then share one virtual time:
// a device handles each packet at the instant the switch delivers it,
// however long that takes in wall time, and the switch's times are exact.
// Outside a bubble the switch's events run late by the wall clock's
// timer resolution, and a run is not repeatable.
type RealTime struct {
	mu       sync.Mutex // guards clock and switches, taken before any Link's
	clock    *Clock
	switches []*Switch
	epoch    time.Time // when clock read 1

	// staged holds the packets hosts sent, in the order they sent them,
	// until the instant they were sent at has passed; see Link.Send.
	staged []stagedPacket

	wake chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// stagedPacket is a packet a host sent at a time, not yet on the switch.
type stagedPacket struct {
	at   monotime.Time
	sw   int // the switch's index in RealTime.switches
	flow flowKey
	f    *frame
}

// NewRealTime starts a switch configured by c on the time package's
// clock. Close stops it.
func NewRealTime(c Config) (*RealTime, error) {
	clock := NewClock()
	sw, err := NewSwitch(clock, c)
	if err != nil {
		return nil, err
	}
	return Drive(clock, sw)
}

// Drive runs switches, all on clock and perhaps joined by Connect, on the
// time package's clock from now on. Close stops them.
func Drive(clock *Clock, switches ...*Switch) (*RealTime, error) {
	if len(switches) == 0 {
		return nil, fmt.Errorf("%w: no switches", ErrConfig)
	}
	for _, s := range switches {
		if s.clock != clock {
			return nil, fmt.Errorf("%w: a switch on another clock", ErrConfig)
		}
	}
	r := &RealTime{
		clock:    clock,
		switches: slices.Clone(switches),
		epoch:    time.Now().Add(-clock.Now().Sub(1)),
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	r.wg.Add(1)
	go r.run()
	return r, nil
}

// now returns the clock time that the time package's clock reads.
func (r *RealTime) now() monotime.Time { return monotime.Time(time.Since(r.epoch)) + 1 }

// run runs each event when its time comes.
func (r *RealTime) run() {
	defer r.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.mu.Lock()
		r.advance()
		next, ok := r.clock.Next()
		if len(r.staged) > 0 && (!ok || r.staged[0].at+1 < next) {
			next, ok = r.staged[0].at+1, true
		}
		r.mu.Unlock()
		wait := time.Hour
		if ok {
			wait = time.Duration(next - r.now())
		}
		if wait <= 0 {
			continue
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-r.wake:
		case <-r.done:
			return
		}
	}
}

// advance brings the switch up to now: it runs the events due, and puts
// on the switch the packets sent at each instant before now, at that
// instant, after the events due then.
//
// Packets sent at the same instant go on in the order of their switch
// and port, then of their flow (IP destination, then destination QP), then of their
// sending: in a synctest bubble goroutines that run at one instant run
// in no fixed order, and a device's packets may come from several of
// them. A QP's own packets keep their order. Packets sent at now wait,
// for more may come at now.
func (r *RealTime) advance() {
	now := r.now()
	n := 0
	for n < len(r.staged) && r.staged[n].at < now {
		n++
	}
	for i := 0; i < n; {
		at := r.staged[i].at
		j := i + 1
		for j < n && r.staged[j].at == at {
			j++
		}
		r.clock.RunUntil(at)
		group := r.staged[i:j]
		slices.SortStableFunc(group, func(a, b stagedPacket) int {
			if a.sw != b.sw {
				return a.sw - b.sw
			}
			if a.f.in != b.f.in {
				return a.f.in - b.f.in
			}
			return a.flow.compare(b.flow)
		})
		for _, p := range group {
			r.switches[p.sw].sendFrame(p.f)
		}
		i = j
	}
	k := copy(r.staged, r.staged[n:])
	clear(r.staged[k:])
	r.staged = r.staged[:k]
	r.clock.RunUntil(now)
}

// flowKey is what orders packets sent at one instant from one port.
type flowKey struct {
	dst netip.Addr
	qpn uint32
}

func (a flowKey) compare(b flowKey) int {
	if c := a.dst.Compare(b.dst); c != 0 {
		return c
	}
	return int(a.qpn) - int(b.qpn)
}

// flowOf returns an IP packet's destination and, for RoCE v2, the BTH's
// destination QP.
func flowOf(pkt []byte) flowKey {
	var k flowKey
	var hdr int
	switch {
	case len(pkt) >= wire.IPv4Len && pkt[0]>>4 == 4:
		k.dst, hdr = wire.IPv4(pkt).Dst(), wire.IPv4(pkt).HeaderLen()
	case len(pkt) >= wire.IPv6Len && pkt[0]>>4 == 6:
		k.dst, hdr = wire.IPv6(pkt).Dst(), wire.IPv6Len
	default:
		return k
	}
	if bth := hdr + wire.UDPLen; len(pkt) >= bth+8 && binary.BigEndian.Uint16(pkt[hdr+2:]) == wire.UDPPort {
		k.qpn = binary.BigEndian.Uint32(pkt[bth+4:]) & 0xffffff
	}
	return k
}

// Do calls fn with the first switch, the clock brought up to now, while
// nothing else uses any of the switches: to read their counters.
func (r *RealTime) Do(fn func(s *Switch)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.advance()
	fn(r.switches[0])
}

// Close stops the switch. Packets on their way are lost.
func (r *RealTime) Close() error {
	err := link.ErrClosed
	r.once.Do(func() {
		close(r.done)
		r.wg.Wait()
		err = nil
	})
	return err
}

// DefaultRxQueue is the receive queue bound, in packets, of a Link.
const DefaultRxQueue = 4096

// Link returns a link for the host on port of the first switch; see
// LinkAt.
func (r *RealTime) Link(port int) (*Link, error) { return r.LinkAt(r.switches[0], port) }

// LinkAt returns a link for the host on port of switch s, with the
// port's addresses, that queues at most DefaultRxQueue packets the host
// has not received. Each port has one Link; asking again replaces the
// first.
func (r *RealTime) LinkAt(s *Switch, port int) (*Link, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	idx := slices.Index(r.switches, s)
	if idx < 0 {
		return nil, fmt.Errorf("%w: a switch RealTime does not drive", ErrConfig)
	}
	if port < 0 || port >= s.Ports() || s.ports[port].peer != nil {
		return nil, fmt.Errorf("%w: %d", ErrPort, port)
	}
	p := &s.ports[port]
	l := &Link{
		rt:    r,
		sw:    s,
		swIdx: idx,
		port:  port,
		mtu:   s.mtu,
		rate:  p.up.rate,
		rx:    rxQueue{limit: DefaultRxQueue},
		ready: make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	l.addrs = s.addrsOf(port)
	p.receive = l.deliver
	return l, nil
}

// Link is a host's attachment to a RealTime switch. It implements
// link.Link.
type Link struct {
	rt    *RealTime
	sw    *Switch
	swIdx int
	port  int
	addrs []netip.Addr
	mtu   int
	rate  uint64

	mu     sync.Mutex
	rx     rxQueue
	closed bool
	ready  chan struct{} // signalled when rx becomes non-empty
	done   chan struct{} // closed by Close
}

var _ link.Link = (*Link)(nil)

// deliver queues a packet the switch delivers to the host, or drops it if
// the queue is full, as a NIC's receive ring does.
func (l *Link) deliver(_ monotime.Time, pkt []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		l.rx.overflow++
		return
	}
	if l.rx.push(pkt) && l.rx.len() == 1 {
		select {
		case l.ready <- struct{}{}:
		default:
		}
	}
}

// Send hands each packet, bufs[i][link.Headroom:], to the port's host's
// transmit queue at the switch, as of now. The packets reach the switch
// once now has passed, in an order that does not depend on which
// goroutine sent first (see RealTime).
func (l *Link) Send(bufs [][]byte) error {
	select {
	case <-l.done:
		return link.ErrClosed
	default:
	}
	r := l.rt
	select {
	case <-r.done:
		return nil // the switch is off: lost, as on a dead wire
	default:
	}
	r.mu.Lock()
	now := r.now()
	for _, b := range bufs {
		pkt := b[link.Headroom:]
		if len(pkt) > l.sw.mtu {
			l.sw.ports[l.port].stats.TooBig++
			continue
		}
		r.staged = append(r.staged, stagedPacket{at: now, sw: l.swIdx, flow: flowOf(pkt), f: l.sw.newFrame(pkt, l.port)})
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return nil
}

// Receive blocks until the switch has delivered a packet, then copies up
// to len(bufs) of them into bufs[i][link.Headroom:] and sets sizes[i].
func (l *Link) Receive(bufs [][]byte, sizes []int) (int, error) {
	want := min(len(bufs), len(sizes))
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return 0, link.ErrClosed
		}
		if l.rx.len() > 0 || want == 0 {
			n := l.rx.pop(bufs[:want], sizes)
			l.mu.Unlock()
			return n, nil
		}
		l.mu.Unlock()
		select {
		case <-l.ready:
		case <-l.done:
		}
	}
}

// Overflow returns the number of packets dropped because the receive
// queue was full or the link closed.
func (l *Link) Overflow() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rx.overflow
}

// Addrs returns the port's addresses.
func (l *Link) Addrs() []netip.Addr { return slices.Clone(l.addrs) }

// MTU returns the switch's MTU.
func (l *Link) MTU() int { return l.mtu }

// Flags returns 0: the link carries whole IP packets.
func (l *Link) Flags() link.Flags { return 0 }

// LineRate returns the port's rate in bits per second (link.LineRater).
func (l *Link) LineRate() uint64 { return l.rate }

// Close stops the link and wakes a blocked Receive. Packets the switch
// delivers after it are dropped.
func (l *Link) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return link.ErrClosed
	}
	l.closed = true
	close(l.done)
	return nil
}

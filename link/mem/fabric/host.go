package fabric

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/link"
)

// HostLink is a host's attachment to a switch port for a device that runs
// on the switch's own clock, on the goroutine that steps it: a gorxe
// device opened with rnic.Config.Loop, whose events share the Clock with
// the switch's. It implements link.Link and link.Notifier.
//
// Nothing waits: a packet the switch delivers is queued (at most
// DefaultRxQueue of them, as a NIC's receive ring) and the device is told
// at once (Notify); a packet the device sends goes into the port's
// transmit queue at the clock's time, in the order it was sent. A run is
// then a function of its inputs and the switch's seed alone, and costs no
// more wall time than the devices' and the switch's work.
type HostLink struct {
	sw     *Switch
	port   int
	addrs  []netip.Addr
	rx     rxQueue
	notify func()
	closed bool
}

var _ link.Notifier = (*HostLink)(nil)

// Attach returns the link of the host on port, which must have no other
// link. Its methods must be called on the clock's goroutine.
func (s *Switch) Attach(port int) (*HostLink, error) {
	if port < 0 || port >= len(s.ports) || s.ports[port].peer != nil || s.ports[port].receive != nil {
		return nil, fmt.Errorf("%w: %d", ErrPort, port)
	}
	l := &HostLink{sw: s, port: port, addrs: s.addrsOf(port), rx: rxQueue{limit: DefaultRxQueue}}
	s.ports[port].receive = l.deliver
	return l, nil
}

// addrsOf returns the addresses routed to port, in order.
func (s *Switch) addrsOf(port int) []netip.Addr {
	var addrs []netip.Addr
	for a, i := range s.routes {
		if i == port {
			addrs = append(addrs, a)
		}
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	return addrs
}

func (l *HostLink) deliver(_ monotime.Time, pkt []byte) {
	if l.closed {
		l.rx.overflow++
		return
	}
	if l.rx.push(pkt) && l.notify != nil {
		l.notify()
	}
}

// Notify has the link call fn each time the switch delivers a packet it
// queues.
func (l *HostLink) Notify(fn func()) { l.notify = fn }

// Send puts each packet, bufs[i][link.Headroom:], in the port's transmit
// queue now.
func (l *HostLink) Send(bufs [][]byte) error {
	if l.closed {
		return link.ErrClosed
	}
	for _, b := range bufs {
		if err := l.sw.Send(l.port, b[link.Headroom:]); err != nil {
			return err
		}
	}
	return nil
}

// errNoWait is Receive's and WaitReceive's answer: on a simulator's
// goroutine nothing else could run while they waited.
var errNoWait = errors.New("fabric: a host link on the switch's clock cannot wait for packets; use TryReceive and Notify")

// Receive does not wait: see errNoWait.
func (l *HostLink) Receive(bufs [][]byte, sizes []int) (int, error) { return 0, errNoWait }

// WaitReceive does not wait: see errNoWait.
func (l *HostLink) WaitReceive() error { return errNoWait }

// TryReceive copies up to len(bufs) queued packets into
// bufs[i][link.Headroom:], sets sizes[i], and returns how many.
func (l *HostLink) TryReceive(bufs [][]byte, sizes []int) (int, error) {
	if l.closed {
		return 0, link.ErrClosed
	}
	return l.rx.pop(bufs[:min(len(bufs), len(sizes))], sizes), nil
}

// Overflow returns the number of packets dropped because the receive
// queue was full or the link closed.
func (l *HostLink) Overflow() uint64 { return l.rx.overflow }

// Switch returns the switch the link attaches to, and the port.
func (l *HostLink) Switch() (*Switch, int) { return l.sw, l.port }

// Addrs returns the port's addresses.
func (l *HostLink) Addrs() []netip.Addr { return slices.Clone(l.addrs) }

// MTU returns the switch's MTU.
func (l *HostLink) MTU() int { return l.sw.mtu }

// Flags returns 0: the link carries whole IP packets.
func (l *HostLink) Flags() link.Flags { return 0 }

// LineRate returns the port's rate in bits per second (link.LineRater).
func (l *HostLink) LineRate() uint64 { return l.sw.ports[l.port].up.rate }

// Close stops the link; packets the switch delivers after it are dropped.
func (l *HostLink) Close() error {
	if l.closed {
		return link.ErrClosed
	}
	l.closed = true
	return nil
}

// rxQueue is a host's receive queue: packets the switch delivered, in
// order, at most limit of them. Its buffers are reused.
type rxQueue struct {
	q        [][]byte // from head
	head     int
	free     [][]byte
	limit    int
	overflow uint64
}

func (r *rxQueue) len() int { return len(r.q) - r.head }

// push queues a copy of pkt, or counts it in overflow if the queue is
// full, and reports whether it queued it.
func (r *rxQueue) push(pkt []byte) bool {
	if r.len() >= r.limit {
		r.overflow++
		return false
	}
	var b []byte
	if k := len(r.free); k > 0 {
		b, r.free = r.free[k-1], r.free[:k-1]
	}
	r.q = append(r.q, append(b[:0], pkt...))
	return true
}

// pop copies up to len(bufs) packets into bufs[i][link.Headroom:], sets
// sizes[i], and returns how many.
func (r *rxQueue) pop(bufs [][]byte, sizes []int) int {
	n := min(len(bufs), r.len())
	for i := range n {
		b := r.q[r.head]
		r.q[r.head] = nil
		r.head++
		sizes[i] = copy(bufs[i][link.Headroom:], b)
		r.free = append(r.free, b)
	}
	if r.head == len(r.q) {
		r.q, r.head = r.q[:0], 0
	}
	return n
}

// Package mem is an in-process fabric: links attached to one Fabric carry
// whole IP packets to each other through memory, routed by IP destination
// address, so two or more gorxe devices can talk inside one test binary.
//
// Each link can inject faults into the packets it sends: loss (random,
// every Nth, or scripted), reordering, duplication, corruption, ECN
// marking, one-way delay and a bandwidth cap. Every random choice comes
// from a PCG generator seeded by Faults.Seed, so the same seed and the same
// packets give the same faults, and a transport test can exercise each
// loss-recovery rule deterministically.
//
// A link's receive queue is bounded like a NIC's receive ring: a packet
// that finds it full is dropped and counted, and the sender never blocks.
package mem

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorxe/gorxe/link"
)

// DefaultQueueLen is the receive queue bound, in packets, of a link whose
// Config leaves QueueLen zero.
const DefaultQueueLen = 16384

// Errors returned when a link is attached.
var (
	ErrAddrInUse = errors.New("mem: address already attached to the fabric")
	ErrAddr      = errors.New("mem: invalid address")
	ErrMTU       = errors.New("mem: MTU out of range")
	ErrQueueLen  = errors.New("mem: negative queue length")
)

// Fabric connects links. A packet one link sends goes to the link that owns
// its IP destination address, or, sent to a multicast group, to every link
// that has joined the group, the sender too (as a host's kernel loops its
// own multicast back by default).
type Fabric struct {
	mu     sync.RWMutex
	routes map[netip.Addr]*Link
	groups map[netip.Addr]map[*Link]int // each group's members and how many times each joined
}

// NewFabric returns a fabric with no links.
func NewFabric() *Fabric {
	return &Fabric{routes: make(map[netip.Addr]*Link), groups: make(map[netip.Addr]map[*Link]int)}
}

// Config describes a link to attach to a fabric.
type Config struct {
	// Addrs are the link's own addresses, IPv4 or IPv6. An IPv4-mapped
	// IPv6 address and its IPv4 address name the same destination. A link
	// without addresses can send but receives nothing.
	Addrs []netip.Addr

	// MTU is the largest IP packet the link sends; larger ones are dropped
	// and counted as TooBig. Zero means link.MaxPacket, the most it may be.
	MTU int

	// QueueLen bounds the receive queue, in packets. Zero means
	// DefaultQueueLen.
	QueueLen int

	// Faults are the link's initial egress faults.
	Faults Faults
}

// NewLink attaches a link with the given addresses and default settings.
// It fails if an address is invalid or already attached.
func (f *Fabric) NewLink(addrs ...netip.Addr) (*Link, error) {
	return f.NewLinkConfig(Config{Addrs: addrs})
}

// NewLinkConfig attaches a link configured by c.
func (f *Fabric) NewLinkConfig(c Config) (*Link, error) {
	mtu := c.MTU
	if mtu == 0 {
		mtu = link.MaxPacket
	}
	if mtu < 0 || mtu > link.MaxPacket {
		return nil, fmt.Errorf("%w: %d (at most %d)", ErrMTU, c.MTU, link.MaxPacket)
	}
	qlen := c.QueueLen
	if qlen == 0 {
		qlen = DefaultQueueLen
	}
	if qlen < 0 {
		return nil, fmt.Errorf("%w: %d", ErrQueueLen, c.QueueLen)
	}
	l := &Link{
		fabric: f,
		addrs:  slices.Clone(c.Addrs),
		mtu:    mtu,
		done:   make(chan struct{}),
		wake:   make(chan struct{}, 1),
	}
	l.rx.limit = qlen
	l.rx.ready = make(chan struct{}, 1)
	l.setFaultsLocked(c.Faults)

	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]netip.Addr, 0, len(c.Addrs))
	for _, a := range c.Addrs {
		k := routeKey(a)
		if !k.IsValid() {
			return nil, fmt.Errorf("%w: %v", ErrAddr, a)
		}
		if _, taken := f.routes[k]; taken || slices.Contains(keys, k) {
			return nil, fmt.Errorf("%w: %v", ErrAddrInUse, a)
		}
		keys = append(keys, k)
	}
	for _, k := range keys {
		f.routes[k] = l
	}
	return l, nil
}

// routeKey returns the form of a under which the fabric routes to it: IPv4
// unmapped, no IPv6 zone, since an IP header carries neither.
func routeKey(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// detach removes l's addresses and memberships from the fabric.
func (f *Fabric) detach(l *Link) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range l.addrs {
		if k := routeKey(a); f.routes[k] == l {
			delete(f.routes, k)
		}
	}
	for g, members := range f.groups {
		delete(members, l)
		if len(members) == 0 {
			delete(f.groups, g)
		}
	}
}

// JoinGroup makes the link a member of the multicast group: it receives
// what any link of the fabric sends to the group, itself included. It
// implements link.Multicaster.
func (l *Link) JoinGroup(group netip.Addr) error {
	g := routeKey(group)
	if !g.IsMulticast() {
		return fmt.Errorf("%w: %v is not a multicast group", ErrAddr, group)
	}
	f := l.fabric
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-l.done:
		return link.ErrClosed
	default:
	}
	if f.groups[g] == nil {
		f.groups[g] = make(map[*Link]int)
	}
	f.groups[g][l]++
	return nil
}

// LeaveGroup ends one JoinGroup of the group. It implements
// link.Multicaster.
func (l *Link) LeaveGroup(group netip.Addr) error {
	g := routeKey(group)
	f := l.fabric
	f.mu.Lock()
	defer f.mu.Unlock()
	members := f.groups[g]
	if members[l] == 0 {
		return fmt.Errorf("mem: leaving %v: not a member", group)
	}
	if members[l]--; members[l] == 0 {
		delete(members, l)
		if len(members) == 0 {
			delete(f.groups, g)
		}
	}
	return nil
}

// Link is one attachment to a Fabric. It implements link.Link.
type Link struct {
	fabric *Fabric
	addrs  []netip.Addr
	mtu    int
	stats  counters

	done chan struct{} // closed by Close
	wake chan struct{} // tells the scheduler its next deadline may be earlier
	wg   sync.WaitGroup

	// rx is the receive queue, filled by senders and drained by Receive.
	rx struct {
		mu     sync.Mutex
		q      ring
		limit  int
		closed bool
		ready  chan struct{} // signalled when q becomes non-empty
	}
	rxTaken []*packet // Receive's scratch; Receive runs on one goroutine at a time

	// tx is the egress path: faults, the reorder window and the schedule of
	// delayed or paced packets. Send and the scheduler goroutine hold mu
	// while they use it, so packets leave in a single order.
	tx egress
}

var (
	_ link.Link        = (*Link)(nil)
	_ link.Multicaster = (*Link)(nil)
)

// counters are a link's statistics, updated by Send, the scheduler and
// Receive.
type counters struct {
	sent, delivered, received, dropped, duplicated, corrupted,
	marked, reordered, noRoute, overflow, tooBig atomic.Uint64
}

// Stats counts what happened to a link's packets. All but Received count
// packets the link sent.
type Stats struct {
	Sent       uint64 // packets handed to Send
	Delivered  uint64 // packets (duplicates included) placed in a receiver's queue
	Received   uint64 // packets Receive returned
	Dropped    uint64 // packets dropped by a fault: Drop, DropEvery or DropFunc
	Duplicated uint64 // extra copies made by the Duplicate fault
	Corrupted  uint64 // packets with one bit flipped by the Corrupt fault
	Marked     uint64 // packets whose ECN field was changed to CE
	Reordered  uint64 // packets released after one sent later (RFC 4737)
	NoRoute    uint64 // packets for no attached address, or not IPv4 or IPv6
	Overflow   uint64 // packets dropped because the receiver's queue was full
	TooBig     uint64 // packets longer than the MTU
}

// Stats returns the link's counters.
func (l *Link) Stats() Stats {
	c := &l.stats
	return Stats{
		Sent:       c.sent.Load(),
		Delivered:  c.delivered.Load(),
		Received:   c.received.Load(),
		Dropped:    c.dropped.Load(),
		Duplicated: c.duplicated.Load(),
		Corrupted:  c.corrupted.Load(),
		Marked:     c.marked.Load(),
		Reordered:  c.reordered.Load(),
		NoRoute:    c.noRoute.Load(),
		Overflow:   c.overflow.Load(),
		TooBig:     c.tooBig.Load(),
	}
}

// Addrs returns the link's addresses as they were given.
func (l *Link) Addrs() []netip.Addr { return slices.Clone(l.addrs) }

// MTU returns the largest IP packet the link sends.
func (l *Link) MTU() int { return l.mtu }

// LineRate returns the rate the Bandwidth fault caps the link at, in bits
// per second, or 0 when it is not capped (link.LineRater).
func (l *Link) LineRate() uint64 { return uint64(max(l.Faults().Bandwidth, 0)) * 8 }

// Flags returns 0: the fabric carries whole IP packets, so the ICRC of
// every packet can be checked.
func (l *Link) Flags() link.Flags { return 0 }

// Send copies each packet, applies the link's faults, and hands it to the
// link that owns its destination address, now or, under Delay, Bandwidth
// or Reorder, later. Packets that are dropped are counted, never an error.
// Send returns link.ErrClosed once the link is closed.
func (l *Link) Send(bufs [][]byte) error {
	l.tx.mu.Lock()
	defer l.tx.mu.Unlock()
	if l.tx.closed {
		return link.ErrClosed
	}
	now := time.Now()
	l.releaseDue(now)
	for _, b := range bufs {
		l.sendOne(b, now)
	}
	l.deliverOut()
	if len(l.tx.hold) > 0 || l.tx.sched.n > 0 {
		l.kick()
	}
	return nil
}

// deliverOut delivers the packets whose time has come, in order, and
// empties the list.
func (l *Link) deliverOut() {
	if len(l.tx.out) == 0 {
		return
	}
	l.deliver(l.tx.out)
	clear(l.tx.out)
	l.tx.out = l.tx.out[:0]
}

// deliver routes each packet to the link that owns its destination and
// queues it there, taking each receiver's lock once per run of packets to
// the same destination.
func (l *Link) deliver(ps []*packet) {
	f := l.fabric
	f.mu.RLock()
	defer f.mu.RUnlock()
	for i := 0; i < len(ps); {
		j := i + 1
		for j < len(ps) && ps[j].dst == ps[i].dst {
			j++
		}
		if ps[i].dst.IsMulticast() {
			l.multicast(ps[i:j])
			i = j
			continue
		}
		to := f.routes[ps[i].dst]
		if to == nil {
			l.stats.noRoute.Add(uint64(j - i))
			for _, p := range ps[i:j] {
				putPacket(p)
			}
		} else {
			to.enqueue(ps[i:j], &l.stats)
		}
		i = j
	}
}

// multicast queues a copy of each packet, all to one multicast group, at
// each member of the group, and counts those no link has joined as
// unroutable. l.fabric.mu must be held for reading.
func (l *Link) multicast(ps []*packet) {
	members := l.fabric.groups[ps[0].dst]
	if len(members) == 0 {
		l.stats.noRoute.Add(uint64(len(ps)))
	}
	for to := range members {
		copies := make([]*packet, len(ps))
		for k, p := range ps {
			copies[k] = getPacket(p.b[:p.n])
			copies[k].dst = p.dst
		}
		to.enqueue(copies, &l.stats)
	}
	for _, p := range ps {
		putPacket(p)
	}
}

// enqueue appends packets to l's receive queue, dropping those that find
// it full or the link closed, and counts them in the sender's counters.
func (l *Link) enqueue(ps []*packet, from *counters) {
	var queued, overflow, closed uint64
	l.rx.mu.Lock()
	wasEmpty := l.rx.q.n == 0
	for _, p := range ps {
		switch {
		case l.rx.closed:
			closed++
			putPacket(p)
		case l.rx.q.n >= l.rx.limit:
			overflow++
			putPacket(p)
		default:
			l.rx.q.push(p)
			queued++
		}
	}
	l.rx.mu.Unlock()
	if queued > 0 {
		from.delivered.Add(queued)
		if wasEmpty {
			select {
			case l.rx.ready <- struct{}{}:
			default:
			}
		}
	}
	if overflow > 0 {
		from.overflow.Add(overflow)
	}
	if closed > 0 {
		from.noRoute.Add(closed)
	}
}

// Receive blocks until a packet is queued for the link, then copies up to
// len(bufs) packets into bufs[i][link.Headroom:] and sets sizes[i]. It
// returns link.ErrClosed once the link is closed.
func (l *Link) Receive(bufs [][]byte, sizes []int) (int, error) {
	want := min(len(bufs), len(sizes))
	for {
		l.rx.mu.Lock()
		if l.rx.closed {
			l.rx.mu.Unlock()
			return 0, link.ErrClosed
		}
		if want == 0 {
			l.rx.mu.Unlock()
			return 0, nil
		}
		if l.rx.q.n > 0 {
			n := min(want, l.rx.q.n)
			taken := l.rxTaken[:0]
			for range n {
				taken = append(taken, l.rx.q.pop())
			}
			l.rx.mu.Unlock()
			for i, p := range taken {
				sizes[i] = copy(bufs[i][link.Headroom:], p.b[:p.n])
				putPacket(p)
			}
			clear(taken)
			l.rxTaken = taken
			l.stats.received.Add(uint64(n))
			return n, nil
		}
		l.rx.mu.Unlock()
		select {
		case <-l.rx.ready:
		case <-l.done:
		}
	}
}

// Close detaches the link's addresses, wakes a blocked Receive, discards
// queued and scheduled packets, and waits for the link's scheduler
// goroutine to exit. Closing a closed link returns link.ErrClosed.
func (l *Link) Close() error {
	l.tx.mu.Lock()
	if l.tx.closed {
		l.tx.mu.Unlock()
		return link.ErrClosed
	}
	l.tx.closed = true
	for _, p := range l.tx.hold {
		putPacket(p)
	}
	clear(l.tx.hold)
	l.tx.hold = l.tx.hold[:0]
	for l.tx.sched.n > 0 {
		putPacket(l.tx.sched.pop())
	}
	l.tx.mu.Unlock()

	close(l.done)
	l.fabric.detach(l)

	l.rx.mu.Lock()
	l.rx.closed = true
	for l.rx.q.n > 0 {
		putPacket(l.rx.q.pop())
	}
	l.rx.mu.Unlock()

	l.wg.Wait()
	return nil
}

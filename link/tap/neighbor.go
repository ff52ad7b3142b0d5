//go:build linux

package tap

import (
	"bytes"
	"net/netip"
	"slices"
	"time"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/ether"
)

// A neighbor is an entry of the neighbour cache: the MAC address of an
// on-link IP address, or the packets waiting for it.
//
// An entry is created incomplete by the first packet sent to an address
// (or complete, when the host resolves us first), and becomes reachable
// when its ARP reply or neighbour advertisement arrives. In between it is
// flushing: the receive path writes the queued packets, and Send keeps
// queueing behind them so packets leave in the order they were sent. A
// reachable entry stays reachable; only its MAC address may change. There
// is no reachability confirmation (RFC 4861 §7.3): a host that moves is
// learned again from its next ARP or neighbour discovery packet.
type neighbor struct {
	mac    [6]byte
	state  neighborState
	queue  [][]byte // copies of queued packets, each behind ether.HeaderLen bytes of headroom
	queued int      // bytes of packets in queue
	tries  int      // solicitations sent
	next   time.Time
}

type neighborState uint8

const (
	incomplete neighborState = iota
	flushing
	reachable
)

// maxNeighbors bounds the neighbour cache against a flood of ARP from
// spoofed addresses.
const maxNeighbors = 4096

// Housekeeping: how often the housekeeper looks at the TAP when Receive is
// not running, while resolving and otherwise, and how many RoCE packets it
// keeps for Receive.
const (
	busyTick = 2 * time.Millisecond
	idleTick = 100 * time.Millisecond
	maxStash = 256
	maxDrain = 64
)

// lookup returns the MAC address of a reachable neighbour.
func (l *Link) lookup(dst netip.Addr) ([6]byte, bool) {
	l.nmu.RLock()
	e := l.neigh[dst]
	if e == nil || e.state != reachable {
		l.nmu.RUnlock()
		return [6]byte{}, false
	}
	mac := e.mac
	l.nmu.RUnlock()
	return mac, true
}

// enqueue queues a copy of pkt for dst, which is not reachable yet, and
// starts resolving dst if nothing has.
func (l *Link) enqueue(dst netip.Addr, pkt []byte) error {
	l.nmu.Lock()
	e := l.neigh[dst]
	if e != nil && e.state == reachable {
		// Resolved since lookup.
		mac := e.mac
		l.nmu.Unlock()
		return l.sendResolved(pkt, mac)
	}
	start := e == nil
	if start {
		if e = l.newIncomplete(dst); e == nil {
			l.nmu.Unlock()
			l.stats.dropNoNeighbor.Add(1)
			return nil
		}
	}
	if e.queued+len(pkt) > l.queueBytes {
		l.nmu.Unlock()
		l.stats.dropQueueFull.Add(1)
		return nil
	}
	c := make([]byte, ether.HeaderLen+len(pkt))
	copy(c[ether.HeaderLen:], pkt)
	e.queue = append(e.queue, c)
	e.queued += len(pkt)
	l.nmu.Unlock()
	l.stats.queued.Add(1)
	if start {
		l.startResolving(dst)
	}
	return nil
}

// startResolving sends the first solicitation for dst, whose entry was
// just made incomplete, and wakes the housekeeper, which retries and
// expires it.
func (l *Link) startResolving(dst netip.Addr) {
	l.solicit(dst)
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Resolve starts resolving dst, an address on one of the link's subnets,
// unless its entry exists already; it queues nothing. It implements
// link.Resolver.
func (l *Link) Resolve(dst netip.Addr) {
	dst = dst.Unmap()
	if l.closed.Load() || !l.onLink(dst) || slices.Contains(l.addrs, dst) {
		return
	}
	if _, ok := ether.MulticastMAC(dst); ok {
		return
	}
	l.nmu.Lock()
	start := l.neigh[dst] == nil && l.newIncomplete(dst) != nil
	l.nmu.Unlock()
	if start {
		l.startResolving(dst)
	}
}

// newIncomplete makes dst's entry, incomplete, its first solicitation
// counted as sent, or returns nil if the table is full. l.nmu is held.
func (l *Link) newIncomplete(dst netip.Addr) *neighbor {
	if len(l.neigh) >= maxNeighbors {
		return nil
	}
	e := &neighbor{state: incomplete, tries: 1, next: time.Now().Add(l.interval)}
	l.neigh[dst] = e
	return e
}

// sendResolved writes a packet that has ether.HeaderLen bytes in front of it.
func (l *Link) sendResolved(pkt []byte, mac [6]byte) error {
	c := make([]byte, ether.HeaderLen+len(pkt))
	copy(c[ether.HeaderLen:], pkt)
	ether.PutHeader(c, mac, l.mac, ether.TypeOf(pkt))
	if err := l.write(c); err != nil {
		return err
	}
	l.stats.packetsOut.Add(1)
	return nil
}

// learn records that addr is at mac. It creates an entry only if create is
// set (the host resolved one of our addresses, so it is about to talk to
// us: RFC 826's merge, RFC 4861 §7.2.3); otherwise it only completes or
// updates an existing one, as Linux does with arp_accept off. Completing
// an entry writes the packets queued for it.
func (l *Link) learn(addr netip.Addr, mac [6]byte, create bool) {
	if mac[0]&1 != 0 || !l.onLink(addr) {
		return // a multicast MAC, or a host we cannot send to
	}
	l.nmu.Lock()
	e := l.neigh[addr]
	if e == nil {
		if create && len(l.neigh) < maxNeighbors {
			l.neigh[addr] = &neighbor{mac: mac, state: reachable}
		}
		l.nmu.Unlock()
		return
	}
	e.mac = mac
	if e.state != incomplete {
		l.nmu.Unlock()
		return
	}
	q := e.queue
	e.queue, e.queued = nil, 0
	e.state = flushing
	l.nmu.Unlock()
	for {
		for _, c := range q {
			ether.PutHeader(c, mac, l.mac, ether.TypeOf(c[ether.HeaderLen:]))
			if l.write(c) != nil {
				break // closed: the rest are lost with the link
			}
			l.stats.packetsOut.Add(1)
		}
		l.nmu.Lock()
		if len(e.queue) == 0 {
			e.state = reachable
			l.nmu.Unlock()
			return
		}
		q = e.queue
		e.queue, e.queued = nil, 0
		mac = e.mac
		l.nmu.Unlock()
	}
}

// solicit sends an ARP request or a neighbour solicitation for dst.
func (l *Link) solicit(dst netip.Addr) {
	src, ok := l.sourceFor(dst)
	if !ok {
		return
	}
	l.smu.Lock()
	var n int
	if dst.Is4() {
		n = putARP(l.sbuf[:], arpRequest, l.mac, src.As4(), [6]byte{}, dst.As4(), ether.Broadcast)
	} else {
		n = putNS(l.sbuf[:], l.mac, src.As16(), dst.As16())
	}
	err := l.write(l.sbuf[:n])
	l.smu.Unlock()
	if err == nil {
		l.stats.solicits.Add(1)
	}
}

// announce sends a gratuitous ARP request for each IPv4 address and an
// unsolicited neighbour advertisement for each IPv6 address, so hosts that
// knew another MAC address for them update it and the bridge learns ours.
func (l *Link) announce() {
	l.smu.Lock()
	defer l.smu.Unlock()
	for _, a := range l.v4 {
		n := putARP(l.sbuf[:], arpRequest, l.mac, a, [6]byte{}, a, ether.Broadcast)
		_ = l.write(l.sbuf[:n])
	}
	for _, a := range l.v6 {
		n := putNA(l.sbuf[:], l.mac, ether.IPv6AllNode, a, allNodes, a, naOverride)
		_ = l.write(l.sbuf[:n])
	}
}

// housekeep retries and expires resolutions, and reads the TAP when
// Receive has not been called for a while, so that ARP replies complete
// resolutions and hosts get answers even when nobody receives (the first
// packets of a device that has not started receiving, or a test that only
// sends).
func (l *Link) housekeep() {
	defer l.wg.Done()
	buf := make([]byte, link.BufferSize)
	t := time.NewTimer(idleTick)
	defer t.Stop()
	var retry []netip.Addr
	seen := l.rxEntries.Load()
	for {
		select {
		case <-l.done:
			return
		case <-l.kick:
		case <-t.C:
		}
		var pending bool
		retry, pending = l.expire(time.Now(), retry[:0])
		for _, a := range retry {
			l.solicit(a)
		}
		// Receive holds rmu while it waits; between calls it is free for
		// a moment, and the housekeeper only reads when Receive has not
		// been entered since its last look, so a busy Receive keeps the
		// zero-copy path to itself. A polled link it leaves alone (see
		// WaitReceive); polled is looked at again under rmu, which
		// WaitReceive takes after setting it.
		if calls := l.rxEntries.Load(); calls == seen && !l.polled.Load() && l.rmu.TryLock() {
			if !l.polled.Load() {
				l.drain(buf)
			}
			l.rmu.Unlock()
		} else {
			seen = calls
		}
		if pending {
			t.Reset(busyTick)
		} else {
			t.Reset(idleTick)
		}
	}
}

// expire appends to retry the incomplete entries due another solicitation,
// drops the queues of those out of attempts, and reports whether any
// resolution is still under way.
func (l *Link) expire(now time.Time, retry []netip.Addr) ([]netip.Addr, bool) {
	pending := false
	l.nmu.Lock()
	for a, e := range l.neigh {
		if e.state != incomplete {
			continue
		}
		if now.Before(e.next) {
			pending = true
			continue
		}
		if e.tries >= l.attempts {
			l.stats.dropNoNeighbor.Add(uint64(len(e.queue)))
			delete(l.neigh, a)
			continue
		}
		e.tries++
		e.next = now.Add(l.interval)
		retry = append(retry, a)
		pending = true
	}
	l.nmu.Unlock()
	return retry, pending
}

// drain handles the frames waiting in the TAP without blocking, keeping
// RoCE packets for Receive. The caller holds rmu.
func (l *Link) drain(buf []byte) {
	for range maxDrain {
		if len(l.stash) >= maxStash {
			return // leave the rest queued in the kernel
		}
		m, err := l.readFrame(buf, false)
		if err != nil {
			return
		}
		f := buf[vnetHdrLen:]
		if k := l.input(f, m); k > 0 {
			l.stash = append(l.stash, bytes.Clone(f[ether.HeaderLen:ether.HeaderLen+k]))
		}
	}
}

package xdp

import (
	"net/netip"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/internal/xsk"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/ether"
	"github.com/gorxe/gorxe/link/internal/pollfd"
)

// Send transmits packets: packet i is bufs[i][link.Headroom:]. A packet
// to a resolved next hop is copied, behind its Ethernet header, into UMEM
// frames on the TX ring; one to a hop still being resolved is held (see
// waiting). Dropped packets are counted, not errors.
func (l *Link) Send(bufs [][]byte) error { return l.send(bufs, false) }

// SendDeferred is Send that leaves the packets on the TX ring, unless it
// holds kickBatch descriptors, for the next Send or Flush to kick the
// kernel for (link.Deferrer): a device whose program busy polls pays one
// system call for all it sends between two polls.
func (l *Link) SendDeferred(bufs [][]byte) error { return l.send(bufs, true) }

func (l *Link) send(bufs [][]byte, deferred bool) error {
	l.rw.RLock()
	defer l.rw.RUnlock()
	if l.closed.Load() {
		return link.ErrClosed
	}
	l.txMu.Lock()
	defer l.txMu.Unlock()
	for _, b := range bufs {
		if len(b) < link.Headroom {
			l.stats.badFrame.Add(1)
			continue
		}
		pkt := b[link.Headroom:]
		dst, etherType, ok := ether.Destination(pkt)
		if !ok {
			l.stats.badFrame.Add(1)
			continue
		}
		if len(pkt) > l.mtu {
			l.stats.tooBig.Add(1)
			continue
		}
		mac := l.recentMAC
		if dst != l.recent {
			var found bool
			var err error
			mac, found, err = l.nextHop(dst)
			switch {
			case err != nil:
				l.stats.offLink.Add(1)
				continue
			case !found || l.pending[dst] != nil:
				// Unresolved; or resolved while earlier packets
				// still wait for the resolving goroutine: this one
				// goes behind them, so that none overtakes them
				// (an RC responder NAKs what comes out of order).
				l.hold(dst, pkt)
				continue
			}
			l.recent, l.recentMAC = dst, mac
		}
		l.put(mac, etherType, pkt)
		if l.mc.Has(dst) && l.loop.Put(pkt) {
			// A member host gets its own multicast, as the kernel loops
			// it back (IP_MULTICAST_LOOP); the device's receive path
			// takes it from the link.
			l.stats.looped.Add(1)
			pollfd.PostEventfd(l.loopFD)
		}
	}
	l.flush()
	if !deferred || l.tx.Pending() >= kickBatch {
		l.tx.Kick()
	}
	return nil
}

// kickBatch is how many descriptors SendDeferred leaves on the TX ring
// before it kicks anyway: enough to spread a system call's cost thin, and
// no more than the kernel sends in one (32 per call in copy mode), twice.
const kickBatch = 64

// Flush has the kernel send what SendDeferred left on the TX ring
// (link.Deferrer). It may run beside Send.
func (l *Link) Flush() error {
	l.rw.RLock()
	defer l.rw.RUnlock()
	if l.closed.Load() {
		return link.ErrClosed
	}
	return l.tx.Kick()
}

// put copies a packet behind its Ethernet header into TX frames and adds
// their descriptors to the batch flush sends. l.txMu must be held.
func (l *Link) put(mac [6]byte, etherType uint16, pkt []byte) {
	frameSize := int(l.umem.FrameSize())
	n := ether.HeaderLen + len(pkt)
	need := (n + frameSize - 1) / frameSize
	if need > 1 && !l.multi {
		l.stats.tooBig.Add(1)
		return
	}
	if !l.frames(need) {
		l.stats.noFrame.Add(1)
		return
	}
	first := len(l.txDescs)
	for off := 0; off < n; off += frameSize {
		addr, _ := l.txFree.Pop()
		f := l.umem.Frame(addr)
		k := min(frameSize, n-off)
		if off == 0 {
			ether.PutHeader(f, mac, l.mac, etherType)
			copy(f[ether.HeaderLen:k], pkt)
		} else {
			copy(f[:k], pkt[off-ether.HeaderLen:])
		}
		l.txDescs = append(l.txDescs, xsk.Desc{Addr: addr, Len: uint32(k), Options: xsk.OptionMore})
	}
	l.txDescs[len(l.txDescs)-1].Options = 0
	if len(l.txDescs)-first > 0 && len(l.txDescs) >= txFrames/2 {
		l.flush()
	}
}

// frames makes sure n TX frames are free, taking back the ones the kernel
// has sent, and flushing and kicking while it has not: false if none
// came back for a while (a link that cannot send).
func (l *Link) frames(n int) bool {
	if l.txFree.Len() >= n {
		return true
	}
	l.flush()
	deadline := time.Time{}
	for {
		l.tx.CompleteTo(l.txFree)
		if l.txFree.Len() >= n {
			return true
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(100 * time.Millisecond)
		} else if time.Now().After(deadline) {
			return false
		}
		l.tx.Kick()
		runtime.Gosched()
	}
}

// flush puts the batch's descriptors on the TX ring, waiting for room
// while the kernel sends. l.txMu must be held.
func (l *Link) flush() {
	for len(l.txDescs) > 0 {
		n, err := l.tx.Enqueue(l.txDescs)
		l.txDescs = l.txDescs[:copy(l.txDescs, l.txDescs[n:])]
		if err != nil {
			// The socket is gone: what was not put is lost, its
			// frames with it.
			l.txDescs = l.txDescs[:0]
			return
		}
		if len(l.txDescs) > 0 {
			l.tx.CompleteTo(l.txFree)
			runtime.Gosched()
		}
	}
	l.tx.Reap(l.txFree)
}

// hold keeps a copy of pkt until dst's next hop is resolved, and wakes
// the resolving goroutine. l.txMu must be held.
func (l *Link) hold(dst netip.Addr, pkt []byte) {
	w := l.pending[dst]
	if w == nil {
		w = &waiting{since: time.Now()}
		l.pending[dst] = w
	}
	if w.bytes+len(pkt) > maxWaitingBytes {
		l.stats.queueFull.Add(1)
		return
	}
	w.pkts = append(w.pkts, append(make([]byte, ether.HeaderLen, ether.HeaderLen+len(pkt)), pkt...))
	w.bytes += len(pkt)
	l.stats.queued.Add(1)
	select {
	case l.resolve <- struct{}{}:
	default:
	}
}

// resolving sends the held packets as their next hops resolve, and drops
// them after resolveTimeout or when the hop fails.
func (l *Link) resolving() {
	defer l.wg.Done()
	t := time.NewTicker(neighRetry)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-l.resolve:
			l.txMu.Lock()
		case <-t.C:
			l.txMu.Lock()
			l.recent = netip.Addr{}
		}
		for dst, w := range l.pending {
			mac, ok, err := l.res.Lookup(dst)
			if err == nil && !ok && time.Since(w.since) < resolveTimeout {
				continue
			}
			delete(l.pending, dst)
			if !ok {
				l.stats.noNeighbor.Add(uint64(len(w.pkts)))
				continue
			}
			_, etherType, _ := ether.Destination(w.pkts[0][ether.HeaderLen:])
			for _, p := range w.pkts {
				l.put(mac, etherType, p[ether.HeaderLen:])
			}
		}
		l.flush()
		l.tx.Kick()
		l.txMu.Unlock()
	}
}

var _ link.Resolver = (*Link)(nil)

// Resolve has the kernel resolve dst's next hop when its neighbour table
// has no usable entry for it, and returns without waiting for the
// answer (link.Resolver): a QP's first burst then finds the hop known
// rather than held. Multicast groups, the link's own addresses and
// destinations routed elsewhere are left alone.
func (l *Link) Resolve(dst netip.Addr) {
	l.rw.RLock()
	defer l.rw.RUnlock()
	if !l.closed.Load() {
		l.nextHop(dst) // a missing route shows when a packet is sent
	}
}

// neighRetry is how often held packets' hops are looked up again.
const neighRetry = 5 * time.Millisecond

// Receive blocks until at least one RoCE packet for the link arrives, then
// returns it and the others already waiting, up to len(bufs).
func (l *Link) Receive(bufs [][]byte, sizes []int) (int, error) {
	for {
		n, err := l.TryReceive(bufs, sizes)
		if n > 0 || err != nil || len(bufs) == 0 {
			return n, err
		}
		if err := l.WaitReceive(); err != nil {
			return 0, err
		}
	}
}

// TryReceive copies up to len(bufs) received packets' IP packets to
// bufs[i][link.Headroom:], sets sizes[i] and returns how many, without
// waiting. Frames that are not for one of the link's addresses are
// dropped and counted, as the kernel would.
func (l *Link) TryReceive(bufs [][]byte, sizes []int) (int, error) {
	l.rw.RLock()
	defer l.rw.RUnlock()
	if l.closed.Load() {
		return 0, link.ErrClosed
	}
	want := min(len(bufs), len(sizes))
	got := l.takeLooped(bufs[:want], sizes[:want])
	for i := 0; i < len(l.queues) && got < want; i++ {
		q := l.queues[(l.next+i)%len(l.queues)]
		got += l.receiveFrom(q, bufs[got:want], sizes[got:want])
	}
	l.next++
	return got, nil
}

// takeLooped takes the packets the link looped back. Once none is left
// it reads loopFD unreadable again: a Put after that sets Pending before
// it writes loopFD, and wait checks Pending before it polls, so no packet
// waits unseen.
func (l *Link) takeLooped(bufs [][]byte, sizes []int) int {
	if !l.loop.Pending() {
		return 0
	}
	n := l.loop.Take(bufs, sizes)
	if !l.loop.Pending() {
		pollfd.TakeEventfd(l.loopFD)
	}
	return n
}

// receiveFrom takes up to len(bufs) packets off q's RX ring, and gives
// their frames back to its fill ring. A packet may take several
// descriptors, so a batch taken off the ring may hold more packets than
// bufs: the rest wait in q.held for the next call.
func (l *Link) receiveFrom(q *queue, bufs [][]byte, sizes []int) int {
	if len(q.held) == 0 {
		descs := l.rxDescs[:min(len(l.rxDescs), len(bufs)*l.fragsPerPacket())]
		n, err := q.sock.Receive(descs)
		if err != nil || n == 0 {
			return 0
		}
		q.held = append(q.held, descs[:n]...)
	}
	got, i := 0, 0
	for i < len(q.held) && got < len(bufs) {
		j := i + 1 // the packet is q.held[i:j]
		for j < len(q.held) && q.held[j-1].More() {
			j++
		}
		if size := l.gather(q.held[i:j], bufs[got]); size > 0 {
			sizes[got] = size
			got++
		}
		for _, d := range q.held[i:j] {
			q.frames.Push(d.Addr)
		}
		i = j
	}
	q.held = q.held[:copy(q.held, q.held[i:])]
	q.holding.Store(len(q.held) > 0)
	q.sock.FillFrom(q.frames, q.frames.Len())
	return got
}

// fragsPerPacket is how many descriptors a received packet may take.
func (l *Link) fragsPerPacket() int {
	if l.multi {
		return xsk.MaxFrags
	}
	return 1
}

// nextHop returns the Ethernet address to send a packet to dst with: a
// multicast group's own, or the resolver's (which, when found is false,
// has asked the kernel to resolve it).
func (l *Link) nextHop(dst netip.Addr) (mac [6]byte, found bool, err error) {
	if mac, ok := ether.MulticastMAC(dst); ok {
		return mac, true, nil
	}
	return l.res.Lookup(dst)
}

// gather copies the IP packet of the frame in descs to buf[link.Headroom:]
// and returns its length, or 0 if the frame is not a RoCE packet for one
// of the link's addresses or the multicast groups it joined.
func (l *Link) gather(descs []xsk.Desc, buf []byte) int {
	first := l.umem.Bytes(descs[0])
	off, etherType, ok := ether.Payload(first)
	if !ok || off > len(first) {
		l.stats.badFrame.Add(1)
		return 0
	}
	group := false // to a multicast MAC: to one of the groups joined, or to drop
	if dst := [6]byte(first[0:6]); dst != l.mac {
		if !ether.IsMulticast(dst) {
			l.stats.notForUs.Add(1)
			return 0
		}
		group = true
	}
	ip := first[off:]
	var dst netip.Addr
	switch {
	case etherType == ether.TypeIPv4 && len(ip) >= 20:
		dst = netip.AddrFrom4([4]byte(ip[16:20]))
	case etherType == ether.TypeIPv6 && len(ip) >= 40:
		dst = netip.AddrFrom16([16]byte(ip[24:40])).Unmap()
	default:
		l.stats.badFrame.Add(1)
		return 0
	}
	if group && !l.mc.Has(dst) || !group && !slices.Contains(l.addrs, dst) {
		l.stats.notForUs.Add(1)
		return 0
	}
	out := buf[link.Headroom:]
	n := copy(out, ip)
	for _, d := range descs[1:] {
		if n == len(out) {
			l.stats.tooBig.Add(1)
			return 0
		}
		n += copy(out[n:], l.umem.Bytes(d))
	}
	return n
}

// WaitReceive blocks until a packet may be waiting on any queue, or the
// link closes.
func (l *Link) WaitReceive() error {
	_, err := l.wait(-1, false)
	return err
}

// WaitReceiveFor is WaitReceive that gives up after timeout (rounded up
// to a millisecond), and reports whether a packet may be waiting.
func (l *Link) WaitReceiveFor(timeout time.Duration) (bool, error) {
	return l.wait(int((timeout+time.Millisecond-1)/time.Millisecond), true)
}

// wait polls every queue's socket and the close and loop eventfds, and
// the wake eventfd if wakeable (WakeReceive's, for WaitReceiveFor only),
// outside the Go runtime's poller, for at most ms milliseconds (forever if
// negative).
func (l *Link) wait(ms int, wakeable bool) (bool, error) {
	l.rw.RLock()
	defer l.rw.RUnlock()
	if l.closed.Load() {
		return false, link.ErrClosed
	}
	var buf [19]unix.PollFd // a queue each, and the eventfds: on the stack up to 16 queues
	fds := buf[:0]
	for _, q := range l.queues {
		if q.holding.Load() {
			return true, nil // taken off the ring already
		}
	}
	if l.loop.Pending() {
		return true, nil
	}
	for _, q := range l.queues {
		fds = append(fds, unix.PollFd{Fd: int32(q.sock.FD()), Events: unix.POLLIN})
	}
	fds = append(fds, unix.PollFd{Fd: int32(l.closeFD), Events: unix.POLLIN}, unix.PollFd{Fd: int32(l.loopFD), Events: unix.POLLIN})
	if wakeable {
		fds = append(fds, unix.PollFd{Fd: int32(l.wakeFD), Events: unix.POLLIN})
	}
	for {
		n, err := unix.Poll(fds, ms)
		if err == unix.EINTR {
			continue
		}
		if l.closed.Load() {
			return false, link.ErrClosed
		}
		if err != nil {
			return false, err
		}
		if wakeable && fds[len(fds)-1].Revents != 0 {
			pollfd.TakeEventfd(l.wakeFD) // the wake is seen
		}
		return n > 0, nil
	}
}

// WakeReceive ends a WaitReceiveFor (link.TimedPoller).
func (l *Link) WakeReceive() {
	l.rw.RLock()
	defer l.rw.RUnlock()
	if l.closed.Load() {
		return
	}
	pollfd.PostEventfd(l.wakeFD)
}

// Counters returns the link's counters (link.Counterer): the sockets'
// (summed over queues), the XDP program's, and the link's own.
func (l *Link) Counters() []link.Counter {
	var out []link.Counter
	if l.closed.Load() {
		return out
	}
	var st xsk.Stats
	for _, q := range l.queues {
		if s, err := q.sock.Stats(); err == nil {
			st.Add(s)
		}
	}
	for _, c := range st.Named() {
		out = append(out, link.Counter{Name: c.Name, Value: c.Value})
	}
	if ps, err := l.prog.Stats(); err == nil {
		out = append(out,
			link.Counter{Name: "xdp_redirected", Value: ps.Redirected},
			link.Counter{Name: "xdp_passed_no_socket", Value: ps.PassedNoSocket},
			link.Counter{Name: "xdp_passed", Value: ps.Passed},
			link.Counter{Name: "xdp_passed_malformed", Value: ps.PassedMalformed})
	}
	if d, err := l.ifRxDropped(); err == nil {
		// Since the program was attached; a counter reset under it
		// (the interface recreated) reads as none.
		out = append(out, link.Counter{Name: "if_rx_dropped", Value: d - min(d, l.rxDropped0)})
	}
	s := &l.stats
	return append(out,
		link.Counter{Name: "xdp_drop_not_for_us", Value: s.notForUs.Load()},
		link.Counter{Name: "xdp_drop_bad_frame", Value: s.badFrame.Load()},
		link.Counter{Name: "xdp_drop_too_big", Value: s.tooBig.Load()},
		link.Counter{Name: "xdp_drop_no_route", Value: s.offLink.Load()},
		link.Counter{Name: "xdp_drop_no_neighbor", Value: s.noNeighbor.Load()},
		link.Counter{Name: "xdp_drop_queue_full", Value: s.queueFull.Load()},
		link.Counter{Name: "xdp_drop_no_tx_frame", Value: s.noFrame.Load()},
		link.Counter{Name: "xdp_queued_for_neighbor", Value: s.queued.Load()},
		link.Counter{Name: "xdp_looped", Value: s.looped.Load()},
		link.Counter{Name: "xdp_drop_loop_full", Value: l.loop.Dropped()})
}

// LineRate returns the interface's speed as its driver reports it
// (link.LineRater), the rate DCQCN starts each flow at; 0 when the driver
// does not know it.
func (l *Link) LineRate() uint64 { return l.rate }

// Queues returns the receive queues the link has a socket on, and the
// packets each has received.
func (l *Link) Queues() (ids []int, received []uint64) {
	for _, q := range l.queues {
		ids = append(ids, q.id)
		var n uint64
		if st, err := q.sock.Stats(); err == nil {
			n = st.RxPackets
		}
		received = append(received, n)
	}
	return ids, received
}

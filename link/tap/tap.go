//go:build linux

// Package tap is a link that makes gorxe a whole host on a Linux TAP
// device, as a virtual machine is behind its TAP: gorxe has its own MAC
// address and IP addresses, the kernel side of the TAP has none, and the
// TAP is usually a port of a bridge that leads to the other hosts.
//
// Being a host, the link answers for its addresses on the wire: ARP for
// IPv4 (RFC 826), neighbour discovery for IPv6 (RFC 4861), and ICMP and
// ICMPv6 echo (RFC 792, RFC 4443), so ping reaches it. It resolves the MAC
// address of every destination it sends to, queueing packets while it
// does. Only UDP packets to the RoCE port and one of the link's own
// unicast addresses reach Receive; everything else is answered, learned
// from or dropped and counted inside the link.
//
// The link sends only to hosts on its own subnets (the prefixes of
// Config.Addrs): there is no default gateway, so a packet for any other
// destination is dropped and counted as DropOffLink.
//
// The RoCE path copies nothing: Send writes the Ethernet header into the
// headroom in front of each packet and writes the frame, and Receive reads
// each frame so that its IP packet lands at link.Headroom. A TAP moves one
// frame per read or write system call; Send writes a run of packets to
// one peer as one frame, which the kernel cuts, and such a frame from a
// peer comes up whole, for Receive to cut (gso.go).
package tap

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/ether"
	"github.com/gorxe/gorxe/link/internal/groups"
	"github.com/gorxe/gorxe/link/internal/pollfd"
	"github.com/gorxe/gorxe/wire"
)

// Defaults for the zero fields of Config.
const (
	DefaultMTU             = 1500
	DefaultQueueBytes      = 212992 // Linux's default unres_qlen_bytes
	DefaultResolveInterval = time.Second
	DefaultResolveAttempts = 3
	DefaultTxQueueLen      = 8192
)

// Errors returned by Open.
var (
	ErrAddr = errors.New("tap: invalid address")
	ErrMAC  = errors.New("tap: MAC address must be 6-byte unicast")
	ErrMTU  = errors.New("tap: MTU out of range")
)

// Config describes a TAP link.
type Config struct {
	// Name is the TAP interface's name; empty lets the kernel pick one
	// (tap0, tap1, ...).
	Name string

	// MAC is gorxe's Ethernet address on the wire, not the TAP's kernel
	// side. Nil picks a random locally administered unicast address.
	MAC net.HardwareAddr

	// Addrs are gorxe's addresses with their prefix lengths, IPv4 and/or
	// IPv6, such as 10.9.0.5/24 and fd00::5/64. The prefixes are the
	// subnets the link can reach.
	Addrs []netip.Prefix

	// LinkLocal adds the address a Linux interface makes from its MAC
	// address (link.LinkLocal: fe80::/64 and the EUI-64 of MAC), first
	// among Addrs as the kernel's RDMA core puts it first in a RoCE
	// port's GID table, so that GID indexes mean what they mean on rxe.
	// It is not added when already among Addrs, nor below an MTU of
	// 1280, where Linux gives an interface no IPv6.
	LinkLocal bool

	// Bridge, if not empty, is an existing bridge the TAP is attached to.
	Bridge string

	// MTU is the largest IP packet, 0 meaning DefaultMTU; at most
	// link.MaxPacket (9000, jumbo frames).
	MTU int

	// Port is the UDP port RoCE packets arrive on; 0 means 4791.
	Port uint16

	// QueueBytes bounds, per destination, the bytes of packets queued
	// while its address is resolved; 0 means DefaultQueueBytes. Like
	// Linux it counts bytes rather than packets, so a first burst of
	// small packets (an RC send window, or the conformance suite's
	// eight batches) waits for the reply instead of being dropped.
	QueueBytes int

	// ResolveInterval is the time between ARP requests or neighbour
	// solicitations for one address, and ResolveAttempts how many are
	// sent before its queued packets are dropped; zero means
	// DefaultResolveInterval and DefaultResolveAttempts (as Linux's
	// retrans_time and mcast_solicit).
	ResolveInterval time.Duration
	ResolveAttempts int

	// TxQueueLen is the TAP's transmit queue length: how many frames the
	// kernel holds for gorxe to read before it drops; 0 means
	// DefaultTxQueueLen.
	TxQueueLen int
}

// Link is gorxe's host on a TAP device. It implements link.Link,
// link.Poller and link.Multicaster.
type Link struct {
	file  *pollfd.FD
	name  string
	mac   [6]byte
	mtu   int
	port  uint16
	addrs []netip.Addr   // own addresses, for Addrs
	nets  []netip.Prefix // own addresses with prefix lengths: the reachable subnets
	v4    [][4]byte      // own IPv4 addresses, for matching on receive
	v6    [][16]byte     // own IPv6 addresses

	queueBytes int
	interval   time.Duration
	attempts   int

	closed    atomic.Bool
	closeOnce sync.Once
	done      chan struct{}
	kick      chan struct{}
	wg        sync.WaitGroup

	// rmu is held by whoever reads the TAP: Receive (or TryReceive), or
	// the housekeeper when Receive has not been called for a while. stash
	// belongs to its holder.
	rmu       sync.Mutex
	stash     [][]byte // RoCE packets the housekeeper read, for Receive
	spill     []byte   // the rest of a frame longer than a buffer; nil without the offload (gso.go)
	cut       gsoCut   // a frame handed over whole, being cut into packets
	rxEntries atomic.Uint64
	polled    atomic.Bool // the device receives through link.Poller

	// nl reads the TAP's own statistics (readQueueDrops) in the
	// namespace the link was opened in; nlmu guards it against Close.
	nlmu    sync.Mutex
	nl      *netlink.Handle
	ifindex int
	drops0  uint64 // tx_dropped at Open: a persistent TAP's earlier drops

	nmu   sync.RWMutex
	neigh map[netip.Addr]*neighbor

	smu  sync.Mutex // guards sbuf, where solicitations are built
	sbuf [128]byte

	noGSO atomic.Bool // the kernel refused a run written as one frame (gso.go)

	mc    groups.Set      // the multicast groups joined (mcast.go)
	loop  groups.Loopback // what it sent to them, for its own Receive
	stats stats
}

var (
	_ link.Link        = (*Link)(nil)
	_ link.Poller      = (*Link)(nil)
	_ link.TimedPoller = (*Link)(nil)
)

// Open creates the TAP device, configures and brings it up, attaches it to
// the bridge, and announces the link's addresses with gratuitous ARP and
// unsolicited neighbour advertisements. Creating a TAP needs CAP_NET_ADMIN.
func Open(c Config) (*Link, error) {
	l := &Link{
		mtu:        c.MTU,
		port:       c.Port,
		queueBytes: c.QueueBytes,
		interval:   c.ResolveInterval,
		attempts:   c.ResolveAttempts,
		done:       make(chan struct{}),
		kick:       make(chan struct{}, 1),
		neigh:      make(map[netip.Addr]*neighbor),
	}
	if l.mtu == 0 {
		l.mtu = DefaultMTU
	}
	if l.port == 0 {
		l.port = wire.UDPPort
	}
	if l.queueBytes == 0 {
		l.queueBytes = DefaultQueueBytes
	}
	if l.interval <= 0 {
		l.interval = DefaultResolveInterval
	}
	if l.attempts <= 0 {
		l.attempts = DefaultResolveAttempts
	}
	txq := c.TxQueueLen
	if txq <= 0 {
		txq = DefaultTxQueueLen
	}
	switch {
	case c.MAC == nil:
		if _, err := rand.Read(l.mac[:]); err != nil {
			return nil, err
		}
		l.mac[0] = l.mac[0]&^1 | 2 // unicast, locally administered
	case len(c.MAC) != 6 || c.MAC[0]&1 != 0:
		return nil, fmt.Errorf("%w: %v", ErrMAC, c.MAC)
	default:
		copy(l.mac[:], c.MAC)
	}
	addrs := c.Addrs
	if ll := link.LinkLocal(l.mac[:]); c.LinkLocal && l.mtu >= 1280 && !slices.ContainsFunc(addrs, func(p netip.Prefix) bool { return p.Addr() == ll }) {
		addrs = append([]netip.Prefix{netip.PrefixFrom(ll, 64)}, addrs...)
	}
	if l.mtu < 1280 && hasV6(addrs) || l.mtu < 576 || l.mtu > link.MaxPacket {
		return nil, fmt.Errorf("%w: %d", ErrMTU, c.MTU)
	}
	for _, p := range addrs {
		a := p.Addr().Unmap()
		if !p.IsValid() || !a.IsGlobalUnicast() && !a.IsLinkLocalUnicast() {
			return nil, fmt.Errorf("%w: %v", ErrAddr, p)
		}
		l.addrs = append(l.addrs, a)
		l.nets = append(l.nets, netip.PrefixFrom(a, p.Bits()))
		if a.Is4() {
			l.v4 = append(l.v4, a.As4())
		} else {
			l.v6 = append(l.v6, a.As16())
		}
	}
	f, name, whole, err := openTAP(c.Name)
	if err != nil {
		return nil, err
	}
	if whole {
		l.spill = make([]byte, 2*link.BufferSize+maxWhole)
	}
	if err := configure(name, l.mtu, txq, c.Bridge); err != nil {
		f.Close()
		return nil, err
	}
	if l.nl, l.ifindex, err = statsHandle(name); err != nil {
		f.Close()
		return nil, err
	}
	l.drops0, _ = l.txDropped()
	l.file, l.name = f, name
	l.announce()
	l.wg.Add(1)
	go l.housekeep()
	return l, nil
}

func hasV6(ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Addr().Unmap().Is6() {
			return true
		}
	}
	return false
}

// Name returns the TAP interface's name.
func (l *Link) Name() string { return l.name }

// MAC returns gorxe's Ethernet address on the link.
func (l *Link) MAC() net.HardwareAddr { return net.HardwareAddr(bytes.Clone(l.mac[:])) }

// Addrs returns the link's own IP addresses.
func (l *Link) Addrs() []netip.Addr { return append([]netip.Addr(nil), l.addrs...) }

// MTU returns the largest IP packet the link carries.
func (l *Link) MTU() int { return l.mtu }

// Flags returns 0: a TAP shows the whole IP header, so the device can
// check the ICRC of IPv4 packets as well as IPv6.
func (l *Link) Flags() link.Flags { return 0 }

// Close stops the link, wakes a blocked Receive and deletes the TAP
// device, which the kernel does when its last file descriptor closes. No
// goroutine of the link outlives Close.
func (l *Link) Close() error {
	err := link.ErrClosed
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		close(l.done)
		l.nlmu.Lock()
		l.readQueueDrops() // Stats keeps counting after Close
		l.nl.Close()
		l.nl = nil
		l.nlmu.Unlock()
		err = l.file.Close() // waits for reads and writes in progress to return
		l.wg.Wait()
	})
	return err
}

// Send transmits packets: packet i is bufs[i][link.Headroom:]. A packet to
// a resolved neighbour goes out at once, its Ethernet header written into
// the headroom; one to an address still being resolved is copied into
// that address's queue. Dropped packets are counted, not errors.
func (l *Link) Send(bufs [][]byte) error { return l.send(bufs, gsoMinSegment) }

// SendJoined is Send that joins runs of packets of any length into one
// frame (link.Joiner): a short answer and the ACK behind it.
func (l *Link) SendJoined(bufs [][]byte) error { return l.send(bufs, 0) }

// send is Send whose runs are of packets of at least minRun bytes.
func (l *Link) send(bufs [][]byte, minRun int) error {
	if l.closed.Load() {
		return link.ErrClosed
	}
	// Consecutive packets of a batch mostly go to one destination; a
	// resolved neighbour's entry never goes back to unresolved, so its MAC
	// address can be reused for the rest of the batch.
	var last netip.Addr
	var lastMAC [6]byte
	// Runs of packets to one peer go out as one frame each (gso.go); a
	// batch of one is a frame alone.
	var r *gsoRun
	if len(bufs) > 1 {
		r = runPool.Get().(*gsoRun)
		r.minRun = minRun
		defer runPool.Put(r)
	}
	for _, b := range bufs {
		if len(b) < link.Headroom {
			l.stats.dropBadFrame.Add(1)
			continue
		}
		pkt := b[link.Headroom:]
		dst, etherType, ok := ether.Destination(pkt)
		if !ok {
			l.stats.dropBadFrame.Add(1)
			continue
		}
		if len(pkt) > l.mtu {
			l.stats.dropTooBig.Add(1)
			continue
		}
		mac := lastMAC
		if dst != last {
			if g, ok := ether.MulticastMAC(dst); ok {
				// A group's frames go to its own MAC address: nothing to
				// resolve, and no subnet to be on.
				mac = g
			} else {
				if !l.onLink(dst) {
					l.stats.dropOffLink.Add(1)
					continue
				}
				var found bool
				if mac, found = l.lookup(dst); !found {
					if err := l.flush(r); err != nil {
						return err
					}
					if err := l.enqueue(dst, pkt); err != nil {
						return err
					}
					continue
				}
			}
			last, lastMAC = dst, mac
		}
		// The frame, with room for its virtio-net header in front.
		vf := b[link.Headroom-ether.HeaderLen-vnetHdrLen:]
		ether.PutHeader(vf[vnetHdrLen:], mac, l.mac, etherType)
		l.stats.packetsOut.Add(1)
		group := l.mc.Has(dst)
		if r != nil && !group {
			if !r.join(vf) {
				if err := l.flush(r); err != nil {
					return err
				}
				r.start(vf)
			}
			continue
		}
		if err := l.flush(r); err != nil {
			return err
		}
		if err := l.writeAlone(vf); err != nil {
			return err
		}
		if group && l.loop.Put(pkt) {
			// A member host gets its own multicast, as the kernel loops
			// it back (IP_MULTICAST_LOOP).
			l.stats.looped.Add(1)
			l.file.Kick()
		}
	}
	return l.flush(r)
}

// onLink reports whether dst is on one of the link's subnets.
func (l *Link) onLink(dst netip.Addr) bool {
	_, ok := l.sourceFor(dst)
	return ok
}

// sourceFor returns the link's own address on dst's subnet.
func (l *Link) sourceFor(dst netip.Addr) (netip.Addr, bool) {
	for _, p := range l.nets {
		if p.Contains(dst) {
			return p.Addr(), true
		}
	}
	return netip.Addr{}, false
}

// write writes one Ethernet frame to the TAP, behind a virtio-net header
// that asks for nothing, waiting for room if the kernel has none.
func (l *Link) write(frame []byte) error {
	iov := [2]unix.Iovec{}
	pollfd.SetIovec(&iov[0], noOffload[:])
	pollfd.SetIovec(&iov[1], frame)
	return l.writeFrame(iov[:])
}

// writeAlone is write of the frame at vf[vnetHdrLen:], its virtio-net
// header written in front of it, in one buffer.
func (l *Link) writeAlone(vf []byte) error {
	clear(vf[:vnetHdrLen])
	iov := [1]unix.Iovec{}
	pollfd.SetIovec(&iov[0], vf)
	return l.writeFrame(iov[:])
}

// writeFrame writes the frame iov describes, its virtio-net header
// first, and counts it.
func (l *Link) writeFrame(iov []unix.Iovec) error {
	err := l.writev(iov)
	if err == unix.EINVAL {
		// Refused, as a frame too big for the TAP: the wire lost it.
		l.stats.writeErrors.Add(1)
		return nil
	}
	if err == nil {
		l.stats.framesOut.Add(1)
	}
	return err
}

// writev writes the frame iov describes, its virtio-net header first,
// waiting for room if the kernel has none. It returns link.ErrClosed once
// the link is closed, and unix.EINVAL if the kernel refused the frame; a
// frame lost otherwise (the kernel out of memory) is counted and not an
// error.
func (l *Link) writev(iov []unix.Iovec) error {
	_, err := l.file.Writev(iov)
	for err == unix.EAGAIN {
		if err = l.file.Wait(unix.POLLOUT); err == nil {
			_, err = l.file.Writev(iov)
		}
	}
	switch {
	case err == nil, err == unix.EINVAL:
		return err
	case l.closed.Load() || errors.Is(err, link.ErrClosed):
		return link.ErrClosed
	}
	l.stats.writeErrors.Add(1)
	return nil
}

// Receive blocks until at least one RoCE packet for the link arrives, then
// returns it and the others already waiting, up to len(bufs). Each frame
// is read so that its IP packet lands at bufs[i][link.Headroom:]. ARP,
// neighbour discovery and echo requests are answered on the way and never
// returned.
func (l *Link) Receive(bufs [][]byte, sizes []int) (int, error) {
	return l.receive(bufs, sizes, true)
}

// TryReceive is Receive without the wait: it returns 0 at once when no
// RoCE packet is waiting, having handled whatever other frames were. It
// implements link.Poller.
func (l *Link) TryReceive(bufs [][]byte, sizes []int) (int, error) {
	l.polled.Store(true)
	return l.receive(bufs, sizes, false)
}

// WaitReceive blocks until a frame is waiting in the TAP, without reading
// it, or the link is closed. The frame may turn out not to be a RoCE
// packet (an ARP request, a ping), so TryReceive after it may return 0. It
// implements link.Poller.
//
// Once the link is polled the housekeeper stops reading the TAP: a frame
// it read would wait in the stash, where no readiness of the TAP's file
// announces it. A stash it filled before is reported here.
func (l *Link) WaitReceive() error {
	_, err := l.waitReceive(-1, false)
	return err
}

// WaitReceiveFor is WaitReceive that gives up after timeout. It
// implements link.TimedPoller.
func (l *Link) WaitReceiveFor(timeout time.Duration) (bool, error) {
	return l.waitReceive(int((timeout+time.Millisecond-1)/time.Millisecond), true)
}

// WakeReceive ends a WaitReceiveFor (link.TimedPoller).
func (l *Link) WakeReceive() { l.file.Wake() }

func (l *Link) waitReceive(timeoutMS int, wakeable bool) (bool, error) {
	l.polled.Store(true)
	l.rmu.Lock()
	stashed := len(l.stash) > 0 || l.cut.left()
	l.rmu.Unlock()
	if l.closed.Load() {
		return false, link.ErrClosed
	}
	if stashed || l.loop.Pending() {
		return true, nil
	}
	var ready bool
	var err error
	if wakeable {
		ready, err = l.file.WaitWakeable(nil, timeoutMS)
	} else {
		ready, err = l.file.WaitFor(unix.POLLIN, timeoutMS)
	}
	if err != nil {
		if l.closed.Load() || errors.Is(err, link.ErrClosed) {
			return false, link.ErrClosed
		}
		return false, fmt.Errorf("tap: wait %s: %w", l.name, err)
	}
	return ready, nil
}

// receive reads the RoCE packets waiting, after any the housekeeper
// stashed. Blocking, it waits for the first one.
func (l *Link) receive(bufs [][]byte, sizes []int, block bool) (int, error) {
	l.rxEntries.Add(1)
	l.rmu.Lock()
	defer l.rmu.Unlock()
	if l.closed.Load() {
		return 0, link.ErrClosed
	}
	n := 0
	for n < len(bufs) && len(l.stash) > 0 {
		sizes[n] = copy(bufs[n][link.Headroom:], l.stash[0])
		l.stash[0] = nil
		l.stash = l.stash[1:]
		n++
		l.stats.packetsIn.Add(1)
	}
	if len(l.stash) == 0 {
		l.stash = nil
	}
	for n < len(bufs) {
		if k := l.loop.Take(bufs[n:], sizes[n:]); k > 0 {
			n += k
			l.stats.packetsIn.Add(uint64(k))
			continue
		}
		// Only the first packet is waited for; after it, what is
		// already queued in the kernel is taken without blocking.
		vf := bufs[n][link.Headroom-ether.HeaderLen-vnetHdrLen:]
		m, err := l.readFrame(vf, block && n == 0)
		if err == errLooped {
			continue // a packet looped back while it waited
		}
		if err == unix.EAGAIN {
			break
		}
		if err != nil {
			if n > 0 {
				break // the next call reports it
			}
			if l.closed.Load() || errors.Is(err, link.ErrClosed) {
				return 0, link.ErrClosed
			}
			return 0, fmt.Errorf("tap: read %s: %w", l.name, err)
		}
		if k := l.input(vf[vnetHdrLen:], m); k > 0 {
			sizes[n] = k
			n++
			l.stats.packetsIn.Add(1)
		}
	}
	return n, nil
}

// errLooped says that read, waiting, found a looped-back packet queued.
var errLooped = errors.New("a looped-back packet is waiting")

// read reads one frame into buf[vnetHdrLen:], its virtio-net header into
// buf[:vnetHdrLen], and returns the frame's length: the part beyond buf
// is in spill. If block is false and no frame is
// waiting it returns unix.EAGAIN; blocking, it returns errLooped when a
// packet the link sent to a group it is in waits (Send kicks the wait).
// The caller holds rmu.
func (l *Link) read(buf []byte, block bool) (int, error) {
	// A frame longer than buf, one the kernel hands over whole
	// (gso.go), continues in spill.
	iov := [2]unix.Iovec{}
	pollfd.SetIovec(&iov[0], buf)
	niov := 1
	if l.spill != nil {
		pollfd.SetIovec(&iov[1], l.spill[len(l.spill)-maxWhole:])
		niov = 2
	}
	for {
		n, err := l.file.Readv(iov[:niov])
		if err == nil {
			return max(n-vnetHdrLen, 0), nil
		}
		if err != unix.EAGAIN || !block {
			return 0, err
		}
		if l.loop.Pending() {
			return 0, errLooped
		}
		if err := l.file.Wait(unix.POLLIN); err != nil {
			return 0, err
		}
	}
}

// Stats are the link's counters.
type Stats struct {
	FramesIn   uint64 // Ethernet frames read from the TAP
	FramesOut  uint64 // Ethernet frames written to the TAP
	PacketsIn  uint64 // RoCE packets returned by Receive
	PacketsOut uint64 // RoCE packets written, at once or after resolution

	ARP      uint64 // ARP packets handled: requests answered, replies learned
	NDP      uint64 // neighbour solicitations answered, advertisements learned
	ICMP     uint64 // ICMP and ICMPv6 echo requests answered
	Solicits uint64 // ARP requests and neighbour solicitations sent
	Queued   uint64 // packets queued while their destination was resolved
	IGMP     uint64 // IGMP membership reports and leaves sent
	Looped   uint64 // packets sent to a group the link is in, looped back to Receive

	DropNotRoCE    uint64 // for this host, but not UDP to the RoCE port nor handled
	DropNotForUs   uint64 // for another MAC or IP address, or broadcast/multicast IP
	DropNoNeighbor uint64 // queued for an address that never answered
	DropQueueFull  uint64 // the destination's resolution queue was full
	DropOffLink    uint64 // sent to an address outside the link's subnets
	DropBadFrame   uint64 // truncated, malformed, bad checksum, VLAN-tagged or fragmented
	DropTooBig     uint64 // sent packet larger than the MTU
	WriteErrors    uint64 // frames the kernel refused
	GSOWrites      uint64 // runs of packets written as one frame, for the kernel to cut (counted in FramesOut as the frames it cuts)
	GSOReads       uint64 // frames handed over whole, cut by the link (counted in FramesIn as the packets cut)
	DropLoopFull   uint64 // looped-back packets dropped: MaxLooped waited already

	// QueueDrops are the frames the kernel dropped at the TAP's queue
	// (Config.TxQueueLen) because the link read too slowly: the TAP's
	// tx_dropped, as the kernel sends towards gorxe. RC resends what
	// they held; UC and UD lose it.
	QueueDrops uint64
}

type stats struct {
	framesIn, framesOut, packetsIn, packetsOut                            atomic.Uint64
	arp, ndp, icmp, solicits, queued, igmp, looped                        atomic.Uint64
	dropNotRoCE, dropNotForUs, dropNoNeighbor, dropQueueFull, dropOffLink atomic.Uint64
	dropBadFrame, dropTooBig, writeErrors                                 atomic.Uint64
	gsoWrites, gsoReads                                                   atomic.Uint64

	queueDrops atomic.Uint64 // the TAP's tx_dropped, as last read (readQueueDrops)
}

// Stats returns a snapshot of the link's counters.
func (l *Link) Stats() Stats {
	l.nlmu.Lock()
	l.readQueueDrops()
	l.nlmu.Unlock()
	s := &l.stats
	return Stats{
		FramesIn: s.framesIn.Load(), FramesOut: s.framesOut.Load(),
		PacketsIn: s.packetsIn.Load(), PacketsOut: s.packetsOut.Load(),
		ARP: s.arp.Load(), NDP: s.ndp.Load(), ICMP: s.icmp.Load(),
		Solicits: s.solicits.Load(), Queued: s.queued.Load(), IGMP: s.igmp.Load(), Looped: s.looped.Load(),
		DropNotRoCE: s.dropNotRoCE.Load(), DropNotForUs: s.dropNotForUs.Load(),
		DropNoNeighbor: s.dropNoNeighbor.Load(), DropQueueFull: s.dropQueueFull.Load(),
		DropOffLink: s.dropOffLink.Load(), DropBadFrame: s.dropBadFrame.Load(),
		DropTooBig:  s.dropTooBig.Load(),
		WriteErrors: s.writeErrors.Load(), GSOWrites: s.gsoWrites.Load(), GSOReads: s.gsoReads.Load(), DropLoopFull: l.loop.Dropped(),
		QueueDrops: s.queueDrops.Load(),
	}
}

// readQueueDrops reads the TAP's tx_dropped into the link's counters. It
// costs a netlink request, so Stats reads it and the receive path does
// not. The caller holds nlmu; after Close it reads nothing, the TAP gone.
func (l *Link) readQueueDrops() {
	if d, ok := l.txDropped(); ok {
		l.stats.queueDrops.Store(d - min(d, l.drops0))
	}
}

// txDropped returns the TAP's tx_dropped as the kernel counts it. The
// caller holds nlmu, or is Open.
func (l *Link) txDropped() (uint64, bool) {
	if l.nl == nil {
		return 0, false
	}
	nl, err := l.nl.LinkByIndex(l.ifindex)
	if err != nil || nl.Attrs().Statistics == nil {
		return 0, false
	}
	return nl.Attrs().Statistics.TxDropped, true
}

// Counters returns the link's counters by name (link.Counterer).
func (l *Link) Counters() []link.Counter {
	s := l.Stats()
	return []link.Counter{
		{Name: "tap_frames_in", Value: s.FramesIn},
		{Name: "tap_frames_out", Value: s.FramesOut},
		{Name: "tap_packets_in", Value: s.PacketsIn},
		{Name: "tap_packets_out", Value: s.PacketsOut},
		{Name: "tap_arp", Value: s.ARP},
		{Name: "tap_ndp", Value: s.NDP},
		{Name: "tap_icmp", Value: s.ICMP},
		{Name: "tap_solicits", Value: s.Solicits},
		{Name: "tap_queued", Value: s.Queued},
		{Name: "tap_igmp", Value: s.IGMP},
		{Name: "tap_looped", Value: s.Looped},
		{Name: "tap_drop_not_roce", Value: s.DropNotRoCE},
		{Name: "tap_drop_not_for_us", Value: s.DropNotForUs},
		{Name: "tap_drop_no_neighbor", Value: s.DropNoNeighbor},
		{Name: "tap_drop_queue_full", Value: s.DropQueueFull},
		{Name: "tap_drop_off_link", Value: s.DropOffLink},
		{Name: "tap_drop_bad_frame", Value: s.DropBadFrame},
		{Name: "tap_drop_too_big", Value: s.DropTooBig},
		{Name: "tap_write_errors", Value: s.WriteErrors},
		{Name: "tap_gso_writes", Value: s.GSOWrites},
		{Name: "tap_gso_reads", Value: s.GSOReads},
		{Name: "tap_drop_loop_full", Value: s.DropLoopFull},
		{Name: "if_tx_dropped", Value: s.QueueDrops},
	}
}

// Package xdp is gorxe's AF_XDP link: an XDP program (internal/xdpprog)
// steers the RoCE v2 frames that arrive on a network interface into
// AF_XDP sockets (internal/xsk), one per receive queue, which gorxe reads
// and writes directly; everything else (ARP, neighbour discovery, the
// perftest exchange on TCP, ssh) stays with the kernel. The kernel's UDP
// stack is off both paths, and the whole IPv4 header is gorxe's to write
// and to see, so IPv4 ICRCs are checked on receive as IPv6 ones are.
//
// The link uses the interface's own addresses (link-local ones too) as
// its GIDs and its MTU as its own. It sends frames with the interface's
// MAC address as source, and finds the destination's the way the
// kernel's stack would: the route's next hop, then the kernel's
// neighbour table, prompting the kernel to resolve a hop it has no entry
// for (internal/neigh); packets wait, a few per destination, while it
// does.
//
// Frames larger than a UMEM frame holds (3840 bytes received, 4096 sent:
// path MTU 4096 needs about 4170) travel in several buffers (AF_XDP
// multi-buffer, XDP_USE_SG, Linux 6.6 or later); the link turns it on
// when the interface's MTU needs it.
//
// Opening the link needs CAP_NET_ADMIN and CAP_BPF (the program and its
// map) and CAP_NET_RAW (the sockets): in practice, root.
package xdp

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/internal/xdpprog"
	"github.com/gorxe/gorxe/internal/xsk"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/ether"
	"github.com/gorxe/gorxe/link/internal/groups"
	"github.com/gorxe/gorxe/link/internal/neigh"
	"github.com/gorxe/gorxe/link/internal/pollfd"
	"github.com/gorxe/gorxe/wire"
)

// Config says how to open the link.
type Config struct {
	// Interface is the network interface's name.
	Interface string
	// Queues are the receive queues to bind sockets to; nil for every
	// one the interface has, as RoCE spreads flows over the queues by
	// UDP source port, and a queue without a socket gives its frames to
	// the kernel, which has no use for them.
	Queues []int
	// Port is the RoCE v2 UDP port; wire.UDPPort when zero.
	Port uint16
	// Mode is where the XDP program runs: xdpprog.ModeAuto (driver mode
	// if the driver has it, else generic), ModeDriver or ModeGeneric.
	Mode xdpprog.Mode
	// Logf, if set, receives a line about what the link got: the
	// program's mode, and copy or zero-copy sockets.
	Logf func(format string, args ...any)
}

// Per socket, the frames its fill ring gets, and the frames of the send
// side; a power of two each, as the rings' sizes.
const (
	rxFrames = 2048
	txFrames = 2048
)

// Link is an AF_XDP link on one interface. It implements link.Link,
// link.Poller, link.TimedPoller, link.Deferrer, link.LineRater,
// link.Counterer and link.Multicaster.
type Link struct {
	name    string
	ifindex int
	mac     [6]byte
	mtu     int
	addrs   []netip.Addr
	port    uint16
	multi   bool   // packets may take several UMEM frames
	rate    uint64 // the interface's speed in bits per second, or 0

	prog    *xdpprog.Program
	umem    *xsk.UMEM
	queues  []*queue
	closeFD int // an eventfd Close writes, to end every wait
	// loop holds what the link sent to the groups it is in, for its
	// own receive path, and loopFD, an eventfd, wakes WaitReceive for it.
	loop   groups.Loopback
	loopFD int
	wakeFD int // an eventfd WakeReceive writes, to end a WaitReceiveFor early
	res    *neigh.Resolver
	// nl is a netlink handle in the link's namespace, for the
	// interface's own statistics; rxDropped0 is its receive drops when
	// the program was attached (see ifRxDropped).
	nl         *netlink.Handle
	rxDropped0 uint64

	// The send side: queues[0]'s TX ring, the frames it sends from, and
	// the packets waiting for their next hop's address.
	txMu    sync.Mutex
	tx      *xsk.Socket
	txFree  *xsk.FrameStack
	txDescs []xsk.Desc
	pending map[netip.Addr]*waiting
	resolve chan struct{} // kicks the resolving goroutine
	// recent is the destination Send last found a next hop for, and
	// recentMAC that hop's address: a run of sends to one peer (a
	// perftest sender posts one packet at a time) looks the resolver up
	// once per neighRetry, not once a packet, which cost a clock read and
	// a map lookup under a lock. The resolving goroutine forgets it at
	// each tick, so a changed neighbour entry is seen as soon as the
	// resolver's own cache lets it be (neigh.TTL).
	recent    netip.Addr
	recentMAC [6]byte

	// The receive side, used by one goroutine at a time.
	rxDescs []xsk.Desc
	rxAddrs []uint64
	next    int // the queue TryReceive starts at

	// rw is held shared by the calls that use the sockets and the
	// eventfd, and exclusively by Close, which releases them.
	rw     sync.RWMutex
	closed atomic.Bool
	done   chan struct{}
	wg     sync.WaitGroup
	stats  stats
	mc     mcast // the multicast groups joined (mcast_linux.go)
}

// queue is one receive queue's socket and the frames its fill ring takes.
type queue struct {
	id     int
	sock   *xsk.Socket
	frames *xsk.FrameStack
	held   []xsk.Desc // taken off the RX ring, not yet returned by TryReceive
	// holding says held is not empty, for WaitReceive, which runs
	// beside TryReceive.
	holding atomic.Bool
}

// waiting is the packets to one destination held while its next hop is
// resolved.
type waiting struct {
	pkts  [][]byte // each with ether.HeaderLen bytes in front
	bytes int
	since time.Time
}

// Bounds of the packets held for resolution, as the kernel's
// (unres_qlen_bytes), and how long they wait.
const (
	maxWaitingBytes = 64 << 10
	resolveTimeout  = 3 * time.Second
)

type stats struct {
	notForUs, badFrame, tooBig, noNeighbor, queueFull, queued, noFrame, offLink, looped atomic.Uint64
}

var _ interface {
	link.Link
	link.TimedPoller
	link.Counterer
} = (*Link)(nil)

// Open attaches the XDP program to the interface and binds the sockets.
// The calling thread's network namespace is the link's.
func Open(c Config) (*Link, error) {
	ifc, err := net.InterfaceByName(c.Interface)
	if err != nil {
		// Not the net package's "route ip+net: ..." but what it found.
		if op := (*net.OpError)(nil); errors.As(err, &op) {
			err = op.Err
		}
		return nil, fmt.Errorf("xdp: interface %q: %w", c.Interface, err)
	}
	if ifc.Flags&net.FlagUp == 0 {
		return nil, fmt.Errorf("xdp: interface %s is down: bring it up with `ip link set dev %s up`", ifc.Name, ifc.Name)
	}
	if len(ifc.HardwareAddr) != 6 {
		return nil, fmt.Errorf("xdp: interface %s is not Ethernet", ifc.Name)
	}
	l := &Link{
		name: ifc.Name, ifindex: ifc.Index, mac: [6]byte(ifc.HardwareAddr), mtu: min(ifc.MTU, link.MaxPacket),
		port: c.Port, pending: make(map[netip.Addr]*waiting), resolve: make(chan struct{}, 1),
		done: make(chan struct{}), closeFD: -1, loopFD: -1, wakeFD: -1,
	}
	l.mc.open()
	if l.port == 0 {
		l.port = wire.UDPPort
	}
	opened := false
	defer func() {
		if !opened {
			l.release()
		}
	}()
	if l.addrs, err = interfaceAddrs(ifc); err != nil {
		return nil, err
	}
	// A driver that cannot say (an error, or SPEED_UNKNOWN) leaves the
	// rate unknown, as a link without LineRate.
	l.rate, _ = interfaceSpeed(ifc.Name)
	queues, all := c.Queues, c.Queues == nil
	if all {
		n, err := rxQueues(ifc.Index)
		if err != nil {
			return nil, err
		}
		for q := range n {
			queues = append(queues, q)
		}
	}
	if len(queues) == 0 {
		return nil, errors.New("xdp: no receive queue to bind")
	}
	maxQueue := 0
	for _, q := range queues {
		if q < 0 {
			return nil, fmt.Errorf("xdp: queue %d", q)
		}
		maxQueue = max(maxQueue, q)
	}
	if l.umem, err = xsk.NewUMEM(xsk.UMEMConfig{Frames: uint32(len(queues)*rxFrames + txFrames)}); err != nil {
		return nil, err
	}
	// A frame as received: Ethernet, perhaps a VLAN tag, the IP packet.
	l.multi = ether.HeaderLen+ether.TagLen+l.mtu > int(l.umem.RXFrameSize())
	if l.prog, err = xdpprog.Load(xdpprog.Config{Port: l.port, Queues: maxQueue + 1, Frags: l.multi}); err != nil {
		return nil, err
	}
	free := l.umem.FreeFrames()
	for _, q := range queues {
		s, err := bind(l.umem, l.ifindex, q, xsk.Config{FillRingSize: rxFrames, TXRingSize: txFrames, CompletionRingSize: txFrames, MultiBuffer: l.multi})
		if all && q > 0 && errors.Is(err, unix.EINVAL) {
			// The interface has room for more queues than it uses
			// (veth's default); "all" is the ones in use.
			break
		}
		if err != nil && l.multi && (errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL)) {
			return nil, fmt.Errorf("xdp: %s queue %d: %w: MTU %d needs frames in several buffers (AF_XDP multi-buffer: Linux 6.6 or later, and a driver that has it); with an MTU of %d or less each frame fits one",
				ifc.Name, q, err, l.mtu, int(l.umem.RXFrameSize())-ether.HeaderLen-ether.TagLen)
		}
		if err != nil {
			return nil, fmt.Errorf("xdp: %s queue %d: %w", ifc.Name, q, err)
		}
		qu := &queue{id: q, sock: s, frames: free.Split(rxFrames)}
		l.queues = append(l.queues, qu)
		if _, err := s.FillFrom(qu.frames, rxFrames); err != nil {
			return nil, err
		}
		if err := l.prog.Register(q, s.FD()); err != nil {
			return nil, err
		}
	}
	l.tx, l.txFree = l.queues[0].sock, free
	if l.res, err = neigh.New(l.ifindex); err != nil {
		return nil, err
	}
	if l.closeFD, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, fmt.Errorf("xdp: eventfd: %w", err)
	}
	if l.loopFD, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, fmt.Errorf("xdp: eventfd: %w", err)
	}
	if l.wakeFD, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, fmt.Errorf("xdp: eventfd: %w", err)
	}
	if l.nl, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
		return nil, fmt.Errorf("xdp: netlink: %w", err)
	}
	l.rxDropped0, _ = l.ifRxDropped()
	att, err := l.prog.Attach(l.ifindex, c.Mode)
	if err != nil {
		return nil, err
	}
	if c.Logf != nil {
		copyMode := "copy sockets"
		if l.tx.ZeroCopy() {
			copyMode = "zero-copy sockets"
		} else if err := l.tx.ZeroCopyErr(); err != nil {
			copyMode += fmt.Sprintf(" (zero-copy refused: %v)", err)
		}
		c.Logf("xdp: %v; %d queue(s), %s, multi-buffer %v", att, len(queues), copyMode, l.multi)
	}
	l.rxDescs = make([]xsk.Desc, link.BatchSize*xsk.MaxFrags/4)
	l.wg.Add(1)
	go l.resolving()
	opened = true
	return l, nil
}

// interfaceAddrs returns the interface's addresses, its GIDs: IPv4 and
// IPv6, link-local ones too (without a zone: the link is on one
// interface, which is the zone of every link-local address it sends to).
func interfaceAddrs(ifc *net.Interface) ([]netip.Addr, error) {
	as, err := ifc.Addrs()
	if err != nil {
		return nil, fmt.Errorf("xdp: addresses of %s: %w", ifc.Name, err)
	}
	var out []netip.Addr
	for _, a := range as {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		out = append(out, ip.Unmap())
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("xdp: interface %s has no IP address", ifc.Name)
	}
	return out, nil
}

// bind opens a socket on queue q, waiting a little for a queue whose
// last socket was just closed: the kernel frees it in deferred work, and
// a gorxe started again at once would otherwise find it busy.
func bind(u *xsk.UMEM, ifindex, q int, c xsk.Config) (*xsk.Socket, error) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		s, err := xsk.Open(u, ifindex, q, c)
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return s, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ifRxDropped returns the frames the interface's driver has dropped on
// receive (rx_dropped), whatever they carried. A driver counts there the
// frames it dropped before the XDP program ran, and the ones the program
// redirected to a socket with no room: none of them reaches the link.
func (l *Link) ifRxDropped() (uint64, error) {
	nl, err := l.nl.LinkByIndex(l.ifindex)
	if err != nil {
		return 0, err
	}
	st := nl.Attrs().Statistics
	if st == nil {
		return 0, errors.New("xdp: the interface has no statistics")
	}
	return st.RxDropped, nil
}

// rxQueues returns how many receive queues the interface has, from
// netlink: sysfs shows the namespace it was mounted in, not the calling
// thread's.
func rxQueues(ifindex int) (int, error) {
	nl, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return 0, fmt.Errorf("xdp: the receive queues of interface %d: %w", ifindex, err)
	}
	return max(nl.Attrs().NumRxQueues, 1), nil
}

// Addrs returns the interface's addresses.
func (l *Link) Addrs() []netip.Addr { return append([]netip.Addr(nil), l.addrs...) }

// MTU returns the interface's MTU: the largest IP packet.
func (l *Link) MTU() int { return l.mtu }

// Flags says that polling the link is cheap (link.FlagCheapPoll): a poll
// that finds nothing reads the RX rings and makes no system call. The
// link sees and writes whole IP headers, so IPv4 ICRCs are checked.
func (l *Link) Flags() link.Flags { return link.FlagCheapPoll }

// Name returns the interface's name.
func (l *Link) Name() string { return l.name }

// MAC returns the interface's Ethernet address, which the link's frames
// come from.
func (l *Link) MAC() net.HardwareAddr { return net.HardwareAddr(bytes.Clone(l.mac[:])) }

// Close detaches the XDP program, so that RoCE frames go to the kernel
// again, and closes the sockets.
func (l *Link) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return link.ErrClosed
	}
	close(l.done)
	pollfd.PostEventfd(l.closeFD)
	l.wg.Wait()
	l.rw.Lock() // no call is under way from here on
	defer l.rw.Unlock()
	return l.release()
}

// release closes what Open made, in the reverse order.
func (l *Link) release() error {
	var errs []error
	if l.prog != nil {
		errs = append(errs, l.prog.Close())
	}
	for _, q := range l.queues {
		if err := q.sock.Close(); err != nil && !errors.Is(err, xsk.ErrClosed) {
			errs = append(errs, err)
		}
	}
	if l.umem != nil {
		if err := l.umem.Close(); err != nil && !errors.Is(err, xsk.ErrClosed) {
			errs = append(errs, err)
		}
	}
	if l.res != nil {
		l.res.Close()
	}
	if l.nl != nil {
		l.nl.Close()
	}
	for _, fd := range []int{l.closeFD, l.loopFD, l.wakeFD} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	l.mc.close()
	return errors.Join(errs...)
}

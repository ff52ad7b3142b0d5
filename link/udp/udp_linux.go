package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/pollfd"
	"github.com/gorxe/gorxe/wire"
)

// DefaultSocketBuffer is the send and receive buffer the link asks the
// kernel for. The kernel's default (about 208 KiB) holds only a couple of
// hundred small datagrams, fewer than a few batches. A datagram the socket
// has no room for is lost, and UC and UD resend nothing: two gorxe
// processes running a duplex UC send_bw on one two-CPU host overflowed
// 4 MiB in most runs and 64 MiB in none. The buffer is a limit, not an
// allocation: it costs memory only while datagrams wait in it.
// SO_RCVBUFFORCE lets a privileged process exceed net.core.rmem_max.
const DefaultSocketBuffer = 64 << 20

// Config describes the socket a link opens.
type Config struct {
	// Addr is the address to bind to and the link's first address. It
	// must be a specific IPv4 or IPv6 address: the ICRC covers the source
	// address, so the device must know which one the kernel will use.
	Addr netip.Addr

	// Also are more addresses of the interface that holds Addr, of
	// either family, that the link takes packets at and sends packets
	// from, as a RoCE device has every address of its interface as a
	// GID: a server that listens on all of them is reached at any. Each
	// has a socket of its own, read and written as Addr's is
	// (also_linux.go).
	Also []netip.Addr

	// Port is the UDP port to bind to, and so the source port of every
	// packet sent; 4791 (wire.UDPPort) when zero.
	Port uint16

	// MTU is the largest IP packet the link sends. Zero asks the kernel
	// for the MTU of the interface that holds Addr, or 1500 if none does;
	// either way it is at most link.MaxPacket.
	MTU int

	// SocketBuffer is the socket's send and receive buffer size in bytes;
	// DefaultSocketBuffer when zero.
	SocketBuffer int

	// NoGSO sends every packet as a datagram of its own. By default a run
	// of equally long packets to one peer goes to the kernel as one
	// datagram that it cuts into those packets (UDP GSO): the packets on
	// the wire are the same, but a capture on the sending host shows the
	// uncut datagram.
	NoGSO bool

	// NoGRO has the kernel cut every datagram that holds several packets
	// (a peer's UDP GSO run, or packets its NIC joined) before the link
	// reads it. By default the link reads such a datagram whole and cuts
	// it itself (see receive_linux.go), which costs far less.
	NoGRO bool
}

// Errors returned by Open.
var (
	ErrAddr = errors.New("udp: address must be a specific IPv4 or IPv6 address")
	ErrMTU  = errors.New("udp: MTU out of range")
)

// Link is a kernel UDP socket carrying RoCE v2 packets. It implements
// link.Link, link.SourcePorter, link.Poller and link.Multicaster.
type Link struct {
	sender // the socket's send path: sock, v4, scope, gso (send_linux.go)

	addr   netip.Addr // unmapped, without zone
	port   uint16
	mtu    int
	addrs  []netip.Addr
	closed atomic.Bool

	also      []*sender    // Config.Also's sockets, addrs[1:]'s (also_linux.go)
	alsoSocks []*pollfd.FD // their descriptors, which Receive's waits watch too
	in        []*rsock     // the sockets Receive reads: the link's own, then Also's

	txPool sync.Pool // *txScratch: Send may run on several goroutines at once
	rx     rxScratch // Receive runs on one goroutine at a time
	mc     mcast     // the multicast groups joined (mcast_linux.go)
	stats  counters
}

var (
	_ link.Link         = (*Link)(nil)
	_ link.SourcePorter = (*Link)(nil)
	_ link.Poller       = (*Link)(nil)
	_ link.TimedPoller  = (*Link)(nil)
)

// Open binds a UDP socket to c.Addr and c.Port and returns a link over it.
func Open(c Config) (*Link, error) {
	addr := c.Addr.Unmap()
	if !specific(addr) {
		return nil, fmt.Errorf("%w: %v", ErrAddr, c.Addr)
	}
	port := c.Port
	if port == 0 {
		port = wire.UDPPort
	}
	mtu := c.MTU
	if mtu == 0 {
		mtu = min(interfaceMTU(addr), link.MaxPacket)
	}
	if mtu < minMTU || mtu > link.MaxPacket {
		return nil, fmt.Errorf("%w: %d (want %d..%d)", ErrMTU, c.MTU, minMTU, link.MaxPacket)
	}
	bufSize := c.SocketBuffer
	if bufSize == 0 {
		bufSize = DefaultSocketBuffer
	}

	l := &Link{addr: addr.WithZone(""), port: port, mtu: mtu}
	l.sender.l, l.v4 = l, addr.Is4()
	var err error
	if l.scope, err = zoneIndex(addr.Zone()); err != nil {
		return nil, fmt.Errorf("udp: zone of %v: %w", c.Addr, err)
	}
	l.sock, err = openSock(l.addr, port, l.scope, func(fd int) error {
		if err := setSockopts(fd, l.addr, bufSize); err != nil {
			return err
		}
		// Best effort: a kernel without UDP_GRO (before 5.0) cuts joined
		// datagrams itself.
		l.rx.gro = !c.NoGRO && unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1) == nil
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("udp: bind %v: %w", netip.AddrPortFrom(addr, port), err)
	}
	l.gso.Store(!c.NoGSO)
	l.addrs = []netip.Addr{l.addr}
	l.in = []*rsock{{sock: l.sock, addr: l.addr}}
	if err := l.openAlso(c.Also, bufSize); err != nil {
		l.Close()
		return nil, err
	}
	l.txPool.New = func() any {
		s := new(txScratch)
		s.fn = s.sendmmsg
		return s
	}
	l.rx.init(l)
	return l, nil
}

// specific reports whether a is a specific unicast address, one a socket
// can be bound to and send from (ErrAddr otherwise).
func specific(a netip.Addr) bool {
	return a.IsValid() && !a.IsUnspecified() && !a.IsMulticast()
}

// zoneIndex returns the interface index an IPv6 zone names, by name or
// by number as the net package accepts it; 0 for no zone.
func zoneIndex(zone string) (uint32, error) {
	if zone == "" {
		return 0, nil
	}
	if n, err := strconv.ParseUint(zone, 10, 32); err == nil {
		return uint32(n), nil
	}
	ifc, err := net.InterfaceByName(zone)
	if err != nil {
		return 0, err
	}
	return uint32(ifc.Index), nil
}

// minMTU is the smallest MTU a link accepts: IPv4's minimum, room for any
// RoCE v2 packet with a 256-byte payload.
const minMTU = 576

// setSockopts sets what the link relies on before a socket for addr is
// bound.
func setSockopts(fd int, addr netip.Addr, bufSize int) error {
	type opt struct {
		level, name, value int
		what               string
	}
	var opts []opt
	v4 := addr.Is4()
	if v4 {
		opts = []opt{
			// DF on every packet; with the socket unconnected this also
			// makes the kernel send IP ID 0, which the device's ICRC assumes.
			{unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO, "IP_MTU_DISCOVER"},
			{unix.IPPROTO_IP, unix.IP_TOS, defaultTOS, "IP_TOS"},
			{unix.IPPROTO_IP, unix.IP_RECVTOS, 1, "IP_RECVTOS"},
		}
	} else {
		opts = []opt{
			{unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1, "IPV6_V6ONLY"},
			{unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO, "IPV6_MTU_DISCOVER"},
			{unix.IPPROTO_IPV6, unix.IPV6_TCLASS, defaultTOS, "IPV6_TCLASS"},
			{unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1, "IPV6_RECVTCLASS"},
			// Linux rxe sends RoCE v2 over IPv6 with a zero UDP checksum,
			// which IPv6 forbids and a socket drops unless told not to
			// (RFC 6936; rxe's own tunnel socket sets the same).
			{unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1, "UDP_NO_CHECK6_RX"},
		}
	}
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, o.level, o.name, o.value); err != nil {
			return fmt.Errorf("setsockopt %s: %w", o.what, err)
		}
	}
	// What is sent to a multicast group leaves from the interface that
	// holds the link's address, with RoCE's hop limit (rdma_cm's for
	// RoCE v2) where the kernel's default is 1. Best effort: only
	// multicast needs them.
	if ifc, err := interfaceHolding(addr); err == nil {
		if v4 {
			unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &unix.IPMreqn{Address: addr.As4(), Ifindex: int32(ifc.Index)})
			unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, mcastHopLimit)
		} else {
			unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, ifc.Index)
			unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, mcastHopLimit)
		}
	}
	// Larger buffers are best effort: without CAP_NET_ADMIN the kernel
	// caps SO_RCVBUF at net.core.rmem_max, silently.
	for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[0], bufSize) != nil {
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[1], bufSize)
		}
	}
	return nil
}

// interfaceMTU returns the MTU of the interface that holds addr, or 1500.
func interfaceMTU(addr netip.Addr) int {
	if ifc, err := interfaceHolding(addr); err == nil {
		return ifc.MTU
	}
	return 1500
}

// interfaceHolding returns the interface that holds addr; for an address
// of 127.0.0.0/8, all of which Linux takes as this host's on lo (which
// lists 127.0.0.1 only), the loopback interface.
func interfaceHolding(addr netip.Addr) (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for i, ifc := range ifs {
		as, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == addr.WithZone("") {
					return &ifs[i], nil
				}
			}
		}
	}
	if addr.IsLoopback() {
		for i, ifc := range ifs {
			if ifc.Flags&net.FlagLoopback != 0 {
				return &ifs[i], nil
			}
		}
	}
	return nil, fmt.Errorf("no interface holds %v", addr)
}

// Addrs returns the addresses the link is bound to: Config.Addr, then
// Config.Also's.
func (l *Link) Addrs() []netip.Addr { return slices.Clone(l.addrs) }

// MTU returns the largest IP packet the link sends.
func (l *Link) MTU() int { return l.mtu }

// Flags returns link.FlagNoIPv4ICRC: a UDP socket does not report the IPv4
// Identification a packet arrived with.
func (l *Link) Flags() link.Flags { return link.FlagNoIPv4ICRC }

// SourcePort returns the bound port, the source port of every packet the
// link sends.
func (l *Link) SourcePort() uint16 { return l.port }

// Close closes the socket, which wakes a blocked Receive. Closing a closed
// link returns link.ErrClosed.
func (l *Link) Close() error {
	if l.closed.Swap(true) {
		return link.ErrClosed
	}
	l.readSocketDrops() // Stats keeps counting after Close
	l.closeGroups()
	l.closeAlso()
	return l.sock.Close()
}

// counters are the link's statistics.
type counters struct {
	sent, runs, sendErrors, received, joined, truncated, receiveErrors, mcastDropped atomic.Uint64
}

// Stats counts what happened to a link's packets.
type Stats struct {
	Sent          uint64 // packets the kernel accepted for sending
	Runs          uint64 // datagrams of several packets the kernel accepted, to cut into them (UDP GSO)
	SendErrors    uint64 // packets not sent: malformed, wrong address family, or refused by the kernel (no route, too big, ...)
	Received      uint64 // packets Receive returned
	Joined        uint64 // datagrams that arrived holding several packets (UDP GRO), which the link cut
	Truncated     uint64 // datagrams dropped because they did not fit a buffer, or their control messages were cut short
	ReceiveErrors uint64 // recvmmsg calls that failed with something other than "nothing to read"
	McastDropped  uint64 // packets to a joined multicast group dropped because Receive had not taken the last mcastQueueLen that came that way
	SocketDrops   uint64 // datagrams the kernel dropped at the link's sockets before it read them: a receive buffer was full (the host's UdpRcvbufErrors), or their UDP checksum was wrong; a datagram it had joined (GRO) counts once, however many packets it held
}

// Stats returns the link's counters.
func (l *Link) Stats() Stats {
	l.readSocketDrops()
	c := &l.stats
	return Stats{
		Sent:          c.sent.Load(),
		Runs:          c.runs.Load(),
		SendErrors:    c.sendErrors.Load(),
		Received:      c.received.Load(),
		Joined:        c.joined.Load(),
		Truncated:     c.truncated.Load(),
		ReceiveErrors: c.receiveErrors.Load(),
		McastDropped:  c.mcastDropped.Load(),
		SocketDrops:   l.socketDrops(),
	}
}

// socketDrops is the sum of the link's sockets' drop counts, as last read.
func (l *Link) socketDrops() uint64 {
	var n uint64
	for _, s := range l.in {
		n += s.drops.Load()
	}
	return n
}

// readSocketDrops reads the number of datagrams the kernel dropped at each
// of the link's sockets (SO_MEMINFO's SK_MEMINFO_DROPS). It costs a
// system call a socket, so Stats reads it and the receive path does not.
func (l *Link) readSocketDrops() {
	for _, s := range l.in {
		s.readDrops()
	}
}

// readDrops reads the number of datagrams the kernel dropped at s into
// s.drops.
func (s *rsock) readDrops() {
	_ = s.sock.Do(func(fd int) {
		var info [unix.SK_MEMINFO_VARS]uint32
		size := uint32(unsafe.Sizeof(info))
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
			uintptr(unsafe.Pointer(&info)), uintptr(unsafe.Pointer(&size)), 0)
		if errno != 0 || size <= unix.SK_MEMINFO_DROPS*4 {
			return
		}
		// Calls may race; the count only grows, so keep the largest.
		n := uint64(info[unix.SK_MEMINFO_DROPS])
		for c := &s.drops; ; {
			old := c.Load()
			if n <= old || c.CompareAndSwap(old, n) {
				return
			}
		}
	})
}

// Counters returns the link's counters by name (link.Counterer).
func (l *Link) Counters() []link.Counter {
	s := l.Stats()
	return []link.Counter{
		{Name: "udp_sent", Value: s.Sent},
		{Name: "udp_gso_runs", Value: s.Runs},
		{Name: "udp_send_errors", Value: s.SendErrors},
		{Name: "udp_received", Value: s.Received},
		{Name: "udp_gro_runs", Value: s.Joined},
		{Name: "udp_truncated", Value: s.Truncated},
		{Name: "udp_receive_errors", Value: s.ReceiveErrors},
		{Name: "udp_mcast_dropped", Value: s.McastDropped},
		{Name: "udp_socket_drops", Value: s.SocketDrops},
	}
}

// closedErr reports whether err, from an operation on the socket, means
// the link has been closed.
func (l *Link) closedErr(err error) bool {
	return errors.Is(err, link.ErrClosed) || l.closed.Load()
}

// Package link defines how a gorxe device moves IP packets to and from the
// network. A Link carries whole IPv4 or IPv6 packets, each a RoCE v2 packet
// from its IP header through its ICRC. Links move packets in batches, and
// every buffer has Headroom bytes in front of the packet so a link that
// writes whole frames can put its Ethernet header there without a copy.
//
// Implementations live in the packages below: mem (an in-process fabric
// with fault injection, for tests), udp (a kernel UDP socket), tap (a
// TAP device on which gorxe is a whole host) and xdp (AF_XDP sockets on
// an interface the kernel keeps).
package link

import (
	"errors"
	"net/netip"
	"time"
)

// Headroom is the number of bytes every buffer keeps in front of the packet
// for link-layer headers: Ethernet with two VLAN tags is 22 bytes, rounded up
// to keep the IP header 8-byte aligned for the common case.
const Headroom = 32

// MaxPacket is the largest IP packet a link carries: a 4096-byte path MTU
// payload with every header, inside a 9000-byte jumbo frame.
const MaxPacket = 9000

// BufferSize is the size of one packet buffer: headroom plus the largest
// packet.
const BufferSize = Headroom + MaxPacket

// BatchSize is the number of packets a device hands a link per call.
const BatchSize = 64

// ErrClosed is returned by a link's methods after Close.
var ErrClosed = errors.New("link: closed")

// Flags describe what a link can do with the packets it carries.
type Flags uint8

const (
	// FlagNoIPv4ICRC means the link cannot show the IPv4 header the sender
	// wrote (a kernel UDP socket), so the IPv4 Identification field, which
	// the ICRC covers, is unknown and the ICRC of IPv4 packets cannot be
	// checked on receive.
	FlagNoIPv4ICRC Flags = 1 << iota

	// FlagCheapPoll means the link's TryReceive (Poller) finds an empty
	// link without a system call, in a ring it shares with the kernel
	// (AF_XDP): polling it costs the polling CPU and nothing else, so a
	// receiver may keep polling for a while before it sleeps in the
	// kernel, where each wake-up costs the sender's CPU too.
	FlagCheapPoll
)

// Link moves batches of IP packets. Send and Receive may be called from
// different goroutines at once; Receive is called from one goroutine at a
// time.
type Link interface {
	// Send transmits packets: packet i is bufs[i][Headroom:]. The link does
	// not keep the buffers after Send returns. A packet the network drops is
	// not an error.
	Send(bufs [][]byte) error

	// Receive blocks until at least one packet arrives, then writes up to
	// len(bufs) packets, packet i at bufs[i][Headroom:Headroom+sizes[i]],
	// and returns how many it wrote. Each bufs[i] has BufferSize bytes. It
	// returns ErrClosed once the link is closed.
	Receive(bufs [][]byte, sizes []int) (int, error)

	// Addrs returns the link's own IP addresses.
	Addrs() []netip.Addr

	// MTU returns the largest IP packet the link carries.
	MTU() int

	// Flags tells what the link can and cannot do.
	Flags() Flags

	// Close stops the link and wakes a blocked Receive.
	Close() error
}

// Poller is implemented by links that can receive without blocking. A
// device on such a link lets a program that waits for a completion drive
// the receive path itself, as a NIC driver's busy-poll loop does, rather
// than wake the device's receive goroutine for every packet.
//
// WaitReceive and TryReceive take the place of Receive: the device calls
// WaitReceive on one goroutine and TryReceive on whichever goroutine holds
// its receive lock, never Receive as well.
type Poller interface {
	// WaitReceive blocks until a packet may be waiting. It may return
	// when none is; it returns ErrClosed once the link is closed.
	WaitReceive() error

	// TryReceive is Receive without the wait: it returns 0 at once when
	// no packet is waiting.
	TryReceive(bufs [][]byte, sizes []int) (int, error)
}

// TimedPoller is a Poller whose wait for a packet can give up, or be
// ended by another goroutine, for a device whose program's goroutine
// waits for the link itself (rnic.Device.Drive).
type TimedPoller interface {
	Poller

	// WaitReceiveFor is WaitReceive that returns after timeout at the
	// latest (rounded up to a millisecond), and reports whether a packet
	// may be waiting.
	WaitReceiveFor(timeout time.Duration) (bool, error)

	// WakeReceive ends the WaitReceiveFor under way, or the next one if
	// none is, as if a packet may be waiting: for a waiter that
	// something other than a packet should wake (a completion another
	// goroutine pushed, its context's end). WaitReceive does not see it:
	// the device's receive goroutine may wait beside the waiter, and
	// must not take its wake.
	WakeReceive()
}

// Notifier is a Poller that says when packets arrive, for a device that
// never waits: one run by a simulator's event loop on the simulator's
// goroutine (rnic.Config.Loop), whose link is a simulated port.
type Notifier interface {
	Poller

	// Notify has the link call fn each time it queues a packet for
	// TryReceive, on the goroutine that queues it.
	Notify(fn func())
}

// Deferrer is a link whose sends cost a system call each, and that can
// leave packets queued for one later call to send with others: the
// device defers its sends while a program busy polls it, and flushes at
// each poll (rnic.Device.Poll), so that what a program posts between two
// polls leaves in one call, as a NIC's doorbell rung once for many work
// requests.
type Deferrer interface {
	// SendDeferred is Send that may leave the packets queued, to go out
	// with a later Send or Flush. A link bounds what it leaves queued.
	SendDeferred(bufs [][]byte) error

	// Flush sends what SendDeferred left queued. It may run beside Send
	// and SendDeferred, on another goroutine.
	Flush() error
}

// Joiner is a link that can join consecutive packets to one destination
// into one datagram whatever their length (UDP GSO), which the receiving
// host cuts or reads whole: a short request and the ACK sent behind it
// reach a sleeping receiver as one, to wake it once, where Send joins
// only packets that carry data. A receiver that busy polls would see the
// first packet later, so the device joins only while its program does
// not busy poll.
type Joiner interface {
	// SendJoined is Send that joins runs of packets of any length.
	SendJoined(bufs [][]byte) error
}

// Counter is a count a link keeps, by name.
type Counter struct {
	Name  string
	Value uint64
}

// Counterer is a link with counters of its own (frames it dropped, ring
// states), which the device shows after its own (rnic.Counters). Names
// are lower case with underscores and start with the link's kind: udp_,
// tap_, xdp_.
type Counterer interface {
	Counters() []Counter
}

// Multicaster is a link that can receive what is sent to an IP
// multicast group, for the UD QPs a device attaches to it
// (rnic.Device.AttachMcast). JoinGroup makes the link's host a member of
// group, an IPv4 or IPv6 multicast address, as IP_ADD_MEMBERSHIP makes a
// socket's, so that the network delivers the group's packets to the
// link; LeaveGroup ends one JoinGroup. Joins of one group nest: the link
// leaves it at the last LeaveGroup. A link that can send to a group but
// not join one does not implement it.
type Multicaster interface {
	JoinGroup(group netip.Addr) error
	LeaveGroup(group netip.Addr) error
}

// SourcePorter is implemented by links whose packets all leave from one
// UDP source port that the link, not the device, chooses (a kernel UDP
// socket bound to the RoCE port). The ICRC covers the UDP ports, so the
// device must build every packet with that port.
type SourcePorter interface {
	SourcePort() uint16
}

// LineRater is implemented by links that know the rate of the port they
// send on. The device's congestion control (DCQCN) starts each flow at
// the line rate, never exceeds it, and paces nothing while a flow is at
// it.
type LineRater interface {
	// LineRate returns the port's rate in bits per second of IP packets,
	// or 0 if it is not known.
	LineRate() uint64
}

// Resolver is implemented by links that resolve a destination's
// link-layer address themselves (ARP, neighbour discovery). The device
// calls Resolve when a QP or an address handle learns its destination, as
// the kernel resolves a RoCE destination's MAC address when a QP moves to
// RTR or an address handle is made (ib_resolve_eth_dmac), so that the
// first burst sent there does not wait in, or overflow, the link's queue
// for an unresolved address: UC and UD would never send it again.
type Resolver interface {
	// Resolve starts resolving dst if the link neither knows it nor is
	// resolving it already, and returns at once. Destinations the link
	// cannot reach are ignored.
	Resolve(dst netip.Addr)
}

// LinkLocal returns the IPv6 link-local address an interface with this
// 6-byte MAC address makes for itself (fe80::/64 and the modified EUI-64,
// RFC 4291 appendix A): what the kernel's RDMA core takes as a RoCE
// port's default GID, index 0 of its table. Another length gives the
// all-zero MAC's, as a loopback's.
func LinkLocal(mac []byte) netip.Addr {
	var m [6]byte
	if len(mac) == 6 {
		m = [6]byte(mac)
	}
	return netip.AddrFrom16([16]byte{0: 0xfe, 1: 0x80,
		8: m[0] ^ 0x02, 9: m[1], 10: m[2], 11: 0xff, 12: 0xfe, 13: m[3], 14: m[4], 15: m[5]})
}

package udp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/internal/pages"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/pollfd"
	"github.com/gorxe/gorxe/wire"
)

// Receive calls recvmmsg itself, on a socket the Go runtime does not poll
// (see openSock), and without x/net's ReadBatch, which allocates a net.UDPAddr
// and its IP for every datagram: the device's receive path must not
// allocate per packet.

// The header the link writes in front of a received payload has the
// fields the socket does not report set as a RoCE v2 sender sets them.
const (
	rxHopLimit = 64 // IPv4 TTL, IPv6 hop limit; masked by the ICRC
)

// mmsghdr is struct mmsghdr from <sys/socket.h>; x/sys has no type for it.
// Go pads it to the C size: 64 bytes on 64-bit Linux, 32 on 32-bit.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// rxOOBWords is room for the control messages a datagram carries, IP_TOS
// or IPV6_TCLASS and UDP_GRO (24 bytes each with their headers), with room
// to spare.
const rxOOBWords = 8

// Datagrams that arrive joined (UDP GRO).
//
// The socket asks for UDP_GRO, so the kernel hands on a datagram that
// holds several packets of one flow, each but the last of the size its
// UDP_GRO control message gives, instead of cutting it into those
// packets first, which costs it as much per packet as the datagram's
// trip to it. Such datagrams come from a sender's UDP GSO (gorxe's own
// runs, when the peer shares the kernel, as in network namespaces), or
// from the NIC's GRO joining packets of a burst.
//
// A joined datagram is up to 64 KiB, longer than a buffer: each message of
// a recvmmsg has a second iovec, its slot in spill, for the bytes that do
// not fit its buffer, and the link cuts the datagram into packets itself.
// Its first packet stays in its buffer. The others go to free buffers of
// the same batch if the datagram came last in it; otherwise they, and
// every datagram after them, are held, synthesized, in held, and handed on
// in order by the next calls, before the socket is read again. A wait
// returns at once while packets are held; one that began before they were
// is woken (pollfd.FD.Kick). Holding costs a second copy, so after a batch
// with a joined datagram in it the link asks for one datagram at a time,
// which then always comes last, until a batch has none: a burst of GSO
// runs is read a run a call, each run up to 64 packets.
const spillSize = 1 << 16

// rsock is a socket Receive reads: the link's own, or one of
// Config.Also's. They take turns, a batch at a time; one rxScratch serves
// them all.
type rsock struct {
	sock   *pollfd.FD
	addr   netip.Addr    // what it is bound to: every datagram it gets was sent there
	ask    int           // TryReceive's next ask, see pollAsk
	joined bool          // its last batch had a joined datagram: read one at a time
	drops  atomic.Uint64 // the kernel's count of datagrams it dropped, as last read (readSocketDrops)
}

// rxScratch is Receive's recvmmsg arguments, reused for every call.
type rxScratch struct {
	l       *Link
	hdrs    []mmsghdr
	iovs    []unix.Iovec
	names   []unix.RawSockaddrInet6 // large enough for either family
	oob     [][rxOOBWords]uint64    // uint64 for the alignment cmsghdr needs
	want    int                     // datagrams to ask for
	n       int                     // datagrams the last call returned
	errno   unix.Errno              // its error
	recvFn  func(fd int)            // r.recvmmsg, bound once so that calls do not allocate
	cur     *rsock                  // the socket being read
	payload int                     // offset of the UDP payload from link.Headroom: cur's headerLen
	next    int                     // the index in Link.in of the socket to read first next time

	gro     bool         // the sockets join datagrams (UDP_GRO); spill is set
	spill   []byte       // spillSize bytes per message
	held    held         // packets of a batch read but not yet handed on
	waiters atomic.Int32 // waits under way, which a batch that held packets kicks
}

// held is packets read from the socket that did not fit the batch they
// came in, in order from head, each whole (headers synthesized) at the
// start of its buffer.
type held struct {
	pkts [][]byte
	head int
	free [][]byte
	n    atomic.Int32 // len(pkts)-head, for waits on other goroutines
}

// add holds the packet fill writes to the start of a buffer, size bytes.
func (h *held) add(fill func(b []byte) int) {
	var b []byte
	if k := len(h.free); k > 0 {
		b, h.free = h.free[k-1], h.free[:k-1]
	} else {
		b = make([]byte, link.BufferSize)
	}
	b = b[:cap(b)]
	h.pkts = append(h.pkts, b[:fill(b)])
	h.n.Add(1)
}

// take copies up to len(bufs) held packets to bufs[i][link.Headroom:],
// sets sizes[i], and returns how many.
func (h *held) take(bufs [][]byte, sizes []int) int {
	k := min(len(bufs), len(sizes), len(h.pkts)-h.head)
	for i := range k {
		p := h.pkts[h.head]
		sizes[i] = copy(bufs[i][link.Headroom:], p)
		h.free = append(h.free, p)
		h.pkts[h.head] = nil
		h.head++
	}
	if h.head == len(h.pkts) {
		h.pkts, h.head = h.pkts[:0], 0
	}
	h.n.Add(int32(-k))
	return k
}

// pollAsk is how many datagrams TryReceive asks for after a call that
// found the socket empty. A program that busy polls calls TryReceive
// far more often than datagrams come, and each call first checks the
// iovec of every buffer it asks for (prepare), so an empty poll costs
// less when it asks for few. A call that fills its ask doubles the next,
// up to len(bufs): a burst is read in full batches after a few calls.
const pollAsk = 8

func (r *rxScratch) init(l *Link) {
	r.l = l
	r.recvFn = r.recvmmsg
	r.grow(link.BatchSize)
}

// grow makes room for n datagrams per call.
func (r *rxScratch) grow(n int) {
	if n <= len(r.hdrs) {
		return
	}
	r.hdrs = make([]mmsghdr, n)
	r.iovs = make([]unix.Iovec, 2*n) // a buffer, and its slot in spill
	r.names = make([]unix.RawSockaddrInet6, n)
	r.oob = make([][rxOOBWords]uint64, n)
	if r.gro {
		r.spill = make([]byte, n*spillSize)
		// Present now, not page by page inside the first burst of
		// joined datagrams (internal/pages); as are the buffers that
		// burst's held packets take, a batch's worth, from one slab.
		pages.Populate(r.spill)
		slab := make([]byte, n*link.BufferSize)
		pages.Populate(slab)
		for i := range n {
			r.held.free = append(r.held.free, slab[i*link.BufferSize:(i+1)*link.BufferSize:(i+1)*link.BufferSize])
		}
	}
	for i := range r.hdrs {
		h := &r.hdrs[i].hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Iov = &r.iovs[2*i]
		h.SetIovlen(1)
		if r.gro {
			r.iovs[2*i+1].Base = &r.spill[i*spillSize]
			r.iovs[2*i+1].SetLen(spillSize)
			h.SetIovlen(2)
		}
		h.Control = (*byte)(unsafe.Pointer(&r.oob[i][0]))
		h.Namelen = unix.SizeofSockaddrInet6
		h.SetControllen(rxOOBWords * 8)
	}
}

// prepare points the first len(bufs) messages at the payload area of each
// buffer, for a datagram of s's family, and resets what the kernel wrote
// back last time. Both are only done where needed: the device hands the
// same buffers to every call, and a call that found nothing changed
// nothing.
func (r *rxScratch) prepare(s *rsock, bufs [][]byte) {
	r.grow(len(bufs))
	r.want = len(bufs)
	r.cur, r.payload = s, headerLen(s.addr.Is4())
	for i, b := range bufs {
		p := b[link.Headroom+r.payload:]
		if v := &r.iovs[2*i]; v.Base != unsafe.SliceData(p) || int(v.Len) != len(p) {
			v.Base = unsafe.SliceData(p)
			v.SetLen(len(p))
		}
	}
	for i := range min(r.n, len(r.hdrs)) {
		h := &r.hdrs[i].hdr
		h.Namelen = unix.SizeofSockaddrInet6
		h.SetControllen(rxOOBWords * 8)
		h.Flags = 0
	}
	r.n, r.errno = 0, 0
}

// recvmmsg reads the datagrams waiting, without waiting for any: none
// leaves prepare's n = 0.
//
// It is a raw system call, which does not tell the Go scheduler: one
// that cannot block (MSG_DONTWAIT) and copies at most a batch, so the
// scheduler has nothing to do meanwhile, and the call a busy-polling
// program makes most costs 240 ns rather than 300 on the development VM.
func (r *rxScratch) recvmmsg(fd int) {
	for {
		n, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(fd),
			uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(r.want), unix.MSG_DONTWAIT, 0, 0)
		switch errno {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return
		}
		r.n, r.errno = int(n), errno
		return
	}
}

// Receive waits for datagrams and returns up to len(bufs) of them as
// whole IP packets: the UDP payload is read to its place behind the IP and
// UDP headers, and the headers are written in front of it (see the package
// documentation). Datagrams that did not fit a buffer are dropped and
// counted in Stats.Truncated. Receive returns link.ErrClosed once the link
// is closed.
func (l *Link) Receive(bufs [][]byte, sizes []int) (int, error) {
	return l.receive(bufs, sizes, true)
}

// TryReceive is Receive without the wait: it returns 0 at once when no
// datagram is waiting. It implements link.Poller.
func (l *Link) TryReceive(bufs [][]byte, sizes []int) (int, error) {
	return l.receive(bufs, sizes, false)
}

// WaitReceive blocks until a datagram is waiting, without reading it, or
// the link is closed. It implements link.Poller.
func (l *Link) WaitReceive() error {
	r := &l.rx
	r.waiters.Add(1)
	defer r.waiters.Add(-1)
	if r.held.n.Load() > 0 || l.mc.n.Load() > 0 {
		return nil
	}
	if _, err := l.sock.WaitReadFor(l.alsoSocks, -1); err != nil {
		if l.closedErr(err) {
			return link.ErrClosed
		}
		return fmt.Errorf("udp: poll: %w", err)
	}
	return nil
}

// WaitReceiveFor is WaitReceive that gives up after timeout. It
// implements link.TimedPoller.
func (l *Link) WaitReceiveFor(timeout time.Duration) (bool, error) {
	r := &l.rx
	r.waiters.Add(1)
	defer r.waiters.Add(-1)
	if r.held.n.Load() > 0 || l.mc.n.Load() > 0 {
		return true, nil
	}
	ready, err := l.sock.WaitWakeable(l.alsoSocks, int((timeout+time.Millisecond-1)/time.Millisecond))
	if err != nil {
		if l.closedErr(err) {
			return false, link.ErrClosed
		}
		return false, fmt.Errorf("udp: poll: %w", err)
	}
	return ready, nil
}

// WakeReceive ends a WaitReceiveFor (link.TimedPoller).
func (l *Link) WakeReceive() { l.sock.Wake() }

// receive reads datagrams with recvmmsg. Blocking, it waits in poll(2)
// while the sockets are empty; not, it answers 0.
func (l *Link) receive(bufs [][]byte, sizes []int, block bool) (int, error) {
	bufs = bufs[:min(len(bufs), len(sizes))]
	if len(bufs) == 0 {
		return 0, nil
	}
	r := &l.rx
	for {
		var k int
		switch {
		case r.held.n.Load() > 0:
			k = r.held.take(bufs, sizes)
		case l.mc.n.Load() > 0:
			k = l.takeGroups(bufs, sizes)
		default:
			var err error
			if k, err = l.readTurn(bufs, sizes, block); err != nil {
				return 0, err
			}
		}
		if k > 0 || !block {
			l.stats.received.Add(uint64(k))
			return k, nil
		}
		if err := l.WaitReceive(); err != nil {
			return 0, err
		}
	}
}

// readTurn reads a batch from the first of the link's sockets that has
// datagrams waiting, beginning with the one after the socket that gave
// the last batch, so that a busy socket does not keep the others waiting,
// and returns how many packets it left in bufs.
func (l *Link) readTurn(bufs [][]byte, sizes []int, block bool) (int, error) {
	r := &l.rx
	for range l.in {
		s := l.in[r.next]
		if r.next++; r.next == len(l.in) {
			r.next = 0
		}
		if k, err := r.read(s, bufs, sizes, block); k > 0 || err != nil {
			return k, err
		}
	}
	return 0, nil
}

// read reads the datagrams waiting on s, without waiting, and returns how
// many packets it left in bufs.
func (r *rxScratch) read(s *rsock, bufs [][]byte, sizes []int, block bool) (int, error) {
	want := len(bufs)
	if !block {
		want = min(want, max(s.ask, pollAsk))
	}
	if s.joined {
		want = 1
	}
	r.prepare(s, bufs[:want])
	if err := s.sock.Do(r.recvFn); err != nil {
		return 0, link.ErrClosed
	}
	if r.errno != 0 {
		// A socket error (an ICMP error queued on the socket, for one)
		// says nothing about the datagrams still to come.
		r.l.stats.receiveErrors.Add(1)
		return 0, nil
	}
	if !block {
		s.ask = 2 * r.n
	}
	if r.n == 0 {
		return 0, nil
	}
	k := r.finish(bufs, sizes)
	if r.held.n.Load() > 0 && r.waiters.Load() > 0 {
		r.l.sock.Kick() // a wait that began before these were held
	}
	return k, nil
}

// finish turns the r.n datagrams just received into IP packets, moving
// each one down over any dropped before it, cuts joined ones, holds what
// does not fit bufs, and returns how many packets it left in bufs.
func (r *rxScratch) finish(bufs [][]byte, sizes []int) int {
	k := 0
	holding := false // from here on every packet is held, to keep their order
	last := r.n - 1
	r.cur.joined = false
	for i := range r.n {
		m := &r.hdrs[i]
		if m.hdr.Flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			r.l.stats.truncated.Add(1)
			continue
		}
		d := r.meta(i)
		n := int(m.n)
		area := bufs[i][link.Headroom+r.payload:]
		seg := d.seg
		if seg <= 0 || seg >= n {
			seg = n
		}
		if seg > len(area) {
			// A datagram, or a joined one's packets, longer than a
			// buffer holds: the kernel would have cut it short.
			r.l.stats.truncated.Add(1)
			continue
		}
		if seg < n {
			r.l.stats.joined.Add(1)
			r.cur.joined = true
		}
		var spill []byte
		if r.gro {
			spill = r.spill[i*spillSize : (i+1)*spillSize]
		}
		for off := 0; off < n; off += seg {
			size := min(seg, n-off)
			switch {
			case off == 0 && !holding:
				// In place, moved down over the datagrams dropped before.
				size = r.synthesize(bufs[i][link.Headroom:], d, size)
				if k != i {
					copy(bufs[k][link.Headroom:], bufs[i][link.Headroom:link.Headroom+size])
				}
			case !holding && i == last && k > i && k < len(bufs):
				// A buffer no datagram of this batch is in.
				pkt := bufs[k][link.Headroom:]
				gather(pkt[r.payload:], area, spill, off, size)
				size = r.synthesize(pkt, d, size)
			default:
				holding = true
				r.held.add(func(b []byte) int {
					gather(b[r.payload:], area, spill, off, size)
					return r.synthesize(b, d, size)
				})
				continue
			}
			sizes[k] = size
			k++
		}
	}
	return k
}

// gather copies bytes off to off+len(dst) of a datagram that filled area
// and went on in spill.
func gather(dst, area, spill []byte, off, n int) {
	if off < len(area) {
		c := copy(dst[:n], area[off:])
		dst, off, n = dst[c:], len(area), n-c
	}
	copy(dst[:n], spill[off-len(area):])
}

// dgram is what the socket told of a datagram besides its payload.
type dgram struct {
	name *[unix.SizeofSockaddrInet6]byte // the sender's sockaddr
	tos  byte
	seg  int // UDP_GRO: the size of each of its packets but the last; 0 if one packet
}

// meta returns what the socket told of datagram i.
func (r *rxScratch) meta(i int) dgram {
	d := dgram{name: (*[unix.SizeofSockaddrInet6]byte)(unsafe.Pointer(&r.names[i]))}
	d.tos, d.seg = controls(unsafe.Slice((*byte)(unsafe.Pointer(&r.oob[i][0])), r.hdrs[i].hdr.Controllen))
	return d
}

// controls returns what a datagram's control messages oob tell: its TOS
// or traffic class, and, of a datagram of several packets (UDP_GRO), the
// size of each but the last (0 if it is one packet).
func controls(oob []byte) (tos byte, seg int) {
	for len(oob) > 0 {
		h, data, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil {
			break
		}
		oob = rest
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			tos = data[0]
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			tos = byte(binary.NativeEndian.Uint32(data))
		case h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && len(data) >= 4:
			seg = int(binary.NativeEndian.Uint32(data))
		}
	}
	return tos, seg
}

// synthesize writes the IP and UDP headers of a packet of datagram d, whose
// n-byte payload is already in place in pkt, and returns the packet's
// length. The socket read is bound to one address, so every datagram it
// gets was sent to it.
func (r *rxScratch) synthesize(pkt []byte, d dgram, n int) int {
	dst := r.cur.addr
	name := d.name
	// sin_port and sin6_port are both at offset 2, in network order.
	sport := binary.BigEndian.Uint16(name[2:4])
	var src netip.Addr
	if dst.Is4() {
		src = netip.AddrFrom4([4]byte(name[4:8])) // sin_addr
	} else {
		src = netip.AddrFrom16([16]byte(name[8:24])) // sin6_addr
	}
	return r.l.headers(pkt, netip.AddrPortFrom(src, sport), dst, d.tos, n)
}

// headerLen is the length of the IP and UDP headers the link writes in
// front of a payload received over IPv4 if v4, else over IPv6.
func headerLen(v4 bool) int {
	if v4 {
		return wire.IPv4Len + wire.UDPLen
	}
	return wire.IPv6Len + wire.UDPLen
}

// headers writes the IP and UDP headers of a datagram from src to dst
// (one of the link's addresses, or a group it joined) at the link's port,
// whose n-byte payload is already in place in pkt, and returns the
// packet's length.
func (l *Link) headers(pkt []byte, src netip.AddrPort, dst netip.Addr, tos byte, n int) int {
	udpLen := uint16(wire.UDPLen + n)
	var ipLen int
	if dst.Is4() {
		ipLen = wire.IPv4Len
		ip := wire.IPv4(pkt[:wire.IPv4Len])
		ip.Encode(&wire.IPv4Fields{
			TOS:      tos,
			TotalLen: wire.IPv4Len + udpLen,
			DontFrag: true, // ID 0, DF, as the link sends
			TTL:      rxHopLimit,
			Protocol: wire.ProtocolUDP,
			Src:      src.Addr(),
			Dst:      dst,
		})
		ip.UpdateChecksum()
	} else {
		ipLen = wire.IPv6Len
		wire.IPv6(pkt[:wire.IPv6Len]).Encode(&wire.IPv6Fields{
			TrafficClass: tos,
			PayloadLen:   udpLen,
			NextHeader:   wire.ProtocolUDP,
			HopLimit:     rxHopLimit,
			Src:          src.Addr(),
			Dst:          dst,
		})
	}
	wire.UDP(pkt[ipLen : ipLen+wire.UDPLen]).Encode(&wire.UDPFields{
		SrcPort: src.Port(),
		DstPort: l.port,
		Length:  udpLen,
		// No checksum, as RoCE v2 senders send.
	})
	return ipLen + int(udpLen)
}

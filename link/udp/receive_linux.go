package udp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/link"
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

// rxOOBWords is room for the control message a datagram carries, IP_TOS
// or IPV6_TCLASS (24 bytes with its header), with room to spare.
const rxOOBWords = 8

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
	payload int                     // offset of the UDP payload from link.Headroom
	ask     int                     // TryReceive's next ask, see pollAsk
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
	r.payload = wire.IPv6Len + wire.UDPLen
	if l.v4 {
		r.payload = wire.IPv4Len + wire.UDPLen
	}
	r.grow(link.BatchSize)
}

// grow makes room for n datagrams per call.
func (r *rxScratch) grow(n int) {
	if n <= len(r.hdrs) {
		return
	}
	r.hdrs = make([]mmsghdr, n)
	r.iovs = make([]unix.Iovec, n)
	r.names = make([]unix.RawSockaddrInet6, n)
	r.oob = make([][rxOOBWords]uint64, n)
	for i := range r.hdrs {
		h := &r.hdrs[i].hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Iov = &r.iovs[i]
		h.SetIovlen(1)
		h.Control = (*byte)(unsafe.Pointer(&r.oob[i][0]))
		h.Namelen = unix.SizeofSockaddrInet6
		h.SetControllen(rxOOBWords * 8)
	}
}

// prepare points the first len(bufs) messages at the payload area of each
// buffer and resets what the kernel wrote back last time. Both are only
// done where needed: the device hands the same buffers to every call, and
// a call that found nothing changed nothing.
func (r *rxScratch) prepare(bufs [][]byte) {
	r.grow(len(bufs))
	r.want = len(bufs)
	for i, b := range bufs {
		p := b[link.Headroom+r.payload:]
		if r.iovs[i].Base != unsafe.SliceData(p) || int(r.iovs[i].Len) != len(p) {
			r.iovs[i].Base = unsafe.SliceData(p)
			r.iovs[i].SetLen(len(p))
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
	if err := l.sock.Wait(unix.POLLIN); err != nil {
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
	ready, err := l.sock.WaitFor(unix.POLLIN, int((timeout+time.Millisecond-1)/time.Millisecond))
	if err != nil {
		if l.closedErr(err) {
			return false, link.ErrClosed
		}
		return false, fmt.Errorf("udp: poll: %w", err)
	}
	return ready, nil
}

// receive reads datagrams with recvmmsg. Blocking, it waits in poll(2)
// while the socket is empty; not, it answers 0.
func (l *Link) receive(bufs [][]byte, sizes []int, block bool) (int, error) {
	want := min(len(bufs), len(sizes))
	if want == 0 {
		return 0, nil
	}
	r := &l.rx
	if !block {
		want = min(want, max(r.ask, pollAsk))
	}
	for {
		r.prepare(bufs[:want])
		if err := l.sock.Do(r.recvFn); err != nil {
			return 0, link.ErrClosed
		}
		if r.errno != 0 {
			// A socket error (an ICMP error queued on the socket, for
			// one) says nothing about the datagrams still to come.
			l.stats.receiveErrors.Add(1)
			if !block {
				return 0, nil
			}
			continue
		}
		if !block {
			r.ask = 2 * r.n
		}
		if r.n == 0 {
			if !block {
				return 0, nil
			}
			if err := l.WaitReceive(); err != nil {
				return 0, err
			}
			continue
		}
		if k := r.finish(bufs, sizes); k > 0 || !block {
			l.stats.received.Add(uint64(k))
			return k, nil
		}
	}
}

// finish turns the r.n datagrams just received into IP packets, moving
// each one down over any dropped before it, and returns how many it kept.
func (r *rxScratch) finish(bufs [][]byte, sizes []int) int {
	k := 0
	for i := range r.n {
		m := &r.hdrs[i]
		if m.hdr.Flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			r.l.stats.truncated.Add(1)
			continue
		}
		size := r.synthesize(bufs[i][link.Headroom:], i, int(m.n))
		if k != i {
			copy(bufs[k][link.Headroom:], bufs[i][link.Headroom:link.Headroom+size])
		}
		sizes[k] = size
		k++
	}
	return k
}

// synthesize writes the IP and UDP headers of datagram i, whose n-byte
// payload is already in place in pkt, and returns the packet's length.
func (r *rxScratch) synthesize(pkt []byte, i, n int) int {
	l := r.l
	name := (*[unix.SizeofSockaddrInet6]byte)(unsafe.Pointer(&r.names[i]))
	oob := unsafe.Slice((*byte)(unsafe.Pointer(&r.oob[i][0])), r.hdrs[i].hdr.Controllen)
	var tos byte
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
		}
	}
	// sin_port and sin6_port are both at offset 2, in network order.
	sport := binary.BigEndian.Uint16(name[2:4])
	udpLen := uint16(wire.UDPLen + n)
	var ipLen int
	// The socket is bound to the link's address, so every datagram it gets
	// was sent to it.
	if l.v4 {
		ipLen = wire.IPv4Len
		ip := wire.IPv4(pkt[:wire.IPv4Len])
		ip.Encode(&wire.IPv4Fields{
			TOS:      tos,
			TotalLen: wire.IPv4Len + udpLen,
			DontFrag: true, // ID 0, DF, as the link sends
			TTL:      rxHopLimit,
			Protocol: wire.ProtocolUDP,
			Src:      netip.AddrFrom4([4]byte(name[4:8])), // sin_addr
			Dst:      l.addr,
		})
		ip.UpdateChecksum()
	} else {
		ipLen = wire.IPv6Len
		wire.IPv6(pkt[:wire.IPv6Len]).Encode(&wire.IPv6Fields{
			TrafficClass: tos,
			PayloadLen:   udpLen,
			NextHeader:   wire.ProtocolUDP,
			HopLimit:     rxHopLimit,
			Src:          netip.AddrFrom16([16]byte(name[8:24])), // sin6_addr
			Dst:          l.addr,
		})
	}
	wire.UDP(pkt[ipLen : ipLen+wire.UDPLen]).Encode(&wire.UDPFields{
		SrcPort: sport,
		DstPort: l.port,
		Length:  udpLen,
		// No checksum, as RoCE v2 senders send.
	})
	return ipLen + int(udpLen)
}

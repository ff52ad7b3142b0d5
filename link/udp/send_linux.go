package udp

import (
	"encoding/binary"
	"errors"
	"math"
	"net/netip"
	"slices"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/pollfd"
	"github.com/gorxe/gorxe/wire"
)

// ECN and the TOS byte.
//
// The link sends each packet with the traffic class byte the device wrote
// (its DSCP picks a switch priority, as on a RoCE NIC), except that a
// packet the device left Not-ECT leaves as ECT(0): RoCE v2 congestion
// control (DCQCN) relies on switches marking CE, which they do only to
// ECN-capable packets, and the ICRC does not cover the byte. The socket's
// own TOS is ECT(0), so the common case, DSCP 0, needs no control message;
// any other byte goes in an IP_TOS / IPV6_TCLASS control message on that
// packet alone. The TOS is then as cheap as a socket option when it is
// unused and exact when it is (BenchmarkSendReceive/tos measures the cost).
const (
	ecnMask    = 0x03
	ect0       = 0x02
	defaultTOS = ect0
)

// sendTOS returns the TOS byte a packet the device marked tc leaves with.
func sendTOS(tc byte) byte {
	if tc&ecnMask == 0 {
		tc |= ect0
	}
	return tc
}

// Runs of packets go out as one datagram (UDP GSO).
//
// A QP sends a message as a run of equally long packets to one peer, and
// the kernel's send path costs far more per datagram than the bytes it
// copies. So the link hands the kernel each such run, up to gsoMaxSegments
// packets, as one datagram with a UDP_SEGMENT control message, and the
// kernel (or the NIC) cuts it back into the same packets. A run ends at a
// packet to another destination or with another TOS byte, and after a
// shorter packet: only the last segment may be short.
//
// Over IPv4 the ICRC covers the IP Identification. The device computed
// every ICRC for ID 0, the ID the kernel gives a DF datagram from an
// unconnected socket; when the kernel cuts a datagram it numbers the
// segments' IDs on from there, so segment k leaves with ID k. Its ICRC
// therefore goes in an iovec of its own, recomputed for ID k
// (wire.IDShift), and the device's buffer is left as it was.
// test/ checks the result on the wire, cut by the kernel's software
// segmentation, against tshark and gorxe decode.
//
// Send's runs are of packets that carry data, at least gsoMinSegment
// bytes each. Joining small ones, such as a short message and the ACK
// sent behind it, has the receiver see the first packet later, with the
// second: a receiver that busy polls answers later, 1 to 3 µs a write_lat
// round trip between two namespaces. A receiver that sleeps gains: it
// wakes once for the datagram, and the sender's system call, which the
// receiver woken on its CPU waits out, delivers one datagram, not two (a
// sleeping write_lat round trip 15 to 30% shorter). So SendJoined, which
// the device calls when its program does not busy poll (link.Joiner),
// joins packets of any length.
//
// A capture on the sending host sees the datagram before the cut, as it
// sees TCP before segmentation offload. Config.NoGSO turns runs off, and
// so does the first error that says the kernel cannot send them.
const (
	gsoMaxSegments = 64 // UDP_MAX_SEGMENTS before Linux 6.10, 128 since
	gsoMinSegment  = 512
	noRuns         = math.MaxInt // the smallest packet that starts a run when none may
	gsoMaxV4       = 0xffff - wire.IPv4Len - wire.UDPLen
	gsoMaxV6       = 0xffff - wire.UDPLen
)

// txScratch is one Send call's sendmmsg arguments. Send takes one from the
// link's pool, so concurrent Sends do not share them. Message i carries
// count[i] packets, bufs[first[i]] and the count[i]-1 after it.
type txScratch struct {
	hdrs  [link.BatchSize]mmsghdr
	iov   [2 * link.BatchSize]unix.Iovec // each packet's payload, and its recomputed ICRC
	names [link.BatchSize]unix.RawSockaddrInet6
	oob   [link.BatchSize][txOOBWords]uint64 // TOS and UDP_SEGMENT control messages; uint64 for alignment
	icrcs [link.BatchSize][wire.ICRCLen]byte
	dsts  [link.BatchSize]netip.Addr // message i's destination
	ports [link.BatchSize]uint16     // and port
	n     int                        // sendmmsg's answer: messages sent
	errno unix.Errno                 // or why the first could not go
	fn    func(fd int)               // s.sendmmsg, bound once so that Send does not allocate
	from  int                        // the first message sendmmsg is to send
	k     int                        // the messages built
	nio   int                        // the iovecs build filled
	keep  [][]byte                   // with Config.Also: the packets of one socket
	via   []int                      // and which socket each packet leaves from: 0 the link's own, i Config.Also[i-1]

	// Per message: where its packets and iovecs start, how many malformed
	// packets came before it, how many packets it has, their size (the
	// first's), its payload bytes, its TOS byte.
	first, iov0, bad, count, seg, bytes [link.BatchSize]int
	tos                                 [link.BatchSize]byte
}

// sender is one socket's send path: the link's own socket, or one of
// Config.Also's.
type sender struct {
	l     *Link
	sock  *pollfd.FD
	v4    bool
	scope uint32      // the index of the socket's address's IPv6 zone, for link-local destinations
	gso   atomic.Bool // runs go out as one datagram
}

// txOOBWords is room for two control messages of at most an int each:
// CmsgSpace(4) is 24 bytes on 64-bit Linux.
const txOOBWords = 6

// Send sends the UDP payload of each packet to the destination address
// and port in its headers, from the socket of the source address in its
// headers when that is one of Config.Also's, else from the link's own.
// Packets that are malformed, of the other address family than their
// socket's, or refused by the kernel (no route, larger than the path MTU)
// are counted in Stats.SendErrors and skipped; they are not an error.
// Send returns link.ErrClosed once the link is closed.
func (l *Link) Send(bufs [][]byte) error { return l.send(bufs, false) }

// SendJoined is Send that joins consecutive packets to one destination
// into one datagram whatever their length (link.Joiner).
func (l *Link) SendJoined(bufs [][]byte) error { return l.send(bufs, true) }

func (l *Link) send(bufs [][]byte, join bool) error {
	if l.closed.Load() {
		return link.ErrClosed
	}
	s := l.txPool.Get().(*txScratch)
	defer l.txPool.Put(s)
	if len(l.also) == 0 {
		return l.sender.send(s, bufs, join)
	}
	// Each packet leaves from the socket of its source address (l.addrs[i]
	// is l.also[i-1]'s); a source that is none of them, from the link's own.
	s.via = s.via[:0]
	for _, b := range bufs {
		_, src, _, _, _, ok := l.parse(b)
		i := 0
		if ok {
			i = max(0, slices.Index(l.addrs, src))
		}
		s.via = append(s.via, i)
	}
	defer func() { clear(s.keep[:cap(s.keep)]) }() // do not keep the caller's buffers alive
	for i := range 1 + len(l.also) {
		x := &l.sender
		if i > 0 {
			x = l.also[i-1]
		}
		s.keep = s.keep[:0]
		for j, b := range bufs {
			if s.via[j] == i {
				s.keep = append(s.keep, b)
			}
		}
		if err := x.send(s, s.keep, join); err != nil {
			return err
		}
	}
	return nil
}

// send sends bufs through x's socket, in batches of link.BatchSize,
// joining runs of packets of any length if join.
func (x *sender) send(s *txScratch, bufs [][]byte, join bool) error {
	minRun := noRuns
	if x.gso.Load() {
		minRun = gsoMinSegment
		if join {
			minRun = 0
		}
	}
	for len(bufs) > 0 {
		n := min(len(bufs), link.BatchSize)
		if err := x.sendBatch(s, bufs[:n], minRun); err != nil {
			return err
		}
		bufs = bufs[n:]
	}
	return nil
}

// sendBatch sends up to link.BatchSize packets, runs of them as one
// datagram where their packets are at least minRun bytes.
func (x *sender) sendBatch(s *txScratch, bufs [][]byte, minRun int) error {
	l := x.l
	k, bad := x.build(s, bufs, minRun)
	var sent, runs uint64
	failed := uint64(bad)
	built := s.nio
	defer func() {
		// Do not keep the caller's buffers alive; a retry packet by packet
		// below builds again, over fewer or more iovecs.
		clear(s.iov[:max(built, s.nio)])
		l.stats.sent.Add(sent)
		l.stats.runs.Add(runs)
		l.stats.sendErrors.Add(failed)
	}()
	for i := 0; i < k; {
		n, err := x.sendmmsg(s, i, k)
		for _, c := range s.count[i : i+n] {
			sent += uint64(c)
			if c > 1 {
				runs++
			}
		}
		i += n
		if err == nil {
			if n == 0 {
				for _, c := range s.count[i:k] {
					failed += uint64(c) // not expected from sendmmsg; never spin
				}
				break
			}
			continue
		}
		if l.closedErr(err) {
			return link.ErrClosed
		}
		if s.count[i] > 1 {
			// The kernel refused a run: send the rest of the batch packet
			// by packet, so that only the packets at fault are lost (and
			// counted, with the malformed ones among the rest, then). If
			// it cannot send runs at all, send none from now on.
			if gsoUnsupported(err) {
				x.gso.Store(false)
			}
			failed -= uint64(bad - s.bad[i])
			return x.sendBatch(s, bufs[s.first[i]:], noRuns)
		}
		// sendmmsg fails only on its first datagram; the ones after it
		// may still go (another destination, a smaller packet).
		failed += uint64(s.count[i])
		i++
	}
	return nil
}

// gsoUnsupported reports whether a send error says the kernel cannot send
// UDP_SEGMENT datagrams at all (no checksum offload on the device, a
// kernel without UDP GSO), rather than that this one could not go.
func gsoUnsupported(err error) bool {
	return errors.Is(err, unix.EIO) || errors.Is(err, unix.ENOPROTOOPT) || errors.Is(err, unix.EOPNOTSUPP)
}

// build fills s with bufs' packets, one message per run of packets of at
// least minRun bytes, and returns the number of messages and of packets
// it could not send (malformed). A run's packets are as long as its
// first, which fits the link's MTU, except that the last may be shorter.
func (x *sender) build(s *txScratch, bufs [][]byte, minRun int) (k, bad int) {
	l := x.l
	nio := 0
	maxBytes, maxSeg := gsoMaxV6, l.mtu-wire.IPv6Len-wire.UDPLen
	if x.v4 {
		maxBytes, maxSeg = gsoMaxV4, l.mtu-wire.IPv4Len-wire.UDPLen
	}
	// The IDShift of the last transport length seen: a run's packets share
	// one, but for its last, and finding it costs as much as an ICRC.
	var shift wire.IDShift
	shiftLen := -1
	for j, buf := range bufs {
		dst, _, port, tos, payload, ok := l.parse(buf)
		if !ok || dst.Is4() != x.v4 {
			bad++
			continue
		}
		if i := k - 1; i >= 0 && s.count[i] < gsoMaxSegments && s.seg[i] >= minRun && s.seg[i] <= maxSeg &&
			len(payload) <= s.seg[i] && s.bytes[i] == s.count[i]*s.seg[i] && s.bytes[i]+len(payload) <= maxBytes &&
			tos == s.tos[i] && port == s.ports[i] && dst == s.dsts[i] {
			if x.v4 {
				// Segment count[i] of the run leaves with IP ID count[i].
				n := len(payload) - wire.ICRCLen
				if n != shiftLen {
					shift, shiftLen = wire.IPv4IDShift(n), n
				}
				icrc := shift.ICRC(binary.LittleEndian.Uint32(payload[n:]), 0, uint16(s.count[i]))
				binary.LittleEndian.PutUint32(s.icrcs[j][:], icrc)
				pollfd.SetIovec(&s.iov[nio], payload[:n])
				pollfd.SetIovec(&s.iov[nio+1], s.icrcs[j][:])
				nio += 2
			} else {
				pollfd.SetIovec(&s.iov[nio], payload)
				nio++
			}
			s.count[i]++
			s.bytes[i] += len(payload)
			continue
		}
		s.first[k], s.bad[k], s.iov0[k], s.count[k], s.seg[k], s.bytes[k], s.tos[k] = j, bad, nio, 1, len(payload), len(payload), tos
		s.dsts[k], s.ports[k] = dst, port
		pollfd.SetIovec(&s.iov[nio], payload)
		nio++
		k++
	}
	s.nio = nio
	for i := range k {
		end := nio
		if i+1 < k {
			end = s.iov0[i+1]
		}
		h := &s.hdrs[i].hdr
		h.Iov = &s.iov[s.iov0[i]]
		h.SetIovlen(end - s.iov0[i])
		h.Name, h.Namelen = x.sockaddr(&s.names[i], s.dsts[i], s.ports[i])
		oob := x.control(s, i)
		h.Control = unsafe.SliceData(oob)
		h.SetControllen(len(oob))
	}
	return k, bad
}

// sockaddr writes dst:port as the socket family's address into name and
// returns it as msghdr's name and length.
func (x *sender) sockaddr(name *unix.RawSockaddrInet6, dst netip.Addr, port uint16) (*byte, uint32) {
	if x.v4 {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(name))
		*sa = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: dst.As4()}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], port)
		return (*byte)(unsafe.Pointer(sa)), unix.SizeofSockaddrInet4
	}
	*name = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: dst.As16()}
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&name.Port))[:], port)
	if dst.IsLinkLocalUnicast() {
		name.Scope_id = x.scope
	}
	return (*byte)(unsafe.Pointer(name)), unix.SizeofSockaddrInet6
}

// sendmmsg sends messages [from, k) of s, waiting in poll(2) while the
// socket's buffer is full. It returns how many went, and the error that
// stopped the first that did not.
func (x *sender) sendmmsg(s *txScratch, from, k int) (int, error) {
	s.from, s.k = from, k
	for {
		s.n, s.errno = 0, 0
		if err := x.sock.Do(s.fn); err != nil {
			return 0, err
		}
		if s.errno != unix.EAGAIN {
			break
		}
		if err := x.sock.Wait(unix.POLLOUT); err != nil {
			return 0, err
		}
	}
	if s.errno != 0 {
		return s.n, s.errno
	}
	return s.n, nil
}

// A small send, at most rawSendBytes in all, is a raw system call, which
// does not tell the Go scheduler: with MSG_DONTWAIT it cannot block, and
// it is over in microseconds, so the scheduler has nothing to do
// meanwhile. That saves 60 ns on the development VM, on every answer a
// latency test sends. A larger one can keep the CPU for a millisecond
// (a batch of GSO runs), which the scheduler should know about.
const rawSendBytes = 16 << 10

func (s *txScratch) sendmmsg(fd int) {
	bytes := 0
	for _, b := range s.bytes[s.from:s.k] {
		bytes += b
	}
	syscall6 := unix.Syscall6
	if bytes <= rawSendBytes {
		syscall6 = unix.RawSyscall6
	}
	for {
		n, _, errno := syscall6(unix.SYS_SENDMMSG, uintptr(fd),
			uintptr(unsafe.Pointer(&s.hdrs[s.from])), uintptr(s.k-s.from), unix.MSG_DONTWAIT, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno == 0 {
			s.n = int(n)
		}
		s.errno = errno
		return
	}
}

// control returns message i's control messages: the TOS byte when it is
// not the socket's, and the segment size when the message is a run.
func (x *sender) control(s *txScratch, i int) []byte {
	oob := unsafe.Slice((*byte)(unsafe.Pointer(&s.oob[i][0])), txOOBWords*8)
	n := 0
	if tos := sendTOS(s.tos[i]); tos != defaultTOS {
		n += putTOS(oob[n:], x.v4, tos)
	}
	if s.count[i] > 1 {
		n += putCmsg(oob[n:], unix.SOL_UDP, unix.UDP_SEGMENT, uint32(s.seg[i]), 2)
	}
	if n == 0 {
		return nil
	}
	return oob[:n]
}

// putTOS writes the control message that sends a packet over IPv4 (if
// v4) or IPv6 with the TOS or traffic class byte tos, and returns its
// length.
func putTOS(oob []byte, v4 bool, tos byte) int {
	if v4 {
		return putCmsg(oob, unix.IPPROTO_IP, unix.IP_TOS, uint32(tos), 4)
	}
	return putCmsg(oob, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, uint32(tos), 4)
}

// putCmsg writes a control message of the level and type whose value v
// is size bytes (2 or 4) at the start of oob, which must be 8-byte
// aligned, and returns its length with padding.
func putCmsg(oob []byte, level, typ int, v uint32, size int) int {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = int32(level), int32(typ)
	h.SetLen(unix.CmsgLen(size))
	if size == 2 {
		binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(v))
	} else {
		binary.NativeEndian.PutUint32(oob[unix.CmsgLen(0):], v)
	}
	return unix.CmsgSpace(size)
}

// parse returns the destination, source, destination port, TOS byte and
// UDP payload of the packet in buf, and whether it is well formed.
func (l *Link) parse(buf []byte) (dst, src netip.Addr, port uint16, tc byte, payload []byte, ok bool) {
	if len(buf) < link.Headroom+1 {
		return
	}
	pkt := buf[link.Headroom:]
	var udp []byte
	switch pkt[0] >> 4 {
	case 4:
		ip := wire.IPv4(pkt)
		ihl := ip.HeaderLen()
		if ihl < wire.IPv4Len || len(pkt) < ihl+wire.UDPLen || ip.Protocol() != wire.ProtocolUDP {
			return
		}
		total := int(ip.TotalLen())
		if total < ihl+wire.UDPLen || total > len(pkt) {
			return
		}
		tc = ip.TOS()
		udp = pkt[ihl:total]
		dst, src = ip.Dst(), ip.Src()
	case 6:
		ip := wire.IPv6(pkt)
		if len(pkt) < wire.IPv6Len+wire.UDPLen || ip.NextHeader() != wire.ProtocolUDP {
			return
		}
		total := wire.IPv6Len + int(ip.PayloadLen())
		if total < wire.IPv6Len+wire.UDPLen || total > len(pkt) {
			return
		}
		tc = ip.TrafficClass()
		udp = pkt[wire.IPv6Len:total]
		dst, src = ip.Dst(), ip.Src()
	default:
		return
	}
	h := wire.UDP(udp)
	ulen := int(h.Length())
	if ulen < wire.UDPLen+wire.ICRCLen || ulen > len(udp) {
		return
	}
	return dst, src, h.DstPort(), tc, udp[wire.UDPLen:ulen], true
}

package udp

import (
	"encoding/binary"
	"net"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/link"
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

// txScratch is one Send call's sendmmsg arguments. Send takes one from the
// link's pool, so concurrent Sends do not share them.
type txScratch struct {
	ms    [link.BatchSize]ipv4.Message // ipv4.Message and ipv6.Message are one type
	iov   [link.BatchSize][1][]byte
	addrs [link.BatchSize]net.UDPAddr
	ips   [link.BatchSize][16]byte
	oob   [link.BatchSize][txOOBWords]uint64 // one TOS control message each; uint64 for alignment
}

// txOOBWords is room for one control message carrying an int: CmsgSpace(4)
// is 24 bytes on 64-bit Linux, 16 on 32-bit.
const txOOBWords = 4

func (l *Link) newTxScratch() *txScratch {
	s := new(txScratch)
	level, typ := unix.IPPROTO_IP, unix.IP_TOS
	if !l.v4 {
		level, typ = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
	}
	for i := range s.ms {
		s.ms[i].Buffers = s.iov[i][:]
		s.ms[i].Addr = &s.addrs[i]
		h := (*unix.Cmsghdr)(unsafe.Pointer(&s.oob[i][0]))
		h.Level, h.Type = int32(level), int32(typ)
		h.SetLen(unix.CmsgLen(4))
	}
	return s
}

// oobBytes returns slot i's control message buffer.
func (s *txScratch) oobBytes(i int) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&s.oob[i][0])), unix.CmsgSpace(4))
}

// Send sends the UDP payload of each packet to the destination address
// and port in its headers. Packets that are malformed, of the other
// address family, or refused by the kernel (no route, larger than the path
// MTU) are counted in Stats.SendErrors and skipped; they are not an error.
// Send returns link.ErrClosed once the link is closed.
func (l *Link) Send(bufs [][]byte) error {
	if l.closed.Load() {
		return link.ErrClosed
	}
	s := l.txPool.Get().(*txScratch)
	defer l.txPool.Put(s)
	for len(bufs) > 0 {
		n := min(len(bufs), link.BatchSize)
		if err := l.sendBatch(s, bufs[:n]); err != nil {
			return err
		}
		bufs = bufs[n:]
	}
	return nil
}

// sendBatch sends up to link.BatchSize packets.
func (l *Link) sendBatch(s *txScratch, bufs [][]byte) error {
	k := 0
	for _, buf := range bufs {
		if l.fill(s, k, buf) {
			k++
		} else {
			l.stats.sendErrors.Add(1)
		}
	}
	defer func() {
		for i := range k {
			s.iov[i][0] = nil // do not keep the caller's buffers alive
		}
	}()
	var sent, failed uint64
	for i := 0; i < k; {
		n, err := l.write(s.ms[i:k], 0)
		n = max(n, 0)
		sent += uint64(n)
		i += n
		if err != nil {
			if l.closedErr(err) {
				l.stats.sent.Add(sent)
				l.stats.sendErrors.Add(failed)
				return link.ErrClosed
			}
			// sendmmsg fails only on its first datagram; the ones after
			// it may still go (another destination, a smaller packet).
			failed++
			i++
		} else if n == 0 {
			failed += uint64(k - i) // not expected from sendmmsg; never spin
			break
		}
	}
	l.stats.sent.Add(sent)
	l.stats.sendErrors.Add(failed)
	return nil
}

// fill points message i of s at the UDP payload of the packet in buf and
// its destination, and reports whether the packet is one the link can send.
func (l *Link) fill(s *txScratch, i int, buf []byte) bool {
	if len(buf) < link.Headroom+1 {
		return false
	}
	pkt := buf[link.Headroom:]
	var tc byte
	var udp []byte
	a := &s.addrs[i]
	switch pkt[0] >> 4 {
	case 4:
		ihl := int(pkt[0]&0x0f) * 4
		if !l.v4 || ihl < wire.IPv4Len || len(pkt) < ihl+wire.UDPLen || pkt[9] != unix.IPPROTO_UDP {
			return false
		}
		total := int(binary.BigEndian.Uint16(pkt[2:]))
		if total < ihl+wire.UDPLen || total > len(pkt) {
			return false
		}
		tc = pkt[1]
		udp = pkt[ihl:total]
		a.IP = append(s.ips[i][:0], pkt[16:20]...)
		a.Zone = ""
	case 6:
		if l.v4 || len(pkt) < wire.IPv6Len+wire.UDPLen || pkt[6] != unix.IPPROTO_UDP {
			return false
		}
		total := wire.IPv6Len + int(binary.BigEndian.Uint16(pkt[4:]))
		if total < wire.IPv6Len+wire.UDPLen || total > len(pkt) {
			return false
		}
		tc = pkt[0]<<4 | pkt[1]>>4
		udp = pkt[wire.IPv6Len:total]
		a.IP = append(s.ips[i][:0], pkt[24:40]...)
		a.Zone = ""
		if l.zone != "" && a.IP.IsLinkLocalUnicast() {
			a.Zone = l.zone
		}
	default:
		return false
	}
	ulen := int(binary.BigEndian.Uint16(udp[4:]))
	if ulen < wire.UDPLen || ulen > len(udp) {
		return false
	}
	a.Port = int(binary.BigEndian.Uint16(udp[2:]))
	s.iov[i][0] = udp[wire.UDPLen:ulen]
	m := &s.ms[i]
	m.OOB = nil
	if tos := sendTOS(tc); tos != defaultTOS {
		oob := s.oobBytes(i)
		binary.NativeEndian.PutUint32(oob[unix.CmsgLen(0):], uint32(tos))
		m.OOB = oob
	}
	return true
}

package mem

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"time"

	"github.com/gorxe/gorxe/link"
)

// packet is a fabric-owned copy of one IP packet on its way to a receiver.
// Packets are pooled, so the steady state allocates nothing per packet.
type packet struct {
	n   int
	dst netip.Addr // routing key of the destination, read before any corruption
	at  time.Time  // when a scheduled packet is due at the receiver
	ord uint64     // arrival order in the reorder window
	b   [link.MaxPacket]byte
}

var packetPool = sync.Pool{New: func() any { return new(packet) }}

// getPacket returns a pooled packet holding a copy of b.
func getPacket(b []byte) *packet {
	p := packetPool.Get().(*packet)
	p.n = copy(p.b[:], b)
	return p
}

func putPacket(p *packet) {
	p.at = time.Time{}
	packetPool.Put(p)
}

// ring is a FIFO of packets that grows by doubling.
type ring struct {
	buf  []*packet // length is zero or a power of two
	head int
	n    int
}

func (r *ring) push(p *packet) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = p
	r.n++
}

func (r *ring) grow() {
	nb := make([]*packet, max(64, 2*len(r.buf)))
	for i := range r.n {
		nb[i] = r.buf[(r.head+i)&(len(r.buf)-1)]
	}
	r.buf, r.head = nb, 0
}

func (r *ring) peek() *packet { return r.buf[r.head] }

func (r *ring) pop() *packet {
	p := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	return p
}

// Header layout the fabric reads: just enough of IPv4 (RFC 791), IPv6
// (RFC 8200), UDP and the BTH to route a packet, mark ECN, and keep
// corruption to the bits the RoCE v2 ICRC covers.
const (
	ipv4Len  = 20
	ipv6Len  = 40
	udpLen   = 8
	protoUDP = 17
	rocePort = 4791 // RoCE v2 UDP destination port
	ecnMask  = 0x3
	ecnCE    = 0x3
)

// dstAddr returns the routing key of the packet's IP destination.
func dstAddr(pkt []byte) (netip.Addr, bool) {
	if len(pkt) == 0 {
		return netip.Addr{}, false
	}
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) >= ipv4Len {
			return netip.AddrFrom4([4]byte(pkt[16:20])), true
		}
	case 6:
		if len(pkt) >= ipv6Len {
			return netip.AddrFrom16([16]byte(pkt[24:40])).Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// ecn returns the packet's ECN field (RFC 3168).
func ecn(pkt []byte) byte {
	if pkt[0]>>4 == 4 {
		return pkt[1] & ecnMask
	}
	return pkt[1] >> 4 & ecnMask
}

// ipLen returns the length of the IP header and the packet length the IP
// header gives, or 0 for the latter if it is implausible.
func ipLen(pkt []byte) (hdr, total int) {
	if pkt[0]>>4 == 4 {
		hdr = int(pkt[0]&0x0f) * 4
		total = int(binary.BigEndian.Uint16(pkt[2:]))
	} else {
		hdr = ipv6Len
		total = ipv6Len + int(binary.BigEndian.Uint16(pkt[4:]))
	}
	if total < hdr {
		total = 0
	}
	return hdr, total
}

// variantBits returns the bits of pkt[off] that the RoCE v2 ICRC does not
// cover because routers may change them (IBTA Annex A17.3.3): IPv4 TOS,
// TTL and header checksum; IPv6 traffic class, flow label and hop limit;
// the UDP checksum; the BTH byte holding FECN, BECN and Resv6.
func variantBits(pkt []byte, off int) byte {
	var proto byte
	if pkt[0]>>4 == 4 {
		switch off {
		case 1, 8, 10, 11:
			return 0xff
		}
		proto = pkt[9]
	} else {
		switch off {
		case 0:
			return 0x0f
		case 1, 2, 3, 7:
			return 0xff
		}
		proto = pkt[6]
	}
	hdr, _ := ipLen(pkt)
	if proto != protoUDP || off < hdr {
		return 0
	}
	switch off - hdr {
	case 6, 7:
		return 0xff
	case udpLen + 4:
		if len(pkt) >= hdr+4 && binary.BigEndian.Uint16(pkt[hdr+2:]) == rocePort {
			return 0xff
		}
	}
	return 0
}

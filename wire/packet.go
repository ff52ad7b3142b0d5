// Package wire reads and writes whole RoCE v2 packets: an IPv4 or IPv6
// header, a UDP header to port 4791, the InfiniBand Base Transport Header,
// the extended headers its opcode calls for, the payload, pad bytes and the
// 4-byte Invariant CRC (IBTA Vol 1 ch. 9; Annex A17, RoCE v2).
//
// Parsing fills a Packet with views into the caller's bytes and allocates
// nothing; building appends to the caller's slice. The header packages
// under wire/ hold the layouts; this package knows which headers an opcode
// carries, checks lengths once at the boundary, and computes the ICRC.
package wire

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/atomiceth"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/deth"
	"github.com/gorxe/gorxe/wire/feth"
	"github.com/gorxe/gorxe/wire/immdt"
	"github.com/gorxe/gorxe/wire/reth"
)

// UDPPort is the IANA-assigned UDP destination port of RoCE v2.
const UDPPort = 4791

// ICRCLen is the length of the Invariant CRC that ends every packet.
const ICRCLen = 4

// Header lengths of the layers below the transport.
const (
	EthernetLen = 14
	IPv4Len     = 20
	IPv6Len     = 40
	UDPLen      = 8
)

// Errors returned by the parsers. Each names the first rule the bytes broke.
var (
	ErrTruncated   = errors.New("wire: packet truncated")
	ErrNotIP       = errors.New("wire: not an IPv4 or IPv6 packet")
	ErrIPOptions   = errors.New("wire: IPv4 options are not allowed in RoCE v2")
	ErrFragment    = errors.New("wire: IP fragment")
	ErrNotUDP      = errors.New("wire: not a UDP packet")
	ErrLength      = errors.New("wire: IP or UDP length does not match the packet")
	ErrTVer        = errors.New("wire: unsupported BTH transport version")
	ErrOpcode      = errors.New("wire: unsupported opcode")
	ErrPad         = errors.New("wire: pad count does not align the payload to 4 bytes")
	ErrPayload     = errors.New("wire: payload on an opcode that carries none")
	ErrICRC        = errors.New("wire: ICRC mismatch")
	ErrNoIPHeader  = errors.New("wire: ICRC needs the IP header, which this packet was parsed without")
	ErrAddrFamily  = errors.New("wire: source and destination must both be IPv4 or both IPv6")
	ErrNotEthernet = errors.New("wire: not an IPv4 or IPv6 Ethernet frame")
)

// Packet is a parsed RoCE v2 packet: views into the bytes it was parsed
// from, valid while those bytes are. Headers the opcode does not carry are
// nil; so are IP and UDP when the packet was parsed from a UDP payload.
type Packet struct {
	Eth       []byte // Ethernet header with any VLAN tags, when parsed from a frame
	IP        []byte // IPv4 (20 bytes) or IPv6 (40 bytes) header
	UDP       []byte // UDP header
	BTH       bth.Header
	DETH      deth.Header
	FETH      feth.Header
	RETH      reth.Header
	AtomicETH atomiceth.Header
	AETH      aeth.Header
	AtomicAck atomiceth.AckHeader
	ImmDt     immdt.Header
	IETH      immdt.IETH
	Payload   []byte
	Pad       []byte // PadCnt bytes after the payload
	Info      *OpInfo

	transport []byte // BTH through pad: what the ICRC covers after IP and UDP
	icrc      []byte
}

// IPVersion returns 4 or 6, or 0 for a packet parsed without its IP header.
func (p *Packet) IPVersion() int {
	if len(p.IP) == 0 {
		return 0
	}
	return int(p.IP[0] >> 4)
}

// Src returns the IP source address, or the zero Addr without an IP header.
func (p *Packet) Src() netip.Addr {
	switch p.IPVersion() {
	case 4:
		return IPv4(p.IP).Src()
	case 6:
		return IPv6(p.IP).Src()
	}
	return netip.Addr{}
}

// Dst returns the IP destination address, or the zero Addr without an IP
// header.
func (p *Packet) Dst() netip.Addr {
	switch p.IPVersion() {
	case 4:
		return IPv4(p.IP).Dst()
	case 6:
		return IPv6(p.IP).Dst()
	}
	return netip.Addr{}
}

// ECN returns the two ECN bits of the IP header (3 is Congestion
// Experienced), or 0 without an IP header.
func (p *Packet) ECN() uint8 { return p.TrafficClass() & 0x3 }

// TrafficClass returns the IPv4 TOS byte or the IPv6 traffic class.
func (p *Packet) TrafficClass() uint8 {
	switch p.IPVersion() {
	case 4:
		return IPv4(p.IP).TOS()
	case 6:
		return IPv6(p.IP).TrafficClass()
	}
	return 0
}

// SrcPort returns the UDP source port, or 0 without a UDP header.
func (p *Packet) SrcPort() uint16 {
	if len(p.UDP) < UDPLen {
		return 0
	}
	return UDP(p.UDP).SrcPort()
}

// DstPort returns the UDP destination port, or 0 without a UDP header.
func (p *Packet) DstPort() uint16 {
	if len(p.UDP) < UDPLen {
		return 0
	}
	return UDP(p.UDP).DstPort()
}

// ICRC returns the packet's ICRC as the CRC-32 value it carries; the wire
// holds it in little-endian byte order.
func (p *Packet) ICRC() uint32 { return binary.LittleEndian.Uint32(p.icrc) }

// Transport returns the bytes from the BTH through the pad, which together
// with the IP and UDP headers are what the ICRC covers.
func (p *Packet) Transport() []byte { return p.transport }

// IsCNP reports whether the packet is a RoCE v2 congestion notification.
func (p *Packet) IsCNP() bool { return p.Info.Opcode == bth.CNP }

// CheckICRC recomputes the ICRC and compares it with the one the packet
// carries. It returns ErrNoIPHeader for a packet parsed from a UDP payload,
// whose IPv4 ID (covered by the ICRC) is unknown.
func (p *Packet) CheckICRC() error {
	if len(p.IP) == 0 || len(p.UDP) == 0 {
		return ErrNoIPHeader
	}
	if ComputeICRC(p.IP, p.UDP, p.transport) != p.ICRC() {
		return ErrICRC
	}
	return nil
}

// CheckICRCInPlace is CheckICRC for a receiver that owns the packet's
// bytes: it writes ones into the fields the ICRC masks, takes the CRC over
// the packet where it lies (MaskedICRC: hash/crc32's fast path, in one
// pass), and writes the fields back. CheckICRC copies the headers aside
// and hashes them eight bytes at a time: with a 1 KiB payload it took 185
// ns against 120 here, with 64 bytes 78 against 67 (BenchmarkICRC).
// Nothing may read the packet while it runs. A packet whose headers do not lie back to
// back, as ParseIP leaves them, is checked as CheckICRC checks it.
func (p *Packet) CheckICRCInPlace() error {
	ip, udp, t := p.IP, p.UDP, p.transport
	n := len(ip) + len(udp) + len(t)
	if len(udp) != UDPLen || len(t) <= 4 || cap(ip) < n ||
		(len(ip) != IPv4Len && len(ip) != IPv6Len) ||
		&ip[:n][len(ip)] != &udp[0] || &ip[:n][len(ip)+UDPLen] != &t[0] {
		return p.CheckICRC()
	}
	pkt := ip[:n]
	// The masked bytes (see ComputeICRC), after the IP header's own.
	masked := [...]int{1, 8, 10, 11, 0, len(ip) + 6, len(ip) + 7, len(ip) + UDPLen + 4}
	if len(ip) == IPv6Len {
		masked = [...]int{1, 2, 3, 7, 0, len(ip) + 6, len(ip) + 7, len(ip) + UDPLen + 4}
	}
	var saved [len(masked)]byte
	for i, off := range masked {
		saved[i] = pkt[off]
		pkt[off] = 0xff
	}
	if len(ip) == IPv4Len {
		pkt[0] = saved[4] // version and IHL are covered
	} else {
		pkt[0] = saved[4] | 0x0f // the traffic class's high nibble
	}
	icrc := MaskedICRC(pkt)
	for i := len(masked) - 1; i >= 0; i-- {
		pkt[masked[i]] = saved[i]
	}
	if icrc != p.ICRC() {
		return ErrICRC
	}
	return nil
}

// ParseFrame parses an Ethernet II frame, with any 802.1Q or 802.1ad tags,
// that carries a RoCE v2 packet.
func ParseFrame(p *Packet, b []byte) error {
	if len(b) < EthernetLen {
		return ErrTruncated
	}
	off := 12
	etherType := binary.BigEndian.Uint16(b[off:])
	for etherType == 0x8100 || etherType == 0x88a8 {
		off += 4
		if len(b) < off+2 {
			return ErrTruncated
		}
		etherType = binary.BigEndian.Uint16(b[off:])
	}
	off += 2
	if etherType != 0x0800 && etherType != 0x86dd {
		return ErrNotEthernet
	}
	if err := ParseIP(p, b[off:]); err != nil {
		return err
	}
	p.Eth = b[:off]
	return nil
}

// ParseIP parses a RoCE v2 packet that starts with its IPv4 or IPv6 header.
// Bytes after the length the IP header gives (Ethernet padding) are ignored.
// The UDP destination port is not checked; see DstPort.
func ParseIP(p *Packet, b []byte) error {
	if len(b) < 1 {
		return ErrTruncated
	}
	var ip, rest []byte
	switch b[0] >> 4 {
	case 4:
		if len(b) < IPv4Len {
			return ErrTruncated
		}
		h := IPv4(b)
		if h.HeaderLen() != IPv4Len {
			return ErrIPOptions
		}
		total := int(h.TotalLen())
		if total < IPv4Len {
			return ErrLength
		}
		if total > len(b) {
			return ErrTruncated
		}
		if h.IsFragment() {
			return ErrFragment
		}
		if h.Protocol() != ProtocolUDP {
			return ErrNotUDP
		}
		ip, rest = b[:IPv4Len], b[IPv4Len:total]
	case 6:
		if len(b) < IPv6Len {
			return ErrTruncated
		}
		h := IPv6(b)
		payload := int(h.PayloadLen())
		if IPv6Len+payload > len(b) {
			return ErrTruncated
		}
		if h.NextHeader() != ProtocolUDP { // extension headers are not part of RoCE v2
			return ErrNotUDP
		}
		ip, rest = b[:IPv6Len], b[IPv6Len:IPv6Len+payload]
	default:
		return ErrNotIP
	}
	if len(rest) < UDPLen {
		return ErrTruncated
	}
	udpLen := int(UDP(rest).Length())
	if udpLen < UDPLen || udpLen > len(rest) {
		return ErrLength
	}
	if err := ParseUDPPayload(p, rest[UDPLen:udpLen]); err != nil {
		return err
	}
	p.IP, p.UDP = ip, rest[:UDPLen]
	return nil
}

// ParseUDPPayload parses a RoCE v2 packet from its UDP payload: the BTH
// through the ICRC. The packet's IP and UDP fields stay nil.
func ParseUDPPayload(p *Packet, b []byte) error {
	*p = Packet{}
	if len(b) < bth.Len+ICRCLen {
		return ErrTruncated
	}
	h := bth.Header(b)
	if h.TVer() != 0 {
		return ErrTVer
	}
	info, ok := Lookup(h.Opcode())
	if !ok {
		return ErrOpcode
	}
	if len(b) < info.HdrLen+ICRCLen {
		return ErrTruncated
	}
	end := len(b) - ICRCLen
	padCnt := h.PadCnt()
	payloadLen := end - info.HdrLen - padCnt
	if payloadLen < 0 || (end-info.HdrLen)%4 != 0 {
		return ErrPad
	}
	if payloadLen > 0 && !info.Payload {
		return ErrPayload
	}
	p.BTH = h[:bth.Len]
	off := bth.Len
	take := func(e Ext, n int) []byte {
		if info.Ext&e == 0 {
			return nil
		}
		off += n
		return b[off-n : off : off]
	}
	p.DETH = take(ExtDETH, deth.Len)
	p.FETH = take(ExtFETH, feth.Len)
	p.RETH = take(ExtRETH, reth.Len)
	p.AtomicETH = take(ExtAtomicETH, atomiceth.Len)
	p.AETH = take(ExtAETH, aeth.Len)
	p.AtomicAck = take(ExtAtomicAck, atomiceth.AckLen)
	p.ImmDt = take(ExtImmDt, immdt.Len)
	p.IETH = take(ExtIETH, immdt.Len)
	take(ExtCNP, CNPReservedLen)
	p.Payload = b[off : off+payloadLen : off+payloadLen]
	p.Pad = b[off+payloadLen : end : end]
	p.Info = info
	p.transport = b[:end:end]
	p.icrc = b[end:]
	return nil
}

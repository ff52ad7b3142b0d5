package wire

import (
	"encoding/binary"
	"net/netip"

	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/atomiceth"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/deth"
	"github.com/gorxe/gorxe/wire/feth"
	"github.com/gorxe/gorxe/wire/immdt"
	"github.com/gorxe/gorxe/wire/reth"
)

// Headers holds the fields of every transport header a packet may carry.
// BTH.Opcode decides which of them are written; the others are ignored.
type Headers struct {
	BTH       bth.Fields
	DETH      deth.Fields
	FETH      feth.Fields
	RETH      reth.Fields
	AtomicETH atomiceth.Fields
	AETH      aeth.Fields
	AtomicAck uint64   // original remote data of an ATOMIC_ACKNOWLEDGE
	Imm       uint32   // immediate data
	IETH      reth.Key // R_Key to invalidate
}

// Len returns the length of the BTH and the extended headers, or 0 for an
// opcode gorxe does not build.
func (h *Headers) Len() int { return opTable[h.BTH.Opcode].HdrLen }

// Encode writes the BTH and the extended headers into b, which must hold
// Len bytes, and returns how many it wrote, or 0 for an unknown opcode.
// The CNP's reserved bytes are written as zeros.
func (h *Headers) Encode(b []byte) int {
	info := &opTable[h.BTH.Opcode]
	if info.HdrLen == 0 || len(b) < info.HdrLen {
		return 0
	}
	bth.Header(b).Encode(&h.BTH)
	off := bth.Len
	if info.Has(ExtDETH) {
		deth.Header(b[off:]).Encode(&h.DETH)
		off += deth.Len
	}
	if info.Has(ExtFETH) {
		feth.Header(b[off:]).Encode(&h.FETH)
		off += feth.Len
	}
	if info.Has(ExtRETH) {
		reth.Header(b[off:]).Encode(&h.RETH)
		off += reth.Len
	}
	if info.Has(ExtAtomicETH) {
		atomiceth.Header(b[off:]).Encode(&h.AtomicETH)
		off += atomiceth.Len
	}
	if info.Has(ExtAETH) {
		aeth.Header(b[off:]).Encode(&h.AETH)
		off += aeth.Len
	}
	if info.Has(ExtAtomicAck) {
		atomiceth.AckHeader(b[off:]).SetOrigData(h.AtomicAck)
		off += atomiceth.AckLen
	}
	if info.Has(ExtImmDt) {
		immdt.Header(b[off:]).SetImm(h.Imm)
		off += immdt.Len
	}
	if info.Has(ExtIETH) {
		immdt.IETH(b[off:]).SetRKey(h.IETH)
		off += immdt.Len
	}
	if info.Has(ExtCNP) {
		clear(b[off : off+CNPReservedLen])
		off += CNPReservedLen
	}
	return off
}

// PadLen returns the number of pad bytes that align a payload of n bytes to
// 4 bytes (IBTA Vol 1 §9.2.3).
func PadLen(n int) int { return -n & 3 }

// TransportLen returns the length of the bytes from the BTH through the pad
// for these headers and a payload of n bytes.
func (h *Headers) TransportLen(n int) int { return h.Len() + n + PadLen(n) }

// AppendTransport appends the BTH, the extended headers, payload and zero
// pad bytes to b, setting the BTH pad count from the payload's length. The
// ICRC is not appended. It returns b unchanged if the opcode is unknown or
// payload is non-empty on an opcode that carries none.
func AppendTransport(b []byte, h *Headers, payload []byte) []byte {
	info := &opTable[h.BTH.Opcode]
	if info.HdrLen == 0 || len(payload) > 0 && !info.Payload {
		return b
	}
	n := len(b)
	pad := PadLen(len(payload))
	b = append(b, make([]byte, info.HdrLen)...)
	h.Encode(b[n:])
	bth.Header(b[n:]).SetPadCnt(pad)
	b = append(b, payload...)
	return append(b, make([]byte, pad)...)
}

// IPFields holds what a RoCE v2 packet's IP header says beyond its lengths.
type IPFields struct {
	Src, Dst     netip.Addr // both IPv4 or both IPv6; IPv4-mapped IPv6 counts as IPv4 unless IPv6 is set
	TrafficClass uint8      // IPv4 TOS or IPv6 traffic class: DSCP and ECN
	HopLimit     uint8      // IPv4 TTL or IPv6 hop limit
	ID           uint16     // IPv4 Identification
	DontFrag     bool       // IPv4 DF flag; RoCE v2 senders set it
	FlowLabel    uint32     // IPv6 flow label (20 bits)
	IPv6         bool       // an IPv6 header whatever the addresses, as a parsed IPv6 packet carrying IPv4-mapped ones has
}

// addrs returns the addresses as the IP header carries them, whether the
// header is IPv4, and whether the pair makes a header at all.
func (f *IPFields) addrs() (src, dst netip.Addr, v4, ok bool) {
	if f.IPv6 {
		return f.Src, f.Dst, false, f.Src.IsValid() && f.Dst.IsValid()
	}
	src, dst = f.Src.Unmap(), f.Dst.Unmap()
	v4 = src.Is4()
	return src, dst, v4, src.IsValid() && dst.IsValid() && v4 == dst.Is4()
}

// Frame describes a whole RoCE v2 packet from the IP header on.
type Frame struct {
	IP          IPFields
	SrcPort     uint16 // UDP source port: the flow's entropy
	DstPort     uint16 // UDP destination port: UDPPort, 4791
	UDPChecksum bool   // compute a UDP checksum; rxe and most NICs send zero
	Headers
	Payload []byte
}

// Len returns the length of the whole packet, IP header through ICRC.
func (f *Frame) Len() int {
	ipLen := IPv4Len
	if _, _, v4, _ := f.IP.addrs(); !v4 {
		ipLen = IPv6Len
	}
	return ipLen + UDPLen + f.TransportLen(len(f.Payload)) + ICRCLen
}

// Append appends the whole packet, IP header through ICRC, to b. It fills in
// the IP and UDP lengths, the IPv4 header checksum, the pad and the ICRC.
func (f *Frame) Append(b []byte) ([]byte, error) {
	src, dst, v4, ok := f.IP.addrs()
	if !ok {
		return b, ErrAddrFamily
	}
	info := &opTable[f.BTH.Opcode]
	if info.HdrLen == 0 {
		return b, ErrOpcode
	}
	if len(f.Payload) > 0 && !info.Payload {
		return b, ErrPayload
	}
	start := len(b)
	tlen := f.TransportLen(len(f.Payload))
	udpLen := UDPLen + tlen + ICRCLen
	if v4 {
		ip := [IPv4Len]byte{0: 0x45, 1: f.IP.TrafficClass, 8: f.IP.HopLimit, 9: 17}
		binary.BigEndian.PutUint16(ip[2:], uint16(IPv4Len+udpLen))
		binary.BigEndian.PutUint16(ip[4:], f.IP.ID)
		if f.IP.DontFrag {
			ip[6] = 0x40
		}
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		binary.BigEndian.PutUint16(ip[10:], IPv4Checksum(ip[:]))
		b = append(b, ip[:]...)
	} else {
		var ip [IPv6Len]byte
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(f.IP.TrafficClass)<<20|f.IP.FlowLabel&0xfffff)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6], ip[7] = 17, f.IP.HopLimit
		s, d := src.As16(), dst.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
		b = append(b, ip[:]...)
	}
	ipEnd := len(b)
	b = binary.BigEndian.AppendUint16(b, f.SrcPort)
	b = binary.BigEndian.AppendUint16(b, f.DstPort)
	b = binary.BigEndian.AppendUint16(b, uint16(udpLen))
	b = append(b, 0, 0)
	b = AppendTransport(b, &f.Headers, f.Payload)
	pkt := b[start:]
	icrc := ComputeICRC(pkt[:ipEnd-start], pkt[ipEnd-start:ipEnd-start+UDPLen], pkt[ipEnd-start+UDPLen:])
	b = binary.LittleEndian.AppendUint32(b, icrc)
	if f.UDPChecksum {
		udp := b[ipEnd:]
		binary.BigEndian.PutUint16(udp[6:], udpChecksum(b[start:ipEnd], udp))
	}
	return b, nil
}

// IPv4Checksum returns the header checksum (RFC 791, RFC 1071) of the
// IPv4 header h, whose checksum field is zero.
func IPv4Checksum(h []byte) uint16 { return ^onesSum(0, h) }

// udpChecksum returns the UDP checksum of udp (header with a zero checksum
// field, and payload) under the pseudo-header of the IP header ip (RFC 768,
// RFC 8200 §8.1). A sum of zero is sent as 0xFFFF.
func udpChecksum(ip, udp []byte) uint16 {
	var sum uint32
	if ip[0]>>4 == 4 {
		sum = uint32(onesSum(sum, ip[12:20]))
	} else {
		sum = uint32(onesSum(sum, ip[8:40]))
	}
	sum += 17 + uint32(len(udp))
	c := ^onesSum(sum, udp)
	if c == 0 {
		c = 0xffff
	}
	return c
}

// onesSum adds b to sum as 16-bit big-endian words in ones' complement
// arithmetic and returns the folded 16-bit result.
func onesSum(sum uint32, b []byte) uint16 {
	s := uint64(sum)
	for len(b) >= 2 {
		s += uint64(b[0])<<8 | uint64(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// Frame returns the fields of a packet parsed with its IP header, such that
// building them reproduces the packet. It returns ErrNoIPHeader otherwise.
func (p *Packet) Frame() (Frame, error) {
	if len(p.IP) == 0 || len(p.UDP) == 0 {
		return Frame{}, ErrNoIPHeader
	}
	f := Frame{
		SrcPort:     p.SrcPort(),
		DstPort:     p.DstPort(),
		UDPChecksum: binary.BigEndian.Uint16(p.UDP[6:]) != 0,
		Headers:     p.Headers(),
		Payload:     p.Payload,
	}
	f.IP.Src, f.IP.Dst = p.Src(), p.Dst()
	f.IP.TrafficClass = p.TrafficClass()
	if p.IPVersion() == 4 {
		f.IP.HopLimit = p.IP[8]
		f.IP.ID = binary.BigEndian.Uint16(p.IP[4:])
		f.IP.DontFrag = p.IP[6]&0x40 != 0
	} else {
		f.IP.IPv6 = true
		f.IP.HopLimit = p.IP[7]
		f.IP.FlowLabel = binary.BigEndian.Uint32(p.IP[0:]) & 0xfffff
	}
	return f, nil
}

// Headers returns the fields of every transport header the packet carries.
func (p *Packet) Headers() Headers {
	h := Headers{BTH: p.BTH.Fields()}
	if p.DETH != nil {
		h.DETH = p.DETH.Fields()
	}
	if p.FETH != nil {
		h.FETH = p.FETH.Fields()
	}
	if p.RETH != nil {
		h.RETH = p.RETH.Fields()
	}
	if p.AtomicETH != nil {
		h.AtomicETH = p.AtomicETH.Fields()
	}
	if p.AETH != nil {
		h.AETH = p.AETH.Fields()
	}
	if p.AtomicAck != nil {
		h.AtomicAck = p.AtomicAck.OrigData()
	}
	if p.ImmDt != nil {
		h.Imm = p.ImmDt.Imm()
	}
	if p.IETH != nil {
		h.IETH = p.IETH.RKey()
	}
	return h
}

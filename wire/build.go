package wire

import (
	"encoding/binary"
	"fmt"
	"io"
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

// Encode writes the BTH and the extended headers into b and returns how
// many bytes it wrote, Len. The CNP's reserved bytes are written as zeros.
// It writes nothing and returns ErrOpcode, wrapped with the opcode, for an
// opcode gorxe does not build, and io.ErrShortBuffer if b is shorter than
// Len.
func (h *Headers) Encode(b []byte) (int, error) {
	info := &opTable[h.BTH.Opcode]
	if info.HdrLen == 0 {
		return 0, fmt.Errorf("%w %v", ErrOpcode, h.BTH.Opcode)
	}
	if len(b) < info.HdrLen {
		return 0, io.ErrShortBuffer
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
	return off, nil
}

// PadLen returns the number of pad bytes that align a payload of n bytes to
// 4 bytes (IBTA Vol 1 §9.2.3).
func PadLen(n int) int { return -n & 3 }

// TransportLen returns the length of the bytes from the BTH through the pad
// for these headers and a payload of n bytes.
func (h *Headers) TransportLen(n int) int { return h.Len() + n + PadLen(n) }

// AppendTransport appends the BTH, the extended headers, payload and zero
// pad bytes to b, setting the BTH pad count from the payload's length. The
// ICRC is not appended. It returns b unchanged and ErrOpcode for an opcode
// gorxe does not build, or ErrPayload for a payload on an opcode that
// carries none, each wrapped with the opcode.
func AppendTransport(b []byte, h *Headers, payload []byte) ([]byte, error) {
	info := &opTable[h.BTH.Opcode]
	if info.HdrLen == 0 {
		return b, fmt.Errorf("%w %v", ErrOpcode, h.BTH.Opcode)
	}
	if len(payload) > 0 && !info.Payload {
		return b, fmt.Errorf("%w %v", ErrPayload, h.BTH.Opcode)
	}
	n := len(b)
	pad := PadLen(len(payload))
	b = append(b, make([]byte, info.HdrLen)...)
	h.Encode(b[n:]) // cannot fail: the opcode is known and b[n:] is HdrLen long
	bth.Header(b[n:]).SetPadCnt(pad)
	b = append(b, payload...)
	return append(b, make([]byte, pad)...), nil
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
	return f.IP.Len() + UDPLen + f.TransportLen(len(f.Payload)) + ICRCLen
}

// Append appends the whole packet, IP header through ICRC, to b. It fills in
// the IP and UDP lengths, the IPv4 header checksum, the pad and the ICRC.
// It returns b unchanged and ErrAddrFamily, or AppendTransport's error.
func (f *Frame) Append(b []byte) ([]byte, error) {
	if _, _, _, ok := f.IP.addrs(); !ok {
		return b, ErrAddrFamily
	}
	start := len(b)
	p := append(b, make([]byte, f.IP.Len()+UDPLen)...)
	transport := len(p)
	p, err := AppendTransport(p, &f.Headers, f.Payload)
	if err != nil {
		return b, err
	}
	n := len(p) - transport
	p = append(p, make([]byte, ICRCLen)...)
	r := RoCEFields{IP: f.IP, SrcPort: f.SrcPort, DstPort: f.DstPort}
	if _, err := PutRoCEHeaders(p, transport, n, &r); err != nil {
		return b, err
	}
	if f.UDPChecksum {
		udp := p[transport-UDPLen:]
		UDP(udp).SetChecksum(computeUDPChecksum(p[start:transport-UDPLen], udp))
	}
	return p, nil
}

// Len returns the length of the IP header the fields make: IPv4Len or
// IPv6Len.
func (f *IPFields) Len() int {
	if _, _, v4, _ := f.addrs(); v4 {
		return IPv4Len
	}
	return IPv6Len
}

// RoCEFields holds what the IP and UDP headers of a RoCE v2 packet say
// beyond their lengths and checksums: what its sender chooses.
type RoCEFields struct {
	IP               IPFields
	SrcPort, DstPort uint16 // the flow's entropy; UDPPort
}

// bthFECNBECN is the offset of the BTH byte that holds FECN, BECN and
// Resv6, which the ICRC does not cover.
const bthFECNBECN = 4

// PutRoCEHeaders finishes a RoCE v2 packet whose transport, the BTH
// through the pad, is buf[transport:transport+n]. It writes in front of
// the transport the IP and UDP headers f describes, with their lengths,
// the IPv4 header checksum and a zero UDP checksum, and after it the ICRC,
// and returns where the IP header starts: the packet is
// buf[start:transport+n+ICRCLen]. buf must have room for the headers
// (f.IP.Len()+UDPLen bytes) before the transport and for the ICRC after
// it. It returns ErrAddrFamily if f's addresses make no IP header.
//
// The ICRC is computed over the packet where it lies (MaskedICRC): the
// headers are first written with ones in every field the ICRC does not
// cover, including the BTH's FECN and BECN byte, and then with their real
// values. PutRoCEHeaders allocates nothing.
func PutRoCEHeaders(buf []byte, transport, n int, f *RoCEFields) (start int, err error) {
	src, dst, v4, ok := f.IP.addrs()
	if !ok {
		return 0, ErrAddrFamily
	}
	end := transport + n
	udpLen := uint16(UDPLen + n + ICRCLen)
	udp := UDP(buf[transport-UDPLen : transport])
	udp.Encode(&UDPFields{SrcPort: f.SrcPort, DstPort: f.DstPort, Length: udpLen, Checksum: 0xffff})
	fb := buf[transport+bthFECNBECN]
	buf[transport+bthFECNBECN] = 0xff
	var icrc uint32
	if v4 {
		start = transport - UDPLen - IPv4Len
		ip := IPv4(buf[start : start+IPv4Len])
		ip.Encode(&IPv4Fields{
			TOS:      0xff,
			TotalLen: IPv4Len + udpLen,
			ID:       f.IP.ID,
			DontFrag: f.IP.DontFrag,
			TTL:      0xff,
			Protocol: ProtocolUDP,
			Checksum: 0xffff,
			Src:      src,
			Dst:      dst,
		})
		icrc = MaskedICRC(buf[start:end])
		ip.SetTOS(f.IP.TrafficClass)
		ip.SetTTL(f.IP.HopLimit)
		ip.UpdateChecksum()
	} else {
		start = transport - UDPLen - IPv6Len
		ip := IPv6(buf[start : start+IPv6Len])
		ip.Encode(&IPv6Fields{
			TrafficClass: 0xff,
			FlowLabel:    ipv6FlowLabelMask,
			PayloadLen:   udpLen,
			NextHeader:   ProtocolUDP,
			HopLimit:     0xff,
			Src:          src,
			Dst:          dst,
		})
		icrc = MaskedICRC(buf[start:end])
		ip.SetTrafficClassFlowLabel(f.IP.TrafficClass, f.IP.FlowLabel)
		ip.SetHopLimit(f.IP.HopLimit)
	}
	udp.SetChecksum(0)
	buf[transport+bthFECNBECN] = fb
	binary.LittleEndian.PutUint32(buf[end:end+ICRCLen], icrc)
	return start, nil
}

// computeUDPChecksum returns the UDP checksum of udp (header with a zero
// checksum field, and payload) under the pseudo-header of the IP header
// ip (RFC 768, RFC 8200 §8.1). A sum of zero is sent as 0xFFFF.
func computeUDPChecksum(ip, udp []byte) uint16 {
	var sum uint16
	if ip[0]>>4 == 4 {
		h := IPv4(ip)
		sum = PseudoHeaderChecksum(ProtocolUDP, h[ipv4Src:ipv4Src+4], h[ipv4Dst:ipv4Dst+4], uint16(len(udp)))
	} else {
		h := IPv6(ip)
		sum = PseudoHeaderChecksum(ProtocolUDP, h[ipv6Src:ipv6Src+16], h[ipv6Dst:ipv6Dst+16], uint16(len(udp)))
	}
	c := ^Checksum(udp, sum)
	if c == 0 {
		c = 0xffff
	}
	return c
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
		UDPChecksum: UDP(p.UDP).Checksum() != 0,
		Headers:     p.Headers(),
		Payload:     p.Payload,
	}
	f.IP.Src, f.IP.Dst = p.Src(), p.Dst()
	f.IP.TrafficClass = p.TrafficClass()
	if p.IPVersion() == 4 {
		ip := IPv4(p.IP)
		f.IP.HopLimit = ip.TTL()
		f.IP.ID = ip.ID()
		f.IP.DontFrag = ip.DontFrag()
	} else {
		ip := IPv6(p.IP)
		f.IP.IPv6 = true
		f.IP.HopLimit = ip.HopLimit()
		f.IP.FlowLabel = ip.FlowLabel()
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

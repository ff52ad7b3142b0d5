// Package bth reads and writes the InfiniBand Base Transport Header, the
// 12 bytes that start every RoCE v2 UDP payload (IBTA Vol 1 §9.2; Annex A17
// for RoCE v2).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    OpCode     |S|M|Pad| TVer  |         Partition Key         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|F|B|   Resv6   |             Destination QP                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|   Resv7     |          Packet Sequence Number               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// S is Solicited Event, M MigReq, Pad the number of pad bytes after the
// payload, F and B the FECN and BECN congestion bits (RoCE v2 leaves them to
// the IP ECN field and masks them out of the ICRC), A AckReq.
package bth

import "encoding/binary"

// Len is the length of a BTH in bytes.
const Len = 12

// DefaultPKey is the default partition key, which every RoCE v2
// implementation sends (full membership, partition 0x7FFF).
const DefaultPKey = 0xffff

const (
	seMask     = 0x80
	migMask    = 0x40
	padMask    = 0x30
	padShift   = 4
	tverMask   = 0x0f
	fecnMask   = 0x80
	becnMask   = 0x40
	ackReqMask = 0x80
)

// Header is a view of a BTH at the start of a byte slice. Its methods need
// at least Len bytes; the length is checked once, where a packet is parsed.
type Header []byte

// Opcode returns the OpCode field.
func (h Header) Opcode() Opcode { return Opcode(h[0]) }

// SE returns the Solicited Event bit.
func (h Header) SE() bool { return h[1]&seMask != 0 }

// MigReq returns the MigReq bit. Receivers must ignore it: rxe sends 0 and
// ConnectX NICs send 1.
func (h Header) MigReq() bool { return h[1]&migMask != 0 }

// PadCnt returns the number of pad bytes (0..3) between payload and ICRC.
func (h Header) PadCnt() int { return int(h[1]&padMask) >> padShift }

// TVer returns the transport header version; 0 is the only one defined.
func (h Header) TVer() uint8 { return h[1] & tverMask }

// PKey returns the Partition Key.
func (h Header) PKey() uint16 { return binary.BigEndian.Uint16(h[2:]) }

// FECN returns the Forward ECN bit.
func (h Header) FECN() bool { return h[4]&fecnMask != 0 }

// BECN returns the Backward ECN bit, set in a CNP.
func (h Header) BECN() bool { return h[4]&becnMask != 0 }

// DestQP returns the destination queue pair number.
func (h Header) DestQP() QPN { return QPN(binary.BigEndian.Uint32(h[4:]) & QPNMask) }

// AckReq returns the Acknowledge Request bit.
func (h Header) AckReq() bool { return h[8]&ackReqMask != 0 }

// PSN returns the packet sequence number.
func (h Header) PSN() PSN { return PSN(binary.BigEndian.Uint32(h[8:]) & PSNMask) }

// SetOpcode sets the OpCode field.
func (h Header) SetOpcode(o Opcode) { h[0] = byte(o) }

// SetPadCnt sets the pad count; n must be 0..3.
func (h Header) SetPadCnt(n int) { h[1] = h[1]&^padMask | byte(n<<padShift)&padMask }

// SetDestQP sets the destination QP, keeping FECN, BECN and Resv6.
func (h Header) SetDestQP(q QPN) {
	binary.BigEndian.PutUint32(h[4:], binary.BigEndian.Uint32(h[4:])&^QPNMask|uint32(q)&QPNMask)
}

// SetAckReq sets or clears the AckReq bit.
func (h Header) SetAckReq(a bool) {
	h[8] &^= ackReqMask
	if a {
		h[8] |= ackReqMask
	}
}

// SetPSN sets the PSN, keeping AckReq and Resv7.
func (h Header) SetPSN(p PSN) {
	binary.BigEndian.PutUint32(h[8:], binary.BigEndian.Uint32(h[8:])&^PSNMask|uint32(p)&PSNMask)
}

// Fields holds every BTH field in a form that is easy to fill in.
type Fields struct {
	Opcode Opcode
	SE     bool
	MigReq bool
	PadCnt int // 0..3
	TVer   uint8
	PKey   uint16
	FECN   bool
	BECN   bool
	DestQP QPN
	AckReq bool
	PSN    PSN
}

// Fields returns the header's fields. Reserved bits are not part of them.
func (h Header) Fields() Fields {
	return Fields{
		Opcode: h.Opcode(),
		SE:     h.SE(),
		MigReq: h.MigReq(),
		PadCnt: h.PadCnt(),
		TVer:   h.TVer(),
		PKey:   h.PKey(),
		FECN:   h.FECN(),
		BECN:   h.BECN(),
		DestQP: h.DestQP(),
		AckReq: h.AckReq(),
		PSN:    h.PSN(),
	}
}

// Encode writes f into the header, with the reserved bits zero.
func (h Header) Encode(f *Fields) {
	_ = h[Len-1]
	h[0] = byte(f.Opcode)
	h[1] = flag(f.SE, seMask) | flag(f.MigReq, migMask) | byte(f.PadCnt<<padShift)&padMask | f.TVer&tverMask
	binary.BigEndian.PutUint16(h[2:], f.PKey)
	binary.BigEndian.PutUint32(h[4:], uint32(f.DestQP)&QPNMask)
	h[4] = flag(f.FECN, fecnMask) | flag(f.BECN, becnMask)
	binary.BigEndian.PutUint32(h[8:], uint32(f.PSN)&PSNMask)
	h[8] = flag(f.AckReq, ackReqMask)
}

// Append appends the encoded fields to b.
func (f *Fields) Append(b []byte) []byte {
	n := len(b)
	b = append(b, make([]byte, Len)...)
	Header(b[n:]).Encode(f)
	return b
}

func flag(set bool, mask byte) byte {
	if set {
		return mask
	}
	return 0
}

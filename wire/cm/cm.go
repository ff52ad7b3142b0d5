// Package cm reads and writes the messages of the InfiniBand Communication
// Manager (IBTA Vol 1 ch. 12), which rdma_cm uses to connect queue pairs:
// REQ, REP, RTU, REJ, MRA, DREQ and DREP for connected QPs, SIDR_REQ and
// SIDR_REP to resolve a service ID to a UD QP. Each message is the class
// data of one 256-byte MAD (package wire/mad) with management class 0x07,
// class version 2 and method SEND; its attribute ID names the message.
//
//	MAD offset   0                24                                  256
//	             +----------------+-----------------------------------+
//	             | MAD header     | message body (232 bytes)          |
//	             +----------------+-----------------------------------+
//	                              | fields ...      | private data    |
//
// Offsets in this package's layouts count from the start of the body, as
// the IBTA tables (Table 106 onwards) and Linux's ibta_vol1_c12.h do: the
// REQ's service ID at body offset 8 is MAD byte 32. Multi-byte fields are
// big-endian; bit 7 is a byte's most significant bit. Narrow fields share a
// 32-bit word or a byte with others, as drawn beside each type.
//
// Decoding follows the kernel's CM: it reads every field through its mask
// and ignores reserved bits and the MAD header's status, class-specific and
// attribute-modifier fields, so a message with garbage there decodes the
// same as a clean one. Encoding writes reserved bits as zero and masks
// each field to its width.
//
// rdma_cm's own conventions (service IDs made from a port space and a
// port, and the 36-byte header at the front of a REQ's private data) live
// in rdmacm.go.
package cm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/gorxe/gorxe/wire/mad"
)

// BodyLen is the length of a CM message body, the MAD's class data.
const BodyLen = mad.DataLen

// Message is one CM message: *REQ, *REP, *RTU, *REJ, *MRA, *DREQ, *DREP,
// *SIDRREQ or *SIDRREP.
type Message interface {
	// AttrID returns the MAD attribute ID that names the message.
	AttrID() mad.AttrID
	// String returns the message's name and main fields on one line.
	String() string

	// put writes the message into a zeroed body of BodyLen bytes.
	put(body []byte)
	// get reads the message from a body of BodyLen bytes.
	get(body []byte)
}

// Errors from Decode. A MAD too short or of an unknown base version fails
// with mad.ErrShort or mad.ErrBaseVersion.
var (
	ErrNotCM  = errors.New("cm: not a CM MAD (class 0x07, class version 2)")
	ErrMethod = errors.New("cm: method is not SEND")
	ErrAttrID = errors.New("cm: unknown CM attribute ID")
)

// Encode writes m into b as a whole CM MAD with transaction ID tid: the
// common header (base version 1, class CM, class version 2, method SEND,
// m's attribute ID, status and attribute modifier 0), then m's body with
// its reserved bits zero. b must hold at least mad.Len bytes; Encode writes
// the first mad.Len.
func Encode(b []byte, tid uint64, m Message) {
	b = b[:mad.Len]
	mad.Header(b).Encode(&mad.Fields{
		BaseVersion:  mad.BaseVersion,
		Class:        mad.ClassCM,
		ClassVersion: mad.CMClassVersion,
		Method:       mad.MethodSend,
		TID:          tid,
		AttrID:       m.AttrID(),
	})
	body := b[mad.HeaderLen:]
	clear(body)
	m.put(body)
}

// Append appends m to b as a CM MAD with transaction ID tid, as Encode
// writes it, and returns the extended slice.
func Append(b []byte, tid uint64, m Message) []byte {
	n := len(b)
	b = append(b, make([]byte, mad.Len)...)
	Encode(b[n:], tid, m)
	return b
}

// Decode reads the CM MAD in b and returns its message and transaction ID.
// It checks the header as the kernel's MAD layer does before handing a MAD
// to the CM (base version, class, class version, method) and the attribute
// ID; the body's fields cannot be out of range, so a MAD that passes those
// checks always decodes. LAP and APR, which the kernel no longer handles,
// fail with ErrAttrID.
func Decode(b []byte) (Message, uint64, error) {
	h, err := mad.Parse(b)
	if err != nil {
		return nil, 0, err
	}
	if h.Class() != mad.ClassCM || h.ClassVersion() != mad.CMClassVersion {
		return nil, 0, fmt.Errorf("%w: class %#02x version %d", ErrNotCM, uint8(h.Class()), h.ClassVersion())
	}
	if h.Method() != mad.MethodSend {
		return nil, 0, fmt.Errorf("%w: %#02x", ErrMethod, uint8(h.Method()))
	}
	m := newMessage(h.AttrID())
	if m == nil {
		return nil, 0, fmt.Errorf("%w %v", ErrAttrID, h.AttrID())
	}
	m.get(h.Data())
	return m, h.TID(), nil
}

// newMessage returns a new, empty message of attribute ID a, or nil.
func newMessage(a mad.AttrID) Message {
	switch a {
	case mad.AttrREQ:
		return new(REQ)
	case mad.AttrMRA:
		return new(MRA)
	case mad.AttrREJ:
		return new(REJ)
	case mad.AttrREP:
		return new(REP)
	case mad.AttrRTU:
		return new(RTU)
	case mad.AttrDREQ:
		return new(DREQ)
	case mad.AttrDREP:
		return new(DREP)
	case mad.AttrSIDRREQ:
		return new(SIDRREQ)
	case mad.AttrSIDRREP:
		return new(SIDRREP)
	}
	return nil
}

// MsgType names the message that a REJ rejects or an MRA acknowledges, a
// 2-bit field (enum cm_msg_response in Linux).
type MsgType uint8

// Message types in REJ and MRA.
const (
	MsgREQ   MsgType = 0
	MsgREP   MsgType = 1
	MsgOther MsgType = 2 // a LAP
)

// String returns "REQ", "REP", "other" or the value.
func (t MsgType) String() string {
	switch t {
	case MsgREQ:
		return "REQ"
	case MsgREP:
		return "REP"
	case MsgOther:
		return "other"
	}
	return fmt.Sprintf("msg(%d)", uint8(t))
}

// getGID reads a 16-byte GID as an address: an IPv4-mapped GID (RoCE v2
// over IPv4) as an IPv4 address, the zero GID as the zero netip.Addr.
func getGID(b []byte) netip.Addr {
	g := [16]byte(b)
	if g == [16]byte{} {
		return netip.Addr{}
	}
	return netip.AddrFrom16(g).Unmap()
}

// putGID writes a as a 16-byte GID, an IPv4 address IPv4-mapped, the zero
// netip.Addr as the zero GID.
func putGID(b []byte, a netip.Addr) {
	g := a.As16()
	copy(b, g[:])
}

// get24 reads the 24-bit field in the top three bytes of the word at b.
func get24(b []byte) uint32 { return binary.BigEndian.Uint32(b) >> 8 }

// put24 writes v's low 24 bits into the top three bytes of the word at b,
// keeping its low byte.
func put24(b []byte, v uint32) {
	binary.BigEndian.PutUint32(b, v<<8|uint32(b[3]))
}

// bit returns mask if set, else 0.
func bit(set bool, mask byte) byte {
	if set {
		return mask
	}
	return 0
}

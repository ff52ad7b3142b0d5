// Package mad reads and writes Management Datagrams: the 256-byte messages
// that InfiniBand management classes exchange over the General Services QP,
// QP1 (IBTA Vol 1 §13.4). On RoCE a MAD is the payload of a UD SEND_ONLY to
// QP1 with Q_Key 0x80010000 (deth.GSIQKey). gorxe uses MADs for the
// Communication Manager (package wire/cm).
//
// Every MAD starts with the 24-byte common header (IBTA Vol 1 §13.4.2,
// struct ib_mad_hdr in Linux); the class's data fills the other 232 bytes.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  BaseVersion  |   MgmtClass   | ClassVersion  |R|   Method    |  0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Status             |         ClassSpecific         |  4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 TransactionID (63..32)                        |  8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 TransactionID (31..0)                         | 12
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          AttributeID          |           Reserved            | 16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      AttributeModifier                        | 20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               | 24
//	|                  class data (232 bytes) ...                   |
//
// R is the response bit, the top bit of the method byte (MethodGetResp is
// MethodGet with R set).
package mad

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Len is the length of a MAD in bytes.
const Len = 256

// HeaderLen is the length of the common MAD header in bytes.
const HeaderLen = 24

// DataLen is the length of the class data that follows the header.
const DataLen = Len - HeaderLen

// BaseVersion is the only MAD base version an InfiniBand or RoCE port
// speaks (IB_MGMT_BASE_VERSION; 0x80 is Omni-Path's).
const BaseVersion = 1

// Class is a management class, the second byte of a MAD.
type Class uint8

// Management classes (IBTA Vol 1 §13.4.4, Table 132).
const (
	ClassSubnLIDRouted Class = 0x01 // subnet management, LID routed
	ClassSubnAdm       Class = 0x03 // subnet administration
	ClassPerf          Class = 0x04 // performance management
	ClassBM            Class = 0x05 // baseboard management
	ClassDevMgmt       Class = 0x06 // device management
	ClassCM            Class = 0x07 // communication management
	ClassSNMP          Class = 0x08 // SNMP tunneling
	ClassSubnDirected  Class = 0x81 // subnet management, directed route
)

// CMClassVersion is the class version of the Communication Manager
// (IB_CM_CLASS_VERSION, IBTA 1.2); the kernel's CM agent takes no other.
const CMClassVersion = 2

// Method is a MAD method, the fourth byte of a MAD.
type Method uint8

// Methods (IBTA Vol 1 §13.4.5, Table 133). The CM sends every one of its
// messages with MethodSend.
const (
	MethodGet         Method = 0x01
	MethodSet         Method = 0x02
	MethodSend        Method = 0x03
	MethodTrap        Method = 0x05
	MethodReport      Method = 0x06
	MethodTrapRepress Method = 0x07
	MethodGetResp     Method = 0x81
	MethodReportResp  Method = 0x86

	// MethodResp is the response bit of a method.
	MethodResp Method = 0x80
)

// AttrID is a MAD attribute ID, which names the message within its class.
type AttrID uint16

// The Communication Manager's attribute IDs (IBTA Vol 1 §12.6, Table 104;
// CM_*_ATTR_ID in Linux's ib_cm.h).
const (
	AttrREQ     AttrID = 0x0010 // ConnectRequest
	AttrMRA     AttrID = 0x0011 // MsgRcptAck
	AttrREJ     AttrID = 0x0012 // ConnectReject
	AttrREP     AttrID = 0x0013 // ConnectReply
	AttrRTU     AttrID = 0x0014 // ReadyToUse
	AttrDREQ    AttrID = 0x0015 // DisconnectRequest
	AttrDREP    AttrID = 0x0016 // DisconnectReply
	AttrSIDRREQ AttrID = 0x0017 // ServiceIDResReq
	AttrSIDRREP AttrID = 0x0018 // ServiceIDResReqResp
	AttrLAP     AttrID = 0x0019 // LoadAlternatePath
	AttrAPR     AttrID = 0x001a // AlternatePathResponse
)

var cmAttrNames = [...]string{"REQ", "MRA", "REJ", "REP", "RTU", "DREQ", "DREP", "SIDR_REQ", "SIDR_REP", "LAP", "APR"}

// String returns the CM message name of a, like "REQ", or a in hex.
func (a AttrID) String() string {
	if a >= AttrREQ && a <= AttrAPR {
		return cmAttrNames[a-AttrREQ]
	}
	return fmt.Sprintf("%#04x", uint16(a))
}

// Errors from Parse.
var (
	ErrShort       = errors.New("mad: shorter than 256 bytes")
	ErrBaseVersion = errors.New("mad: unknown base version")
)

// Header is a view of a MAD. Its header methods need at least HeaderLen
// bytes; Data needs Len.
type Header []byte

// Parse checks that b holds a MAD and returns a view of its first Len bytes;
// bytes after them are not part of the MAD.
func Parse(b []byte) (Header, error) {
	if len(b) < Len {
		return nil, fmt.Errorf("%w: %d bytes", ErrShort, len(b))
	}
	if b[0] != BaseVersion {
		return nil, fmt.Errorf("%w %d", ErrBaseVersion, b[0])
	}
	return Header(b[:Len]), nil
}

// BaseVersion returns the MAD base version, 1.
func (h Header) BaseVersion() uint8 { return h[0] }

// Class returns the management class.
func (h Header) Class() Class { return Class(h[1]) }

// ClassVersion returns the version of the management class.
func (h Header) ClassVersion() uint8 { return h[2] }

// Method returns the method, response bit included.
func (h Header) Method() Method { return Method(h[3]) }

// Status returns the status field; requests carry 0.
func (h Header) Status() uint16 { return binary.BigEndian.Uint16(h[4:]) }

// ClassSpecific returns the class-specific field; the CM leaves it 0.
func (h Header) ClassSpecific() uint16 { return binary.BigEndian.Uint16(h[6:]) }

// TID returns the transaction ID, which a response copies from its request.
func (h Header) TID() uint64 { return binary.BigEndian.Uint64(h[8:]) }

// AttrID returns the attribute ID.
func (h Header) AttrID() AttrID { return AttrID(binary.BigEndian.Uint16(h[16:])) }

// AttrMod returns the attribute modifier; the CM leaves it 0.
func (h Header) AttrMod() uint32 { return binary.BigEndian.Uint32(h[20:]) }

// Data returns the class data after the header.
func (h Header) Data() []byte { return h[HeaderLen:Len] }

// Fields holds the fields of the common MAD header.
type Fields struct {
	BaseVersion   uint8
	Class         Class
	ClassVersion  uint8
	Method        Method
	Status        uint16
	ClassSpecific uint16
	TID           uint64
	AttrID        AttrID
	AttrMod       uint32
}

// Fields returns the header's fields.
func (h Header) Fields() Fields {
	return Fields{
		BaseVersion:   h.BaseVersion(),
		Class:         h.Class(),
		ClassVersion:  h.ClassVersion(),
		Method:        h.Method(),
		Status:        h.Status(),
		ClassSpecific: h.ClassSpecific(),
		TID:           h.TID(),
		AttrID:        h.AttrID(),
		AttrMod:       h.AttrMod(),
	}
}

// Encode writes f into the header, with the reserved field zero.
func (h Header) Encode(f *Fields) {
	_ = h[HeaderLen-1]
	h[0] = f.BaseVersion
	h[1] = byte(f.Class)
	h[2] = f.ClassVersion
	h[3] = byte(f.Method)
	binary.BigEndian.PutUint16(h[4:], f.Status)
	binary.BigEndian.PutUint16(h[6:], f.ClassSpecific)
	binary.BigEndian.PutUint64(h[8:], f.TID)
	binary.BigEndian.PutUint16(h[16:], uint16(f.AttrID))
	binary.BigEndian.PutUint16(h[18:], 0)
	binary.BigEndian.PutUint32(h[20:], f.AttrMod)
}

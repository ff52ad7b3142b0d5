package cm

import (
	"encoding/binary"
	"fmt"

	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/mad"
)

// Private data and additional information lengths of the SIDR messages.
const (
	SIDRREQPrivateDataLen = 216
	SIDRREPPrivateDataLen = 136
	SIDRREPAddInfoLen     = 72
)

// SIDRREQ is ServiceIDResReq, which asks the receiver which UD QP and
// Q_Key serve a service ID (IBTA Vol 1 §12.11.1, Table 119). rdma_cm sends
// it for the UDP port space, with a cma_hdr at the front of the private
// data.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                           Request ID                          |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Partition Key         |            Reserved           |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Service ID (8 bytes)                     |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Private Data (216 bytes)                   |  16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type SIDRREQ struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData [SIDRREQPrivateDataLen]byte
}

// AttrID returns mad.AttrSIDRREQ.
func (*SIDRREQ) AttrID() mad.AttrID { return mad.AttrSIDRREQ }

func (m *SIDRREQ) put(b []byte) {
	binary.BigEndian.PutUint32(b[0:], m.RequestID)
	binary.BigEndian.PutUint16(b[4:], m.PKey)
	binary.BigEndian.PutUint64(b[8:], m.ServiceID)
	copy(b[16:], m.PrivateData[:])
}

func (m *SIDRREQ) get(b []byte) {
	m.RequestID = binary.BigEndian.Uint32(b[0:])
	m.PKey = binary.BigEndian.Uint16(b[4:])
	m.ServiceID = binary.BigEndian.Uint64(b[8:])
	copy(m.PrivateData[:], b[16:])
}

// String returns the SIDR_REQ's name and fields on one line, with the
// cma_hdr's addresses for an rdma_cm service ID.
func (m *SIDRREQ) String() string {
	s := fmt.Sprintf("SIDR_REQ request_id=%#x service_id=0x%016x pkey=%#04x", m.RequestID, m.ServiceID, m.PKey)
	if _, _, ok := SplitServiceID(m.ServiceID); ok {
		if h, err := ParseCMAHeader(m.PrivateData[:]); err == nil {
			s += " " + h.String()
		}
	}
	return s
}

// SIDRStatus is the status of a SIDR_REP (IBTA Vol 1 Table 120; enum
// ib_cm_sidr_status in Linux).
type SIDRStatus uint8

// SIDR_REP statuses.
const (
	SIDRSuccess            SIDRStatus = 0 // IB_SIDR_SUCCESS: QPN and Q_Key are valid
	SIDRUnsupported        SIDRStatus = 1 // IB_SIDR_UNSUPPORTED: no such service ID
	SIDRReject             SIDRStatus = 2 // IB_SIDR_REJECT: the service refused
	SIDRNoQP               SIDRStatus = 3 // IB_SIDR_NO_QP
	SIDRRedirect           SIDRStatus = 4 // IB_SIDR_REDIRECT: see the additional information
	SIDRUnsupportedVersion SIDRStatus = 5 // IB_SIDR_UNSUPPORTED_VERSION
)

var sidrStatusNames = [...]string{"success", "unsupported", "reject", "no QP", "redirect", "unsupported version"}

// String returns the status in words, like "success".
func (s SIDRStatus) String() string {
	if int(s) < len(sidrStatusNames) {
		return sidrStatusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// SIDRREP is ServiceIDResReqResp, the answer to a SIDR_REQ (IBTA Vol 1
// §12.11.2, Table 120).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                           Request ID                          |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     Status    |  AddInfo Len  |            Reserved           |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      QPN                      |    Reserved   |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Service ID (8 bytes)                     |  12
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                             Q_Key                             |  20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|               Additional Information (72 bytes)               |  24
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Private Data (136 bytes)                   |  96
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type SIDRREP struct {
	RequestID     uint32 // the SIDR_REQ's
	Status        SIDRStatus
	AddInfoLength uint8
	QPN           bth.QPN
	ServiceID     uint64
	QKey          uint32
	AddInfo       [SIDRREPAddInfoLen]byte
	PrivateData   [SIDRREPPrivateDataLen]byte
}

// AttrID returns mad.AttrSIDRREP.
func (*SIDRREP) AttrID() mad.AttrID { return mad.AttrSIDRREP }

func (m *SIDRREP) put(b []byte) {
	binary.BigEndian.PutUint32(b[0:], m.RequestID)
	b[4] = uint8(m.Status)
	b[5] = m.AddInfoLength
	put24(b[8:], uint32(m.QPN))
	binary.BigEndian.PutUint64(b[12:], m.ServiceID)
	binary.BigEndian.PutUint32(b[20:], m.QKey)
	copy(b[24:], m.AddInfo[:])
	copy(b[96:], m.PrivateData[:])
}

func (m *SIDRREP) get(b []byte) {
	*m = SIDRREP{
		RequestID:     binary.BigEndian.Uint32(b[0:]),
		Status:        SIDRStatus(b[4]),
		AddInfoLength: b[5],
		QPN:           bth.QPN(get24(b[8:])),
		ServiceID:     binary.BigEndian.Uint64(b[12:]),
		QKey:          binary.BigEndian.Uint32(b[20:]),
	}
	copy(m.AddInfo[:], b[24:])
	copy(m.PrivateData[:], b[96:])
}

// String returns the SIDR_REP's name and fields on one line.
func (m *SIDRREP) String() string {
	return fmt.Sprintf("SIDR_REP request_id=%#x status=%d (%v) service_id=0x%016x qpn=0x%06x qkey=%#x",
		m.RequestID, uint8(m.Status), m.Status, m.ServiceID, uint32(m.QPN), m.QKey)
}

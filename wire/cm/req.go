package cm

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/mad"
)

// REQPrivateDataLen is the length of a REQ's private data.
const REQPrivateDataLen = 92

// Transport types of a REQ's 2-bit transport service type field.
const (
	TransportRC       = 0
	TransportUC       = 1
	TransportRD       = 2
	TransportExtended = 3 // the extended transport type field says which
)

// ExtTransportXRC is the extended transport type of an XRC connection.
const ExtTransportXRC = 1

// REQ is the ConnectRequest, which an active side sends to open a
// connection to a service (IBTA Vol 1 §12.6.5, Table 106).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Local Communication ID                    |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                            Reserved                           |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Service ID (8 bytes)                     |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Local CA GUID (8 bytes)                    |  16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                            Reserved                           |  24
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Local Q_Key                          |  28
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Local QPN                   |    Resp Res   |  32
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Local EECN                  |   Init Depth  |  36
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Remote EECN                  |  RCMRT  | TT|E|  40
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Starting PSN                 |  LCMRT  | Rty |  44
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Partition Key         |  MTU  |D| RNR |  MaxR |S| Ext |  48
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     Primary Local Port LID    |    Primary Remote Port LID    |  52
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|               Primary Local Port GID (16 bytes)               |  56
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|               Primary Remote Port GID (16 bytes)              |  72
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           Primary Flow Label          |    Rsvd   |    Rate   |  88
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| Traffic Class |   Hop Limit   |   SL  |L| Rsv |  ACK TO | Rsv |  92
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|              Alternate path, as 52..95 (44 bytes)             |  96
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Private Data (92 bytes)                    | 140
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// RCMRT and LCMRT are the remote and local CM response timeouts, TT the
// transport service type, E end-to-end flow control, Rty the retry count,
// D "RDC exists", RNR the RNR retry count, MaxR the max CM retries, S SRQ,
// Ext the extended transport type; in the path, L is subnet local and
// ACK TO the local ACK timeout. The alternate path at 96 has the primary's
// layout; its last byte, 139, also holds SAP Supported (bit 2).
type REQ struct {
	LocalCommID uint32
	ServiceID   uint64
	LocalCAGUID uint64
	LocalQKey   uint32
	LocalQPN    bth.QPN
	// ResponderResources is how many RDMA READs and atomics the sender
	// lets its peer have outstanding at it.
	ResponderResources uint8
	LocalEECN          uint32 // 24 bits
	// InitiatorDepth is how many RDMA READs and atomics the sender may
	// have outstanding as requester.
	InitiatorDepth          uint8
	RemoteEECN              uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits, 4.096 µs × 2^value
	TransportType           uint8  // 2 bits: TransportRC, TransportUC, ...
	EndToEndFlowControl     bool
	StartingPSN             bth.PSN
	LocalCMResponseTimeout  uint8 // 5 bits
	RetryCount              uint8 // 3 bits
	PKey                    uint16
	PathMTU                 wire.MTU // 4 bits
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits, 7 = retry forever
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtTransportType        uint8 // 3 bits
	Primary                 Path
	Alternate               Path
	SAPSupported            bool
	PrivateData             [REQPrivateDataLen]byte
}

// Path is a REQ's primary or alternate path: 44 bytes at body offset 52 or
// 96. On RoCE the GIDs are the ports' IP addresses, IPv4 ones IPv4-mapped;
// rdma_cm puts the permissive LID 0xffff in the LID fields of a routed
// (hop limit > 1) path.
type Path struct {
	LocalLID  uint16
	RemoteLID uint16
	// LocalGID and RemoteGID are the sender's and receiver's port GIDs.
	// An IPv4-mapped GID decodes as an IPv4 address and the zero GID as
	// the zero netip.Addr; both encode back to the same 16 bytes.
	LocalGID        netip.Addr
	RemoteGID       netip.Addr
	FlowLabel       uint32 // 20 bits
	Rate            uint8  // 6 bits, enum ib_rate
	TrafficClass    uint8
	HopLimit        uint8
	SL              uint8 // 4 bits
	SubnetLocal     bool
	LocalACKTimeout uint8 // 5 bits, 4.096 µs × 2^value
}

// PathLen is the length of a REQ's path.
const PathLen = 44

// AttrID returns mad.AttrREQ.
func (*REQ) AttrID() mad.AttrID { return mad.AttrREQ }

func (m *REQ) put(b []byte) {
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	binary.BigEndian.PutUint64(b[8:], m.ServiceID)
	binary.BigEndian.PutUint64(b[16:], m.LocalCAGUID)
	binary.BigEndian.PutUint32(b[28:], m.LocalQKey)
	put24(b[32:], uint32(m.LocalQPN))
	b[35] = m.ResponderResources
	put24(b[36:], m.LocalEECN)
	b[39] = m.InitiatorDepth
	put24(b[40:], m.RemoteEECN)
	b[43] = m.RemoteCMResponseTimeout<<3 | m.TransportType<<1&0x06 | bit(m.EndToEndFlowControl, 0x01)
	put24(b[44:], uint32(m.StartingPSN))
	b[47] = m.LocalCMResponseTimeout<<3 | m.RetryCount&0x07
	binary.BigEndian.PutUint16(b[48:], m.PKey)
	b[50] = uint8(m.PathMTU)<<4 | bit(m.RDCExists, 0x08) | m.RNRRetryCount&0x07
	b[51] = m.MaxCMRetries<<4 | bit(m.SRQ, 0x08) | m.ExtTransportType&0x07
	m.Primary.put(b[52:96])
	m.Alternate.put(b[96:140])
	b[139] |= bit(m.SAPSupported, 0x04)
	copy(b[140:], m.PrivateData[:])
}

func (m *REQ) get(b []byte) {
	*m = REQ{
		LocalCommID:             binary.BigEndian.Uint32(b[0:]),
		ServiceID:               binary.BigEndian.Uint64(b[8:]),
		LocalCAGUID:             binary.BigEndian.Uint64(b[16:]),
		LocalQKey:               binary.BigEndian.Uint32(b[28:]),
		LocalQPN:                bth.QPN(get24(b[32:])),
		ResponderResources:      b[35],
		LocalEECN:               get24(b[36:]),
		InitiatorDepth:          b[39],
		RemoteEECN:              get24(b[40:]),
		RemoteCMResponseTimeout: b[43] >> 3,
		TransportType:           b[43] >> 1 & 0x03,
		EndToEndFlowControl:     b[43]&0x01 != 0,
		StartingPSN:             bth.PSN(get24(b[44:])),
		LocalCMResponseTimeout:  b[47] >> 3,
		RetryCount:              b[47] & 0x07,
		PKey:                    binary.BigEndian.Uint16(b[48:]),
		PathMTU:                 wire.MTU(b[50] >> 4),
		RDCExists:               b[50]&0x08 != 0,
		RNRRetryCount:           b[50] & 0x07,
		MaxCMRetries:            b[51] >> 4,
		SRQ:                     b[51]&0x08 != 0,
		ExtTransportType:        b[51] & 0x07,
		SAPSupported:            b[139]&0x04 != 0,
	}
	m.Primary.get(b[52:96])
	m.Alternate.get(b[96:140])
	copy(m.PrivateData[:], b[140:])
}

func (p *Path) put(b []byte) {
	_ = b[PathLen-1]
	binary.BigEndian.PutUint16(b[0:], p.LocalLID)
	binary.BigEndian.PutUint16(b[2:], p.RemoteLID)
	putGID(b[4:20], p.LocalGID)
	putGID(b[20:36], p.RemoteGID)
	binary.BigEndian.PutUint32(b[36:], p.FlowLabel<<12|uint32(p.Rate&0x3f))
	b[40] = p.TrafficClass
	b[41] = p.HopLimit
	b[42] = p.SL<<4 | bit(p.SubnetLocal, 0x08)
	b[43] = p.LocalACKTimeout << 3
}

func (p *Path) get(b []byte) {
	_ = b[PathLen-1]
	*p = Path{
		LocalLID:        binary.BigEndian.Uint16(b[0:]),
		RemoteLID:       binary.BigEndian.Uint16(b[2:]),
		LocalGID:        getGID(b[4:20]),
		RemoteGID:       getGID(b[20:36]),
		FlowLabel:       binary.BigEndian.Uint32(b[36:]) >> 12,
		Rate:            b[39] & 0x3f,
		TrafficClass:    b[40],
		HopLimit:        b[41],
		SL:              b[42] >> 4,
		SubnetLocal:     b[42]&0x08 != 0,
		LocalACKTimeout: b[43] >> 3,
	}
}

// String returns the REQ's name and main fields on one line; for an
// rdma_cm service ID whose private data starts with a valid cma_hdr, the
// addresses and port it names too.
func (m *REQ) String() string {
	s := fmt.Sprintf("REQ comm_id=%#x service_id=0x%016x qpn=0x%06x psn=0x%06x mtu=%v transport=%s "+
		"resp_res=%d init_depth=%d qkey=%#x pkey=%#04x retry=%d rnr_retry=%d srq=%t "+
		"cm_timeout=%d/%d max_cm_retries=%d ca_guid=%#016x %v",
		m.LocalCommID, m.ServiceID, uint32(m.LocalQPN), uint32(m.StartingPSN), m.PathMTU,
		transportName(m.TransportType, m.ExtTransportType),
		m.ResponderResources, m.InitiatorDepth, m.LocalQKey, m.PKey, m.RetryCount, m.RNRRetryCount, m.SRQ,
		m.RemoteCMResponseTimeout, m.LocalCMResponseTimeout, m.MaxCMRetries, m.LocalCAGUID, &m.Primary)
	if _, _, ok := SplitServiceID(m.ServiceID); ok {
		if h, err := ParseCMAHeader(m.PrivateData[:]); err == nil {
			s += " " + h.String()
		}
	}
	return s
}

// String returns the path's GIDs, LIDs and routing fields on one line.
func (p *Path) String() string {
	return fmt.Sprintf("gid=%v->%v lid=%#x->%#x flow_label=%#x rate=%d tclass=%d hop_limit=%d sl=%d subnet_local=%t ack_timeout=%d",
		p.LocalGID, p.RemoteGID, p.LocalLID, p.RemoteLID, p.FlowLabel, p.Rate, p.TrafficClass, p.HopLimit,
		p.SL, p.SubnetLocal, p.LocalACKTimeout)
}

// transportName names a REQ's transport service type and extended type.
func transportName(tt, ext uint8) string {
	switch {
	case tt == TransportRC:
		return "RC"
	case tt == TransportUC:
		return "UC"
	case tt == TransportRD:
		return "RD"
	case ext == ExtTransportXRC:
		return "XRC"
	}
	return fmt.Sprintf("ext(%d)", ext)
}

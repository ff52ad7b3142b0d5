package cm

import (
	"encoding/binary"
	"fmt"

	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/mad"
)

// Private data lengths of the connected-mode messages other than REQ
// (IB_CM_*_PRIVATE_DATA_SIZE in Linux's ib_cm.h).
const (
	REPPrivateDataLen  = 196
	RTUPrivateDataLen  = 224
	REJPrivateDataLen  = 148
	MRAPrivateDataLen  = 222
	DREQPrivateDataLen = 220
	DREPPrivateDataLen = 224
)

// REJARILen is the length of a REJ's Additional Rejection Information.
const REJARILen = 72

// REP is the ConnectReply, the passive side's answer to a REQ (IBTA Vol 1
// §12.6.8, Table 110).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Local Communication ID                    |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Remote Communication ID                    |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Local Q_Key                          |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Local QPN                   |    Reserved   |  12
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Local EECN                  |    Reserved   |  16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Starting PSN                 |    Reserved   |  20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    Resp Res   |   Init Depth  |   TAD   | FO|E| RNR |S|  Rsvd |  24
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Local CA GUID (8 bytes)                    |  28
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Private Data (196 bytes)                   |  36
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// TAD is the target ACK delay, FO failover accepted, E end-to-end flow
// control, RNR the RNR retry count, S SRQ.
type REP struct {
	LocalCommID  uint32
	RemoteCommID uint32 // the REQ's LocalCommID
	LocalQKey    uint32
	LocalQPN     bth.QPN
	LocalEECN    uint32 // 24 bits; an XRC target's QPN
	StartingPSN  bth.PSN
	// ResponderResources and InitiatorDepth are the sender's, as in REQ.
	ResponderResources  uint8
	InitiatorDepth      uint8
	TargetACKDelay      uint8 // 5 bits
	FailoverAccepted    uint8 // 2 bits
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	LocalCAGUID         uint64
	PrivateData         [REPPrivateDataLen]byte
}

// AttrID returns mad.AttrREP.
func (*REP) AttrID() mad.AttrID { return mad.AttrREP }

func (m *REP) put(b []byte) {
	putCommIDs(b, m.LocalCommID, m.RemoteCommID)
	binary.BigEndian.PutUint32(b[8:], m.LocalQKey)
	put24(b[12:], uint32(m.LocalQPN))
	put24(b[16:], m.LocalEECN)
	put24(b[20:], uint32(m.StartingPSN))
	b[24] = m.ResponderResources
	b[25] = m.InitiatorDepth
	b[26] = m.TargetACKDelay<<3 | m.FailoverAccepted<<1&0x06 | bit(m.EndToEndFlowControl, 0x01)
	b[27] = m.RNRRetryCount<<5 | bit(m.SRQ, 0x10)
	binary.BigEndian.PutUint64(b[28:], m.LocalCAGUID)
	copy(b[36:], m.PrivateData[:])
}

func (m *REP) get(b []byte) {
	*m = REP{
		LocalCommID:         binary.BigEndian.Uint32(b[0:]),
		RemoteCommID:        binary.BigEndian.Uint32(b[4:]),
		LocalQKey:           binary.BigEndian.Uint32(b[8:]),
		LocalQPN:            bth.QPN(get24(b[12:])),
		LocalEECN:           get24(b[16:]),
		StartingPSN:         bth.PSN(get24(b[20:])),
		ResponderResources:  b[24],
		InitiatorDepth:      b[25],
		TargetACKDelay:      b[26] >> 3,
		FailoverAccepted:    b[26] >> 1 & 0x03,
		EndToEndFlowControl: b[26]&0x01 != 0,
		RNRRetryCount:       b[27] >> 5,
		SRQ:                 b[27]&0x10 != 0,
		LocalCAGUID:         binary.BigEndian.Uint64(b[28:]),
	}
	copy(m.PrivateData[:], b[36:])
}

// String returns the REP's name and main fields on one line.
func (m *REP) String() string {
	return fmt.Sprintf("REP comm_id=%#x remote_comm_id=%#x qpn=0x%06x psn=0x%06x resp_res=%d init_depth=%d "+
		"qkey=%#x rnr_retry=%d srq=%t target_ack_delay=%d failover=%d flow_control=%t ca_guid=%#016x",
		m.LocalCommID, m.RemoteCommID, uint32(m.LocalQPN), uint32(m.StartingPSN), m.ResponderResources,
		m.InitiatorDepth, m.LocalQKey, m.RNRRetryCount, m.SRQ, m.TargetACKDelay, m.FailoverAccepted,
		m.EndToEndFlowControl, m.LocalCAGUID)
}

// RTU is ReadyToUse, with which the active side completes the three-way
// handshake after a REP (IBTA Vol 1 §12.6.9, Table 111). DREP has the same
// layout.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Local Communication ID                    |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Remote Communication ID                    |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Private Data (224 bytes)                   |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type RTU struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [RTUPrivateDataLen]byte
}

// AttrID returns mad.AttrRTU.
func (*RTU) AttrID() mad.AttrID { return mad.AttrRTU }

func (m *RTU) put(b []byte) {
	putCommIDs(b, m.LocalCommID, m.RemoteCommID)
	copy(b[8:], m.PrivateData[:])
}

func (m *RTU) get(b []byte) {
	m.LocalCommID, m.RemoteCommID = getCommIDs(b)
	copy(m.PrivateData[:], b[8:])
}

// String returns the RTU's name and communication IDs.
func (m *RTU) String() string {
	return fmt.Sprintf("RTU comm_id=%#x remote_comm_id=%#x", m.LocalCommID, m.RemoteCommID)
}

// REJ is ConnectReject, which refuses a REQ or REP, or ends a connection
// attempt that timed out (IBTA Vol 1 §12.6.7, Table 108).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Local Communication ID                    |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Remote Communication ID                    |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| M |  Reserved |  ARI Length |R|             Reason            |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Additional Rejection Information (72 bytes)          |  12
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Private Data (148 bytes)                   |  84
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// M is the message rejected, R reserved.
type REJ struct {
	LocalCommID  uint32
	RemoteCommID uint32 // 0 if the sender never learnt it
	MsgRejected  MsgType
	// ARILength is how many bytes of ARI count, 7 bits; it may claim more
	// than the field's 72.
	ARILength   uint8
	Reason      RejReason
	ARI         [REJARILen]byte
	PrivateData [REJPrivateDataLen]byte
}

// AttrID returns mad.AttrREJ.
func (*REJ) AttrID() mad.AttrID { return mad.AttrREJ }

func (m *REJ) put(b []byte) {
	putCommIDs(b, m.LocalCommID, m.RemoteCommID)
	b[8] = uint8(m.MsgRejected) << 6
	b[9] = m.ARILength << 1
	binary.BigEndian.PutUint16(b[10:], uint16(m.Reason))
	copy(b[12:], m.ARI[:])
	copy(b[84:], m.PrivateData[:])
}

func (m *REJ) get(b []byte) {
	*m = REJ{MsgRejected: MsgType(b[8] >> 6), ARILength: b[9] >> 1, Reason: RejReason(binary.BigEndian.Uint16(b[10:]))}
	m.LocalCommID, m.RemoteCommID = getCommIDs(b)
	copy(m.ARI[:], b[12:])
	copy(m.PrivateData[:], b[84:])
}

// String returns the REJ's name, IDs, what it rejects and why.
func (m *REJ) String() string {
	return fmt.Sprintf("REJ comm_id=%#x remote_comm_id=%#x msg=%v reason=%d (%v) ari_len=%d",
		m.LocalCommID, m.RemoteCommID, m.MsgRejected, uint16(m.Reason), m.Reason, m.ARILength)
}

// MRA is MsgRcptAck: the receiver of a REQ, REP or LAP has it and will
// answer within the service timeout, so the sender waits longer before it
// retries (IBTA Vol 1 §12.6.6, Table 107).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Local Communication ID                    |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Remote Communication ID                    |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| M |  Reserved |  Svc TO | Rsv |    Private Data (222 bytes)   |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// M is the message MRAed; Svc TO the service timeout.
type MRA struct {
	LocalCommID    uint32
	RemoteCommID   uint32
	MsgMRAed       MsgType
	ServiceTimeout uint8 // 5 bits, 4.096 µs × 2^value
	PrivateData    [MRAPrivateDataLen]byte
}

// AttrID returns mad.AttrMRA.
func (*MRA) AttrID() mad.AttrID { return mad.AttrMRA }

func (m *MRA) put(b []byte) {
	putCommIDs(b, m.LocalCommID, m.RemoteCommID)
	b[8] = uint8(m.MsgMRAed) << 6
	b[9] = m.ServiceTimeout << 3
	copy(b[10:], m.PrivateData[:])
}

func (m *MRA) get(b []byte) {
	*m = MRA{MsgMRAed: MsgType(b[8] >> 6), ServiceTimeout: b[9] >> 3}
	m.LocalCommID, m.RemoteCommID = getCommIDs(b)
	copy(m.PrivateData[:], b[10:])
}

// String returns the MRA's name, IDs, what it acknowledges and its timeout.
func (m *MRA) String() string {
	return fmt.Sprintf("MRA comm_id=%#x remote_comm_id=%#x msg=%v service_timeout=%d",
		m.LocalCommID, m.RemoteCommID, m.MsgMRAed, m.ServiceTimeout)
}

// DREQ is DisconnectRequest, which starts closing a connection (IBTA Vol 1
// §12.6.10, Table 112).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Local Communication ID                    |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Remote Communication ID                    |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                Remote QPN/EECN                |    Reserved   |   8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Private Data (220 bytes)                   |  12
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type DREQ struct {
	LocalCommID  uint32
	RemoteCommID uint32
	RemoteQPN    bth.QPN // the receiver's QPN (or EECN)
	PrivateData  [DREQPrivateDataLen]byte
}

// AttrID returns mad.AttrDREQ.
func (*DREQ) AttrID() mad.AttrID { return mad.AttrDREQ }

func (m *DREQ) put(b []byte) {
	putCommIDs(b, m.LocalCommID, m.RemoteCommID)
	put24(b[8:], uint32(m.RemoteQPN))
	copy(b[12:], m.PrivateData[:])
}

func (m *DREQ) get(b []byte) {
	m.LocalCommID, m.RemoteCommID = getCommIDs(b)
	m.RemoteQPN = bth.QPN(get24(b[8:]))
	copy(m.PrivateData[:], b[12:])
}

// String returns the DREQ's name, IDs and the QPN it closes.
func (m *DREQ) String() string {
	return fmt.Sprintf("DREQ comm_id=%#x remote_comm_id=%#x remote_qpn=0x%06x",
		m.LocalCommID, m.RemoteCommID, uint32(m.RemoteQPN))
}

// DREP is DisconnectReply, the answer to a DREQ (IBTA Vol 1 §12.6.11,
// Table 113). Its layout is RTU's: the two communication IDs, then 224
// bytes of private data.
type DREP struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [DREPPrivateDataLen]byte
}

// AttrID returns mad.AttrDREP.
func (*DREP) AttrID() mad.AttrID { return mad.AttrDREP }

func (m *DREP) put(b []byte) {
	putCommIDs(b, m.LocalCommID, m.RemoteCommID)
	copy(b[8:], m.PrivateData[:])
}

func (m *DREP) get(b []byte) {
	m.LocalCommID, m.RemoteCommID = getCommIDs(b)
	copy(m.PrivateData[:], b[8:])
}

// String returns the DREP's name and communication IDs.
func (m *DREP) String() string {
	return fmt.Sprintf("DREP comm_id=%#x remote_comm_id=%#x", m.LocalCommID, m.RemoteCommID)
}

// putCommIDs writes the sender's and receiver's communication IDs, the
// first two words of every connected-mode message but REQ.
func putCommIDs(b []byte, local, remote uint32) {
	binary.BigEndian.PutUint32(b[0:], local)
	binary.BigEndian.PutUint32(b[4:], remote)
}

// getCommIDs reads the two communication IDs putCommIDs writes.
func getCommIDs(b []byte) (local, remote uint32) {
	return binary.BigEndian.Uint32(b[0:]), binary.BigEndian.Uint32(b[4:])
}

package qp

import (
	"net/netip"
	"strconv"

	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// Type is a queue pair's transport service, numbered as rdma-core's
// enum ibv_qp_type.
type Type uint8

// Queue pair types: the three gorxe implements.
const (
	TypeRC Type = 2 // IBV_QPT_RC
	TypeUC Type = 3 // IBV_QPT_UC
	TypeUD Type = 4 // IBV_QPT_UD
)

// State is a queue pair state (IBTA Vol 1 §10.3.1), numbered as
// enum ibv_qp_state.
type State uint8

// Queue pair states.
const (
	StateReset State = iota // IBV_QPS_RESET
	StateInit               // IBV_QPS_INIT
	StateRTR                // IBV_QPS_RTR: ready to receive
	StateRTS                // IBV_QPS_RTS: ready to send
	StateSQD                // IBV_QPS_SQD: send queue drained
	StateSQE                // IBV_QPS_SQE: send queue error (UD/UC only)
	StateErr                // IBV_QPS_ERR
)

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// String returns the state's name as rdma-core prints it, "RTS".
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "STATE_" + strconv.Itoa(int(s))
}

// AttrMask says which fields of an Attr a Modify sets, bit for bit as
// enum ibv_qp_attr_mask.
type AttrMask uint32

// Attribute mask bits.
const (
	AttrState            AttrMask = 1 << 0
	AttrCurState         AttrMask = 1 << 1
	AttrEnSQDAsyncNotify AttrMask = 1 << 2
	AttrAccessFlags      AttrMask = 1 << 3
	AttrPKeyIndex        AttrMask = 1 << 4
	AttrPort             AttrMask = 1 << 5
	AttrQKey             AttrMask = 1 << 6
	AttrAV               AttrMask = 1 << 7
	AttrPathMTU          AttrMask = 1 << 8
	AttrTimeout          AttrMask = 1 << 9
	AttrRetryCnt         AttrMask = 1 << 10
	AttrRNRRetry         AttrMask = 1 << 11
	AttrRQPSN            AttrMask = 1 << 12
	AttrMaxQPRdAtomic    AttrMask = 1 << 13
	AttrAltPath          AttrMask = 1 << 14
	AttrMinRNRTimer      AttrMask = 1 << 15
	AttrSQPSN            AttrMask = 1 << 16
	AttrMaxDestRdAtomic  AttrMask = 1 << 17
	AttrPathMigState     AttrMask = 1 << 18
	AttrCap              AttrMask = 1 << 19
	AttrDestQPN          AttrMask = 1 << 20
)

// MTU is a path MTU as enum ibv_mtu encodes it: 1 is 256 bytes, 5 is 4096
// (wire.MTU, which the connection manager's messages carry too).
type MTU = wire.MTU

// Path MTUs.
const (
	MTU256  = wire.MTU256
	MTU512  = wire.MTU512
	MTU1024 = wire.MTU1024
	MTU2048 = wire.MTU2048
	MTU4096 = wire.MTU4096
)

// MTUFromBytes returns the MTU of n bytes (256, 512, ..., 4096), or 0.
func MTUFromBytes(n int) MTU { return wire.MTUFromBytes(n) }

// AddressVector says where a connected QP's packets go: ibv_ah_attr with
// its GRH, which RoCE always uses.
type AddressVector struct {
	DGID         netip.Addr // the peer's GID: IPv6, or IPv4 (as itself or IPv4-mapped)
	SGIDIndex    uint8      // index of the source GID in the device's table
	HopLimit     uint8      // IPv4 TTL / IPv6 hop limit; 0 means 64
	TrafficClass uint8      // DSCP and ECN bits
	FlowLabel    uint32
}

// AH is an address handle, ibv_ah: where a UD send work request goes, in
// a protection domain. Programs get one from rnic.Device.CreateAH, which
// checks the address vector against the device, or CreateAHFromWC.
type AH struct {
	av AddressVector
	pd *mr.PD
}

// NewAH returns an address handle for av in pd, unchecked: the device's
// CreateAH checks it first.
func NewAH(pd *mr.PD, av AddressVector) *AH { return &AH{av: av, pd: pd} }

// AV returns the handle's address vector.
func (a *AH) AV() AddressVector { return a.av }

// PD returns the protection domain the handle belongs to.
func (a *AH) PD() *mr.PD { return a.pd }

// Cap holds a QP's queue sizes, as struct ibv_qp_cap.
type Cap struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

// Attr holds the attributes ibv_modify_qp sets and ibv_query_qp reports.
type Attr struct {
	State           State
	CurState        State
	PathMTU         MTU
	AccessFlags     mr.Access // remote operations the responder allows
	PKeyIndex       uint16
	Port            uint8
	QKey            uint32
	AV              AddressVector
	Timeout         uint8   // local ACK timeout: 4.096 µs × 2^Timeout; 0 means none
	RetryCnt        uint8   // retries after timeouts and sequence NAKs; 7 retries forever, as rxe does
	RNRRetry        uint8   // retries after RNR NAKs; 7 means forever
	MinRNRTimer     uint8   // RNR timer this QP's responder asks for (aeth.RNRTimer)
	RQPSN           bth.PSN // the first PSN the responder expects
	SQPSN           bth.PSN // the requester's first PSN
	DestQPNum       bth.QPN // the peer QP
	MaxRdAtomic     uint8   // RDMA READs and atomics this requester keeps outstanding
	MaxDestRdAtomic uint8   // RDMA READs and atomics this responder remembers
	Cap             Cap
}

// WROpcode is a send work request's operation, numbered as
// enum ibv_wr_opcode.
type WROpcode uint8

// Send work request opcodes.
const (
	WRRDMAWrite         WROpcode = 0
	WRRDMAWriteWithImm  WROpcode = 1
	WRSend              WROpcode = 2
	WRSendWithImm       WROpcode = 3
	WRRDMARead          WROpcode = 4
	WRAtomicCmpAndSwp   WROpcode = 5
	WRAtomicFetchAndAdd WROpcode = 6
	WRSendWithInv       WROpcode = 9
)

var wrNames = map[WROpcode]string{
	WRRDMAWrite: "RDMA_WRITE", WRRDMAWriteWithImm: "RDMA_WRITE_WITH_IMM", WRSend: "SEND",
	WRSendWithImm: "SEND_WITH_IMM", WRRDMARead: "RDMA_READ", WRAtomicCmpAndSwp: "ATOMIC_CMP_AND_SWP",
	WRAtomicFetchAndAdd: "ATOMIC_FETCH_AND_ADD", WRSendWithInv: "SEND_WITH_INV",
}

// String returns the opcode's rdma-core name without IBV_WR_.
func (o WROpcode) String() string {
	if s, ok := wrNames[o]; ok {
		return s
	}
	return "WR_" + strconv.Itoa(int(o))
}

// SendFlags are a send work request's flags, as enum ibv_send_flags.
type SendFlags uint32

// Send flags.
const (
	SendFence     SendFlags = 1 << 0 // wait for earlier READs and atomics first
	SendSignaled  SendFlags = 1 << 1 // generate a completion on success
	SendSolicited SendFlags = 1 << 2 // set SE in the last packet
	SendInline    SendFlags = 1 << 3 // copy the data at post time; lkeys are not checked
)

// SGE is a scatter/gather element: Length bytes at Addr in the memory
// region with key LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   mr.Key
}

// SendWR is a send work request, struct ibv_send_wr.
type SendWR struct {
	WRID           uint64
	SGList         []SGE
	Opcode         WROpcode
	Flags          SendFlags
	ImmData        uint32 // for *_WITH_IMM, in host order
	InvalidateRKey uint32 // for SEND_WITH_INV
	RemoteAddr     uint64 // RDMA and atomic operations
	RKey           mr.Key
	CompareAdd     uint64 // compare (CMP_AND_SWP) or add (FETCH_AND_ADD)
	Swap           uint64
	// AH, RemoteQPN and RemoteQKey say where a UD send goes (wr.ud):
	// the address handle, the destination QP, and its Q_Key. A Q_Key
	// with the high bit set stands for the sending QP's own (IBTA Vol 1
	// §10.2.5).
	AH         *AH
	RemoteQPN  bth.QPN
	RemoteQKey uint32
	// Inline, with SendInline, is the message itself, copied at post time;
	// SGList is then ignored. (C's ibv_post_send reads inline data through
	// the SGEs' raw addresses, which Go code cannot hand over safely.)
	Inline []byte
}

// RecvWR is a receive work request, struct ibv_recv_wr.
type RecvWR struct {
	WRID   uint64
	SGList []SGE
}

// Package qp holds what a program says to and hears from a queue pair:
// the verbs' types, named and numbered as rdma-core's (ibv_qp_attr,
// ibv_send_wr, ibv_recv_wr and their flags and enums), the QP states
// (IBTA Vol 1 §10.3.1), limits, errors and counters. The transport engine
// that runs a QP, its requester, responder, completer and timers, is the
// device's business and lives in internal/rc; rnic.QP is the queue pair a
// program holds.
package qp

import (
	"errors"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
)

// Limits of a QP.
const (
	MaxWR         = 16384   // send or receive work requests per queue, as rxe
	MaxSGE        = 32      // scatter/gather elements per work request
	MaxInlineData = 1024    // bytes of inline data per send work request
	MaxMsgSize    = 1 << 31 // the largest message: RETH's DMA length is 31 bits (C9-94)
	MaxRdAtomic   = 128     // outstanding READs and atomics, each way
	// MaxAckInterval is how many packets the requester sends without
	// AckReq: kernel rxe only acknowledges packets that ask for it.
	MaxAckInterval = 64
)

// Errors returned by the verbs.
var (
	ErrState      = errors.New("qp: illegal state transition")
	ErrAttr       = errors.New("qp: invalid attribute")
	ErrQueueFull  = errors.New("qp: work queue full")
	ErrBadWR      = errors.New("qp: invalid work request")
	ErrNotPosting = errors.New("qp: QP state does not allow posting")
)

// InitAttr holds what ibv_create_qp takes.
type InitAttr struct {
	Type   Type
	SendCQ *cq.CQ
	RecvCQ *cq.CQ
	Cap    Cap
	SigAll bool // every send work request generates a completion
	PD     *mr.PD
	// SRQ, when set, is the shared receive queue the QP receives from
	// (ibv_qp_init_attr.srq): Cap's MaxRecvWR and MaxRecvSGE are then
	// ignored, and the QP's PostRecv is refused.
	SRQ    SRQ
	Window int // unacknowledged PSNs the requester allows; 0 means DefaultWindow
	// NoTailProbe turns off the tail-loss probe (timers.go), leaving only
	// the IBTA's local ACK timeout to recover a lost last packet, as rxe,
	// and the probe that asks, after a timeout, whether the packets sent
	// before it are arriving late.
	NoTailProbe bool
}

// DefaultWindow is the requester's default limit of unacknowledged PSNs.
// rxe uses 128; a larger window keeps a higher-latency path busy, at the
// cost of more go-back-N retransmission per loss.
const DefaultWindow = 256

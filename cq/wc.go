package cq

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gorxe/gorxe/internal/bitnames"
)

// Status is the completion status of a work request, with the values of
// rdma-core's enum ibv_wc_status (libibverbs/verbs.h) in the same order.
// The qp layer picks the status IBTA Vol 1 §11.6.2 names for each outcome.
type Status uint32

// Completion statuses, enum ibv_wc_status.
const (
	StatusSuccess          Status = iota // IBV_WC_SUCCESS
	StatusLocLenErr                      // IBV_WC_LOC_LEN_ERR
	StatusLocQPOpErr                     // IBV_WC_LOC_QP_OP_ERR
	StatusLocEECOpErr                    // IBV_WC_LOC_EEC_OP_ERR
	StatusLocProtErr                     // IBV_WC_LOC_PROT_ERR
	StatusWRFlushErr                     // IBV_WC_WR_FLUSH_ERR
	StatusMWBindErr                      // IBV_WC_MW_BIND_ERR
	StatusBadRespErr                     // IBV_WC_BAD_RESP_ERR
	StatusLocAccessErr                   // IBV_WC_LOC_ACCESS_ERR
	StatusRemInvReqErr                   // IBV_WC_REM_INV_REQ_ERR
	StatusRemAccessErr                   // IBV_WC_REM_ACCESS_ERR
	StatusRemOpErr                       // IBV_WC_REM_OP_ERR
	StatusRetryExcErr                    // IBV_WC_RETRY_EXC_ERR
	StatusRNRRetryExcErr                 // IBV_WC_RNR_RETRY_EXC_ERR
	StatusLocRDDViolErr                  // IBV_WC_LOC_RDD_VIOL_ERR
	StatusRemInvRDReqErr                 // IBV_WC_REM_INV_RD_REQ_ERR
	StatusRemAbortErr                    // IBV_WC_REM_ABORT_ERR
	StatusInvEECNErr                     // IBV_WC_INV_EECN_ERR
	StatusInvEECStateErr                 // IBV_WC_INV_EEC_STATE_ERR
	StatusFatalErr                       // IBV_WC_FATAL_ERR
	StatusRespTimeoutErr                 // IBV_WC_RESP_TIMEOUT_ERR
	StatusGeneralErr                     // IBV_WC_GENERAL_ERR
	StatusTMErr                          // IBV_WC_TM_ERR
	StatusTMRndvIncomplete               // IBV_WC_TM_RNDV_INCOMPLETE
)

var statusInfo = [...]struct{ name, text string }{
	// Texts are ibv_wc_status_str's, libibverbs/enum_strs.c.
	StatusSuccess:          {"IBV_WC_SUCCESS", "success"},
	StatusLocLenErr:        {"IBV_WC_LOC_LEN_ERR", "local length error"},
	StatusLocQPOpErr:       {"IBV_WC_LOC_QP_OP_ERR", "local QP operation error"},
	StatusLocEECOpErr:      {"IBV_WC_LOC_EEC_OP_ERR", "local EE context operation error"},
	StatusLocProtErr:       {"IBV_WC_LOC_PROT_ERR", "local protection error"},
	StatusWRFlushErr:       {"IBV_WC_WR_FLUSH_ERR", "Work Request Flushed Error"},
	StatusMWBindErr:        {"IBV_WC_MW_BIND_ERR", "memory management operation error"},
	StatusBadRespErr:       {"IBV_WC_BAD_RESP_ERR", "bad response error"},
	StatusLocAccessErr:     {"IBV_WC_LOC_ACCESS_ERR", "local access error"},
	StatusRemInvReqErr:     {"IBV_WC_REM_INV_REQ_ERR", "remote invalid request error"},
	StatusRemAccessErr:     {"IBV_WC_REM_ACCESS_ERR", "remote access error"},
	StatusRemOpErr:         {"IBV_WC_REM_OP_ERR", "remote operation error"},
	StatusRetryExcErr:      {"IBV_WC_RETRY_EXC_ERR", "transport retry counter exceeded"},
	StatusRNRRetryExcErr:   {"IBV_WC_RNR_RETRY_EXC_ERR", "RNR retry counter exceeded"},
	StatusLocRDDViolErr:    {"IBV_WC_LOC_RDD_VIOL_ERR", "local RDD violation error"},
	StatusRemInvRDReqErr:   {"IBV_WC_REM_INV_RD_REQ_ERR", "remote invalid RD request"},
	StatusRemAbortErr:      {"IBV_WC_REM_ABORT_ERR", "aborted error"},
	StatusInvEECNErr:       {"IBV_WC_INV_EECN_ERR", "invalid EE context number"},
	StatusInvEECStateErr:   {"IBV_WC_INV_EEC_STATE_ERR", "invalid EE context state"},
	StatusFatalErr:         {"IBV_WC_FATAL_ERR", "fatal error"},
	StatusRespTimeoutErr:   {"IBV_WC_RESP_TIMEOUT_ERR", "response timeout error"},
	StatusGeneralErr:       {"IBV_WC_GENERAL_ERR", "general error"},
	StatusTMErr:            {"IBV_WC_TM_ERR", "TM error"},
	StatusTMRndvIncomplete: {"IBV_WC_TM_RNDV_INCOMPLETE", "TM software rendezvous"},
}

// String returns the text rdma-core's ibv_wc_status_str gives s, such as
// "transport retry counter exceeded", or "unknown" as it does for values
// outside the enum.
func (s Status) String() string {
	if int(s) < len(statusInfo) {
		return statusInfo[s].text
	}
	return "unknown"
}

// Name returns the C enumerator name of s, such as "IBV_WC_RETRY_EXC_ERR",
// or "IBV_WC_STATUS(n)" for values outside the enum.
func (s Status) Name() string {
	if int(s) < len(statusInfo) {
		return statusInfo[s].name
	}
	return "IBV_WC_STATUS(" + strconv.FormatUint(uint64(s), 10) + ")"
}

// Opcode is the operation a work completion reports, with the values of
// rdma-core's enum ibv_wc_opcode. Receive-side opcodes have the RECV bit
// (128) set, so o&OpRecv != 0 tells a receive completion from a send-side
// one, as in rdma-core.
type Opcode uint32

// Work completion opcodes, enum ibv_wc_opcode. The tag-matching and driver
// opcodes after OpRecvRDMAWithImm are not used by gorxe.
const (
	OpSend            Opcode = 0      // IBV_WC_SEND
	OpRDMAWrite       Opcode = 1      // IBV_WC_RDMA_WRITE
	OpRDMARead        Opcode = 2      // IBV_WC_RDMA_READ
	OpCompSwap        Opcode = 3      // IBV_WC_COMP_SWAP
	OpFetchAdd        Opcode = 4      // IBV_WC_FETCH_ADD
	OpBindMW          Opcode = 5      // IBV_WC_BIND_MW
	OpLocalInv        Opcode = 6      // IBV_WC_LOCAL_INV
	OpTSO             Opcode = 7      // IBV_WC_TSO
	OpFlush           Opcode = 8      // IBV_WC_FLUSH
	OpAtomicWrite     Opcode = 9      // IBV_WC_ATOMIC_WRITE
	OpRecv            Opcode = 1 << 7 // IBV_WC_RECV
	OpRecvRDMAWithImm Opcode = 129    // IBV_WC_RECV_RDMA_WITH_IMM
)

var opcodeNames = map[Opcode]string{
	OpSend:            "SEND",
	OpRDMAWrite:       "RDMA_WRITE",
	OpRDMARead:        "RDMA_READ",
	OpCompSwap:        "COMP_SWAP",
	OpFetchAdd:        "FETCH_ADD",
	OpBindMW:          "BIND_MW",
	OpLocalInv:        "LOCAL_INV",
	OpTSO:             "TSO",
	OpFlush:           "FLUSH",
	OpAtomicWrite:     "ATOMIC_WRITE",
	OpRecv:            "RECV",
	OpRecvRDMAWithImm: "RECV_RDMA_WITH_IMM",
}

// String returns the enumerator name without its IBV_WC_ prefix, such as
// "RDMA_WRITE" or "RECV_RDMA_WITH_IMM", matching how Access and Flags print;
// unknown values print as "OPCODE(n)". Name gives the full C name.
func (o Opcode) String() string {
	if n, ok := opcodeNames[o]; ok {
		return n
	}
	return "OPCODE(" + strconv.FormatUint(uint64(o), 10) + ")"
}

// Name returns the C enumerator name of o, such as "IBV_WC_RDMA_WRITE", or
// "IBV_WC_OPCODE(n)" for unknown values.
func (o Opcode) Name() string {
	if n, ok := opcodeNames[o]; ok {
		return "IBV_WC_" + n
	}
	return "IBV_WC_OPCODE(" + strconv.FormatUint(uint64(o), 10) + ")"
}

// Flags are the flags of a work completion, with the values of rdma-core's
// enum ibv_wc_flags.
type Flags uint32

// Work completion flags, enum ibv_wc_flags.
const (
	// FlagGRH (IBV_WC_GRH) reports that the received packet carried a GRH,
	// which for RoCE v2 is always the case on UD queue pairs.
	FlagGRH Flags = 1 << 0
	// FlagWithImm (IBV_WC_WITH_IMM) reports that ImmData is valid.
	FlagWithImm Flags = 1 << 1
	// FlagIPCsumOK (IBV_WC_IP_CSUM_OK) reports a verified IP checksum.
	FlagIPCsumOK Flags = 1 << 2
	// FlagWithInv (IBV_WC_WITH_INV) reports that InvalidatedRKey is valid.
	FlagWithInv Flags = 1 << 3
)

var flagNames = []bitnames.Name[Flags]{
	{Bit: FlagGRH, Name: "GRH"},
	{Bit: FlagWithImm, Name: "WITH_IMM"},
	{Bit: FlagIPCsumOK, Name: "IP_CSUM_OK"},
	{Bit: FlagWithInv, Name: "WITH_INV"},
}

// String returns the flags joined by "|" in bit order, like "GRH|WITH_IMM";
// unknown bits are appended in hex and no flags is "0".
func (f Flags) String() string { return bitnames.String(f, flagNames) }

// WC is a work completion, the fields of rdma-core's struct ibv_wc.
//
// Two fields differ from the C struct. rdma-core overlays imm_data and
// invalidated_rkey in a union; WC keeps them apart. And rdma-core keeps
// imm_data in network byte order (__be32), while ImmData holds the value in
// host order: the four bytes of the ImmDt header read big-endian. A C
// program's wc.imm_data is htonl(ImmData).
type WC struct {
	WRID            uint64 // wr_id of the work request that completed
	Status          Status // completion status
	Opcode          Opcode // operation completed; only valid if Status is StatusSuccess
	VendorErr       uint32 // vendor error syndrome; 0 in gorxe
	ByteLen         uint32 // bytes transferred (receives, RDMA READ, atomics)
	ImmData         uint32 // immediate data in host order, valid with FlagWithImm
	InvalidatedRKey uint32 // rkey invalidated by SEND with Invalidate, valid with FlagWithInv
	QPNum           uint32 // local QP number
	SrcQP           uint32 // remote QP number (UD)
	Flags           Flags  // flags, such as FlagWithImm
	PKeyIndex       uint16 // P_Key index (GSI)
	SLID            uint16 // source LID; 0 on RoCE
	SL              uint8  // service level
	DLIDPathBits    uint8  // destination LID path bits; 0 on RoCE
}

// String formats wc on one line for logs, with the status text and only
// the fields that carry information, like
//
//	wc{wr_id=0x2a qp=0x11 RECV success len=4096 flags=WITH_IMM imm=0xdeadbeef}
func (wc WC) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "wc{wr_id=%#x qp=%#x %v %v", wc.WRID, wc.QPNum, wc.Opcode, wc.Status)
	if wc.VendorErr != 0 {
		fmt.Fprintf(&b, " vendor_err=%#x", wc.VendorErr)
	}
	fmt.Fprintf(&b, " len=%d", wc.ByteLen)
	if wc.Flags != 0 {
		fmt.Fprintf(&b, " flags=%v", wc.Flags)
	}
	if wc.Flags&FlagWithImm != 0 {
		fmt.Fprintf(&b, " imm=%#08x", wc.ImmData)
	}
	if wc.Flags&FlagWithInv != 0 {
		fmt.Fprintf(&b, " inv_rkey=%#08x", wc.InvalidatedRKey)
	}
	if wc.SrcQP != 0 {
		fmt.Fprintf(&b, " src_qp=%#x", wc.SrcQP)
	}
	if wc.PKeyIndex != 0 || wc.SLID != 0 || wc.SL != 0 || wc.DLIDPathBits != 0 {
		fmt.Fprintf(&b, " pkey_index=%d slid=%d sl=%d dlid_path_bits=%d", wc.PKeyIndex, wc.SLID, wc.SL, wc.DLIDPathBits)
	}
	b.WriteByte('}')
	return b.String()
}

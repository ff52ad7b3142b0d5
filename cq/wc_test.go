package cq

import (
	"strings"
	"testing"
	"unsafe"
)

// TestStatusMatchesRdmaCore pins every status to its enum ibv_wc_status
// value (libibverbs/verbs.h), C name and ibv_wc_status_str text
// (libibverbs/enum_strs.c).
func TestStatusMatchesRdmaCore(t *testing.T) {
	for _, tc := range []struct {
		s    Status
		v    uint32
		name string
		text string
	}{
		{StatusSuccess, 0, "IBV_WC_SUCCESS", "success"},
		{StatusLocLenErr, 1, "IBV_WC_LOC_LEN_ERR", "local length error"},
		{StatusLocQPOpErr, 2, "IBV_WC_LOC_QP_OP_ERR", "local QP operation error"},
		{StatusLocEECOpErr, 3, "IBV_WC_LOC_EEC_OP_ERR", "local EE context operation error"},
		{StatusLocProtErr, 4, "IBV_WC_LOC_PROT_ERR", "local protection error"},
		{StatusWRFlushErr, 5, "IBV_WC_WR_FLUSH_ERR", "Work Request Flushed Error"},
		{StatusMWBindErr, 6, "IBV_WC_MW_BIND_ERR", "memory management operation error"},
		{StatusBadRespErr, 7, "IBV_WC_BAD_RESP_ERR", "bad response error"},
		{StatusLocAccessErr, 8, "IBV_WC_LOC_ACCESS_ERR", "local access error"},
		{StatusRemInvReqErr, 9, "IBV_WC_REM_INV_REQ_ERR", "remote invalid request error"},
		{StatusRemAccessErr, 10, "IBV_WC_REM_ACCESS_ERR", "remote access error"},
		{StatusRemOpErr, 11, "IBV_WC_REM_OP_ERR", "remote operation error"},
		{StatusRetryExcErr, 12, "IBV_WC_RETRY_EXC_ERR", "transport retry counter exceeded"},
		{StatusRNRRetryExcErr, 13, "IBV_WC_RNR_RETRY_EXC_ERR", "RNR retry counter exceeded"},
		{StatusLocRDDViolErr, 14, "IBV_WC_LOC_RDD_VIOL_ERR", "local RDD violation error"},
		{StatusRemInvRDReqErr, 15, "IBV_WC_REM_INV_RD_REQ_ERR", "remote invalid RD request"},
		{StatusRemAbortErr, 16, "IBV_WC_REM_ABORT_ERR", "aborted error"},
		{StatusInvEECNErr, 17, "IBV_WC_INV_EECN_ERR", "invalid EE context number"},
		{StatusInvEECStateErr, 18, "IBV_WC_INV_EEC_STATE_ERR", "invalid EE context state"},
		{StatusFatalErr, 19, "IBV_WC_FATAL_ERR", "fatal error"},
		{StatusRespTimeoutErr, 20, "IBV_WC_RESP_TIMEOUT_ERR", "response timeout error"},
		{StatusGeneralErr, 21, "IBV_WC_GENERAL_ERR", "general error"},
		{StatusTMErr, 22, "IBV_WC_TM_ERR", "TM error"},
		{StatusTMRndvIncomplete, 23, "IBV_WC_TM_RNDV_INCOMPLETE", "TM software rendezvous"},
		{24, 24, "IBV_WC_STATUS(24)", "unknown"},
		{1 << 31, 1 << 31, "IBV_WC_STATUS(2147483648)", "unknown"},
	} {
		if uint32(tc.s) != tc.v || tc.s.Name() != tc.name || tc.s.String() != tc.text {
			t.Errorf("status %d: got %d %q %q, want %d %q %q", tc.v, uint32(tc.s), tc.s.Name(), tc.s.String(), tc.v, tc.name, tc.text)
		}
	}
}

func TestOpcodeMatchesRdmaCore(t *testing.T) {
	for _, tc := range []struct {
		o    Opcode
		v    uint32
		str  string
		name string
	}{
		{OpSend, 0, "SEND", "IBV_WC_SEND"},
		{OpRDMAWrite, 1, "RDMA_WRITE", "IBV_WC_RDMA_WRITE"},
		{OpRDMARead, 2, "RDMA_READ", "IBV_WC_RDMA_READ"},
		{OpCompSwap, 3, "COMP_SWAP", "IBV_WC_COMP_SWAP"},
		{OpFetchAdd, 4, "FETCH_ADD", "IBV_WC_FETCH_ADD"},
		{OpBindMW, 5, "BIND_MW", "IBV_WC_BIND_MW"},
		{OpLocalInv, 6, "LOCAL_INV", "IBV_WC_LOCAL_INV"},
		{OpTSO, 7, "TSO", "IBV_WC_TSO"},
		{OpFlush, 8, "FLUSH", "IBV_WC_FLUSH"},
		{OpAtomicWrite, 9, "ATOMIC_WRITE", "IBV_WC_ATOMIC_WRITE"},
		{OpRecv, 128, "RECV", "IBV_WC_RECV"},
		{OpRecvRDMAWithImm, 129, "RECV_RDMA_WITH_IMM", "IBV_WC_RECV_RDMA_WITH_IMM"},
		{10, 10, "OPCODE(10)", "IBV_WC_OPCODE(10)"},
	} {
		if uint32(tc.o) != tc.v || tc.o.String() != tc.str || tc.o.Name() != tc.name {
			t.Errorf("opcode %d: got %d %q %q, want %q %q", tc.v, uint32(tc.o), tc.o.String(), tc.o.Name(), tc.str, tc.name)
		}
	}
	// rdma-core's idiom for "is this a receive completion".
	for _, o := range []Opcode{OpSend, OpRDMAWrite, OpRDMARead, OpCompSwap, OpFetchAdd} {
		if o&OpRecv != 0 {
			t.Errorf("%v has the RECV bit", o)
		}
	}
	if OpRecvRDMAWithImm&OpRecv == 0 {
		t.Error("RECV_RDMA_WITH_IMM lacks the RECV bit")
	}
}

func TestFlags(t *testing.T) {
	if FlagGRH != 1 || FlagWithImm != 2 || FlagIPCsumOK != 4 || FlagWithInv != 8 {
		t.Fatal("flag values differ from ibv_wc_flags")
	}
	for _, tc := range []struct {
		f    Flags
		want string
	}{
		{0, "0"},
		{FlagWithImm, "WITH_IMM"},
		{FlagGRH | FlagWithImm, "GRH|WITH_IMM"},
		{FlagGRH | FlagWithImm | FlagIPCsumOK | FlagWithInv, "GRH|WITH_IMM|IP_CSUM_OK|WITH_INV"},
		{FlagWithInv | 0x10, "WITH_INV|0x10"},
		{0x40, "0x40"},
	} {
		if got := tc.f.String(); got != tc.want {
			t.Errorf("Flags(%#x).String() = %q, want %q", uint32(tc.f), got, tc.want)
		}
	}
}

func TestWCString(t *testing.T) {
	for _, tc := range []struct {
		wc   WC
		want string
	}{
		{
			WC{WRID: 0x2a, QPNum: 0x11, Opcode: OpRecv, ByteLen: 4096, Flags: FlagWithImm, ImmData: 0xdeadbeef},
			"wc{wr_id=0x2a qp=0x11 RECV success len=4096 flags=WITH_IMM imm=0xdeadbeef}",
		},
		{
			WC{WRID: 7, QPNum: 0x12, Opcode: OpRDMAWrite, Status: StatusRetryExcErr},
			"wc{wr_id=0x7 qp=0x12 RDMA_WRITE transport retry counter exceeded len=0}",
		},
		{
			WC{WRID: 1, QPNum: 3, Opcode: OpRecv, Status: StatusLocLenErr, VendorErr: 0x99, ByteLen: 1, Flags: FlagWithInv | FlagGRH, InvalidatedRKey: 0x1234, SrcQP: 0x55, PKeyIndex: 1, SL: 3},
			"wc{wr_id=0x1 qp=0x3 RECV local length error vendor_err=0x99 len=1 flags=GRH|WITH_INV inv_rkey=0x00001234 src_qp=0x55 pkey_index=1 slid=0 sl=3 dlid_path_bits=0}",
		},
	} {
		if got := tc.wc.String(); got != tc.want {
			t.Errorf("String() =\n%s\nwant\n%s", got, tc.want)
		}
	}
	if s := (WC{}).String(); !strings.Contains(s, "SEND success") {
		t.Errorf("zero WC = %q", s)
	}
}

func TestWCSize(t *testing.T) {
	// Same size as struct ibv_wc plus the split union: kept small because
	// every Push and Poll copies it.
	if n := unsafe.Sizeof(WC{}); n > 56 {
		t.Errorf("WC is %d bytes", n)
	}
}

package bth

import (
	"bytes"
	"testing"
)

// A BTH from the rxe capture testdata/rxe/perftest-mtu1024.pcap:
// RDMA WRITE FIRST to QP 0x11, PSN 0x3341fd, P_Key 0xffff.
var writeFirst = []byte{
	0x06,       // OpCode RC_RDMA_WRITE_FIRST
	0x00,       // SE 0, MigReq 0, PadCnt 0, TVer 0
	0xff, 0xff, //    // P_Key
	0x00,             // FECN 0, BECN 0, Resv6 0
	0x00, 0x00, 0x11, // DestQP
	0x00,             // AckReq 0, Resv7 0
	0x33, 0x41, 0xfd, // PSN
}

func TestDecode(t *testing.T) {
	h := Header(writeFirst)
	want := Fields{Opcode: RCRDMAWriteFirst, PKey: 0xffff, DestQP: 0x11, PSN: 0x3341fd}
	if got := h.Fields(); got != want {
		t.Fatalf("Fields = %+v, want %+v", got, want)
	}
}

func TestEncodeEveryField(t *testing.T) {
	f := Fields{
		Opcode: RCSendLastWithImm, SE: true, MigReq: true, PadCnt: 3, TVer: 0,
		PKey: 0x8001, FECN: true, BECN: true, DestQP: 0xabcdef, AckReq: true, PSN: 0xfedcba,
	}
	want := []byte{
		0x03,       // SEND_LAST_WITH_IMMEDIATE
		0xf0,       // S=1 M=1 Pad=3 TVer=0
		0x80, 0x01, //    // P_Key
		0xc0,             // F=1 B=1
		0xab, 0xcd, 0xef, // DestQP
		0x80,             // A=1
		0xfe, 0xdc, 0xba, // PSN
	}
	got := f.Append(nil)
	if !bytes.Equal(got, want) {
		t.Fatalf("Append = % x, want % x", got, want)
	}
	if len(got) != Len {
		t.Fatalf("len(Append(nil)) = %d, want Len = %d", len(got), Len)
	}
	if back := Header(got).Fields(); back != f {
		t.Fatalf("round trip = %+v, want %+v", back, f)
	}
}

func TestSettersKeepNeighbours(t *testing.T) {
	h := Header(Fields{FECN: true, BECN: true, AckReq: true, SE: true, TVer: 0}.appendTo())
	h.SetDestQP(0x1ffffff) // the 25th bit must not leak into BECN
	h.SetPSN(0x1234567)
	h.SetPadCnt(2)
	h.SetOpcode(RCSendOnly)
	want := Fields{Opcode: RCSendOnly, SE: true, PadCnt: 2, FECN: true, BECN: true, DestQP: 0xffffff, AckReq: true, PSN: 0x234567}
	if got := h.Fields(); got != want {
		t.Fatalf("Fields = %+v, want %+v", got, want)
	}
	h.SetAckReq(false)
	if h.AckReq() || h.PSN() != 0x234567 {
		t.Fatalf("SetAckReq(false): AckReq %v PSN %#x", h.AckReq(), h.PSN())
	}
}

func (f Fields) appendTo() []byte { return f.Append(nil) }

func TestPSNArithmetic(t *testing.T) {
	tests := []struct {
		a, b PSN
		diff int32
	}{
		{5, 3, 2},
		{3, 5, -2},
		{0, 0xffffff, 1},           // wrap
		{0xffffff, 0, -1},          // wrap
		{0x7fffff, 0, 0x7fffff},    // furthest ahead
		{0x800000, 0, -0x800000},   // half way round counts as behind
		{0x000010, 0xfffff0, 0x20}, // across the wrap
	}
	for _, tt := range tests {
		if got := tt.a.Diff(tt.b); got != tt.diff {
			t.Errorf("%#x.Diff(%#x) = %d, want %d", tt.a, tt.b, got, tt.diff)
		}
		if got := tt.a.After(tt.b); got != (tt.diff > 0) {
			t.Errorf("%#x.After(%#x) = %v", tt.a, tt.b, got)
		}
		if got := tt.a.Before(tt.b); got != (tt.diff < 0) {
			t.Errorf("%#x.Before(%#x) = %v", tt.a, tt.b, got)
		}
	}
	if got := PSN(0xfffffe).Add(3); got != 1 {
		t.Errorf("0xfffffe + 3 = %#x, want 1", got)
	}
	if !PSN(0).InRange(0xfffffe, 2) || PSN(3).InRange(0xfffffe, 2) || !PSN(0xfffffe).InRange(0xfffffe, 2) {
		t.Error("InRange across the wrap")
	}
}

func TestOpcodeNames(t *testing.T) {
	tests := map[Opcode]string{
		RCSendFirst:              "RC_SEND_FIRST",
		RCSendLastWithImm:        "RC_SEND_LAST_WITH_IMMEDIATE",
		RCRDMAWriteOnlyWithImm:   "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
		RCRDMAReadResponseMiddle: "RC_RDMA_READ_RESPONSE_MIDDLE",
		RCAtomicAcknowledge:      "RC_ATOMIC_ACKNOWLEDGE",
		RCCompareSwap:            "RC_COMPARE_SWAP",
		RCSendOnlyWithInvalidate: "RC_SEND_ONLY_WITH_INVALIDATE",
		RCFlush:                  "RC_FLUSH",
		RCAtomicWrite:            "RC_ATOMIC_WRITE",
		UCRDMAWriteMiddle:        "UC_RDMA_WRITE_MIDDLE",
		UDSendOnlyWithImm:        "UD_SEND_ONLY_WITH_IMMEDIATE",
		CNP:                      "CNP",
		0x15:                     "OPCODE_0x15",
		0x2c:                     "OPCODE_0x2c",
		0x4c:                     "RD_RDMA_READ_REQUEST",
		0xa4:                     "XRC_SEND_ONLY",
		0xb5:                     "OPCODE_0xb5",
		0x80:                     "OPCODE_0x80",
	}
	for op, want := range tests {
		if got := op.String(); got != want {
			t.Errorf("%#x: %q, want %q", uint8(op), got, want)
		}
	}
	var name string
	if n := testing.AllocsPerRun(10, func() { name = UCRDMAWriteMiddle.String() }); n != 0 || name != "UC_RDMA_WRITE_MIDDLE" {
		t.Errorf("String allocates %.0f times", n)
	}
	known := 0
	for op := range 256 {
		if Opcode(op).Known() {
			known++
		}
	}
	// 25 RC (0x00-0x14, 0x16, 0x17, 0x1c, 0x1d), 12 UC, 2 UD, the CNP.
	if known != 25+12+2+1 {
		t.Errorf("%d known opcodes, want 40", known)
	}
}

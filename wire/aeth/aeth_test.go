package aeth

import (
	"bytes"
	"testing"
	"time"
)

func TestSyndromes(t *testing.T) {
	tests := []struct {
		s     Syndrome
		byte_ uint8
		typ   Type
		str   string
	}{
		{ACK(UnlimitedCredits), 0x1f, TypeACK, "ACK credits=31"},
		{ACK(0), 0x00, TypeACK, "ACK credits=0"},
		{RNRNAK(12), 0x2c, TypeRNRNAK, "RNR_NAK timer=0.64ms"},
		{RNRNAK(0), 0x20, TypeRNRNAK, "RNR_NAK timer=655.36ms"},
		{NAK(NAKPSNSequenceError), 0x60, TypeNAK, "NAK PSN_SEQ_ERROR"},
		{NAK(NAKInvalidRequest), 0x61, TypeNAK, "NAK INVALID_REQUEST"},
		{NAK(NAKRemoteAccess), 0x62, TypeNAK, "NAK REMOTE_ACCESS_ERROR"},
		{NAK(NAKRemoteOperation), 0x63, TypeNAK, "NAK REMOTE_OPERATIONAL_ERROR"},
		{NAK(NAKInvalidRDRequest), 0x64, TypeNAK, "NAK INVALID_RD_REQUEST"},
		{Syndrome(0x40), 0x40, TypeReserved, "RESERVED_0x40"},
	}
	for _, tt := range tests {
		if uint8(tt.s) != tt.byte_ || tt.s.Type() != tt.typ || tt.s.String() != tt.str {
			t.Errorf("syndrome %#x: type %v string %q; want %#x %v %q", uint8(tt.s), tt.s.Type(), tt.s, tt.byte_, tt.typ, tt.str)
		}
	}
}

func TestCredits(t *testing.T) {
	for cc, want := range map[uint8]int{0: 0, 4: 4, 5: 6, 14: 128, 30: 32768} {
		if got, limited := ACK(cc).Credits(); got != want || !limited {
			t.Errorf("credit count %d: %d %v, want %d", cc, got, limited, want)
		}
	}
	if _, limited := ACK(31).Credits(); limited {
		t.Error("credit count 31 must mean no limit")
	}
}

// TestRNRTimerTable checks IBTA Vol 1 Table 45 at its ends and where the
// Linux rxe table once had a typo (61.44 ms).
func TestRNRTimerTable(t *testing.T) {
	for timer, want := range map[RNRTimer]time.Duration{
		0:  655360 * time.Microsecond,
		1:  10 * time.Microsecond,
		12: 640 * time.Microsecond, // perftest's min_rnr_timer
		14: 1280 * time.Microsecond,
		25: 61440 * time.Microsecond,
		31: 491520 * time.Microsecond,
	} {
		if got := timer.Duration(); got != want {
			t.Errorf("timer %d = %v, want %v", timer, got, want)
		}
	}
	prev := time.Duration(0)
	for timer := RNRTimer(1); timer < 32; timer++ {
		if d := timer.Duration(); d <= prev {
			t.Errorf("timer %d (%v) not longer than timer %d", timer, d, timer-1)
		} else {
			prev = d
		}
	}
}

func TestHeader(t *testing.T) {
	want := []byte{0x62, 0x12, 0x34, 0x56} // NAK remote access error, MSN 0x123456
	b := make([]byte, Len)
	Header(b).Encode(&Fields{Syndrome: NAK(NAKRemoteAccess), MSN: 0xff123456})
	if !bytes.Equal(b, want) {
		t.Fatalf("Encode = % x, want % x", b, want)
	}
	if f := Header(b).Fields(); f.Syndrome.NAKCode() != NAKRemoteAccess || f.MSN != 0x123456 {
		t.Fatalf("Fields = %+v", f)
	}
}

package immdt

import (
	"bytes"
	"testing"
)

func TestImmAndIETH(t *testing.T) {
	b := make([]byte, Len)
	Header(b).SetImm(0x01020304)
	if !bytes.Equal(b, []byte{1, 2, 3, 4}) || Header(b).Imm() != 0x01020304 {
		t.Fatalf("ImmDt = % x", b)
	}
	IETH(b).SetRKey(0xa0b0c0d0)
	if !bytes.Equal(b, []byte{0xa0, 0xb0, 0xc0, 0xd0}) || IETH(b).RKey() != 0xa0b0c0d0 {
		t.Fatalf("IETH = % x", b)
	}
}

package atomiceth

import (
	"bytes"
	"testing"
)

// TestSwapBeforeCompare pins the wire order: Swap/Add, then Compare.
func TestSwapBeforeCompare(t *testing.T) {
	f := Fields{VA: 0x1122334455667788, RKey: 0xaabbccdd, SwapAdd: 0x0102030405060708, Compare: 0xf1f2f3f4f5f6f7f8}
	want := []byte{
		0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, // VA
		0xaa, 0xbb, 0xcc, 0xdd, // R_Key
		0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // Swap/Add
		0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, // Compare
	}
	b := make([]byte, Len)
	Header(b).Encode(&f)
	if !bytes.Equal(b, want) {
		t.Fatalf("Encode = % x, want % x", b, want)
	}
	if got := Header(b).Fields(); got != f {
		t.Fatalf("Fields = %+v, want %+v", got, f)
	}
	ack := make(AckHeader, AckLen)
	ack.SetOrigData(0xdeadbeefcafef00d)
	if ack.OrigData() != 0xdeadbeefcafef00d || ack[0] != 0xde {
		t.Fatalf("AtomicAckETH = % x", []byte(ack))
	}
}

package reth

import (
	"bytes"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	f := Fields{VA: 0x00007f7e1b8fa000, RKey: 0x204, DMALen: 65536}
	want := []byte{
		0x00, 0x00, 0x7f, 0x7e, 0x1b, 0x8f, 0xa0, 0x00, // VA
		0x00, 0x00, 0x02, 0x04, // R_Key
		0x00, 0x01, 0x00, 0x00, // DMA length
	}
	b := make([]byte, Len)
	Header(b).Encode(&f)
	if !bytes.Equal(b, want) {
		t.Fatalf("Encode = % x, want % x", b, want)
	}
	if got := Header(b).Fields(); got != f {
		t.Fatalf("Fields = %+v, want %+v", got, f)
	}
}

func TestKeyString(t *testing.T) {
	for k, want := range map[Key]string{0x1a2b: "0x00001a2b", 0xdeadbeef: "0xdeadbeef", 0: "0x00000000"} {
		if got := k.String(); got != want {
			t.Errorf("Key(%#x).String() = %q, want %q", uint32(k), got, want)
		}
	}
}

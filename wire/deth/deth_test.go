package deth

import (
	"bytes"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	f := Fields{QKey: GSIQKey, SrcQP: 1}
	want := []byte{0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01}
	b := make([]byte, Len)
	Header(b).Encode(&f)
	if !bytes.Equal(b, want) {
		t.Fatalf("Encode = % x, want % x", b, want)
	}
	b[4] = 0xff // the reserved byte is not part of the source QP
	if got := Header(b).Fields(); got != f {
		t.Fatalf("Fields = %+v, want %+v", got, f)
	}
}

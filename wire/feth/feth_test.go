package feth

import "testing"

func TestFields(t *testing.T) {
	b := make([]byte, Len)
	Header(b).Encode(&Fields{Selectivity: 1, PlacementType: 3})
	if b[3] != 0x13 || b[0]|b[1]|b[2] != 0 {
		t.Fatalf("FETH = % x, want 00 00 00 13", b)
	}
	if f := Header(b).Fields(); f.Selectivity != 1 || f.PlacementType != 3 {
		t.Fatalf("Fields = %+v", f)
	}
}

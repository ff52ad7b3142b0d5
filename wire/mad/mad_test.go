package mad

import (
	"bytes"
	"errors"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	f := Fields{
		BaseVersion:  BaseVersion,
		Class:        ClassCM,
		ClassVersion: CMClassVersion,
		Method:       MethodSend,
		TID:          0x0000_0001_1234_5678,
		AttrID:       AttrREQ,
	}
	want := []byte{
		0x01, 0x07, 0x02, 0x03, // base version, class CM, class version 2, SEND
		0x00, 0x00, 0x00, 0x00, // status, class specific
		0x00, 0x00, 0x00, 0x01, 0x12, 0x34, 0x56, 0x78, // TID
		0x00, 0x10, 0x00, 0x00, // attribute ID REQ, reserved
		0x00, 0x00, 0x00, 0x00, // attribute modifier
	}
	b := make([]byte, Len)
	b[18], b[19] = 0xff, 0xff // Encode clears the reserved field
	Header(b).Encode(&f)
	if !bytes.Equal(b[:HeaderLen], want) {
		t.Fatalf("Encode = % x, want % x", b[:HeaderLen], want)
	}
	h, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Fields(); got != f {
		t.Fatalf("Fields = %+v, want %+v", got, f)
	}
	if len(h.Data()) != DataLen || &h.Data()[0] != &b[HeaderLen] {
		t.Fatalf("Data is not the %d bytes after the header", DataLen)
	}

	f = Fields{BaseVersion: 1, Class: ClassSubnAdm, ClassVersion: 2, Method: MethodGetResp,
		Status: 0x001c, ClassSpecific: 0xbeef, TID: ^uint64(0), AttrID: 0x0035, AttrMod: 0xdeadbeef}
	Header(b).Encode(&f)
	if got := Header(b).Fields(); got != f {
		t.Fatalf("Fields = %+v, want %+v", got, f)
	}
}

func TestParseErrors(t *testing.T) {
	good := make([]byte, Len)
	good[0] = BaseVersion
	for n := range Len {
		if _, err := Parse(good[:n]); !errors.Is(err, ErrShort) {
			t.Fatalf("Parse of %d bytes: %v, want ErrShort", n, err)
		}
	}
	if h, err := Parse(append(good, 0xaa)); err != nil || len(h) != Len {
		t.Fatalf("Parse of %d bytes: len %d, %v; want the first %d", Len+1, len(h), err, Len)
	}
	for _, v := range []byte{0, 2, 0x80} {
		b := bytes.Clone(good)
		b[0] = v
		if _, err := Parse(b); !errors.Is(err, ErrBaseVersion) {
			t.Errorf("Parse with base version %#x: %v, want ErrBaseVersion", v, err)
		}
	}
}

func TestAttrIDString(t *testing.T) {
	for a, want := range map[AttrID]string{
		AttrREQ: "REQ", AttrMRA: "MRA", AttrREJ: "REJ", AttrREP: "REP", AttrRTU: "RTU",
		AttrDREQ: "DREQ", AttrDREP: "DREP", AttrSIDRREQ: "SIDR_REQ", AttrSIDRREP: "SIDR_REP",
		AttrLAP: "LAP", AttrAPR: "APR", 0x000f: "0x000f", 0x001b: "0x001b", 0xff00: "0xff00",
	} {
		if got := a.String(); got != want {
			t.Errorf("AttrID(%#x).String() = %q, want %q", uint16(a), got, want)
		}
	}
}

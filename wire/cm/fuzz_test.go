package cm_test

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/gorxe/gorxe/wire/cm"
	"github.com/gorxe/gorxe/wire/mad"
)

// The fuzz target is seeded with the hand-built vectors. Run it for a
// minute with
//
//	go test ./wire/cm -run '^$' -fuzz '^FuzzCM$' -fuzztime 60s
//
// (make fuzz runs it with the others.)

// cmAttrs are the attribute IDs Decode takes.
var cmAttrs = []mad.AttrID{
	mad.AttrREQ, mad.AttrMRA, mad.AttrREJ, mad.AttrREP, mad.AttrRTU,
	mad.AttrDREQ, mad.AttrDREP, mad.AttrSIDRREQ, mad.AttrSIDRREP,
}

// FuzzCM: arbitrary bytes parse as a MAD, decode as a CM message, decode
// as each message type (the header forced to a CM SEND of that type) and
// as a cma_hdr without panicking; whatever decodes re-encodes into the
// same bytes less the reserved bits and ignored header fields, and decodes
// again into the same message.
func FuzzCM(f *testing.F) {
	for _, v := range vectors {
		f.Add(v.mad)
	}
	f.Add(reqCMA)
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, mad.Len))

	// keep[a] has the bits of a body of attribute a that decoding keeps:
	// an all-ones body re-encoded (TestReserved checks it against the
	// IBTA tables).
	keep := map[mad.AttrID][]byte{}
	for _, a := range cmAttrs {
		m, _, err := cm.Decode(handMAD(uint16(a), 0, poke{24, bytes.Repeat([]byte{0xff}, cm.BodyLen)}))
		if err != nil {
			f.Fatal(err)
		}
		keep[a] = cm.Append(nil, 0, m)[mad.HeaderLen:]
	}

	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := mad.Parse(b); err == nil {
			_ = h.Fields()
		}
		if m, tid, err := cm.Decode(b); err == nil {
			checkReencode(t, b, m, tid, keep)
		}
		if len(b) >= mad.Len {
			for _, a := range cmAttrs {
				forced := bytes.Clone(b[:mad.Len])
				copy(forced, []byte{mad.BaseVersion, byte(mad.ClassCM), mad.CMClassVersion, byte(mad.MethodSend)})
				forced[16], forced[17] = byte(a>>8), byte(a)
				m, tid, err := cm.Decode(forced)
				if err != nil {
					t.Fatalf("%v with a CM header does not decode: %v", a, err)
				}
				if m.AttrID() != a {
					t.Fatalf("attribute %v decoded as %v", a, m.AttrID())
				}
				checkReencode(t, forced, m, tid, keep)
			}
		}
		if h, err := cm.ParseCMAHeader(b); err == nil {
			_ = h.String()
			enc := make([]byte, cm.CMAHeaderLen)
			if err := h.Encode(enc); err != nil {
				t.Fatalf("parsed cma_hdr %+v does not encode: %v", h, err)
			}
			if h2, err := cm.ParseCMAHeader(enc); err != nil || h2 != h {
				t.Fatalf("cma_hdr round trip: %+v, %v; want %+v", h2, err, h)
			}
			if enc[1] != b[1]&0xf0 || !bytes.Equal(enc[2:4], b[2:4]) {
				t.Fatalf("cma_hdr re-encoded version or port differ\n% x\n% x", enc, b[:cm.CMAHeaderLen])
			}
		}
	})
}

// checkReencode checks that m, decoded from the MAD b with transaction ID
// tid, encodes into b's bytes less what decoding ignores, and decodes
// back into itself.
func checkReencode(t *testing.T, b []byte, m cm.Message, tid uint64, keep map[mad.AttrID][]byte) {
	t.Helper()
	if s := m.String(); !strings.HasPrefix(s, m.AttrID().String()+" ") || strings.Contains(s, "\n") {
		t.Fatalf("String = %q", s)
	}
	enc := cm.Append(nil, tid, m)
	if len(enc) != mad.Len {
		t.Fatalf("Append wrote %d bytes", len(enc))
	}
	// The header: what Decode checked and kept, the rest zero.
	want := make([]byte, mad.HeaderLen)
	copy(want[0:4], b[0:4])
	copy(want[8:18], b[8:18])
	if !bytes.Equal(enc[:mad.HeaderLen], want) {
		t.Fatalf("header re-encoded as\n% x\nwant\n% x", enc[:mad.HeaderLen], want)
	}
	// The body: every bit decoding keeps, and only those.
	k := keep[m.AttrID()]
	body := b[mad.HeaderLen:mad.Len]
	for i := range cm.BodyLen {
		if enc[mad.HeaderLen+i] != body[i]&k[i] {
			t.Fatalf("%v body byte %d re-encoded as %#02x, want %#02x (input %#02x, kept bits %#02x)",
				m.AttrID(), i, enc[mad.HeaderLen+i], body[i]&k[i], body[i], k[i])
		}
	}
	m2, tid2, err := cm.Decode(enc)
	if err != nil {
		t.Fatalf("re-encoded %v does not decode: %v", m.AttrID(), err)
	}
	if tid2 != tid || !reflect.DeepEqual(m2, m) {
		t.Fatalf("round trip changed the message\nbefore %+v\nafter  %+v", m, m2)
	}
}

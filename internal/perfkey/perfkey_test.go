package perfkey

import (
	"bytes"
	"net/netip"
	"testing"
)

// A segment may carry key messages behind perftest's other exchanges and
// beside one another; Find returns each, and only them.
func TestFind(t *testing.T) {
	a := Key{LID: 0, OutReads: 16, QPN: 0x11, PSN: 0xabcdef, RKey: 0x1234, VAddr: 0x7f0000001000, GID: netip.MustParseAddr("::ffff:10.9.0.3").As16()}
	b := a
	b.QPN, b.GID = 0x12, [16]byte{}
	ma, err := a.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := b.Append(nil)
	if len(ma) != Len {
		t.Fatalf("a message is %d bytes, want %d", len(ma), Len)
	}
	seg := bytes.Join([][]byte{[]byte("6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), ma, mb, []byte("5\x00")}, nil)
	got := Find(seg)
	if len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("Find = %+v, want %+v and %+v", got, a, b)
	}
	if addr, ok := got[0].Addr(); !ok || addr != netip.MustParseAddr("10.9.0.3") {
		t.Errorf("Addr = %v, %v; want 10.9.0.3", addr, ok)
	}
	if _, ok := got[1].Addr(); ok {
		t.Errorf("the zero GID names an address")
	}
	// A message cut short, or with a field out of shape, is none.
	bad := bytes.Clone(ma)
	bad[10] = 'x'
	if keys := Find(append(bad, ma[:Len-1]...)); len(keys) != 0 {
		t.Errorf("Find found %+v in a broken and a cut message", keys)
	}
	if _, err := (Key{QPN: 1 << 24}).Append(nil); err == nil {
		t.Errorf("a 25-bit QPN was written")
	}
}

// FuzzParse feeds a peer's key messages and capture payloads to Parse
// and Find: nothing panics, a message Parse takes is exactly the one
// Append writes for its key (hex digits of either case), and every key
// Find returns is in the payload as Append writes it.
func FuzzParse(f *testing.F) {
	m, _ := Key{OutReads: 16, QPN: 0x11, PSN: 0xabcdef, RKey: 0x1234, VAddr: 0x7f0000001000, GID: netip.MustParseAddr("::ffff:10.9.0.3").As16()}.Append(nil)
	f.Add(m)
	f.Add(append([]byte("6.06\x00"), m...))
	f.Add(m[:Len-1])
	f.Fuzz(func(t *testing.T, b []byte) {
		if k, err := Parse(b); err == nil {
			again, err := k.Append(nil)
			if err != nil || !bytes.EqualFold(again, b) {
				t.Fatalf("Parse(%q) = %+v, which Append writes as %q, %v", b, k, again, err)
			}
		}
		for _, k := range Find(b) {
			m, err := k.Append(nil)
			if err != nil || !bytes.Contains(bytes.ToLower(b), m[:Len-1]) {
				t.Fatalf("Find(%q) found %+v, written %q, %v", b, k, m, err)
			}
		}
	})
}

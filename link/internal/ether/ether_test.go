package ether

import (
	"net/netip"
	"testing"
)

func TestPutHeaderPayload(t *testing.T) {
	f := make([]byte, 64)
	dst, src := [6]byte{1, 2, 3, 4, 5, 6}, [6]byte{7, 8, 9, 10, 11, 12}
	PutHeader(f, dst, src, TypeIPv6)
	if [6]byte(f[0:6]) != dst || [6]byte(f[6:12]) != src {
		t.Fatalf("addresses % x", f[:12])
	}
	if off, et, ok := Payload(f); !ok || off != HeaderLen || et != TypeIPv6 {
		t.Errorf("untagged: %d %#x %v", off, et, ok)
	}
	// Two tags, 802.1ad then 802.1Q, then IPv4.
	copy(f[12:], []byte{0x88, 0xa8, 0, 1, 0x81, 0x00, 0, 2, 0x08, 0x00})
	if off, et, ok := Payload(f); !ok || off != HeaderLen+2*TagLen || et != TypeIPv4 {
		t.Errorf("two tags: %d %#x %v", off, et, ok)
	}
	for _, n := range []int{0, 13, 17, 21} { // cut in each header
		if _, _, ok := Payload(f[:n]); ok {
			t.Errorf("a frame of %d bytes parsed", n)
		}
	}
}

func TestDestination(t *testing.T) {
	v4 := make([]byte, 20)
	v4[0] = 0x45
	copy(v4[16:], []byte{10, 0, 0, 2})
	if a, et, ok := Destination(v4); !ok || a != netip.MustParseAddr("10.0.0.2") || et != TypeIPv4 {
		t.Errorf("IPv4: %v %#x %v", a, et, ok)
	}
	v6 := make([]byte, 40)
	v6[0] = 0x60
	want := netip.MustParseAddr("fd00::2")
	b := want.As16()
	copy(v6[24:], b[:])
	if a, et, ok := Destination(v6); !ok || a != want || et != TypeIPv6 {
		t.Errorf("IPv6: %v %#x %v", a, et, ok)
	}
	for _, p := range [][]byte{nil, v4[:19], v6[:39], {0x50}} {
		if _, _, ok := Destination(p); ok {
			t.Errorf("% x: parsed", p)
		}
	}
}

func TestMulticastMAC(t *testing.T) {
	for _, tc := range []struct {
		group string
		mac   [6]byte
		ok    bool
	}{
		{"239.129.2.3", [6]byte{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}, true}, // the 24th bit dropped
		{"::ffff:224.0.0.251", [6]byte{0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb}, true},
		{"ff02::1:ff00:1234", [6]byte{0x33, 0x33, 0xff, 0x00, 0x12, 0x34}, true},
		{"10.0.0.1", [6]byte{}, false},
		{"fd00::1", [6]byte{}, false},
	} {
		mac, ok := MulticastMAC(netip.MustParseAddr(tc.group))
		if mac != tc.mac || ok != tc.ok || ok && !IsMulticast(mac) {
			t.Errorf("MulticastMAC(%s) = % x, %v; want % x, %v", tc.group, mac, ok, tc.mac, tc.ok)
		}
	}
}

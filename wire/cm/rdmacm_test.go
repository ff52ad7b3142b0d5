package cm_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/wire/cm"
)

func TestServiceID(t *testing.T) {
	for _, c := range []struct {
		ps   cm.PortSpace
		port uint16
		want uint64
	}{
		{cm.PortSpaceTCP, 18515, 0x0000000001064853}, // perftest -R
		{cm.PortSpaceTCP, 7174, 0x0000000001061c06},  // rping
		{cm.PortSpaceTCP, 0, 0x0000000001060000},
		{cm.PortSpaceUDP, 18515, 0x0000000001114853},
		{cm.PortSpaceIB, 0xffff, 0x00000000013fffff},
	} {
		got := cm.ServiceID(c.ps, c.port)
		if got != c.want {
			t.Errorf("ServiceID(%#04x, %d) = %#016x, want %#016x", uint16(c.ps), c.port, got, c.want)
		}
		ps, port, ok := cm.SplitServiceID(got)
		if !ok || ps != c.ps || port != c.port {
			t.Errorf("SplitServiceID(%#016x) = %#x, %d, %t", got, uint16(ps), port, ok)
		}
	}
	for _, id := range []uint64{
		0,
		0x0000000000010000 | 80, // SDP
		0x0200000000000000,      // IB_CM_ASSIGN_SERVICE_ID
		0x0000000101064853,      // a bit above the rdma_cm range
		cm.ServiceID(cm.PortSpaceIPoIB, 1),
	} {
		if _, _, ok := cm.SplitServiceID(id); ok {
			t.Errorf("SplitServiceID(%#016x) claims an rdma_cm service ID", id)
		}
	}
}

func TestCMAHeader(t *testing.T) {
	for _, c := range []struct {
		name  string
		h     cm.CMAHeader
		bytes []byte
	}{
		{"IPv4", cm.CMAHeader{SrcPort: 49153, Src: ip1, Dst: ip2}, reqCMA[:cm.CMAHeaderLen]},
		{"IPv6", cm.CMAHeader{SrcPort: 0x1234, Src: ll1, Dst: ll2}, concat(
			[]byte{0x00, 0x60, 0x12, 0x34}, // version 0, IPv6, source port
			ll1.AsSlice(), ll2.AsSlice(),
		)},
		{"IPv4-mapped IPv6 stays IPv6", cm.CMAHeader{SrcPort: 1,
			Src: netip.AddrFrom16(ip1.As16()), Dst: netip.AddrFrom16(ip2.As16())}, concat(
			[]byte{0x00, 0x60, 0x00, 0x01},
			zeros(10), []byte{0xff, 0xff, 10, 0, 0, 1},
			zeros(10), []byte{0xff, 0xff, 10, 0, 0, 2},
		)},
	} {
		b := bytes.Repeat([]byte{0xee}, cm.CMAHeaderLen+1)
		if err := c.h.Encode(b); err != nil {
			t.Fatalf("%s: Encode: %v", c.name, err)
		}
		if !bytes.Equal(b[:cm.CMAHeaderLen], c.bytes) || b[cm.CMAHeaderLen] != 0xee {
			t.Errorf("%s: Encode =\n% x\nwant\n% x", c.name, b, c.bytes)
		}
		got, err := cm.ParseCMAHeader(c.bytes)
		if err != nil || got != c.h {
			t.Errorf("%s: ParseCMAHeader = %+v, %v; want %+v", c.name, got, err, c.h)
		}
	}

	// The kernel reads an IPv4 address from the last 4 bytes of its field
	// and the IP version from the high nibble; the rest may be anything.
	sloppy := bytes.Clone(reqCMA[:cm.CMAHeaderLen])
	sloppy[1] |= 0x0f
	sloppy[4], sloppy[20] = 0xaa, 0xbb
	if got, err := cm.ParseCMAHeader(sloppy); err != nil || got != (cm.CMAHeader{SrcPort: 49153, Src: ip1, Dst: ip2}) {
		t.Errorf("ParseCMAHeader with garbage in the padding = %+v, %v", got, err)
	}

	for n := range cm.CMAHeaderLen {
		if _, err := cm.ParseCMAHeader(reqCMA[:n]); !errors.Is(err, cm.ErrCMAShort) {
			t.Fatalf("ParseCMAHeader of %d bytes: %v, want ErrCMAShort", n, err)
		}
	}
	for _, c := range []struct {
		b0, b1 byte
		want   error
	}{
		{1, 0x40, cm.ErrCMAVersion},
		{0, 0x00, cm.ErrCMAIPVersion},
		{0, 0x50, cm.ErrCMAIPVersion},
		{0, 0x04, cm.ErrCMAIPVersion}, // the version is the high nibble
	} {
		b := bytes.Clone(reqCMA)
		b[0], b[1] = c.b0, c.b1
		if _, err := cm.ParseCMAHeader(b); !errors.Is(err, c.want) {
			t.Errorf("ParseCMAHeader(% x ...): %v, want %v", b[:2], err, c.want)
		}
	}

	for _, h := range []cm.CMAHeader{
		{Src: ip1, Dst: ll2},
		{Src: ll1, Dst: ip2},
		{Src: ip1},
		{},
	} {
		b := zeros(cm.CMAHeaderLen)
		if err := h.Encode(b); !errors.Is(err, cm.ErrCMAFamily) || !bytes.Equal(b, zeros(cm.CMAHeaderLen)) {
			t.Errorf("Encode(%+v): %v, wrote % x", h, err, b)
		}
	}
}

// TestREQWithCMAHeader builds a REQ as rdma_connect does: a TCP-space
// service ID for the destination port and a cma_hdr, then the
// application's private data, in the private data.
func TestREQWithCMAHeader(t *testing.T) {
	req := cm.REQ{ServiceID: cm.ServiceID(cm.PortSpaceTCP, 7174)}
	h := cm.CMAHeader{SrcPort: 49153, Src: ip1, Dst: ip2}
	if err := h.Encode(req.PrivateData[:]); err != nil {
		t.Fatal(err)
	}
	copy(req.PrivateData[cm.CMAHeaderLen:], "hello")
	if len(req.PrivateData)-cm.CMAHeaderLen != 56 {
		t.Errorf("a REQ leaves %d bytes for the application, want 56", len(req.PrivateData)-cm.CMAHeaderLen)
	}
	b := cm.Append(nil, 0, &req)
	if !bytes.Equal(b[24+140:24+140+len(reqCMA)], reqCMA) {
		t.Errorf("REQ private data = % x, want % x", b[24+140:24+140+len(reqCMA)], reqCMA)
	}
	m, _, err := cm.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cm.ParseCMAHeader(m.(*cm.REQ).PrivateData[:])
	if err != nil || got != h {
		t.Errorf("cma_hdr back = %+v, %v; want %+v", got, err, h)
	}
	if ps, port, ok := cm.SplitServiceID(m.(*cm.REQ).ServiceID); !ok || ps != cm.PortSpaceTCP || port != 7174 {
		t.Errorf("service ID back = %#x, %d, %t", uint16(ps), port, ok)
	}
}

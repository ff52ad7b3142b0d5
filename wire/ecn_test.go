package wire_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/wire"
)

func TestECNCodepoints(t *testing.T) {
	for _, c := range []struct {
		tc      uint8
		capable uint8 // ECNCapable(tc)
		name    string
	}{
		{0x00, 0x02, "Not-ECT"}, // DSCP 0: leaves ECT(0)
		{0x01, 0x01, "ECT(1)"},  // the sender chose ECT(1): kept
		{0x02, 0x02, "ECT(0)"},
		{0x03, 0x03, "CE"},
		{0xc0, 0xc2, "Not-ECT"}, // DSCP 48 keeps its DSCP
		{0xb8, 0xba, "Not-ECT"}, // DSCP 46 (EF)
	} {
		if got := wire.ECNCapable(c.tc); got != c.capable {
			t.Errorf("ECNCapable(%#02x) = %#02x, want %#02x", c.tc, got, c.capable)
		}
		if got := wire.ECN(c.tc & 3).String(); got != c.name {
			t.Errorf("ECN of %#02x is %s, want %s", c.tc, got, c.name)
		}
	}
	if got := wire.TrafficClass(48, wire.ECT0); got != 0xc2 {
		t.Errorf("TrafficClass(48, ECT(0)) = %#02x, want 0xc2", got)
	}
	if wire.CNPTrafficClass != 0xc2 {
		t.Errorf("CNPTrafficClass = %#02x, want 0xc2 (DSCP 48, ECT(0))", wire.CNPTrafficClass)
	}
	if got := wire.TrafficClass(26, wire.CE); got != 0x6b {
		t.Errorf("TrafficClass(26, CE) = %#02x, want 0x6b", got)
	}
}

// TestPacketCE: CE is read from the IPv4 TOS and the IPv6 traffic class,
// and a switch's mark leaves the ICRC valid (Annex A17.3.3 masks the byte).
func TestPacketCE(t *testing.T) {
	for _, ip := range []wire.IPFields{
		{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), HopLimit: 64, DontFrag: true},
		{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), HopLimit: 64},
	} {
		for _, e := range []wire.ECN{wire.NotECT, wire.ECT1, wire.ECT0, wire.CE} {
			ip.TrafficClass = wire.TrafficClass(10, wire.ECT0)
			f := wire.CNP(ip, 0x42)
			pkt, err := f.Append(nil)
			if err != nil {
				t.Fatal(err)
			}
			// Rewrite the ECN bits as a switch does, after the ICRC.
			if ip.Src.Is4() {
				pkt[1] = pkt[1]&^3 | uint8(e)
			} else {
				pkt[1] = pkt[1]&^0x30 | uint8(e)<<4
			}
			var p wire.Packet
			if err := wire.ParseIP(&p, pkt); err != nil {
				t.Fatal(err)
			}
			if p.CE() != (e == wire.CE) || wire.ECN(p.ECN()) != e || p.TrafficClass()>>2 != 10 {
				t.Errorf("%v marked %v: CE() %v, ECN %v, DSCP %d", ip.Src, e, p.CE(), wire.ECN(p.ECN()), p.TrafficClass()>>2)
			}
			if err := p.CheckICRC(); err != nil {
				t.Errorf("%v marked %v: %v", ip.Src, e, err)
			}
		}
	}
}

// TestBuildConnectXCNP builds the CNP a ConnectX-4 Lx sent (scapy's
// roce.uts) from its fields alone: CNPTrafficClass, UDP source port 0,
// TTL 64, DF, the IP ID it had.
func TestBuildConnectXCNP(t *testing.T) {
	want := unhex(t, publishedVectors[0].hex)[wire.EthernetLen:]
	f := wire.CNP(wire.IPFields{
		Src: netip.MustParseAddr("10.0.17.1"), Dst: netip.MustParseAddr("10.0.18.1"),
		TrafficClass: wire.CNPTrafficClass, HopLimit: 64, ID: 0x718c, DontFrag: true,
	}, 0x118)
	if f.SrcPort != 0 {
		t.Fatalf("CNP's default UDP source port is %d, want 0 as ConnectX sends it", f.SrcPort)
	}
	got, err := f.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("CNP\n got %x\nwant %x", got, want)
	}
	if len(got) != 60 || f.Len() != 60 {
		t.Fatalf("an IPv4 CNP is 60 bytes, built %d (Len %d)", len(got), f.Len())
	}
}

// TestMarkCE marks an IPv4 and an IPv6 header CE: the ECN field becomes
// 0b11, the rest of the byte stays, IPv4's checksum still verifies, and a
// packet too short for its header is left alone.
func TestMarkCE(t *testing.T) {
	v4 := []byte{0x45, 0xb9, 0, 60, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2}
	binary.BigEndian.PutUint16(v4[10:], ipv4Checksum(v4))
	wire.MarkCE(v4)
	if v4[1] != 0xbb {
		t.Errorf("IPv4 TOS %#x, want 0xbb", v4[1])
	}
	if got := ipv4Checksum(v4); got != binary.BigEndian.Uint16(v4[10:]) {
		t.Errorf("IPv4 checksum %#x after marking, want %#x", binary.BigEndian.Uint16(v4[10:]), got)
	}
	v6 := make([]byte, 40)
	v6[0], v6[1], v6[2], v6[3] = 0x6b, 0x91, 0x23, 0x45 // TC 0xb9, flow label 0x12345
	wire.MarkCE(v6)
	if h := wire.IPv6(v6); h.TrafficClass() != 0xbb || h.FlowLabel() != 0x12345 {
		t.Errorf("IPv6 traffic class %#x, flow label %#x, want 0xbb and 0x12345", h.TrafficClass(), h.FlowLabel())
	}
	short := []byte{0x45, 0xb8, 0}
	wire.MarkCE(short)
	if short[1] != 0xb8 {
		t.Errorf("a 3-byte packet was changed: %x", short)
	}
}

// ipv4Checksum computes an IPv4 header's checksum from scratch, its own
// field taken as zero.
func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i < len(h); i += 2 {
		if i != 10 {
			sum += uint32(h[i])<<8 | uint32(h[i+1])
		}
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

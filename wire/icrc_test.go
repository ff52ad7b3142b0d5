package wire_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/reth"
)

// samplePackets returns packets to mutate, each from its IP header on: a
// real rxe RDMA WRITE FIRST over IPv4, and gorxe-built packets over IPv4 and
// IPv6 with every kind of extended header and a padded payload.
func samplePackets(t testing.TB) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, frame := range rocePackets(t, "../testdata/rxe/perftest-mtu1024.pcap") {
		var p wire.Packet
		if err := wire.ParseFrame(&p, frame); err != nil {
			t.Fatal(err)
		}
		if p.BTH.Opcode() == bth.RCRDMAWriteFirst {
			out["rxe IPv4 RDMA_WRITE_FIRST"] = frame[wire.EthernetLen:]
			break
		}
	}
	ip4 := wire.IPFields{
		Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"),
		TrafficClass: 0x02, HopLimit: 64, DontFrag: true,
	}
	ip6 := wire.IPFields{
		Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"),
		TrafficClass: 0x02, HopLimit: 64, FlowLabel: 0x12345,
	}
	payload := []byte("seventeen bytes!!")
	write := wire.Headers{
		BTH:  bth.Fields{Opcode: bth.RCRDMAWriteOnlyWithImm, PKey: 0xffff, DestQP: 0x123456, AckReq: true, PSN: 0xfffffe},
		RETH: reth.Fields{VA: 0x7f00deadbeef0000, RKey: 0xc0ffee01, DMALen: uint32(len(payload))},
		Imm:  0x01020304,
	}
	cas := wire.Headers{BTH: bth.Fields{Opcode: bth.RCCompareSwap, PKey: 0xffff, DestQP: 7, PSN: 9}}
	cas.AtomicETH.VA, cas.AtomicETH.RKey, cas.AtomicETH.SwapAdd, cas.AtomicETH.Compare = 0x1000, 0x55, 1, 2
	for name, f := range map[string]wire.Frame{
		"gorxe IPv4 WRITE_ONLY_WITH_IMM": {IP: ip4, SrcPort: 0xc001, DstPort: wire.UDPPort, Headers: write, Payload: payload},
		"gorxe IPv6 WRITE_ONLY_WITH_IMM": {IP: ip6, SrcPort: 0xc001, DstPort: wire.UDPPort, Headers: write, Payload: payload},
		"gorxe IPv6 COMPARE_SWAP":        {IP: ip6, SrcPort: 0xc002, DstPort: wire.UDPPort, Headers: cas},
		"gorxe IPv6 CNP":                 wire.CNP(ip6, 0x42),
	} {
		b, err := f.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
	return out
}

// maskedBits returns, for each byte offset of packet, the bits the ICRC does
// not cover.
func maskedBits(packet []byte) map[int]byte {
	m := map[int]byte{}
	var udp int
	if packet[0]>>4 == 4 {
		m[1] = 0xff  // TOS: DSCP and ECN
		m[8] = 0xff  // TTL
		m[10] = 0xff // header checksum
		m[11] = 0xff
		udp = wire.IPv4Len
	} else {
		m[0] = 0x0f // traffic class (high nibble)
		m[1] = 0xff // traffic class (low nibble) and flow label
		m[2] = 0xff
		m[3] = 0xff
		m[7] = 0xff // hop limit
		udp = wire.IPv6Len
	}
	m[udp+6] = 0xff // UDP checksum
	m[udp+7] = 0xff
	m[udp+wire.UDPLen+4] = 0xff // BTH FECN, BECN, Resv6
	return m
}

// checkICRC checks p, parsed from pkt, with CheckICRC and with
// CheckICRCInPlace, which must agree and leave pkt as they found it.
func checkICRC(t *testing.T, p *wire.Packet, pkt []byte) error {
	t.Helper()
	before := append([]byte(nil), pkt...)
	copied := p.CheckICRC()
	inPlace := p.CheckICRCInPlace()
	if copied != inPlace {
		t.Errorf("CheckICRC = %v, CheckICRCInPlace = %v", copied, inPlace)
	}
	if !bytes.Equal(pkt, before) {
		t.Errorf("CheckICRCInPlace changed the packet\nbefore %x\nafter  %x", before, pkt)
	}
	return copied
}

// TestICRCMaskedFields changes every field the ICRC masks and expects the
// packet to still verify.
func TestICRCMaskedFields(t *testing.T) {
	for name, pkt := range samplePackets(t) {
		t.Run(name, func(t *testing.T) {
			for off, bits := range maskedBits(pkt) {
				for _, v := range []byte{0x00, 0xff, 0x5a} {
					b := append([]byte(nil), pkt...)
					b[off] = b[off]&^bits | v&bits
					var p wire.Packet
					if err := wire.ParseIP(&p, b); err != nil {
						t.Fatalf("byte %d = %#x: parse: %v", off, b[off], err)
					}
					if err := checkICRC(t, &p, b); err != nil {
						t.Errorf("byte %d = %#x: masked change broke the ICRC: %v", off, b[off], err)
					}
				}
			}
		})
	}
}

// TestMaskedICRC: with ones written into every bit the ICRC masks,
// MaskedICRC over the whole packet is the packet's ICRC.
func TestMaskedICRC(t *testing.T) {
	for name, pkt := range samplePackets(t) {
		t.Run(name, func(t *testing.T) {
			var p wire.Packet
			if err := wire.ParseIP(&p, pkt); err != nil {
				t.Fatal(err)
			}
			b := append([]byte(nil), pkt[:len(pkt)-wire.ICRCLen]...)
			for off, bits := range maskedBits(pkt) {
				b[off] |= bits
			}
			if got := wire.MaskedICRC(b); got != p.ICRC() {
				t.Errorf("MaskedICRC = %#08x, the packet carries %#08x", got, p.ICRC())
			}
		})
	}
}

// TestICRCCoveredBytes flips each covered bit in turn, from the IP header
// through the pad, and expects the packet to be refused: by the parser or
// by the ICRC check.
func TestICRCCoveredBytes(t *testing.T) {
	for name, pkt := range samplePackets(t) {
		t.Run(name, func(t *testing.T) {
			masked := maskedBits(pkt)
			for off := 0; off < len(pkt)-wire.ICRCLen; off++ {
				for bit := 0; bit < 8; bit++ {
					flip := byte(1) << bit
					if masked[off]&flip != 0 {
						continue
					}
					b := append([]byte(nil), pkt...)
					b[off] ^= flip
					var p wire.Packet
					if err := wire.ParseIP(&p, b); err != nil {
						continue // refused before the ICRC: also a failure to accept
					}
					if err := checkICRC(t, &p, b); err == nil {
						t.Errorf("byte %d bit %d changed and the ICRC still verifies", off, bit)
					}
				}
			}
		})
	}
}

// TestICRCTrailerCorrupt checks that damage to the ICRC itself is caught.
func TestICRCTrailerCorrupt(t *testing.T) {
	for name, pkt := range samplePackets(t) {
		b := append([]byte(nil), pkt...)
		b[len(b)-1] ^= 0x80
		var p wire.Packet
		if err := wire.ParseIP(&p, b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := checkICRC(t, &p, b); err != wire.ErrICRC {
			t.Errorf("%s: CheckICRC = %v, want ErrICRC", name, err)
		}
	}
}

// TestCheckICRCWithoutIP: a packet parsed from its UDP payload cannot be
// verified, and says so.
func TestCheckICRCWithoutIP(t *testing.T) {
	pkt := samplePackets(t)["gorxe IPv6 COMPARE_SWAP"]
	var p wire.Packet
	if err := wire.ParseUDPPayload(&p, pkt[wire.IPv6Len+wire.UDPLen:]); err != nil {
		t.Fatal(err)
	}
	if err := p.CheckICRC(); err != wire.ErrNoIPHeader {
		t.Fatalf("CheckICRC = %v, want ErrNoIPHeader", err)
	}
	if err := p.CheckICRCInPlace(); err != wire.ErrNoIPHeader {
		t.Fatalf("CheckICRCInPlace = %v, want ErrNoIPHeader", err)
	}
	if _, err := p.Frame(); err != wire.ErrNoIPHeader {
		t.Fatalf("Frame = %v, want ErrNoIPHeader", err)
	}
}

// ICRCWithIPv4ID must give the ICRC that computing it afresh with the new
// ID gives, for every length and ID.
func TestICRCWithIPv4ID(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for _, tl := range []int{12, 13, 16, 28, 100, 1024 + 28, 4096 + 12, 4096 + 28, 9000} {
		transport := make([]byte, tl)
		for i := range transport {
			transport[i] = byte(r.Uint32())
		}
		ip := make([]byte, wire.IPv4Len)
		ip[0] = 0x45
		for i := 1; i < wire.IPv4Len; i++ {
			ip[i] = byte(r.Uint32())
		}
		udp := []byte{0xc0, 0x01, 0x12, 0xb7, 0, 0, 0, 0}
		for _, ids := range [][2]uint16{{0, 1}, {0, 14}, {0, 63}, {5, 6}, {0x1234, 0xfedc}, {0xffff, 0}, {9, 9}} {
			binary.BigEndian.PutUint16(ip[4:], ids[0])
			before := wire.ComputeICRC(ip, udp, transport)
			binary.BigEndian.PutUint16(ip[4:], ids[1])
			want := wire.ComputeICRC(ip, udp, transport)
			if got := wire.ICRCWithIPv4ID(before, ids[0], ids[1], tl); got != want {
				t.Errorf("transport %d bytes, ID %#x to %#x: got %#08x, want %#08x", tl, ids[0], ids[1], got, want)
			}
		}
	}
}

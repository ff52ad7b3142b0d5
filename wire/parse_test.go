package wire_test

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// TestTruncatedPrefixes parses every proper prefix of valid packets and
// expects an error each time, never a panic or a packet.
func TestTruncatedPrefixes(t *testing.T) {
	pkts := samplePackets(t)
	for i, frame := range rocePackets(t, "../testdata/rxe/perftest-mtu4096-mixed.pcap") {
		if i%7 == 0 { // a spread of opcodes and sizes
			pkts["rxe frame "+string(rune('A'+i%26))] = frame[wire.EthernetLen:]
		}
	}
	for name, pkt := range pkts {
		for n := 0; n < len(pkt); n++ {
			var p wire.Packet
			if err := wire.ParseIP(&p, pkt[:n]); err == nil {
				t.Fatalf("%s: prefix of %d/%d bytes parsed", name, n, len(pkt))
			}
		}
		// Without the IP and UDP lengths a short transport can look whole;
		// it must still never panic, and never yield more than it was given.
		udp := pkt[wire.IPv4Len+wire.UDPLen:]
		if pkt[0]>>4 == 6 {
			udp = pkt[wire.IPv6Len+wire.UDPLen:]
		}
		for n := 0; n < len(udp); n++ {
			var p wire.Packet
			if err := wire.ParseUDPPayload(&p, udp[:n]); err == nil && len(p.Transport())+wire.ICRCLen != n {
				t.Fatalf("%s: UDP payload prefix %d parsed as %d bytes", name, n, len(p.Transport()))
			}
		}
	}
}

// TestFramePrefixes: truncated Ethernet frames fail too.
func TestFramePrefixes(t *testing.T) {
	frames := rocePackets(t, "../testdata/rxe/perftest-mtu1024.pcap")
	frame := frames[0]
	for n := 0; n < len(frame); n++ {
		var p wire.Packet
		if err := wire.ParseFrame(&p, frame[:n]); err == nil {
			t.Fatalf("prefix of %d/%d bytes parsed", n, len(frame))
		}
	}
}

func TestParseErrors(t *testing.T) {
	base := samplePackets(t)["gorxe IPv4 WRITE_ONLY_WITH_IMM"]
	cas := samplePackets(t)["gorxe IPv6 COMPARE_SWAP"]
	mod := func(pkt []byte, f func(b []byte)) []byte {
		b := append([]byte(nil), pkt...)
		f(b)
		return b
	}
	tests := []struct {
		name string
		pkt  []byte
		want error
	}{
		{"empty", nil, wire.ErrTruncated},
		{"IP version 5", mod(base, func(b []byte) { b[0] = 0x55 }), wire.ErrNotIP},
		{"IPv4 options", mod(base, func(b []byte) { b[0] = 0x46 }), wire.ErrIPOptions},
		{"IPv4 fragment", mod(base, func(b []byte) { b[6] |= 0x20 }), wire.ErrFragment},
		{"TCP", mod(base, func(b []byte) { b[9] = 6 }), wire.ErrNotUDP},
		{"IPv6 extension header", mod(cas, func(b []byte) { b[6] = 0 }), wire.ErrNotUDP},
		{"IPv4 total length short", mod(base, func(b []byte) { b[2], b[3] = 0, 19 }), wire.ErrLength},
		{"UDP length too long", mod(base, func(b []byte) { b[24]++ }), wire.ErrLength},
		{"UDP length under 8", mod(base, func(b []byte) { b[24], b[25] = 0, 7 }), wire.ErrLength},
		{"TVer 1", mod(base, func(b []byte) { b[29] |= 1 }), wire.ErrTVer},
		{"reserved opcode 0x15", mod(base, func(b []byte) { b[28] = 0x15 }), wire.ErrOpcode},
		{"RD opcode", mod(base, func(b []byte) { b[28] = 0x44 }), wire.ErrOpcode},
		{"pad beyond payload", mod(cas, func(b []byte) { b[49] |= 0x30 }), wire.ErrPad},
		{"payload on ACK-less atomic", mod(base, func(b []byte) { b[28] = byte(bth.RCFetchAdd) }), wire.ErrPayload},
	}
	for _, tt := range tests {
		var p wire.Packet
		if err := wire.ParseIP(&p, tt.pkt); !errors.Is(err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
		}
	}
}

// TestEthernetPaddingIgnored: bytes after the IP length (Ethernet padding of
// short frames) are not part of the packet.
func TestEthernetPaddingIgnored(t *testing.T) {
	pkt := samplePackets(t)["gorxe IPv6 CNP"]
	padded := append(append([]byte(nil), pkt...), 0, 0, 0, 0, 0, 0)
	var p wire.Packet
	if err := wire.ParseIP(&p, padded); err != nil {
		t.Fatal(err)
	}
	if err := p.CheckICRC(); err != nil {
		t.Fatal(err)
	}
}

// TestParseVLANFrame: an 802.1Q tag between the MACs and the EtherType.
func TestParseVLANFrame(t *testing.T) {
	frame := rocePackets(t, "../testdata/rxe/perftest-mtu1024.pcap")[0]
	tagged := append(append(append([]byte(nil), frame[:12]...), 0x81, 0x00, 0x00, 0x64), frame[12:]...)
	var p wire.Packet
	if err := wire.ParseFrame(&p, tagged); err != nil {
		t.Fatal(err)
	}
	if len(p.Eth) != 18 {
		t.Errorf("Ethernet header length %d, want 18", len(p.Eth))
	}
	if err := p.CheckICRC(); err != nil {
		t.Fatal(err)
	}
	arp := append(append([]byte(nil), frame[:12]...), 0x08, 0x06, 0, 1)
	if err := wire.ParseFrame(&p, arp); err != wire.ErrNotEthernet {
		t.Errorf("ARP frame: %v, want ErrNotEthernet", err)
	}
}

// TestParseReusesPacket: a Packet reused for a second parse keeps nothing of
// the first.
func TestParseReusesPacket(t *testing.T) {
	pkts := samplePackets(t)
	var p wire.Packet
	if err := wire.ParseIP(&p, pkts["gorxe IPv4 WRITE_ONLY_WITH_IMM"]); err != nil {
		t.Fatal(err)
	}
	if err := wire.ParseIP(&p, pkts["gorxe IPv6 COMPARE_SWAP"]); err != nil {
		t.Fatal(err)
	}
	if p.RETH != nil || p.ImmDt != nil || len(p.Payload) != 0 || p.AtomicETH == nil {
		t.Fatalf("stale views after reuse: %+v", p)
	}
}

// TestAppendTransportLen: AppendTransport writes exactly TransportLen bytes,
// the pad count matches, and an unknown opcode or a payload on an opcode
// without one writes nothing and returns ErrOpcode or ErrPayload.
func TestAppendTransportLen(t *testing.T) {
	for op := 0; op < 256; op++ {
		h := wire.Headers{BTH: bth.Fields{Opcode: bth.Opcode(op), PKey: 0xffff}}
		info, ok := wire.Lookup(bth.Opcode(op))
		if ok != bth.Opcode(op).Known() {
			t.Errorf("%v: Lookup=%v but Known=%v", bth.Opcode(op), ok, bth.Opcode(op).Known())
		}
		for _, n := range []int{0, 1, 2, 3, 4, 5, 1024} {
			payload := bytes.Repeat([]byte{0xab}, n)
			b, err := wire.AppendTransport([]byte{1, 2, 3}, &h, payload)
			switch {
			case !ok || n > 0 && !info.Payload:
				want := wire.ErrOpcode
				if ok {
					want = wire.ErrPayload
				}
				if !errors.Is(err, want) || len(b) != 3 {
					t.Errorf("%v with %d bytes: appended %d bytes, err %v; want none, %v", bth.Opcode(op), n, len(b)-3, err, want)
				}
				continue
			case err != nil:
				t.Fatalf("%v with %d bytes: %v", bth.Opcode(op), n, err)
			case len(b)-3 != h.TransportLen(n):
				t.Errorf("%v: appended %d bytes, TransportLen says %d", bth.Opcode(op), len(b)-3, h.TransportLen(n))
			}
			var p wire.Packet
			if err := wire.ParseUDPPayload(&p, append(b[3:], 0, 0, 0, 0)); err != nil {
				t.Fatalf("%v with %d bytes: %v", bth.Opcode(op), n, err)
			}
			if !bytes.Equal(p.Payload, payload) || p.BTH.PadCnt() != wire.PadLen(n) {
				t.Errorf("%v: payload %d bytes pad %d, want %d pad %d", bth.Opcode(op), len(p.Payload), p.BTH.PadCnt(), n, wire.PadLen(n))
			}
			if got := p.Headers(); !reflect.DeepEqual(got.BTH.Opcode, h.BTH.Opcode) {
				t.Errorf("opcode %v after round trip, want %v", got.BTH.Opcode, h.BTH.Opcode)
			}
		}
	}
}

// TestEncodeErrors: Headers.Encode writes nothing and says why for an
// opcode gorxe does not build and for a buffer shorter than the headers.
func TestEncodeErrors(t *testing.T) {
	b := bytes.Repeat([]byte{0xee}, 64)
	h := wire.Headers{BTH: bth.Fields{Opcode: 0x15, PKey: 0xffff}} // reserved RC opcode
	n, err := h.Encode(b)
	if n != 0 || !errors.Is(err, wire.ErrOpcode) {
		t.Errorf("reserved opcode: Encode = %d, %v; want 0, ErrOpcode", n, err)
	}
	if err != nil && !strings.Contains(err.Error(), "OPCODE_0x15") {
		t.Errorf("error %q does not name the opcode", err)
	}
	h.BTH.Opcode = bth.RCRDMAWriteFirst
	n, err = h.Encode(b[:h.Len()-1])
	if n != 0 || !errors.Is(err, io.ErrShortBuffer) {
		t.Errorf("short buffer: Encode = %d, %v; want 0, io.ErrShortBuffer", n, err)
	}
	if !bytes.Equal(b, bytes.Repeat([]byte{0xee}, 64)) {
		t.Errorf("failed Encode wrote % x", b)
	}
	if n, err := h.Encode(b); n != h.Len() || err != nil {
		t.Errorf("Encode = %d, %v; want %d, nil", n, err, h.Len())
	}
}

// TestFrameAppendErrors: Frame.Append returns b unchanged with the
// encoder's error.
func TestFrameAppendErrors(t *testing.T) {
	ip := wire.IPFields{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")}
	for _, c := range []struct {
		f    wire.Frame
		want error
	}{
		{wire.Frame{IP: ip, Headers: wire.Headers{BTH: bth.Fields{Opcode: 0x15}}}, wire.ErrOpcode},
		{wire.Frame{IP: ip, Headers: wire.Headers{BTH: bth.Fields{Opcode: bth.RCAcknowledge}}, Payload: []byte{1}}, wire.ErrPayload},
		{wire.Frame{Headers: wire.Headers{BTH: bth.Fields{Opcode: bth.RCAcknowledge}}}, wire.ErrAddrFamily},
	} {
		b, err := c.f.Append([]byte{1, 2, 3})
		if !errors.Is(err, c.want) || !bytes.Equal(b, []byte{1, 2, 3}) {
			t.Errorf("%v: Append = % x, %v; want 01 02 03, %v", c.f.BTH.Opcode, b, err, c.want)
		}
	}
}

// TestHeaderLengths pins the header chain of each kind of opcode.
func TestHeaderLengths(t *testing.T) {
	for _, tt := range []struct {
		op  bth.Opcode
		len int
	}{
		{bth.RCSendMiddle, 12},
		{bth.RCSendOnlyWithImm, 16},
		{bth.RCSendOnlyWithInvalidate, 16},
		{bth.RCRDMAWriteFirst, 28},
		{bth.RCRDMAWriteOnlyWithImm, 32},
		{bth.RCRDMAReadRequest, 28},
		{bth.RCRDMAReadResponseFirst, 16},
		{bth.RCRDMAReadResponseMiddle, 12},
		{bth.RCAcknowledge, 16},
		{bth.RCAtomicAcknowledge, 24},
		{bth.RCCompareSwap, 40},
		{bth.RCFetchAdd, 40},
		{bth.RCFlush, 32},
		{bth.RCAtomicWrite, 28},
		{bth.UCRDMAWriteLastWithImm, 16},
		{bth.UDSendOnly, 20},
		{bth.UDSendOnlyWithImm, 24},
		{bth.CNP, 28},
	} {
		h := wire.Headers{BTH: bth.Fields{Opcode: tt.op}}
		if h.Len() != tt.len {
			t.Errorf("%v: header length %d, want %d", tt.op, h.Len(), tt.len)
		}
	}
}

// An IPv6 packet that carries IPv4-mapped addresses, one or both, builds
// back into IPv6, byte for byte (FuzzParseIP found the first).
func TestIPv6WithMappedAddresses(t *testing.T) {
	for _, pair := range [][2]string{{"::ffff:10.0.0.1", "::ffff:10.0.0.2"}, {"fd00::1", "::ffff:10.0.0.2"}} {
		f := wire.Frame{
			IP:      wire.IPFields{Src: netip.MustParseAddr(pair[0]), Dst: netip.MustParseAddr(pair[1]), HopLimit: 64, IPv6: true},
			SrcPort: 0xc000, DstPort: wire.UDPPort,
			Headers: wire.Headers{BTH: bth.Fields{Opcode: bth.RCSendOnly, PKey: 0xffff, DestQP: 0x11}},
			Payload: []byte("mapped"),
		}
		b, err := f.Append(nil)
		if err != nil || b[0]>>4 != 6 || len(b) != f.Len() {
			t.Fatalf("%v: Append = %x, %v", pair, b, err)
		}
		var p wire.Packet
		if err := wire.ParseIP(&p, b); err != nil {
			t.Fatal(err)
		}
		fr, err := p.Frame()
		if err != nil {
			t.Fatal(err)
		}
		again, err := fr.Append(nil)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("%v: rebuilt\n%x, %v\nwant\n%x", pair, again, err, b)
		}
	}
}

//go:build linux

package tap

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/ether"
)

var (
	testMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x05}
	peerMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	otherMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}
)

// serialize builds a frame from gopacket layers, with lengths and
// checksums filled in.
func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	for _, l := range ls {
		if n, ok := l.(interface {
			SetNetworkLayerForChecksum(gopacket.NetworkLayer) error
		}); ok {
			for _, ip := range ls {
				if nl, ok := ip.(gopacket.NetworkLayer); ok {
					n.SetNetworkLayerForChecksum(nl)
				}
			}
		}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func eth(dst net.HardwareAddr, t layers.EthernetType) *layers.Ethernet {
	return &layers.Ethernet{SrcMAC: peerMAC, DstMAC: dst, EthernetType: t}
}

func ip4(dst string, proto layers.IPProtocol) *layers.IPv4 {
	return &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: proto,
		SrcIP: net.ParseIP("10.9.0.1").To4(), DstIP: net.ParseIP(dst).To4()}
}

func ip6(dst string, next layers.IPProtocol, hop uint8) *layers.IPv6 {
	return &layers.IPv6{Version: 6, NextHeader: next, HopLimit: hop,
		SrcIP: net.ParseIP("fd00::1"), DstIP: net.ParseIP(dst)}
}

// inputFrames are frames input must take apart, each with what it must
// return and the counter it must raise.
func inputFrames(t testing.TB) []struct {
	name    string
	frame   []byte
	want    int
	counter func(Stats) uint64
} {
	roce4 := serialize(t, eth(testMAC, layers.EthernetTypeIPv4), ip4("10.9.0.5", layers.IPProtocolUDP),
		&layers.UDP{SrcPort: 1, DstPort: 4791}, gopacket.Payload(make([]byte, 8)))
	roce6 := serialize(t, eth(testMAC, layers.EthernetTypeIPv6), ip6("fd00::5", layers.IPProtocolUDP, 64),
		&layers.UDP{SrcPort: 1, DstPort: 4791}, gopacket.Payload(make([]byte, 8)))
	// gopacket pads the IPv4 frame to Ethernet's minimum of 60 bytes, as
	// a NIC would: the IP packet is shorter than the frame.
	roce4Len := ipv4Len + udpLen + 8
	padded := append(append([]byte(nil), roce4...), make([]byte, 100)...)
	fragment := append([]byte(nil), roce4...)
	fragment[ether.HeaderLen+6] |= 0x20 // MF
	truncated := roce4[:ether.HeaderLen+roce4Len-1]
	vlan := serialize(t, eth(testMAC, layers.EthernetTypeDot1Q),
		&layers.Dot1Q{VLANIdentifier: 5, Type: layers.EthernetTypeIPv4}, ip4("10.9.0.5", layers.IPProtocolUDP),
		&layers.UDP{SrcPort: 1, DstPort: 4791}, gopacket.Payload(make([]byte, 8)))
	echo := serialize(t, eth(testMAC, layers.EthernetTypeIPv4), ip4("10.9.0.5", layers.IPProtocolICMPv4),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0), Id: 1, Seq: 1}, gopacket.Payload([]byte("ping")))
	badEcho := append([]byte(nil), echo...)
	badEcho[ether.HeaderLen+ipv4Len+8] ^= 1
	ns := func(hop uint8) []byte {
		return serialize(t, &layers.Ethernet{SrcMAC: peerMAC, DstMAC: net.HardwareAddr{0x33, 0x33, 0xff, 0, 0, 5}, EthernetType: layers.EthernetTypeIPv6},
			ip6("ff02::1:ff00:5", layers.IPProtocolICMPv6, hop),
			&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(135, 0)},
			&layers.ICMPv6NeighborSolicitation{TargetAddress: net.ParseIP("fd00::5"),
				Options: layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: peerMAC}}})
	}
	arp := func(tpa string) []byte {
		return serialize(t, eth(layers.EthernetBroadcast, layers.EthernetTypeARP), &layers.ARP{
			AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: layers.ARPRequest, SourceHwAddress: peerMAC, SourceProtAddress: net.ParseIP("10.9.0.1").To4(),
			DstHwAddress: make([]byte, 6), DstProtAddress: net.ParseIP(tpa).To4()})
	}
	badRoce := func(f []byte, mod func([]byte)) []byte {
		f = append([]byte(nil), f...)
		mod(f)
		return f
	}
	s := func(f func(Stats) uint64) func(Stats) uint64 { return f }
	return []struct {
		name    string
		frame   []byte
		want    int
		counter func(Stats) uint64
	}{
		{"RoCEv4", roce4, roce4Len, s(func(s Stats) uint64 { return s.FramesIn })},
		{"RoCEv6", roce6, len(roce6) - ether.HeaderLen, s(func(s Stats) uint64 { return s.FramesIn })},
		{"EthernetPadding", padded, roce4Len, s(func(s Stats) uint64 { return s.FramesIn })},
		{"Short", roce4[:10], 0, s(func(s Stats) uint64 { return s.DropBadFrame })},
		{"Truncated", truncated, 0, s(func(s Stats) uint64 { return s.DropBadFrame })},
		{"Fragment", fragment, 0, s(func(s Stats) uint64 { return s.DropBadFrame })},
		{"VLAN", vlan, 0, s(func(s Stats) uint64 { return s.DropBadFrame })},
		{"OtherMAC", badRoce(roce4, func(f []byte) { copy(f, otherMAC) }), 0, s(func(s Stats) uint64 { return s.DropNotForUs })},
		{"OtherIP", badRoce(roce4, func(f []byte) { f[ether.HeaderLen+19] = 9 }), 0, s(func(s Stats) uint64 { return s.DropNotForUs })},
		{"OtherPort", badRoce(roce4, func(f []byte) { f[ether.HeaderLen+20+3] = 1 }), 0, s(func(s Stats) uint64 { return s.DropNotRoCE })},
		{"IPv6ToMulticastMAC", badRoce(roce6, func(f []byte) { copy(f, []byte{0x33, 0x33, 0, 0, 0, 1}) }), 0, s(func(s Stats) uint64 { return s.DropNotForUs })},
		{"TCP", serialize(t, eth(testMAC, layers.EthernetTypeIPv4), ip4("10.9.0.5", layers.IPProtocolTCP),
			&layers.TCP{SrcPort: 1, DstPort: 80, SYN: true, Window: 1000}), 0, s(func(s Stats) uint64 { return s.DropNotRoCE })},
		{"Echo", echo, 0, s(func(s Stats) uint64 { return s.ICMP })},
		{"EchoBadChecksum", badEcho, 0, s(func(s Stats) uint64 { return s.DropBadFrame })},
		{"NeighborSolicitation", ns(255), 0, s(func(s Stats) uint64 { return s.NDP })},
		{"ForwardedSolicitation", ns(254), 0, s(func(s Stats) uint64 { return s.DropBadFrame })},
		{"ARPRequest", arp("10.9.0.5"), 0, s(func(s Stats) uint64 { return s.ARP })},
		{"ARPForOther", arp("10.9.0.7"), 0, s(func(s Stats) uint64 { return s.DropNotForUs })},
		{"ARPGarbage", badRoce(arp("10.9.0.5"), func(f []byte) { f[ether.HeaderLen+4] = 8 }), 0, s(func(s Stats) uint64 { return s.DropBadFrame })},
		{"Unknown", badRoce(roce4, func(f []byte) { binary.BigEndian.PutUint16(f[12:], 0x88cc) }), 0, s(func(s Stats) uint64 { return s.DropNotRoCE })},
	}
}

// inputLink opens a link on a TAP of its own (what it writes goes nowhere)
// for feeding frames to input directly.
func inputLink(t testing.TB) *Link {
	return open(t, Config{MAC: testMAC, Addrs: []netip.Prefix{prefix("10.9.0.5/24"), prefix("fd00::5/64")}})
}

func TestInput(t *testing.T) {
	needRoot(t)
	l := inputLink(t)
	buf := make([]byte, link.BufferSize)
	for _, tt := range inputFrames(t) {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.counter(l.Stats())
			n := copy(buf, tt.frame)
			if got := l.input(buf, n); got != tt.want {
				t.Fatalf("input = %d, want %d", got, tt.want)
			}
			if d := tt.counter(l.Stats()) - before; d != 1 {
				t.Fatalf("counter went up by %d, want 1: %+v", d, l.Stats())
			}
		})
	}
	// The solicitation and the request taught the link the peer's MAC.
	for _, a := range []string{"10.9.0.1", "fd00::1"} {
		if mac, ok := l.lookup(netip.MustParseAddr(a)); !ok || !bytes.Equal(mac[:], peerMAC) {
			t.Errorf("%s not learned: %v %v", a, mac, ok)
		}
	}
}

// FuzzInput feeds input arbitrary frames: it must never panic, and what it
// returns as a RoCE packet must fit the frame.
func FuzzInput(f *testing.F) {
	needRoot(f)
	for _, tt := range inputFrames(f) {
		f.Add(tt.frame)
	}
	l := inputLink(f)
	buf := make([]byte, link.BufferSize)
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) > len(buf) {
			return
		}
		n := copy(buf, frame)
		if k := l.input(buf, n); k < 0 || k > 0 && ether.HeaderLen+k > n {
			t.Fatalf("input returned %d for a %d-byte frame", k, n)
		}
	})
}

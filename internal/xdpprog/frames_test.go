package xdpprog

import (
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Frames for the program tests, built with gopacket.

var (
	macA = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0a}
	macB = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0b}
	ip4A = net.IP{10, 0, 0, 1}
	ip4B = net.IP{10, 0, 0, 2}
	ip6A = net.ParseIP("fd00::a")
	ip6B = net.ParseIP("fd00::b")
)

// rocePayload is a BTH (RC SEND Only, dest QP 0x11, PSN 0x22), 16 bytes of
// payload and the ICRC's 4 bytes; the program never looks past the UDP
// header, so the values do not matter.
var rocePayload = gopacket.Payload(append([]byte{
	0x04, 0x40, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x22,
}, make([]byte, 16+4)...))

// frame serializes the layers, fixing lengths and checksums.
func frame(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	for _, l := range ls {
		if c, ok := l.(interface {
			SetNetworkLayerForChecksum(gopacket.NetworkLayer) error
		}); ok {
			for _, n := range ls {
				if nl, ok := n.(gopacket.NetworkLayer); ok {
					if err := c.SetNetworkLayerForChecksum(nl); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

func eth(typ layers.EthernetType) *layers.Ethernet {
	return &layers.Ethernet{SrcMAC: macA, DstMAC: macB, EthernetType: typ}
}

func dot1q(vid uint16, typ layers.EthernetType) *layers.Dot1Q {
	return &layers.Dot1Q{Priority: 3, VLANIdentifier: vid, Type: typ}
}

func ipv4(proto layers.IPProtocol) *layers.IPv4 {
	return &layers.IPv4{Version: 4, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: proto, SrcIP: ip4A, DstIP: ip4B}
}

func ipv6(next layers.IPProtocol) *layers.IPv6 {
	return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: next, SrcIP: ip6A, DstIP: ip6B}
}

func udp(dport uint16) *layers.UDP {
	return &layers.UDP{SrcPort: 49152, DstPort: layers.UDPPort(dport)}
}

// Whole RoCE v2 frames, untagged and tagged.
func roce4(t testing.TB, port uint16) []byte {
	return frame(t, eth(layers.EthernetTypeIPv4), ipv4(layers.IPProtocolUDP), udp(port), rocePayload)
}

func roce6(t testing.TB, port uint16) []byte {
	return frame(t, eth(layers.EthernetTypeIPv6), ipv6(layers.IPProtocolUDP), udp(port), rocePayload)
}

func roce4VLAN(t testing.TB, vid uint16) []byte {
	return frame(t, eth(layers.EthernetTypeDot1Q), dot1q(vid, layers.EthernetTypeIPv4), ipv4(layers.IPProtocolUDP), udp(DefaultPort), rocePayload)
}

func roce6VLAN(t testing.TB, vid uint16) []byte {
	return frame(t, eth(layers.EthernetTypeDot1Q), dot1q(vid, layers.EthernetTypeIPv6), ipv6(layers.IPProtocolUDP), udp(DefaultPort), rocePayload)
}

// patched returns a copy of f with f[i] = v.
func patched(f []byte, i int, v byte) []byte {
	f = append([]byte(nil), f...)
	f[i] = v
	return f
}

package wire_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

func benchPacket(b *testing.B, payload int) []byte {
	f := wire.Frame{
		IP: wire.IPFields{
			Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"),
			HopLimit: 64, DontFrag: true,
		},
		SrcPort: 0xc000, DstPort: wire.UDPPort,
		Headers: wire.Headers{BTH: bth.Fields{Opcode: bth.RCRDMAWriteFirst, PKey: 0xffff, DestQP: 0x11, PSN: 1}},
		Payload: make([]byte, payload),
	}
	pkt, err := f.Append(nil)
	if err != nil {
		b.Fatal(err)
	}
	return pkt
}

var sizes = []int{64, 1024, 4096}

func BenchmarkParseIP(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			pkt := benchPacket(b, n)
			var p wire.Packet
			b.ReportAllocs()
			b.SetBytes(int64(len(pkt)))
			for b.Loop() {
				if err := wire.ParseIP(&p, pkt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkICRC(b *testing.B) {
	for _, n := range sizes {
		for _, how := range []string{"copied", "in-place"} {
			b.Run(fmt.Sprint(n, "/", how), func(b *testing.B) {
				pkt := benchPacket(b, n)
				var p wire.Packet
				if err := wire.ParseIP(&p, pkt); err != nil {
					b.Fatal(err)
				}
				check := p.CheckICRC
				if how == "in-place" {
					check = p.CheckICRCInPlace
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(pkt)))
				for b.Loop() {
					if err := check(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkMaskedICRC is BenchmarkICRC for a sender that writes ones into
// the masked fields and takes the ICRC of the packet where it lies.
func BenchmarkMaskedICRC(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			pkt := benchPacket(b, n)
			body := pkt[:len(pkt)-wire.ICRCLen]
			b.ReportAllocs()
			b.SetBytes(int64(len(pkt)))
			for b.Loop() {
				wire.MaskedICRC(body)
			}
		})
	}
}

// BenchmarkICRCWithIPv4ID compares the ICRC of a 4 KiB packet after an IP
// ID change found with a fresh IDShift and with one kept for the length,
// as the udp link keeps it along a GSO run.
func BenchmarkICRCWithIPv4ID(b *testing.B) {
	const transport = 12 + 4096
	var icrc uint32
	b.Run("fresh", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			icrc = wire.ICRCWithIPv4ID(icrc, 0, uint16(i%63+1), transport)
		}
	})
	b.Run("kept", func(b *testing.B) {
		s := wire.IPv4IDShift(transport)
		for i := 0; b.Loop(); i++ {
			icrc = s.ICRC(icrc, 0, uint16(i%63+1))
		}
	})
}

// BenchmarkParseAndCheck is the receive path's per-packet work in wire.
func BenchmarkParseAndCheck(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			pkt := benchPacket(b, n)
			var p wire.Packet
			b.ReportAllocs()
			b.SetBytes(int64(len(pkt)))
			for b.Loop() {
				if err := wire.ParseIP(&p, pkt); err != nil {
					b.Fatal(err)
				}
				if err := p.CheckICRC(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendTransport is the send path's header encoding into a
// reused buffer.
func BenchmarkAppendTransport(b *testing.B) {
	h := wire.Headers{BTH: bth.Fields{Opcode: bth.RCRDMAWriteFirst, PKey: 0xffff, DestQP: 0x11, PSN: 1}}
	payload := make([]byte, 1024)
	buf := make([]byte, 0, 2048)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = wire.AppendTransport(buf[:0], &h, payload)
	}
}

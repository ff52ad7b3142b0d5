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
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			pkt := benchPacket(b, n)
			var p wire.Packet
			if err := wire.ParseIP(&p, pkt); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(pkt)))
			for b.Loop() {
				if err := p.CheckICRC(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
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
		buf = wire.AppendTransport(buf[:0], &h, payload)
	}
}

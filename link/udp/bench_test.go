package udp_test

import (
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/link"
)

// BenchmarkSendReceive moves one batch of link.BatchSize 1 KiB packets
// over loopback per iteration: one Send (sendmmsg), then Receive
// (recvmmsg) until the batch is in. "tos" sends a DSCP, so every packet
// carries a TOS control message.
func BenchmarkSendReceive(b *testing.B) {
	for _, bc := range []struct {
		name string
		addr netip.Addr
		tc   uint8
	}{
		{"IPv4", netip.MustParseAddr("127.0.0.1"), 0x02},
		{"IPv4/tos", netip.MustParseAddr("127.0.0.1"), 0x62},
		{"IPv6", netip.IPv6Loopback(), 0x02},
		{"IPv6/tos", netip.IPv6Loopback(), 0x62},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tx, rx := loopPair(b, newEnv(b), bc.addr)
			bufs := packets(b, tx, rx, 0, link.BatchSize, 1024, bc.tc)
			r := newReceiver()
			b.ReportAllocs()
			b.SetBytes(int64(link.BatchSize * (len(bufs[0]) - link.Headroom)))
			for b.Loop() {
				if err := tx.Send(bufs); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < link.BatchSize; {
					n, err := rx.Receive(r.bufs, r.sizes)
					if err != nil {
						b.Fatal(err)
					}
					got += n
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*link.BatchSize), "ns/pkt")
			if s := tx.Stats(); s.SendErrors != 0 {
				b.Fatalf("Stats = %+v", s)
			}
		})
	}
}

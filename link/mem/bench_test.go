package mem_test

import (
	"fmt"
	"testing"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/mem"
)

// BenchmarkSendReceive moves one batch of link.BatchSize packets from one
// link to another per iteration: a Send, then Receive until the batch is in.
func BenchmarkSendReceive(b *testing.B) {
	for _, bc := range []struct {
		name   string
		faults mem.Faults
	}{
		{"Perfect", mem.Faults{}},
		// Faults that keep the packet count, so every batch arrives whole.
		{"ECNCorruptReorder", mem.Faults{ECN: 0.1, Corrupt: 0.01, Reorder: 16, Seed: 1}},
	} {
		for _, payload := range []int{64, 1024, 4096} {
			b.Run(fmt.Sprintf("%s/%d", bc.name, payload), func(b *testing.B) {
				benchSendReceive(b, bc.faults, payload)
			})
		}
	}
}

func benchSendReceive(b *testing.B, faults mem.Faults, payload int) {
	tx, rx := pair(b, addrA4, addrB4)
	tx.SetFaults(faults)
	bufs := make([][]byte, link.BatchSize)
	for i := range bufs {
		bufs[i] = roce(b, addrA4, addrB4, uint32(i), payload, 2)
	}
	r := newReceiver(rx)
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
}

package perftest

import (
	"context"
	"testing"

	"github.com/gorxe/gorxe/link/mem"
)

// BenchmarkLocal runs each test in one process; allocs/op is per message.
func BenchmarkLocal(b *testing.B) {
	for _, t := range []Test{WriteBW, WriteLat, SendLat, ReadLat} {
		b.Run(string(t), func(b *testing.B) {
			p := Params{Test: t, Iters: b.N, Size: 64}
			b.ReportAllocs()
			if _, err := RunLocal(context.Background(), p, mem.Faults{}); err != nil {
				b.Fatal(err)
			}
		})
	}
}

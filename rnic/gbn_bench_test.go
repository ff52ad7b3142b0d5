package rnic_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
)

// BenchmarkGoBackN measures how much of go-back-N's ideal efficiency a long
// RDMA WRITE stream keeps under random loss p = 1/256 of the data packets:
// goodput with loss over goodput without, against (1-p)/(1+(W-1)p) for the
// requester's window W (the efficiency of go-back-N when every loss costs
// the W-1 packets behind it). Run it with
//
//	go test ./rnic -run '^$' -bench GoBackN -benchtime 1x
//
// It reports lossless and lossy goodput, their ratio, the ideal and
// ratio/ideal, which should stay at 0.8 or more; and the heap allocations
// the lossy transfer makes beyond the lossless one per go-back-N, which
// should be 0: loss recovery allocates nothing.
func BenchmarkGoBackN(b *testing.B) {
	for _, w := range []int{64, 256} {
		b.Run("window="+itoa(w), func(b *testing.B) {
			const p = 1.0 / 256
			const msg, total = 64 << 10, 64 << 20
			run := func(loss float64) (float64, qp.Counters, uint64) {
				a, bb := newPair(b, pairOpts{bufSize: msg, window: w, mtu: qp.MTU1024, noTrace: true})
				a.link.SetFaults(mem.Faults{Drop: loss, Seed: 42})
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				start := time.Now()
				n := total / msg
				for i := 0; i < n; {
					k := min(n-i, 64)
					wrs := make([]qp.SendWR, k)
					for j := range wrs {
						wrs[j] = writeWR(uint64(i+j), a, bb, 0, msg)
						wrs[j].Flags = 0
					}
					wrs[k-1].Flags = qp.SendSignaled
					a.postSend(b, wrs...)
					status(b, wait(b, a.scq, 1, time.Minute), 0)
					i += k
				}
				el := time.Since(start)
				runtime.ReadMemStats(&after)
				return float64(total) / el.Seconds() / 1e6, a.stats().Counters, after.Mallocs - before.Mallocs
			}
			for range b.N {
				clean, _, cleanAllocs := run(0)
				lossy, c, lossyAllocs := run(p)
				ideal := (1 - p) / (1 + float64(w-1)*p)
				ratio := lossy / clean
				perGoBack := (float64(lossyAllocs) - float64(cleanAllocs)) / float64(max(c.CompleterRetryErr, 1))
				b.ReportMetric(clean, "MB/s-lossless")
				b.ReportMetric(lossy, "MB/s-lossy")
				b.ReportMetric(ratio, "efficiency")
				b.ReportMetric(ideal, "ideal")
				b.ReportMetric(ratio/ideal, "of-ideal")
				b.ReportMetric(perGoBack, "allocs/go-back")
				b.Logf("window %d: lossless %.0f MB/s, p=1/256 %.0f MB/s: efficiency %.3f, ideal %.3f, %.2f of ideal (go-back-N %d, probes %d, timeouts %d; %.2f allocations per go-back-N)",
					w, clean, lossy, ratio, ideal, ratio/ideal, c.CompleterRetryErr, c.TailProbes, c.RetransmitTimeouts, perGoBack)
			}
		})
	}
}

func itoa(n int) string {
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}

// BenchmarkDeviceWrite streams 64 KiB RDMA WRITEs (64 packets each at MTU
// 1024) between two devices over the in-memory fabric: the whole datapath,
// both devices' goroutines included. allocs/op is per message, so 0 means
// no allocation per packet in the steady state.
func BenchmarkDeviceWrite(b *testing.B) {
	const msg = 64 << 10
	a, bb := newPair(b, pairOpts{bufSize: msg, mtu: qp.MTU1024})
	wrs := []qp.SendWR{writeWR(0, a, bb, 0, msg)}
	wrs[0].Flags = 0
	signaled := []qp.SendWR{writeWR(1, a, bb, 0, msg)}
	// Warm the pools and the CQ before measuring.
	a.postSend(b, signaled...)
	wait(b, a.scq, 1, time.Minute)
	b.ReportAllocs()
	b.SetBytes(msg)
	b.ResetTimer()
	var wcs [1]cq.WC
	for i := range b.N {
		w := wrs
		if i%32 == 31 || i == b.N-1 {
			w = signaled
		}
		for {
			_, err := a.qp.PostSend(w)
			if err == nil {
				break
			}
			time.Sleep(10 * time.Microsecond) // the send queue is full
		}
		if i%32 == 31 || i == b.N-1 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if _, err := a.scq.Wait(ctx, wcs[:]); err != nil {
				b.Fatal(err)
			}
			cancel()
		}
	}
}

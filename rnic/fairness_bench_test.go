package rnic_test

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// fairHost is one device of BenchmarkReadFairness with one QP.
type fairHost struct {
	dev *rnic.Device
	qp  *rnic.QP
	scq *cq.CQ
	mr  *mr.MR
}

func newFairHost(b *testing.B, f *mem.Fabric, dev *rnic.Device, addr string, size int) *fairHost {
	b.Helper()
	if dev == nil {
		l, err := f.NewLink(netip.MustParseAddr(addr))
		must(b, err)
		dev, err = rnic.Open(rnic.Config{Link: l, Name: addr})
		must(b, err)
		b.Cleanup(func() { dev.Close() })
	}
	h := &fairHost{dev: dev}
	pd := dev.AllocPD()
	var err error
	h.scq, err = dev.CreateCQ(64)
	must(b, err)
	rcq, err := dev.CreateCQ(64)
	must(b, err)
	h.mr, err = dev.RegMR(pd, make([]byte, size), mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead)
	must(b, err)
	h.qp, err = dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: pd, SendCQ: h.scq, RecvCQ: rcq,
		Cap: qp.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(b, err)
	return h
}

func connectFair(b *testing.B, x, y *fairHost) {
	b.Helper()
	for _, s := range [][2]*fairHost{{x, y}, {y, x}} {
		must(b, s[0].qp.Connect(rnic.ConnectAttr{
			Local: s[0].qp.Local(0x100), Remote: s[1].qp.Local(0x100),
			Access: mr.RemoteWrite | mr.RemoteRead,
		}))
	}
}

// post posts wr on h and waits for its completion, sleeping: the
// benchmark's goroutines leave the CPUs to the devices'.
func (h *fairHost) post(b *testing.B, wr qp.SendWR) time.Duration {
	start := time.Now()
	if _, err := h.qp.PostSend([]qp.SendWR{wr}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wc [1]cq.WC
	if _, err := h.scq.Wait(ctx, wc[:]); err != nil {
		b.Fatalf("%v: %v", wr.Opcode, err)
	}
	if wc[0].Status != cq.StatusSuccess {
		b.Fatalf("%v completed with %v", wr.Opcode, wc[0].Status)
	}
	return time.Since(start)
}

// BenchmarkReadFairness: one device, S, serves 256 MiB RDMA READs on its
// QP A while its QP B answers 64-byte RDMA WRITEs, each QP connected to a
// device of its own. It prints the WRITEs' round trip with B alone and
// while the READs run (p50 and p99), and how long one READ takes. A READ's
// responses leave in bursts, so a WRITE for B waits at most for a burst of
// A's, not for A's whole READ: p99 while loaded stays far below the READ's
// time (the goal: at most 1/100 of it).
func BenchmarkReadFairness(b *testing.B) {
	const readSize = 256 << 20
	f := mem.NewFabric()
	sa := newFairHost(b, f, nil, "10.0.0.1", readSize)
	sb := newFairHost(b, f, sa.dev, "", 4096)
	ca := newFairHost(b, f, nil, "10.0.0.2", readSize)
	cb := newFairHost(b, f, nil, "10.0.0.3", 4096)
	connectFair(b, sa, ca)
	connectFair(b, sb, cb)
	write := qp.SendWR{Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
		SGList:     []qp.SGE{{Addr: cb.mr.IOVA(), Length: 64, LKey: cb.mr.LKey()}},
		RemoteAddr: sb.mr.IOVA(), RKey: sb.mr.RKey()}
	read := qp.SendWR{Opcode: qp.WRRDMARead, Flags: qp.SendSignaled,
		SGList:     []qp.SGE{{Addr: ca.mr.IOVA(), Length: readSize, LKey: ca.mr.LKey()}},
		RemoteAddr: sa.mr.IOVA(), RKey: sa.mr.RKey()}

	roundTrips := func(n int, stop func() bool) []time.Duration {
		var rtts []time.Duration
		for i := 0; i < n || stop != nil && !stop(); i++ {
			rtts = append(rtts, cb.post(b, write))
			if stop == nil && i >= n {
				break
			}
		}
		slices.Sort(rtts)
		return rtts
	}
	pct := func(d []time.Duration, p float64) float64 {
		return float64(d[min(int(float64(len(d))*p), len(d)-1)].Nanoseconds()) / 1e3
	}
	for b.Loop() {
		alone := roundTrips(2000, nil)

		var mu sync.Mutex
		var reads []time.Duration
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 3 {
				d := ca.post(b, read)
				mu.Lock()
				reads = append(reads, d)
				mu.Unlock()
			}
		}()
		loaded := roundTrips(0, func() bool {
			select {
			case <-done:
				return true
			default:
				return false
			}
		})
		slices.Sort(reads)
		readUS := float64(reads[len(reads)/2].Nanoseconds()) / 1e3
		b.ReportMetric(pct(alone, 0.5), "alone-p50-µs")
		b.ReportMetric(pct(alone, 0.99), "alone-p99-µs")
		b.ReportMetric(pct(loaded, 0.5), "loaded-p50-µs")
		b.ReportMetric(pct(loaded, 0.99), "loaded-p99-µs")
		b.ReportMetric(readUS/1e3, "read-256MiB-ms")
		b.ReportMetric(pct(loaded, 0.99)/readUS, "p99/read")
		b.Logf("B alone: p50 %.1f µs p99 %.1f µs (%d round trips); during 256 MiB READs on A: p50 %.1f µs p99 %.1f µs (%d); one READ %.1f ms; loaded p99 / READ = 1/%.0f",
			pct(alone, 0.5), pct(alone, 0.99), len(alone), pct(loaded, 0.5), pct(loaded, 0.99), len(loaded), readUS/1e3, readUS/pct(loaded, 0.99))
	}
}

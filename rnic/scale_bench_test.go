package rnic_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/qp"
)

// Scale benchmark parameters: every QP streams WRITEs of scaleMsg bytes
// (two packets at the fabric's MTU 4096), and the QPs together keep
// scaleDepth messages outstanding (perftest's tx depth), or one each when
// there are more QPs than that.
const (
	scaleMsg   = 8 << 10
	scaleDepth = 128
)

// scaleRow is one line of BenchmarkScale's table.
type scaleRow struct {
	n          int
	idle, used float64 // heap bytes per QP: created and connected; after traffic
	mbps, msgs float64
}

// BenchmarkScale streams RDMA WRITEs on 1, 64, 1024 and 4096 connected QP
// pairs between two devices over the in-memory fabric, every QP with
// work outstanding, and reports the aggregate throughput (MB/s, msgs/s)
// and its ratio to one QP's ("of-1QP", when the 1-QP case ran first). It
// also reports the heap each QP costs with the default capabilities
// (defaultCap): idle, once created and connected ("B/idle-QP"), and once
// it has moved traffic ("B/used-QP"); both count both ends of a pair as
// two QPs. Every message is signaled; an op is one message. Run it with
// `make bench-scale`, which prints the table the parent benchmark logs.
func BenchmarkScale(b *testing.B) {
	var rows []scaleRow
	for _, n := range []int{1, 64, 1024, 4096} {
		f := newFleetDevices(b, n, scaleMsg, scaleDepth+n)
		before := heapInUse()
		f.connect(b, defaultCap)
		row := scaleRow{n: n, idle: float64(heapInUse()-before) / float64(2*n)}
		wrs := f.writeWRs()
		f.stream(b, wrs, n) // one message on each QP: warm every QP's path
		row.used = float64(heapInUse()-before) / float64(2*n)
		b.Run(fmt.Sprintf("qps=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(scaleMsg)
			b.ResetTimer()
			f.stream(b, wrs, b.N)
			b.StopTimer()
			row.mbps = float64(b.N) * scaleMsg / b.Elapsed().Seconds() / 1e6
			row.msgs = float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(row.msgs, "msgs/s")
			b.ReportMetric(row.idle, "B/idle-QP")
			b.ReportMetric(row.used, "B/used-QP")
			if len(rows) > 0 && rows[0].n == 1 {
				b.ReportMetric(row.mbps/rows[0].mbps, "of-1QP")
			}
		})
		rows = append(rows, row)
		f.a.dev.Close()
		f.b.dev.Close()
	}
	var t strings.Builder
	fmt.Fprintf(&t, "scale: %d-byte RDMA WRITEs, %d outstanding (at least one per QP), default caps %+v\n", scaleMsg, scaleDepth, defaultCap)
	fmt.Fprintf(&t, "%6s %10s %10s %10s %10s %8s\n", "QPs", "MB/s", "msgs/s", "of-1QP", "B/idle-QP", "B/used-QP")
	for _, r := range rows {
		ratio := "-"
		if rows[0].n == 1 && rows[0].mbps > 0 {
			ratio = fmt.Sprintf("%.2f", r.mbps/rows[0].mbps)
		}
		fmt.Fprintf(&t, "%6d %10.0f %10.0f %10s %10.0f %8.0f\n", r.n, r.mbps, r.msgs, ratio, r.idle, r.used)
	}
	b.Log("\n" + t.String())
}

// writeWRs returns one signaled WRITE per QP of side a, from its slot to
// the same slot of side b, each in a slice of its own to post as is.
func (f *fleet) writeWRs() [][]qp.SendWR {
	wrs := make([][]qp.SendWR, f.n)
	for i := range wrs {
		wrs[i] = []qp.SendWR{{
			WRID: uint64(i), Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGList:     []qp.SGE{f.a.sge(f, i, 0, f.slotSize)},
			RemoteAddr: f.b.sge(f, i, 0, 0).Addr, RKey: f.b.mr.RKey(),
		}}
	}
	return wrs
}

// stream posts msgs WRITEs from side a, round robin over its QPs, keeping
// max(1, scaleDepth/n) outstanding on each, and waits for them all. As
// perftest does with -q, one goroutine posts for every QP and reaps one
// shared CQ; a QP gets its next message when one of its own completes.
func (f *fleet) stream(b *testing.B, wrs [][]qp.SendWR, msgs int) {
	per := max(1, scaleDepth/f.n)
	out := make([]int, f.n)
	posted, done := 0, 0
	post := func(i int) {
		if _, err := f.a.qps[i].PostSend(wrs[i]); err != nil {
			b.Fatalf("QP %d: %v", i, err)
		}
		out[i]++
		posted++
	}
	for i := 0; i < f.n && posted < msgs; i++ {
		for out[i] < per && posted < msgs {
			post(i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wcs [64]cq.WC
	for done < msgs {
		k, err := f.a.scq.Wait(ctx, wcs[:])
		if err != nil {
			b.Fatalf("%d of %d messages done: %v", done, msgs, err)
		}
		for _, wc := range wcs[:k] {
			if wc.Status != cq.StatusSuccess {
				b.Fatalf("completion %+v", wc)
			}
			i := f.a.byQPN[wc.QPNum]
			out[i]--
			done++
			if posted < msgs {
				post(i)
			}
		}
	}
}

package rnic_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/qp"
)

// Scale benchmark parameters: the QPs stream WRITEs of scaleMsg bytes
// (two packets at the fabric's MTU 4096), and keep scaleDepth messages
// outstanding between them (perftest's tx depth): scaleDepth/n on each QP
// while there are fewer QPs than that, and otherwise one on each of
// scaleDepth QPs at a time, every QP getting its turn. The messages go
// through scaleDepth slots of scaleMsg bytes on each side. So the cases
// offer the same load, and differ in what each QP costs, not in how much
// memory the transfers sweep: one message outstanding on each of 1024
// QPs keeps 2048 packets on the fabric, 18 MiB of its packet buffers, and
// the fabric's copies then miss the caches.
const (
	scaleMsg   = 8 << 10
	scaleDepth = 128
)

// scaleRow is one line of BenchmarkScale's table.
type scaleRow struct {
	n          int
	idle, used float64 // heap bytes per QP: created and connected; after traffic
	mbps, msgs float64
	cpu        float64 // the process's CPU time per message, in ns
	acks       float64 // packets the responder side sent per message
	turns      float64 // worker turns a second, both devices
}

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkScale streams RDMA WRITEs on 1, 64, 1024 and 4096 connected QP
// pairs between two devices over the in-memory fabric, every QP moving
// traffic, and reports the aggregate throughput (MB/s, msgs/s)
// and its ratio to one QP's ("of-1QP", when the 1-QP case ran first). It
// also reports the heap each QP costs with the default capabilities
// (defaultCap): idle, once created and connected ("B/idle-QP"), and once
// it has moved traffic ("B/used-QP"); both count both ends of a pair as
// two QPs. cpu-ns/msg is the process's CPU time (both devices, the
// poster, the GC) per message: it depends less than MB/s on what else the
// machine runs; acks/msg counts the packets the responding device sends
// per message, and turns/s how often the devices' workers woke. Every message is signaled; an op is one message. Run it with
// `make bench-scale`, which prints the table the parent benchmark logs.
func BenchmarkScale(b *testing.B) {
	var rows []scaleRow
	for _, n := range []int{1, 64, 1024, 4096} {
		f := newFleetDevices(b, n, scaleDepth, scaleMsg, scaleDepth+n)
		before := heapInUse()
		f.connect(b, defaultCap)
		row := scaleRow{n: n, idle: float64(heapInUse()-before) / float64(2*n)}
		wrs := f.writeWRs()
		f.stream(b, wrs, max(n, scaleDepth)) // warm every QP's path
		row.used = float64(heapInUse()-before) / float64(2*n)
		b.Run(fmt.Sprintf("qps=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(scaleMsg)
			b.ResetTimer()
			cpu, acks := cpuTime(), f.b.link.Stats().Sent
			turns := f.a.dev.WorkerTurns() + f.b.dev.WorkerTurns()
			f.stream(b, wrs, b.N)
			b.StopTimer()
			row.turns = float64(f.a.dev.WorkerTurns()+f.b.dev.WorkerTurns()-turns) / b.Elapsed().Seconds()
			row.cpu = float64(cpuTime()-cpu) / float64(b.N)
			row.acks = float64(f.b.link.Stats().Sent-acks) / float64(b.N)
			row.mbps = float64(b.N) * scaleMsg / b.Elapsed().Seconds() / 1e6
			row.msgs = float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(row.msgs, "msgs/s")
			b.ReportMetric(row.cpu, "cpu-ns/msg")
			b.ReportMetric(row.acks, "acks/msg")
			b.ReportMetric(row.turns, "worker-turns/s")
			b.ReportMetric(row.idle, "B/idle-QP")
			b.ReportMetric(row.used, "B/used-QP")
			if len(rows) > 0 && rows[0].n == 1 {
				b.ReportMetric(row.mbps/rows[0].mbps, "of-1QP")
			}
		})
		rows = append(rows, row)
		f.close()
	}
	var t strings.Builder
	fmt.Fprintf(&t, "scale: %d-byte RDMA WRITEs, %d outstanding over all QPs, default caps %+v\n", scaleMsg, scaleDepth, defaultCap)
	fmt.Fprintf(&t, "%6s %10s %10s %8s %12s %10s %10s %10s %10s\n", "QPs", "MB/s", "msgs/s", "of-1QP", "cpu-ns/msg", "acks/msg", "turns/s", "B/idle-QP", "B/used-QP")
	for _, r := range rows {
		ratio := "-"
		if rows[0].n == 1 && rows[0].mbps > 0 {
			ratio = fmt.Sprintf("%.2f", r.mbps/rows[0].mbps)
		}
		fmt.Fprintf(&t, "%6d %10.0f %10.0f %8s %12.0f %10.2f %10.0f %10.0f %10.0f\n", r.n, r.mbps, r.msgs, ratio, r.cpu, r.acks, r.turns, r.idle, r.used)
	}
	b.Log("\n" + t.String())
}

// writeWRs returns a signaled WRITE for each QP of side a, each in a
// slice of its own, for stream to point at a slot and post.
func (f *fleet) writeWRs() [][]qp.SendWR {
	wrs := make([][]qp.SendWR, f.n)
	for i := range wrs {
		wrs[i] = []qp.SendWR{{
			WRID: uint64(i), Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
			SGList: []qp.SGE{{Length: uint32(f.slotSize), LKey: f.a.mr.LKey()}}, RKey: f.b.mr.RKey(),
		}}
	}
	return wrs
}

// stream posts msgs WRITEs from side a, scaleDepth outstanding, and
// waits for them all. As perftest does with -q, one goroutine posts for
// every QP and reaps one shared CQ. The k-th message posted goes from
// slot k % scaleDepth to the same slot.
func (f *fleet) stream(b *testing.B, wrs [][]qp.SendWR, msgs int) {
	per := max(1, scaleDepth/f.n)
	out := make([]int, f.n)
	posted, done, next := 0, 0, 0
	post := func(i int) {
		slot := posted % scaleDepth
		wrs[i][0].SGList[0].Addr = f.a.sge(f, slot, 0, 0).Addr
		wrs[i][0].RemoteAddr = f.b.sge(f, slot, 0, 0).Addr
		if _, err := f.a.qps[i].PostSend(wrs[i]); err != nil {
			b.Fatalf("QP %d: %v", i, err)
		}
		out[i]++
		posted++
	}
	// rotate posts to the next QP in turn that has nothing outstanding.
	rotate := func() {
		for out[next] > 0 {
			next = (next + 1) % f.n
		}
		post(next)
		next = (next + 1) % f.n
	}
	if f.n <= scaleDepth {
		for i := range f.n {
			for out[i] < per && posted < msgs {
				post(i)
			}
		}
	} else {
		for posted < min(scaleDepth, msgs) {
			rotate()
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
			switch {
			case posted == msgs:
			case f.n <= scaleDepth:
				post(i)
			default:
				rotate()
			}
		}
	}
}

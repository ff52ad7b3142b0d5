package rnic_test

import (
	"context"
	"fmt"
	"slices"
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

// scaleSegments is how many parts BenchmarkScale cuts a case's messages
// into, each paired with as many on one QP, for the ratio of the two.
const scaleSegments = 8

// scaleRow is one line of BenchmarkScale's table.
type scaleRow struct {
	n          int
	idle, used float64 // heap bytes per QP: created and connected; after traffic
	mbps, msgs float64
	of1        float64 // throughput over one QP's, the median of the segments'
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

// scaleCase is a fleet made ready for BenchmarkScale.
type scaleCase struct {
	f   *fleet
	wrs [][]qp.SendWR
	row scaleRow
}

// newScaleCase connects n QP pairs, measuring the heap they take, and
// warms every QP's path with a message.
func newScaleCase(b *testing.B, n int) *scaleCase {
	c := &scaleCase{f: newFleetDevices(b, n, scaleDepth, scaleMsg, scaleDepth+n), row: scaleRow{n: n}}
	before := heapInUse()
	c.f.connect(b, defaultCap)
	c.row.idle = float64(heapInUse()-before) / float64(2*n)
	c.wrs = c.f.writeWRs()
	c.f.stream(b, c.wrs, max(n, scaleDepth))
	c.row.used = float64(heapInUse()-before) / float64(2*n)
	return c
}

// BenchmarkScale streams RDMA WRITEs on 1, 64, 1024 and 4096 connected QP
// pairs between two devices over the in-memory fabric, every QP moving
// traffic, and reports the aggregate throughput (MB/s, msgs/s) and its
// ratio to one QP's ("of-1QP"). The ratio is measured in pairs: a case's
// messages go in scaleSegments segments, each after as many on the 1-QP
// fleet, and of-1QP is the median of the segments' ratios, so that it
// holds on a machine whose other load comes and goes. It also reports
// the heap each QP costs with the default capabilities (defaultCap):
// idle, once created and connected ("B/idle-QP"), and once it has moved
// traffic ("B/used-QP"); both count both ends of a pair as two QPs.
// cpu-ns/msg is the process's CPU time (both devices, the poster, the GC)
// per message; acks/msg counts the packets the responding device sends
// per message, and turns/s how often the devices' workers woke. Every
// message is signaled; an op is one message. Run it with
// `make bench-scale`, which prints the table the parent benchmark logs.
func BenchmarkScale(b *testing.B) {
	one := newScaleCase(b, 1)
	var rows []scaleRow
	for _, n := range []int{1, 64, 1024, 4096} {
		c := one
		if n > 1 {
			c = newScaleCase(b, n)
		}
		b.Run(fmt.Sprintf("qps=%d", n), func(b *testing.B) {
			c.run(b, one)
			r := &c.row
			b.ReportMetric(r.msgs, "msgs/s")
			b.ReportMetric(r.cpu, "cpu-ns/msg")
			b.ReportMetric(r.acks, "acks/msg")
			b.ReportMetric(r.turns, "worker-turns/s")
			b.ReportMetric(r.idle, "B/idle-QP")
			b.ReportMetric(r.used, "B/used-QP")
			b.ReportMetric(r.of1, "of-1QP")
		})
		rows = append(rows, c.row)
		if n > 1 {
			c.f.close()
		}
	}
	var t strings.Builder
	fmt.Fprintf(&t, "scale: %d-byte RDMA WRITEs, %d outstanding over all QPs, default caps %+v\n", scaleMsg, scaleDepth, defaultCap)
	fmt.Fprintf(&t, "%6s %10s %10s %8s %12s %10s %10s %10s %10s\n", "QPs", "MB/s", "msgs/s", "of-1QP", "cpu-ns/msg", "acks/msg", "turns/s", "B/idle-QP", "B/used-QP")
	for _, r := range rows {
		fmt.Fprintf(&t, "%6d %10.0f %10.0f %8.2f %12.0f %10.2f %10.0f %10.0f %10.0f\n", r.n, r.mbps, r.msgs, r.of1, r.cpu, r.acks, r.turns, r.idle, r.used)
	}
	b.Log("\n" + t.String())
}

// run streams b.N messages on the case's fleet, in segments, each after
// as many on the 1-QP case's (untimed), and fills in the case's row.
func (c *scaleCase) run(b *testing.B, one *scaleCase) {
	f := c.f
	segs := 1
	if c != one && b.N >= scaleSegments*scaleDepth {
		segs = scaleSegments
	}
	var elapsed, cpu time.Duration
	var acks, turns uint64
	var ratios []float64
	b.ReportAllocs()
	b.SetBytes(scaleMsg)
	b.ResetTimer()
	for k := range segs {
		msgs := b.N / segs
		if k == segs-1 {
			msgs = b.N - k*(b.N/segs)
		}
		var alone time.Duration
		if c != one {
			b.StopTimer()
			start := time.Now()
			one.f.stream(b, one.wrs, msgs)
			alone = time.Since(start)
			b.StartTimer()
		}
		start, cpu0, acks0 := time.Now(), cpuTime(), f.b.link.Stats().Sent
		turns0 := f.a.dev.WorkerTurns() + f.b.dev.WorkerTurns()
		f.stream(b, c.wrs, msgs)
		took := time.Since(start)
		elapsed += took
		cpu += cpuTime() - cpu0
		acks += f.b.link.Stats().Sent - acks0
		turns += f.a.dev.WorkerTurns() + f.b.dev.WorkerTurns() - turns0
		if c != one {
			ratios = append(ratios, alone.Seconds()/took.Seconds())
		}
	}
	b.StopTimer()
	r := &c.row
	r.mbps = float64(b.N) * scaleMsg / elapsed.Seconds() / 1e6
	r.msgs = float64(b.N) / elapsed.Seconds()
	r.cpu = float64(cpu) / float64(b.N)
	r.acks = float64(acks) / float64(b.N)
	r.turns = float64(turns) / elapsed.Seconds()
	r.of1 = 1
	if len(ratios) > 0 {
		slices.Sort(ratios)
		r.of1 = ratios[len(ratios)/2]
	}
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

//go:build linux

package xsk_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorxe/gorxe/internal/xsk"
)

// BenchmarkXSKToXSK measures one AF_XDP socket sending to another over a
// veth pair between two namespaces (MTU 9000, copy mode, driver-mode
// XDP), one way, in packets received per second: 64-byte frames, 1514
// (a 1500 MTU's), 4096 (a whole UMEM frame, which takes two descriptors
// to receive: 3840 bytes fit a received frame) and 4170 (a RoCE v2
// packet with a 4096-byte path MTU payload, two descriptors each way).
// The sender copies each frame into the UMEM, as a link does; the
// receiver hands frames back without reading them. ns/op is per packet
// received; drop% is the share of sent packets that never arrived.
//
//	go test -run '^$' -bench XSKToXSK -benchtime 3s ./internal/xsk
func BenchmarkXSKToXSK(b *testing.B) {
	for _, size := range []int{64, 1514, 4096, roceFrame} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) { benchXSK(b, size) })
	}
}

func benchXSK(b *testing.B, size int) {
	ha, hb := newPair(b, 9000, 1)
	c := xsk.Config{MultiBuffer: size > 3840}
	tx, rx := open(b, ha, c, false), open(b, hb, c, true)
	frame := udpFrame(ha, hb, 50000, port, payload(0, size-42))
	fs := int(tx.umem.FrameSize())

	var stop atomic.Bool
	var sent atomic.Uint64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		descs := make([]xsk.Desc, 0, 64)
		for !stop.Load() {
			if _, err := tx.sock.CompleteTo(tx.tx); err != nil {
				b.Error(err)
				return
			}
			for len(descs)+2 <= cap(descs) && tx.tx.Len() >= 2 {
				for off := 0; off < len(frame); off += fs {
					addr, _ := tx.tx.Pop()
					n := copy(tx.umem.Frame(addr), frame[off:])
					d := xsk.Desc{Addr: addr, Len: uint32(n)}
					if off+n < len(frame) {
						d.Options = xsk.OptionMore
					}
					descs = append(descs, d)
				}
			}
			n, err := tx.sock.Transmit(descs)
			if err != nil {
				b.Error(err)
				return
			}
			var pkts uint64
			for _, d := range descs[:n] {
				if !d.More() {
					pkts++
				}
			}
			sent.Add(pkts)
			descs = append(descs[:0], descs[n:]...)
			if n == 0 {
				// The TX ring is full: let the kernel catch up.
				time.Sleep(10 * time.Microsecond)
			}
		}
	}()

	descs := make([]xsk.Desc, 64)
	pending := 0 // packets received and not yet counted by b.Loop
	received := 0
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		for pending == 0 {
			n, err := rx.sock.Receive(descs)
			if err != nil {
				b.Fatal(err)
			}
			for _, d := range descs[:n] {
				if !d.More() {
					pending++
				}
				rx.rx.Push(d.Addr)
			}
			if _, err := rx.sock.FillFrom(rx.rx, rx.rx.Len()); err != nil {
				b.Fatal(err)
			}
			if n == 0 {
				if _, err := rx.sock.Wait(10 * time.Millisecond); err != nil {
					b.Fatal(err)
				}
			}
		}
		pending--
		received++
	}
	elapsed := time.Since(start)
	stop.Store(true)
	wg.Wait()
	pps := float64(received) / elapsed.Seconds()
	b.ReportMetric(pps, "pkts/s")
	b.ReportMetric(pps*float64(size)*8/1e6, "Mb/s")
	if s := sent.Load(); s > 0 {
		b.ReportMetric(100*(1-float64(received)/float64(s)), "drop%")
	}
	for _, e := range []*endpoint{tx, rx} {
		st, err := e.sock.Stats()
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range st.Named() {
			if c.Value != 0 {
				b.Logf("%s %s %d", e.h.ifname, c.Name, c.Value)
			}
		}
	}
}

package cq

import (
	"context"
	"testing"
)

func BenchmarkPushPoll(b *testing.B) {
	c := mustNew(b, 1024)
	dst := make([]WC, 1)
	wc := WC{WRID: 1, Opcode: OpRDMAWrite, ByteLen: 4096, QPNum: 0x11}
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Push(wc); err != nil {
			b.Fatal(err)
		}
		if n, err := c.Poll(dst); n != 1 || err != nil {
			b.Fatal(n, err)
		}
	}
}

// BenchmarkPushPollBatch16 pushes 16 completions and polls them with one
// call, as perftest polls; ns/op is per completion.
func BenchmarkPushPollBatch16(b *testing.B) {
	c := mustNew(b, 1024)
	dst := make([]WC, 16)
	wc := WC{WRID: 1, Opcode: OpRDMAWrite, ByteLen: 4096, QPNum: 0x11}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := c.Push(wc); err != nil {
			b.Fatal(err)
		}
		if i++; i%16 == 0 {
			if n, err := c.Poll(dst); n != 16 || err != nil {
				b.Fatal(n, err)
			}
		}
	}
}

// BenchmarkPushWait hands completions from a producer goroutine to a
// consumer blocked in Wait; ns/op is per completion.
func BenchmarkPushWait(b *testing.B) {
	c := mustNew(b, 4096)
	credits := make(chan struct{}, 1024)
	for range cap(credits) {
		credits <- struct{}{}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		dst := make([]WC, 64)
		for {
			n, err := c.Wait(context.Background(), dst)
			if err != nil {
				return
			}
			for range n {
				credits <- struct{}{}
			}
		}
	}()
	wc := WC{WRID: 1, Opcode: OpRecv, ByteLen: 64}
	b.ReportAllocs()
	for b.Loop() {
		<-credits
		if err := c.Push(wc); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	c.Close()
	<-done
}

func BenchmarkPushParallel(b *testing.B) {
	c := mustNew(b, 1<<16)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		dst := make([]WC, 8)
		wc := WC{WRID: 1}
		for pb.Next() {
			if err := c.Push(wc); err != nil {
				b.Error(err)
				return
			}
			c.Poll(dst[:1])
		}
	})
}

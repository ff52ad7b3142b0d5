package xsk

import (
	"sync"
	"testing"
	"unsafe"
)

// fakeRing is a ring's shared memory in ordinary memory, laid out as the
// kernel lays it out (struct xdp_ring: producer, consumer, flags, then
// the entries), with a producer's and a consumer's view of it: one plays
// this side, the other the kernel.
type fakeRing[T Entry] struct {
	mem struct {
		producer, consumer, flags uint32
		_                         uint32
		entries                   [1 << 10]T
	}
}

// newFakeRing returns a ring of size entries whose indices both start at
// start, so that a test can start just short of 2^32.
func newFakeRing[T Entry](size, start uint32) *fakeRing[T] {
	f := new(fakeRing[T])
	f.mem.producer, f.mem.consumer = start, start
	return f
}

func (f *fakeRing[T]) offsets() (base unsafe.Pointer, p, c, fl, d uintptr) {
	m := &f.mem
	return unsafe.Pointer(m), unsafe.Offsetof(m.producer), unsafe.Offsetof(m.consumer), unsafe.Offsetof(m.flags), unsafe.Offsetof(m.entries)
}

func (f *fakeRing[T]) producer(size uint32) *Producer[T] {
	b, p, c, fl, d := f.offsets()
	r := newProducer[T](b, p, c, fl, d, size)
	return &r
}

func (f *fakeRing[T]) consumer(size uint32) *Consumer[T] {
	b, p, c, fl, d := f.offsets()
	r := newConsumer[T](b, p, c, fl, d, size)
	return &r
}

const nearWrap = 1<<32 - 5

// at returns nearWrap+k, wrapped at 2^32 as ring indices are.
func at(k uint32) uint32 { return nearWrap + k }

// TestProducerReserveBeyondFree checks that Reserve hands out what is
// free and no more, before and after the kernel consumes, across the
// indices' wrap at 2^32.
func TestProducerReserveBeyondFree(t *testing.T) {
	f := newFakeRing[uint64](8, nearWrap)
	p, k := f.producer(8), f.consumer(8)
	first, got := p.Reserve(20)
	if first != nearWrap || got != 8 {
		t.Fatalf("Reserve(20) on an empty 8-entry ring = %d, %d; want %d, 8", first, got, at(0))
	}
	for i := range got {
		p.Set(first+i, uint64(100+i))
	}
	if _, got := p.Reserve(1); got != 0 {
		t.Fatalf("Reserve(1) on a full ring reserved %d", got)
	}
	p.Submit(5)
	if f.mem.producer != at(5) {
		t.Fatalf("producer after Submit(5) = %d", f.mem.producer)
	}
	// The kernel sees the 5 submitted entries only.
	kf, kn := k.Peek(8)
	if kf != nearWrap || kn != 5 {
		t.Fatalf("kernel Peek = %d, %d; want 5 from %d", kf, kn, at(0))
	}
	for i := range kn {
		if v := k.Get(kf + i); v != uint64(100+i) {
			t.Fatalf("entry %d = %d", i, v)
		}
	}
	k.Release(3)
	if got := p.Free(1); got != 3 {
		t.Fatalf("Free after the kernel released 3 = %d", got)
	}
	p.Submit(3)
	first, got = p.Reserve(4) // the indices cross 2^32 here
	if first != at(8) || got != 3 {
		t.Fatalf("Reserve(4) = %d, %d; want 3 from %d", first, got, at(8))
	}
	p.Cancel(1)
	p.Submit(2)
	if f.mem.producer != at(10) || f.mem.producer != 5 {
		t.Fatalf("producer = %d, want %d (wrapped)", f.mem.producer, at(10))
	}
}

// TestConsumerPeekBeyondAvailable checks Peek, Release and Cancel across
// the wrap.
func TestConsumerPeekBeyondAvailable(t *testing.T) {
	f := newFakeRing[Desc](4, nearWrap)
	k, c := f.producer(4), f.consumer(4)
	if _, got := c.Peek(64); got != 0 {
		t.Fatalf("Peek of an empty ring took %d", got)
	}
	push := func(n uint32, base uint64) {
		first, got := k.Reserve(n)
		if got != n {
			t.Fatalf("kernel Reserve(%d) = %d", n, got)
		}
		for i := range got {
			k.Set(first+i, Desc{Addr: base + uint64(i), Len: uint32(i)})
		}
		k.Submit(got)
	}
	for round := range uint64(10) {
		push(3, round*10)
		first, got := c.Peek(64)
		if got != 3 {
			t.Fatalf("round %d: Peek(64) took %d, want 3", round, got)
		}
		if d := c.Get(first); d.Addr != round*10 {
			t.Fatalf("round %d: first entry %+v, want Addr %d", round, d, round*10)
		}
		c.Cancel(1) // put the last back
		c.Release(2)
		first, got = c.Peek(64)
		if got != 1 || c.Get(first).Addr != round*10+2 {
			t.Fatalf("round %d: after Cancel, Peek took %d (%+v)", round, got, c.Get(first))
		}
		c.Release(1)
	}
	if f.mem.consumer != at(30) {
		t.Fatalf("consumer = %d, want %d", f.mem.consumer, at(30))
	}
}

// TestRingConcurrent runs a producer and a consumer on one ring, each on
// its own goroutine, across the wrap, in uneven batches: every entry
// arrives once and in order. Under -race it also checks that the
// indices' atomics order the plain writes and reads of entries.
func TestRingConcurrent(t *testing.T) {
	const size, total = 16, 100000
	f := newFakeRing[uint64](size, 1<<32-size*100)
	p, c := f.producer(size), f.consumer(size)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for v, batch := uint64(0), uint32(1); v < total; batch = batch%37 + 1 {
			first, got := p.Reserve(min(batch, uint32(total-v)))
			for i := range got {
				p.Set(first+i, v)
				v++
			}
			p.Submit(got)
		}
	}()
	for want, batch := uint64(0), uint32(1); want < total; batch = batch%29 + 1 {
		first, got := c.Peek(batch)
		for i := range got {
			if v := c.Get(first + i); v != want {
				t.Fatalf("entry %d, want %d", v, want)
			}
			want++
		}
		c.Release(got)
	}
	wg.Wait()
}

func TestFrameStack(t *testing.T) {
	s := newFrameStack(4, 2048)
	if _, ok := s.Pop(); ok {
		t.Fatal("Pop of an empty stack")
	}
	// Addresses inside a frame push the frame.
	for _, a := range []uint64{0, 2048 + 256, 4096 + 300} {
		if !s.Push(a) {
			t.Fatalf("Push(%d) failed", a)
		}
	}
	if n := s.PushN([]uint64{6144, 8192}); n != 1 {
		t.Fatalf("PushN onto a stack with room for 1 pushed %d", n)
	}
	if s.Push(1) {
		t.Fatal("Push onto a full stack succeeded")
	}
	if a, ok := s.Pop(); !ok || a != 6144 {
		t.Fatalf("Pop = %d, %v", a, ok)
	}
	t2 := s.Split(2)
	if s.Len() != 1 || t2.Len() != 2 {
		t.Fatalf("after Split(2): %d and %d frames", s.Len(), t2.Len())
	}
	var dst [8]uint64
	if n := t2.PopN(dst[:]); n != 2 || dst[0] != 2048 || dst[1] != 4096 {
		t.Fatalf("PopN = %d, %v", n, dst[:n])
	}
	if a, _ := s.Pop(); a != 0 {
		t.Fatalf("Pop = %d, want 0", a)
	}
}

// BenchmarkRingBatch moves batches of 64 descriptors through a ring:
// reserve, set and submit on the producer's side, peek, get and release
// on the consumer's, on one goroutine. ns/op is per descriptor.
func BenchmarkRingBatch(b *testing.B) {
	const size, batch = 2048, 64
	f := newFakeRing[Desc](size, 0)
	p, c := f.producer(size), f.consumer(size)
	b.ReportAllocs()
	var sum uint64
	for i := 0; b.Loop(); i++ {
		if i%batch == 0 {
			first, got := p.Reserve(batch)
			for j := range got {
				p.Set(first+j, Desc{Addr: uint64(j) << 12, Len: 64})
			}
			p.Submit(got)
			first, got = c.Peek(batch)
			for j := range got {
				sum += c.Get(first + j).Addr
			}
			c.Release(got)
		}
	}
	_ = sum
}

package mr

import (
	"testing"
)

func benchRegion(b *testing.B, n int) (*Table, *PD, *MR) {
	tab := NewTable()
	pd := tab.AllocPD()
	// Other regions in the table, as on a busy device.
	for range 1000 {
		mustRegister(b, tab, pd, make([]byte, 64), 0, LocalWrite)
	}
	return tab, pd, mustRegister(b, tab, pd, make([]byte, n), 0, LocalWrite|RemoteWrite|RemoteRead|RemoteAtomic)
}

// heapBuf returns a heap-allocated, hence 8-byte aligned, buffer. A
// non-escaping make may land on the stack with any alignment, and memmove
// from a misaligned source would measure the CPU rather than this package.
//
//go:noinline
func heapBuf(n int) []byte { return make([]byte, n) }

func BenchmarkLookup(b *testing.B) {
	tab, pd, m := benchRegion(b, 1<<20)
	key, iova := m.RKey(), m.IOVA()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := tab.Lookup(key, pd, iova+4096, 4096, RemoteWrite); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLookupParallel(b *testing.B) {
	tab, pd, m := benchRegion(b, 1<<20)
	key, iova := m.RKey(), m.IOVA()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := tab.Lookup(key, pd, iova+4096, 4096, RemoteWrite); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkWriteAt4K(b *testing.B) {
	_, _, m := benchRegion(b, 1<<20)
	src := heapBuf(4096)
	iova := m.IOVA() + 8192
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if err := m.WriteAt(iova, src); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadAt4K(b *testing.B) {
	_, _, m := benchRegion(b, 1<<20)
	dst := heapBuf(4096)
	iova := m.IOVA() + 8192
	b.SetBytes(int64(len(dst)))
	b.ReportAllocs()
	for b.Loop() {
		if err := m.ReadAt(iova, dst); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLookupWriteAt4K is the responder's whole RDMA WRITE path for one
// 4 KiB payload.
func BenchmarkLookupWriteAt4K(b *testing.B) {
	tab, pd, m := benchRegion(b, 1<<20)
	key, iova := m.RKey(), m.IOVA()+8192
	src := heapBuf(4096)
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		r, off, err := tab.Lookup(key, pd, iova, uint64(len(src)), RemoteWrite)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.WriteAt(r.IOVA()+off, src); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFetchAndAdd(b *testing.B) {
	_, _, m := benchRegion(b, 4096)
	iova := m.IOVA() + 64
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.FetchAndAdd(iova, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCompareAndSwap(b *testing.B) {
	_, _, m := benchRegion(b, 4096)
	iova := m.IOVA() + 64
	b.ReportAllocs()
	var v uint64
	for b.Loop() {
		if _, err := m.CompareAndSwap(iova, v, v+1); err != nil {
			b.Fatal(err)
		}
		v++
	}
}

func BenchmarkRegisterDeregister(b *testing.B) {
	tab, pd, _ := benchRegion(b, 64)
	buf := make([]byte, 4096)
	b.ReportAllocs()
	for b.Loop() {
		m, err := tab.Register(pd, buf, 0, LocalWrite)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Deregister(); err != nil {
			b.Fatal(err)
		}
	}
}

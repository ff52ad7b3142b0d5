package mr

import (
	"encoding/binary"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

func TestAtomicsSemantics(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	buf := make([]byte, 32)
	const iova = 0x8000
	m := mustRegister(t, tab, pd, buf, iova, allAccess)

	// Host byte order: the word as the CPU sees it in memory.
	word := (*uint64)(unsafe.Pointer(&buf[8]))
	*word = 100

	if orig, err := m.FetchAndAdd(iova+8, 5); err != nil || orig != 100 || *word != 105 {
		t.Fatalf("FetchAndAdd = %d, %v; word %d", orig, err, *word)
	}
	if orig, err := m.CompareAndSwap(iova+8, 7, 1); err != nil || orig != 105 || *word != 105 {
		t.Fatalf("CompareAndSwap mismatch = %d, %v; word %d", orig, err, *word)
	}
	if orig, err := m.CompareAndSwap(iova+8, 105, 1); err != nil || orig != 105 || *word != 1 {
		t.Fatalf("CompareAndSwap match = %d, %v; word %d", orig, err, *word)
	}
	// FetchAdd wraps modulo 2^64.
	*word = math.MaxUint64
	if orig, err := m.FetchAndAdd(iova+8, 2); err != nil || orig != math.MaxUint64 || *word != 1 {
		t.Fatalf("wrapping FetchAndAdd = %d, %v; word %d", orig, err, *word)
	}
	if got := binary.NativeEndian.Uint64(buf[8:]); got != 1 {
		t.Fatalf("native-endian read = %d", got)
	}
	// The last word of the region.
	if _, err := m.FetchAndAdd(iova+24, 1); err != nil {
		t.Fatalf("last word: %v", err)
	}
	if buf[0] != 0 || buf[7] != 0 || buf[16] != 0 {
		t.Fatalf("atomics touched neighbouring words: %v", buf)
	}
}

func TestAtomicsErrors(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	const iova = 0x8000
	m := mustRegister(t, tab, pd, make([]byte, 32), iova, allAccess)
	noAtomic := mustRegister(t, tab, pd, make([]byte, 32), iova, LocalWrite|RemoteWrite)
	// Misaligned mapping is only possible without REMOTE_ATOMIC; the atomic
	// methods still refuse it.
	skewed := mustRegister(t, tab, pd, make([]byte, 40)[1:], iova, LocalWrite)

	for _, tc := range []struct {
		name string
		m    *MR
		iova uint64
		want error
	}{
		{"misaligned by 1", m, iova + 1, ErrMisaligned},
		{"misaligned by 4", m, iova + 4, ErrMisaligned},
		{"before region", m, iova - 8, ErrBounds},
		{"past end", m, iova + 32, ErrBounds},
		{"far past end", m, math.MaxUint64 - 7, ErrBounds},
		{"no REMOTE_ATOMIC", noAtomic, iova, ErrAccess},
		{"skewed region without REMOTE_ATOMIC", skewed, iova, ErrAccess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.m.FetchAndAdd(tc.iova, 1); err != tc.want {
				t.Errorf("FetchAndAdd = %v, want %v", err, tc.want)
			}
			if _, err := tc.m.CompareAndSwap(tc.iova, 0, 1); err != tc.want {
				t.Errorf("CompareAndSwap = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestAtomicsRefuseMisalignedRealAddress(t *testing.T) {
	// Build a region whose mapping is skewed without going through the
	// Register check, to prove word() never hands sync/atomic a misaligned
	// pointer.
	buf := make([]byte, 40)
	m := &MR{buf: buf[1:33], iova: 0x8000, length: 32, access: allAccess}
	if _, err := m.FetchAndAdd(0x8000, 1); err != ErrMisaligned {
		t.Fatalf("FetchAndAdd on skewed mapping = %v, want ErrMisaligned", err)
	}
}

// TestAtomicsConcurrentWithCPU mixes FetchAndAdd and CompareAndSwap from
// many goroutines with the application's own atomic.AddUint64 on the same
// word; the sum must be exact.
func TestAtomicsConcurrentWithCPU(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	buf := make([]byte, 64)
	m := mustRegister(t, tab, pd, buf, 0, allAccess)
	word := (*uint64)(unsafe.Pointer(&buf[16]))
	addr := m.IOVA() + 16

	const goroutines = 8
	const iters = 5000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(3)
		go func() { // the NIC's FetchAdd
			defer wg.Done()
			for range iters {
				mr, off, err := tab.Lookup(m.RKey(), pd, addr, 8, RemoteAtomic)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := mr.FetchAndAdd(mr.IOVA()+off, 3); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		go func() { // the NIC's CmpSwap as an add loop
			defer wg.Done()
			for range iters {
				old := atomic.LoadUint64(word)
				for {
					orig, err := m.CompareAndSwap(addr, old, old+5)
					if err != nil {
						t.Error(err)
						return
					}
					if orig == old {
						break
					}
					old = orig
				}
			}
		}()
		go func() { // the application's CPU atomics
			defer wg.Done()
			for i := range iters {
				atomic.AddUint64(word, uint64(g%2+1))
				if i%64 == 0 {
					atomic.LoadUint64(word)
				}
			}
		}()
	}
	wg.Wait()
	want := uint64(goroutines*iters*(3+5) + goroutines/2*iters*(1+2))
	if got := atomic.LoadUint64(word); got != want {
		t.Fatalf("word = %d, want %d", got, want)
	}
}

package mr

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// MR is a registered memory region: a Go byte slice, the iova its first byte
// has, the rights granted on it and its key. Its accessors are safe for
// concurrent use.
//
// Every data movement method holds the region's lock shared for the length
// of the copy or atomic, and Deregister takes it exclusively; so once
// Deregister returns no access is in progress and none can start, and the
// application may reuse the memory.
type MR struct {
	// Immutable after Register.
	table  *Table
	pd     *PD
	iova   uint64
	length uint64
	access Access
	key    Key

	mu   sync.RWMutex // shared by accesses, exclusive in Deregister
	buf  []byte       // guarded by mu; nil once dead
	dead bool         // guarded by mu

	writes   atomic.Uint64 // WriteAt calls and atomics completed
	watchers atomic.Int32  // goroutines in WaitWrite
	written  chan struct{} // tells a watcher a write completed
}

// LKey returns the key local work requests use to name the region.
func (m *MR) LKey() Key { return m.key }

// RKey returns the key a peer uses to name the region. It equals LKey, as
// in kernel rxe.
func (m *MR) RKey() Key { return m.key }

// IOVA returns the address of the region's first byte.
func (m *MR) IOVA() uint64 { return m.iova }

// Len returns the region's length in bytes.
func (m *MR) Len() uint64 { return m.length }

// Access returns the rights the region was registered with.
func (m *MR) Access() Access { return m.access }

// PD returns the protection domain the region belongs to.
func (m *MR) PD() *PD { return m.pd }

// String describes the region for logs.
func (m *MR) String() string {
	return fmt.Sprintf("MR{key=%v pd=%d iova=%#x len=%d access=%v}", m.key, m.pd.id, m.iova, m.length, m.access)
}

// Deregister removes the region from its Table. Every later Lookup of its
// key fails with ErrInvalidKey, and so does every data movement method
// called on m. Deregister waits for accesses already in progress to finish.
// Deregistering twice fails with ErrInvalidKey.
func (m *MR) Deregister() error {
	t := m.table
	t.mu.Lock()
	if t.mrs[m.key] != m {
		t.mu.Unlock()
		return fmt.Errorf("mr: deregister %v: %w", m.key, ErrInvalidKey)
	}
	delete(t.mrs, m.key)
	t.live.Delete(m.key)
	m.pd.nmr--
	t.mu.Unlock()

	m.mu.Lock()
	m.dead = true
	m.buf = nil
	m.mu.Unlock()
	return nil
}

// offset returns the offset of iova in the region if [iova, iova+length)
// lies inside it. Written so that no sum can overflow.
func (m *MR) offset(iova, length uint64) (uint64, bool) {
	if iova < m.iova {
		return 0, false
	}
	off := iova - m.iova
	if off > m.length || length > m.length-off {
		return 0, false
	}
	return off, true
}

// ReadAt copies len(dst) bytes of the region starting at iova into dst. It
// copies everything or nothing: ErrBounds if the range is not inside the
// region, ErrInvalidKey if the region has been deregistered.
//
// ReadAt checks no right: reading needs LocalRead for local gathers and
// RemoteRead for a peer's RDMA READ, which the caller checked with Lookup.
func (m *MR) ReadAt(iova uint64, dst []byte) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.read(iova, dst)
}

// read is ReadAt's copy; m.mu must be held.
func (m *MR) read(iova uint64, dst []byte) error {
	if m.dead {
		return ErrInvalidKey
	}
	off, ok := m.offset(iova, uint64(len(dst)))
	if !ok {
		return ErrBounds
	}
	copy(dst, m.buf[off:])
	return nil
}

// Peek is ReadAt for a program that watches memory a peer writes with RDMA
// WRITE, as perftest's latency tests poll a byte: it copies while no write
// into the region is in progress, as a CPU sees each of a NIC's writes
// whole. Reading the registered slice itself while a packet lands in it
// is a data race in Go's memory model. Peek holds off the region's
// writers while it copies, so it is for polling a few bytes, not for bulk
// reads.
func (m *MR) Peek(iova uint64, dst []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.read(iova, dst)
}

// WriteAt copies src into the region starting at iova. It copies everything
// or nothing: ErrBounds if the range is not inside the region, ErrInvalidKey
// if the region has been deregistered.
//
// The caller checks the right the write needs with Lookup (LocalWrite for a
// scatter, RemoteWrite for a peer's RDMA WRITE). As a last line of defence
// WriteAt refuses, with ErrAccess, a region without LocalWrite: no legal
// write can reach one, because Register grants no remote write without it.
func (m *MR) WriteAt(iova uint64, src []byte) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.dead {
		return ErrInvalidKey
	}
	if m.access&LocalWrite == 0 {
		return ErrAccess
	}
	off, ok := m.offset(iova, uint64(len(src)))
	if !ok {
		return ErrBounds
	}
	copy(m.buf[off:], src)
	m.wrote()
	return nil
}

// CompareAndSwap performs an InfiniBand CmpSwap on the 8 bytes at iova:
// if they equal compare they are replaced by swap. It returns the original
// value either way. The operand is in host byte order, as the memory holds
// it; converting to and from the AtomicETH's big-endian fields is the
// caller's job.
//
// The operation is a sync/atomic operation on the real memory, so it is
// atomic with respect to other CompareAndSwap and FetchAndAdd calls and to
// the application's own sync/atomic operations on the same word. It fails
// with ErrMisaligned if iova is not 8-byte aligned, ErrBounds if the word is
// not inside the region, ErrAccess if the region lacks RemoteAtomic, and
// ErrInvalidKey if it has been deregistered.
func (m *MR) CompareAndSwap(iova, compare, swap uint64) (orig uint64, err error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p, err := m.word(iova)
	if err != nil {
		return 0, err
	}
	for {
		old := atomic.LoadUint64(p)
		if old != compare || atomic.CompareAndSwapUint64(p, old, swap) {
			m.wrote()
			return old, nil
		}
	}
}

// FetchAndAdd performs an InfiniBand FetchAdd on the 8 bytes at iova: it
// adds add (wrapping) and returns the original value. Byte order,
// atomicity and errors are as for CompareAndSwap.
func (m *MR) FetchAndAdd(iova, add uint64) (orig uint64, err error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p, err := m.word(iova)
	if err != nil {
		return 0, err
	}
	v := atomic.AddUint64(p, add) - add
	m.wrote()
	return v, nil
}

// wrote counts a completed write and wakes a WaitWrite.
func (m *MR) wrote() {
	m.writes.Add(1)
	if m.watchers.Load() != 0 {
		select {
		case m.written <- struct{}{}:
		default:
		}
	}
}

// WaitWrite blocks until the region's write count differs from seen (see
// Writes), and returns the new count; or until ctx is done. It lets a
// program wait for a peer's RDMA WRITE without spinning.
func (m *MR) WaitWrite(ctx context.Context, seen uint64) (uint64, error) {
	m.watchers.Add(1)
	defer m.watchers.Add(-1)
	for {
		if w := m.writes.Load(); w != seen {
			return w, nil
		}
		select {
		case <-m.written:
		case <-ctx.Done():
			return seen, ctx.Err()
		}
	}
}

// Writes returns how many writes (WriteAt calls and atomics) into the
// region have completed. A program that watches memory a peer writes with
// RDMA WRITE, as perftest's latency tests do, waits for this count to move
// and then reads the region: the count orders the read after the write,
// which polling the bytes directly would not, in Go's memory model.
func (m *MR) Writes() uint64 { return m.writes.Load() }

// word returns a pointer to the aligned 8-byte word at iova. m.mu must be
// held shared.
func (m *MR) word(iova uint64) (*uint64, error) {
	if m.dead {
		return nil, ErrInvalidKey
	}
	if m.access&RemoteAtomic == 0 {
		return nil, ErrAccess
	}
	if iova%8 != 0 {
		return nil, ErrMisaligned
	}
	off, ok := m.offset(iova, 8)
	if !ok {
		return nil, ErrBounds
	}
	p := unsafe.Pointer(&m.buf[off])
	// Register guarantees iova ≡ address (mod 8) for atomic regions; this
	// check keeps a misaligned pointer from ever reaching sync/atomic.
	if uintptr(p)%8 != 0 {
		return nil, ErrMisaligned
	}
	return (*uint64)(p), nil
}

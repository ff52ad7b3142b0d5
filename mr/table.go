// Package mr implements protection domains, memory regions and the key and
// access checks that guard every byte gorxe moves.
//
// A Table (one per device) allocates protection domains and registers memory
// regions over Go byte slices. Registration hands out a 32-bit key that
// serves as both lkey and rkey, as kernel rxe does. The requester and
// responder resolve a key with Table.Lookup, which checks the key, the
// protection domain, the access right and the address range in one call and
// returns a sentinel error that the qp layer maps to a NAK syndrome or a
// completion status. Data then moves with MR.ReadAt, MR.WriteAt,
// MR.CompareAndSwap and MR.FetchAndAdd, which check the range again, so no
// code path can touch memory outside a live, registered region.
//
// Addresses are I/O virtual addresses (iova), the addresses a peer puts in a
// RETH or AtomicETH. By default a region's iova is the address of its first
// byte in this process, because perftest exchanges raw virtual addresses.
package mr

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"unsafe"

	"github.com/gorxe/gorxe/wire/reth"
)

// Errors returned by Lookup and by the data movement methods. They are plain
// sentinels, returned unwrapped on the hot path so callers can compare them
// with == and nothing is allocated.
var (
	// ErrInvalidKey reports a key that names no live region: never
	// registered, or deregistered.
	ErrInvalidKey = errors.New("mr: invalid key")
	// ErrPDMismatch reports a region that belongs to a protection domain
	// other than the one the access is made from.
	ErrPDMismatch = errors.New("mr: protection domain mismatch")
	// ErrAccess reports a region registered without the right the access
	// needs.
	ErrAccess = errors.New("mr: access right not granted")
	// ErrBounds reports an address range not inside the region, including a
	// range whose end overflows 64 bits.
	ErrBounds = errors.New("mr: address range outside region")
	// ErrMisaligned reports an atomic operand address that is not 8-byte
	// aligned.
	ErrMisaligned = errors.New("mr: atomic address not 8-byte aligned")
)

// Errors returned by the control path (Register, Deregister, Dealloc). They
// are wrapped with context; test them with errors.Is.
var (
	// ErrInvalidAccess reports access flags that Register refuses: unknown
	// bits, or a remote write or atomic right without LocalWrite.
	ErrInvalidAccess = errors.New("mr: invalid access flags")
	// ErrBadPD reports a protection domain that is nil, deallocated, or
	// allocated by another Table.
	ErrBadPD = errors.New("mr: nil, deallocated or foreign protection domain")
	// ErrBusy reports a protection domain that still has registered regions.
	ErrBusy = errors.New("mr: protection domain has registered memory regions")
)

// Key is a memory region key: the lkey a local work request names in its
// scatter/gather list and the rkey a peer puts in a RETH or AtomicETH. It
// is the key type the wire carries, so a key read from a header needs no
// conversion.
type Key = reth.Key

// PD is a protection domain. A region can only be reached from queue pairs
// of the same PD. PDs are created by Table.AllocPD.
type PD struct {
	table *Table
	id    uint32

	// Guarded by table.mu.
	nmr  int
	dead bool
}

// ID returns the PD's handle, unique within its Table, for logs and counters.
// It is never sent on the wire, so it need not be unpredictable.
func (pd *PD) ID() uint32 { return pd.id }

// Dealloc releases the PD. Like ibv_dealloc_pd it fails with ErrBusy while
// regions are still registered in it. Afterwards Register refuses the PD.
func (pd *PD) Dealloc() error {
	if pd == nil || pd.table == nil {
		return fmt.Errorf("mr: dealloc pd: %w", ErrBadPD)
	}
	t := pd.table
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case pd.dead:
		return fmt.Errorf("mr: dealloc pd %d: %w", pd.id, ErrBadPD)
	case pd.nmr > 0:
		return fmt.Errorf("mr: dealloc pd %d (%d regions): %w", pd.id, pd.nmr, ErrBusy)
	}
	pd.dead = true
	return nil
}

// Table holds a device's protection domains and memory regions and resolves
// keys. It is safe for concurrent use; Lookup takes only a read lock, so the
// requesters and responders of many queue pairs can look keys up in parallel.
// The zero value is an empty table ready to use.
type Table struct {
	mu  sync.RWMutex
	mrs map[Key]*MR // the live regions; the writers' copy, under mu
	// live is mrs for Lookup, which reads it without a lock: the
	// RWMutex's two atomic adds a lookup were most of its time.
	live   sync.Map
	rng    *rand.ChaCha8 // key generator, seeded from crypto/rand
	nextPD uint32
}

// NewTable returns an empty Table.
func NewTable() *Table { return &Table{} }

// NewSeededTable returns an empty Table whose keys come from seed: the
// same keys, in the same order, on every run. It is for demonstrations
// and simulations that must repeat byte for byte; a real device's keys
// must not be predictable (an rkey is all that guards a region from a
// peer), which NewTable's are not.
func NewSeededTable(seed uint64) *Table {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	return &Table{rng: rand.NewChaCha8(s)}
}

// AllocPD allocates a new protection domain.
func (t *Table) AllocPD() *PD {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nextPD++
	return &PD{table: t, id: t.nextPD}
}

// Len returns the number of registered memory regions.
func (t *Table) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.mrs)
}

// Register registers buf as a memory region of pd with the given rights and
// returns it with a fresh key.
//
// The region's first byte has address iova; an iova of 0 means the address
// of buf[0] in this process (what perftest advertises). Go's garbage
// collector does not move heap objects, and buf escapes to the heap by being
// stored here, so that address stays valid while the region is registered.
// The range [iova, iova+len(buf)) must not overflow 64 bits. A zero-length
// buf is allowed; only zero-length accesses at its iova succeed.
//
// Following ib_check_mr_access and the ibv_reg_mr manual, RemoteWrite or
// RemoteAtomic without LocalWrite is refused with ErrInvalidAccess, as are
// unknown bits.
//
// A region with RemoteAtomic must map every 8-byte aligned iova to an
// 8-byte aligned address in memory, that is iova ≡ &buf[0] (mod 8), which
// always holds when iova is 0. Otherwise Register fails with ErrMisaligned:
// atomics on misaligned memory could be serialised against each other with a
// lock, but never against the application's own sync/atomic operations on
// the same words, which is what a verbs user relies on.
//
// Keys are drawn from a ChaCha8 generator seeded from crypto/rand, so a peer
// cannot guess a live key from keys it has seen; they are never 0 and unique
// among live regions.
func (t *Table) Register(pd *PD, buf []byte, iova uint64, access Access) (*MR, error) {
	if access&^validAccess != 0 {
		return nil, fmt.Errorf("mr: register: unknown access bits %v: %w", access&^validAccess, ErrInvalidAccess)
	}
	if access&(RemoteWrite|RemoteAtomic) != 0 && access&LocalWrite == 0 {
		return nil, fmt.Errorf("mr: register: %v without LOCAL_WRITE: %w", access, ErrInvalidAccess)
	}
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	if iova == 0 {
		iova = addr
	}
	n := uint64(len(buf))
	if iova+n < iova {
		return nil, fmt.Errorf("mr: register: iova %#x + length %d overflows: %w", iova, n, ErrBounds)
	}
	if access&RemoteAtomic != 0 && n > 0 && (addr-iova)%8 != 0 {
		return nil, fmt.Errorf("mr: register: REMOTE_ATOMIC with iova %#x and address %#x not equal mod 8: %w", iova, addr, ErrMisaligned)
	}
	m := &MR{
		table:   t,
		pd:      pd,
		buf:     buf[:n:n],
		iova:    iova,
		length:  n,
		access:  access,
		written: make(chan struct{}, 1),
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	if pd == nil || pd.table != t || pd.dead {
		return nil, fmt.Errorf("mr: register: %w", ErrBadPD)
	}
	if t.mrs == nil {
		t.mrs = make(map[Key]*MR)
	}
	if t.rng == nil {
		var seed [32]byte
		crand.Read(seed[:]) // never fails (crypto/rand, Go 1.24+)
		t.rng = rand.NewChaCha8(seed)
	}
	m.key = t.newKeyLocked()
	t.mrs[m.key] = m
	t.live.Store(m.key, m)
	pd.nmr++
	return m, nil
}

// newKeyLocked draws a random key that is not 0 and not live. With at most a
// few million live regions among 2^32 keys the loop rarely runs twice.
func (t *Table) newKeyLocked() Key {
	for {
		k := Key(t.rng.Uint64() >> 32)
		if k != 0 && t.mrs[k] == nil {
			return k
		}
	}
}

// Lookup resolves key for an access of length bytes at iova made from pd
// that needs the rights in need, and returns the region and the offset of
// iova within it. It allocates nothing. Who asks for what:
//
//	local read  (gather of SEND / WRITE payload)    lkey  LocalRead
//	local write (scatter of RECV, READ response,     lkey  LocalWrite
//	             atomic original value)
//	remote WRITE (responder, RETH)                   rkey  RemoteWrite
//	remote READ  (responder, RETH)                   rkey  RemoteRead
//	remote atomic (responder, AtomicETH)             rkey  RemoteAtomic
//
// The checks run in the order rxe runs them, each with its own sentinel:
// ErrInvalidKey, ErrPDMismatch (a nil pd matches nothing), ErrAccess, then
// ErrBounds if [iova, iova+length) is not inside the region. A zero-length
// range is in bounds anywhere from the region's first byte to one past its
// last. Lookup does not check atomic alignment; the atomic methods do.
//
// The region returned may be deregistered at any moment after Lookup
// returns; the data movement methods then fail with ErrInvalidKey.
func (t *Table) Lookup(key Key, pd *PD, iova, length uint64, need Access) (*MR, uint64, error) {
	v, _ := t.live.Load(key)
	m, _ := v.(*MR)
	if m == nil {
		return nil, 0, ErrInvalidKey
	}
	if m.pd != pd {
		return nil, 0, ErrPDMismatch
	}
	if need&^m.access != 0 {
		return nil, 0, ErrAccess
	}
	off, ok := m.offset(iova, length)
	if !ok {
		return nil, 0, ErrBounds
	}
	return m, off, nil
}

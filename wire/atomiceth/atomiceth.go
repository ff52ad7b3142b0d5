// Package atomiceth reads and writes the two atomic headers: the Atomic
// Extended Transport Header of COMPARE_SWAP and FETCH_ADD requests (IBTA
// Vol 1 §9.3.4) and the Atomic Acknowledge Extended Transport Header of an
// ATOMIC_ACKNOWLEDGE (§9.3.6).
//
// AtomicETH, 28 bytes. Note that Swap (or Add) comes before Compare:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Virtual Address (64 bits)                  |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                             R_Key                             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Swap (or Add) Data (64 bits)                  |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Compare Data (64 bits)                     |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// AtomicAckETH, 8 bytes: the original remote data, before the operation.
package atomiceth

import (
	"encoding/binary"

	"github.com/gorxe/gorxe/wire/reth"
)

// Len is the length of an AtomicETH in bytes.
const Len = 28

// AckLen is the length of an AtomicAckETH in bytes.
const AckLen = 8

// Header is a view of an AtomicETH. Its methods need at least Len bytes.
type Header []byte

// VA returns the 8-byte aligned virtual address of the operand.
func (h Header) VA() uint64 { return binary.BigEndian.Uint64(h[0:]) }

// RKey returns the remote key that authorises the access.
func (h Header) RKey() reth.Key { return reth.Key(binary.BigEndian.Uint32(h[8:])) }

// SwapAdd returns the value to swap in (COMPARE_SWAP) or to add (FETCH_ADD).
func (h Header) SwapAdd() uint64 { return binary.BigEndian.Uint64(h[12:]) }

// Compare returns the value to compare with (COMPARE_SWAP only).
func (h Header) Compare() uint64 { return binary.BigEndian.Uint64(h[20:]) }

// Fields holds the AtomicETH's fields.
type Fields struct {
	VA      uint64
	RKey    reth.Key
	SwapAdd uint64
	Compare uint64
}

// Fields returns the header's fields.
func (h Header) Fields() Fields {
	return Fields{VA: h.VA(), RKey: h.RKey(), SwapAdd: h.SwapAdd(), Compare: h.Compare()}
}

// Encode writes f into the header.
func (h Header) Encode(f *Fields) {
	_ = h[Len-1]
	binary.BigEndian.PutUint64(h[0:], f.VA)
	binary.BigEndian.PutUint32(h[8:], uint32(f.RKey))
	binary.BigEndian.PutUint64(h[12:], f.SwapAdd)
	binary.BigEndian.PutUint64(h[20:], f.Compare)
}

// AckHeader is a view of an AtomicAckETH. Its methods need at least AckLen
// bytes.
type AckHeader []byte

// OrigData returns the remote operand's value before the operation.
func (h AckHeader) OrigData() uint64 { return binary.BigEndian.Uint64(h) }

// SetOrigData sets the original remote data.
func (h AckHeader) SetOrigData(v uint64) { binary.BigEndian.PutUint64(h, v) }

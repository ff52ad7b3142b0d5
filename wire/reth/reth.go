// Package reth reads and writes the RDMA Extended Transport Header, which
// carries the remote address of RDMA WRITE and READ requests (IBTA Vol 1
// §9.3.3, §5.2.5).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Virtual Address (63..32)                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Virtual Address (31..0)                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                             R_Key                             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                           DMA Length                          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
package reth

import (
	"encoding/binary"
	"fmt"
)

// Len is the length of a RETH in bytes.
const Len = 16

// Key is a 32-bit memory key: the R_Key a peer names remote memory with in
// a RETH, AtomicETH or IETH, and the L_Key of local scatter/gather entries.
// It is the one key type of gorxe; mr.Key is another name for it.
type Key uint32

// String returns k as 0x and eight hex digits, like "0x00001a2b".
func (k Key) String() string { return fmt.Sprintf("%#08x", uint32(k)) }

// Header is a view of a RETH. Its methods need at least Len bytes.
type Header []byte

// VA returns the virtual address of the first byte the request touches.
func (h Header) VA() uint64 { return binary.BigEndian.Uint64(h[0:]) }

// RKey returns the remote key that authorises the access.
func (h Header) RKey() Key { return Key(binary.BigEndian.Uint32(h[8:])) }

// DMALen returns the length of the whole message in bytes.
func (h Header) DMALen() uint32 { return binary.BigEndian.Uint32(h[12:]) }

// Fields holds the RETH's fields.
type Fields struct {
	VA     uint64
	RKey   Key
	DMALen uint32
}

// Fields returns the header's fields.
func (h Header) Fields() Fields { return Fields{VA: h.VA(), RKey: h.RKey(), DMALen: h.DMALen()} }

// Encode writes f into the header.
func (h Header) Encode(f *Fields) {
	_ = h[Len-1]
	binary.BigEndian.PutUint64(h[0:], f.VA)
	binary.BigEndian.PutUint32(h[8:], uint32(f.RKey))
	binary.BigEndian.PutUint32(h[12:], f.DMALen)
}

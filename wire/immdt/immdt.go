// Package immdt reads and writes the two 4-byte headers that follow the BTH
// at the end of some messages: the Immediate Data header (ImmDt, IBTA Vol 1
// §9.3.7) of the *_WITH_IMMEDIATE opcodes, and the Invalidate Extended
// Transport Header (IETH, §9.3.8) of SEND_*_WITH_INVALIDATE.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Immediate Data  /  R_Key to invalidate             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
package immdt

import (
	"encoding/binary"

	"github.com/gorxe/gorxe/wire/reth"
)

// Len is the length of an ImmDt or an IETH in bytes.
const Len = 4

// Header is a view of an ImmDt. Its methods need at least Len bytes.
type Header []byte

// Imm returns the immediate data as the 32-bit big-endian number on the wire.
func (h Header) Imm() uint32 { return binary.BigEndian.Uint32(h) }

// SetImm sets the immediate data.
func (h Header) SetImm(v uint32) { binary.BigEndian.PutUint32(h, v) }

// IETH is a view of an Invalidate Extended Transport Header. Its methods
// need at least Len bytes.
type IETH []byte

// RKey returns the R_Key that the responder invalidates.
func (h IETH) RKey() reth.Key { return reth.Key(binary.BigEndian.Uint32(h)) }

// SetRKey sets the R_Key to invalidate.
func (h IETH) SetRKey(k reth.Key) { binary.BigEndian.PutUint32(h, uint32(k)) }

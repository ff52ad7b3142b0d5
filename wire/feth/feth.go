// Package feth reads and writes the Flush Extended Transport Header that a
// FLUSH request carries before its RETH (IBTA Vol 1 Memory Placement
// Extensions, §9.3.11; Linux drivers/infiniband/sw/rxe/rxe_hdr.h).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       Reserved                        |SEL| PLT |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// SEL selects what is flushed (0 the whole memory region, 1 the RETH
// range) and PLT is the placement type (bit 0 global visibility, bit 1
// persistence).
package feth

import "encoding/binary"

// Len is the length of a FETH in bytes.
const Len = 4

// Header is a view of a FETH. Its methods need at least Len bytes.
type Header []byte

// Selectivity returns the SEL field.
func (h Header) Selectivity() uint8 { return uint8(binary.BigEndian.Uint32(h)>>4) & 0x3 }

// PlacementType returns the PLT field.
func (h Header) PlacementType() uint8 { return uint8(binary.BigEndian.Uint32(h)) & 0xf }

// Set writes SEL and PLT with the reserved bits zero.
func (h Header) Set(sel, plt uint8) {
	binary.BigEndian.PutUint32(h, uint32(sel&0x3)<<4|uint32(plt&0xf))
}

// Fields holds the FETH's fields.
type Fields struct {
	Selectivity   uint8
	PlacementType uint8
}

// Fields returns the header's fields.
func (h Header) Fields() Fields {
	return Fields{Selectivity: h.Selectivity(), PlacementType: h.PlacementType()}
}

// Encode writes f into the header with the reserved bits zero.
func (h Header) Encode(f *Fields) { h.Set(f.Selectivity, f.PlacementType) }

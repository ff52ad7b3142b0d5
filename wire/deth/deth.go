// Package deth reads and writes the Datagram Extended Transport Header,
// which every UD packet carries after the BTH (IBTA Vol 1 §9.3.2).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                             Q_Key                             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Reserved    |               Source QP                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
package deth

import (
	"encoding/binary"

	"github.com/gorxe/gorxe/wire/bth"
)

// Len is the length of a DETH in bytes.
const Len = 8

// GSIQKey is the Q_Key of the General Services QP, QP1 (IBTA Vol 1 §15.4.3).
const GSIQKey = 0x80010000

// Header is a view of a DETH. Its methods need at least Len bytes.
type Header []byte

// QKey returns the Queue Key.
func (h Header) QKey() uint32 { return binary.BigEndian.Uint32(h) }

// SrcQP returns the sender's queue pair number.
func (h Header) SrcQP() bth.QPN { return bth.QPN(binary.BigEndian.Uint32(h[4:]) & bth.QPNMask) }

// Fields holds the DETH's fields.
type Fields struct {
	QKey  uint32
	SrcQP bth.QPN
}

// Fields returns the header's fields.
func (h Header) Fields() Fields { return Fields{QKey: h.QKey(), SrcQP: h.SrcQP()} }

// Encode writes f into the header, with the reserved byte zero.
func (h Header) Encode(f *Fields) {
	_ = h[Len-1]
	binary.BigEndian.PutUint32(h, f.QKey)
	binary.BigEndian.PutUint32(h[4:], uint32(f.SrcQP)&bth.QPNMask)
}

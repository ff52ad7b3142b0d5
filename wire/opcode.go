package wire

import (
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/atomiceth"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/deth"
	"github.com/gorxe/gorxe/wire/feth"
	"github.com/gorxe/gorxe/wire/immdt"
	"github.com/gorxe/gorxe/wire/reth"
)

// Ext is a set of extended transport headers that follow the BTH.
type Ext uint16

// The extended headers, in the order they follow the BTH on the wire
// (IBTA Vol 1 §9.2, Figure 40; FETH before RETH for FLUSH).
const (
	ExtDETH      Ext = 1 << iota // Datagram ETH, UD
	ExtFETH                      // Flush ETH, FLUSH
	ExtRETH                      // RDMA ETH, first WRITE packet and READ request
	ExtAtomicETH                 // Atomic ETH, COMPARE_SWAP and FETCH_ADD
	ExtAETH                      // ACK ETH, responses
	ExtAtomicAck                 // Atomic Acknowledge ETH
	ExtImmDt                     // Immediate data
	ExtIETH                      // Invalidate ETH
	ExtCNP                       // the 16 reserved bytes of a RoCE v2 CNP
)

// extLen gives each extended header's length, in wire order.
var extLen = [...]struct {
	ext Ext
	len int
}{
	{ExtDETH, deth.Len},
	{ExtFETH, feth.Len},
	{ExtRETH, reth.Len},
	{ExtAtomicETH, atomiceth.Len},
	{ExtAETH, aeth.Len},
	{ExtAtomicAck, atomiceth.AckLen},
	{ExtImmDt, immdt.Len},
	{ExtIETH, immdt.Len},
	{ExtCNP, CNPReservedLen},
}

// CNPReservedLen is the length of the reserved field that follows the BTH in
// a RoCE v2 CNP (Annex A17.9.3).
const CNPReservedLen = 16

// Position tells where a packet sits in its message.
type Position uint8

// Packet positions. A message of one packet is Only.
const (
	First Position = 1 << iota
	Middle
	Last
	Only = First | Last
)

// String returns "FIRST", "MIDDLE", "LAST" or "ONLY".
func (p Position) String() string {
	switch p {
	case First:
		return "FIRST"
	case Middle:
		return "MIDDLE"
	case Last:
		return "LAST"
	case Only:
		return "ONLY"
	}
	return "NONE"
}

// OpInfo describes what an opcode's packets carry.
type OpInfo struct {
	Opcode   bth.Opcode
	Ext      Ext      // extended headers after the BTH
	Payload  bool     // whether the packet may carry payload
	Position Position // where the packet sits in its message
	Response bool     // sent by a responder (ACK, READ response), not a requester
	HdrLen   int      // BTH plus extended headers
}

// Has reports whether packets of this opcode carry the extended header e.
func (i *OpInfo) Has(e Ext) bool { return i.Ext&e != 0 }

// opTable holds an OpInfo for every opcode gorxe parses, indexed by opcode;
// the zero OpInfo (HdrLen 0) marks the others.
var opTable [256]OpInfo

func init() {
	type row struct {
		low     bth.Opcode // operation within the service (low five bits)
		ext     Ext
		payload bool
		pos     Position
		resp    bool
	}
	// The connected services share operations 0x00..0x0b; RC adds the rest
	// (IBTA Vol 1 Table 38, §9.3 for which headers each one carries).
	send := []row{
		{0x00, 0, true, First, false},
		{0x01, 0, true, Middle, false},
		{0x02, 0, true, Last, false},
		{0x03, ExtImmDt, true, Last, false},
		{0x04, 0, true, Only, false},
		{0x05, ExtImmDt, true, Only, false},
		{0x06, ExtRETH, true, First, false},
		{0x07, 0, true, Middle, false},
		{0x08, 0, true, Last, false},
		{0x09, ExtImmDt, true, Last, false},
		{0x0a, ExtRETH, true, Only, false},
		{0x0b, ExtRETH | ExtImmDt, true, Only, false},
	}
	rcOnly := []row{
		{0x0c, ExtRETH, false, Only, false},
		{0x0d, ExtAETH, true, First, true},
		{0x0e, 0, true, Middle, true},
		{0x0f, ExtAETH, true, Last, true},
		{0x10, ExtAETH, true, Only, true},
		{0x11, ExtAETH, false, Only, true},
		{0x12, ExtAETH | ExtAtomicAck, false, Only, true},
		{0x13, ExtAtomicETH, false, Only, false},
		{0x14, ExtAtomicETH, false, Only, false},
		{0x16, ExtIETH, true, Last, false},
		{0x17, ExtIETH, true, Only, false},
		{0x1c, ExtFETH | ExtRETH, false, Only, false},
		{0x1d, ExtRETH, true, Only, false}, // 8 bytes of payload: the value
	}
	add := func(base bth.Opcode, extra Ext, rows []row) {
		for _, r := range rows {
			op := base | r.low
			opTable[op] = OpInfo{Opcode: op, Ext: r.ext | extra, Payload: r.payload, Position: r.pos, Response: r.resp}
		}
	}
	add(0x00, 0, send)
	add(0x00, 0, rcOnly)
	add(0x20, 0, send)
	add(0x60, ExtDETH, []row{send[4], send[5]})
	opTable[bth.CNP] = OpInfo{Opcode: bth.CNP, Ext: ExtCNP, Position: Only}
	for i := range opTable {
		info := &opTable[i]
		if info.Position == 0 {
			continue
		}
		info.HdrLen = bth.Len
		for _, e := range extLen {
			if info.Ext&e.ext != 0 {
				info.HdrLen += e.len
			}
		}
	}
}

// Lookup returns what packets of opcode op carry, and false for an opcode
// gorxe does not parse.
func Lookup(op bth.Opcode) (*OpInfo, bool) {
	info := &opTable[op]
	return info, info.HdrLen != 0
}

package rnic

import (
	"encoding/binary"
	"net/netip"
	"sync"

	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire"
)

// Packet buffers are fixed-size arrays from one pool, shared by the
// receive loop (which fills them) and the QPs (which fill and free them).
var bufferPool = sync.Pool{New: func() any { return new([link.BufferSize]byte) }}

func getBuffer() []byte { return bufferPool.Get().(*[link.BufferSize]byte)[:] }

func putBuffer(b []byte) { bufferPool.Put((*[link.BufferSize]byte)(b[:link.BufferSize])) }

// txOffset is where a QP writes the transport headers in a buffer: after
// the link headroom and room for an IPv6 and a UDP header.
const txOffset = link.Headroom + wire.IPv6Len + wire.UDPLen

// buffers is the qp.Buffers of every QP: the shared pool.
type buffers struct{}

func (buffers) NewBuffer() []byte     { return getBuffer() }
func (buffers) FreeBuffer(buf []byte) { putBuffer(buf) }
func (buffers) TxOffset() int         { return txOffset }

// transmitter is the device's qp.Transmitter: it finishes packets for the
// wire (IP and UDP headers, ICRC) and hands them to the link.
type transmitter struct {
	link    link.Link
	gids    []netip.Addr
	dport   uint16 // the RoCE v2 UDP port
	srcPort uint16 // the link's fixed UDP source port, or 0: each packet's own
	trace   func(dir Direction, pkt []byte)
	noRoute func() // counts a packet no source GID can carry
}

// Finish puts the IP and UDP headers in front of a transport packet and
// the ICRC after it, for the destination tx names, and returns the packet
// with the link's headroom in front. It runs inside a QP method, on
// whichever goroutine holds the QP.
func (t *transmitter) Finish(tx *qp.TxDesc, buf []byte, n int) []byte {
	var src netip.Addr
	if int(tx.SGIDIndex) < len(t.gids) {
		src = t.gids[tx.SGIDIndex]
	}
	srcA, dstA := src.Unmap(), tx.DGID.Unmap()
	if !srcA.IsValid() || srcA.Is4() != dstA.Is4() {
		t.noRoute()
		return nil // no usable source address: the packet cannot go out
	}
	hop := tx.HopLimit
	if hop == 0 {
		hop = 64
	}
	udpLen := wire.UDPLen + n + wire.ICRCLen
	udp := buf[txOffset-wire.UDPLen : txOffset]
	sport := t.srcPort
	if sport == 0 {
		sport = tx.SrcPort
	}
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], t.dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	// The ICRC is taken over the packet where it lies, with ones in the
	// fields it does not cover (wire.MaskedICRC); the real values are
	// written after.
	binary.BigEndian.PutUint16(udp[6:], 0xffff)
	end := txOffset + n
	bth4 := buf[txOffset+4] // FECN, BECN, Resv6
	buf[txOffset+4] = 0xff
	var ipStart int
	if srcA.Is4() {
		ipStart = txOffset - wire.UDPLen - wire.IPv4Len
		ip := buf[ipStart : ipStart+wire.IPv4Len]
		ip[0], ip[1] = 0x45, 0xff
		binary.BigEndian.PutUint16(ip[2:], uint16(wire.IPv4Len+udpLen))
		binary.BigEndian.PutUint32(ip[4:], 0x00004000) // ID 0, DF: what a kernel UDP socket sends
		ip[8], ip[9] = 0xff, 17
		ip[10], ip[11] = 0xff, 0xff
		s, d := srcA.As4(), dstA.As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		binary.LittleEndian.PutUint32(buf[end:], wire.MaskedICRC(buf[ipStart:end]))
		ip[1], ip[8] = tx.TrafficClass, hop
		ip[10], ip[11] = 0, 0
		binary.BigEndian.PutUint16(ip[10:], wire.IPv4Checksum(ip))
	} else {
		ipStart = txOffset - wire.UDPLen - wire.IPv6Len
		ip := buf[ipStart : ipStart+wire.IPv6Len]
		binary.BigEndian.PutUint32(ip[0:], 0x6fffffff)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6], ip[7] = 17, 0xff
		s, d := srcA.As16(), dstA.As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], d[:])
		binary.LittleEndian.PutUint32(buf[end:], wire.MaskedICRC(buf[ipStart:end]))
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(tx.TrafficClass)<<20|tx.FlowLabel&0xfffff)
		ip[7] = hop
	}
	binary.BigEndian.PutUint16(udp[6:], 0)
	buf[txOffset+4] = bth4
	end += wire.ICRCLen
	if t.trace != nil {
		t.trace(Sent, buf[ipStart:end])
	}
	return buf[ipStart-link.Headroom : end]
}

// Send hands packets to the link. A link that cannot send loses them, as
// a wire would; the transport recovers.
func (t *transmitter) Send(pkts [][]byte) { _ = t.link.Send(pkts) }

// port is the qp.Port of a QP: the device's memory regions, buffers,
// transmitter and clock, and the worker that schedules the QP.
type port struct {
	buffers
	*transmitter
	*worker
	mrs   *mr.Table
	clock *monotime.Clock
}

func (p *port) MRs() *mr.Table     { return p.mrs }
func (p *port) Now() monotime.Time { return p.clock.Now() }

package cm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// PortSpace is an rdma_cm port space (enum rdma_ucm_port_space): which
// family of ports a service ID's port belongs to.
type PortSpace uint16

// Port spaces.
const (
	PortSpaceIPoIB PortSpace = 0x0002 // RDMA_PS_IPOIB
	PortSpaceTCP   PortSpace = 0x0106 // RDMA_PS_TCP: RC (and UC) connections, REQ/REP
	PortSpaceUDP   PortSpace = 0x0111 // RDMA_PS_UDP: UD QPs, SIDR_REQ/SIDR_REP
	PortSpaceIB    PortSpace = 0x013f // RDMA_PS_IB: any QP type
)

// ServiceID returns the CM service ID with which rdma_cm connects to port
// in port space ps (rdma_get_service_id): ps<<16 | port, so the TCP
// space's IDs are 0x000000000106PPPP. Port 18515 in the TCP space,
// perftest's default, is 0x0000000001064853.
func ServiceID(ps PortSpace, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// rdma_cm's service IDs have these top 40 bits (IB_CMA_SERVICE_ID and
// IB_CMA_SERVICE_ID_MASK in Linux's ib_cm.h).
const (
	cmaServiceID     = 0x0000_0000_0100_0000
	cmaServiceIDMask = 0xffff_ffff_ff00_0000
)

// SplitServiceID returns the port space and port of an rdma_cm service
// ID, and whether id is one: its top 40 bits are 0x0000000001, as for the
// TCP, UDP and IB port spaces (the kernel's listeners match that range).
func SplitServiceID(id uint64) (PortSpace, uint16, bool) {
	if id&cmaServiceIDMask != cmaServiceID {
		return 0, 0, false
	}
	return PortSpace(id >> 16), uint16(id), true
}

// CMAHeaderLen is the length of rdma_cm's header in a REQ's or SIDR_REQ's
// private data; the application's private data follows it, so it has
// REQPrivateDataLen-CMAHeaderLen = 56 bytes in a REQ.
const CMAHeaderLen = 36

// CMAVersion is the only version of the cma_hdr.
const CMAVersion = 0

// CMAHeader is the header rdma_cm puts at the front of the private data
// of a REQ or SIDR_REQ for an IP-addressed connection (struct cma_hdr in
// Linux's cma.c). The passive side matches Dst against the address it
// listens on and takes the peer's address and port from Src and SrcPort;
// the port it listens on is in the service ID.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  CMA Version  |  IPV  |  Rsvd |          Source Port          |   0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Source Address (16 bytes; IPv4 in the last 4)         |   4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Destination Address (16 bytes)                |  20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// IPV is 4 or 6. An IPv4 address sits in the last 4 bytes of its field;
// the kernel writes the first 12 as zero and never reads them.
type CMAHeader struct {
	SrcPort uint16
	// Src and Dst are the active side's and passive side's IP addresses,
	// both IPv4 or both IPv6.
	Src netip.Addr
	Dst netip.Addr
}

// Errors from ParseCMAHeader and CMAHeader.Encode.
var (
	ErrCMAShort     = errors.New("cm: private data shorter than a cma_hdr")
	ErrCMAVersion   = errors.New("cm: unknown cma_hdr version")
	ErrCMAIPVersion = errors.New("cm: cma_hdr IP version is neither 4 nor 6")
	ErrCMAFamily    = errors.New("cm: cma_hdr addresses must both be IPv4 or both IPv6")
)

// ParseCMAHeader reads the cma_hdr at the front of b, as the kernel's
// passive side does: it checks the version and IP version (the high
// nibble; the low one is ignored) and reads an IPv4 address from the last
// 4 bytes of its field, ignoring the first 12. IPv4 addresses come back
// as 4-byte addresses, IPv6 ones as 16-byte addresses even when
// IPv4-mapped.
func ParseCMAHeader(b []byte) (CMAHeader, error) {
	if len(b) < CMAHeaderLen {
		return CMAHeader{}, fmt.Errorf("%w: %d bytes", ErrCMAShort, len(b))
	}
	if b[0] != CMAVersion {
		return CMAHeader{}, fmt.Errorf("%w %d", ErrCMAVersion, b[0])
	}
	h := CMAHeader{SrcPort: binary.BigEndian.Uint16(b[2:])}
	switch b[1] >> 4 {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(b[16:20]))
		h.Dst = netip.AddrFrom4([4]byte(b[32:36]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(b[4:20]))
		h.Dst = netip.AddrFrom16([16]byte(b[20:36]))
	default:
		return CMAHeader{}, fmt.Errorf("%w: %d", ErrCMAIPVersion, b[1]>>4)
	}
	return h, nil
}

// Encode writes h into the first CMAHeaderLen bytes of b, which must hold
// that many, as cma_format_hdr does. It fails, writing nothing, unless Src
// and Dst are both IPv4 or both IPv6; zones are dropped.
func (h *CMAHeader) Encode(b []byte) error {
	_ = b[CMAHeaderLen-1]
	var ipv byte
	switch {
	case h.Src.Is4() && h.Dst.Is4():
		ipv = 4
	case h.Src.Is6() && h.Dst.Is6():
		ipv = 6
	default:
		return fmt.Errorf("%w: %v, %v", ErrCMAFamily, h.Src, h.Dst)
	}
	clear(b[:CMAHeaderLen])
	b[0] = CMAVersion
	b[1] = ipv << 4
	binary.BigEndian.PutUint16(b[2:], h.SrcPort)
	if ipv == 4 {
		s, d := h.Src.As4(), h.Dst.As4()
		copy(b[16:20], s[:])
		copy(b[32:36], d[:])
	} else {
		s, d := h.Src.As16(), h.Dst.As16()
		copy(b[4:20], s[:])
		copy(b[20:36], d[:])
	}
	return nil
}

// String returns the header as "cma src=ADDR:PORT dst=ADDR".
func (h *CMAHeader) String() string {
	return fmt.Sprintf("cma src=%v dst=%v", netip.AddrPortFrom(h.Src, h.SrcPort), h.Dst)
}

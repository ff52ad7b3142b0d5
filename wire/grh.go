package wire

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// GRHLen is the length of the GRH area in front of every message a UD QP
// receives (rdma-core's struct ibv_grh): on RoCE v2 it holds the
// packet's IPv6 header, or 20 zero bytes and its IPv4 header.
const GRHLen = 40

// GRH is what a UD receive's GRH area tells: the message's addresses,
// traffic class and flow label.
type GRH struct {
	Src, Dst     netip.Addr // IPv4 or IPv6 (never IPv4-mapped)
	TrafficClass uint8
	FlowLabel    uint32
}

// ErrGRH is the error of a GRH area that holds neither header.
var ErrGRH = errors.New("wire: the GRH area holds neither an IPv4 nor an IPv6 header")

// ParseGRH reads a UD receive's GRH area, its first GRHLen bytes.
func ParseGRH(b []byte) (GRH, error) {
	if len(b) < GRHLen {
		return GRH{}, ErrGRH
	}
	switch {
	case b[0]>>4 == 6:
		w := binary.BigEndian.Uint32(b)
		return GRH{Src: netip.AddrFrom16([16]byte(b[8:24])).Unmap(), Dst: netip.AddrFrom16([16]byte(b[24:40])).Unmap(),
			TrafficClass: uint8(w >> 20), FlowLabel: w & 0xfffff}, nil
	case b[20]>>4 == 4:
		v4 := b[20:]
		return GRH{Src: netip.AddrFrom4([4]byte(v4[12:16])), Dst: netip.AddrFrom4([4]byte(v4[16:20])), TrafficClass: v4[1]}, nil
	}
	return GRH{}, ErrGRH
}

// PutGRH fills a UD receive's GRH area from a packet's IP header, as
// rdma-core delivers it: an IPv6 header as it is, an IPv4 header behind
// 20 zero bytes.
func PutGRH(b, ipHeader []byte) {
	if len(ipHeader) > 0 && ipHeader[0]>>4 == 4 {
		clear(b[:20])
		copy(b[20:GRHLen], ipHeader)
		return
	}
	copy(b[:GRHLen], ipHeader)
}

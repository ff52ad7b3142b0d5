package rnic

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/internal/rc"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
)

// CreateAH creates an address handle for UD sends, as ibv_create_ah: the
// destination GID must be an address of the family of the source GID
// the vector names in the device's table.
func (d *Device) CreateAH(pd *mr.PD, av qp.AddressVector) (*qp.AH, error) {
	if pd == nil {
		return nil, errors.New("rnic: create AH: no protection domain")
	}
	if int(av.SGIDIndex) >= len(d.gids) {
		return nil, fmt.Errorf("rnic: create AH: source GID index %d: the device has %d GIDs", av.SGIDIndex, len(d.gids))
	}
	if !av.DGID.IsValid() {
		return nil, errors.New("rnic: create AH: no destination GID")
	}
	if src, dst := d.gids[av.SGIDIndex].Unmap(), av.DGID.Unmap(); src.Is4() != dst.Is4() {
		return nil, fmt.Errorf("rnic: create AH: destination %v and source GID %d (%v) are of different IP versions", dst, av.SGIDIndex, src)
	}
	return qp.NewAH(pd, av), nil
}

// CreateAHFromWC creates the address handle that answers a UD message, as
// ibv_create_ah_from_wc: its destination is the sender's address from
// the GRH the message was received behind (grh, its first 40 bytes), its
// source GID the device's address it was sent to, its traffic class and
// flow label the message's.
func (d *Device) CreateAHFromWC(pd *mr.PD, wc *cq.WC, grh []byte) (*qp.AH, error) {
	if wc.Flags&cq.FlagGRH == 0 {
		return nil, errors.New("rnic: create AH from WC: the completion has no GRH")
	}
	src, dst, tclass, flow, err := parseGRH(grh)
	if err != nil {
		return nil, fmt.Errorf("rnic: create AH from WC: %w", err)
	}
	i := d.GIDIndex(dst)
	if i < 0 {
		return nil, fmt.Errorf("rnic: create AH from WC: the message was sent to %v, not one of the device's GIDs", dst)
	}
	return d.CreateAH(pd, qp.AddressVector{DGID: src, SGIDIndex: uint8(i), TrafficClass: tclass, FlowLabel: flow, HopLimit: 64})
}

// parseGRH reads the addresses, traffic class and flow label from a UD
// receive's GRH area: an IPv6 header, or 20 bytes and an IPv4 header
// (rdma-core's struct ibv_grh, and how RoCE v2 fills it).
func parseGRH(grh []byte) (src, dst netip.Addr, tclass uint8, flow uint32, err error) {
	if len(grh) < rc.GRHLen {
		return src, dst, 0, 0, fmt.Errorf("a GRH is %d bytes, got %d", rc.GRHLen, len(grh))
	}
	switch {
	case grh[0]>>4 == 6:
		w := binary.BigEndian.Uint32(grh)
		return netip.AddrFrom16([16]byte(grh[8:24])).Unmap(), netip.AddrFrom16([16]byte(grh[24:40])).Unmap(),
			uint8(w >> 20), w & 0xfffff, nil
	case grh[20]>>4 == 4:
		v4 := grh[20:]
		return netip.AddrFrom4([4]byte(v4[12:16])), netip.AddrFrom4([4]byte(v4[16:20])), v4[1], 0, nil
	}
	return src, dst, 0, 0, errors.New("the GRH holds neither an IPv4 nor an IPv6 header")
}

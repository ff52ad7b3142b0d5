package rnic

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire"
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
	d.resolve(av.DGID)
	return qp.NewAH(pd, av), nil
}

// resolve has the link find dst's link-layer address now, if it resolves
// addresses itself (link.Resolver), as the kernel does for RoCE when a QP
// moves to RTR or an address handle is made: the first packets sent there
// then find it known.
func (d *Device) resolve(dst netip.Addr) {
	if r, ok := d.link.(link.Resolver); ok && dst.IsValid() {
		r.Resolve(dst)
	}
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
	g, err := wire.ParseGRH(grh)
	if err != nil {
		return nil, fmt.Errorf("rnic: create AH from WC: %w", err)
	}
	i := d.GIDIndex(g.Dst)
	if i < 0 {
		return nil, fmt.Errorf("rnic: create AH from WC: the message was sent to %v, not one of the device's GIDs", g.Dst)
	}
	return d.CreateAH(pd, qp.AddressVector{DGID: g.Src, SGIDIndex: uint8(i), TrafficClass: g.TrafficClass, FlowLabel: g.FlowLabel, HopLimit: 64})
}

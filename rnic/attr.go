package rnic

import (
	"encoding/binary"
	"hash/fnv"
	"net"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/qp"
)

// DeviceAttr is what ibv_query_device reports of a device (struct
// ibv_device_attr). Where gorxe has a limit of its own the field holds
// it (work requests, SGEs, inline data, outstanding READs, CQ depth,
// multicast); where it has none but memory (QPs, CQs, MRs, PDs, AHs,
// SRQs) the field holds rxe's, so that a program that sizes itself from
// them does as on rxe.
type DeviceAttr struct {
	NodeGUID              uint64 // see Device.NodeGUID
	SysImageGUID          uint64 // the node GUID, as rxe's
	VendorID              uint32 // rxe's 0xFFFFFF: no vendor
	VendorPartID          uint32
	HWVer                 uint32
	PhysPortCnt           int
	MaxMRSize             uint64
	PageSizeCap           uint64
	MaxQP                 int
	MaxQPWR               int
	DeviceCapFlags        DeviceCap
	MaxSGE                int
	MaxSGERd              int
	MaxCQ                 int
	MaxCQE                int
	MaxMR                 int
	MaxPD                 int
	MaxQPRdAtom           int // READs and atomics a QP answers at once
	MaxResRdAtom          int
	MaxQPInitRdAtom       int // READs and atomics a QP keeps outstanding
	AtomicCap             AtomicCap
	MaxMcastGrp           int
	MaxMcastQPAttach      int
	MaxTotalMcastQPAttach int
	MaxAH                 int
	MaxSRQ                int
	MaxSRQWR              int
	MaxSRQSGE             int
	MaxPKeys              int
	LocalCAAckDelay       int // rxe's 15: 4.096 µs × 2^15, 134 ms
	MaxInlineData         int // not in ibv_device_attr: what a QP's cap takes
}

// DeviceCap is ibv_device_attr's device_cap_flags, rdma-core's enum
// ibv_device_cap_flags.
type DeviceCap uint32

// The capabilities gorxe reports.
const (
	DeviceBadPKeyCntr      DeviceCap = 1 << 1  // IBV_DEVICE_BAD_PKEY_CNTR: bad P_Keys are counted
	DeviceBadQKeyCntr      DeviceCap = 1 << 2  // IBV_DEVICE_BAD_QKEY_CNTR: bad Q_Keys are counted
	DeviceSysImageGUID     DeviceCap = 1 << 11 // IBV_DEVICE_SYS_IMAGE_GUID
	DeviceRCRNRNAKGen      DeviceCap = 1 << 12 // IBV_DEVICE_RC_RNR_NAK_GEN: RNR NAKs are sent
	DeviceMemMgtExtensions DeviceCap = 1 << 21 // IBV_DEVICE_MEM_MGT_EXTENSIONS
)

// AtomicCap is ibv_device_attr's atomic_cap.
type AtomicCap int

// Atomic capabilities, numbered as enum ibv_atomic_cap.
const (
	AtomicNone AtomicCap = iota // IBV_ATOMIC_NONE
	AtomicHCA                   // IBV_ATOMIC_HCA: atomic among the device's QPs
	AtomicGlob                  // IBV_ATOMIC_GLOB: atomic with the CPU's too
)

// PortAttr is what ibv_query_port reports of the device's one port
// (struct ibv_port_attr), on Ethernet.
type PortAttr struct {
	State        PortState
	MaxMTU       qp.MTU
	ActiveMTU    qp.MTU
	MaxMsgSz     uint32
	PortCapFlags uint32 // IB_PORT_CM_SUP, as rxe's
	GIDTblLen    int
	PKeyTblLen   int
	ActiveWidth  uint8 // 1: 1X, as rxe
	ActiveSpeed  uint8 // 1: 2.5 Gb/s (SDR), as rxe
}

// PortState is ibv_port_attr's state.
type PortState int

// PortActive is IBV_PORT_ACTIVE: a gorxe device's port is active while
// the device is open.
const PortActive PortState = 4

// Query returns the device's attributes, as ibv_query_device.
func (d *Device) Query() DeviceAttr {
	guid := d.NodeGUID()
	return DeviceAttr{
		NodeGUID: guid, SysImageGUID: guid, VendorID: 0xFFFFFF, PhysPortCnt: 1,
		MaxMRSize: ^uint64(0), PageSizeCap: 0xFFFFF000,
		MaxQP: 0x10000, MaxQPWR: qp.MaxWR,
		DeviceCapFlags: DeviceBadPKeyCntr | DeviceBadQKeyCntr | DeviceSysImageGUID | DeviceRCRNRNAKGen | DeviceMemMgtExtensions,
		MaxSGE:         qp.MaxSGE, MaxSGERd: qp.MaxSGE,
		MaxCQ: 0x4000, MaxCQE: cq.MaxDepth, MaxMR: 0x40000, MaxPD: 0x7FFC,
		MaxQPRdAtom: qp.MaxRdAtomic, MaxResRdAtom: 0x3F000, MaxQPInitRdAtom: qp.MaxRdAtomic,
		AtomicCap:   AtomicHCA,
		MaxMcastGrp: MaxMcastGroups, MaxMcastQPAttach: MaxMcastAttach, MaxTotalMcastQPAttach: MaxMcastGroups * MaxMcastAttach,
		MaxAH: 0x7FFF, MaxSRQ: 0x3FFF, MaxSRQWR: qp.MaxWR, MaxSRQSGE: qp.MaxSGE,
		MaxPKeys: 1, LocalCAAckDelay: 15, MaxInlineData: qp.MaxInlineData,
	}
}

// QueryPort returns the attributes of the device's port, as
// ibv_query_port of port 1: its MTUs are the link's, its GID table the
// device's, its one P_Key the default.
func (d *Device) QueryPort() PortAttr {
	return PortAttr{
		State: PortActive, MaxMTU: qp.MTU4096, ActiveMTU: d.MTU(), MaxMsgSz: qp.MaxMsgSize,
		PortCapFlags: 0x00010000, GIDTblLen: len(d.gids), PKeyTblLen: 1, ActiveWidth: 1, ActiveSpeed: 1,
	}
}

// NodeGUID returns the device's node GUID. On a link with an Ethernet
// address of its own (tap, xdp) it is that address's EUI-64, as rxe makes
// its GUID from its netdev's; on another (udp, where several devices may
// share an interface, and mem) it comes from the device's first GID,
// locally administered.
//
// gorxe's connection manager sends a CA GUID of its own, random for each
// manager, not this one: a device numbers its QPs from 0x11 in every
// process, and a peer that still holds a connection of an earlier
// process that ended without a DREQ would take the new one's REQ, same
// GUID and QP number, for that stale connection and refuse it (the
// kernel's cm_find_remote_qpn).
func (d *Device) NodeGUID() uint64 {
	if m, ok := d.link.(interface{ MAC() net.HardwareAddr }); ok {
		if mac := m.MAC(); len(mac) == 6 && [6]byte(mac) != [6]byte{} {
			return eui64(mac)
		}
	}
	h := fnv.New64a()
	g := d.gids[0].As16()
	h.Write(g[:])
	return h.Sum64()&^(1<<56) | 1<<57 // unicast, locally administered
}

// eui64 is a MAC address's modified EUI-64 (RFC 4291 appendix A): ff:fe
// in its middle, the universal/local bit inverted.
func eui64(mac net.HardwareAddr) uint64 {
	b := [8]byte{mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
	return binary.BigEndian.Uint64(b[:])
}

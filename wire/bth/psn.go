package bth

// PSN is a 24-bit packet sequence number (IBTA Vol 1 §9.7.1).
//
// PSNs wrap from 0xFFFFFF to 0. Two PSNs are compared with serial-number
// arithmetic: a is after b when (a-b) mod 2^24 lies in (0, 2^23). Every PSN
// comparison in gorxe goes through the methods here.
type PSN uint32

// PSNMask keeps the low 24 bits that a PSN occupies on the wire.
const PSNMask = 0x00ffffff

// Add returns p advanced by n, wrapping at 2^24.
func (p PSN) Add(n uint32) PSN { return PSN((uint32(p) + n) & PSNMask) }

// Diff returns the signed distance p - q in serial arithmetic: positive when p
// is after q, negative when it is before, within ±2^23.
func (p PSN) Diff(q PSN) int32 {
	// Shift the 24-bit difference into the top of a 32-bit word so the sign
	// bit is bit 23 of the difference, then shift back arithmetically.
	return int32((uint32(p)-uint32(q))<<8) >> 8
}

// Before reports whether p comes strictly before q.
func (p PSN) Before(q PSN) bool { return p.Diff(q) < 0 }

// After reports whether p comes strictly after q.
func (p PSN) After(q PSN) bool { return p.Diff(q) > 0 }

// InRange reports whether p lies in the closed range [first, last], which
// may wrap past 0xFFFFFF.
func (p PSN) InRange(first, last PSN) bool {
	return !p.Before(first) && !p.After(last)
}

// QPN is a 24-bit queue pair number. QPN 0 is the SMI QP and 1 the GSI QP.
type QPN uint32

// QPNMask keeps the low 24 bits that a QPN occupies on the wire.
const QPNMask = 0x00ffffff

// MulticastQPN is the destination QP of a UD packet sent to a multicast
// group (IBTA Vol 1 §10.5.2.5): every QP attached to the group that the
// packet's destination GID names receives it. No QP has this number.
const MulticastQPN QPN = 0xffffff

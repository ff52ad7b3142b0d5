package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// The Invariant CRC (IBTA Vol 1 §7.8.1; Annex A17.3.3 for RoCE v2) is the
// IEEE 802.3 CRC-32 over the packet from the IP header through the pad,
// preceded by 8 bytes of 0xFF that stand for the InfiniBand LRH, with every
// field that routers may change replaced by ones:
//
//	IPv4  TOS (DSCP and ECN), TTL, header checksum
//	IPv6  traffic class, flow label, hop limit
//	UDP   checksum
//	BTH   byte 4: FECN, BECN and Resv6
//
// The IPv4 Identification, flags, lengths, addresses and ports are covered.
// The CRC is sent least significant byte first, as the Ethernet FCS is
// (Linux drivers/infiniband/sw/rxe/rxe_icrc.c).

// icrcSeed is the CRC-32 of the 8 bytes of 0xFF that stand in for the LRH,
// in hash/crc32's convention (so 0xDEBB20E3 in rxe's inverted one).
const icrcSeed = 0x2144df1c

// ComputeICRC returns the ICRC of a packet given as its IPv4 or IPv6 header,
// its UDP header, and transport, the bytes from the BTH through the pad.
// The three need not be contiguous, so a sender that lets the kernel write
// the IP header can compute the ICRC with the header the kernel will write.
// Shorter ip, udp or transport slices than a RoCE v2 packet has give a
// meaningless result, never a panic.
func ComputeICRC(ip, udp, transport []byte) uint32 {
	// The masked headers are copied to the stack and hashed eight bytes at a time;
	// the rest, where the bytes are, by hash/crc32's fast path. Handing the
	// stack copy to crc32.Update would make it escape to the heap.
	var hdr [IPv6Len + UDPLen + 12]byte
	n := copy(hdr[:IPv6Len], ip)
	if n >= 1 {
		switch hdr[0] >> 4 {
		case 4:
			if n >= IPv4Len {
				n = IPv4Len
				hdr[1] = 0xff  // TOS
				hdr[8] = 0xff  // TTL
				hdr[10] = 0xff // header checksum
				hdr[11] = 0xff
			}
		case 6:
			if n >= IPv6Len {
				hdr[0] |= 0x0f // traffic class and flow label
				hdr[1] = 0xff
				hdr[2] = 0xff
				hdr[3] = 0xff
				hdr[7] = 0xff // hop limit
			}
		}
	}
	u := copy(hdr[n:n+UDPLen], udp)
	if u == UDPLen {
		hdr[n+6] = 0xff // UDP checksum
		hdr[n+7] = 0xff
	}
	n += u
	t := copy(hdr[n:], transport)
	if t > 4 {
		hdr[n+4] = 0xff // FECN, BECN, Resv6
	}
	n += t
	return crc32.Update(^slicing8(^uint32(icrcSeed), hdr[:n]), crc32.IEEETable, transport[t:])
}

// slicing8Table holds the tables of the slicing-by-8 CRC-32 (Intel's
// "Slicing-by-8" algorithm): row 0 is the bytewise IEEE table, row k the
// CRC of a byte followed by k zero bytes.
var slicing8Table = func() *[8][256]uint32 {
	t := new([8][256]uint32)
	t[0] = *crc32.IEEETable
	for i := range 256 {
		c := t[0][i]
		for k := 1; k < 8; k++ {
			c = t[0][byte(c)] ^ c>>8
			t[k][i] = c
		}
	}
	return t
}()

// slicing8 advances an uninverted reflected CRC-32 state over b, eight
// bytes per step.
func slicing8(crc uint32, b []byte) uint32 {
	t := slicing8Table
	for len(b) >= 8 {
		crc ^= binary.LittleEndian.Uint32(b)
		crc = t[0][b[7]] ^ t[1][b[6]] ^ t[2][b[5]] ^ t[3][b[4]] ^
			t[4][crc>>24] ^ t[5][crc>>16&0xff] ^ t[6][crc>>8&0xff] ^ t[7][crc&0xff]
		b = b[8:]
	}
	for _, v := range b {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return crc
}

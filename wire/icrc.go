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

// MaskedICRC returns the ICRC of pkt, a RoCE v2 packet from its IP header
// through the pad whose variant fields (see ComputeICRC) already hold ones.
// A sender that builds the packet itself can write ones there, take the
// ICRC, and then write the real values: the CRC then runs over the packet
// where it lies, at hash/crc32's speed, with no copy of its headers.
func MaskedICRC(pkt []byte) uint32 {
	return crc32.Update(icrcSeed, crc32.IEEETable, pkt)
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

// ICRCWithIPv4ID returns the ICRC of an IPv4 RoCE packet whose ICRC is
// icrc, after its IP Identification changes from oldID to newID;
// transportLen is the length of its transport, the BTH through the pad. A
// sender that lets the kernel split one large UDP datagram into packets
// (UDP GSO) needs it: the kernel numbers the packets' IDs in turn, and the
// ICRC covers the ID. It is IPv4IDShift(transportLen).ICRC(icrc, oldID,
// newID); a sender changing the IDs of many packets of one length keeps
// the IDShift.
func ICRCWithIPv4ID(icrc uint32, oldID, newID uint16, transportLen int) uint32 {
	return IPv4IDShift(transportLen).ICRC(icrc, oldID, newID)
}

// An IDShift carries a change of IPv4 ID through the rest of the ICRC's
// input, for packets of one length.
//
// The CRC is linear: the ICRCs of two equally long packets differ by the
// CRC, from a zero state and with no final inversion, of their difference.
// Here that is the two ID bytes, 12 bytes into the CRC's input (the 8
// bytes that stand for the LRH, then the IP header's first 4), followed by
// as many zero bytes as the rest of the input has. Running a CRC over n
// zero bytes multiplies its state by x^(8n) modulo the polynomial: the
// IDShift is that factor. Finding it takes a dozen multiplications, about
// as long as the ICRC of a 4 KiB packet; applying it takes one.
type IDShift uint32

// IPv4IDShift returns the IDShift of IPv4 RoCE packets whose transport,
// the BTH through the pad, is transportLen bytes.
func IPv4IDShift(transportLen int) IDShift {
	return IDShift(xPow8n(8 + IPv4Len + UDPLen + transportLen - 14))
}

// ICRC returns the ICRC of a packet whose ICRC is icrc, after its IP
// Identification changes from oldID to newID.
func (s IDShift) ICRC(icrc uint32, oldID, newID uint16) uint32 {
	d := oldID ^ newID
	if d == 0 {
		return icrc
	}
	var state uint32 // the CRC of the two bytes, from a zero state
	for _, v := range [2]byte{byte(d >> 8), byte(d)} {
		state = crc32.IEEETable[byte(state)^v] ^ state>>8
	}
	return icrc ^ gfMul(uint32(s), state)
}

// The arithmetic of CRC-32 states as polynomials over GF(2) modulo the
// IEEE polynomial, in hash/crc32's reflected form: bit 31 is x^0.
const (
	crcPoly = 0xedb88320
	crcOne  = 1 << 31 // x^0
)

// gfMul returns a*b modulo the polynomial.
func gfMul(a, b uint32) uint32 {
	var p uint32
	for m := uint32(crcOne); m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// xPow2k holds x^(2^k) modulo the polynomial, for k from 0.
var xPow2k = func() (t [64]uint32) {
	p := uint32(crcOne >> 1) // x^1
	for k := range t {
		t[k] = p
		p = gfMul(p, p)
	}
	return t
}()

// xPow8n returns x^(8n) modulo the polynomial: what n zero bytes multiply
// a CRC state by.
func xPow8n(n int) uint32 {
	p := uint32(crcOne)
	for k := 3; n > 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = gfMul(xPow2k[k], p)
		}
	}
	return p
}

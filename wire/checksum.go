package wire

// Checksum returns the 16-bit ones' complement sum (RFC 1071) of b, read
// as big-endian words with an odd last byte padded by a zero, added to
// initial. The Internet checksum of IPv4, UDP and ICMP is the complement
// of this sum over what it covers, with the checksum field zero; over data
// that includes a right checksum the sum is 0xFFFF.
func Checksum(b []byte, initial uint16) uint16 {
	s := uint64(initial)
	for len(b) >= 8 {
		s += uint64(b[0])<<8 | uint64(b[1])
		s += uint64(b[2])<<8 | uint64(b[3])
		s += uint64(b[4])<<8 | uint64(b[5])
		s += uint64(b[6])<<8 | uint64(b[7])
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint64(b[0])<<8 | uint64(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// PseudoHeaderChecksum returns the ones' complement sum of the
// pseudo-header that the UDP, TCP and ICMPv6 checksums cover: the source
// and destination addresses as the IP header carries them (4 bytes each
// over IPv4, RFC 768; 16 over IPv6, RFC 8200 §8.1), the upper-layer
// protocol and the upper-layer length.
func PseudoHeaderChecksum(protocol uint8, src, dst []byte, length uint16) uint16 {
	return Checksum(dst, Checksum(src, Checksum([]byte{0, protocol, byte(length >> 8), byte(length)}, 0)))
}

// IPv4Checksum returns the header checksum (RFC 791, RFC 1071) of the
// IPv4 header h, whose checksum field is zero.
func IPv4Checksum(h []byte) uint16 { return ^Checksum(h, 0) }

package wire

import "encoding/binary"

// minPacket is the shortest RoCE v2 packet: a BTH and the ICRC.
const minPacket = 12 + ICRCLen

// maxSegment bounds the packets SplitGSO looks for: a BTH, the largest
// extended headers, a 4096-byte payload, pad and ICRC fit in it.
const maxSegment = 4096 + 128

// SplitGSO recognises an uncut UDP GSO datagram of RoCE v2 packets, given
// from its IP header on, and returns the packets the kernel cuts it into,
// each from its IP header on, in new buffers. A capture on the host that
// sends such a datagram (gorxe's udp link does, for runs of equally long
// packets) shows it uncut, as it shows TCP before segmentation offload.
//
// There is no segment size on the wire, so SplitGSO tries each: the one
// at which the first segment's ICRC verifies, and then every other
// segment's, is the one. Over IPv4 segment k carries the datagram's IP ID
// plus k, as the kernel numbers them, and its ICRC covers that ID. It
// returns ok false for anything else: a single packet, a datagram whose
// segments do not all verify, a malformed header.
func SplitGSO(ip []byte) (pkts [][]byte, ok bool) {
	if len(ip) < 1 {
		return nil, false
	}
	var hl, total int
	var proto byte
	switch ip[0] >> 4 {
	case 4:
		h := IPv4(ip)
		hl = h.HeaderLen()
		if hl < IPv4Len || len(ip) < hl+UDPLen {
			return nil, false
		}
		total, proto = int(h.TotalLen()), h.Protocol()
	case 6:
		h := IPv6(ip)
		hl = IPv6Len
		if len(ip) < hl+UDPLen {
			return nil, false
		}
		total, proto = hl+int(h.PayloadLen()), h.NextHeader()
	default:
		return nil, false
	}
	if proto != ProtocolUDP || total > len(ip) || total < hl+UDPLen {
		return nil, false
	}
	ipHdr, udp, payload := ip[:hl], ip[hl:hl+UDPLen], ip[hl+UDPLen:total]
	for seg := minPacket; seg < len(payload) && seg <= maxSegment; seg++ {
		n := (len(payload) + seg - 1) / seg
		k := 0
		for k < n && segmentOK(ipHdr, udp, cut(payload, seg, k), k) {
			k++
		}
		if k < n {
			continue
		}
		for k := range n {
			pkts = append(pkts, segment(ipHdr, udp, cut(payload, seg, k), k))
		}
		return pkts, true
	}
	return nil, false
}

// cut returns segment k of payload cut every seg bytes.
func cut(payload []byte, seg, k int) []byte {
	return payload[k*seg : min((k+1)*seg, len(payload))]
}

// segmentOK reports whether chunk, segment k of a datagram with headers
// ip and udp, is a packet whose ICRC verifies under the headers the kernel
// gives it.
func segmentOK(ip, udp, chunk []byte, k int) bool {
	if len(chunk) < minPacket {
		return false
	}
	var h [IPv6Len + UDPLen]byte
	hdr := cutHeaders(h[:0], ip, udp, len(chunk), k)
	body := chunk[:len(chunk)-ICRCLen]
	return ComputeICRC(hdr[:len(ip)], hdr[len(ip):], body) == binary.LittleEndian.Uint32(chunk[len(body):])
}

// segment returns chunk, segment k of a datagram with headers ip and udp,
// as a packet of its own.
func segment(ip, udp, chunk []byte, k int) []byte {
	b := cutHeaders(make([]byte, 0, len(ip)+UDPLen+len(chunk)), ip, udp, len(chunk), k)
	if b[0]>>4 == 4 {
		IPv4(b).UpdateChecksum()
	}
	return append(b, chunk...)
}

// cutHeaders appends to b the IP and UDP headers of segment k, n bytes of
// UDP payload: the datagram's, with the lengths of the segment and, over
// IPv4, the ID plus k. The UDP checksum is left as it was: the ICRC does
// not cover it, and the kernel computes it anew.
func cutHeaders(b, ip, udp []byte, n, k int) []byte {
	b = append(append(b, ip...), udp...)
	SetSegment(b[len(b)-len(ip)-UDPLen:], len(ip), n, k)
	return b
}

// SetSegment makes h, an IP header ipLen bytes long and the UDP header
// after it, the headers of segment k of a UDP GSO datagram that had them,
// with n bytes of UDP payload: the segment's lengths and, over IPv4, the
// datagram's IP ID plus k, as the kernel numbers the segments it cuts
// (k 0 gives the headers of a whole of n bytes). The IPv4 header checksum
// and the UDP checksum are left as they were.
func SetSegment(h []byte, ipLen, n, k int) {
	if h[0]>>4 == 4 {
		v4 := IPv4(h)
		v4.SetTotalLen(uint16(ipLen + UDPLen + n))
		v4.SetID(v4.ID() + uint16(k))
	} else {
		IPv6(h).SetPayloadLen(uint16(UDPLen + n))
	}
	UDP(h[ipLen:]).SetLength(uint16(UDPLen + n))
}

//go:build linux

package tap

import (
	"bytes"
	"encoding/binary"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/link/internal/ether"
	"github.com/gorxe/gorxe/link/internal/pollfd"
	"github.com/gorxe/gorxe/wire"
)

// Frames carry a virtio-net header (IFF_VNET_HDR), and runs of packets
// go out as one frame that the kernel cuts (UDP GSO).
//
// A TAP moves one frame per read or write, and a write costs the kernel
// far more than the bytes it copies: the frame is taken in, bridged and
// queued on its way out. A QP sends a message as a run of equally long
// packets to one peer, so Send hands the kernel each such run as one
// frame: the run's Ethernet, IP and UDP headers with the lengths of the
// whole, the packets' UDP payloads one after the other, and in front a
// virtio-net header asking for UDP segmentation (VIRTIO_NET_HDR_GSO_UDP_L4)
// at the run's packet length and for the UDP checksum (NEEDS_CSUM, with
// the pseudo-header's sum in the checksum field). The kernel cuts it back
// into the same packets where it must, at the latest where it hands them
// to a device that cannot take the whole (a NIC without UDP segmentation,
// a TAP without the offload), as the udp link's UDP_SEGMENT datagrams are
// cut; a peer's TAP that takes it whole hands it up so (below).
//
// Over IPv4 the ICRC covers the IP Identification, and the kernel numbers
// the segments' IDs on from the run's: segment k leaves with the first
// packet's ID plus k. Its ICRC therefore goes in an iovec of its own,
// recomputed for that ID (wire.IDShift), and the device's buffer is left as
// it was.
//
// A run ends at a packet to another destination or with other headers,
// after a shorter packet (only the last segment may be short), at
// gsoMaxSegments packets or 64 KiB. Send's runs are of packets of at
// least gsoMinSegment bytes, as the udp link's, and SendJoined's of any
// length, for a device whose program sleeps (link.Joiner; the udp link
// says why). A kernel that refuses the
// header (before Linux 6.2, which added UDP segmentation to TAP writes)
// answers EINVAL: the link then sends every packet alone from there on.
const (
	vnetHdrLen     = 10 // struct virtio_net_hdr
	vnetNeedsCsum  = 1  // VIRTIO_NET_HDR_F_NEEDS_CSUM
	vnetGSOUDPL4   = 5  // VIRTIO_NET_HDR_GSO_UDP_L4
	gsoMaxSegments = 64 // UDP_MAX_SEGMENTS before Linux 6.10
	gsoMinSegment  = 512
	udpCsumOffset  = 6
)

// noOffload is the virtio-net header of a frame that asks for nothing.
var noOffload [vnetHdrLen]byte

// gsoRun is a run of frames being gathered by Send, and the scratch its
// write takes. Send takes one from the link's pool.
type gsoRun struct {
	frames [][]byte // each from the room for its virtio-net header, the Ethernet frame after it
	seg    int      // the first packet's UDP payload length
	bytes  int      // the run's UDP payload bytes
	short  bool     // a packet shorter than seg ended the run
	minRun int      // the shortest packet that starts a run

	hdr   [vnetHdrLen + ether.HeaderLen + wire.IPv6Len + wire.UDPLen]byte
	icrcs [gsoMaxSegments][wire.ICRCLen]byte
	iov   [1 + 2*gsoMaxSegments]unix.Iovec
}

var runPool = sync.Pool{New: func() any { return &gsoRun{frames: make([][]byte, 0, gsoMaxSegments)} }}

// udpPayload returns the UDP payload of an Ethernet frame carrying a UDP
// packet with no IPv4 options or IPv6 extension headers, and where its
// UDP header starts; ok false for any other frame.
func udpPayload(f []byte) (payload []byte, udpAt int, ok bool) {
	if len(f) < ether.HeaderLen+1 {
		return nil, 0, false
	}
	ip := f[ether.HeaderLen:]
	switch {
	case ip[0] == 0x45 && len(ip) >= wire.IPv4Len+wire.UDPLen && ip[9] == protoUDP:
		total := int(binary.BigEndian.Uint16(ip[2:4]))
		if total != len(ip) {
			return nil, 0, false
		}
		return ip[wire.IPv4Len+wire.UDPLen:], ether.HeaderLen + wire.IPv4Len, true
	case ip[0]>>4 == 6 && len(ip) >= wire.IPv6Len+wire.UDPLen && ip[6] == protoUDP:
		if wire.IPv6Len+int(binary.BigEndian.Uint16(ip[4:6])) != len(ip) {
			return nil, 0, false
		}
		return ip[wire.IPv6Len+wire.UDPLen:], ether.HeaderLen + wire.IPv6Len, true
	}
	return nil, 0, false
}

// sameFlow reports whether frames a and b, both UDP (udpPayload), have
// the same Ethernet, IP and UDP headers but for the lengths and checksums:
// what makes b the next segment of a run that began with a.
func sameFlow(a, b []byte) bool {
	const e = ether.HeaderLen
	if len(a) < e+1 || len(b) < e+1 || a[e] != b[e] || !bytes.Equal(a[:e], b[:e]) {
		return false
	}
	if a[e] == 0x45 {
		// TOS; ID, flags, fragment offset, TTL, protocol; addresses;
		// ports.
		return a[e+1] == b[e+1] && bytes.Equal(a[e+4:e+10], b[e+4:e+10]) && bytes.Equal(a[e+12:e+24], b[e+12:e+24])
	}
	// Version, traffic class and flow label; next header, hop limit and
	// addresses; ports.
	return bytes.Equal(a[e:e+4], b[e:e+4]) && bytes.Equal(a[e+6:e+44], b[e+6:e+44])
}

// join adds the frame at vf[vnetHdrLen:] to the run r if it continues
// it, and reports whether it did.
func (r *gsoRun) join(vf []byte) bool {
	if len(r.frames) == 0 || r.short || len(r.frames) == gsoMaxSegments || r.seg == 0 || r.seg < r.minRun {
		return false
	}
	f := vf[vnetHdrLen:]
	payload, udpAt, ok := udpPayload(f)
	if !ok || len(payload) > r.seg || udpAt+wire.UDPLen+r.bytes+len(payload) > 0xffff+ether.HeaderLen || !sameFlow(r.frames[0][vnetHdrLen:], f) {
		return false
	}
	r.frames = append(r.frames, vf)
	r.bytes += len(payload)
	r.short = len(payload) < r.seg
	return true
}

// start makes the frame at vf[vnetHdrLen:] the first of r, which must be
// empty.
func (r *gsoRun) start(vf []byte) {
	r.frames = append(r.frames[:0], vf)
	r.seg, r.bytes, r.short = 0, 0, false
	if payload, _, ok := udpPayload(vf[vnetHdrLen:]); ok {
		r.seg, r.bytes = len(payload), len(payload)
	}
}

// flush writes the run r, if there is one, as one frame when it has more
// than one packet and the kernel takes such frames, and empties it.
func (l *Link) flush(r *gsoRun) error {
	if r == nil || len(r.frames) == 0 {
		return nil
	}
	defer func() {
		clear(r.frames) // the pool keeps no device buffer
		r.frames = r.frames[:0]
	}()
	if len(r.frames) > 1 && !l.noGSO.Load() {
		err := l.writeRun(r)
		if err != unix.EINVAL {
			return err
		}
		// The kernel cannot take a segmentation offload from a TAP's
		// writer: each packet alone, from now on.
		l.noGSO.Store(true)
	}
	for _, vf := range r.frames {
		if err := l.writeAlone(vf); err != nil {
			return err
		}
	}
	return nil
}

// writeRun writes the run r as one frame for the kernel to cut.
func (l *Link) writeRun(r *gsoRun) error {
	first := r.frames[0][vnetHdrLen:]
	_, udpAt, _ := udpPayload(first)
	n := udpAt + wire.UDPLen // the headers' length
	h := r.hdr[:vnetHdrLen+n]
	copy(h[vnetHdrLen:], first[:n])
	ip := h[vnetHdrLen+ether.HeaderLen:]
	ipLen := udpAt - ether.HeaderLen
	wire.SetSegment(ip, ipLen, r.bytes, 0)
	udpLen := uint16(wire.UDPLen + r.bytes)
	var src, dst []byte
	v4 := ipLen == wire.IPv4Len
	if v4 {
		wire.IPv4(ip).UpdateChecksum()
		src, dst = ip[12:16], ip[16:20]
	} else {
		src, dst = ip[8:24], ip[24:40]
	}
	wire.UDP(ip[ipLen:]).SetChecksum(wire.PseudoHeaderChecksum(protoUDP, src, dst, udpLen))
	h[0], h[1] = vnetNeedsCsum, vnetGSOUDPL4
	binary.LittleEndian.PutUint16(h[2:], uint16(n))
	binary.LittleEndian.PutUint16(h[4:], uint16(r.seg))
	binary.LittleEndian.PutUint16(h[6:], uint16(udpAt))
	binary.LittleEndian.PutUint16(h[8:], udpCsumOffset)

	pollfd.SetIovec(&r.iov[0], h)
	nio := 1
	var id uint16
	if v4 {
		id = wire.IPv4(first[ether.HeaderLen:]).ID()
	}
	var shift wire.IDShift
	shiftLen := -1
	for k, vf := range r.frames {
		payload := vf[vnetHdrLen+udpAt+wire.UDPLen:]
		if !v4 || k == 0 {
			pollfd.SetIovec(&r.iov[nio], payload)
			nio++
			continue
		}
		// Segment k leaves with IP ID id+k, which its ICRC covers.
		t := len(payload) - wire.ICRCLen
		if t != shiftLen {
			shift, shiftLen = wire.IPv4IDShift(t), t
		}
		binary.LittleEndian.PutUint32(r.icrcs[k][:], shift.ICRC(binary.LittleEndian.Uint32(payload[t:]), id, id+uint16(k)))
		pollfd.SetIovec(&r.iov[nio], payload[:t])
		pollfd.SetIovec(&r.iov[nio+1], r.icrcs[k][:])
		nio += 2
	}
	if err := l.writev(r.iov[:nio]); err != nil {
		return err
	}
	l.stats.framesOut.Add(uint64(len(r.frames)))
	l.stats.gsoWrites.Add(1)
	return nil
}

// Frames in: the kernel hands the link a run of packets whole where it
// can (TUN_F_USO4, TUN_F_USO6), as it hands a virtual machine's NIC a
// TCP segment whole, and the link cuts it.
//
// A run a peer wrote as one frame (gorxe's tap link, a virtual machine)
// or the kernel joined stays one frame up to the TAP, and one read takes
// it all, where it was a read a packet; the TAP's queue holds it as one
// entry. The link asks the TAP for the offload (TUN_F_CSUM, which it
// needs, and the two UDP segmentations) where the kernel has it (Linux
// 6.2), and cuts such a frame into the packets the kernel would have cut
// it into: segment k has the frame's headers with its own lengths and,
// over IPv4, the frame's IP ID plus k, which its ICRC covers. Its UDP
// checksum is 0, as the udp link writes it: the frame's is the partial
// sum a checksum offload leaves, the device does not read it, and the
// ICRC covers the packet. A frame longer than a buffer continues in
// spill; cutting one copies each packet into the buffer it is returned
// in. Each packet is then handled as a frame read alone.
const (
	tunFCsum = 0x01 // TUN_F_CSUM
	tunFUSO4 = 0x20 // TUN_F_USO4
	tunFUSO6 = 0x40 // TUN_F_USO6

	vnetGSONone = 0

	// maxWhole is the longest frame the kernel hands over whole: 64 KiB
	// of IP packet (its length field), its Ethernet header and the
	// virtio-net header.
	maxWhole = 0xffff + ether.HeaderLen + vnetHdrLen
)

// gsoCut is a frame handed over whole, being cut into its packets.
type gsoCut struct {
	frame []byte // the Ethernet frame
	hdr   int    // its headers' length: Ethernet, IP, UDP
	udpAt int    // where its UDP header starts
	seg   int    // the UDP payload of each segment but the last
	off   int    // where the next segment's payload starts
	k     int    // the next segment's number
}

// left reports whether segments are left to cut.
func (c *gsoCut) left() bool { return c.frame != nil && c.off < len(c.frame) }

// start takes f, a frame whose virtio-net header asked for UDP
// segmentation at seg bytes, and reports whether it is one the link can
// cut: an untagged UDP packet, no IPv4 options or IPv6 extension headers,
// as long as its IP header says.
func (c *gsoCut) start(f []byte, seg int) bool {
	c.frame = nil
	payload, udpAt, ok := udpPayload(f)
	if !ok || seg < 1 || len(payload) == 0 {
		return false
	}
	c.frame, c.udpAt, c.hdr, c.seg = f, udpAt, udpAt+wire.UDPLen, seg
	c.off, c.k = c.hdr, 0
	return true
}

// next writes the next segment into f as a frame of its own and returns
// its length.
func (c *gsoCut) next(f []byte) int {
	n := min(c.seg, len(c.frame)-c.off)
	copy(f, c.frame[:c.hdr])
	copy(f[c.hdr:], c.frame[c.off:c.off+n])
	ip, ipLen := f[ether.HeaderLen:], c.udpAt-ether.HeaderLen
	wire.SetSegment(ip, ipLen, n, c.k)
	if ipLen == wire.IPv4Len {
		wire.IPv4(ip).UpdateChecksum()
	}
	wire.UDP(ip[ipLen:]).SetChecksum(0)
	c.off += n
	c.k++
	if c.off >= len(c.frame) {
		c.frame = nil
	}
	return c.hdr + n
}

// readFrame reads the next frame into vf[vnetHdrLen:], or cuts the next
// packet of a frame handed over whole there, and returns its length; 0
// for a frame the link cannot take (too long, or an offload it cannot
// cut), which input counts as malformed. The caller holds rmu.
func (l *Link) readFrame(vf []byte, block bool) (int, error) {
	if l.cut.left() {
		return l.cut.next(vf[vnetHdrLen:]), nil
	}
	m, err := l.read(vf, block)
	if err != nil {
		return 0, err
	}
	room := len(vf) - vnetHdrLen
	if vf[1] == vnetGSONone && m <= room {
		return m, nil
	}
	if vf[1] != vnetGSOUDPL4 {
		return 0, nil
	}
	// The frame, whole, in front of the part read into spill (read
	// reads at most maxWhole there).
	at := len(l.spill) - maxWhole - room
	if at < 0 {
		return 0, nil
	}
	copy(l.spill[at:], vf[vnetHdrLen:vnetHdrLen+min(m, room)])
	if !l.cut.start(l.spill[at:at+m], int(binary.LittleEndian.Uint16(vf[4:6]))) {
		return 0, nil
	}
	l.stats.gsoReads.Add(1)
	return l.cut.next(vf[vnetHdrLen:]), nil
}

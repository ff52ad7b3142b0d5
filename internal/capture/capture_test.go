package capture

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/gorxe/gorxe/internal/pcaptest"
	"github.com/gorxe/gorxe/wire"
)

// rxeCapture is kernel rxe's perftest traffic, Ethernet and IPv4, with
// ARP and TCP between its RoCE packets.
const rxeCapture = "../../testdata/rxe/perftest-mtu4096-mixed.pcap"

// readFrames returns the frames of a pcap file.
func readFrames(t *testing.T, path string) [][]byte { return pcaptest.Read(t, path).Frames }

// writeCapture returns a pcap file of link type lt holding frames, each
// at most snap bytes of it kept (0: all).
func writeCapture(t *testing.T, lt layers.LinkType, frames [][]byte, snap int) []byte {
	t.Helper()
	var b bytes.Buffer
	w := pcapgo.NewWriter(&b)
	if err := w.WriteFileHeader(65536, lt); err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		kept := f
		if snap > 0 && len(kept) > snap {
			kept = kept[:snap]
		}
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, 0).Add(time.Duration(i) * time.Microsecond), CaptureLength: len(kept), Length: len(f)}
		if err := w.WritePacket(ci, kept); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// decodeLines returns decode's line for every RoCE packet of a capture,
// and its counts.
func decodeLines(t *testing.T, capture []byte) ([]string, Counts) {
	t.Helper()
	var lines []string
	n, err := Read(bytes.NewReader(capture), func(p *Packet) error {
		lines = append(lines, p.Line())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return lines, n
}

// The outer headers of the encapsulations below: a collector's Ethernet
// and IPv4 header, then UDP or GRE.
func outerIPv4(proto byte, l4 []byte, inner []byte) []byte {
	f := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00}
	ip := make([]byte, 20)
	ip[0], ip[8], ip[9] = 0x45, 64, proto
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)+len(inner)))
	copy(ip[12:], []byte{192, 168, 7, 1})
	copy(ip[16:], []byte{192, 168, 7, 2})
	wire.IPv4(ip).UpdateChecksum()
	return append(append(append(f, ip...), l4...), inner...)
}

func udpHeader(dport uint16, rest []byte, inner []byte) []byte {
	h := make([]byte, 8)
	binary.BigEndian.PutUint16(h, 54321)
	binary.BigEndian.PutUint16(h[2:], dport)
	binary.BigEndian.PutUint16(h[4:], uint16(8+len(rest)+len(inner)))
	return append(h, rest...)
}

// erspan3Header returns a GRE header with a sequence number and an ERSPAN
// Type III header for session 5, of frame type ft, with the
// platform-specific subheader if sub, and the T bit if cut.
func erspan3Header(seq uint32, ft byte, sub, cut bool) []byte {
	h := binary.BigEndian.AppendUint16(nil, 0x1000) // S: a sequence number
	h = binary.BigEndian.AppendUint16(h, uint16(ethernetTypeERSPAN3))
	h = binary.BigEndian.AppendUint32(h, seq)
	e := make([]byte, erspan3Len)
	binary.BigEndian.PutUint16(e, 2<<12|100) // version 2, VLAN 100
	binary.BigEndian.PutUint16(e[2:], 5)     // session 5
	if cut {
		e[2] |= 0x04
	}
	binary.BigEndian.PutUint32(e[4:], 0xdeadbeef) // timestamp
	e[10] = ft << 2
	if sub {
		e[11] |= 1
		e = append(e, 1, 2, 3, 4, 5, 6, 7, 8)
	}
	return append(h, e...)
}

// TestEncapsulations: RoCE packets decode the same under a tunnel's or a
// mirror's outer headers, and on link types that carry IP alone, as on
// the wire they were captured from, packet for packet, and the frames
// that are not RoCE are counted as such.
func TestEncapsulations(t *testing.T) {
	frames := readFrames(t, rxeCapture)
	want, wantN := decodeLines(t, writeCapture(t, layers.LinkTypeEthernet, frames, 0))
	if wantN.RoCE < 100 || wantN.Other == 0 || wantN.BadICRC+wantN.Malformed != 0 {
		t.Fatalf("the plain capture: %+v", wantN)
	}
	type wrap func(i int, frame []byte) []byte
	ipOnly := func(f func(ip []byte) []byte) wrap {
		return func(_ int, frame []byte) []byte {
			if binary.BigEndian.Uint16(frame[12:]) != 0x0800 {
				return nil // the capture's ARP
			}
			return f(frame[14:])
		}
	}
	for _, c := range []struct {
		name string
		lt   layers.LinkType
		wrap wrap
	}{
		{"VXLAN", layers.LinkTypeEthernet, func(_ int, f []byte) []byte {
			return outerIPv4(17, udpHeader(4789, []byte{0x08, 0, 0, 0, 0, 0, 100, 0}, f), f)
		}},
		{"Geneve", layers.LinkTypeEthernet, func(_ int, f []byte) []byte {
			return outerIPv4(17, udpHeader(6081, []byte{0, 0, 0x65, 0x58, 0, 0, 100, 0}, f), f)
		}},
		{"GRE", layers.LinkTypeEthernet, func(_ int, f []byte) []byte {
			return outerIPv4(47, []byte{0, 0, 0x65, 0x58}, f)
		}},
		{"ERSPAN II", layers.LinkTypeEthernet, func(i int, f []byte) []byte {
			gre := binary.BigEndian.AppendUint32([]byte{0x10, 0, 0x88, 0xbe}, uint32(i))
			return outerIPv4(47, append(gre, 0x10, 100, 0, 5, 0, 0, 0, 0), f)
		}},
		{"ERSPAN III", layers.LinkTypeEthernet, func(i int, f []byte) []byte {
			return outerIPv4(47, erspan3Header(uint32(i), erspan3Ethernet, false, false), f)
		}},
		{"ERSPAN III with a platform subheader", layers.LinkTypeEthernet, func(i int, f []byte) []byte {
			return outerIPv4(47, erspan3Header(uint32(i), erspan3Ethernet, true, false), f)
		}},
		{"ERSPAN III of IP packets", layers.LinkTypeEthernet, ipOnly(func(ip []byte) []byte {
			return outerIPv4(47, erspan3Header(0, erspan3IP, false, false), ip)
		})},
		{"MPLS", layers.LinkTypeEthernet, ipOnly(func(ip []byte) []byte {
			return append([]byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0x47, 0, 0x06, 0x41, 64}, ip...)
		})},
		{"802.1Q", layers.LinkTypeEthernet, func(_ int, f []byte) []byte {
			return append(append(f[:12:12], 0x81, 0, 0, 5), f[12:]...)
		}},
		{"QinQ", layers.LinkTypeEthernet, func(_ int, f []byte) []byte {
			return append(append(f[:12:12], 0x88, 0xa8, 0, 7, 0x81, 0, 0, 5), f[12:]...)
		}},
		{"raw IP (DLT_RAW)", layers.LinkTypeRaw, ipOnly(func(ip []byte) []byte { return ip })},
		{"IPv4 (LINKTYPE_IPV4)", layers.LinkTypeIPv4, ipOnly(func(ip []byte) []byte { return ip })},
		{"BSD loopback (DLT_NULL)", layers.LinkTypeNull, ipOnly(func(ip []byte) []byte {
			return append(binary.LittleEndian.AppendUint32(nil, 2), ip...) // AF_INET
		})},
	} {
		t.Run(c.name, func(t *testing.T) {
			var wrapped [][]byte
			for i, f := range frames {
				if w := c.wrap(i, f); w != nil {
					wrapped = append(wrapped, w)
				}
			}
			got, n := decodeLines(t, writeCapture(t, c.lt, wrapped, 0))
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("%d RoCE packets (%+v), want %d as in the plain capture; first:\n got %q\nwant %q",
					len(got), n, len(want), first(got), first(want))
			}
			if n.Other != len(wrapped)-len(want) {
				t.Errorf("%d other frames counted, want %d", n.Other, len(wrapped)-len(want))
			}
		})
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// TestMirrorTruncated: a packet a mirroring switch cut short and said so
// (ERSPAN's T bit) decodes as one a snap length cut, its headers whole and
// its ICRC unchecked; without the T bit the same bytes are malformed.
func TestMirrorTruncated(t *testing.T) {
	frames := readFrames(t, rxeCapture)
	want, _ := decodeLines(t, writeCapture(t, layers.LinkTypeEthernet, frames, 0))
	const keep = 96 // of each mirrored frame
	for _, cut := range []bool{true, false} {
		var wrapped [][]byte
		long := 0
		for i, f := range frames {
			if len(f) > keep {
				f = f[:keep]
				if isRoCE(f) {
					long++
				}
			}
			wrapped = append(wrapped, outerIPv4(47, erspan3Header(uint32(i), erspan3Ethernet, false, cut), f))
		}
		got, n := decodeLines(t, writeCapture(t, layers.LinkTypeEthernet, wrapped, 0))
		if len(got) != len(want) || long == 0 {
			t.Fatalf("T=%v: %d RoCE packets, want %d (%d cut)", cut, len(got), len(want), long)
		}
		if !cut {
			if n.Malformed != long || n.Cut != 0 {
				t.Errorf("T=0: %+v, want the %d cut packets malformed", n, long)
			}
			continue
		}
		if n.Cut != long || n.Malformed != 0 {
			t.Errorf("T=1: %+v, want %d packets cut short and none malformed", n, long)
		}
		for i, g := range got {
			w := want[i]
			if strings.HasSuffix(g, " icrc=cut") {
				w = strings.TrimSuffix(w, " icrc=ok") + " icrc=cut"
				w = cmBody.ReplaceAllString(w, " cm(cut short by the capture)") // rdma_cm's MADs, beyond 96 bytes
			}
			if g != w {
				t.Fatalf("T=1: packet %d\n got %s\nwant %s", i+1, g, w)
			}
		}
	}
}

var cmBody = regexp.MustCompile(` cm\([^)]*\)`)

// isRoCE reports whether an Ethernet frame is IPv4 UDP to 4791.
func isRoCE(f []byte) bool {
	return len(f) >= 38 && binary.BigEndian.Uint16(f[12:]) == 0x0800 && f[23] == 17 && binary.BigEndian.Uint16(f[36:]) == 4791
}

// TestERSPAN3Errors: a Type III header that is short, of another version
// or of an unknown frame type is not decoded past, and no packet comes of
// it.
func TestERSPAN3Errors(t *testing.T) {
	frame := readFrames(t, rxeCapture)
	var roce []byte
	for _, f := range frame {
		if isRoCE(f) {
			roce = f
			break
		}
	}
	good := erspan3Header(0, erspan3Ethernet, false, false)
	for _, c := range []struct {
		name string
		gre  []byte
	}{
		{"short", good[:8+6]},
		{"version 1", func() []byte { b := bytes.Clone(good); b[8] = 1<<4 | b[8]&0x0f; return b }()},
		{"frame type 3", func() []byte { b := bytes.Clone(good); b[8+10] = 3 << 2; return b }()},
	} {
		inner := roce
		if c.name == "short" {
			inner = nil
		}
		_, n := decodeLines(t, writeCapture(t, layers.LinkTypeEthernet, [][]byte{outerIPv4(47, c.gre, inner)}, 0))
		if n.RoCE != 0 || n.Other != 1 {
			t.Errorf("%s: %+v, want one other frame", c.name, n)
		}
	}
}

// TestGzip: a gzip-compressed capture reads as the capture itself.
func TestGzip(t *testing.T) {
	plain := writeCapture(t, layers.LinkTypeEthernet, readFrames(t, rxeCapture), 0)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(plain)
	zw.Close()
	want, wantN := decodeLines(t, plain)
	got, n := decodeLines(t, gz.Bytes())
	if !reflect.DeepEqual(n, wantN) || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("gzipped: %+v, want %+v and the same lines", n, wantN)
	}
	// A gzip stream of something else is not a capture.
	gz.Reset()
	zw = gzip.NewWriter(&gz)
	zw.Write([]byte("not a capture at all"))
	zw.Close()
	if _, err := Read(bytes.NewReader(gz.Bytes()), func(*Packet) error { return nil }); !errors.Is(err, ErrNotCapture) {
		t.Errorf("gzipped text: %v, want ErrNotCapture", err)
	}
}

// TestElsewhere: RoCE v2 packets to another UDP port than the one read
// are counted by port when their ICRC verifies (for the hint to use
// --roce-port), and read as such with that port; UDP datagrams to
// another port whose ICRC does not verify are not counted.
func TestElsewhere(t *testing.T) {
	frames := readFrames(t, rxeCapture)
	want, wantN := decodeLines(t, writeCapture(t, layers.LinkTypeEthernet, frames, 0))
	moved := func(fixICRC bool) []byte {
		var out [][]byte
		for _, f := range frames {
			f = bytes.Clone(f)
			if isRoCE(f) {
				binary.BigEndian.PutUint16(f[36:], 4792)
				if fixICRC {
					var p wire.Packet
					if err := wire.ParseIP(&p, f[14:]); err != nil {
						t.Fatal(err)
					}
					binary.LittleEndian.PutUint32(f[len(f)-4:], wire.ComputeICRC(p.IP, p.UDP, p.Transport()))
				}
			}
			out = append(out, f)
		}
		return writeCapture(t, layers.LinkTypeEthernet, out, 0)
	}
	c := moved(true)
	_, n := decodeLines(t, c)
	if n.RoCE != 0 || n.Elsewhere[4792] != wantN.RoCE || len(n.Elsewhere) != 1 {
		t.Fatalf("read at 4791: %+v, want no RoCE and %d elsewhere, at 4792", n, wantN.RoCE)
	}
	if h := n.Hint(); !strings.HasSuffix(h, fmt.Sprintf(": %d to port 4792; --roce-port 4792 reads them", wantN.RoCE)) {
		t.Errorf("hint %q", h)
	}
	var got []string
	n, err := ReadPort(bytes.NewReader(c), 4792, func(p *Packet) error {
		got = append(got, p.Line())
		return nil
	})
	if err != nil || n.RoCE != wantN.RoCE || n.BadICRC != 0 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("read at 4792: %v, %+v; lines equal to the original's: %v", err, n, strings.Join(got, "\n") == strings.Join(want, "\n"))
	}
	if _, n := decodeLines(t, moved(false)); len(n.Elsewhere) != 0 || n.Hint() != "" {
		t.Errorf("another port, ICRCs not fixed: %+v, hint %q; want none counted", n.Elsewhere, n.Hint())
	}
}

// TestCutShortFile: a capture file that ends inside a frame (its writer
// killed mid-write) gives every frame before it and an error that says
// so.
func TestCutShortFile(t *testing.T) {
	whole := writeCapture(t, layers.LinkTypeEthernet, readFrames(t, rxeCapture), 0)
	_, wantN := decodeLines(t, whole)
	var lastStart int // the last frame's record, in the file
	for off := 24; off < len(whole); off += 16 + int(binary.LittleEndian.Uint32(whole[off+8:])) {
		lastStart = off
	}
	n, err := Read(bytes.NewReader(whole[:lastStart+20]), func(*Packet) error { return nil })
	frames := wantN.RoCE + wantN.Other
	if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), fmt.Sprintf("the file ends inside frame %d", frames)) {
		t.Errorf("error %v", err)
	}
	if n.RoCE+n.Other != frames-1 {
		t.Errorf("%d frames read, want the %d before the cut", n.RoCE+n.Other, frames-1)
	}
}

// TestTrafficClass: decode shows a DSCP other than 0 and a switch's CE
// mark, which the ICRC does not cover, and nothing for DSCP 0 and the
// other ECN codepoints.
func TestTrafficClass(t *testing.T) {
	var frame []byte
	for _, f := range readFrames(t, rxeCapture) {
		if isRoCE(f) {
			frame = f
			break
		}
	}
	for _, c := range []struct {
		tos  byte
		want string
	}{
		{0, ""},
		{2, ""},                 // ECT(0)
		{26<<2 | 2, " dscp=26"}, // RoCE's usual class, ECT(0)
		{26<<2 | 3, " dscp=26 ecn=CE"},
		{3, " ecn=CE"},
	} {
		f := bytes.Clone(frame)
		ip := wire.IPv4(f[14:])
		ip.SetTOS(c.tos)
		ip.UpdateChecksum()
		lines, n := decodeLines(t, writeCapture(t, layers.LinkTypeEthernet, [][]byte{f}, 0))
		if n.RoCE != 1 || n.BadICRC+n.Malformed != 0 {
			t.Fatalf("TOS %#x: %+v", c.tos, n)
		}
		fields := strings.SplitN(lines[0], "pad=0", 2)[1]
		if got := strings.SplitN(fields, " reth(", 2)[0]; got != c.want {
			t.Errorf("TOS %#x: %q before the RETH, want %q", c.tos, got, c.want)
		}
	}
}

// TestRoCEv1: RoCE v1 frames (EtherType 0x8915), bare, behind a VLAN tag
// or in a Linux cooked capture, are counted apart among the other frames
// and named in the hint; a frame of that EtherType that holds no GRH and
// BTH is not; the RoCE v2 packets beside them read as before.
func TestRoCEv1(t *testing.T) {
	frames := readFrames(t, rxeCapture)
	want, wantN := decodeLines(t, writeCapture(t, layers.LinkTypeEthernet, frames, 0))
	mixed := slices.Clone(frames) // the v1 frames after them, so that their times stay
	v1 := 0
	for k, f := range frames {
		if !isRoCE(f) {
			continue
		}
		g := pcaptest.RoCEv1(f)
		if k%3 == 1 { // behind an 802.1Q tag
			g = append(append(bytes.Clone(g[:12]), 0x81, 0x00, 0x00, 0x05), g[12:]...)
		}
		mixed = append(mixed, g)
		v1++
	}
	notV1 := append(bytes.Clone(frames[0][:12]), 0x89, 0x15)
	notV1 = append(notV1, make([]byte, 80)...) // version 0, next header 0
	mixed = append(mixed, notV1)

	got, n := decodeLines(t, writeCapture(t, layers.LinkTypeEthernet, mixed, 0))
	if strings.Join(got, "\n") != strings.Join(want, "\n") || n.RoCE != wantN.RoCE {
		t.Fatalf("the RoCE v2 packets beside the v1 frames: %d read, want %d, lines equal: %v", n.RoCE, wantN.RoCE, strings.Join(got, "\n") == strings.Join(want, "\n"))
	}
	if n.V1 != v1 || n.Other != wantN.Other+v1+1 {
		t.Fatalf("%d RoCE v1 frames and %d other frames counted, want %d and %d", n.V1, n.Other, v1, wantN.Other+v1+1)
	}
	if h := n.Hint(); !strings.HasPrefix(h, fmt.Sprintf("%d RoCE v1 frames (EtherType 0x8915", v1)) || !strings.Contains(h, "UDP port 4791") {
		t.Errorf("hint %q", h)
	}
	if wantN.V1 != 0 || wantN.Hint() != "" {
		t.Errorf("the capture without them: %d RoCE v1 frames, hint %q", wantN.V1, wantN.Hint())
	}

	// The same frames as tcpdump -i any writes them: a Linux cooked (v1)
	// header in place of the Ethernet one.
	var cooked [][]byte
	for _, f := range mixed {
		h := make([]byte, 16)
		binary.BigEndian.PutUint16(h[2:], 1) // ARPHRD_ETHER
		binary.BigEndian.PutUint16(h[4:], 6)
		copy(h[6:], f[6:12])
		copy(h[14:], f[12:14])
		cooked = append(cooked, append(h, f[14:]...))
	}
	if _, n := decodeLines(t, writeCapture(t, layers.LinkTypeLinuxSLL, cooked, 0)); n.V1 != v1 || n.RoCE != wantN.RoCE {
		t.Errorf("Linux cooked: %d RoCE v1 frames, %d RoCE packets; want %d and %d", n.V1, n.RoCE, v1, wantN.RoCE)
	}
}

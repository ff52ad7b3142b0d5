package wire_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

func TestIPv4Encode(t *testing.T) {
	want := unhex(t, ""+
		"45 c2 003c"+ // version 4, IHL 5; TOS 0xC2 (DSCP 48, ECT(0)); total length 60
		"718c 4000"+ // ID 0x718C; DF
		"40 11 9161"+ // TTL 64; UDP; header checksum
		"0a001101"+ // 10.0.17.1
		"0a001201") // 10.0.18.1
	f := wire.IPv4Fields{
		TOS: 0xc2, TotalLen: 60, ID: 0x718c, DontFrag: true, TTL: 64, Protocol: wire.ProtocolUDP,
		Src: netip.MustParseAddr("10.0.17.1"), Dst: netip.MustParseAddr("::ffff:10.0.18.1"),
	}
	h := wire.IPv4(make([]byte, wire.IPv4Len))
	h.Encode(&f)
	h.UpdateChecksum()
	if !bytes.Equal(h, want) {
		t.Fatalf("encoded %x\n    want %x", []byte(h), want)
	}
	if !h.ChecksumValid() {
		t.Error("ChecksumValid = false")
	}
	got := wire.IPv4Fields{
		TOS: h.TOS(), TotalLen: h.TotalLen(), ID: h.ID(), DontFrag: h.DontFrag(), TTL: h.TTL(),
		Protocol: h.Protocol(), Src: h.Src(), Dst: h.Dst(),
	}
	f.Dst = f.Dst.Unmap()
	if got != f {
		t.Errorf("read back %+v, want %+v", got, f)
	}
	if h.HeaderLen() != wire.IPv4Len || h.Checksum() != 0x9161 || h.IsFragment() {
		t.Errorf("HeaderLen %d, Checksum %#x, IsFragment %v", h.HeaderLen(), h.Checksum(), h.IsFragment())
	}
	h.SetTTL(h.TTL() - 1)
	if h.ChecksumValid() {
		t.Error("ChecksumValid = true after the TTL changed")
	}
}

func TestIPv6Encode(t *testing.T) {
	want := unhex(t, ""+
		"6 c2 abcde"+ // version 6; traffic class 0xC2; flow label 0xABCDE
		"0024 11 40"+ // payload length 36; UDP; hop limit 64
		"fd090000000000000000000000000001"+ // fd09::1
		"fd090000000000000000000000000002") // fd09::2
	f := wire.IPv6Fields{
		TrafficClass: 0xc2, FlowLabel: 0xfabcde, PayloadLen: 36, NextHeader: wire.ProtocolUDP, HopLimit: 64,
		Src: netip.MustParseAddr("fd09::1"), Dst: netip.MustParseAddr("fd09::2"),
	}
	h := wire.IPv6(make([]byte, wire.IPv6Len))
	h.Encode(&f)
	if !bytes.Equal(h, want) {
		t.Fatalf("encoded %x\n    want %x", []byte(h), want)
	}
	got := wire.IPv6Fields{
		TrafficClass: h.TrafficClass(), FlowLabel: h.FlowLabel(), PayloadLen: h.PayloadLen(),
		NextHeader: h.NextHeader(), HopLimit: h.HopLimit(), Src: h.Src(), Dst: h.Dst(),
	}
	f.FlowLabel &= 0xfffff
	if got != f {
		t.Errorf("read back %+v, want %+v", got, f)
	}
}

func TestUDPEncode(t *testing.T) {
	want := unhex(t, ""+
		"c000 12b7"+ // ports 49152, 4791
		"0028 0000") // length 40, no checksum
	f := wire.UDPFields{SrcPort: 0xc000, DstPort: wire.UDPPort, Length: 40}
	h := wire.UDP(make([]byte, wire.UDPLen))
	h.Encode(&f)
	if !bytes.Equal(h, want) {
		t.Fatalf("encoded %x, want %x", []byte(h), want)
	}
	got := wire.UDPFields{SrcPort: h.SrcPort(), DstPort: h.DstPort(), Length: h.Length(), Checksum: h.Checksum()}
	if got != f {
		t.Errorf("read back %+v, want %+v", got, f)
	}
}

func TestChecksum(t *testing.T) {
	for _, c := range []struct {
		b       string
		initial uint16
		want    uint16
	}{
		{"0001 f203 f4f5 f6f7", 0, 0xddf2}, // RFC 1071 §3's example
		{"0001 f203 f4f5 f6f7 00", 0, 0xddf2},
		{"0001 f203 f4f5 f6", 0, 0xdcfb},
		{"ffff", 0, 0xffff},
		{"ffff ffff", 1, 1},
		{"", 0x1234, 0x1234},
	} {
		if got := wire.Checksum(unhex(t, c.b), c.initial); got != c.want {
			t.Errorf("Checksum(%s, %#x) = %#x, want %#x", c.b, c.initial, got, c.want)
		}
	}
}

// roceFields returns the fields that rebuild the IP and UDP headers of p.
func roceFields(t testing.TB, p *wire.Packet) wire.RoCEFields {
	t.Helper()
	f, err := p.Frame()
	if err != nil {
		t.Fatal(err)
	}
	return wire.RoCEFields{IP: f.IP, SrcPort: f.SrcPort, DstPort: f.DstPort}
}

// putHeaders copies p's transport into a buffer with room around it, as a
// sender's packet buffer has, and finishes it with PutRoCEHeaders.
func putHeaders(t testing.TB, p *wire.Packet, f *wire.RoCEFields) []byte {
	t.Helper()
	const room = 64
	tr := p.Transport()
	buf := make([]byte, room+len(tr)+wire.ICRCLen+room)
	copy(buf[room:], tr)
	start, err := wire.PutRoCEHeaders(buf, room, len(tr), f)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[room:room+len(tr)], tr) {
		t.Fatalf("transport changed: %x, was %x", buf[room:room+len(tr)], tr)
	}
	return buf[start : room+len(tr)+wire.ICRCLen]
}

// TestPutRoCEHeadersGolden finishes the transport of every packet of the
// published vectors and the captures whose UDP checksum is zero, from its
// parsed fields, and gets the captured bytes back: with DSCP and ECN,
// IPv4 IDs, and BECN set. The captures hold no IPv6 packet;
// TestPutRoCEHeaders covers IPv6.
func TestPutRoCEHeadersGolden(t *testing.T) {
	var pkts [][]byte
	for _, v := range publishedVectors {
		raw := unhex(t, v.hex)
		if v.frame {
			raw = raw[wire.EthernetLen:]
		}
		pkts = append(pkts, raw)
	}
	files, _ := filepath.Glob("../testdata/*/*.pcap")
	for _, file := range files {
		for _, frame := range rocePackets(t, file) {
			pkts = append(pkts, frame[wire.EthernetLen:])
		}
	}
	seen := map[int]int{} // by IP version
	for i, raw := range pkts {
		var p wire.Packet
		if err := wire.ParseIP(&p, raw); err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		if wire.UDP(p.UDP).Checksum() != 0 {
			continue
		}
		want := raw[:len(p.IP)+len(p.UDP)+len(p.Transport())+wire.ICRCLen]
		f := roceFields(t, &p)
		if got := putHeaders(t, &p, &f); !bytes.Equal(got, want) {
			t.Fatalf("packet %d: PutRoCEHeaders wrote\n%x\nwant\n%x", i, got, want)
		}
		seen[p.IPVersion()]++
	}
	if seen[4] == 0 {
		t.Errorf("no packet rebuilt")
	}
}

// TestPutRoCEHeaders builds packets over IPv4 and IPv6, parses them back
// and checks every field and the ICRC.
func TestPutRoCEHeaders(t *testing.T) {
	h := wire.Headers{BTH: bth.Fields{Opcode: bth.RCSendOnly, FECN: true, PKey: bth.DefaultPKey, DestQP: 0x12, PSN: 7}}
	for _, f := range []wire.RoCEFields{
		{IP: wire.IPFields{
			Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("::ffff:10.0.0.2"),
			TrafficClass: 0x6a, HopLimit: 3, ID: 0x1234, DontFrag: true,
		}, SrcPort: 0xc123, DstPort: wire.UDPPort},
		{IP: wire.IPFields{
			Src: netip.MustParseAddr("fd09::1"), Dst: netip.MustParseAddr("fd09::2"),
			TrafficClass: 0x6b, HopLimit: 255, FlowLabel: 0x54321,
		}, SrcPort: 0xc456, DstPort: 4792},
		{IP: wire.IPFields{
			Src: netip.MustParseAddr("::ffff:10.0.0.1"), Dst: netip.MustParseAddr("::ffff:10.0.0.2"),
			IPv6: true, TrafficClass: 0x02, HopLimit: 64,
		}, SrcPort: 0xc789, DstPort: wire.UDPPort},
	} {
		t.Run(f.IP.Src.String(), func(t *testing.T) {
			tr, err := wire.AppendTransport(nil, &h, []byte("hello"))
			if err != nil {
				t.Fatal(err)
			}
			var p wire.Packet
			if err := wire.ParseUDPPayload(&p, append(tr, 0, 0, 0, 0)); err != nil {
				t.Fatal(err)
			}
			pkt := putHeaders(t, &p, &f)
			if err := wire.ParseIP(&p, pkt); err != nil {
				t.Fatal(err)
			}
			if err := p.CheckICRC(); err != nil {
				t.Fatal(err)
			}
			got, err := p.Frame()
			if err != nil {
				t.Fatal(err)
			}
			want := f.IP
			want.Src, want.Dst = want.Src.Unmap(), want.Dst.Unmap()
			if f.IP.IPv6 {
				want.Src, want.Dst = f.IP.Src, f.IP.Dst
			}
			want.IPv6 = p.IPVersion() == 6
			if got.IP != want || got.SrcPort != f.SrcPort || got.DstPort != f.DstPort || got.UDPChecksum {
				t.Errorf("parsed %+v ports %d %d, want %+v ports %d %d", got.IP, got.SrcPort, got.DstPort, want, f.SrcPort, f.DstPort)
			}
			if !p.BTH.FECN() {
				t.Error("FECN lost")
			}
			if p.IPVersion() == 4 && !wire.IPv4(p.IP).ChecksumValid() {
				t.Error("bad IPv4 header checksum")
			}
			if string(p.Payload) != "hello" {
				t.Errorf("payload %q", p.Payload)
			}
		})
	}
}

func TestPutRoCEHeadersAddrFamily(t *testing.T) {
	buf := make([]byte, 128)
	for _, ip := range []wire.IPFields{
		{},
		{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("fd09::2")},
		{Src: netip.MustParseAddr("10.0.0.1")},
	} {
		f := wire.RoCEFields{IP: ip}
		if _, err := wire.PutRoCEHeaders(buf, 64, 16, &f); err != wire.ErrAddrFamily {
			t.Errorf("%v -> %v: err = %v, want ErrAddrFamily", ip.Src, ip.Dst, err)
		}
	}
}

func TestPutRoCEHeadersAllocs(t *testing.T) {
	f, buf, n := putBench(false)
	if a := testing.AllocsPerRun(100, func() {
		if _, err := wire.PutRoCEHeaders(buf, 64, n, &f); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("PutRoCEHeaders allocates %v times", a)
	}
}

// putBench returns the fields and a buffer with a 1 KiB RDMA WRITE
// transport at offset 64, as a sender has them.
func putBench(v6 bool) (f wire.RoCEFields, buf []byte, n int) {
	h := wire.Headers{BTH: bth.Fields{Opcode: bth.RCRDMAWriteFirst, PKey: 0xffff, DestQP: 0x11, PSN: 1}}
	tr, _ := wire.AppendTransport(nil, &h, make([]byte, 1024))
	buf = make([]byte, 64+len(tr)+wire.ICRCLen)
	copy(buf[64:], tr)
	f = wire.RoCEFields{
		IP:      wire.IPFields{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), HopLimit: 64, DontFrag: true},
		SrcPort: 0xc000, DstPort: wire.UDPPort,
	}
	if v6 {
		f.IP.Src, f.IP.Dst = netip.MustParseAddr("fd09::1"), netip.MustParseAddr("fd09::2")
	}
	return f, buf, len(tr)
}

// BenchmarkPutRoCEHeaders is the send path's work after the transport is
// in place: IP and UDP headers and the ICRC of a 1 KiB WRITE.
func BenchmarkPutRoCEHeaders(b *testing.B) {
	for _, v6 := range []bool{false, true} {
		b.Run(fmt.Sprint("IPv", map[bool]int{false: 4, true: 6}[v6]), func(b *testing.B) {
			f, buf, n := putBench(v6)
			b.ReportAllocs()
			b.SetBytes(int64(n))
			for b.Loop() {
				if _, err := wire.PutRoCEHeaders(buf, 64, n, &f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

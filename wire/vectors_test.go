package wire_test

import (
	"bytes"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// unhex decodes hex with spaces, newlines and '|' separators allowed.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	s = strings.NewReplacer(" ", "", "\n", "", "\t", "", "|", "").Replace(s)
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Published packets with their ICRCs (see ../shared/reference/dcqcn.md §1.6):
// two CNPs from Mellanox hardware and a UC SEND_ONLY, all from scapy's
// test/contrib/roce.uts and libconntrack-cm tests/test_cnp.cpp.
var publishedVectors = []struct {
	name   string
	frame  bool // starts with an Ethernet header
	hex    string
	op     bth.Opcode
	dqpn   bth.QPN
	icrc   uint32
	sport  uint16
	becn   bool
	paylen int
}{
	{
		name:  "ConnectX-4 Lx CNP",
		frame: true,
		hex: `e41d2dab2bc2 7cfe90643b32 0800
			45c2003c718c4000401191610a0011010a001201
			000012b700280000
			8100ffff4000011800000000
			00000000000000000000000000000000
			82fd002a`,
		op: bth.CNP, dqpn: 0x118, icrc: 0x2a00fd82, sport: 0, becn: true,
	},
	{
		name: "Mellanox CNP example",
		hex: `4589003C98C640002011692716161608 16161607DBAE12B7002800008100FFFF
			400000D2000000000000000000000000 0000000000000000DAFC1BEF`,
		op: bth.CNP, dqpn: 0xd2, icrc: 0xef1bfcda, sport: 56238, becn: true,
	},
	{
		name: "UC SEND_ONLY",
		hex: `45010040047840004011b4d5c0a80007c0a80007c00012b7002caca22460ffff000000d300cf1710
			4630818be28935d90e9a95505401be885e50000078f353f3`,
		op: bth.UCSendOnly, dqpn: 0xd3, icrc: 0xf353f378, sport: 0xc000, paylen: 18, // MigReq set, PadCnt 2
	},
}

func TestPublishedVectors(t *testing.T) {
	for _, v := range publishedVectors {
		t.Run(v.name, func(t *testing.T) {
			raw := unhex(t, v.hex)
			var p wire.Packet
			var err error
			ipStart := 0
			if v.frame {
				err = wire.ParseFrame(&p, raw)
				ipStart = wire.EthernetLen
			} else {
				err = wire.ParseIP(&p, raw)
			}
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if got := p.BTH.Opcode(); got != v.op {
				t.Errorf("opcode = %v, want %v", got, v.op)
			}
			if got := p.BTH.DestQP(); got != v.dqpn {
				t.Errorf("dest QP = %#x, want %#x", got, v.dqpn)
			}
			if got := p.BTH.BECN(); got != v.becn {
				t.Errorf("BECN = %v, want %v", got, v.becn)
			}
			if got := p.SrcPort(); got != v.sport {
				t.Errorf("UDP source port = %d, want %d", got, v.sport)
			}
			if got := len(p.Payload); got != v.paylen {
				t.Errorf("payload length = %d, want %d", got, v.paylen)
			}
			if got := p.ICRC(); got != v.icrc {
				t.Errorf("carried ICRC = %#08x, want %#08x", got, v.icrc)
			}
			if got := wire.ComputeICRC(p.IP, p.UDP, p.Transport()); got != v.icrc {
				t.Errorf("computed ICRC = %#08x, want %#08x", got, v.icrc)
			}
			if err := p.CheckICRC(); err != nil {
				t.Errorf("CheckICRC: %v", err)
			}
			if p.IsCNP() != (v.op == bth.CNP) {
				t.Errorf("IsCNP = %v", p.IsCNP())
			}
			assertRebuilds(t, &p, raw[ipStart:])
		})
	}
}

// assertRebuilds builds a packet from p's parsed fields and checks that it
// equals want, the packet from its IP header on.
func assertRebuilds(t testing.TB, p *wire.Packet, want []byte) {
	t.Helper()
	f, err := p.Frame()
	if err != nil {
		t.Fatalf("Frame: %v", err)
	}
	if f.Len() != len(want) {
		t.Errorf("Frame.Len() = %d, want %d", f.Len(), len(want))
	}
	got, err := f.Append(nil)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("rebuilt packet differs\n got %x\nwant %x", got, want)
	}
}

// TestBuildCNP builds the Mellanox example CNP from its fields alone.
func TestBuildCNP(t *testing.T) {
	want := unhex(t, publishedVectors[1].hex)
	var p wire.Packet
	if err := wire.ParseIP(&p, want); err != nil {
		t.Fatal(err)
	}
	f := wire.CNP(wire.IPFields{
		Src: p.Src(), Dst: p.Dst(), TrafficClass: 0x89, HopLimit: 0x20, ID: 0x98c6, DontFrag: true,
	}, 0xd2)
	f.SrcPort = 56238
	got, err := f.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("CNP\n got %x\nwant %x", got, want)
	}
}

// TestIndependentICRC checks packets whose ICRC was computed outside gorxe
// (testdata/icrc/gen.py: scapy for IPv4, zlib with rxe's masks for IPv6).
func TestIndependentICRC(t *testing.T) {
	data, err := os.ReadFile("../testdata/icrc/vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) < 4 {
		t.Fatalf("only %d vectors", len(lines))
	}
	for _, line := range lines {
		name, hexPkt, _ := strings.Cut(line, " ")
		pkt := unhex(t, hexPkt)
		var p wire.Packet
		if err := wire.ParseIP(&p, pkt); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if err := p.CheckICRC(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		assertRebuilds(t, &p, pkt)
	}
}

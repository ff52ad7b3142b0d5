package wire_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// gsoRun builds a run of RDMA WRITE packets as the kernel puts them on the
// wire after cutting a GSO datagram (IPv4 IDs 0, 1, 2, ...), and the uncut
// datagram a capture on the sender shows: the packets' UDP payloads after
// the first packet's headers, with the whole length.
func gsoRun(t *testing.T, src, dst string, sizes []int) (pkts [][]byte, datagram []byte) {
	t.Helper()
	for k, size := range sizes {
		op := bth.RCRDMAWriteMiddle // a WRITE FIRST would be longer, by its RETH
		if k == len(sizes)-1 {
			op = bth.RCRDMAWriteLast
		}
		f := wire.Frame{
			IP:      wire.IPFields{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), HopLimit: 64, DontFrag: true, ID: uint16(k)},
			SrcPort: 0xc000, DstPort: wire.UDPPort,
			Headers: wire.Headers{BTH: bth.Fields{Opcode: op, PKey: 0xffff, DestQP: 0x11, PSN: bth.PSN(100 + k)}},
			Payload: bytes.Repeat([]byte{byte(k + 1)}, size),
		}
		p, err := f.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		pkts = append(pkts, p)
	}
	hl := wire.IPv4Len
	if pkts[0][0]>>4 == 6 {
		hl = wire.IPv6Len
	}
	datagram = append([]byte(nil), pkts[0][:hl+wire.UDPLen]...)
	for _, p := range pkts {
		datagram = append(datagram, p[hl+wire.UDPLen:]...)
	}
	if hl == wire.IPv4Len {
		binary.BigEndian.PutUint16(datagram[2:], uint16(len(datagram)))
	} else {
		binary.BigEndian.PutUint16(datagram[4:], uint16(len(datagram)-hl))
	}
	binary.BigEndian.PutUint16(datagram[hl+4:], uint16(len(datagram)-hl))
	return pkts, datagram
}

func TestSplitGSO(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src, dst string
		sizes    []int
	}{
		{"IPv4 full run", "10.0.0.1", "10.0.0.2", []int{1024, 1024, 1024, 1024}},
		{"IPv4 short last", "10.0.0.1", "10.0.0.2", []int{4096, 4096, 4096, 100}},
		{"IPv6", "fd00::1", "fd00::2", []int{1024, 1024, 1024, 512}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, datagram := gsoRun(t, tc.src, tc.dst, tc.sizes)
			var p wire.Packet
			if err := wire.ParseIP(&p, datagram); err == nil && p.CheckICRC() == nil {
				t.Fatal("the uncut datagram passes as one packet")
			}
			got, ok := wire.SplitGSO(datagram)
			if !ok || len(got) != len(want) {
				t.Fatalf("SplitGSO: %d packets, ok %v; want %d", len(got), ok, len(want))
			}
			for k := range want {
				if !bytes.Equal(got[k], want[k]) {
					t.Errorf("packet %d\n got %x\nwant %x", k, got[k], want[k])
				}
			}
			// A segment that does not verify: not a GSO datagram.
			bad := append([]byte(nil), datagram...)
			bad[len(bad)-7] ^= 1
			if _, ok := wire.SplitGSO(bad); ok {
				t.Error("SplitGSO took a datagram with a corrupt segment")
			}
		})
	}
	one, _ := gsoRun(t, "10.0.0.1", "10.0.0.2", []int{64, 64})
	if _, ok := wire.SplitGSO(one[0]); ok {
		t.Error("SplitGSO cut a single packet")
	}
	for _, b := range [][]byte{nil, {0x45}, {0x60, 0, 0}, make([]byte, 40)} {
		if _, ok := wire.SplitGSO(b); ok {
			t.Errorf("SplitGSO(%x) ok", b)
		}
	}
}

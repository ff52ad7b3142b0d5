package wire_test

import (
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/gorxe/gorxe/internal/pcaptest"

	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
)

// rocePackets returns the Ethernet frames of a pcap file that carry UDP to
// port 4791.
func rocePackets(t testing.TB, path string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, data := range pcaptest.Read(t, path).Frames {
		if isRoCE(data) {
			out = append(out, data)
		}
	}
	return out
}

// isRoCE reports whether an untagged Ethernet frame carries UDP to 4791,
// independently of the parser under test.
func isRoCE(f []byte) bool {
	if len(f) < 14 {
		return false
	}
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		ihl := int(f[14]&0xf) * 4
		return len(f) >= 14+ihl+4 && f[23] == 17 && binary.BigEndian.Uint16(f[14+ihl+2:]) == wire.UDPPort
	case 0x86dd:
		return len(f) >= 14+40+4 && f[20] == 17 && binary.BigEndian.Uint16(f[14+40+2:]) == wire.UDPPort
	}
	return false
}

// TestRxeCaptures checks every RoCE packet of the kernel rxe captures: it
// parses, its ICRC verifies, and building it from the parsed fields gives
// back the same bytes.
func TestRxeCaptures(t *testing.T) {
	files, err := filepath.Glob("../testdata/rxe/*.pcap")
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures: %v", err)
	}
	seen := map[bth.Opcode]int{}
	total := 0
	for _, file := range files {
		for i, frame := range rocePackets(t, file) {
			var p wire.Packet
			if err := wire.ParseFrame(&p, frame); err != nil {
				t.Fatalf("%s packet %d: %v", file, i, err)
			}
			if err := p.CheckICRC(); err != nil {
				t.Fatalf("%s packet %d (%v): %v", file, i, p.BTH.Opcode(), err)
			}
			ipLen := len(p.IP) + len(p.UDP) + len(p.Transport()) + wire.ICRCLen
			assertRebuilds(t, &p, frame[len(p.Eth):len(p.Eth)+ipLen])
			seen[p.BTH.Opcode()]++
			total++
		}
	}
	t.Logf("%d RoCE packets: %v", total, seen)
	// The captures exercise these opcodes (testdata/rxe/README.md).
	for _, op := range []bth.Opcode{
		bth.RCSendOnly, bth.RCSendFirst, bth.RCSendLast,
		bth.RCRDMAWriteFirst, bth.RCRDMAWriteMiddle, bth.RCRDMAWriteLast, bth.RCRDMAWriteOnly,
		bth.RCRDMAReadRequest, bth.RCRDMAReadResponseFirst, bth.RCRDMAReadResponseMiddle,
		bth.RCRDMAReadResponseLast, bth.RCRDMAReadResponseOnly,
		bth.RCAcknowledge, bth.RCAtomicAcknowledge, bth.RCCompareSwap, bth.RCFetchAdd,
		bth.UDSendOnly,
	} {
		if seen[op] == 0 {
			t.Errorf("no %v packet in the captures", op)
		}
	}
}

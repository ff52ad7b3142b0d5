package wire_test

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
)

// The gorxe <-> kernel rxe captures in testdata/interop (see its README):
// test/interop/interop.sh took them on the bridge between gorxe and a VM
// running stock perftest on rxe. Each names who sent what: the rxe host is
// 10.9.0.2 or fd09::2, gorxe the other end.
var interopCaptures = []struct {
	file string
	// fromGorxe and fromRxe are opcodes each side must have sent.
	fromGorxe, fromRxe []bth.Opcode
	// retransmits says the capture shows a PSN sent more than once.
	retransmits bool
}{
	{file: "gorxe-client-send_lat-udp-mtu4096.pcap",
		fromGorxe: []bth.Opcode{bth.RCSendOnly, bth.RCAcknowledge},
		fromRxe:   []bth.Opcode{bth.RCSendOnly, bth.RCAcknowledge}},
	{file: "gorxe-client-send_bw-tap-mtu4096.pcap",
		fromGorxe: []bth.Opcode{bth.RCSendOnly},
		fromRxe:   []bth.Opcode{bth.RCAcknowledge}},
	{file: "gorxe-client-read_lat-tap-mtu4096.pcap",
		fromGorxe: []bth.Opcode{bth.RCRDMAReadRequest},
		fromRxe:   []bth.Opcode{bth.RCRDMAReadResponseFirst, bth.RCRDMAReadResponseMiddle}},
	{file: "gorxe-server-write_bw-tap-mtu1024.pcap",
		fromGorxe: []bth.Opcode{bth.RCAcknowledge},
		fromRxe:   []bth.Opcode{bth.RCRDMAWriteOnly}},
	{file: "gorxe-server-read_bw-udp-mtu1024.pcap",
		fromGorxe: []bth.Opcode{bth.RCRDMAReadResponseFirst, bth.RCRDMAReadResponseMiddle, bth.RCRDMAReadResponseLast},
		fromRxe:   []bth.Opcode{bth.RCRDMAReadRequest}},
	{file: "gorxe-server-atomic_fa-udp-mtu4096.pcap",
		fromGorxe: []bth.Opcode{bth.RCAtomicAcknowledge},
		fromRxe:   []bth.Opcode{bth.RCFetchAdd}},
	{file: "gorxe-server-atomic_cs-tap-mtu1024.pcap",
		fromGorxe: []bth.Opcode{bth.RCAtomicAcknowledge},
		fromRxe:   []bth.Opcode{bth.RCCompareSwap}},
}

// rxeHost reports whether addr is the VM's, the rxe end of a capture.
func rxeHost(addr netip.Addr) bool {
	return addr == netip.MustParseAddr("10.9.0.2") || addr == netip.MustParseAddr("fd09::2")
}

// TestInteropCaptures checks every packet gorxe and kernel rxe exchanged in
// the committed interop captures: it parses, its ICRC verifies (gorxe's
// over the udp link too, where the kernel wrote the IP header), it rebuilds
// byte for byte (but for a UDP checksum the kernel added), and each side sent what its test needs. No ACK either
// side sent is a NAK, except where a capture shows loss.
func TestInteropCaptures(t *testing.T) {
	for _, c := range interopCaptures {
		t.Run(c.file, func(t *testing.T) {
			frames := rocePackets(t, "../testdata/interop/"+c.file)
			if len(frames) == 0 {
				t.Fatal("no RoCE packets")
			}
			sent := map[bool]map[bth.Opcode]int{true: {}, false: {}} // by rxe?
			psns := map[bool]map[bth.PSN]int{true: {}, false: {}}
			dup := false
			for i, frame := range frames {
				var p wire.Packet
				if err := wire.ParseFrame(&p, frame); err != nil {
					t.Fatalf("packet %d: %v", i, err)
				}
				if err := p.CheckICRC(); err != nil {
					t.Fatalf("packet %d (%v from %v): %v", i, p.BTH.Opcode(), p.Src(), err)
				}
				// The kernel's UDP socket under gorxe's udp link fills in a
				// UDP checksum, which the capture shows before the virtual
				// NIC finished it; the rest must rebuild exactly.
				if binary.BigEndian.Uint16(p.UDP[6:]) == 0 {
					ipLen := len(p.IP) + len(p.UDP) + len(p.Transport()) + wire.ICRCLen
					assertRebuilds(t, &p, frame[len(p.Eth):len(p.Eth)+ipLen])
				}
				rxe := rxeHost(p.Src())
				op := p.BTH.Opcode()
				sent[rxe][op]++
				if p.Info.Has(wire.ExtAETH) && p.AETH.Syndrome().Type() == aeth.TypeNAK && !c.retransmits {
					t.Errorf("packet %d: %v from %v is a NAK (%v) in a capture without loss", i, op, p.Src(), p.AETH.Syndrome())
				}
				if !p.Info.Response {
					if psns[rxe][p.BTH.PSN()]++; psns[rxe][p.BTH.PSN()] > 1 {
						dup = true
					}
				}
			}
			for _, op := range c.fromGorxe {
				if sent[false][op] == 0 {
					t.Errorf("gorxe sent no %v; it sent %v", op, sent[false])
				}
			}
			for _, op := range c.fromRxe {
				if sent[true][op] == 0 {
					t.Errorf("rxe sent no %v; it sent %v", op, sent[true])
				}
			}
			if dup != c.retransmits {
				t.Errorf("a request PSN sent twice: %v, want %v", dup, c.retransmits)
			}
			t.Logf("%d packets; gorxe sent %v; rxe sent %v", len(frames), sent[false], sent[true])
		})
	}
}

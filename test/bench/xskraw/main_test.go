package main

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/wire"
)

// TestFrame checks the frames xskraw sends: lengths, addresses, the port
// the XDP program redirects, and an IPv4 header checksum that verifies.
func TestFrame(t *testing.T) {
	s := &side{mac: net.HardwareAddr{2, 0, 0, 0, 0, 1}, ip: netip.MustParseAddr("10.77.0.1"), mtu: 9000}
	o := &options{to: "10.77.0.2", mac: "02:00:00:00:00:02", port: 4791}
	if err := o.peer(); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{64, 4096, 4170} {
		f, err := s.frame(o, size)
		if err != nil {
			t.Fatal(err)
		}
		if len(f) != size || !isOurs(f, 4791) || isOurs(f, 4792) {
			t.Errorf("%d-byte frame: length %d, isOurs %v", size, len(f), isOurs(f, 4791))
		}
		if got := binary.BigEndian.Uint16(f[ipStart+2:]); int(got) != size-ipStart {
			t.Errorf("%d-byte frame: IP total length %d", size, got)
		}
		if got := binary.BigEndian.Uint16(f[udpStart+4:]); int(got) != size-udpStart {
			t.Errorf("%d-byte frame: UDP length %d", size, got)
		}
		if !wire.IPv4(f[ipStart:udpStart]).ChecksumValid() {
			t.Errorf("%d-byte frame: IPv4 header does not verify", size)
		}
		if net.HardwareAddr(f[ethDst:ethSrc]).String() != o.mac || netip.AddrFrom4([4]byte(f[ipDst:ipDst+4])) != o.peerIP ||
			netip.AddrFrom4([4]byte(f[ipSrc:ipDst])) != s.ip {
			t.Errorf("%d-byte frame: addresses % x", size, f[:udpStart])
		}
	}
	for _, size := range []int{49, 9015} {
		if _, err := s.frame(o, size); err == nil {
			t.Errorf("%d-byte frame on a 9000-byte MTU: no error", size)
		}
	}
}

package fabric

import (
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/internal/monotime"
	"github.com/gorxe/gorxe/wire"
)

var (
	hostA = netip.MustParseAddr("10.0.0.1")
	hostB = netip.MustParseAddr("10.0.0.2")
	hostC = netip.MustParseAddr("10.0.0.3")
	host6 = netip.MustParseAddr("fd00::3")
)

// ip4 returns an n-byte IPv4 UDP packet to dst with traffic class tos and
// a right header checksum.
func ip4(dst netip.Addr, n int, tos uint8) []byte {
	b := make([]byte, n)
	h := wire.IPv4(b)
	h.Encode(&wire.IPv4Fields{TOS: tos, TotalLen: uint16(n), DontFrag: true, TTL: 64,
		Protocol: wire.ProtocolUDP, Src: hostA, Dst: dst})
	h.UpdateChecksum()
	return b
}

// ip6 returns an n-byte IPv6 UDP packet to dst with traffic class tc.
func ip6(dst netip.Addr, n int, tc uint8) []byte {
	b := make([]byte, n)
	h := wire.IPv6(b)
	h.SetTrafficClassFlowLabel(tc, 0x12345)
	h.SetPayloadLen(uint16(n - wire.IPv6Len))
	h.SetDst(dst)
	b[6] = wire.ProtocolUDP
	return b
}

// received is what a host got: each packet's arrival time and a copy.
type received struct {
	at   []monotime.Time
	pkts [][]byte
}

func (r *received) receive(now monotime.Time, pkt []byte) {
	r.at = append(r.at, now)
	r.pkts = append(r.pkts, append([]byte(nil), pkt...))
}

// newSwitch returns a switch on a new clock, with a recorder on every
// port.
func newSwitch(t *testing.T, c Config) (*Clock, *Switch, []*received) {
	t.Helper()
	clock := NewClock()
	s, err := NewSwitch(clock, c)
	if err != nil {
		t.Fatal(err)
	}
	rs := make([]*received, s.Ports())
	for i := range rs {
		rs[i] = new(received)
		if err := s.OnReceive(i, rs[i].receive); err != nil {
			t.Fatal(err)
		}
	}
	return clock, s, rs
}

// ports returns n port configurations at rate with delay, port i owning
// 10.0.0.(i+1).
func ports(n int, rate uint64, delay int64) []PortConfig {
	ps := make([]PortConfig, n)
	for i := range ps {
		ps[i] = PortConfig{Rate: rate, Delay: timeNs(delay), Addrs: []netip.Addr{netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)})}}
	}
	return ps
}

//go:build linux

package xdp_test

import (
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/internal/xdpprog"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/netns"
	"github.com/gorxe/gorxe/link/linktest"
	"github.com/gorxe/gorxe/link/xdp"
)

// open opens an xdp link on ifname inside ns, closed when t ends.
func open(t *testing.T, ns *netns.NS, c xdp.Config) *xdp.Link {
	t.Helper()
	var l *xdp.Link
	if err := ns.Do(func() (err error) {
		l, err = xdp.Open(c)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestLinktest runs the link conformance suite between two namespaces on
// a veth pair, the XDP program in driver and in generic mode, at MTU 1500
// (each frame in one UMEM frame) and 9000 (multi-buffer), over IPv4 and
// IPv6.
func TestLinktest(t *testing.T) {
	for _, mode := range []xdpprog.Mode{xdpprog.ModeDriver, xdpprog.ModeGeneric} {
		for _, mtu := range []int{1500, link.MaxPacket} {
			p := netns.NewPair(t, mtu)
			for _, fam := range []struct {
				name string
				a, b netip.Addr
			}{{"IPv4", p.A4, p.B4}, {"IPv6", p.A6, p.B6}} {
				t.Run(mode.String()+"/mtu"+itoa(mtu)+"/"+fam.name, func(t *testing.T) {
					linktest.Run(t, func(t *testing.T) (link.Link, link.Link, netip.Addr, netip.Addr) {
						a := open(t, p.A, xdp.Config{Interface: p.IfA, Mode: mode})
						b := open(t, p.B, xdp.Config{Interface: p.IfB, Mode: mode})
						return a, b, fam.a, fam.b
					})
				})
			}
		}
	}
}

func itoa(n int) string {
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

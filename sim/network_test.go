package sim

import (
	"net/netip"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link/mem/fabric"
	"github.com/gorxe/gorxe/rnic"
)

func addr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}) }

// testStar returns a network of one switch with n hosts, h1 to hn, at rate.
func testStar(t testing.TB, n int, rate uint64, c fabric.Config, dev rnic.Config) (*Network, []*Host) {
	t.Helper()
	for i := range n {
		c.Ports = append(c.Ports, fabric.PortConfig{Rate: rate, Delay: time.Microsecond, Addrs: []netip.Addr{addr(i + 1)}})
	}
	net := New(fabric.NewClock(), dev)
	s, err := net.AddSwitch(c)
	if err != nil {
		t.Fatal(err)
	}
	hosts := make([]*Host, n)
	for i := range hosts {
		if hosts[i], err = net.AddHost("h"+string(rune('1'+i)), s, i); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { net.Close() })
	return net, hosts
}

// TestOneFlow: one flow alone on a 40 Gb/s link moves what the link
// carries, in virtual time.
func TestOneFlow(t *testing.T) {
	net, h := testStar(t, 2, 40e9, fabric.Config{Buffer: 1 << 20}, rnic.Config{})
	f := &Flow{Name: "f", Src: h[0], Dst: h[1]}
	if err := net.AddFlow(f); err != nil {
		t.Fatal(err)
	}
	wall := time.Now()
	if err := net.Run(2 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	gbps := float64(f.Completed()*8) / 2e-3 / 1e9
	t.Logf("%.2f Gb/s of WRITEs completed; 2 ms in %v of wall time", gbps, time.Since(wall))
	if gbps < 37 || gbps > 40 {
		t.Errorf("%.2f Gb/s, want close to 40", gbps)
	}
}

// TestClosedDevicesStop: once its devices are closed, a network runs on
// without them: no turn of theirs runs, nothing completes, nothing fails.
func TestClosedDevicesStop(t *testing.T) {
	net, h := testStar(t, 2, 40e9, fabric.Config{Buffer: 1 << 20}, rnic.Config{})
	f := &Flow{Name: "f", Src: h[0], Dst: h[1]}
	if err := net.AddFlow(f); err != nil {
		t.Fatal(err)
	}
	if err := net.Run(time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := net.Close(); err != nil {
		t.Fatal(err)
	}
	done := f.Completed()
	if err := net.Run(time.Second); err != nil { // past every timer the QPs had armed
		t.Fatal(err)
	}
	if f.Completed() != done || net.Clock().Pending() != 0 {
		t.Errorf("after Close: %d bytes completed (%d before), %d events pending", f.Completed(), done, net.Clock().Pending())
	}
}

//go:build linux

package tap

import (
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/wire"
)

// TestMulticast: a link that joined an IPv4 group reports it (a bridge
// that snoops IGMP lists it as the group's member, and forwards the
// group's packets to it), receives what another link sends to the group
// and what it sends itself (looped back), and after its last LeaveGroup
// leaves it on the bridge too; an IPv6 group is refused.
func TestMulticast(t *testing.T) {
	needRoot(t)
	br := newBridge(t)
	writeFile(t, "/sys/class/net/"+br+"/bridge/multicast_snooping", "1")
	a := open(t, Config{Bridge: br, Addrs: []netip.Prefix{prefix("10.9.0.5/24")}})
	b := open(t, Config{Bridge: br, Addrs: []netip.Prefix{prefix("10.9.0.6/24")}})
	group := netip.MustParseAddr("239.1.2.3")
	mdb := func() string {
		out, err := exec.Command("bridge", "mdb", "show", "dev", br).CombinedOutput()
		if err != nil {
			t.Fatalf("bridge mdb show: %v: %s", err, out)
		}
		return string(out)
	}
	member := func() bool {
		m := mdb()
		return strings.Contains(m, "port "+b.name) && strings.Contains(m, group.String())
	}
	for range 2 {
		if err := b.JoinGroup(group); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 3*time.Second, "the bridge lists b in the group", member)
	if s := b.Stats(); s.IGMP != 1 {
		t.Errorf("IGMP messages after two joins: %d, want one report", s.IGMP)
	}
	rx := receiveAll(t, b)
	if err := a.Send([][]byte{rocePacket(t, a.Addrs()[0], group, 7, 64)}); err != nil {
		t.Fatal(err)
	}
	var p wire.Packet
	if err := wire.ParseIP(&p, next(t, rx)); err != nil || p.Dst() != group || p.BTH.PSN() != 7 {
		t.Fatalf("b received a packet to %v, PSN %d (%v), want PSN 7 to %v", p.Dst(), p.BTH.PSN(), err, group)
	}
	// A member gets what it sends to the group itself, as a host's
	// kernel loops it back: its Receive, waiting, wakes for it.
	if err := b.Send([][]byte{rocePacket(t, b.Addrs()[0], group, 8, 64)}); err != nil {
		t.Fatal(err)
	}
	if err := wire.ParseIP(&p, next(t, rx)); err != nil || p.Dst() != group || p.Src() != b.Addrs()[0] || p.BTH.PSN() != 8 {
		t.Fatalf("b received a packet from %v to %v, PSN %d (%v), want its own PSN 8 to %v", p.Src(), p.Dst(), p.BTH.PSN(), err, group)
	}
	if s := b.Stats(); s.Looped != 1 {
		t.Errorf("looped back %d packets, want 1", s.Looped)
	}
	for range 2 {
		if err := b.LeaveGroup(group); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, "the bridge drops b from the group", func() bool { return !member() })
	if s := b.Stats(); s.IGMP != 2 {
		t.Errorf("IGMP messages after the last leave: %d, want a report and a leave", s.IGMP)
	}
	if err := b.Send([][]byte{rocePacket(t, b.Addrs()[0], group, 9, 64)}); err != nil {
		t.Fatal(err)
	}
	if s := b.Stats(); s.Looped != 1 {
		t.Errorf("a packet to a group left was looped back (%d looped)", s.Looped)
	}
	if err := b.LeaveGroup(group); err == nil {
		t.Error("left a group not joined")
	}
	if err := b.JoinGroup(netip.MustParseAddr("ff0e::1")); err == nil {
		t.Error("joined an IPv6 group")
	}
	if err := b.LeaveGroup(netip.MustParseAddr("ff0e::1")); err == nil {
		t.Error("left an IPv6 group never joined")
	}
}

package udp_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/netns"
	"github.com/gorxe/gorxe/link/udp"
	"github.com/gorxe/gorxe/wire"
)

// TestMulticast: between two namespaces on a veth pair, a packet a link
// sends to a multicast group reaches each link that joined the group,
// the sender too (the kernel loops it back), as a whole packet sent to
// the group whose ICRC checks; after the last LeaveGroup a link gets no
// more; a group of the other family, or no group, is refused.
func TestMulticast(t *testing.T) {
	p := netns.NewPair(t, 0)
	for _, tc := range []struct {
		name  string
		a, b  netip.Addr
		group netip.Addr
	}{
		{"IPv4", p.A4, p.B4, netip.MustParseAddr("239.1.2.3")},
		{"IPv6", p.A6, p.B6, netip.MustParseAddr("ff0e::42")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ea, eb := env{p.A}, env{p.B}
			a := ea.open(t, udp.Config{Addr: tc.a})
			b := eb.open(t, udp.Config{Addr: tc.b})
			must(t, eb.do(func() error { return b.JoinGroup(tc.group) }))
			must(t, eb.do(func() error { return b.JoinGroup(tc.group) })) // nested: one LeaveGroup keeps it
			must(t, ea.do(func() error { return a.JoinGroup(tc.group) }))
			send := func(psn uint32) []byte {
				pkt := build(t, frame(tc.a, tc.group, a.SourcePort(), wire.UDPPort, psn, 64, 0))
				if err := a.Send([][]byte{pkt}); err != nil {
					t.Fatal(err)
				}
				return pkt[link.Headroom:]
			}
			// A host's membership may take a moment to hold (IPv6's does
			// on a veth just up): send until b has one, then start clean.
			warm := time.Now()
			for pending(b, 20*time.Millisecond) == 0 {
				if time.Since(warm) > timeout {
					t.Fatal("b got nothing sent to the group it joined")
				}
				send(1)
			}
			t.Logf("the first packet to the group arrived after %v", time.Since(warm).Round(time.Millisecond))
			pending(b, 50*time.Millisecond)
			pending(a, 0)
			want := send(7)
			for _, l := range []*udp.Link{b, a} {
				got := collect(t, l, 1)[0]
				pk := parse(t, got)
				if pk.Dst() != tc.group || pk.Src() != tc.a || pk.BTH.PSN() != 7 {
					t.Fatalf("%v got a packet from %v to %v, PSN %d; want from %v to %v, PSN 7", l.Addrs()[0], pk.Src(), pk.Dst(), pk.BTH.PSN(), tc.a, tc.group)
				}
				if err := pk.CheckICRC(); err != nil {
					t.Errorf("%v: ICRC: %v", l.Addrs()[0], err)
				}
				if len(got) != len(want) {
					t.Errorf("%v: %d bytes, want %d", l.Addrs()[0], len(got), len(want))
				}
			}
			must(t, b.LeaveGroup(tc.group))
			send(8)
			if pk := parse(t, collect(t, b, 1)[0]); pk.BTH.PSN() != 8 {
				t.Fatalf("b after one of two leaves: PSN %d, want 8", pk.BTH.PSN())
			}
			collect(t, a, 1)
			must(t, b.LeaveGroup(tc.group))
			if err := b.LeaveGroup(tc.group); err == nil {
				t.Error("leaving a group not joined: no error")
			}
			send(9)
			collect(t, a, 1) // a still gets its own: b's would have come by now
			if k := pending(b, 50*time.Millisecond); k != 0 {
				t.Fatalf("b got %d packets after leaving the group", k)
			}
			other := netip.MustParseAddr("ff0e::43")
			if tc.group.Is6() {
				other = netip.MustParseAddr("239.1.2.4")
			}
			for _, g := range []netip.Addr{other, tc.b} {
				if err := eb.do(func() error { return b.JoinGroup(g) }); err == nil {
					t.Errorf("joined %v", g)
				}
			}
		})
	}
}

// pending waits d, then takes the packets l has waiting, without
// blocking, and returns how many.
func pending(l *udp.Link, d time.Duration) int {
	time.Sleep(d)
	r := newReceiver()
	n := 0
	for {
		k, _ := l.TryReceive(r.bufs, r.sizes)
		if k == 0 {
			return n
		}
		n += k
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

//go:build linux

package tap

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/gorxe/gorxe/link"
)

// TestPing pings the link from the kernel: the test's namespace is a host
// on the same bridge, resolving the link with the kernel's own ARP and
// neighbour discovery and sending echo requests from a raw ICMP socket, as
// iputils ping does (so the test needs no ping binary).
func TestPing(t *testing.T) {
	needRoot(t)
	l, br := beside(t, Config{LinkLocal: true})
	receiveAll(t, l) // a device is receiving; echo never reaches it
	ll := link.LinkLocal(l.MAC())
	if a := l.Addrs(); len(a) != 3 || a[0] != ll {
		t.Fatalf("Addrs() = %v, want %v first", a, ll)
	}

	for _, tt := range []struct {
		name, network, local, remote string
		proto                        int
		request, reply               icmp.Type
	}{
		{"IPv4", "ip4:icmp", "10.9.0.1", "10.9.0.5", 1, ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply},
		{"IPv6", "ip6:ipv6-icmp", "fd00::1", "fd00::5", 58, ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply},
		{"link-local", "ip6:ipv6-icmp", "fe80::1%" + br, ll.WithZone(br).String(), 58, ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := icmp.ListenPacket(tt.network, tt.local)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			local, remote := netip.MustParseAddr(tt.local), netip.MustParseAddr(tt.remote)
			before := l.Stats().ICMP
			for seq := 1; seq <= 3; seq++ {
				data := []byte("gorxe ping payload")
				req := icmp.Message{Type: tt.request, Body: &icmp.Echo{ID: 0x4242, Seq: seq, Data: data}}
				b, err := req.Marshal(nil) // the kernel fills in the ICMPv6 checksum
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.WriteTo(b, &net.IPAddr{IP: remote.AsSlice(), Zone: remote.Zone()}); err != nil {
					t.Fatal(err)
				}
				c.SetReadDeadline(time.Now().Add(3 * time.Second))
				for {
					buf := make([]byte, 1500)
					n, from, err := c.ReadFrom(buf)
					if err != nil {
						t.Fatalf("seq %d: no echo reply: %v (link stats %+v)", seq, err, l.Stats())
					}
					m, err := icmp.ParseMessage(tt.proto, buf[:n])
					if err != nil || m.Type != tt.reply {
						continue // neighbour discovery and the like
					}
					e, ok := m.Body.(*icmp.Echo)
					if !ok || e.ID != 0x4242 || e.Seq != seq {
						continue
					}
					if from.String() != tt.remote || string(e.Data) != string(data) {
						t.Fatalf("seq %d: reply from %v with data %q", seq, from, e.Data)
					}
					if !checksumOK(tt.proto, remote, local, buf[:n]) {
						t.Fatalf("seq %d: reply has a bad checksum: %x", seq, buf[:n])
					}
					break
				}
			}
			if got := l.Stats().ICMP - before; got != 3 {
				t.Fatalf("link answered %d echo requests, want 3", got)
			}
		})
	}
	if s := l.Stats(); s.ARP == 0 || s.NDP == 0 {
		t.Fatalf("the kernel resolved the link without ARP or NDP: %+v", s)
	}
}

// checksumOK checks an ICMP (proto 1) or ICMPv6 (58, with the pseudo-header
// of src and dst) message's checksum, written out here independently of the
// package's own.
func checksumOK(proto int, src, dst netip.Addr, msg []byte) bool {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	if proto == 58 {
		add(src.AsSlice())
		add(dst.AsSlice())
		sum += uint32(len(msg)) + 58
	}
	add(msg)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return sum == 0xffff
}

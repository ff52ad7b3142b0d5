package udp_test

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/netns"
	"github.com/gorxe/gorxe/link/udp"
	"github.com/gorxe/gorxe/wire"
)

// sniffer captures the Ethernet frames arriving on an interface.
type sniffer struct{ fd int }

// sniff opens an AF_PACKET socket on ifname inside ns.
func sniff(t *testing.T, ns *netns.NS, ifname string) *sniffer {
	t.Helper()
	proto := int(htons(unix.ETH_P_ALL))
	var fd int
	err := ns.Do(func() error {
		ifc, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifc.Index})
	})
	if err != nil {
		t.Fatalf("AF_PACKET socket on %s: %v", ifname, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return &sniffer{fd: fd}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// next returns the next RoCE v2 packet the sniffer sees, parsed from its
// Ethernet frame, skipping everything else.
func (s *sniffer) next(t *testing.T) (*wire.Packet, []byte) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 16384)
	for time.Now().Before(deadline) {
		n, _, err := unix.Recvfrom(s.fd, buf, 0)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatalf("capture: %v", err)
		}
		p := new(wire.Packet)
		if wire.ParseFrame(p, buf[:n]) == nil && p.DstPort() == wire.UDPPort {
			return p, append([]byte(nil), buf[:n]...)
		}
	}
	t.Fatalf("no RoCE packet captured in %v", timeout)
	return nil, nil
}

// TestOnTheWire captures what the kernel puts on a veth for packets a
// link sends, as a device builds them: IPv4 with ID 0 and DF, whatever the
// TOS, so the ICRC the device computed is valid on the wire; IPv6 with a
// valid ICRC; and the TOS the link chose.
func TestOnTheWire(t *testing.T) {
	p := netns.NewPair(t, 0)
	for _, fam := range []struct {
		name string
		a, b netip.Addr
	}{{"IPv4", p.A4, p.B4}, {"IPv6", p.A6, p.B6}} {
		t.Run(fam.name, func(t *testing.T) {
			a := env{p.A}.open(t, udp.Config{Addr: fam.a})
			b := env{p.B}.open(t, udp.Config{Addr: fam.b})
			sn := sniff(t, p.B, p.IfB)
			tcs := []struct{ sent, want uint8 }{{0x00, 0x02}, {0x02, 0x02}, {0x60, 0x62}, {0x62, 0x62}, {0xb9, 0xb9}}
			for i, tc := range tcs {
				want := packets(t, a, b, uint32(i), 1, 100+i, tc.sent)
				if err := a.Send(want); err != nil {
					t.Fatal(err)
				}
				got, frame := sn.next(t)
				if err := got.CheckICRC(); err != nil {
					t.Errorf("TOS %#x: captured packet: %v\n%x", tc.sent, err, frame)
				}
				if got.TrafficClass() != tc.want {
					t.Errorf("TOS %#x: on the wire %#x, want %#x", tc.sent, got.TrafficClass(), tc.want)
				}
				if got.SrcPort() != a.SourcePort() {
					t.Errorf("source port %d, want %d", got.SrcPort(), a.SourcePort())
				}
				if fam.a.Is4() {
					if id := binary.BigEndian.Uint16(got.IP[4:]); id != 0 {
						t.Errorf("TOS %#x: IPv4 ID %#x on the wire, want 0", tc.sent, id)
					}
					if got.IP[6]&0x40 == 0 {
						t.Errorf("TOS %#x: DF clear on the wire", tc.sent)
					}
				}
			}
			collect(t, b, len(tcs))
		})
	}
}

// TestTooBig sends a packet larger than the path MTU between two good
// ones: with DF the kernel refuses it, and only it.
func TestTooBig(t *testing.T) {
	p := netns.NewPair(t, 1500)
	a := env{p.A}.open(t, udp.Config{Addr: p.A4, MTU: link.MaxPacket})
	b := env{p.B}.open(t, udp.Config{Addr: p.B4})
	if b.MTU() != 1500 {
		t.Errorf("MTU() = %d, want the veth's 1500", b.MTU())
	}
	bufs := packets(t, a, b, 0, 3, 64, 0)
	bufs[1] = packets(t, a, b, 1, 1, 4000, 0)[0]
	if err := a.Send(bufs); err != nil {
		t.Fatal(err)
	}
	got := collect(t, b, 2)
	sameRoCE(t, got[0], bufs[0][link.Headroom:])
	sameRoCE(t, got[1], bufs[2][link.Headroom:])
	if s := a.Stats(); s.Sent != 2 || s.SendErrors != 1 {
		t.Errorf("Stats = %+v, want 2 sent, 1 send error", s)
	}
}

// TestRunsOnTheWire sends runs of equally long packets, which the link
// hands the kernel as one datagram each (UDP GSO), and captures them after
// the kernel cut them, as it does for a NIC without segmentation offload:
// the packets on the wire are the ones the device built, each with a valid
// ICRC. Over IPv4 that means the ICRC of the IP ID the kernel numbered:
// 0, 1, 2, ... along each run. A run ends after a shorter packet, and at
// another TOS. With NoGSO every packet is a datagram of its own.
func TestRunsOnTheWire(t *testing.T) {
	type part struct{ n, size int }
	parts := []part{{10, 1000}, {1, 400}, {5, 1000}, {3, 1000}}
	wantIDs := []uint16{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1, 2, 3, 4, 0, 1, 2}
	for _, noGSO := range []bool{false, true} {
		p := netns.NewPair(t, 1500)
		// Cut datagrams before the veth, which would carry them whole.
		p.A.IP(t, "link", "set", p.IfA, "gso_max_segs", "1")
		for _, fam := range [][2]netip.Addr{{p.A4, p.B4}, {p.A6, p.B6}} {
			a := env{p.A}.open(t, udp.Config{Addr: fam[0], NoGSO: noGSO})
			b := env{p.B}.open(t, udp.Config{Addr: fam[1]})
			s := sniff(t, p.B, p.IfB)
			var bufs [][]byte
			psn := uint32(500)
			for i, pt := range parts {
				tc := uint8(0)
				if i == 3 {
					tc = 0x10 // another TOS: a run of its own
				}
				bufs = append(bufs, packets(t, a, b, psn, pt.n, pt.size, tc)...)
				psn += uint32(pt.n)
			}
			if err := a.Send(bufs); err != nil {
				t.Fatal(err)
			}
			for i, want := range bufs {
				got, frame := s.next(t)
				if err := got.CheckICRC(); err != nil {
					t.Fatalf("%v noGSO=%v: packet %d: %v\n%x", fam[0], noGSO, i, err, frame)
				}
				sameRoCE(t, frame[14:], want[link.Headroom:])
				if fam[0].Is4() {
					id := binary.BigEndian.Uint16(got.IP[4:])
					if want := map[bool]uint16{false: wantIDs[i], true: 0}[noGSO]; id != want {
						t.Errorf("%v noGSO=%v: packet %d has IP ID %d, want %d", fam[0], noGSO, i, id, want)
					}
				}
			}
			got := collect(t, b, len(bufs))
			for i := range bufs {
				sameRoCE(t, got[i], bufs[i][link.Headroom:])
			}
			wantRuns := uint64(3)
			if noGSO {
				wantRuns = 0
			}
			if st := a.Stats(); st.Sent != uint64(len(bufs)) || st.Runs != wantRuns || st.SendErrors != 0 {
				t.Errorf("%v noGSO=%v: Stats = %+v, want %d sent in %d runs", fam[0], noGSO, st, len(bufs), wantRuns)
			}
		}
	}
}

//go:build linux

package tap

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/ether"
	"github.com/gorxe/gorxe/wire"
)

// TestRunsAsOneFrame sends runs of equally long packets to one peer, each
// of which the link writes as one frame for the kernel to cut (gso.go),
// and checks what the peer reads: every packet, in order, one a frame,
// with its transport as sent, its ICRC right for the IP header the kernel
// gave it (over IPv4 the run's segment k has ID k), and its UDP checksum
// right. A shorter packet ends a run; packets to another port, or too
// short for a run, go alone.
func TestRunsAsOneFrame(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct{ name, a, b string }{
		{"IPv4", "10.9.0.5/24", "10.9.0.6/24"},
		{"IPv6", "fd00::5/64", "fd00::6/64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t, tc.a, tc.b)
			ch := receiveAll(t, b)
			src, dst := a.Addrs()[0], b.Addrs()[0]
			// The first packet waits for the neighbour's address.
			if err := a.Send([][]byte{rocePacket(t, src, dst, 0, 8)}); err != nil {
				t.Fatal(err)
			}
			next(t, ch)

			var pkts [][]byte
			var runOf []int // each packet's place in its run
			add := func(n, size int, sport uint16, k0 int) {
				for k := range n {
					pkts = append(pkts, rocePacketFrom(t, src, dst, sport, uint32(len(pkts)+1), size))
					runOf = append(runOf, k0+k)
				}
			}
			add(20, 1024, 0xc000, 0) // a run
			add(1, 300, 0xc000, 20)  // its last, shorter packet
			add(3, 1024, 0xc000, 0)  // a run of its own, after the shorter one
			add(1, 1024, 50000, 0)   // another flow
			add(1, 1024, 0xc000, 0)  // a run after the other flow's
			add(1, 256, 0xc000, 1)   // its shorter last
			add(1, 256, 0xc000, 0)   // too short for a run: alone
			add(1, 256, 0xc000, 0)
			out0 := a.Stats()
			if err := a.Send(pkts); err != nil {
				t.Fatal(err)
			}
			for i, want := range pkts {
				got := next(t, ch)
				var p, w wire.Packet
				if err := wire.ParseIP(&w, want[link.Headroom:]); err != nil {
					t.Fatal(err)
				}
				if err := wire.ParseIP(&p, got); err != nil {
					t.Fatalf("packet %d does not parse: %v", i, err)
				}
				if !bytes.Equal(p.Transport(), w.Transport()) || p.Src() != w.Src() || p.Dst() != w.Dst() || p.SrcPort() != w.SrcPort() {
					t.Fatalf("packet %d differs\n got %x\nwant %x", i, got, want[link.Headroom:])
				}
				if err := p.CheckICRC(); err != nil {
					t.Errorf("packet %d: %v", i, err)
				}
				if got[0]>>4 == 4 {
					if id := wire.IPv4(got).ID(); id != uint16(runOf[i]) {
						t.Errorf("packet %d: IP ID %d, want %d", i, id, runOf[i])
					}
				}
				if c := udpChecksum(got); c != 0 && c != 0xffff {
					t.Errorf("packet %d: UDP checksum wrong (sum %#x)", i, c)
				}
			}
			s := a.Stats()
			if d := s.GSOWrites - out0.GSOWrites; d != 3 {
				t.Errorf("%d runs written as one frame, want 3", d)
			}
			if d := s.FramesOut - out0.FramesOut; d != uint64(len(pkts)) {
				t.Errorf("%d frames out, want %d", d, len(pkts))
			}
		})
	}
}

func ipLen(ip []byte) int {
	if ip[0]>>4 == 4 {
		return wire.IPv4Len
	}
	return wire.IPv6Len
}

// udpChecksum returns the ones' complement sum over ip's UDP datagram and
// pseudo-header: 0xffff when its checksum is right, 0 for none (IPv4).
func udpChecksum(ip []byte) uint16 {
	h := ipLen(ip)
	udp := ip[h:]
	if binary.BigEndian.Uint16(udp[6:]) == 0 {
		return 0
	}
	var src, dst []byte
	if h == wire.IPv4Len {
		src, dst = ip[12:16], ip[16:20]
	} else {
		src, dst = ip[8:24], ip[24:40]
	}
	return wire.Checksum(udp, wire.PseudoHeaderChecksum(protoUDP, src, dst, uint16(len(udp))))
}

// TestRunRefused: where the kernel refuses a run written as one frame
// (EINVAL, as before Linux 6.2), the run's packets go one a frame, and so
// does every run after it.
func TestRunRefused(t *testing.T) {
	needRoot(t)
	a, b := pair(t, "10.9.0.5/24", "10.9.0.6/24")
	ch := receiveAll(t, b)
	src, dst := a.Addrs()[0], b.Addrs()[0]
	if err := a.Send([][]byte{rocePacket(t, src, dst, 0, 8)}); err != nil {
		t.Fatal(err)
	}
	next(t, ch)
	// A run whose segment size the kernel cannot take: cut at 1 byte, its
	// frame would be more segments than UDP_MAX_SEGMENTS.
	mac, ok := a.lookup(dst)
	if !ok {
		t.Fatal("the peer's MAC address is not known")
	}
	r := runPool.Get().(*gsoRun)
	defer runPool.Put(r)
	var pkts [][]byte
	for i := range 4 {
		p := rocePacket(t, src, dst, uint32(i+1), 1024)
		pkts = append(pkts, p)
		vf := p[link.Headroom-ether.HeaderLen-vnetHdrLen:]
		ether.PutHeader(vf[vnetHdrLen:], mac, a.mac, ether.TypeIPv4)
		if i == 0 {
			r.start(vf)
		} else if !r.join(vf) {
			t.Fatal("packet did not join the run")
		}
	}
	r.seg = 1
	if err := a.flush(r); err != nil {
		t.Fatal(err)
	}
	if !a.noGSO.Load() {
		t.Fatal("the link still writes runs as one frame")
	}
	for i := range pkts {
		got := next(t, ch)
		var p wire.Packet
		if err := wire.ParseIP(&p, got); err != nil || p.CheckICRC() != nil {
			t.Fatalf("packet %d: %x", i, got)
		}
	}
	if a.Stats().GSOWrites != 0 {
		t.Errorf("%d runs written as one frame", a.Stats().GSOWrites)
	}
}

package rsocket

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/rnic/rnictest"
)

// FuzzDatagramUDP feeds what a stranger may send to a datagram socket's
// UDP port to its UDP service, from one address: nothing panics, a
// datagram is delivered only behind a well-formed data header and is the
// message's tail, and the peers learnt stay one.
func FuzzDatagramUDP(f *testing.F) {
	hdr := func(ver, op, hlen byte, qpn uint32, addr []byte) []byte {
		h := make([]byte, 8, 28)
		binary.BigEndian.PutUint32(h, dsUDPTag)
		h[4], h[5], h[6] = ver, op, hlen
		h = binary.BigEndian.AppendUint32(h, qpn)
		return append(h, addr...)
	}
	f.Add(append(hdr(4, opData, dsUDPHdrLen4, 0x12, []byte{127, 0, 0, 1}), "hello"...))
	f.Add(hdr(4, opCtrl, dsUDPHdrLen4, 0xffffff, []byte{127, 0, 0, 1}))
	f.Add(hdr(6, opData, dsUDPHdrLen6, 7, make([]byte, 16)))
	f.Add(hdr(4, opData, 200, 1, []byte{1, 2, 3, 4}))
	f.Add([]byte{0x55, 0x55, 0x55})

	dev := rnictest.Open(f, mem.NewFabric(), "127.0.0.1")
	c, err := ListenPacket(dev, netip.MustParseAddrPort("127.0.0.1:0"), PacketOptions{})
	if err != nil {
		f.Fatal(err)
	}
	defer c.Close()
	// The stranger: a UDP socket of the test's, which takes the answers.
	sink, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		f.Fatal(err)
	}
	defer sink.Close()
	from := sink.LocalAddr().(*net.UDPAddr).AddrPort()

	f.Fuzz(func(t *testing.T, msg []byte) {
		c.udpMessage(msg, from)
		select {
		case d := <-c.inbox:
			ok := len(msg) >= dsUDPHdrLen4 && binary.BigEndian.Uint32(msg) == dsUDPTag && msg[5] == opData
			if !ok || !bytes.HasSuffix(msg, d.data) || len(d.data) > len(msg)-dsUDPHdrLen4 || d.from != from {
				t.Fatalf("delivered %x from %v, out of %x", d.data, d.from, msg)
			}
		default:
		}
		c.mu.Lock()
		n := len(c.dests)
		c.mu.Unlock()
		if n > 1 {
			t.Fatalf("%d peers learnt from one address", n)
		}
		if c.ctx.Err() != nil {
			t.Fatalf("the socket stopped: %v", c.stopErr())
		}
	})
}

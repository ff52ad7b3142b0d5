package udp

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"unsafe"
)

// More addresses than one (Config.Also).
//
// A RoCE device has every address of its interface as a GID, and the
// kernel's rdma_cm listening on the wildcard address is reached at any
// of them: IPv4 or IPv6, the EUI-64 link-local address or another. The
// link's own socket is bound to one address (the ICRC covers the source
// address, so the device must know which one a packet leaves from). Each
// further address has a socket of its own, bound to it and the link's
// port, with the same options. A goroutine reads it and hands its
// packets on through the queue the multicast groups' take, and Send
// writes a packet whose source is that address through it, one at a
// time: a connection that runs from such an address takes the slower
// road, and the link's own traffic does not take one step more.

// extra is one of Config.Also's addresses and its socket.
type extra struct {
	addr netip.Addr // unmapped, without zone
	zone string     // addr's IPv6 zone, for link-local destinations
	conn *net.UDPConn
	done chan struct{} // closed when its reader has returned
}

// openAlso opens a socket on each of addrs, at the link's port, and
// starts its reader.
func (l *Link) openAlso(addrs []netip.Addr, bufSize int) error {
	for _, a := range addrs {
		zone := a.Zone()
		a = a.Unmap().WithZone("")
		if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() {
			return fmt.Errorf("%w: %v", ErrAddr, a)
		}
		if slices.Contains(l.addrs, a) {
			return fmt.Errorf("udp: %v is given twice", a)
		}
		scope, err := zoneIndex(zone)
		if err != nil {
			return fmt.Errorf("udp: zone of %v: %w", a, err)
		}
		fd, err := bindSock(a, l.port, scope, func(fd int) error { return setSockopts(fd, a, bufSize) })
		if err != nil {
			return fmt.Errorf("udp: bind %v: %w", netip.AddrPortFrom(a, l.port), err)
		}
		f := os.NewFile(uintptr(fd), "udp:"+a.String())
		pc, err := net.FilePacketConn(f)
		f.Close() // FilePacketConn keeps a duplicate
		if err != nil {
			return fmt.Errorf("udp: %v: %w", a, err)
		}
		x := &extra{addr: a, zone: zone, conn: pc.(*net.UDPConn), done: make(chan struct{})}
		l.also = append(l.also, x)
		l.addrs = append(l.addrs, a)
		go l.readSide(x.conn, a, x.done)
	}
	return nil
}

// closeAlso closes Config.Also's sockets and waits for their readers.
func (l *Link) closeAlso() {
	for _, x := range l.also {
		x.conn.Close()
		<-x.done
	}
}

// sendAlso sends each packet of bufs whose source is one of Config.Also's
// addresses through that address's socket, and returns the others, for
// the link's own socket, in keep.
func (l *Link) sendAlso(bufs, keep [][]byte) [][]byte {
	for _, buf := range bufs {
		dst, src, port, tos, payload, ok := l.parse(buf)
		i := -1
		if ok && src != l.addr {
			i = slices.IndexFunc(l.also, func(x *extra) bool { return x.addr == src })
		}
		if i < 0 {
			keep = append(keep, buf)
			continue
		}
		if l.also[i].send(dst, port, tos, payload) != nil {
			l.stats.sendErrors.Add(1)
			continue
		}
		l.stats.sent.Add(1)
	}
	return keep
}

// send sends one packet's UDP payload to dst:port with the TOS byte tos
// (see sendTOS).
func (x *extra) send(dst netip.Addr, port uint16, tos byte, payload []byte) error {
	var oob []byte
	if tos = sendTOS(tos); tos != defaultTOS {
		var b [txOOBWords]uint64 // aligned
		buf := unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), len(b)*8)
		oob = buf[:putTOS(buf, x.addr.Is4(), tos)]
	}
	if dst.Is6() && dst.IsLinkLocalUnicast() {
		dst = dst.WithZone(x.zone)
	}
	_, _, err := x.conn.WriteMsgUDPAddrPort(payload, oob, netip.AddrPortFrom(dst, port))
	return err
}

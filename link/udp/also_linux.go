package udp

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/link/internal/pollfd"
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
// packets on through the queue the multicast groups' take: a connection
// to such an address is read on a slower road, and the link's own
// traffic does not take one step more. Send writes a packet whose source
// is that address through its socket, as it writes the others through
// the link's own: in sendmmsg batches, runs as one datagram (a sender
// each, send_linux.go).

// extra is one of Config.Also's addresses and its socket.
type extra struct {
	sender
	addr netip.Addr    // unmapped, without zone
	conn *net.UDPConn  // the socket again, which its reader reads through the Go runtime's poller
	done chan struct{} // closed when its reader has returned
}

// openAlso opens a socket on each of addrs, at the link's port, and
// starts its reader.
func (l *Link) openAlso(addrs []netip.Addr, bufSize int) error {
	for _, a := range addrs {
		zone := a.Zone()
		a = a.Unmap().WithZone("")
		if !specific(a) {
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
		x := &extra{addr: a, done: make(chan struct{})}
		x.sender.l, x.v4, x.scope = l, a.Is4(), scope
		x.gso.Store(l.gso.Load())
		if x.sock, err = pollfd.New(fd); err != nil {
			unix.Close(fd)
			return fmt.Errorf("udp: %v: %w", a, err)
		}
		l.also = append(l.also, x) // for closeAlso, from here on
		dup, err := unix.Dup(fd)
		if err == nil {
			x.conn, err = fileConn(dup, "udp:"+a.String())
		}
		if err != nil {
			return fmt.Errorf("udp: %v: %w", a, err)
		}
		l.addrs = append(l.addrs, a)
		go l.readSide(x.conn, a, x.done)
	}
	return nil
}

// closeAlso closes Config.Also's sockets and waits for their readers.
func (l *Link) closeAlso() {
	for _, x := range l.also {
		x.sock.Close()
		if x.conn != nil {
			x.conn.Close()
			<-x.done
		}
	}
}

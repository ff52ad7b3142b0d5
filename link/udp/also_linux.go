package udp

import (
	"fmt"
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"
)

// More addresses than one (Config.Also).
//
// A RoCE device has every address of its interface as a GID, and the
// kernel's rdma_cm listening on the wildcard address is reached at any
// of them: IPv4 or IPv6, the EUI-64 link-local address or another. The
// link's own socket is bound to one address (the ICRC covers the source
// address, so the device must know which one a packet leaves from). Each
// further address has a socket of its own, bound to it and the link's
// port, with the same options. Receive reads them all, a batch from one
// and then from the next that has some (receive_linux.go), and waits on
// them all at once; Send writes a packet whose source is such an address
// through its socket, as it writes the others through the link's own:
// in sendmmsg batches, runs as one datagram (a sender each,
// send_linux.go).

// openAlso opens a socket on each of addrs, at the link's port, for Send
// and Receive.
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
		sock, err := openSock(a, l.port, scope, func(fd int) error {
			if err := setSockopts(fd, a, bufSize); err != nil {
				return err
			}
			if l.rx.gro {
				// As the link's own socket: Receive reads every socket
				// through buffers that have room for a joined datagram.
				if err := unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1); err != nil {
					return fmt.Errorf("setsockopt UDP_GRO: %w", err)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("udp: bind %v: %w", netip.AddrPortFrom(a, l.port), err)
		}
		x := &sender{l: l, sock: sock, v4: a.Is4(), scope: scope}
		x.gso.Store(l.gso.Load())
		l.also = append(l.also, x)
		l.alsoSocks = append(l.alsoSocks, sock)
		l.in = append(l.in, &rsock{sock: sock, addr: a})
		l.addrs = append(l.addrs, a)
	}
	return nil
}

// closeAlso closes Config.Also's sockets.
func (l *Link) closeAlso() {
	for _, x := range l.also {
		x.sock.Close()
	}
}

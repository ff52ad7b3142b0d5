package udp

import (
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/link/internal/pollfd"
)

// openSock returns a non-blocking UDP socket bound to addr:port, with
// setopts run on it before the bind. The Go runtime does not poll it
// (package pollfd says why): a busy-polling program reads it with
// TryReceive, and the link waits in poll(2) itself when it must.
func openSock(addr netip.Addr, port uint16, scope uint32, setopts func(fd int) error) (*pollfd.FD, error) {
	fd, err := bindSock(addr, port, scope, setopts)
	if err != nil {
		return nil, err
	}
	return pollfd.New(fd)
}

// bindSock returns a non-blocking UDP socket bound to addr:port, with
// setopts run on it before the bind.
func bindSock(addr netip.Addr, port uint16, scope uint32, setopts func(fd int) error) (int, error) {
	family := unix.AF_INET6
	var sa unix.Sockaddr = &unix.SockaddrInet6{Port: int(port), Addr: addr.As16(), ZoneId: scope}
	if addr.Is4() {
		family = unix.AF_INET
		sa = &unix.SockaddrInet4{Port: int(port), Addr: addr.As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, err
	}
	if err = setopts(fd); err == nil {
		err = unix.Bind(fd, sa)
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

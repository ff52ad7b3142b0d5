package udp

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/link"
)

// sock is the link's UDP socket, kept out of the Go runtime's poller on
// purpose. The runtime's poller watches every socket it knows, and a
// process with an idle P sleeps in epoll_wait: each datagram that arrives
// wakes that thread, to find that no goroutine waits for it, while a
// program busy polls the same socket. On a two-CPU machine those wake-ups
// take the CPU from the peer's busy poller, about a microsecond a round
// trip (measured with a busy raw UDP ping-pong, 6.8 against 7.7 µs). So
// the link waits itself, in poll(2), only when it has to: the receive
// goroutine's WaitReceive, a blocking Receive, a send with the socket's
// buffer full.
//
// Every call that uses fd holds mu shared; close writes efd, which ends
// every poll, and then takes mu to close the descriptors, so that no call
// ever uses a closed (or reused) descriptor.
type sock struct {
	mu     sync.RWMutex
	fd     int
	efd    int // eventfd: readable once the socket is closing
	closed atomic.Bool
}

// openSock returns a non-blocking UDP socket bound to addr:port, with
// setopts run on it before the bind.
func openSock(addr netip.Addr, port uint16, scope uint32, setopts func(fd int) error) (*sock, error) {
	family := unix.AF_INET6
	var sa unix.Sockaddr = &unix.SockaddrInet6{Port: int(port), Addr: addr.As16(), ZoneId: scope}
	if addr.Is4() {
		family = unix.AF_INET
		sa = &unix.SockaddrInet4{Port: int(port), Addr: addr.As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, err
	}
	if err = setopts(fd); err == nil {
		err = unix.Bind(fd, sa)
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &sock{fd: fd, efd: efd}, nil
}

// do runs fn on the socket's descriptor, or returns link.ErrClosed.
func (s *sock) do(fn func(fd int)) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return link.ErrClosed
	}
	fn(s.fd)
	return nil
}

// wait blocks until the socket is ready for events (POLLIN, POLLOUT) or
// has an error to report, and returns link.ErrClosed once it is closing.
func (s *sock) wait(events int16) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	fds := [2]unix.PollFd{{Fd: int32(s.fd), Events: events}, {Fd: int32(s.efd), Events: unix.POLLIN}}
	for {
		if s.closed.Load() {
			return link.ErrClosed
		}
		n, err := unix.Poll(fds[:], -1)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return err
		case fds[1].Revents != 0 || s.closed.Load():
			return link.ErrClosed
		case n > 0:
			return nil
		}
	}
}

// close wakes every wait, waits for the calls under way to return, and
// closes the socket. It returns link.ErrClosed if the socket was closed.
func (s *sock) close() error {
	if s.closed.Swap(true) {
		return link.ErrClosed
	}
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(s.efd, one[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	err := unix.Close(s.fd)
	unix.Close(s.efd)
	return err
}

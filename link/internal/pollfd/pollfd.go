//go:build linux

// Package pollfd is a non-blocking file descriptor that the Go runtime's
// poller does not watch, for the links' sockets and TAP devices.
//
// The runtime's poller watches every descriptor it knows, edge-triggered,
// and a process with an idle P sleeps in epoll_wait: each packet that
// arrives wakes that thread, to find that no goroutine waits for it, while
// a program busy polls the same descriptor. That is most of a context
// switch per packet, and on a two-CPU machine it takes the CPU from the
// peer's busy poller: a raw UDP ping-pong that busy polls took 7.7 µs on
// a socket the runtime polls and 6.8 µs on one it does not, and gorxe's
// write_lat client went from 69616 context switches per 100000 round
// trips to 9068. So a link reads and writes without waiting, and waits
// itself, in poll(2), only when it must.
//
// Every call that uses the descriptor holds the FD's lock shared. Close
// writes an eventfd that ends every Wait, then takes the lock to close the
// descriptors, so that no call ever uses a closed (or reused) descriptor.
// Kick writes a second eventfd, which ends a Wait as if the descriptor
// were ready: for a link that holds packets it read but has not handed on
// yet, which poll(2) on the descriptor cannot see. Wake writes a third,
// which only WaitWakeable watches: for one waiter that something other
// than the descriptor should wake, beside other waits that must go on.
package pollfd

import (
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/link"
)

// FD is a non-blocking file descriptor and the eventfd that wakes its
// waits.
type FD struct {
	mu     sync.RWMutex
	fd     int
	efd    int // readable once Close has begun
	kfd    int // readable after a Kick, until a Wait has seen it
	wfd    int // readable after a Wake, until a WaitWakeable has seen it
	closed atomic.Bool
}

// New takes fd, which must be non-blocking, and returns it as an FD; on
// error it closes fd.
func New(fd int) (*FD, error) {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	kfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		unix.Close(efd)
		return nil, err
	}
	wfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		unix.Close(efd)
		unix.Close(kfd)
		return nil, err
	}
	return &FD{fd: fd, efd: efd, kfd: kfd, wfd: wfd}, nil
}

// Do runs fn on the descriptor, or returns link.ErrClosed.
func (f *FD) Do(fn func(fd int)) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed.Load() {
		return link.ErrClosed
	}
	fn(f.fd)
	return nil
}

// Read reads once into b, without waiting: unix.EAGAIN when nothing is
// there, link.ErrClosed once the FD is closed.
func (f *FD) Read(b []byte) (int, error) { return f.io(unix.SYS_READ, b) }

// Write writes b once, without waiting: unix.EAGAIN when there is no
// room, link.ErrClosed once the FD is closed.
func (f *FD) Write(b []byte) (int, error) { return f.io(unix.SYS_WRITE, b) }

// SetIovec makes v describe b, for Readv, Writev and the links' own
// vectored system calls (sendmmsg, recvmmsg).
func SetIovec(v *unix.Iovec, b []byte) {
	v.Base = unsafe.SliceData(b)
	v.SetLen(len(b))
}

// Readv reads once into the buffers iov describes, without waiting, as
// Read does.
func (f *FD) Readv(iov []unix.Iovec) (int, error) {
	return f.raw(unix.SYS_READV, unsafe.Pointer(unsafe.SliceData(iov)), len(iov))
}

// Writev writes the buffers iov describes once, as one frame or datagram,
// without waiting, as Write does.
func (f *FD) Writev(iov []unix.Iovec) (int, error) {
	return f.raw(unix.SYS_WRITEV, unsafe.Pointer(unsafe.SliceData(iov)), len(iov))
}

// io is read(2) or write(2) of b as a raw system call, one the Go
// scheduler is not told of: the descriptor is non-blocking and b one
// frame, so the call cannot block and is over in microseconds, and the
// scheduler's bookkeeping would be a good part of its cost (60 ns on the
// development VM, on every poll of a busy-polling program).
func (f *FD) io(trap uintptr, b []byte) (int, error) {
	return f.raw(trap, unsafe.Pointer(unsafe.SliceData(b)), len(b))
}

// raw makes the system call trap on the descriptor, with p and n.
func (f *FD) raw(trap uintptr, p unsafe.Pointer, n int) (int, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed.Load() {
		return 0, link.ErrClosed
	}
	for {
		r, _, errno := unix.RawSyscall(trap, uintptr(f.fd), uintptr(p), uintptr(n))
		switch errno {
		case 0:
			return int(r), nil
		case unix.EINTR:
			continue
		}
		return 0, errno
	}
}

// Wait blocks until the descriptor is ready for events (unix.POLLIN,
// unix.POLLOUT) or has an error to report, and returns link.ErrClosed once
// the FD is closing.
func (f *FD) Wait(events int16) error {
	_, err := f.WaitFor(events, -1)
	return err
}

// WaitFor is Wait that gives up after timeoutMS milliseconds (never, if
// negative), and reports whether the descriptor became ready, or, waiting
// to read, a Kick came.
func (f *FD) WaitFor(events int16, timeoutMS int) (bool, error) {
	return f.wait(events, nil, timeoutMS, false)
}

// WaitReadFor is WaitFor(unix.POLLIN, timeoutMS) on f and others at once:
// it returns when any of them is readable or has an error to report, or
// f is kicked, and link.ErrClosed once any of them is closing. It is for
// a link with several sockets, read by one Receive; the others' Kicks
// are not watched.
func (f *FD) WaitReadFor(others []*FD, timeoutMS int) (bool, error) {
	return f.wait(unix.POLLIN, others, timeoutMS, false)
}

// WaitWakeable is WaitReadFor that a Wake of f ends too, as if f were
// ready. Only these waits watch Wakes, and the one that sees a Wake takes
// it: a Wake is for one waiter, and other waits on f go on.
func (f *FD) WaitWakeable(others []*FD, timeoutMS int) (bool, error) {
	return f.wait(unix.POLLIN, others, timeoutMS, true)
}

// wait polls f for events, and others for reading, each with its closing
// eventfd, f's kick when reading, and f's wake if wakeable.
func (f *FD) wait(events int16, others []*FD, timeoutMS int, wakeable bool) (bool, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, o := range others {
		o.mu.RLock()
	}
	defer func() { // one defer, not one a descriptor: those would allocate
		for _, o := range others {
			o.mu.RUnlock()
		}
	}()
	// Each descriptor and its closing eventfd, then f's kick if reading
	// (a kick is for readers: a wait to write must not take it).
	var room [12]unix.PollFd // on the stack for a few descriptors
	fds := append(room[:0], unix.PollFd{Fd: int32(f.fd), Events: events}, unix.PollFd{Fd: int32(f.efd), Events: unix.POLLIN})
	for _, o := range others {
		fds = append(fds, unix.PollFd{Fd: int32(o.fd), Events: unix.POLLIN}, unix.PollFd{Fd: int32(o.efd), Events: unix.POLLIN})
	}
	pairs := len(fds) // after them, the eventfds a wait takes when it sees them
	if events&unix.POLLIN != 0 {
		fds = append(fds, unix.PollFd{Fd: int32(f.kfd), Events: unix.POLLIN})
	}
	if wakeable {
		fds = append(fds, unix.PollFd{Fd: int32(f.wfd), Events: unix.POLLIN})
	}
	closing := func() bool {
		return f.closed.Load() || slices.ContainsFunc(others, func(o *FD) bool { return o.closed.Load() })
	}
	for {
		if closing() {
			return false, link.ErrClosed
		}
		n, err := unix.Poll(fds, timeoutMS)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return false, err
		case closing():
			return false, link.ErrClosed
		}
		for i := 1; i < pairs; i += 2 {
			if fds[i].Revents != 0 {
				return false, link.ErrClosed
			}
		}
		for _, e := range fds[pairs:] {
			if e.Revents != 0 {
				TakeEventfd(int(e.Fd)) // the kick or wake is seen
			}
		}
		return n > 0, nil
	}
}

// Kick ends the Waits to read under way, or the next one if none is, as
// if the descriptor were ready.
func (f *FD) Kick() { f.post(f.kfd) }

// Wake ends the WaitWakeable under way, or the next one if none is, as if
// the descriptor were ready.
func (f *FD) Wake() { f.post(f.wfd) }

// post makes the eventfd efd readable, unless f is closed.
func (f *FD) post(efd int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed.Load() {
		return
	}
	PostEventfd(efd)
}

// PostEventfd makes the eventfd efd readable: a poll(2) that watches it
// returns. TakeEventfd makes it unreadable again. The links that poll
// eventfds of their own beside an FD's (the xdp link) use them too.
func PostEventfd(efd int) {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(efd, one[:])
}

// TakeEventfd makes the eventfd efd unreadable again.
func TakeEventfd(efd int) {
	var v [8]byte
	unix.Read(efd, v[:])
}

// Close ends every Wait, waits for the calls under way to return, and
// closes the descriptor. Closing a closed FD returns link.ErrClosed.
func (f *FD) Close() error {
	if f.closed.Swap(true) {
		return link.ErrClosed
	}
	PostEventfd(f.efd)
	f.mu.Lock()
	defer f.mu.Unlock()
	err := unix.Close(f.fd)
	unix.Close(f.efd)
	unix.Close(f.kfd)
	unix.Close(f.wfd)
	return err
}

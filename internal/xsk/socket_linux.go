package xsk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DefaultRingSize is the size of each ring of a socket whose Config
// leaves it 0.
const DefaultRingSize = 2048

// MaxFrags is the most descriptors one packet takes that every kernel
// accepts in copy mode: CONFIG_MAX_SKB_FRAGS+1, whose least value is 18
// (af_xdp.rst, "Multi-Buffer Support"). Receive's batch should have room
// for at least this many.
const MaxFrags = 18

// Mode chooses between zero-copy and copy mode.
type Mode uint8

const (
	// ModeAuto binds in zero-copy mode if the driver supports it, in
	// copy mode otherwise.
	ModeAuto Mode = iota
	// ModeCopy binds in copy mode (XDP_COPY): the kernel copies every
	// packet between its buffers and the UMEM. Every driver supports it.
	ModeCopy
	// ModeZeroCopy binds in zero-copy mode (XDP_ZEROCOPY), or fails.
	ModeZeroCopy
)

// String returns "auto", "copy" or "zero-copy".
func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeCopy:
		return "copy"
	case ModeZeroCopy:
		return "zero-copy"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Config says how to open a socket. The zero value is a socket with
// rings of DefaultRingSize, zero-copy if possible, single-buffer.
type Config struct {
	// FillRingSize, CompletionRingSize, RXRingSize and TXRingSize are
	// the sizes of the rings, powers of two; 0 means DefaultRingSize.
	FillRingSize, CompletionRingSize, RXRingSize, TXRingSize uint32

	// Mode chooses zero-copy or copy mode. A socket that shares its
	// UMEM with one already open has that socket's mode.
	Mode Mode

	// MultiBuffer binds with XDP_USE_SG: a packet larger than
	// UMEM.RXFrameSize arrives in several descriptors, all but the last
	// with OptionMore, and one larger than a frame is sent the same way.
	// The XDP program must be loaded with BPF_F_XDP_HAS_FRAGS (section
	// "xdp.frags"). Without it such packets are dropped (RxDropped). A
	// socket that shares its UMEM with one already open has that
	// socket's setting.
	MultiBuffer bool
}

// ErrClosed is returned by a socket's or UMEM's methods after Close.
var ErrClosed = errors.New("xsk: closed")

// Socket is an AF_XDP socket bound to one queue of one network
// interface, with its four rings: fill and RX for receiving, TX and
// completion for sending.
//
// The receive side (Fill, FillFrom, Receive, Wait) and the send side
// (Transmit, Complete, CompleteTo, Kick) may each run on their own
// goroutine; each side is used by one goroutine at a time. Stats may be
// called from anywhere, and Close from anywhere once: it wakes a Wait
// and waits for the calls under way to return.
type Socket struct {
	umem        *UMEM
	fd          int
	efd         int // an eventfd, readable once Close has begun
	ifindex     int
	queue       int
	zeroCopy    bool
	zeroCopyErr error // why the bind in zero-copy mode failed, when copy mode was taken instead
	multiBuffer bool
	kickTries   int // sendto calls a kick makes while the kernel says there is more (EAGAIN)

	fill  Producer[uint64]
	comp  Consumer[uint64]
	rx    Consumer[Desc]
	tx    Producer[Desc]
	rings [4][]byte // the rings' mappings

	mu     sync.RWMutex // held shared by every call that touches the rings or fd, exclusively by Close
	closed atomic.Bool

	c counters
}

// counters are the socket's own counts, added to per batch.
type counters struct {
	rxPackets, rxBytes, txPackets, txBytes atomic.Uint64
	kicks, kicksBusy, rxWakeups            atomic.Uint64
}

// Open opens an AF_XDP socket on u and binds it to queue queue of the
// interface with index ifindex, in the calling thread's network
// namespace. The first socket opened on u registers it; later ones
// share it, each with fill and completion rings of its own, and must be
// bound to other queues or interfaces.
//
// The socket receives nothing until an XDP program redirects packets to
// it, through an XSKMAP entry that holds FD.
func Open(u *UMEM, ifindex, queue int, c Config) (*Socket, error) {
	for _, n := range []*uint32{&c.FillRingSize, &c.CompletionRingSize, &c.RXRingSize, &c.TXRingSize} {
		if *n == 0 {
			*n = DefaultRingSize
		}
		if bits.OnesCount32(*n) != 1 {
			return nil, fmt.Errorf("xsk: ring size %d is not a power of two", *n)
		}
	}
	if ifindex <= 0 || queue < 0 || queue > 0xffff {
		return nil, fmt.Errorf("xsk: no interface %d queue %d", ifindex, queue)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil, ErrClosed
	}
	var owner *Socket
	if len(u.sockets) > 0 {
		owner = u.sockets[0]
		for _, o := range u.sockets {
			if o.ifindex == ifindex && o.queue == queue {
				return nil, fmt.Errorf("xsk: interface %d queue %d already has a socket on this UMEM", ifindex, queue)
			}
		}
	}

	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	switch {
	case err == unix.EPERM || err == unix.EACCES:
		return nil, fmt.Errorf("xsk: opening an AF_XDP socket needs CAP_NET_RAW: %w", err)
	case err == unix.EAFNOSUPPORT:
		return nil, fmt.Errorf("xsk: this kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS): %w", err)
	case err != nil:
		return nil, fmt.Errorf("xsk: opening an AF_XDP socket: %w", err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("xsk: eventfd: %w", err)
	}
	s := &Socket{umem: u, fd: fd, efd: efd, ifindex: ifindex, queue: queue}
	if err := s.setup(c, owner); err != nil {
		s.release()
		return nil, err
	}
	u.sockets = append(u.sockets, s)
	return s, nil
}

// setup registers the UMEM (unless owner lends its registration), makes
// and maps the rings, and binds.
func (s *Socket) setup(c Config, owner *Socket) error {
	u := s.umem
	if owner == nil {
		reg := unix.XDPUmemReg{
			Addr:     uint64(uintptr(unsafe.Pointer(unsafe.SliceData(u.mem)))),
			Len:      uint64(len(u.mem)),
			Size:     u.frameSize,
			Headroom: u.headroom,
		}
		switch err := setsockopt(s.fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); {
		case err == unix.ENOBUFS || err == unix.ENOMEM:
			return fmt.Errorf("xsk: registering a %d-byte UMEM: more than RLIMIT_MEMLOCK allows (raise it, or give the process CAP_IPC_LOCK): %w", len(u.mem), err)
		case err != nil:
			return fmt.Errorf("xsk: registering a UMEM of %d-byte frames: %w", u.frameSize, err)
		}
	}
	for _, r := range []struct {
		opt  int
		size uint32
	}{
		{unix.XDP_UMEM_FILL_RING, c.FillRingSize},
		{unix.XDP_UMEM_COMPLETION_RING, c.CompletionRingSize},
		{unix.XDP_RX_RING, c.RXRingSize},
		{unix.XDP_TX_RING, c.TXRingSize},
	} {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_XDP, r.opt, int(r.size)); err != nil {
			return fmt.Errorf("xsk: making a ring of %d entries: %w", r.size, err)
		}
	}
	// In copy mode one sendto sends at most max_tx_budget packets, 32
	// unless raised with XDP_MAX_TX_SKB_BUDGET (6.18 takes it): raise it
	// to the TX ring's size so that one kick sends the whole ring. Older
	// kernels refuse the option; there a kick repeats sendto while it
	// answers EAGAIN, up to a ring's worth.
	if unix.SetsockoptInt(s.fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, int(max(c.TXRingSize, 32))) == nil {
		s.kickTries = 1
	} else {
		s.kickTries = int(max(c.TXRingSize/32, 1))
	}

	var off unix.XDPMmapOffsets
	size := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS, uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&size)), 0); e != 0 {
		return fmt.Errorf("xsk: reading the rings' offsets: %w", e)
	}
	if size < uint32(unsafe.Sizeof(off)) {
		return errors.New("xsk: the kernel's rings have no flags word (Linux before 5.4): no need-wakeup")
	}
	type ringMap struct {
		off     unix.XDPRingOffset
		pgoff   int64
		entries uint32
		entry   uintptr
	}
	maps := [4]ringMap{
		{off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, c.FillRingSize, 8},
		{off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, c.CompletionRingSize, 8},
		{off.Rx, unix.XDP_PGOFF_RX_RING, c.RXRingSize, unsafe.Sizeof(Desc{})},
		{off.Tx, unix.XDP_PGOFF_TX_RING, c.TXRingSize, unsafe.Sizeof(Desc{})},
	}
	for i, m := range maps {
		b, err := unix.Mmap(s.fd, m.pgoff, int(m.off.Desc)+int(m.entries)*int(m.entry), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return fmt.Errorf("xsk: mapping a ring: %w", err)
		}
		s.rings[i] = b
	}
	// ring returns what newProducer and newConsumer take for ring i.
	ring := func(i int) (unsafe.Pointer, uintptr, uintptr, uintptr, uintptr, uint32) {
		m := maps[i]
		return unsafe.Pointer(unsafe.SliceData(s.rings[i])), uintptr(m.off.Producer), uintptr(m.off.Consumer), uintptr(m.off.Flags), uintptr(m.off.Desc), m.entries
	}
	s.fill = newProducer[uint64](ring(0))
	s.comp = newConsumer[uint64](ring(1))
	s.rx = newConsumer[Desc](ring(2))
	s.tx = newProducer[Desc](ring(3))

	if err := s.bind(c, owner); err != nil {
		return err
	}
	var opts uint32
	size = uint32(unsafe.Sizeof(opts))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_OPTIONS, uintptr(unsafe.Pointer(&opts)), uintptr(unsafe.Pointer(&size)), 0); e != 0 {
		return fmt.Errorf("xsk: reading the socket's options: %w", e)
	}
	s.zeroCopy = opts&unix.XDP_OPTIONS_ZEROCOPY != 0
	if c.Mode == ModeZeroCopy && !s.zeroCopy {
		return fmt.Errorf("xsk: interface %d queue %d: zero-copy asked for, but the UMEM's first socket is in copy mode", s.ifindex, s.queue)
	}
	return nil
}

// bind binds the socket: sharing owner's UMEM registration if there is
// an owner, else in zero-copy mode first and copy mode if that fails, as
// c.Mode allows.
func (s *Socket) bind(c Config, owner *Socket) error {
	sa := unix.SockaddrXDP{Ifindex: uint32(s.ifindex), QueueID: uint32(s.queue)}
	if owner != nil {
		// A sharing socket takes its flags from the UMEM's first
		// socket; the kernel refuses any of its own.
		sa.Flags = unix.XDP_SHARED_UMEM
		sa.SharedUmemFD = uint32(owner.fd)
		s.multiBuffer, s.zeroCopyErr = owner.multiBuffer, owner.zeroCopyErr
		return s.bindErr(unix.Bind(s.fd, &sa), "")
	}
	flags := uint16(unix.XDP_USE_NEED_WAKEUP)
	if c.MultiBuffer {
		flags |= unix.XDP_USE_SG
		s.multiBuffer = true
	}
	var zcErr error
	if c.Mode != ModeCopy {
		sa.Flags = flags | unix.XDP_ZEROCOPY
		zcErr = unix.Bind(s.fd, &sa)
		if zcErr == nil || c.Mode == ModeZeroCopy {
			return s.bindErr(zcErr, "zero-copy ")
		}
	}
	s.zeroCopyErr = zcErr
	sa.Flags = flags | unix.XDP_COPY
	err := s.bindErr(unix.Bind(s.fd, &sa), "")
	if err != nil && zcErr != nil && !errors.Is(err, zcErr) && zcErr != unix.EOPNOTSUPP {
		err = fmt.Errorf("%w (in zero-copy mode: %v)", err, zcErr)
	}
	return err
}

// bindErr explains an error of bind(2), if any.
func (s *Socket) bindErr(err error, mode string) error {
	if err == nil {
		return nil
	}
	where := fmt.Sprintf("interface %d queue %d", s.ifindex, s.queue)
	switch err {
	case unix.ENODEV:
		return fmt.Errorf("xsk: binding %sto %s: no interface with that index in this network namespace: %w", mode, where, err)
	case unix.EINVAL:
		return fmt.Errorf("xsk: binding %sto %s: no such queue (the interface's queue count is in `ethtool -l`), or a UMEM the interface cannot use: %w", mode, where, err)
	case unix.EBUSY:
		return fmt.Errorf("xsk: binding %sto %s: the queue already has an AF_XDP socket: %w", mode, where, err)
	case unix.EOPNOTSUPP:
		what := "zero-copy AF_XDP"
		if mode == "" {
			what = "AF_XDP in this mode"
		}
		if s.multiBuffer {
			what += " with multi-buffer packets (XDP_USE_SG)"
		}
		return fmt.Errorf("xsk: binding %sto %s: the driver does not support %s: %w", mode, where, what, err)
	}
	return fmt.Errorf("xsk: binding %sto %s: %w", mode, where, err)
}

// release unmaps the rings and closes the descriptors.
func (s *Socket) release() error {
	for i, b := range s.rings {
		if b != nil {
			unix.Munmap(b)
			s.rings[i] = nil
		}
	}
	unix.Close(s.efd)
	return unix.Close(s.fd)
}

// FD returns the socket's file descriptor, for an XSKMAP entry.
func (s *Socket) FD() int { return s.fd }

// UMEM returns the UMEM the socket uses.
func (s *Socket) UMEM() *UMEM { return s.umem }

// ZeroCopy reports whether the socket is in zero-copy mode
// (XDP_OPTIONS_ZEROCOPY): the driver receives into and sends from the
// UMEM itself. Otherwise the kernel copies every packet.
func (s *Socket) ZeroCopy() bool { return s.zeroCopy }

// ZeroCopyErr returns why a socket opened in ModeAuto is in copy mode:
// the error of its bind in zero-copy mode (EOPNOTSUPP where the driver
// has no zero-copy). It is nil for a socket in zero-copy mode or one
// opened in ModeCopy.
func (s *Socket) ZeroCopyErr() error { return s.zeroCopyErr }

// MultiBuffer reports whether the socket carries packets in several
// descriptors (XDP_USE_SG).
func (s *Socket) MultiBuffer() bool { return s.multiBuffer }

// FillRing returns the fill ring, for a caller that drives the rings
// itself rather than through Fill, Receive, Transmit and Complete. A ring
// must not be used once Close has begun: its memory is unmapped.
func (s *Socket) FillRing() *Producer[uint64] { return &s.fill }

// CompletionRing returns the completion ring (see FillRing).
func (s *Socket) CompletionRing() *Consumer[uint64] { return &s.comp }

// RXRing returns the RX ring (see FillRing).
func (s *Socket) RXRing() *Consumer[Desc] { return &s.rx }

// TXRing returns the TX ring (see FillRing).
func (s *Socket) TXRing() *Producer[Desc] { return &s.tx }

// Fill hands the kernel frames to receive into, up to as many as the fill
// ring has room for, and returns how many it took.
func (s *Socket) Fill(addrs []uint64) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	first, n := s.fill.Reserve(uint32(len(addrs)))
	for i := range n {
		s.fill.Set(first+i, addrs[i])
	}
	return int(n), s.submitFill(n)
}

// FillFrom is Fill that takes up to n frames off fs.
func (s *Socket) FillFrom(fs *FrameStack, n int) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	first, got := s.fill.Reserve(uint32(min(n, fs.Len())))
	top := uint32(len(fs.addrs))
	for i := range got {
		s.fill.Set(first+i, fs.addrs[top-1-i])
	}
	fs.addrs = fs.addrs[:top-got]
	return int(got), s.submitFill(got)
}

// submitFill submits n reserved fill entries and wakes the driver if it
// asked to be.
func (s *Socket) submitFill(n uint32) error {
	if n == 0 {
		return nil
	}
	s.fill.Submit(n)
	if s.fill.NeedWakeup() {
		return s.wakeRX()
	}
	return nil
}

// wakeRX tells a driver that waits for fill entries to look at the fill
// ring again: recvfrom with MSG_DONTWAIT, which does nothing else on an
// AF_XDP socket.
func (s *Socket) wakeRX() error {
	s.c.rxWakeups.Add(1)
	for {
		_, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		switch errno {
		case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS:
			return nil
		case unix.EINTR:
			continue
		}
		return fmt.Errorf("xsk: waking the receive path of interface %d queue %d: %w", s.ifindex, s.queue, errno)
	}
}

// Receive takes up to len(descs) received descriptors off the RX ring
// into descs and returns how many. Their frames are the caller's until it
// hands them back with Fill or FillFrom. On a MultiBuffer socket it
// returns whole packets only, unless one packet has more descriptors than
// descs has room for (give it at least MaxFrags).
func (s *Socket) Receive(descs []Desc) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	first, n := s.rx.Peek(uint32(len(descs)))
	if n == 0 {
		if s.fill.NeedWakeup() {
			return 0, s.wakeRX()
		}
		return 0, nil
	}
	for i := range n {
		descs[i] = s.rx.Get(first + i)
	}
	if descs[n-1].More() {
		// The kernel shows whole packets only, so the rest of this one
		// is in the ring: leave the whole packet there for next time.
		k := n - 1
		for k > 0 && descs[k-1].More() {
			k--
		}
		if k > 0 {
			s.rx.Cancel(n - k)
			n = k
		}
	}
	s.rx.Release(n)
	var pkts, nbytes uint64
	for _, d := range descs[:n] {
		nbytes += uint64(d.Len)
		if !d.More() {
			pkts++
		}
	}
	s.c.rxPackets.Add(pkts)
	s.c.rxBytes.Add(nbytes)
	return int(n), nil
}

// Wait blocks until the RX ring has descriptors, Close is called, or
// timeout passes (never, if it is negative; it is rounded up to a
// millisecond), and reports whether descriptors are waiting. It is
// poll(2) on the socket, which in copy mode also sends what the TX ring
// holds. The Go runtime's poller never sees the socket.
func (s *Socket) Wait(timeout time.Duration) (bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	fds := [2]unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}, {Fd: int32(s.efd), Events: unix.POLLIN}}
	for {
		if s.closed.Load() {
			return false, ErrClosed
		}
		n, err := unix.Poll(fds[:], ms)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return false, fmt.Errorf("xsk: poll: %w", err)
		case fds[1].Revents != 0 || s.closed.Load():
			return false, ErrClosed
		case fds[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0:
			return false, fmt.Errorf("xsk: interface %d queue %d: socket error (events %#x)", s.ifindex, s.queue, fds[0].Revents)
		}
		return n > 0, nil
	}
}

// Transmit puts descs on the TX ring, as many as fit, kicks the kernel if
// it asked to be, and returns how many it put. On a MultiBuffer socket a
// packet is a run of descriptors that all have OptionMore but the last;
// Transmit puts whole packets only, as the kernel drops a packet whose
// end is not on the ring when it looks. The frames are the kernel's until
// they come back through Complete. EAGAIN, EBUSY and ENOBUFS from the
// kick mean the kernel is busy, and are not errors: what it has not sent
// it sends at the next kick.
func (s *Socket) Transmit(descs []Desc) (int, error) {
	n, err := s.Enqueue(descs)
	if err != nil {
		return n, err
	}
	return n, s.Kick()
}

// Enqueue is Transmit without the system call: it puts descriptors on
// the TX ring, for a later Kick (which another goroutine may make, even
// while this one enqueues more) to send.
func (s *Socket) Enqueue(descs []Desc) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	n := min(uint32(len(descs)), s.tx.Free(uint32(len(descs))))
	for n > 0 && descs[n-1].More() {
		n--
	}
	first, n := s.tx.Reserve(n)
	var pkts, nbytes uint64
	for i, d := range descs[:n] {
		s.tx.Set(first+uint32(i), d)
		nbytes += uint64(d.Len)
		if !d.More() {
			pkts++
		}
	}
	if n > 0 {
		s.tx.Submit(n)
		s.c.txPackets.Add(pkts)
		s.c.txBytes.Add(nbytes)
	}
	return int(n), nil
}

// Kick tells the kernel to send what the TX ring holds, if it asked to be
// told (XDP_RING_NEED_WAKEUP): sendto with MSG_DONTWAIT.
func (s *Socket) Kick() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return ErrClosed
	}
	return s.kick()
}

func (s *Socket) kick() error {
	for tries := 1; s.tx.NeedWakeup() && s.txPending(); tries++ {
		s.c.kicks.Add(1)
		_, _, errno := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		switch errno {
		case 0:
			return nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			// Either more than one call's budget was waiting, or the
			// completion ring or the device is full.
			if tries < s.kickTries {
				continue
			}
			s.c.kicksBusy.Add(1)
			return nil
		case unix.EBUSY, unix.ENOBUFS:
			s.c.kicksBusy.Add(1)
			return nil
		}
		return fmt.Errorf("xsk: sending on interface %d queue %d: %w", s.ifindex, s.queue, errno)
	}
	return nil
}

// txPending reports whether the kernel has yet to take descriptors off
// the TX ring.
// Pending returns how many descriptors the TX ring holds that the kernel
// has yet to take. It may run beside the goroutine that enqueues.
func (s *Socket) Pending() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0
	}
	return s.pending()
}

func (s *Socket) pending() int {
	return int(atomic.LoadUint32(s.tx.producer) - atomic.LoadUint32(s.tx.consumer))
}

// It reads both indices from the shared words, so that a Kick may run
// beside the goroutine that enqueues.
func (s *Socket) txPending() bool { return s.pending() != 0 }

// Complete takes up to len(addrs) sent frames off the completion ring
// into addrs and returns how many: they are the caller's again. If the TX
// ring still holds descriptors the kernel has not taken, it kicks the
// kernel first.
func (s *Socket) Complete(addrs []uint64) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	err := s.kick()
	first, n := s.comp.Peek(uint32(len(addrs)))
	for i := range n {
		addrs[i] = s.comp.Get(first + i)
	}
	s.comp.Release(n)
	return int(n), err
}

// CompleteTo is Complete that pushes the sent frames onto fs, as many as
// it has room for.
func (s *Socket) CompleteTo(fs *FrameStack) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	err := s.kick()
	return s.reap(fs), err
}

// Reap is CompleteTo without the kick: it takes back the frames the
// kernel has sent, leaving what the TX ring still holds for whoever kicks.
func (s *Socket) Reap(fs *FrameStack) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return 0, ErrClosed
	}
	return s.reap(fs), nil
}

func (s *Socket) reap(fs *FrameStack) int {
	first, n := s.comp.Peek(uint32(cap(fs.addrs) - len(fs.addrs)))
	for i := range n {
		fs.addrs = append(fs.addrs, s.comp.Get(first+i)&fs.mask)
	}
	s.comp.Release(n)
	return int(n)
}

// Close unbinds the socket, unmaps its rings and closes it, once: later
// calls return ErrClosed. It wakes a Wait and waits for the calls under
// way to return. Frames the kernel held in the socket's fill, RX, TX and
// completion rings are lost to the caller's stacks. The kernel frees the
// queue in deferred work, a moment after Close returns: an Open on it
// right after may fail with EBUSY.
func (s *Socket) Close() error {
	if s.closed.Swap(true) {
		return ErrClosed
	}
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(s.efd, one[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	s.umem.forget(s)
	if err := s.release(); err != nil {
		return fmt.Errorf("xsk: closing: %w", err)
	}
	return nil
}

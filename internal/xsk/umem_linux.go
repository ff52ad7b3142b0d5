package xsk

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"

	"golang.org/x/sys/unix"
)

// Defaults and limits of a UMEM.
const (
	// DefaultFrameSize is the frame (chunk) size of a UMEM whose
	// UMEMConfig leaves it 0: a page, the largest the kernel accepts.
	DefaultFrameSize = 4096

	// MinFrameSize is the smallest frame size the kernel accepts
	// (XDP_UMEM_MIN_CHUNK_SIZE).
	MinFrameSize = 2048

	// DefaultFrames is the number of frames of a UMEM whose UMEMConfig
	// leaves it 0: 16 MiB of 4 KiB frames, enough for full fill, RX, TX
	// and completion rings of the default size.
	DefaultFrames = 4096

	// KernelHeadroom is what the kernel leaves free in front of every
	// frame it receives into (XDP_PACKET_HEADROOM): a received
	// descriptor's address is its frame's plus KernelHeadroom plus the
	// UMEM's own headroom.
	KernelHeadroom = unix.XDP_PACKET_HEADROOM
)

// UMEMConfig says how to lay out a UMEM.
type UMEMConfig struct {
	// FrameSize is the size of every frame: a power of two from
	// MinFrameSize to the page size (4096 on x86-64). 0 means
	// DefaultFrameSize. Linux rejects anything larger, hugetlb pages or
	// not, and anything that is not a power of two in aligned mode,
	// which is the only mode this package uses.
	FrameSize uint32

	// Frames is the number of frames. 0 means DefaultFrames.
	Frames uint32

	// Headroom is how many bytes the kernel leaves free in front of a
	// received packet, after KernelHeadroom.
	Headroom uint32
}

// UMEM is a region of memory, split into equal frames, that the kernel
// reads sent packets from and writes received ones into. The first
// Socket opened on it registers it with the kernel (XDP_UMEM_REG);
// every later one shares it (XDP_SHARED_UMEM), so that one pool of
// frames serves every queue of an interface.
type UMEM struct {
	mem       []byte
	frameSize uint32
	headroom  uint32
	free      *FrameStack

	mu      sync.Mutex
	sockets []*Socket // open sockets; sockets[0] lends its registration to the next
	closed  bool
}

// NewUMEM maps a UMEM (anonymous, private, populated memory) and puts
// every frame on its FreeFrames stack.
func NewUMEM(c UMEMConfig) (*UMEM, error) {
	if c.FrameSize == 0 {
		c.FrameSize = DefaultFrameSize
	}
	if c.Frames == 0 {
		c.Frames = DefaultFrames
	}
	page := uint32(unix.Getpagesize())
	if c.FrameSize < MinFrameSize || c.FrameSize > page || bits.OnesCount32(c.FrameSize) != 1 {
		return nil, fmt.Errorf("xsk: frame size %d: Linux takes a power of two from %d to the page size, %d", c.FrameSize, MinFrameSize, page)
	}
	if c.Headroom >= c.FrameSize-KernelHeadroom {
		return nil, fmt.Errorf("xsk: headroom %d leaves no room in a %d-byte frame after the kernel's %d", c.Headroom, c.FrameSize, KernelHeadroom)
	}
	size := uint64(c.Frames) * uint64(c.FrameSize)
	if size/uint64(c.FrameSize) != uint64(c.Frames) || size > 1<<40 {
		return nil, fmt.Errorf("xsk: %d frames of %d bytes is too much memory", c.Frames, c.FrameSize)
	}
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("xsk: mapping a %d-byte UMEM: %w", size, err)
	}
	u := &UMEM{mem: mem, frameSize: c.FrameSize, headroom: c.Headroom, free: newFrameStack(int(c.Frames), c.FrameSize)}
	for i := range c.Frames {
		u.free.addrs = append(u.free.addrs, uint64(c.Frames-1-i)*uint64(c.FrameSize))
	}
	return u, nil
}

// FrameSize returns the size of a frame.
func (u *UMEM) FrameSize() uint32 { return u.frameSize }

// Frames returns the number of frames.
func (u *UMEM) Frames() int { return len(u.mem) / int(u.frameSize) }

// RXFrameSize returns the most bytes of a packet one received frame
// holds: the frame less the kernel's headroom and the UMEM's. A larger
// packet takes several frames, on a MultiBuffer socket, or is dropped.
func (u *UMEM) RXFrameSize() uint32 { return u.frameSize - KernelHeadroom - u.headroom }

// FreeFrames returns the stack that holds every frame when the UMEM is
// new. It belongs to one goroutine (see FrameStack).
func (u *UMEM) FreeFrames() *FrameStack { return u.free }

// Frame returns the frame that holds addr, from addr to the frame's end:
// where to write a packet to send. It returns nil if addr is outside the
// UMEM.
func (u *UMEM) Frame(addr uint64) []byte {
	if addr >= uint64(len(u.mem)) {
		return nil
	}
	end := addr&^uint64(u.frameSize-1) + uint64(u.frameSize)
	return u.mem[addr:end:end]
}

// Bytes returns the bytes d describes, or nil if d does not lie within
// one frame of the UMEM.
func (u *UMEM) Bytes(d Desc) []byte {
	f := u.Frame(d.Addr)
	if uint64(d.Len) > uint64(len(f)) {
		return nil
	}
	return f[:d.Len:d.Len]
}

// Close closes every socket still open on the UMEM, then unmaps it. The
// slices Frame and Bytes returned must not be used after.
func (u *UMEM) Close() error {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return ErrClosed
	}
	u.closed = true
	open := append([]*Socket(nil), u.sockets...)
	u.mu.Unlock()
	var errs []error
	for _, s := range open {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, err)
		}
	}
	if err := unix.Munmap(u.mem); err != nil {
		errs = append(errs, fmt.Errorf("xsk: unmapping the UMEM: %w", err))
	}
	u.mem = nil
	return errors.Join(errs...)
}

// forget removes s from the UMEM's open sockets.
func (u *UMEM) forget(s *Socket) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for i, o := range u.sockets {
		if o == s {
			u.sockets = append(u.sockets[:i], u.sockets[i+1:]...)
			return
		}
	}
}

package xsk

// FrameStack is a stack of free UMEM frames, by address. It is not safe
// for concurrent use: one goroutine owns it, as one goroutine owns the
// rings it feeds. Two goroutines that each need frames (one receiving,
// one sending) take stacks of their own with Split.
type FrameStack struct {
	addrs []uint64
	mask  uint64 // clears an address's offset within its frame
}

// newFrameStack returns an empty stack with room for n frames of size
// bytes, a power of two.
func newFrameStack(n int, size uint32) *FrameStack {
	return &FrameStack{addrs: make([]uint64, 0, n), mask: ^uint64(size - 1)}
}

// Len returns the number of frames on the stack.
func (s *FrameStack) Len() int { return len(s.addrs) }

// Pop takes a frame off the stack; ok is false if the stack is empty.
func (s *FrameStack) Pop() (addr uint64, ok bool) {
	n := len(s.addrs)
	if n == 0 {
		return 0, false
	}
	addr = s.addrs[n-1]
	s.addrs = s.addrs[:n-1]
	return addr, true
}

// PopN takes up to len(dst) frames off the stack into dst and returns how
// many it took.
func (s *FrameStack) PopN(dst []uint64) int {
	n := min(len(dst), len(s.addrs))
	copy(dst, s.addrs[len(s.addrs)-n:])
	s.addrs = s.addrs[:len(s.addrs)-n]
	return n
}

// Push puts the frame that holds addr back on the stack: any address
// inside the frame will do, such as a received descriptor's, which points
// past the kernel's headroom. It returns false, and drops the frame, if
// the stack is full, which only a frame freed twice can cause.
func (s *FrameStack) Push(addr uint64) bool {
	if len(s.addrs) == cap(s.addrs) {
		return false
	}
	s.addrs = append(s.addrs, addr&s.mask)
	return true
}

// PushN pushes every frame of addrs and returns how many fit.
func (s *FrameStack) PushN(addrs []uint64) int {
	n := min(len(addrs), cap(s.addrs)-len(s.addrs))
	for _, a := range addrs[:n] {
		s.addrs = append(s.addrs, a&s.mask)
	}
	return n
}

// Split moves up to n frames to a new stack, which has room for every
// frame of the UMEM, and returns it.
func (s *FrameStack) Split(n int) *FrameStack {
	t := &FrameStack{addrs: make([]uint64, 0, cap(s.addrs)), mask: s.mask}
	n = min(n, len(s.addrs))
	t.addrs = append(t.addrs, s.addrs[len(s.addrs)-n:]...)
	s.addrs = s.addrs[:len(s.addrs)-n]
	return t
}

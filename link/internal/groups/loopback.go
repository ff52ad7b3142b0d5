package groups

import (
	"sync"
	"sync/atomic"

	"github.com/gorxe/gorxe/link"
)

// MaxLooped is how many looped packets a Loopback holds for a receiver
// that is not taking them; more are dropped, as a socket's full receive
// buffer drops the kernel's loopback copies.
const MaxLooped = 256

// Loopback holds copies of the packets a link sent to groups it is a
// member of, for its own receive path. A host's IP stack delivers the
// multicast it sends to itself when it is a member (IP_MULTICAST_LOOP,
// on by default), and rxe's QPs in the group get those packets: the udp
// link has the kernel do it, the links that take a group's frames
// themselves (tap, xdp) do it with a Loopback. Its zero value is empty.
type Loopback struct {
	mu      sync.Mutex
	q       [][]byte
	pending atomic.Bool
	dropped atomic.Uint64
}

// Put queues a copy of pkt, an IP packet, and reports whether it did: a
// full queue drops it (Dropped counts it).
func (l *Loopback) Put(pkt []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.q) >= MaxLooped {
		l.dropped.Add(1)
		return false
	}
	l.q = append(l.q, append([]byte(nil), pkt...))
	l.pending.Store(true)
	return true
}

// Pending reports, without a lock, whether packets are queued.
func (l *Loopback) Pending() bool { return l.pending.Load() }

// Take moves up to len(bufs) queued packets to bufs[i][link.Headroom:],
// sets sizes[i], and returns how many. A packet longer than its buffer is
// cut, as a link's receive cuts a frame longer than its buffer.
func (l *Loopback) Take(bufs [][]byte, sizes []int) int {
	if !l.pending.Load() {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for n < len(bufs) && n < len(sizes) && len(l.q) > 0 {
		sizes[n] = copy(bufs[n][link.Headroom:], l.q[0])
		l.q[0] = nil
		l.q = l.q[1:]
		n++
	}
	if len(l.q) == 0 {
		l.q = nil
		l.pending.Store(false)
	}
	return n
}

// Dropped returns how many packets Put dropped.
func (l *Loopback) Dropped() uint64 { return l.dropped.Load() }

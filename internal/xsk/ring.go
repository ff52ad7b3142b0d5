package xsk

import (
	"sync/atomic"
	"unsafe"
)

// Desc is a descriptor of an RX or TX ring (struct xdp_desc): where a
// frame's bytes sit in the UMEM and how many there are.
type Desc struct {
	Addr    uint64 // offset of the first byte in the UMEM
	Len     uint32
	Options uint32 // OptionMore, or 0
}

// OptionMore (XDP_PKT_CONTD) in Desc.Options says that the packet
// continues in the next descriptor: a multi-buffer packet is a run of
// descriptors that all have it but the last.
const OptionMore = 1

// More reports whether the packet continues in the next descriptor.
func (d Desc) More() bool { return d.Options&OptionMore != 0 }

// flagNeedWakeup (XDP_RING_NEED_WAKEUP) in a ring's flags word says that
// the kernel will not look at the ring again until a system call tells it
// to.
const flagNeedWakeup = 1

// ring is what every ring has: the producer, consumer and flags words it
// shares with the kernel, and this side's cached copies of the two
// indices. The indices are free-running uint32 counters; only
// index&mask addresses an entry, and differences are taken modulo 2^32,
// so they wrap at 2^32 with no special case.
//
// The words are read and written with sync/atomic: Go's atomics are
// sequentially consistent, at least the acquire loads and release
// stores libxdp uses (xsk_ring_cons__peek loads the producer with
// acquire before reading entries; xsk_ring_prod__submit stores the
// producer with release after writing them). Entries themselves are
// plain memory, ordered by those atomics.
type ring struct {
	producer *uint32
	consumer *uint32
	flags    *uint32
	mask     uint32

	// For a producer ring: prod is the index up to which entries have
	// been reserved, cons the consumer index last seen plus the ring's
	// size (so cons-prod is the free space), and shared the producer
	// index last published. For a consumer ring: prod is the producer
	// index last seen, cons the index up to which entries have been
	// peeked, and shared the consumer index last published.
	prod, cons, shared uint32
}

func newRing(base unsafe.Pointer, producer, consumer, flags uintptr, size uint32) ring {
	return ring{
		producer: (*uint32)(unsafe.Add(base, producer)),
		consumer: (*uint32)(unsafe.Add(base, consumer)),
		flags:    (*uint32)(unsafe.Add(base, flags)),
		mask:     size - 1,
	}
}

// Size returns the number of entries of the ring.
func (r *ring) Size() uint32 { return r.mask + 1 }

// NeedWakeup reports whether the kernel has asked for a system call
// before it looks at the ring again (XDP_RING_NEED_WAKEUP).
func (r *ring) NeedWakeup() bool { return atomic.LoadUint32(r.flags)&flagNeedWakeup != 0 }

// Entry is what a ring holds: UMEM addresses (fill and completion rings)
// or descriptors (RX and TX rings).
type Entry interface{ uint64 | Desc }

// Producer is a ring this side fills and the kernel drains: the fill ring
// (frames for the kernel to receive into) and the TX ring (frames to
// send). One goroutine at a time uses it.
//
// Reserve hands out free entries, Set writes them, and Submit shows the
// kernel as many of the reserved entries as it says, in order.
type Producer[T Entry] struct {
	ring
	entries []T
}

func newProducer[T Entry](base unsafe.Pointer, producer, consumer, flags, desc uintptr, size uint32) Producer[T] {
	p := Producer[T]{ring: newRing(base, producer, consumer, flags, size)}
	p.entries = unsafe.Slice((*T)(unsafe.Add(base, desc)), size)
	p.prod = atomic.LoadUint32(p.producer)
	p.shared = p.prod
	p.cons = atomic.LoadUint32(p.consumer) + size
	return p
}

// Free returns how many entries Reserve could hand out now, looking at
// the kernel's consumer index only if the cached one shows fewer than n.
func (r *Producer[T]) Free(n uint32) uint32 {
	if free := r.cons - r.prod; free >= n {
		return free
	}
	r.cons = atomic.LoadUint32(r.consumer) + r.Size()
	return r.cons - r.prod
}

// Reserve reserves up to n entries and returns the index of the first
// and how many it reserved: fewer than n, or none, when the kernel has
// not yet drained the ring enough.
func (r *Producer[T]) Reserve(n uint32) (first, got uint32) {
	got = min(n, r.Free(n))
	first = r.prod
	r.prod += got
	return first, got
}

// Set writes the entry at index i, which Reserve handed out.
func (r *Producer[T]) Set(i uint32, v T) { r.entries[i&r.mask] = v }

// Submit shows the kernel the next n reserved entries.
func (r *Producer[T]) Submit(n uint32) {
	r.shared += n
	atomic.StoreUint32(r.producer, r.shared)
}

// Cancel gives back the last n reserved entries that were not submitted.
func (r *Producer[T]) Cancel(n uint32) { r.prod -= n }

// Consumer is a ring the kernel fills and this side drains: the RX ring
// (received frames) and the completion ring (sent frames, free again).
// One goroutine at a time uses it.
//
// Peek hands out filled entries, Get reads them, and Release gives them
// back to the kernel, in order.
type Consumer[T Entry] struct {
	ring
	entries []T
}

func newConsumer[T Entry](base unsafe.Pointer, producer, consumer, flags, desc uintptr, size uint32) Consumer[T] {
	c := Consumer[T]{ring: newRing(base, producer, consumer, flags, size)}
	c.entries = unsafe.Slice((*T)(unsafe.Add(base, desc)), size)
	c.prod = atomic.LoadUint32(c.producer)
	c.cons = atomic.LoadUint32(c.consumer)
	c.shared = c.cons
	return c
}

// Available returns how many entries Peek could hand out now, looking at
// the kernel's producer index only if the cached one shows fewer than n.
func (r *Consumer[T]) Available(n uint32) uint32 {
	if avail := r.prod - r.cons; avail >= n {
		return avail
	}
	r.prod = atomic.LoadUint32(r.producer)
	return r.prod - r.cons
}

// Peek takes up to n filled entries and returns the index of the first
// and how many it took.
func (r *Consumer[T]) Peek(n uint32) (first, got uint32) {
	got = min(n, r.Available(n))
	first = r.cons
	r.cons += got
	return first, got
}

// Get reads the entry at index i, which Peek handed out.
func (r *Consumer[T]) Get(i uint32) T { return r.entries[i&r.mask] }

// Release gives the kernel back the next n peeked entries.
func (r *Consumer[T]) Release(n uint32) {
	r.shared += n
	atomic.StoreUint32(r.consumer, r.shared)
}

// Cancel puts back the last n peeked entries that were not released, for
// the next Peek to hand out again.
func (r *Consumer[T]) Cancel(n uint32) { r.cons -= n }

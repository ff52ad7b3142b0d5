package rc

import (
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
)

// reply is an answer the responder owes, queued in PSN order.
type reply struct {
	kind replyKind
	syn  aeth.Syndrome // replyAck
	op   bth.Opcode    // replyAck of a NAK: the request's opcode, for the trace
	psn  bth.PSN       // the first PSN of the answer
	req  bth.PSN       // replyAck of a NAK: the request's PSN, for the trace
	orig uint64        // replyAtomic: the original value

	// replyRead: the region and what is left of it to send, and the
	// responses in all and the next one's index, which pick the opcodes.
	m    *mr.MR
	va   uint64
	left uint32
	n, i uint32
}

type replyKind uint8

const (
	replyRead   replyKind = iota // a READ's responses
	replyAtomic                  // an atomic's ACK
	replyAck                     // an ACK or NAK behind the others
)

// replyQueue is a ring of replies. It holds twice max_dest_rd_atomic
// READs and atomics, and room for the ACKs and NAKs between them: a
// requester that keeps more outstanding than it was told (rxe does not
// refuse one) is still answered, up to a bound.
type replyQueue struct {
	slots      []reply
	head, tail int // tail - head replies, from slots[head % len]
}

func newReplyQueue(rdAtomic int) replyQueue {
	return replyQueue{slots: make([]reply, 2*rdAtomic+8)}
}

func (q *replyQueue) empty() bool { return q.head == q.tail }

// full reports whether no READ or atomic could be queued now.
func (q *replyQueue) full() bool { return q.tail-q.head >= len(q.slots)-1 }

// head returns the oldest reply; the queue must not be empty.
func (q *replyQueue) front() *reply { return &q.slots[q.head%len(q.slots)] }

// push appends rp. An ACK or NAK behind an ACK or NAK replaces it: the
// later one covers it.
func (q *replyQueue) push(rp reply) {
	if rp.kind == replyAck && !q.empty() {
		if last := &q.slots[(q.tail-1)%len(q.slots)]; last.kind == replyAck {
			*last = rp
			return
		}
	}
	if q.tail-q.head == len(q.slots) {
		return // the responder refuses requests before this can happen
	}
	q.slots[q.tail%len(q.slots)] = rp
	q.tail++
}

func (q *replyQueue) pop() {
	q.slots[q.head%len(q.slots)] = reply{}
	q.head++
}

// dropRead removes what is queued of a READ answer starting at psn, which
// a duplicate request is about to queue again.
func (q *replyQueue) dropRead(psn bth.PSN) {
	for i := q.head; i != q.tail; i++ {
		rp := &q.slots[i%len(q.slots)]
		if rp.kind == replyRead && psn.InRange(rp.psn, rp.psn.Add(rp.n-1)) {
			rp.n = rp.i // nothing left: it is popped when it reaches the head
		}
	}
}

func (q *replyQueue) clear() {
	clear(q.slots)
	q.head, q.tail = 0, 0
}

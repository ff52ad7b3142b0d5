package qp

// SRQ is a shared receive queue, ibv_srq, as InitAttr names it: one that
// rnic.Device.CreateSRQ made. A QP created with one takes the receive
// WQEs of its SENDs and RDMA WRITEs with immediate from it, in the order
// they were posted, whichever QP they arrive on; its own receive queue
// is unused, and posting to it is refused (IBTA Vol 1 §10.2.9.5).
type SRQ interface {
	// PostRecv queues receive work requests, as ibv_post_srq_recv.
	PostRecv(wrs []RecvWR) (int, error)
}

// SRQAttr holds what ibv_create_srq takes and ibv_query_srq reports,
// struct ibv_srq_attr.
type SRQAttr struct {
	MaxWR  uint32 // receive work requests outstanding
	MaxSGE uint32 // scatter/gather elements per work request
	// SRQLimit arms the limit event when non-zero: once fewer than
	// SRQLimit work requests remain posted, the device reports
	// IBV_EVENT_SRQ_LIMIT_REACHED and the limit returns to 0 (disarmed).
	SRQLimit uint32
}

// SRQAttrMask says which fields of an SRQAttr an SRQ's Modify sets,
// bit for bit as enum ibv_srq_attr_mask.
type SRQAttrMask uint32

// SRQ attribute mask bits.
const (
	SRQAttrMaxWR SRQAttrMask = 1 << 0 // IBV_SRQ_MAX_WR: resize
	SRQAttrLimit SRQAttrMask = 1 << 1 // IBV_SRQ_LIMIT: arm (or, with 0, disarm) the limit event
)

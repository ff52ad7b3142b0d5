package rc

// Async is an affiliated asynchronous event of a QP (IBTA Vol 1
// §10.10.2.3, §11.6.3): what its device reports through
// ibv_get_async_event, as rxe does.
type Async int

const (
	// AsyncAccessErr: the RC responder met an R_Key violation it cannot
	// report in a receive completion, a request without immediate data
	// (class C, C9-222.1.1): IBV_EVENT_QP_ACCESS_ERR. The requester gets
	// the NAK, and the QP goes to ERR.
	AsyncAccessErr Async = iota + 1
	// AsyncLastWQE: a QP with a shared receive queue entered ERR, and
	// takes no more WQEs from it (C11-5.2.4): IBV_EVENT_QP_LAST_WQE_REACHED,
	// after which a program may destroy the QP without losing a WQE.
	AsyncLastWQE
)

// SetAsync installs fn to be told of the QP's asynchronous events; nil
// removes it. fn is called with the QP's lock held and must not call
// back into the QP.
func (q *QP) SetAsync(fn func(Async)) {
	q.mu.Lock()
	q.onAsync = fn
	q.mu.Unlock()
}

// async reports ev to the function SetAsync installed.
func (q *QP) async(ev Async) {
	if q.onAsync != nil {
		q.onAsync(ev)
	}
}

// SetAsync installs fn to be told of the QP's asynchronous events, as
// QP.SetAsync.
func (q *UD) SetAsync(fn func(Async)) {
	q.mu.Lock()
	q.onAsync = fn
	q.mu.Unlock()
}

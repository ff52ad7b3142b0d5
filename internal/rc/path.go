package rc

import "net/netip"

// Path returns where the QP's packets come from and go to: the peer's GID
// and the index of the local GID the QP uses, with ok false while the QP
// has no address vector (before RTR, or after RESET). The device checks
// each arriving packet's IP addresses against it (rxe_recv.c check_addr).
func (q *QP) Path() (dgid netip.Addr, sgidIndex uint8, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	av := &q.attr.AV
	return av.DGID, av.SGIDIndex, av.DGID.IsValid()
}

package rc

import (
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire"
)

// dmaLenOK applies C9-94: a RETH asks for at most 2^31 bytes, the largest
// message. A longer WRITE or READ is an invalid request, whatever memory
// its rkey names (rxe_resp.c check_length: ERR_LENGTH).
func dmaLenOK(p *wire.Packet) bool {
	return p.RETH == nil || uint64(p.RETH.DMALen()) <= qp.MaxMsgSize
}

package rnic

import (
	"fmt"
	"net/netip"

	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/wire/bth"
)

// Endpoint is what two sides of an RC connection tell each other out of
// band before they connect, as perftest exchanges it over TCP: the QP
// number, the first PSN the side will send, and its GID.
type Endpoint struct {
	QPN bth.QPN
	PSN bth.PSN
	GID netip.Addr
}

// ConnectAttr holds the attributes for Connect. Zero fields take the
// defaults perftest uses.
type ConnectAttr struct {
	Local        Endpoint  // this QP's PSN; QPN and GID are filled in by Local()
	Remote       Endpoint  // the peer's
	MTU          qp.MTU    // path MTU; the device's largest when zero
	Access       mr.Access // remote operations this QP's responder allows
	SGIDIndex    uint8
	Timeout      uint8 // local ACK timeout exponent; 14 (67 ms) when zero
	RetryCnt     uint8 // 7 when zero
	RNRRetry     uint8 // 7 when zero
	MinRNRTimer  uint8 // 12 (0.64 ms) when zero
	MaxRdAtomic  uint8 // outstanding READs and atomics each way; 16 when zero
	TrafficClass uint8
	HopLimit     uint8 // 64 when zero

	// FlowLabel is the GRH flow label (20 bits): IPv6's flow label, and
	// the UDP source port of every packet the QP sends, as rxe and mlx5
	// derive it (wire.UDPSourcePort), on links that let the device choose
	// it (not the udp link). When zero the port comes from the two QP
	// numbers, the same both ways.
	FlowLabel uint32

	// MaxDestRdAtomic, when not zero, is how many READs and atomics the
	// responder takes (max_dest_rd_atomic), MaxRdAtomic then being only
	// the requester's (max_rd_atomic): perftest sets the first from its
	// own out_reads and the second from its peer's.
	MaxDestRdAtomic uint8
}

// Local returns this QP's endpoint for the peer, with the given first PSN.
func (q *QP) Local(psn bth.PSN) Endpoint {
	return Endpoint{QPN: q.Num(), PSN: psn, GID: q.dev.gids[0]}
}

// Connect moves a QP in RESET through INIT and RTR to RTS, connected to
// the remote endpoint, with the attributes ibv_modify_qp needs at each
// step: for a UC QP, those of RC less the ACK timeout, retry counts, RNR
// timer and READ depths.
func (q *QP) Connect(c ConnectAttr) error {
	def := func(v *uint8, d uint8) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Timeout, 14)
	def(&c.RetryCnt, 7)
	def(&c.RNRRetry, 7)
	def(&c.MinRNRTimer, 12)
	def(&c.MaxRdAtomic, 16)
	def(&c.MaxDestRdAtomic, c.MaxRdAtomic)
	def(&c.HopLimit, 64)
	if c.MTU == 0 {
		c.MTU = q.dev.MTU()
	}
	steps := []struct {
		attr qp.Attr
		mask qp.AttrMask
	}{
		{qp.Attr{State: qp.StateInit, Port: 1, AccessFlags: c.Access},
			qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort | qp.AttrAccessFlags},
		{qp.Attr{
			State: qp.StateRTR, PathMTU: c.MTU, DestQPNum: c.Remote.QPN, RQPSN: c.Remote.PSN,
			MaxDestRdAtomic: c.MaxDestRdAtomic, MinRNRTimer: c.MinRNRTimer,
			AV: qp.AddressVector{DGID: c.Remote.GID, SGIDIndex: c.SGIDIndex, HopLimit: c.HopLimit, TrafficClass: c.TrafficClass, FlowLabel: c.FlowLabel},
		}, qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer},
		{qp.Attr{
			State: qp.StateRTS, SQPSN: c.Local.PSN, Timeout: c.Timeout, RetryCnt: c.RetryCnt,
			RNRRetry: c.RNRRetry, MaxRdAtomic: c.MaxRdAtomic,
		}, qp.AttrState | qp.AttrSQPSN | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic},
	}
	if q.e.Service() == bth.ServiceUC {
		// A UC QP takes none of the attributes of acknowledgement,
		// retry and READs (IBTA Table 91): only the path and the PSNs.
		steps[1].mask &^= qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
		steps[2].mask &^= qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic
	}
	for _, s := range steps {
		if err := q.Modify(&s.attr, s.mask); err != nil {
			return fmt.Errorf("rnic: connect QP %#x: %w", uint32(q.Num()), err)
		}
	}
	return nil
}

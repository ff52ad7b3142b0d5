package perftest

import (
	"context"
	"fmt"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/qp"
)

// writeImmLat runs one side of write_lat with --write_with_imm, as
// perftest's run_iter_lat_write_imm (6.20 and later): each message is an
// RDMA WRITE with immediate into the peer's slot 0, answered when its
// receive completes, and the server sends first (its first turn does not
// wait for a receive). Each side sends iters and receives iters. The
// receive for the first message must be posted already. It returns the
// client's round trips, from one of its posts to the next, as perftest
// times them from tposted: one sample fewer than iters.
//
// Unlike perftest it does not write a counter into the message's last
// byte: nobody reads it, and slot 1 then never changes under a WRITE that
// may still be sent again.
func writeImmLat(ctx context.Context, s *Side, p *Params, client bool) ([]time.Duration, error) {
	wr := qp.SendWR{Opcode: qp.WRRDMAWriteWithImm, SGList: s.ownSGE(1), RemoteAddr: s.RemoteAddr, RKey: s.RemoteKey}
	receive := func(i int) error {
		var wc [1]cq.WC
		if _, err := s.wait(ctx, p, s.RCQ, wc[:]); err != nil {
			return fmt.Errorf("perftest: waiting for the peer's write %d: %w", i, err)
		}
		if wc[0].Status != cq.StatusSuccess {
			return completionError(wc[0])
		}
		if wc[0].Flags&cq.FlagWithImm == 0 {
			return fmt.Errorf("%w: a receive completion without immediate data (%v)", ErrCheck, wc[0])
		}
		_, err := s.QP.PostRecv([]qp.RecvWR{{WRID: uint64(i + 1), SGList: s.sge(1)}})
		return err
	}
	var rtts []time.Duration
	if client {
		rtts = make([]time.Duration, 0, p.Iters)
	}
	var last time.Duration
	for i := range p.Iters {
		if client || i > 0 {
			if err := receive(i); err != nil {
				return nil, err
			}
		}
		if client {
			now := clock()
			if i > 0 {
				rtts = append(rtts, now-last)
			}
			last = now
		}
		if err := post(s, wr); err != nil {
			return nil, err
		}
		if i > 0 {
			// The last message's completion, reaped after the next is
			// posted, as pingPong reaps.
			if err := reap(ctx, s, p); err != nil {
				return nil, err
			}
		}
	}
	if !client {
		if err := receive(p.Iters); err != nil {
			return nil, err
		}
	}
	if err := reap(ctx, s, p); err != nil {
		return nil, err
	}
	return rtts, nil
}

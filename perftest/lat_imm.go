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
// side's round trips, from one of its posts to the next, as perftest
// times them on either side from tposted: one sample fewer than iters.
//
// Unlike perftest it does not write a counter into the message's last
// byte: nobody reads it, and slot 1 then never changes under a WRITE that
// may still be sent again.
//
// Timed (-D), each side runs from its start until its runTimer ends and
// counts the completions of its sends in the sample window.
func writeImmLat(ctx context.Context, s *Side, p *Params, client bool) (latOut, error) {
	wr := qp.SendWR{Opcode: qp.WRRDMAWriteWithImm, SGList: s.ownSGE(1), RemoteAddr: s.RemoteAddr, RKey: s.RemoteKey}
	if sendsInline(p, s.Size) {
		wr.Flags = qp.SendInline
	}
	tm, ctx := latTimer(ctx, p)
	if tm != nil {
		defer tm.release()
		tm.start()
	}
	var out latOut
	ended := func(err error) bool { return tm != nil && timeUp(err) }
	got := 0 // receives completed
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
		if got++; tm == nil && got >= p.Iters {
			return nil // no message follows the last: see pingPong's recv
		}
		return s.postRecv(0, qp.RecvWR{WRID: uint64(i + 1), SGList: s.rsge(1)})
	}
	var times postTimes
	if tm == nil {
		times.rtts = make([]time.Duration, 0, p.Iters)
	}
	for i := 0; tm != nil || i < p.Iters; i++ {
		if tm != nil {
			if err := interrupted(ctx); err != nil {
				return latOut{}, err
			}
		}
		if client || i > 0 {
			if err := receive(i); err != nil {
				if ended(err) {
					break
				}
				return latOut{}, err
			}
		}
		if tm != nil && tm.ended() {
			break
		}
		if tm == nil {
			times.post(i, clock())
		}
		if err := post(s, wr); err != nil {
			return latOut{}, err
		}
		if i > 0 {
			// The last message's completion, reaped after the next is
			// posted, as pingPong reaps.
			if err := reap(ctx, s, p); err != nil {
				if ended(err) {
					break
				}
				return latOut{}, err
			}
			out.count(tm)
		}
	}
	if tm != nil {
		return out.timed(tm), nil
	}
	if !client {
		if err := receive(p.Iters); err != nil {
			return latOut{}, err
		}
	}
	if err := reap(ctx, s, p); err != nil {
		return latOut{}, err
	}
	out.samples = times.rtts
	return out, nil
}

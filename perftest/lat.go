package perftest

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/qp"
)

// waitWrite busy-polls, as perftest does, until the peer's RDMA WRITE of
// message i has landed in s's slot 0: its last byte (perftest's poll byte)
// is byte(i+1). The region's write count orders the read after the write.
//
// It polls a few times, then sleeps until the region is written (see
// Params.wait for why it does not spin as perftest does).
func waitWrite(ctx context.Context, s *Side, p *Params, seen *uint64, i int) error {
	for n := 0; ; n++ {
		if w := s.MR.Writes(); w != *seen {
			*seen = w
			if s.Size == 0 || s.Buf[s.Size-1] == byte(i+1) {
				p.progressed()
				return nil
			}
			continue
		}
		if n < spins {
			runtime.Gosched()
			continue
		}
		if _, err := s.MR.WaitWrite(ctx, *seen); err != nil {
			return fmt.Errorf("perftest: waiting for the peer's write %d: %w", i, context.Cause(ctx))
		}
	}
}

// postOne posts one signaled work request and waits for its completion.
func postOne(ctx context.Context, s *Side, p *Params, wr qp.SendWR) error {
	if err := post(s, wr); err != nil {
		return err
	}
	return reap(ctx, s, p)
}

// post posts one signaled work request.
func post(s *Side, wr qp.SendWR) error {
	wr.Flags |= qp.SendSignaled
	_, err := s.QP.PostSend([]qp.SendWR{wr})
	return err
}

// reap waits for one send completion and checks it.
func reap(ctx context.Context, s *Side, p *Params) error {
	var wc [1]cq.WC
	if _, err := p.wait(ctx, s.SCQ, wc[:]); err != nil {
		return fmt.Errorf("perftest: waiting for a send completion: %w", err)
	}
	if wc[0].Status != cq.StatusSuccess {
		return completionError(wc[0])
	}
	return nil
}

// writeLat runs one side of the write_lat ping-pong: the client writes
// first; each side writes when it has seen the other's write. It returns
// the client's round-trip times. As perftest's run_iter_lat_write, a side
// does not wait for its WRITE's completion before it watches for the
// peer's: it reaps the completion before its next WRITE, by which time the
// ACK, sent before the peer's WRITE, is normally there.
func writeLat(ctx context.Context, s *Side, p *Params, client bool) ([]time.Duration, error) {
	var seen uint64
	var rtts []time.Duration
	if client {
		rtts = make([]time.Duration, 0, p.Iters)
	}
	wr := qp.SendWR{Opcode: qp.WRRDMAWrite, SGList: s.ownSGE(0), RemoteAddr: s.RemoteAddr, RKey: s.RemoteKey}
	for i := range p.Iters {
		if !client {
			if err := waitWrite(ctx, s, p, &seen, i); err != nil {
				return nil, err
			}
		}
		if i > 0 {
			if err := reap(ctx, s, p); err != nil {
				return nil, err
			}
		}
		start := time.Now()
		if s.Size > 0 {
			s.Buf[s.Size-1] = byte(i + 1)
		}
		if err := post(s, wr); err != nil {
			return nil, err
		}
		if client {
			if err := waitWrite(ctx, s, p, &seen, i); err != nil {
				return nil, err
			}
			rtts = append(rtts, time.Since(start))
		}
	}
	if err := reap(ctx, s, p); err != nil {
		return nil, err
	}
	return rtts, nil
}

// sendLat runs one side of the send_lat ping-pong over SEND and receive.
// The receive for the first message must be posted already.
func sendLat(ctx context.Context, s *Side, p *Params, client bool) ([]time.Duration, error) {
	recv := func(i int) error {
		_, err := s.QP.PostRecv([]qp.RecvWR{{WRID: uint64(i), SGList: s.sge(1)}})
		return err
	}
	wait := func() error {
		var wc [1]cq.WC
		if _, err := p.wait(ctx, s.RCQ, wc[:]); err != nil {
			return fmt.Errorf("perftest: waiting for a receive: %w", err)
		}
		if wc[0].Status != cq.StatusSuccess {
			return completionError(wc[0])
		}
		return nil
	}
	var rtts []time.Duration
	wr := qp.SendWR{Opcode: qp.WRSend, SGList: s.ownSGE(0)}
	for i := range p.Iters {
		if !client {
			if err := wait(); err != nil {
				return nil, err
			}
			if err := recv(i + 1); err != nil {
				return nil, err
			}
		}
		if i > 0 {
			if err := reap(ctx, s, p); err != nil { // the last SEND's completion, as writeLat
				return nil, err
			}
		}
		start := time.Now()
		if err := post(s, wr); err != nil {
			return nil, err
		}
		if client {
			if err := wait(); err != nil {
				return nil, err
			}
			rtts = append(rtts, time.Since(start))
			if err := recv(i + 1); err != nil {
				return nil, err
			}
		}
	}
	if err := reap(ctx, s, p); err != nil {
		return nil, err
	}
	return rtts, nil
}

// readLat times iters RDMA READs, one at a time.
func readLat(ctx context.Context, s *Side, p *Params) ([]time.Duration, error) {
	times := make([]time.Duration, 0, p.Iters)
	wr := qp.SendWR{Opcode: qp.WRRDMARead, SGList: s.ownSGE(0), RemoteAddr: s.RemoteAddr, RKey: s.RemoteKey}
	for range p.Iters {
		start := time.Now()
		if err := postOne(ctx, s, p, wr); err != nil {
			return nil, err
		}
		times = append(times, time.Since(start))
	}
	return times, nil
}

// latStats summarises samples as perftest does; half is set for the
// ping-pong tests, which report half the round trip.
func latStats(size int, samples []time.Duration, half bool) LatResult {
	us := make([]float64, len(samples))
	for i, d := range samples {
		us[i] = float64(d) / 1e3
		if half {
			us[i] /= 2
		}
	}
	slices.Sort(us)
	r := LatResult{Size: size, Iters: len(us)}
	if len(us) == 0 {
		return r
	}
	var sum float64
	for _, v := range us {
		sum += v
	}
	r.Min, r.Max = us[0], us[len(us)-1]
	r.Typical = us[len(us)/2]
	r.Avg = sum / float64(len(us))
	var sq float64
	for _, v := range us {
		sq += (v - r.Avg) * (v - r.Avg)
	}
	r.Stdev = math.Sqrt(sq / float64(len(us)))
	pct := func(p float64) float64 { return us[min(int(math.Ceil(p*float64(len(us))))-1, len(us)-1)] }
	r.P99, r.P999 = pct(0.99), pct(0.999)
	return r
}

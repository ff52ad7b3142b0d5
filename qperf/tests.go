package qperf

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
)

// rdmaTest is one of qperf's RDMA tests: its client's and server's
// bodies, what its client shows, and the parameters it reads (rd_params:
// the default message size, whether it reads -cp and -nr, and others).
type rdmaTest struct {
	client, server func(ctx context.Context, s *side) error
	measure        measure
	msgSize        uint32 // default message size; 0 leaves it
	poll, atomic   bool
	uses           []par
}

// rdmaTests are the tests gorxe runs: qperf's RC ones.
var rdmaTests = map[string]rdmaTest{
	"rc_bi_bw":               {client: biBW, server: biBW, measure: bandwidth, msgSize: k64, poll: true, uses: []par{parAccessRecv}},
	"rc_bw":                  {client: clientBW, server: serverDef, measure: bandwidth, msgSize: k64, poll: true, uses: []par{parAccessRecv, parNoMsgs}},
	"rc_compare_swap_mr":     {client: atomicRate(qp.WRAtomicCmpAndSwp), server: nop(8), measure: msgRate, poll: true, atomic: true},
	"rc_fetch_add_mr":        {client: atomicRate(qp.WRAtomicFetchAndAdd), server: nop(8), measure: msgRate, poll: true, atomic: true},
	"rc_lat":                 {client: ppLat(false), server: ppLat(false), measure: latency, msgSize: 1, poll: true},
	"rc_rdma_read_bw":        {client: clientRDMABW(qp.WRRDMARead), server: nop(0), measure: bandwidth, msgSize: k64, poll: true, uses: []par{parAccessRecv, parRdAtomic}},
	"rc_rdma_read_lat":       {client: readLat, server: nop(0), measure: latency, msgSize: 1, poll: true},
	"rc_rdma_write_bw":       {client: clientRDMABW(qp.WRRDMAWriteWithImm), server: serverDef, measure: bandwidth, msgSize: k64, poll: true},
	"rc_rdma_write_lat":      {client: ppLat(true), server: ppLat(true), measure: latency, msgSize: 1, poll: true},
	"rc_rdma_write_poll_lat": {client: writePollLat, server: writePollLat, measure: latency, msgSize: 1},
	"ver_rc_compare_swap":    {client: verifyAtomic(qp.WRAtomicCmpAndSwp), server: nop(8), measure: msgRate, msgSize: k64, poll: true, atomic: true},
	"ver_rc_fetch_add":       {client: verifyAtomic(qp.WRAtomicFetchAndAdd), server: nop(8), measure: msgRate, msgSize: k64, poll: true, atomic: true},
}

// touch reads what a receive brought, for -ar (access_recv).
func (s *side) touch() {
	if s.req.AccessRecv != 0 {
		if len(s.scratch) != s.msgSize {
			s.scratch = make([]byte, s.msgSize)
		}
		s.mr.Peek(s.mr.IOVA(), s.scratch)
	}
}

// clientBW is qperf's rd_client_bw: SENDs kept posted, NCQE at a time,
// until the time is up or -n messages are sent.
func clientBW(ctx context.Context, s *side) error {
	if err := s.setup(ctx, ncqe, 0, 0); err != nil {
		return err
	}
	ctx, err := s.start(ctx)
	if err != nil {
		return err
	}
	sent := uint64(0)
	left := func(room int) int {
		if s.req.NoMsgs == 0 {
			return room
		}
		n := int64(s.req.NoMsgs) - int64(sent)
		return int(max(0, min(n, int64(room))))
	}
	n := left(ncqe)
	if err := s.postSends(n); err != nil {
		return err
	}
	sent = ncqe
	var wcs [ncqe]cq.WC
	return s.completions(ctx, wcs[:], func(batch []cq.WC) error {
		for _, wc := range batch {
			if wc.WRID != wridSend {
				continue
			}
			if err := s.check(wc, &s.stat.S); err != nil {
				return err
			}
		}
		n := len(batch)
		if s.req.NoMsgs != 0 {
			if s.stat.S.Msgs+s.stat.S.Errs >= uint64(s.req.NoMsgs) {
				return errTestDone
			}
			n = left(n)
		}
		if err := s.postSends(n); err != nil {
			return err
		}
		sent += uint64(n)
		return nil
	})
}

// serverDef is qperf's rd_server_def: receives kept posted, each
// completion counted as a message of the test's size.
func serverDef(ctx context.Context, s *side) error {
	if err := s.setup(ctx, 0, ncqe, 0); err != nil {
		return err
	}
	if err := s.postRecvs(ncqe); err != nil {
		return err
	}
	ctx, err := s.start(ctx)
	if err != nil {
		return err
	}
	var wcs [ncqe]cq.WC
	return s.completions(ctx, wcs[:], func(batch []cq.WC) error {
		for _, wc := range batch {
			if err := s.received(wc); err != nil {
				return err
			}
			s.touch()
		}
		if s.req.NoMsgs != 0 && s.stat.R.Msgs+s.stat.R.Errs >= uint64(s.req.NoMsgs) {
			return errTestDone
		}
		return s.postRecvs(len(batch))
	})
}

// biBW is qperf's rd_bi_bw: both sides send and receive at once.
func biBW(ctx context.Context, s *side) error {
	if err := s.setup(ctx, ncqe, ncqe, 0); err != nil {
		return err
	}
	if err := s.postRecvs(ncqe); err != nil {
		return err
	}
	ctx, err := s.start(ctx)
	if err != nil {
		return err
	}
	if err := s.postSends(ncqe); err != nil {
		return err
	}
	var wcs [ncqe]cq.WC
	return s.completions(ctx, wcs[:], func(batch []cq.WC) error {
		sent, recvd := 0, 0
		for _, wc := range batch {
			switch wc.WRID {
			case wridSend:
				if err := s.check(wc, &s.stat.S); err != nil {
					return err
				}
				sent++
			case wridRecv:
				if err := s.received(wc); err != nil {
					return err
				}
				s.touch()
				recvd++
			}
		}
		if err := s.postRecvs(recvd); err != nil {
			return err
		}
		return s.postSends(sent)
	})
}

// ppLat is qperf's rd_pp_lat: a ping-pong of SENDs, or of RDMA WRITEs
// with immediate (each consumes a receive), the client first; a side
// answers once its last message completed and the peer's arrived.
func ppLat(rdma bool) func(ctx context.Context, s *side) error {
	return func(ctx context.Context, s *side) error {
		if err := s.setup(ctx, 1, 1, 0); err != nil {
			return err
		}
		if err := s.postRecvs(1); err != nil {
			return err
		}
		ctx, err := s.start(ctx)
		if err != nil {
			return err
		}
		send := func() error {
			if rdma {
				return s.postRDMA(qp.WRRDMAWriteWithImm, 1)
			}
			return s.postSends(1)
		}
		pending := 1 // 1: the send completed; 2: a message arrived
		if s.client {
			if err := send(); err != nil {
				return err
			}
			pending = 0
		}
		var wcs [2]cq.WC
		return s.completions(ctx, wcs[:], func(batch []cq.WC) error {
			for _, wc := range batch {
				switch wc.WRID {
				case wridSend, wridRDMA:
					if err := s.check(wc, &s.stat.S); err != nil {
						return err
					}
					pending |= 1
				case wridRecv:
					if err := s.received(wc); err != nil {
						return err
					}
					if err := s.postRecvs(1); err != nil {
						return err
					}
					pending |= 2
				}
			}
			if pending == 3 {
				pending = 0
				return send()
			}
			return nil
		})
	}
}

// writePollLat is qperf's rd_rdma_write_poll_lat: each side RDMA WRITEs
// its buffer, its first and last bytes set to its mark, into the peer's,
// and watches its own for the peer's mark at both ends before it answers.
//
// qperf writes from the buffer it watches, resetting its ends to its own
// mark before it answers; every other byte stays zero on both sides, so
// gorxe sends the same bytes from a copy that never changes: a WRITE
// still in flight (sent again after a loss) must not read memory the
// program writes.
func writePollLat(ctx context.Context, s *side) error {
	const clientMark, serverMark = 0x55, 0xaa
	if err := s.setup(ctx, ncqe, 0, 0); err != nil {
		return err
	}
	mine, theirs := byte(serverMark), byte(clientMark)
	if s.client {
		mine, theirs = theirs, mine
	}
	n := max(s.msgSize, 1)
	src := make([]byte, n)
	src[0], src[n-1] = mine, mine
	srcMR, err := s.dev.RegMR(s.pd, src, 0)
	if err != nil {
		return fmt.Errorf("failed to allocate memory region: %w", err)
	}
	defer srcMR.Deregister()
	first, last := s.mr.IOVA(), s.mr.IOVA()+uint64(n-1)
	mark := func() error {
		if err := s.mr.WriteAt(first, []byte{mine}); err != nil {
			return err
		}
		return s.mr.WriteAt(last, []byte{mine})
	}
	if err := mark(); err != nil {
		return err
	}
	ctx, err = s.start(ctx)
	if err != nil {
		return err
	}
	wr := qp.SendWR{WRID: wridRDMA, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled, RemoteAddr: s.rnode.VAddr, RKey: mr.Key(s.rnode.RKey),
		SGList: []qp.SGE{{Addr: srcMR.IOVA(), Length: uint32(s.msgSize), LKey: srcMR.LKey()}}}
	send := s.client
	seen := s.mr.Writes()
	var wcs [2]cq.WC
	var b [1]byte
	arrived := func() bool {
		if s.mr.Peek(first, b[:]) != nil || b[0] != theirs {
			return false
		}
		return s.mr.Peek(last, b[:]) == nil && b[0] == theirs
	}
	for {
		if send {
			if err := s.postN(wr, 1, true); err != nil {
				return err
			}
			n, err := s.cq.Poll(wcs[:])
			if err != nil {
				return fmt.Errorf("CQ poll failed: %w", err)
			}
			for _, wc := range wcs[:n] {
				if err := s.check(wc, &s.stat.S); err != nil {
					return err
				}
			}
		}
		for !arrived() {
			w, err := s.mr.WaitWrite(ctx, seen)
			if err != nil {
				return nil // the time is up
			}
			seen = w
		}
		if ctx.Err() != nil {
			return nil
		}
		s.stat.R.Bytes += uint64(s.msgSize)
		s.stat.R.Msgs++
		if err := mark(); err != nil {
			return err
		}
		send = true
	}
}

// readLat is qperf's rd_client_rdma_read_lat: one RDMA READ at a time.
func readLat(ctx context.Context, s *side) error {
	if err := s.setup(ctx, 1, 0, 0); err != nil {
		return err
	}
	ctx, err := s.start(ctx)
	if err != nil {
		return err
	}
	if err := s.postRDMA(qp.WRRDMARead, 1); err != nil {
		return err
	}
	var wcs [1]cq.WC
	return s.completions(ctx, wcs[:], func(batch []cq.WC) error {
		for _, wc := range batch {
			if err := s.check(wc, &s.stat.S); err != nil {
				return err
			}
			s.countRead()
			if err := s.postRDMA(qp.WRRDMARead, 1); err != nil {
				return err
			}
		}
		return nil
	})
}

// countRead counts a completed READ as received here and sent there.
func (s *side) countRead() {
	s.stat.R.Bytes += uint64(s.msgSize)
	s.stat.R.Msgs++
	s.stat.RemS.Bytes += uint64(s.msgSize)
	s.stat.RemS.Msgs++
}

// clientRDMABW is qperf's rd_client_rdma_bw: RDMA READs or WRITEs with
// immediate kept posted, NCQE at a time.
func clientRDMABW(op qp.WROpcode) func(ctx context.Context, s *side) error {
	return func(ctx context.Context, s *side) error {
		if err := s.setup(ctx, ncqe, 0, 0); err != nil {
			return err
		}
		ctx, err := s.start(ctx)
		if err != nil {
			return err
		}
		if err := s.postRDMA(op, ncqe); err != nil {
			return err
		}
		var wcs [ncqe]cq.WC
		return s.completions(ctx, wcs[:], func(batch []cq.WC) error {
			for _, wc := range batch {
				if err := s.check(wc, &s.stat.S); err != nil {
					return err
				}
				if op == qp.WRRDMARead {
					s.countRead()
					s.touch()
				}
			}
			return s.postRDMA(op, len(batch))
		})
	}
}

// nop is qperf's rd_server_nop: a buffer of size bytes (the message size
// for 0) for the client's READs or atomics, and nothing to do until the
// time is up.
func nop(size int) func(ctx context.Context, s *side) error {
	return func(ctx context.Context, s *side) error {
		if err := s.setup(ctx, 0, 1, size); err != nil {
			return err
		}
		ctx, err := s.start(ctx)
		if err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}
}

// atomicRate is qperf's ib_client_atomic: atomics on the server's word
// kept posted, NCQE at a time.
func atomicRate(op qp.WROpcode) func(ctx context.Context, s *side) error {
	return func(ctx context.Context, s *side) error {
		if err := s.setup(ctx, ncqe, 0, 8); err != nil {
			return err
		}
		ctx, err := s.start(ctx)
		if err != nil {
			return err
		}
		for range ncqe {
			if err := s.postAtomic(op, 0, 0, 0, 0); err != nil {
				return err
			}
		}
		var wcs [ncqe]cq.WC
		return s.completions(ctx, wcs[:], func(batch []cq.WC) error {
			for _, wc := range batch {
				if err := s.check(wc, &s.stat.S); err != nil {
					return err
				}
				s.stat.RemR.Bytes += 8
				s.stat.RemR.Msgs++
				if err := s.postAtomic(op, 0, 0, 0, 0); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// atomicSeq is qperf's atomic_seq: the value the server's word holds
// before the i-th operation, and the operation's operands.
func atomicSeq(op qp.WROpcode, i uint64) (value, compareAdd, swap uint64) {
	if op == qp.WRAtomicFetchAndAdd {
		return i, 1, 0
	}
	const magic = 0x0123456789abcdef
	if i > 0 {
		value = magic + i - 1
	}
	return value, value, magic + i
}

// verifyAtomic is qperf's ib_client_verify_atomic: a sequence of atomics
// on the server's word, each one's original value checked against the
// sequence's, from as many slots as the message size holds words (at most
// NCQE).
func verifyAtomic(op qp.WROpcode) func(ctx context.Context, s *side) error {
	return func(ctx context.Context, s *side) error {
		if err := s.openQP(ctx, ncqe, 0); err != nil {
			return err
		}
		slots := min(int(s.req.MsgSize)/8, ncqe)
		if slots < 1 {
			return fmt.Errorf("message size must be at least %d", 8)
		}
		if err := s.prep(0); err != nil {
			return err
		}
		ctx, err := s.start(ctx)
		if err != nil {
			return err
		}
		var head, tail uint64
		for i := range slots {
			_, ca, sw := atomicSeq(op, head)
			head++
			if err := s.postAtomic(op, uint64(i), i*8, ca, sw); err != nil {
				return err
			}
		}
		var wcs [ncqe]cq.WC
		var word [8]byte
		return s.completions(ctx, wcs[:], func(batch []cq.WC) error {
			for _, wc := range batch {
				if err := s.check(wc, &s.stat.S); err != nil {
					return err
				}
				s.stat.RemR.Bytes += 8
				s.stat.RemR.Msgs++
				want, _, _ := atomicSeq(op, tail)
				tail++
				x := int(wc.WRID)
				if err := s.mr.Peek(s.mr.IOVA()+uint64(x*8), word[:]); err != nil {
					return err
				}
				if seen := binary.NativeEndian.Uint64(word[:]); seen != want {
					return fmt.Errorf("mismatch, sequence %d, expected %x, got %x", tail, want, seen)
				}
				_, ca, sw := atomicSeq(op, head)
				head++
				if err := s.postAtomic(op, uint64(x), x*8, ca, sw); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

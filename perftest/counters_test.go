package perftest

import (
	"strings"
	"testing"

	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
)

// TestRxeCounterMeanings: the counters rxe names rdma_sends and
// rdma_recvs count what rxe's do: SEND work requests retired (signaled
// or not) and receive work requests completed, never a WRITE, READ or
// atomic; and rnr retries exhausted are rxe's retry_rnr_exceeded_err.
func TestRxeCounterMeanings(t *testing.T) {
	for _, c := range []struct {
		p           Params
		sends, recv uint64
	}{
		{Params{Test: WriteBW, Size: 64, Iters: 50}, 0, 0},
		{Params{Test: ReadBW, Size: 64, Iters: 50}, 0, 0},
		{Params{Test: AtomicBW, Iters: 50}, 0, 0},
		{Params{Test: SendBW, Size: 64, Iters: 50}, 50, 50},
		{Params{Test: SendBW, Size: 64, Iters: 50, Connection: qp.TypeUD}, 50, 50},
		{Params{Test: SendBW, Size: 64, Iters: 50, Connection: qp.TypeUC}, 50, 50},
		{Params{Test: WriteBW, Size: 64, Iters: 50, WithImm: true}, 0, 50},
	} {
		res := runLocal(t, c.p, mem.Faults{})
		if s, r := res.Client.RDMASends, res.Server.RDMARecvs; s != c.sends || r != c.recv {
			t.Errorf("%s %v: client rdma_sends %d, server rdma_recvs %d; want %d and %d", c.p.Test, c.p.ConnectionName(), s, r, c.sends, c.recv)
		}
		if res.Server.RDMASends != 0 || res.Client.RDMARecvs != 0 {
			t.Errorf("%s: server rdma_sends %d, client rdma_recvs %d, want none", c.p.Test, res.Server.RDMASends, res.Client.RDMARecvs)
		}
	}
	var named []string
	var zero qp.Counters
	for _, n := range zero.Named() {
		named = append(named, n.Name)
	}
	if want := "sent_pkts rcvd_pkts duplicate_request out_of_seq_request rcvd_rnr_err send_rnr_err rcvd_seq_err ack_deferred retry_exceeded_err retry_rnr_exceeded_err completer_retry_err send_err link_downed rdma_sends rdma_recvs"; !strings.HasPrefix(strings.Join(named, " "), want) {
		t.Errorf("counter names %v, want rxe's first: %s", named, want)
	}
}

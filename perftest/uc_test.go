package perftest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
)

// TestUC runs write_bw, send_bw, write_lat and send_lat on UC QPs (-c UC)
// with --check: every byte arrives, and the receiving side of a bandwidth
// test sends nothing, as a UC responder acknowledges nothing.
func TestUC(t *testing.T) {
	for _, tc := range []struct {
		test    Test
		withImm bool
	}{{WriteBW, false}, {WriteBW, true}, {SendBW, false}, {SendBW, true}, {WriteLat, false}, {SendLat, false}} {
		name := string(tc.test)
		if tc.withImm {
			name += "/imm"
		}
		t.Run(name, func(t *testing.T) {
			p := Params{Test: tc.test, Connection: qp.TypeUC, Iters: 200, Check: true, WithImm: tc.withImm}
			if !tc.test.IsLatency() {
				p.Size = 5000
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := RunLocal(ctx, p, mem.Faults{})
			if err != nil {
				t.Fatal(err)
			}
			r := res[0]
			if !r.Checked {
				t.Fatal("check did not run")
			}
			if tc.test.IsLatency() {
				if r.Lat == nil || r.Lat.Iters != 200 {
					t.Fatalf("latency result %+v", r.Lat)
				}
				return
			}
			if r.BW == nil || r.BW.Iters != 200 {
				t.Fatalf("bandwidth result %+v", r.BW)
			}
			if r.Server.SentPkts != 0 || r.Server.UCDroppedMsgs != 0 {
				t.Fatalf("the server sent %d packets and dropped %d messages; a UC receiver sends none",
					r.Server.SentPkts, r.Server.UCDroppedMsgs)
			}
		})
	}
}

// TestUCLossEnds: over a lossy fabric, the UC send_bw client completes
// every message and the server, missing the lost ones, ends once the
// client is done, with what came, instead of waiting for GiveUp.
func TestUCLossEnds(t *testing.T) {
	for _, tt := range []Test{SendBW, WriteBW} {
		t.Run(string(tt), func(t *testing.T) {
			p := Params{Test: tt, Connection: qp.TypeUC, Iters: 2000, Size: 4096, WithImm: tt == WriteBW, GiveUp: 20 * time.Second}
			start := time.Now()
			res, err := RunLocal(context.Background(), p, mem.Faults{Drop: 0.01, Seed: 9})
			if err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Fatalf("the run took %v: the server waited for lost messages", el)
			}
			r := res[0]
			if r.BW == nil || r.BW.Iters != 2000 {
				t.Fatalf("client result %+v; want every message completed", r.BW)
			}
			if r.Server.UCDroppedMsgs == 0 || r.Client.SentPkts != 4*2000 {
				t.Fatalf("server dropped %d messages, client sent %d packets; want some dropped and none sent twice",
					r.Server.UCDroppedMsgs, r.Client.SentPkts)
			}
		})
	}
}

// TestUCRefused: perftest refuses UC for READ and atomics, with its words.
func TestUCRefused(t *testing.T) {
	for _, tt := range []Test{ReadBW, ReadLat, AtomicBW, AtomicLat} {
		p := Params{Test: tt, Connection: qp.TypeUC}
		p.Defaults()
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "UC connection not possible in READ/ATOMIC verbs") {
			t.Errorf("%s -c UC: %v", tt, err)
		}
	}
}

// TestRemoteUCLossEnds: across perftest's exchange, a UC send_bw server
// (and a write_bw --write_with_imm one) missing the lost messages ends
// once the client, done, starts its next step on the TCP connection, and
// reports the messages that came; both sides finish the exchange.
func TestRemoteUCLossEnds(t *testing.T) {
	for _, tt := range []Test{SendBW, WriteBW} {
		t.Run(string(tt), func(t *testing.T) {
			p := Params{Test: tt, Connection: qp.TypeUC, Iters: 1000, Size: 4096, WithImm: tt == WriteBW, GiveUp: 20 * time.Second}
			start := time.Now()
			c, s := runPair(t, p, mem.Faults{Drop: 0.01, Seed: 11})
			if el := time.Since(start); el > 5*time.Second {
				t.Fatalf("the run took %v: the server waited for lost messages", el)
			}
			if len(c) != 1 || len(s) != 1 || c[0].BW == nil || s[0].BW == nil {
				t.Fatalf("client %+v server %+v", c, s)
			}
			if c[0].BW.Iters != 1000 || s[0].BW.Iters >= 1000 || s[0].BW.Iters == 0 {
				t.Fatalf("client sent %d, server received %d; want 1000 and fewer", c[0].BW.Iters, s[0].BW.Iters)
			}
		})
	}
}

// TestCheckAfterLoss: on UC and UD a lost message leaves the receives
// behind the message numbers; --check then finds each message that came
// among the later ones of its QP, and passes, with -q 2 and an SRQ too.
// A message changed on the way still fails it.
func TestCheckAfterLoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		conn qp.Type
		srq  bool
	}{{"UC", qp.TypeUC, false}, {"UD", qp.TypeUD, false}, {"UC/srq", qp.TypeUC, true}, {"UD/srq", qp.TypeUD, true}} {
		t.Run(tc.name, func(t *testing.T) {
			p := Params{Test: SendBW, Connection: tc.conn, Iters: 1000, Size: 1000, NumQPs: 2, Check: true, UseSRQ: tc.srq, GiveUp: 20 * time.Second}
			if r := runLocal(t, p, mem.Faults{Drop: 0.02, Seed: 5}); !r.Checked || r.Server.RcvdPkts >= 2000 {
				t.Fatalf("checked %v, %d packets came; want some lost", r.Checked, r.Server.RcvdPkts)
			}
		})
	}
	// A changed message fails the check: a corrupted packet fails its
	// ICRC and is dropped, so change the sender's source instead.
	p := Params{Test: SendBW, Connection: qp.TypeUD, Iters: 200, Size: 1000, Check: true}
	p.Defaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	client, server, closeAll, err := localPair(&p, mem.Faults{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	client.fillPattern(1)
	server.fillPattern(2)
	want := patternSide(client, 1)
	want.src(0, want.slot(7)+want.grh, p.Size)[10] ^= 1
	got := client.src(0, client.slot(7)+client.grh, p.Size)
	if _, ok := matchMessage(got, want, 0, 7, true); ok {
		t.Fatal("a changed message matched")
	}
	if n, ok := matchMessage(client.src(0, client.slot(9)+client.grh, p.Size), want, 0, 7, true); !ok || n != 9 {
		t.Fatalf("message 9 after message 7: %d %v, want 9", n, ok)
	}
}

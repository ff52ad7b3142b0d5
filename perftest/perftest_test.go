package perftest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
)

func TestEveryTestChecks(t *testing.T) {
	for _, tt := range Tests {
		for _, f := range []string{"", "drop=0.01,seed=3", "drop-every=256", "reorder=4,dup=0.01,corrupt=0.005,seed=4"} {
			t.Run(string(tt)+"/"+f, func(t *testing.T) {
				faults, err := ParseFaults(f)
				if err != nil {
					t.Fatal(err)
				}
				p := Params{Test: tt, Iters: 200, Check: true, Timeout: 12}
				if !tt.IsLatency() && tt != AtomicBW {
					p.Size = 5000
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				res, err := RunLocal(ctx, p, faults)
				if err != nil {
					t.Fatal(err)
				}
				r := res[0]
				if !r.Checked {
					t.Fatal("check did not run")
				}
				if tt.IsLatency() {
					if r.Lat == nil || r.Lat.Iters != 200 || !(r.Lat.Min <= r.Lat.Typical && r.Lat.Typical <= r.Lat.Max) {
						t.Fatalf("latency result %+v", r.Lat)
					}
				} else if r.BW == nil || r.BW.Iters != 200 || r.BW.AvgMBps <= 0 || r.BW.PeakMBps < r.BW.AvgMBps {
					t.Fatalf("bandwidth result %+v", r.BW)
				}
			})
		}
	}
}

// TestEvents runs the latency tests with every wait asleep on its CQ
// (-e), under loss, which the sleeping side must ride out as well.
func TestEvents(t *testing.T) {
	for _, tt := range []Test{WriteLat, SendLat, ReadLat} {
		for _, f := range []string{"", "drop=0.01,seed=5"} {
			t.Run(string(tt)+"/"+f, func(t *testing.T) {
				faults, err := ParseFaults(f)
				if err != nil {
					t.Fatal(err)
				}
				p := Params{Test: tt, Iters: 200, Check: true, Timeout: 12, Events: true, Size: 100}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				res, err := RunLocal(ctx, p, faults)
				if err != nil {
					t.Fatal(err)
				}
				if r := res[0]; !r.Checked || r.Lat == nil || r.Lat.Iters != 200 {
					t.Fatalf("result %+v", r)
				}
			})
		}
	}
}

// TestAtomicLat runs atomic_lat (ib_atomic_lat) with both atomic
// operations, under loss and not, in one process and across the
// out-of-band exchange: every atomic's result is checked (the k-th finds
// k in the word).
func TestAtomicLat(t *testing.T) {
	for _, op := range []string{FetchAndAdd, CmpAndSwap} {
		for _, f := range []string{"", "drop=0.02,dup=0.01,seed=3"} {
			t.Run(op+"/"+f, func(t *testing.T) {
				faults, err := ParseFaults(f)
				if err != nil {
					t.Fatal(err)
				}
				p := Params{Test: AtomicLat, Atomic: op, Iters: 300, Check: true, Timeout: 10}
				res, err := RunLocal(context.Background(), p, faults)
				if err != nil {
					t.Fatal(err)
				}
				if r := res[0]; !r.Checked || r.Lat == nil || r.Lat.Iters != 300 || r.Lat.Size != 8 || r.Lat.Min <= 0 {
					t.Fatalf("result %+v %+v", r, r.Lat)
				}
				c, _ := runPair(t, p, faults)
				if len(c) != 1 || c[0].Lat == nil || !c[0].Checked || c[0].Lat.Iters != 300 {
					t.Fatalf("across the exchange: %+v", c)
				}
			})
		}
	}
	p := Params{Test: AtomicLat, Size: 16}
	p.Defaults()
	if err := p.Validate(); err == nil {
		t.Errorf("atomic_lat of 16 bytes: no error")
	}
}

func TestAtomicCAS(t *testing.T) {
	res, err := RunLocal(context.Background(), Params{Test: AtomicBW, Atomic: CmpAndSwap, Iters: 300, Check: true}, mem.Faults{})
	if err != nil || !res[0].Checked {
		t.Fatalf("%v %+v", err, res)
	}
}

func TestAllSizes(t *testing.T) {
	p := Params{Test: WriteBW, AllSize: true, Iters: 5, Check: true, MTU: qp.MTU4096}
	res, err := RunLocal(context.Background(), p, mem.Faults{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 23 || res[0].BW.Size != 2 || res[22].BW.Size != 1<<23 {
		t.Fatalf("%d results, first %d, last %d", len(res), res[0].BW.Size, res[len(res)-1].BW.Size)
	}
}

func TestCheckAtomicsFindsErrors(t *testing.T) {
	p := &Params{Atomic: FetchAndAdd, Iters: 3}
	if err := checkAtomics(p, []uint64{2, 0, 1}, 3); err != nil {
		t.Fatalf("good results refused: %v", err)
	}
	for _, c := range []struct {
		origs []uint64
		final uint64
	}{
		{[]uint64{0, 1, 1}, 3}, // executed twice, one lost
		{[]uint64{0, 1, 2}, 4}, // final value off
	} {
		if err := checkAtomics(p, c.origs, c.final); !errors.Is(err, ErrCheck) {
			t.Errorf("%v final %d: %v", c.origs, c.final, err)
		}
	}
	p.Atomic = CmpAndSwap
	if err := checkAtomics(p, []uint64{1, 0, 2}, 3); !errors.Is(err, ErrCheck) {
		t.Errorf("CMP_AND_SWAP out of order accepted: %v", err)
	}
}

func TestParseFaults(t *testing.T) {
	f, err := ParseFaults("drop=0.5,drop-every=7,reorder=3,dup=0.1,corrupt=0.2,delay=5ms,ecn=1,bandwidth=1000,seed=9")
	if err != nil {
		t.Fatal(err)
	}
	if f.Drop != 0.5 || f.DropEvery != 7 || f.Reorder != 3 || f.Duplicate != 0.1 || f.Corrupt != 0.2 ||
		f.Delay != 5*time.Millisecond || f.ECN != 1 || f.Bandwidth != 1000 || f.Seed != 9 {
		t.Fatalf("%+v", f)
	}
	for _, bad := range []string{"drop", "drop=2", "drop=x", "jitter=1", "delay=5", "reorder=-"} {
		if _, err := ParseFaults(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestLatStats(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 1000; i++ {
		s = append(s, time.Duration(i)*time.Microsecond)
	}
	r := latStats(2, s, false)
	if r.Min != 1 || r.Max != 1000 || r.Typical != 501 || r.Avg != 500.5 || r.P99 != 990 || r.P999 != 999 {
		t.Fatalf("%+v", r)
	}
	if h := latStats(2, s, true); h.Max != 500 {
		t.Fatalf("half round trip max %v", h.Max)
	}
}

func TestValidate(t *testing.T) {
	for _, p := range []Params{
		{Test: "nope"},
		{Test: AtomicBW, Size: 16},
		{Test: WriteBW, Size: MaxSize + 1},
		{Test: AtomicBW, Atomic: "SWAP"},
	} {
		p.Defaults()
		if err := p.Validate(); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}

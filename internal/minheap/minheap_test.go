package minheap

import (
	"math/rand/v2"
	"slices"
	"testing"
)

type item struct{ key, seq int }

func before(a, b *item) bool {
	if a.key != b.key {
		return a.key < b.key
	}
	return a.seq < b.seq
}

// Random pushes and pops come out in order, equal keys in the order a
// tie-breaking less gives them, and popped slots are zeroed.
func TestOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h []item
	var want []item
	seq := 0
	for round := range 2000 {
		if round%3 != 2 || len(h) == 0 {
			it := item{key: r.IntN(50), seq: seq}
			seq++
			Push(&h, it, before)
			want = append(want, it)
			continue
		}
		slices.SortFunc(want, func(a, b item) int {
			if before(&a, &b) {
				return -1
			}
			return 1
		})
		got := Pop(&h, before)
		if got != want[0] {
			t.Fatalf("round %d: popped %v, want %v", round, got, want[0])
		}
		want = want[1:]
		if full := h[:cap(h)]; full[len(h)] != (item{}) {
			t.Fatalf("round %d: the popped slot holds %v", round, full[len(h)])
		}
	}
}

func TestNoAllocs(t *testing.T) {
	h := make([]item, 0, 64)
	if n := testing.AllocsPerRun(100, func() {
		for i := range 32 {
			Push(&h, item{key: 31 - i}, before)
		}
		for range 32 {
			Pop(&h, before)
		}
	}); n != 0 {
		t.Errorf("%v allocations per 32 pushes and pops", n)
	}
}

package groups

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/gorxe/gorxe/link"
)

// TestSet: joins nest; the network hears of the first join and the last
// leave only; a failed first join leaves no trace; Has follows.
func TestSet(t *testing.T) {
	var s Set
	g := netip.MustParseAddr("239.1.2.3")
	var joins, leaves int
	join := func() error { joins++; return nil }
	leave := func() error { leaves++; return nil }
	if s.Has(g) {
		t.Fatal("an empty set has a group")
	}
	if err := s.Leave(g, leave); !errors.Is(err, ErrNotMember) {
		t.Fatalf("leaving a group not joined: %v, want ErrNotMember", err)
	}
	for range 2 {
		if err := s.Join(g, join); err != nil {
			t.Fatal(err)
		}
	}
	if !s.Has(g) || joins != 1 {
		t.Fatalf("after two joins: Has %v, %d joins on the network; want true, 1", s.Has(g), joins)
	}
	var each []netip.Addr
	s.Each(func(g netip.Addr) { each = append(each, g) })
	if len(each) != 1 || each[0] != g {
		t.Fatalf("Each saw %v, want [%v]", each, g)
	}
	for range 2 {
		if err := s.Leave(g, leave); err != nil {
			t.Fatal(err)
		}
	}
	if s.Has(g) || leaves != 1 {
		t.Fatalf("after two leaves: Has %v, %d leaves on the network; want false, 1", s.Has(g), leaves)
	}
	failed := errors.New("refused")
	if err := s.Join(g, func() error { return failed }); !errors.Is(err, failed) || s.Has(g) {
		t.Fatalf("a refused join: %v, Has %v; want the error and no group", err, s.Has(g))
	}
	if err := s.Leave(g, leave); !errors.Is(err, ErrNotMember) {
		t.Fatalf("leaving after a refused join: %v, want ErrNotMember", err)
	}
}

// TestLoopback: packets come out in order, at the headroom, as many as
// there are buffers; a full queue drops and counts.
func TestLoopback(t *testing.T) {
	var l Loopback
	if l.Pending() || l.Take(make([][]byte, 1), make([]int, 1)) != 0 {
		t.Fatal("an empty loopback has packets")
	}
	for i := range MaxLooped + 2 {
		if ok := l.Put([]byte{byte(i), 1, 2}); ok != (i < MaxLooped) {
			t.Fatalf("Put %d: %v", i, ok)
		}
	}
	if l.Dropped() != 2 || !l.Pending() {
		t.Fatalf("dropped %d, pending %v", l.Dropped(), l.Pending())
	}
	bufs := [][]byte{make([]byte, link.Headroom+8), make([]byte, link.Headroom+8)}
	sizes := make([]int, 2)
	for want := 0; want < MaxLooped; want += 2 {
		if n := l.Take(bufs, sizes); n != 2 || sizes[0] != 3 || bufs[0][link.Headroom] != byte(want) || bufs[1][link.Headroom] != byte(want+1) {
			t.Fatalf("Take at %d: %d packets, sizes %v, first bytes %d %d", want, n, sizes, bufs[0][link.Headroom], bufs[1][link.Headroom])
		}
	}
	if l.Pending() {
		t.Fatal("pending after every packet was taken")
	}
}

package mem_test

import (
	"encoding/binary"
	"math"
	"math/bits"
	"net/netip"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/wire"
)

// within fails the test unless got is within five standard deviations of
// the mean of a binomial(n, p) count.
func within(t *testing.T, what string, got uint64, n int, p float64) {
	t.Helper()
	mean := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	if math.Abs(float64(got)-mean) > 5*sd {
		t.Errorf("%s: %d of %d, want %.0f ± %.0f", what, got, n, mean, 5*sd)
	}
}

func TestDrop(t *testing.T) {
	const n, p = 100000, 0.1
	run := func(f mem.Faults, n int) ([]uint32, mem.Stats) {
		a, b := pair(t, addrA4, addrB4)
		a.SetFaults(f)
		return streamPSNs(t, a, b, n), a.Stats()
	}
	first, s := run(mem.Faults{Drop: p, Seed: 42}, n)
	within(t, "dropped", s.Dropped, n, p)
	if len(first) != n-int(s.Dropped) || s.Delivered != uint64(len(first)) || s.Sent != n {
		t.Errorf("received %d, stats %+v", len(first), s)
	}
	if !slices.IsSorted(first) {
		t.Errorf("Drop reordered packets")
	}
	second, _ := run(mem.Faults{Drop: p, Seed: 42}, n)
	if !slices.Equal(first, second) {
		t.Errorf("same seed, different packets dropped")
	}
	// Each fault has its own random stream: adding another fault does not
	// change which packets are dropped.
	const short = 5000
	prefix := first[:slices.IndexFunc(first, func(psn uint32) bool { return psn >= short })]
	withDup, _ := run(mem.Faults{Drop: p, Seed: 42, Duplicate: 0.5, ECN: 0.5}, short)
	if !slices.Equal(prefix, slices.Compact(withDup)) {
		t.Errorf("Duplicate and ECN changed which packets Drop dropped")
	}
	other, _ := run(mem.Faults{Drop: p, Seed: 43}, short)
	if slices.Equal(prefix, other) {
		t.Errorf("different seeds, same packets dropped")
	}
}

// missing returns the PSNs below n that are not in got.
func missing(got []uint32, n int) []uint32 {
	seen := make([]bool, n)
	for _, psn := range got {
		seen[psn] = true
	}
	var out []uint32
	for i, ok := range seen {
		if !ok {
			out = append(out, uint32(i))
		}
	}
	return out
}

func TestDropEvery(t *testing.T) {
	const n, every = 1000, 7
	a, b := pair(t, addrA4, addrB4)
	a.SetFaults(mem.Faults{DropEvery: every})
	got := streamPSNs(t, a, b, n)
	var want []uint32
	for psn := every - 1; psn < n; psn += every { // the 7th packet is PSN 6
		want = append(want, uint32(psn))
	}
	if m := missing(got, n); !slices.Equal(m, want) {
		t.Errorf("dropped %v, want %v", m, want)
	}
	if s := a.Stats(); s.Dropped != uint64(len(want)) {
		t.Errorf("Dropped = %d, want %d", s.Dropped, len(want))
	}
}

// psnField returns the PSN of a packet the fabric hands to a Filter or
// DropFunc, or -1 if it does not parse.
func psnField(pkt []byte) int {
	var p wire.Packet
	if wire.ParseIP(&p, pkt) != nil {
		return -1
	}
	return int(p.BTH.PSN())
}

func TestFilter(t *testing.T) {
	const n = 300
	a, b := pair(t, addrA4, addrB4)
	a.SetFaults(mem.Faults{Drop: 1, Filter: func(pkt []byte) bool { return psnField(pkt) == 5 }})
	got, _ := stream(t, a, b, n, 8, nil)
	if m := missing(psns(t, got), n); !slices.Equal(m, []uint32{5}) {
		t.Errorf("dropped %v, want [5]", m)
	}

	// DropEvery counts only the packets the filter selects: every second
	// odd PSN.
	a, b = pair(t, addrA4, addrB4)
	a.SetFaults(mem.Faults{DropEvery: 2, Filter: func(pkt []byte) bool { return psnField(pkt)%2 == 1 }})
	got, _ = stream(t, a, b, n, 8, nil)
	var want []uint32
	for psn := 3; psn < n; psn += 4 {
		want = append(want, uint32(psn))
	}
	if m := missing(psns(t, got), n); !slices.Equal(m, want) {
		t.Errorf("dropped %v, want %v", m, want)
	}
	if s := a.Stats(); s.Dropped != uint64(len(want)) {
		t.Errorf("Dropped = %d, want %d", s.Dropped, len(want))
	}
}

func TestDropFunc(t *testing.T) {
	const n = 300
	a, b := pair(t, addrA6, addrB6)
	var seqs []uint64
	a.SetFaults(mem.Faults{DropFunc: func(pkt []byte, seq uint64) bool {
		seqs = append(seqs, seq)
		return seq == 3 || seq == 64 || psnField(pkt) == 200
	}})
	got, _ := stream(t, a, b, n, 8, nil)
	if m := missing(psns(t, got), n); !slices.Equal(m, []uint32{3, 64, 200}) {
		t.Errorf("dropped %v, want [3 64 200]", m)
	}
	for i, seq := range seqs {
		if seq != uint64(i) {
			t.Fatalf("DropFunc saw seq %d as packet %d", seq, i)
		}
	}
	if len(seqs) != n {
		t.Errorf("DropFunc saw %d packets, want %d", len(seqs), n)
	}
}

func TestReorder(t *testing.T) {
	const n, w = 6400, 16
	run := func() ([]uint32, mem.Stats) {
		a, b := pair(t, addrA4, addrB4)
		a.SetFaults(mem.Faults{Reorder: w, Seed: 7})
		return streamPSNs(t, a, b, n), a.Stats()
	}
	got, s := run()
	if len(got) != n {
		t.Fatalf("received %d packets, want %d", len(got), n)
	}
	if m := missing(got, n); len(m) > 0 {
		t.Fatalf("missing %v", m)
	}
	// Each window of w packets is released as a whole, so no packet moves
	// more than w-1 places.
	var late, maxPSN uint64
	for i, psn := range got {
		if d := int(psn) - i; d >= w || d <= -w {
			t.Fatalf("PSN %d arrived in place %d", psn, i)
		}
		if i > 0 && uint64(psn) < maxPSN {
			late++
		}
		maxPSN = max(maxPSN, uint64(psn))
	}
	if late == 0 || s.Reordered != late {
		t.Errorf("Reordered = %d, %d packets arrived after a later one", s.Reordered, late)
	}
	if again, _ := run(); !slices.Equal(got, again) {
		t.Errorf("same seed, different order")
	}
}

// TestReorderFlush checks that a window traffic stops filling is released.
func TestReorderFlush(t *testing.T) {
	a, b := pair(t, addrA4, addrB4)
	a.SetFaults(mem.Faults{Reorder: 64})
	var bufs [][]byte
	for i := range 5 {
		bufs = append(bufs, roce(t, addrA4, addrB4, uint32(i), 16, 0))
	}
	start := time.Now()
	if err := a.Send(bufs); err != nil {
		t.Fatal(err)
	}
	got := psns(t, newReceiver(b).take(t, 5))
	if d := time.Since(start); d > time.Second {
		t.Errorf("held for %v", d)
	}
	slices.Sort(got)
	if !slices.Equal(got, []uint32{0, 1, 2, 3, 4}) {
		t.Errorf("received %v", got)
	}
}

func TestDuplicate(t *testing.T) {
	const n, p = 10000, 0.2
	a, b := pair(t, addrA4, addrB4)
	a.SetFaults(mem.Faults{Duplicate: p, Seed: 3})
	got := streamPSNs(t, a, b, n)
	s := a.Stats()
	within(t, "duplicated", s.Duplicated, n, p)
	if len(got) != n+int(s.Duplicated) || s.Delivered != uint64(len(got)) {
		t.Errorf("received %d of %d with %d duplicates", len(got), n, s.Duplicated)
	}
	copies := make([]int, n)
	var twice uint64
	for i, psn := range got {
		copies[psn]++
		if copies[psn] == 2 {
			twice++
			if got[i-1] != psn {
				t.Errorf("copy of PSN %d does not follow it", psn)
			}
		}
	}
	for psn, c := range copies {
		if c != 1 && c != 2 {
			t.Fatalf("PSN %d arrived %d times", psn, c)
		}
	}
	if twice != s.Duplicated {
		t.Errorf("%d packets arrived twice, Duplicated = %d", twice, s.Duplicated)
	}
}

func TestCorrupt(t *testing.T) {
	const n, p = 3000, 0.3
	for _, tc := range []struct {
		name    string
		payload int
		a       addrPair
	}{
		{"IPv4", 0, addrPair{addrA4, addrB4}},
		{"IPv4Payload", 100, addrPair{addrA4, addrB4}},
		{"IPv6", 0, addrPair{addrA6, addrB6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t, tc.a.src, tc.a.dst)
			a.SetFaults(mem.Faults{Corrupt: p, Seed: 11})
			got, sent := stream(t, a, b, n, tc.payload, func(int) uint8 { return 2 })
			s := a.Stats()
			within(t, "corrupted", s.Corrupted, n, p)
			if len(got) != n {
				t.Fatalf("received %d of %d", len(got), n)
			}
			var flipped uint64
			for i := range got {
				want := sent[i][link.Headroom:]
				if len(got[i]) != len(want) {
					t.Fatalf("packet %d: %d bytes, want %d", i, len(got[i]), len(want))
				}
				d := 0
				for j := range want {
					d += bits.OnesCount8(got[i][j] ^ want[j])
				}
				var pkt wire.Packet
				err := wire.ParseIP(&pkt, got[i])
				if err == nil {
					err = pkt.CheckICRC()
				}
				switch {
				case d > 1:
					t.Fatalf("packet %d: %d bits flipped", i, d)
				case d == 1:
					flipped++
					if err == nil {
						t.Errorf("packet %d: corrupted, but it parses and its ICRC checks\n got %x\nwant %x", i, got[i], want)
					}
				case err != nil:
					t.Errorf("packet %d: not corrupted, but %v", i, err)
				}
			}
			if flipped != s.Corrupted {
				t.Errorf("%d packets have a bit flipped, Corrupted = %d", flipped, s.Corrupted)
			}
		})
	}
}

type addrPair struct{ src, dst netip.Addr }

func TestECN(t *testing.T) {
	const n, p = 4000, 0.5
	const dscp = 26 << 2
	for _, tc := range []struct {
		name string
		a    addrPair
	}{
		{"IPv4", addrPair{addrA4, addrB4}},
		{"IPv6", addrPair{addrA6, addrB6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t, tc.a.src, tc.a.dst)
			a.SetFaults(mem.Faults{ECN: p, Seed: 5})
			// Not-ECT, ECT(0), ECT(1) and CE in turn.
			tos := func(i int) uint8 { return dscp | uint8(i%4) }
			got, sent := stream(t, a, b, n, 16, tos)
			if len(got) != n {
				t.Fatalf("received %d of %d", len(got), n)
			}
			var marked uint64
			for i := range got {
				var pkt wire.Packet
				if err := wire.ParseIP(&pkt, got[i]); err != nil {
					t.Fatalf("packet %d: %v", i, err)
				}
				if err := pkt.CheckICRC(); err != nil {
					t.Fatalf("packet %d, ECN %02b: %v", i, pkt.ECN(), err)
				}
				if pkt.TrafficClass()&^3 != dscp {
					t.Fatalf("packet %d: DSCP changed: traffic class %#x", i, pkt.TrafficClass())
				}
				sentECN, gotECN := tos(i)&3, pkt.ECN()
				switch {
				case gotECN == sentECN:
				case sentECN != 0 && gotECN == 3:
					marked++
				default:
					t.Fatalf("packet %d: ECN %02b became %02b", i, sentECN, gotECN)
				}
				if pkt.IPVersion() == 4 && ipv4Sum(pkt.IP) != 0xffff {
					t.Fatalf("packet %d: bad IPv4 header checksum", i)
				}
				// Only the ECN bits and the IPv4 header checksum may change.
				want := slices.Clone(sent[i][link.Headroom:])
				if gotECN != sentECN {
					if pkt.IPVersion() == 4 {
						want[1] |= 3
						copy(want[10:12], got[i][10:12])
					} else {
						want[1] |= 3 << 4
					}
				}
				if !slices.Equal(got[i], want) {
					t.Fatalf("packet %d: changed beyond ECN and checksum\n got %x\nwant %x", i, got[i], want)
				}
			}
			if marked != a.Stats().Marked {
				t.Errorf("%d packets marked, Marked = %d", marked, a.Stats().Marked)
			}
			within(t, "marked", marked, n/2, p) // ECT(0) and ECT(1) packets only
		})
	}
}

// ipv4Sum returns the ones' complement sum of an IPv4 header, 0xffff if
// its checksum is right.
func ipv4Sum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

func TestDelay(t *testing.T) {
	const delay = 5 * time.Millisecond
	a, b := pair(t, addrA4, addrB4)
	r := newReceiver(b)
	a.SetFaults(mem.Faults{Delay: delay})
	start := time.Now()
	if err := a.Send([][]byte{roce(t, addrA4, addrB4, 0, 64, 0)}); err != nil {
		t.Fatal(err)
	}
	r.take(t, 1)
	if d := time.Since(start); d < delay {
		t.Errorf("packet arrived after %v, want at least %v", d, delay)
	}

	// Order is kept, even when the delay shrinks with packets in flight.
	const n = 1000
	var want []uint32
	for i := range n {
		if i == n/2 {
			a.SetFaults(mem.Faults{Delay: delay / 5})
		}
		if err := a.Send([][]byte{roce(t, addrA4, addrB4, uint32(i), 64, 0)}); err != nil {
			t.Fatal(err)
		}
		want = append(want, uint32(i))
	}
	if got := psns(t, r.take(t, n)); !slices.Equal(got, want) {
		t.Errorf("delayed packets arrived out of order")
	}
}

func TestBandwidth(t *testing.T) {
	const rate, total = 10e6, 2e6 // 10 MB/s, 2 MB: 0.2 s
	a, b := pair(t, addrA4, addrB4)
	a.SetFaults(mem.Faults{Bandwidth: rate})
	buf := roce(t, addrA4, addrB4, 0, 4000, 0)
	size := len(buf) - link.Headroom
	n := (total + size - 1) / size
	start := time.Now()
	for i := 0; i < n; i += link.BatchSize {
		var bufs [][]byte
		for j := i; j < min(n, i+link.BatchSize); j++ {
			p := slices.Clone(buf)
			setPSN(p, uint32(j))
			bufs = append(bufs, p)
		}
		if err := a.Send(bufs); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("Send blocked for %v", d)
	}
	got := psns(t, newReceiver(b).take(t, n))
	d := time.Since(start)
	want := time.Duration(float64(n*size) / rate * float64(time.Second))
	if d < want*3/4 {
		t.Errorf("%d bytes at %v B/s took %v, want about %v", n*size, rate, d, want)
	}
	t.Logf("%d bytes at %.0f B/s took %v (ideal %v)", n*size, rate, d, want)
	for i, psn := range got {
		if psn != uint32(i) {
			t.Fatalf("paced packets arrived out of order")
		}
	}
}

// TestDelayFunc: one packet held 5 ms holds up those sent behind it, and
// they all arrive in order, as behind a host that stalls. (In a synctest
// bubble: the times are exact.)
func TestDelayFunc(t *testing.T) {
	synctest.Test(t, testDelayFunc)
}

func testDelayFunc(t *testing.T) {
	const stall = 5 * time.Millisecond
	a, b := pair(t, addrA4, addrB4)
	r := newReceiver(b)
	a.SetFaults(mem.Faults{DelayFunc: func(pkt []byte) time.Duration {
		if psnField(pkt) == 3 {
			return stall
		}
		return 0
	}})
	start := time.Now()
	var want []uint32
	for i := range 10 {
		if err := a.Send([][]byte{roce(t, addrA4, addrB4, uint32(i), 64, 0)}); err != nil {
			t.Fatal(err)
		}
		want = append(want, uint32(i))
	}
	if got := psns(t, r.take(t, 3)); !slices.Equal(got, want[:3]) {
		t.Fatalf("first packets %v, want %v", got, want[:3])
	}
	if d := time.Since(start); d != 0 {
		t.Fatalf("the packets before the held one took %v", d)
	}
	if got := psns(t, r.take(t, 7)); !slices.Equal(got, want[3:]) {
		t.Errorf("the rest arrived as %v, want %v", got, want[3:])
	}
	if d := time.Since(start); d != stall {
		t.Errorf("the packets behind the held one arrived after %v, want %v", d, stall)
	}
}

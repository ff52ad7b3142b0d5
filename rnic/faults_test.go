package rnic_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

// workload runs rounds of WRITEs, READs and SENDs of random sizes from a to
// b and checks every byte that arrived. Each round uses fresh memory: a
// stale duplicate READ may make the responder read a region again after the
// READ completed, as it may on any RDMA NIC, and the test must not be
// rewriting that memory then.
func workload(t *testing.T, a, b *side, seed uint64, rounds int) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 2))
	const slot = 64 << 10 // each operation of a round gets its own 64 KiB
	if len(a.buf) < rounds*8*slot {
		t.Fatalf("buffers of %d bytes are too small for %d rounds", len(a.buf), rounds)
	}
	for round := range rounds {
		a, b := a.window(round*8*slot), b.window(round*8*slot)
		fill(a.buf[:4*slot], seed+uint64(round))
		fill(b.buf[4*slot:8*slot], seed+uint64(round)+1000)
		sizes := [4]int{}
		for i := range sizes {
			sizes[i] = 1 + r.IntN(slot)
		}
		b.postRecv(t, qp.RecvWR{WRID: 100, SGList: []qp.SGE{b.sge(3*slot, slot)}})
		a.postSend(t,
			writeWR(1, a, b, 0, sizes[0]),
			writeWR(2, a, b, slot, sizes[1]),
			readWR(3, a, b, 4*slot, sizes[2]),
			qp.SendWR{WRID: 4, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: []qp.SGE{a.sge(3*slot, sizes[3])}},
		)
		wcs := wait(t, a.scq, 4, 20*time.Second)
		status(t, wcs, cq.StatusSuccess, cq.StatusSuccess, cq.StatusSuccess, cq.StatusSuccess)
		if wc := wait(t, b.rcq, 1, 5*time.Second)[0]; wc.Status != cq.StatusSuccess || wc.ByteLen != uint32(sizes[3]) {
			t.Fatalf("round %d: receive %+v", round, wc)
		}
		for i, n := range sizes {
			src, dst := a.buf[i*slot:i*slot+n], b.buf[i*slot:i*slot+n]
			if i == 2 { // the READ went the other way
				src, dst = b.buf[4*slot:4*slot+n], a.buf[4*slot:4*slot+n]
			}
			if !bytes.Equal(src, dst) {
				t.Fatalf("round %d, operation %d (%d bytes): data differs", round, i+1, n)
			}
		}
	}
}

// TestIntegrityUnderFaults: whatever the fabric does to packets, every byte
// arrives and every work request succeeds.
func TestIntegrityUnderFaults(t *testing.T) {
	cases := []struct {
		name   string
		faults mem.Faults
	}{
		{"drop every 256th", mem.Faults{DropEvery: 256}},
		{"1% random loss", mem.Faults{Drop: 0.01, Seed: 1}},
		{"reorder window 8", mem.Faults{Reorder: 8, Seed: 2}},
		{"1% duplicates", mem.Faults{Duplicate: 0.01, Seed: 3}},
		{"1% corruption", mem.Faults{Corrupt: 0.01, Seed: 4}},
		{"everything", mem.Faults{Drop: 0.005, Reorder: 4, Duplicate: 0.005, Corrupt: 0.005, Seed: 5}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := newPair(t, pairOpts{timeout: 12, bufSize: 8 << 20})
			fa, fb := c.faults, c.faults
			fb.Seed += 100
			a.link.SetFaults(fa)
			b.link.SetFaults(fb)
			workload(t, a, b, uint64(i), 8)
			sa, sb := a.stats(), b.stats()
			if c.faults.Corrupt > 0 && sa.ICRCErrors+sb.ICRCErrors+sa.Malformed+sb.Malformed == 0 {
				t.Errorf("no corrupted packet was caught")
			}
			if c.faults.Drop > 0 || c.faults.DropEvery > 0 {
				if sa.CompleterRetryErr == 0 {
					t.Errorf("losses but no retransmission")
				}
			}
			t.Logf("A: %s\nB: %s\nlinks: %+v %+v", counterLine(sa), counterLine(sb), a.link.Stats(), b.link.Stats())
		})
	}
}

// window returns a copy of s whose buffer starts off bytes in.
func (s *side) window(off int) *side {
	w := &side{dev: s.dev, fabric: s.fabric, link: s.link, pd: s.pd, scq: s.scq, rcq: s.rcq, qp: s.qp, mr: s.mr, base: s.base + off}
	w.buf = s.buf[off:]
	return w
}

func counterLine(c rnic.Counters) string {
	s := ""
	for _, n := range c.Named() {
		if n.Value != 0 {
			s += fmt.Sprintf("%s=%d ", n.Name, n.Value)
		}
	}
	return s
}

package rnic_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire/bth"
)

// defaultCap is what gorxe's perftest asks of every QP when run with no
// options (perftest/params.go: tx depth 128, rx depth 512; side.go adds
// one to each, and one SGE each way), as rdma-core's perftest sizes
// ibv_qp_init_attr.cap from -t and -r. It is the "default capabilities"
// of an idle QP's memory budget.
var defaultCap = qp.Cap{MaxSendWR: 129, MaxRecvWR: 513, MaxSendSGE: 1, MaxRecvSGE: 1}

// fleet is two devices on one in-memory fabric with n connected RC QP
// pairs between them: a.qps[i] talks to b.qps[i]. Each device has one PD,
// one region of slots of slotSize bytes, and one send and one receive CQ
// shared by all its QPs, as perftest -q shares them.
type fleet struct {
	a, b     *fleetSide
	n        int
	slotSize int
}

type fleetSide struct {
	dev      *rnic.Device
	link     *mem.Link
	pd       *mr.PD
	buf      []byte
	mr       *mr.MR
	scq, rcq *cq.CQ
	qps      []*rnic.QP
	byQPN    map[uint32]int // index in qps of each QP number
}

// sge returns an SGE for n bytes at off in slot i.
func (s *fleetSide) sge(f *fleet, i, off, n int) qp.SGE {
	return qp.SGE{Addr: s.mr.IOVA() + uint64(i*f.slotSize+off), Length: uint32(n), LKey: s.mr.LKey()}
}

// slot returns slot i of the side's buffer.
func (s *fleetSide) slot(f *fleet, i int) []byte { return s.buf[i*f.slotSize : (i+1)*f.slotSize] }

// newFleetDevices opens the two devices for n QP pairs, with regions of
// slots slots and CQs of cqDepth entries, and no QPs yet.
func newFleetDevices(t testing.TB, n, slots, slotSize, cqDepth int) *fleet {
	t.Helper()
	f := &fleet{n: n, slotSize: slotSize}
	fab := mem.NewFabric()
	sides := [2]*fleetSide{}
	for i, addr := range []string{"10.0.0.1", "10.0.0.2"} {
		s := &fleetSide{byQPN: make(map[uint32]int, n)}
		var err error
		if s.link, err = fab.NewLink(netip.MustParseAddr(addr)); err != nil {
			t.Fatal(err)
		}
		if s.dev, err = rnic.Open(rnic.Config{Link: s.link, Name: []string{"A", "B"}[i]}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.dev.Close() })
		s.pd = s.dev.AllocPD()
		s.buf = make([]byte, slots*slotSize)
		if s.mr, err = s.dev.RegMR(s.pd, s.buf, mr.LocalWrite|mr.RemoteWrite|mr.RemoteRead); err != nil {
			t.Fatal(err)
		}
		if s.scq, err = s.dev.CreateCQ(cqDepth); err != nil {
			t.Fatal(err)
		}
		if s.rcq, err = s.dev.CreateCQ(cqDepth); err != nil {
			t.Fatal(err)
		}
		sides[i] = s
	}
	f.a, f.b = sides[0], sides[1]
	return f
}

// connect creates the n QP pairs with capabilities c and connects each,
// RESET -> INIT -> RTR -> RTS, with Connect's defaults (perftest's).
func (f *fleet) connect(t testing.TB, c qp.Cap) {
	t.Helper()
	for _, s := range []*fleetSide{f.a, f.b} {
		s.qps = make([]*rnic.QP, f.n)
		for i := range s.qps {
			q, err := s.dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: s.pd, SendCQ: s.scq, RecvCQ: s.rcq, Cap: c})
			if err != nil {
				t.Fatalf("QP %d of %d: %v", i, f.n, err)
			}
			s.qps[i] = q
			s.byQPN[uint32(q.Num())] = i
		}
	}
	for i := range f.n {
		for _, s := range [][2]*fleetSide{{f.a, f.b}, {f.b, f.a}} {
			local, peer := s[0].qps[i], s[1].qps[i]
			psn := bth.PSN(i*7919) & bth.PSNMask
			err := local.Connect(rnic.ConnectAttr{
				Local: local.Local(psn), Remote: peer.Local(psn), Access: s[0].mr.Access(),
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// close destroys the QPs and closes the devices, leaving nothing of the
// fleet on the heap for the cleanup functions to keep alive.
func (f *fleet) close() {
	for _, s := range []*fleetSide{f.a, f.b} {
		for _, q := range s.qps {
			q.Destroy()
		}
		s.dev.Close()
		s.qps, s.buf, s.byQPN = nil, nil, nil
	}
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestScale connects 1, 64, 1024 and 4096 QP pairs on one pair of devices
// and has every QP move traffic both ways: an RDMA WRITE of a few KiB
// into its peer's slot, then a SEND that lands in a posted receive. Every
// completion is checked (status, opcode, QP, wr_id, length) and so is
// every byte. 4096 is left out under -short.
func TestScale(t *testing.T) {
	for _, n := range []int{1, 64, 1024, 4096} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			if n > 1024 && testing.Short() {
				t.Skip("4096 QPs take a few seconds")
			}
			testScale(t, n)
		})
	}
}

// TestIdleQPMemory: a connected QP that has moved no traffic costs at
// most 64 KiB of heap (gorxe's budget for 4096 QPs a device), with
// perftest's capabilities and with the largest a QP may ask for: its
// queues grow as work is posted.
func TestIdleQPMemory(t *testing.T) {
	const n, budget = 256, 64 << 10
	largest := qp.Cap{MaxSendWR: qp.MaxWR, MaxRecvWR: qp.MaxWR, MaxSendSGE: qp.MaxSGE, MaxRecvSGE: qp.MaxSGE, MaxInlineData: qp.MaxInlineData}
	for _, c := range []qp.Cap{defaultCap, largest} {
		f := newFleetDevices(t, n, 1, 64, 64)
		before := heapInUse()
		f.connect(t, c)
		perQP := float64(heapInUse()-before) / (2 * n)
		t.Logf("caps %+v: %.0f bytes per idle QP", c, perQP)
		if perQP > budget {
			t.Errorf("caps %+v: an idle QP costs %.0f bytes, more than %d", c, perQP, budget)
		}
		f.close()
	}
}

func testScale(t *testing.T, n int) {
	// Each QP's slot holds, at 4 KiB apart: the bytes it writes, where its
	// peer's WRITE lands, the bytes it sends, and where its peer's SEND
	// lands. The WRITE spans packets at MTU 1024 but not at 4096.
	const writeLen, sendLen = 3000, 100
	const writeSrc, writeDst, sendSrc, recvDst, slot = 0, 4096, 8192, 12288, 16384
	f := newFleetDevices(t, n, n, slot, 2*n) // a slot for each QP
	f.connect(t, defaultCap)
	for i := range n {
		for k, s := range []*fleetSide{f.a, f.b} {
			fill(s.slot(f, i)[writeSrc:writeSrc+writeLen], uint64(4*i+k))
			fill(s.slot(f, i)[sendSrc:sendSrc+sendLen], uint64(4*i+k+2))
		}
	}
	// Receives first, on every QP; then each QP's WRITE and SEND.
	for _, s := range []*fleetSide{f.a, f.b} {
		for i, q := range s.qps {
			wr := qp.RecvWR{WRID: uint64(i), SGList: []qp.SGE{s.sge(f, i, recvDst, 4096)}}
			if _, err := q.PostRecv([]qp.RecvWR{wr}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range n {
		for _, s := range [][2]*fleetSide{{f.a, f.b}, {f.b, f.a}} {
			src, dst := s[0], s[1]
			wrs := []qp.SendWR{
				{WRID: uint64(i) << 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
					SGList:     []qp.SGE{src.sge(f, i, writeSrc, writeLen)},
					RemoteAddr: dst.sge(f, i, writeDst, 0).Addr, RKey: dst.mr.RKey()},
				{WRID: uint64(i)<<1 | 1, Opcode: qp.WRSend, Flags: qp.SendSignaled,
					SGList: []qp.SGE{src.sge(f, i, sendSrc, sendLen)}},
			}
			if _, err := src.qps[i].PostSend(wrs); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, s := range []*fleetSide{f.a, f.b} {
		sends := make([]uint64, n) // completions per QP: the WRITE's, then the SEND's
		for _, wc := range wait(t, s.scq, 2*n, time.Minute) {
			i, ok := s.byQPN[wc.QPNum]
			if !ok || sends[i] > 1 {
				t.Fatalf("%s: send completion %+v", s.dev.Name(), wc)
			}
			want := []cq.Opcode{cq.OpRDMAWrite, cq.OpSend}[sends[i]]
			if wc.Status != cq.StatusSuccess || wc.Opcode != want || wc.WRID != uint64(i)<<1|sends[i] {
				t.Fatalf("%s: send completion %+v for QP %d's work request %d", s.dev.Name(), wc, i, sends[i])
			}
			sends[i]++
		}
		got := make([]bool, n)
		for _, wc := range wait(t, s.rcq, n, time.Minute) {
			i, ok := s.byQPN[wc.QPNum]
			if !ok || got[i] || wc.Status != cq.StatusSuccess || wc.Opcode != cq.OpRecv || wc.WRID != uint64(i) || wc.ByteLen != sendLen {
				t.Fatalf("%s: receive completion %+v", s.dev.Name(), wc)
			}
			got[i] = true
		}
	}
	for i := range n {
		for _, s := range [][2]*fleetSide{{f.a, f.b}, {f.b, f.a}} {
			src, dst := s[0].slot(f, i), s[1].slot(f, i)
			if !bytes.Equal(dst[writeDst:writeDst+writeLen], src[writeSrc:writeSrc+writeLen]) {
				t.Fatalf("QP %d: the WRITE's bytes differ", i)
			}
			if !bytes.Equal(dst[recvDst:recvDst+sendLen], src[sendSrc:sendSrc+sendLen]) {
				t.Fatalf("QP %d: the SEND's bytes differ", i)
			}
		}
	}
	for _, s := range []*fleetSide{f.a, f.b} {
		c := s.dev.Counters()
		if c.NoQP != 0 || c.ICRCErrors != 0 || c.Malformed != 0 {
			t.Errorf("%s: %d packets for no QP, %d ICRC errors, %d malformed", s.dev.Name(), c.NoQP, c.ICRCErrors, c.Malformed)
		}
		if st := s.link.Stats(); st.Overflow != 0 {
			t.Logf("%s: %d packets overflowed the fabric's queue (recovered)", s.dev.Name(), st.Overflow)
		}
	}
}

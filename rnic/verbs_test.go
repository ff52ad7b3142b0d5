package rnic_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/qp"
)

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func TestSendRecv(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	for _, n := range []int{0, 1, 5, 1024, 1025, 3000, 65536} {
		fill(a.buf[:n], uint64(n))
		clear(b.buf)
		b.postRecv(t, qp.RecvWR{WRID: 7, SGList: []qp.SGE{b.sge(0, 70000)}})
		a.postSend(t, qp.SendWR{WRID: 9, Opcode: qp.WRSend, Flags: qp.SendSignaled, SGList: []qp.SGE{a.sge(0, n)}})
		rwc := wait(t, b.rcq, 1, 2*time.Second)[0]
		swc := wait(t, a.scq, 1, 2*time.Second)[0]
		if rwc.Status != cq.StatusSuccess || rwc.WRID != 7 || rwc.Opcode != cq.OpRecv || rwc.ByteLen != uint32(n) {
			t.Fatalf("%d bytes: receive completion %+v", n, rwc)
		}
		if swc.Status != cq.StatusSuccess || swc.WRID != 9 || swc.Opcode != cq.OpSend {
			t.Fatalf("%d bytes: send completion %+v", n, swc)
		}
		if !bytes.Equal(a.buf[:n], b.buf[:n]) {
			t.Fatalf("%d bytes: data differs", n)
		}
	}
}

func TestSendWithImmAndInline(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	b.postRecv(t, qp.RecvWR{WRID: 1, SGList: []qp.SGE{b.sge(0, 100)}}, qp.RecvWR{WRID: 2, SGList: []qp.SGE{b.sge(100, 100)}})
	a.postSend(t,
		qp.SendWR{WRID: 1, Opcode: qp.WRSendWithImm, ImmData: 0xdeadbeef, Flags: qp.SendSignaled | qp.SendInline, Inline: []byte("hello")},
		qp.SendWR{WRID: 2, Opcode: qp.WRSend, Flags: qp.SendSignaled | qp.SendInline, Inline: []byte("world!")},
	)
	wcs := wait(t, b.rcq, 2, 2*time.Second)
	if wcs[0].ImmData != 0xdeadbeef || wcs[0].Flags&cq.FlagWithImm == 0 || wcs[0].ByteLen != 5 {
		t.Fatalf("first receive %+v", wcs[0])
	}
	if wcs[1].Flags&cq.FlagWithImm != 0 || wcs[1].ByteLen != 6 {
		t.Fatalf("second receive %+v", wcs[1])
	}
	if string(b.buf[:5]) != "hello" || string(b.buf[100:106]) != "world!" {
		t.Fatalf("data %q %q", b.buf[:5], b.buf[100:106])
	}
	wait(t, a.scq, 2, time.Second)
}

func TestWriteRead(t *testing.T) {
	for _, mtu := range []qp.MTU{qp.MTU256, qp.MTU1024, qp.MTU4096} {
		a, b := newPair(t, pairOpts{mtu: mtu})
		for _, n := range []int{0, 1, 255, 256, 257, 4096, 100000} {
			fill(a.buf[:n], uint64(n)+uint64(mtu))
			a.postSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.SendSignaled,
				SGList: []qp.SGE{a.sge(0, n)}, RemoteAddr: b.addr(8), RKey: b.mr.RKey()})
			if wc := wait(t, a.scq, 1, 2*time.Second)[0]; wc.Status != cq.StatusSuccess || wc.Opcode != cq.OpRDMAWrite {
				t.Fatalf("write: %+v", wc)
			}
			if !bytes.Equal(a.buf[:n], b.buf[8:8+n]) {
				t.Fatalf("mtu %d, %d bytes: written data differs", mtu.Bytes(), n)
			}
			clear(a.buf[200000 : 200000+n])
			a.postSend(t, qp.SendWR{WRID: 2, Opcode: qp.WRRDMARead, Flags: qp.SendSignaled,
				SGList: []qp.SGE{a.sge(200000, n)}, RemoteAddr: b.addr(8), RKey: b.mr.RKey()})
			if wc := wait(t, a.scq, 1, 2*time.Second)[0]; wc.Status != cq.StatusSuccess || wc.Opcode != cq.OpRDMARead || wc.ByteLen != uint32(n) {
				t.Fatalf("read: %+v", wc)
			}
			if !bytes.Equal(a.buf[200000:200000+n], b.buf[8:8+n]) {
				t.Fatalf("mtu %d, %d bytes: read data differs", mtu.Bytes(), n)
			}
		}
	}
}

func TestAtomics(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	binary.NativeEndian.PutUint64(b.buf[64:], 100)
	a.postSend(t,
		qp.SendWR{WRID: 1, Opcode: qp.WRAtomicFetchAndAdd, Flags: qp.SendSignaled, SGList: []qp.SGE{a.sge(0, 8)},
			RemoteAddr: b.addr(64), RKey: b.mr.RKey(), CompareAdd: 5},
		qp.SendWR{WRID: 2, Opcode: qp.WRAtomicCmpAndSwp, Flags: qp.SendSignaled, SGList: []qp.SGE{a.sge(8, 8)},
			RemoteAddr: b.addr(64), RKey: b.mr.RKey(), CompareAdd: 105, Swap: 7},
		qp.SendWR{WRID: 3, Opcode: qp.WRAtomicCmpAndSwp, Flags: qp.SendSignaled, SGList: []qp.SGE{a.sge(16, 8)},
			RemoteAddr: b.addr(64), RKey: b.mr.RKey(), CompareAdd: 105, Swap: 9},
	)
	wcs := wait(t, a.scq, 3, 2*time.Second)
	for i, wc := range wcs {
		if wc.Status != cq.StatusSuccess || wc.WRID != uint64(i+1) || wc.ByteLen != 8 {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	got := []uint64{binary.NativeEndian.Uint64(a.buf[0:]), binary.NativeEndian.Uint64(a.buf[8:]), binary.NativeEndian.Uint64(a.buf[16:])}
	if got[0] != 100 || got[1] != 105 || got[2] != 7 {
		t.Fatalf("original values %v, want [100 105 7]", got)
	}
	if v := binary.NativeEndian.Uint64(b.buf[64:]); v != 7 {
		t.Fatalf("remote value %d, want 7", v)
	}
}

// TestWriteWithImm: the WRITE lands in memory and consumes a receive, which
// completes as RECV_RDMA_WITH_IMM with the DMA length and the immediate.
func TestWriteWithImm(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	fill(a.buf[:2500], 30)
	b.postRecv(t, qp.RecvWR{WRID: 77})
	a.postSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWriteWithImm, ImmData: 0x01020304, Flags: qp.SendSignaled,
		SGList: []qp.SGE{a.sge(0, 2500)}, RemoteAddr: b.addr(100), RKey: b.mr.RKey()})
	if wc := wait(t, a.scq, 1, 2*time.Second)[0]; wc.Status != cq.StatusSuccess || wc.Opcode != cq.OpRDMAWrite {
		t.Fatalf("send completion %+v", wc)
	}
	wc := wait(t, b.rcq, 1, 2*time.Second)[0]
	if wc.WRID != 77 || wc.Opcode != cq.OpRecvRDMAWithImm || wc.ByteLen != 2500 || wc.ImmData != 0x01020304 || wc.Flags&cq.FlagWithImm == 0 {
		t.Fatalf("receive completion %+v", wc)
	}
	if !bytes.Equal(a.buf[:2500], b.buf[100:2600]) {
		t.Fatal("data differs")
	}
}

// TestSendWithInv: the receive completion reports the key to invalidate.
func TestSendWithInv(t *testing.T) {
	a, b := newPair(t, pairOpts{})
	b.postRecv(t, qp.RecvWR{WRID: 5, SGList: []qp.SGE{b.sge(0, 64)}})
	a.postSend(t, qp.SendWR{WRID: 1, Opcode: qp.WRSendWithInv, InvalidateRKey: 0xabcdef12, Flags: qp.SendSignaled | qp.SendInline, Inline: []byte("inv")})
	wait(t, a.scq, 1, 2*time.Second)
	wc := wait(t, b.rcq, 1, 2*time.Second)[0]
	if wc.Flags&cq.FlagWithInv == 0 || wc.InvalidatedRKey != 0xabcdef12 || wc.ByteLen != 3 {
		t.Fatalf("receive completion %+v", wc)
	}
}

// TestUnsignaled: unsignaled successes produce no completion, but the
// signaled one after them does, in order.
func TestUnsignaled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newPair(t, pairOpts{})
		w1, w2, w3 := writeWR(1, a, b, 0, 10), writeWR(2, a, b, 0, 10), writeWR(3, a, b, 0, 10)
		w1.Flags, w2.Flags = 0, 0
		a.postSend(t, w1, w2, w3)
		if wc := wait(t, a.scq, 1, 2*time.Second)[0]; wc.WRID != 3 {
			t.Fatalf("completion %+v, want wr_id 3", wc)
		}
		expectNone(t, a.scq, 10*time.Millisecond)
	})
}

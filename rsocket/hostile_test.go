package rsocket_test

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/rsocket"
)

// peer is the far side of an rsocket connection, speaking the protocol by
// hand: its own struct rs_conn_data, and then whatever a test writes.
type peer struct {
	conn *cm.Conn
	q    *rnic.QP
	cq   *cq.CQ
	mr   *mr.MR // its receive buffer and target SGL, writable by the rsocket
	rbuf struct {
		addr       uint64
		key, limit uint32
	} // the rsocket's first receive buffer half, from its REP
}

// hostile connects a hand-made peer to an rsocket listener of options o;
// firstBuf is the rs_sge the peer offers as its first receive buffer, or
// nil for a real one.
func hostile(t *testing.T, o rsocket.Options, firstBuf func(p *peer) (addr uint64, key, length uint32)) (*peer, *rsocket.Conn) {
	t.Helper()
	dev, cmgr, accepted := serve(t, o)
	p := &peer{}
	pd := dev.AllocPD()
	var err error
	if p.cq, err = dev.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	if p.mr, err = dev.RegMR(pd, make([]byte, 1<<16), mr.LocalWrite|mr.RemoteWrite); err != nil {
		t.Fatal(err)
	}
	addr, key, length := p.mr.IOVA()+4096, uint32(p.mr.RKey()), uint32(32768)
	if firstBuf != nil {
		addr, key, length = firstBuf(p)
	}
	cd := make([]byte, 40)
	cd[0], cd[1] = 1, 2
	binary.BigEndian.PutUint16(cd[2:], 64)
	cd[7] = 1 // an iomap table of one entry, after its target SGL
	binary.BigEndian.PutUint64(cd[8:], p.mr.IOVA())
	binary.BigEndian.PutUint32(cd[16:], uint32(p.mr.RKey()))
	binary.BigEndian.PutUint32(cd[20:], 2)
	binary.BigEndian.PutUint64(cd[24:], addr)
	binary.BigEndian.PutUint32(cd[32:], key)
	binary.BigEndian.PutUint32(cd[36:], length)
	params := cm.ConnParams{PD: pd, SendCQ: p.cq, RecvCQ: p.cq, SigAll: true, Access: mr.RemoteWrite,
		Cap: qp.Cap{MaxSendWR: 16, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}, RetryCount: 7, RNRRetryCount: 7, PrivateData: cd}
	for range 64 {
		params.Receives = append(params.Receives, qp.RecvWR{WRID: 1})
	}
	conn, err := cmgr.Dial(ctx(t), netip.MustParseAddrPort("10.0.0.2:7471"), params)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	p.conn, p.q = conn, conn.QP()
	rep := conn.PrivateData()
	if len(rep) < 40 {
		t.Fatalf("the rsocket's REP carries %d bytes of private data", len(rep))
	}
	p.rbuf.addr, p.rbuf.key, p.rbuf.limit = binary.BigEndian.Uint64(rep[24:]), binary.BigEndian.Uint32(rep[32:]), binary.BigEndian.Uint32(rep[36:])
	server := <-accepted
	if server == nil {
		t.FailNow()
	}
	t.Cleanup(func() { server.Close() })
	return p, server
}

// write sends a WRITE with immediate imm of data into the rsocket's receive
// buffer, and waits for it to complete.
func (p *peer) write(t *testing.T, imm uint32, data []byte) {
	t.Helper()
	wr := qp.SendWR{WRID: 9, Opcode: qp.WRRDMAWriteWithImm, ImmData: imm, RemoteAddr: p.rbuf.addr, RKey: mr.Key(p.rbuf.key), Flags: qp.SendInline, Inline: data}
	if _, err := p.q.PostSend([]qp.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]cq.WC, 1)
	if _, err := p.cq.Wait(ctx(t), wcs); err != nil || wcs[0].Status != cq.StatusSuccess {
		t.Fatalf("the peer's write: %v, %v", wcs[0].Status, err)
	}
}

// within runs fn and fails the test if it has not returned in 10 s: a
// hostile peer must never hang the rsocket.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s hangs", what)
	}
}

// TestHostilePeer: a peer that breaks rsockets' protocol ends the
// connection with an error, or is ignored where the protocol leaves room;
// it never panics the rsocket, hangs it, or makes it read or write outside
// its buffers.
func TestHostilePeer(t *testing.T) {
	t.Run("more data than the buffer", func(t *testing.T) {
		p, server := hostile(t, rsocket.Options{}, nil)
		p.write(t, 0<<29|(1<<17+1), nil) // claims one byte more than the 128 KiB buffer
		within(t, "Read", func() {
			if n, err := server.Read(make([]byte, 64)); err == nil || !strings.Contains(err.Error(), "more than the receive buffer holds") {
				t.Errorf("Read = %d, %v; want the protocol error", n, err)
			}
		})
	})
	t.Run("unknown operations", func(t *testing.T) {
		// RS_OP_WRITE (riowrite's, 2), the reserved 1, 3 and 5, and
		// IOMAP_SGL (6), which gorxe offered no room for: none is data,
		// and the data after them reads as sent. An empty data message
		// does not make Read return nothing.
		p, server := hostile(t, rsocket.Options{}, nil)
		for _, op := range []uint32{1, 2, 3, 5, 6} {
			p.write(t, op<<29|100, nil)
		}
		p.write(t, 0<<29|0, nil) // and an empty message, which rsend never sends
		read := make(chan string, 1)
		go func() {
			b := make([]byte, 64)
			n, err := server.Read(b)
			if err != nil {
				t.Error(err)
			}
			read <- string(b[:n])
		}()
		time.Sleep(50 * time.Millisecond) // Read has the empty message to itself
		p.write(t, 0<<29|5, []byte("hello"))
		within(t, "Read", func() {
			if got := <-read; got != "hello" {
				t.Errorf("Read = %q; want hello", got)
			}
		})
	})
	t.Run("a first buffer it cannot write", func(t *testing.T) {
		// The peer names a buffer outside its memory region: the
		// rsocket's write fails with a remote access error, and Write
		// says so.
		_, server := hostile(t, rsocket.Options{}, func(p *peer) (uint64, uint32, uint32) {
			return p.mr.IOVA() + 1<<20, uint32(p.mr.RKey()), 4096
		})
		within(t, "Write", func() {
			// Writes are posted and complete later: one made before the
			// failed one's completion came back returns nil.
			var err error
			for i := 0; err == nil && i < 1000; i++ {
				_, err = server.Write(make([]byte, 100))
			}
			if err == nil || !strings.Contains(err.Error(), cq.StatusRemAccessErr.String()) {
				t.Errorf("Write: %v; want the remote access error", err)
			}
		})
	})
}

// TestKeepAlive: with KeepAlive set, the rsocket sends a keepalive
// control message (a zero-length WRITE with immediate 0xE0000001) every
// KeepAlive while it is idle, as rsockets' keepalive service; none
// without it.
func TestKeepAlive(t *testing.T) {
	for _, every := range []time.Duration{20 * time.Millisecond, 0} {
		p, _ := hostile(t, rsocket.Options{KeepAlive: every}, nil)
		keepalives := 0
		wcs := make([]cq.WC, 8)
		start := time.Now()
		wait := 5 * time.Second // for three; without keepalives, a while for none
		if every == 0 {
			wait = 100 * time.Millisecond
		}
		for time.Since(start) < wait && keepalives < 3 {
			n, err := p.cq.Poll(wcs)
			if err != nil {
				t.Fatal(err)
			}
			for _, wc := range wcs[:n] {
				if wc.Opcode != cq.OpRecvRDMAWithImm || wc.ImmData != 7<<29|1 || wc.ByteLen != 0 {
					t.Fatalf("the peer got %+v; want only keepalives", wc)
				}
				keepalives++
			}
			time.Sleep(time.Millisecond)
		}
		took := time.Since(start)
		switch {
		case every == 0 && keepalives != 0:
			t.Errorf("no KeepAlive: %d keepalives", keepalives)
		case every != 0 && (keepalives < 3 || time.Duration(keepalives) > took/every+1):
			t.Errorf("KeepAlive %v: %d keepalives in %v", every, keepalives, took)
		}
	}
}

// TestWaitPeerGone: a peer that disconnects (a DREQ, without rsockets'
// disconnect message first) ends an IOMap.Wait with an error, not a wait,
// or a spin, that never ends.
func TestWaitPeerGone(t *testing.T) {
	p, server := hostile(t, rsocket.Options{IOMapSize: 1}, nil)
	m, err := server.IOMap(64, 0)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond) // Wait has gone to sleep
		p.conn.Close()
	}()
	within(t, "Wait", func() {
		if err := m.Wait(ctx(t), 63, 1); err == nil {
			t.Error("Wait returned nil for a byte never written")
		}
	})
}

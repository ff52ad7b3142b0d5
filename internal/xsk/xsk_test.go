//go:build linux

package xsk_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/internal/xsk"
)

const port = 4791

// sizes are the test payloads' sizes: the smallest, a small RoCE packet,
// a 1500-byte MTU's worth, and the most one received frame holds (a
// 4096-byte frame less the kernel's 256 bytes of headroom, less the
// Ethernet, IPv4 and UDP headers).
var sizes = []int{4, 64, 1472, 3840 - 42}

// wantPackets checks that pkts are the payloads of packets 0..n-1, each
// once, whose sizes cycle through sz, and returns their total size.
func wantPackets(t *testing.T, pkts [][]byte, sz []int) (total int) {
	t.Helper()
	seen := make([]bool, len(pkts))
	for _, p := range pkts {
		seq, err := checkPayload(p)
		if err != nil {
			t.Fatal(err)
		}
		if int(seq) >= len(seen) || seen[seq] {
			t.Fatalf("packet %d unexpected or twice", seq)
		}
		seen[seq] = true
		if want := sz[int(seq)%len(sz)]; len(p) != want {
			t.Fatalf("packet %d has %d bytes, want %d", seq, len(p), want)
		}
		total += len(p)
	}
	return total
}

// TestKernelToXSK sends datagrams from a kernel UDP socket in one
// namespace to an AF_XDP socket in the other.
func TestKernelToXSK(t *testing.T) {
	a, b := newPair(t, 1500, 1)
	eb := open(t, b, xsk.Config{}, true)
	sender := udpConn(t, a, 50000)
	const n = 1000 // fewer than the fill ring's frames: nothing can drop
	sz := []int{4, 64, 1472}
	go func() {
		to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(b.ip, port))
		for i := range n {
			if _, err := sender.WriteToUDP(payload(uint32(i), sz[i%len(sz)]), to); err != nil {
				t.Errorf("WriteToUDP: %v", err)
				return
			}
		}
	}()
	pkts, _ := eb.receive(t, n, func(f []byte) bool { return udpPayload(f, port) != nil })
	for i, f := range pkts {
		pkts[i] = udpPayload(f, port)
	}
	total := wantPackets(t, pkts, sz)
	st, err := eb.sock.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.RxPackets < n || st.RxBytes < uint64(total+n*42) || st.RxDropped != 0 || st.RxRingFull != 0 {
		t.Fatalf("stats %+v after %d packets, %d bytes of payload", st, n, total)
	}
}

// TestXSKToKernel sends frames from an AF_XDP socket to a kernel UDP
// socket, frames up to a whole 4096-byte UMEM frame.
func TestXSKToKernel(t *testing.T) {
	a, b := newPair(t, 9000, 1)
	ea := open(t, a, xsk.Config{}, false)
	receiver := udpConn(t, b, port)
	const n = 1000
	sz := append(sizes, 4096-42)
	var got [][]byte
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 9000)
		receiver.SetReadDeadline(time.Now().Add(timeout))
		for len(got) < n {
			k, err := receiver.Read(buf)
			if err != nil {
				done <- err
				return
			}
			got = append(got, append([]byte(nil), buf[:k]...))
		}
		done <- nil
	}()
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = udpFrame(a, b, 50000, port, payload(uint32(i), sz[i%len(sz)]))
	}
	// In bursts the receiving socket's buffer can hold.
	for i := 0; i < n; i += 100 {
		ea.send(t, frames[i:min(i+100, n)])
	}
	if err := <-done; err != nil {
		t.Fatalf("received %d of %d datagrams: %v", len(got), n, err)
	}
	total := wantPackets(t, got, sz)
	st, err := ea.sock.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.TxPackets != n || st.TxBytes != uint64(total+n*42) || st.TxInvalidDescs != 0 {
		t.Fatalf("stats %+v after %d frames, %d bytes of payload", st, n, total)
	}
	// Copy mode always asks for a kick: the kernel sends from sendto.
	if st.TxKicks == 0 {
		t.Fatalf("no kicks in copy mode: %+v", st)
	}
}

// exchange has x send n frames of the given payload sizes to y and y
// the same to x, at once, and checks what each receives.
func exchange(t *testing.T, x, y *endpoint, n int, sz []int) (ndesc []int) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, d := range []struct{ from, to *endpoint }{{x, y}, {y, x}} {
		frames := make([][]byte, n)
		for i := range frames {
			frames[i] = udpFrame(d.from.h, d.to.h, 50000, port, payload(uint32(i), sz[i%len(sz)]))
		}
		wg.Add(2)
		go func() { defer wg.Done(); d.from.send(t, frames) }()
		go func() {
			defer wg.Done()
			pkts, nd := d.to.receive(t, n, func(f []byte) bool { return udpPayload(f, port) != nil })
			for i, f := range pkts {
				pkts[i] = udpPayload(f, port)
			}
			wantPackets(t, pkts, sz)
			mu.Lock()
			ndesc = append(ndesc, nd...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return ndesc
}

// TestXSKToXSK sends frames both ways between two AF_XDP sockets at once.
func TestXSKToXSK(t *testing.T) {
	a, b := newPair(t, 9000, 1)
	ea, eb := open(t, a, xsk.Config{}, true), open(t, b, xsk.Config{}, true)
	const n = 1000
	for _, nd := range exchange(t, ea, eb, n, sizes) {
		if nd != 1 {
			t.Fatalf("a frame of at most 3840 bytes took %d descriptors", nd)
		}
	}
	for _, e := range []*endpoint{ea, eb} {
		st, err := e.sock.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.TxPackets != n || st.RxPackets != n || st.TxBytes != st.RxBytes || st.TxKicks == 0 || st.RxDropped != 0 {
			t.Errorf("%s: stats %+v after %d packets each way", e.h.ifname, st, n)
		}
		for _, c := range st.Named() {
			t.Logf("%s %s %d", e.h.ifname, c.Name, c.Value)
		}
	}
}

// roceFrame is the size of an Ethernet frame that carries a RoCE v2 RDMA
// WRITE FIRST packet with a 4096-byte path MTU payload over IPv4:
// Ethernet 14, IPv4 20, UDP 8, BTH 12, RETH 16, payload 4096, ICRC 4.
const roceFrame = 14 + 20 + 8 + 12 + 16 + 4096 + 4

// TestMultiBuffer carries frames larger than a UMEM frame, up to a 9000
// MTU's, in several descriptors (XDP_USE_SG): between two AF_XDP sockets
// both ways, from a kernel UDP socket, and to one.
func TestMultiBuffer(t *testing.T) {
	a, b := newPair(t, 9000, 1)
	c := xsk.Config{MultiBuffer: true}
	ea, eb := open(t, a, c, true), open(t, b, c, true)
	if !ea.sock.MultiBuffer() {
		t.Fatal("MultiBuffer() is false")
	}
	sz := []int{64, roceFrame - 42, 4096 - 42, 4096, 8000, 9000 - 28}
	const n = 600
	ndesc := exchange(t, ea, eb, n, sz)
	// A received frame holds 3840 bytes: the RoCE frame takes 2.
	count := map[int]int{}
	for _, d := range ndesc {
		count[d]++
	}
	if count[1] == 0 || count[2] == 0 || count[3] == 0 || len(ndesc) != 2*n {
		t.Fatalf("packets by descriptor count %v, want some of 1, 2 and 3", count)
	}

	t.Run("kernel to XSK", func(t *testing.T) {
		sender := udpConn(t, a, 50001)
		go func() {
			to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(b.ip, port))
			for i := range 200 {
				if _, err := sender.WriteToUDP(payload(uint32(i), sz[i%len(sz)]), to); err != nil {
					t.Errorf("WriteToUDP: %v", err)
					return
				}
			}
		}()
		pkts, _ := eb.receive(t, 200, func(f []byte) bool { return udpPayload(f, port) != nil })
		for i, f := range pkts {
			pkts[i] = udpPayload(f, port)
		}
		wantPackets(t, pkts, sz)
	})

	t.Run("XSK to kernel", func(t *testing.T) {
		// With b's XSKMAP entry gone, its program passes every frame to
		// the kernel's stack.
		if err := eb.xsks.Delete(uint32(0)); err != nil {
			t.Fatal(err)
		}
		receiver := udpConn(t, b, port+1)
		frames := make([][]byte, 200)
		for i := range frames {
			frames[i] = udpFrame(a, b, 50000, port+1, payload(uint32(i), sz[i%len(sz)]))
		}
		ea.send(t, frames)
		var got [][]byte
		buf := make([]byte, 9000)
		receiver.SetReadDeadline(time.Now().Add(timeout))
		for len(got) < len(frames) {
			k, err := receiver.Read(buf)
			if err != nil {
				t.Fatalf("received %d of %d: %v", len(got), len(frames), err)
			}
			got = append(got, append([]byte(nil), buf[:k]...))
		}
		wantPackets(t, got, sz)
	})
}

// TestGenericXDP receives through a program attached in generic (SKB)
// mode, which every interface has, single- and multi-buffer.
func TestGenericXDP(t *testing.T) {
	for _, mb := range []bool{false, true} {
		t.Run(fmt.Sprintf("MultiBuffer=%v", mb), func(t *testing.T) {
			a, b := newPair(t, 9000, 1)
			ea := open(t, a, xsk.Config{MultiBuffer: true}, false)
			eb := openMode(t, b, xsk.Config{MultiBuffer: mb}, link.XDPGenericMode)
			sz := []int{64, 3840 - 42}
			if mb {
				sz = append(sz, roceFrame-42, 9000-28)
			}
			const n = 200
			frames := make([][]byte, n)
			for i := range frames {
				frames[i] = udpFrame(a, b, 50000, port, payload(uint32(i), sz[i%len(sz)]))
			}
			ea.send(t, frames)
			pkts, _ := eb.receive(t, n, func(f []byte) bool { return udpPayload(f, port) != nil })
			for i, f := range pkts {
				pkts[i] = udpPayload(f, port)
			}
			wantPackets(t, pkts, sz)
		})
	}
}

// TestOversizeDropped checks that a socket without MultiBuffer drops a
// frame larger than a UMEM frame holds, and counts it.
func TestOversizeDropped(t *testing.T) {
	a, b := newPair(t, 9000, 1)
	ea, eb := open(t, a, xsk.Config{MultiBuffer: true}, false), open(t, b, xsk.Config{}, true)
	big := udpFrame(a, b, 50000, port, payload(0, roceFrame-42))
	small := udpFrame(a, b, 50000, port, payload(1, 100))
	ea.send(t, [][]byte{big, small})
	pkts, _ := eb.receive(t, 1, func(f []byte) bool { return udpPayload(f, port) != nil })
	if seq, _ := checkPayload(udpPayload(pkts[0], port)); seq != 1 {
		t.Fatalf("received packet %d, want only the small one", seq)
	}
	st, err := eb.sock.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.RxDropped != 1 {
		t.Fatalf("RxDropped = %d after one %d-byte frame; stats %+v", st.RxDropped, len(big), st)
	}
}

// TestSharedUMEM opens one socket per RX queue of a two-queue interface
// on one UMEM (XDP_SHARED_UMEM), each with its own fill and completion
// rings: flows spread over both queues arrive, each frame once, and the
// second socket sends too.
func TestSharedUMEM(t *testing.T) {
	a, b := newPair(t, 1500, 2)
	u, err := xsk.NewUMEM(xsk.UMEMConfig{Frames: 8192})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	prog, xsks := redirectProgram(t, true)
	socks := make([]*xsk.Socket, 2)
	b.do(t, func() error {
		for q := range socks {
			s, err := xsk.Open(u, b.ifindex, q, xsk.Config{})
			if err != nil {
				return err
			}
			socks[q] = s
			if err := xsks.Put(uint32(q), uint32(s.FD())); err != nil {
				return err
			}
		}
		if _, err := xsk.Open(u, b.ifindex, 1, xsk.Config{}); err == nil {
			t.Error("a second socket on queue 1 of one UMEM opened")
		}
		l, err := attachXDP(prog, b.ifindex)
		if err != nil {
			return err
		}
		t.Cleanup(func() { l.Close() })
		return nil
	})
	all := u.FreeFrames()
	eps := make([]*endpoint, 2)
	for q, s := range socks {
		eps[q] = &endpoint{h: b, umem: u, sock: s, rx: all.Split(2048), tx: all.Split(2048)}
		if _, err := s.FillFrom(eps[q].rx, 2048); err != nil {
			t.Fatal(err)
		}
	}

	// 32 flows from 32 source ports: the sending veth hashes them over
	// its two TX queues, which feed the two RX queues of the other end.
	const flows, perFlow = 32, 30
	go func() {
		to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(b.ip, port))
		for f := range flows {
			c := udpConn(t, a, uint16(40000+f))
			for i := range perFlow {
				if _, err := c.WriteToUDP(payload(uint32(f*perFlow+i), 64), to); err != nil {
					t.Errorf("WriteToUDP: %v", err)
					return
				}
			}
		}
	}()
	var got [][]byte
	perQueue := make([]int, 2)
	deadline := time.Now().Add(timeout)
	descs := make([]xsk.Desc, 64)
	for len(got) < flows*perFlow {
		idle := true
		for q, e := range eps {
			k, err := e.sock.Receive(descs)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range descs[:k] {
				if p := udpPayload(u.Bytes(d), port); p != nil {
					got = append(got, append([]byte(nil), p...))
					perQueue[q]++
				}
				e.rx.Push(d.Addr)
			}
			if _, err := e.sock.FillFrom(e.rx, e.rx.Len()); err != nil {
				t.Fatal(err)
			}
			idle = idle && k == 0
		}
		if idle {
			if time.Now().After(deadline) {
				t.Fatalf("received %d of %d packets (per queue %v)", len(got), flows*perFlow, perQueue)
			}
			time.Sleep(time.Millisecond)
		}
	}
	wantPackets(t, got, []int{64})
	if perQueue[0] == 0 || perQueue[1] == 0 {
		t.Errorf("packets per queue %v: want both queues used", perQueue)
	}
	t.Logf("packets per queue: %v", perQueue)

	// The second socket sends, through its own completion ring.
	receiver := udpConn(t, a, port)
	eps[1].send(t, [][]byte{udpFrame(b, a, 50000, port, payload(0, 100))})
	receiver.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 1500)
	if k, err := receiver.Read(buf); err != nil || k != 100 {
		t.Fatalf("datagram from the second socket: %d bytes, %v", k, err)
	}
}

// TestOpenErrors checks the errors a user can act on.
func TestOpenErrors(t *testing.T) {
	for _, fs := range []uint32{1024, 3000, 8192} {
		if _, err := xsk.NewUMEM(xsk.UMEMConfig{FrameSize: fs}); err == nil {
			t.Errorf("NewUMEM with %d-byte frames succeeded", fs)
		}
	}
	a, _ := newPair(t, 1500, 1)
	u, err := xsk.NewUMEM(xsk.UMEMConfig{Frames: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	for _, c := range []struct {
		name         string
		ifindex, q   int
		c            xsk.Config
		want         error
		mentionsText string
	}{
		{"no such interface", 999999, 0, xsk.Config{}, unix.ENODEV, "no interface"},
		{"no such queue", a.ifindex, 7, xsk.Config{}, unix.EINVAL, "no such queue"},
		{"zero-copy on veth", a.ifindex, 0, xsk.Config{Mode: xsk.ModeZeroCopy}, unix.EOPNOTSUPP, "zero-copy"},
		{"ring size", a.ifindex, 0, xsk.Config{RXRingSize: 1000}, nil, "power of two"},
	} {
		err := a.try(func() error {
			s, err := xsk.Open(u, c.ifindex, c.q, c.c)
			if err == nil {
				s.Close()
			}
			return err
		})
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) || !strings.Contains(err.Error(), c.mentionsText) {
			t.Errorf("%s: %v; want %v mentioning %q", c.name, err, c.want, c.mentionsText)
		} else {
			t.Logf("%s: %v", c.name, err)
		}
	}

	// A queue takes one socket; Close frees it, once.
	u2, err := xsk.NewUMEM(xsk.UMEMConfig{Frames: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u2.Close() })
	var s1 *xsk.Socket
	a.do(t, func() (err error) { s1, err = xsk.Open(u, a.ifindex, 0, xsk.Config{}); return err })
	err = a.try(func() error { _, err := xsk.Open(u2, a.ifindex, 0, xsk.Config{}); return err })
	if !errors.Is(err, unix.EBUSY) {
		t.Errorf("a second UMEM's socket on a taken queue: %v, want EBUSY", err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); !errors.Is(err, xsk.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	// The kernel frees the queue in deferred work, a moment after Close.
	var s3 *xsk.Socket
	for deadline := time.Now().Add(timeout); ; time.Sleep(time.Millisecond) {
		err = a.try(func() (err error) { s3, err = xsk.Open(u2, a.ifindex, 0, xsk.Config{}); return err })
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("Open on a queue whose socket was closed: %v", err)
	}
	// Closing the UMEM closes its sockets.
	if err := u2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s3.Stats(); !errors.Is(err, xsk.ErrClosed) {
		t.Errorf("Stats of a socket of a closed UMEM: %v", err)
	}
}

// TestOpenWithoutCapNetRaw drops CAP_NET_RAW from the effective set of
// one thread (capabilities are per thread) and checks that Open says what
// is missing.
func TestOpenWithoutCapNetRaw(t *testing.T) {
	needRoot(t)
	u, err := xsk.NewUMEM(xsk.UMEMConfig{Frames: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			done <- err
			return
		}
		data[unix.CAP_NET_RAW/32].Effective &^= 1 << (unix.CAP_NET_RAW % 32)
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			done <- err
			return
		}
		_, err := xsk.Open(u, 1, 0, xsk.Config{})
		done <- err
	}()
	err = <-done
	if !errors.Is(err, unix.EPERM) || !strings.Contains(err.Error(), "CAP_NET_RAW") {
		t.Fatalf("Open without CAP_NET_RAW: %v; want EPERM naming CAP_NET_RAW", err)
	}
	t.Log(err)
}

// TestSteadyStateAllocs checks that a round of the data path (transmit a
// batch, receive it, refill, complete) allocates nothing.
func TestSteadyStateAllocs(t *testing.T) {
	a, b := newPair(t, 1500, 1)
	ea, eb := open(t, a, xsk.Config{}, false), open(t, b, xsk.Config{}, true)
	frame := udpFrame(a, b, 50000, port, payload(0, 64))
	tx := make([]xsk.Desc, 64)
	rx := make([]xsk.Desc, 64)
	var failed atomic.Bool
	round := func() {
		for i := range tx {
			addr, ok := ea.tx.Pop()
			if !ok {
				failed.Store(true)
				return
			}
			tx[i] = xsk.Desc{Addr: addr, Len: uint32(copy(ea.umem.Frame(addr), frame))}
		}
		for sent := 0; sent < len(tx); {
			n, err := ea.sock.Transmit(tx[sent:])
			if err != nil {
				failed.Store(true)
				return
			}
			sent += n
		}
		deadline := time.Now().Add(timeout)
		for got := 0; got < len(tx) && time.Now().Before(deadline); {
			n, err := eb.sock.Receive(rx)
			if err != nil {
				failed.Store(true)
				return
			}
			for _, d := range rx[:n] {
				eb.rx.Push(d.Addr)
			}
			got += n
			eb.sock.FillFrom(eb.rx, eb.rx.Len())
			if n == 0 {
				eb.sock.Wait(time.Millisecond)
			}
		}
		for ea.tx.Len() < 64 && time.Now().Before(deadline) {
			ea.sock.CompleteTo(ea.tx)
		}
	}
	round() // warm up
	if allocs := testing.AllocsPerRun(50, round); allocs != 0 {
		t.Errorf("%v allocations per round of 64 packets", allocs)
	}
	if failed.Load() {
		t.Fatal("a round failed")
	}
}

package rnic_test

import (
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/qp"
)

// BenchmarkPolledPingPong is write_lat's round trip with the waiting taken
// out: one goroutine drives two devices on kernel UDP links over loopback.
// A writes 2 bytes into B; B's Poll finds them, and B writes 2 bytes back
// with the ACK it owes A behind them, in one sendmmsg; A's Poll finds
// them and the ACK of its write. Each side reaps its previous WRITE after posting the next, as
// gorxe's write_lat does. So ns/op is the CPU that one round trip costs
// gorxe and the kernel together: four datagrams, each sent and received.
// BenchmarkRawPingPong is the kernel's share alone; the difference is
// gorxe's turnaround, twice.
func BenchmarkPolledPingPong(b *testing.B) {
	a, bb := newPair(b, pairOpts{udp: true, pollGrace: time.Minute})
	sides := [2]*side{a, bb}
	// Each side writes from offsets 64 and 128 in turn into its peer's
	// offset 0, so no buffer changes under a WRITE not yet reaped.
	var wrs [2][2]qp.SendWR
	for s, me := range sides {
		peer := sides[1-s]
		for k := range 2 {
			wrs[s][k] = writeWR(uint64(k), me, peer, 64*(k+1), 2)
			wrs[s][k].RemoteAddr = peer.addr(0)
		}
	}
	var wc [1]cq.WC
	// reap takes s's oldest completion, polling for it if its ACK has
	// not been handled yet.
	reap := func(s *side) {
		for deadline := time.Now().Add(10 * time.Second); ; {
			if n, _ := s.scq.Poll(wc[:]); n == 1 {
				if wc[0].Status != cq.StatusSuccess {
					b.Fatalf("completion %v", wc[0].Status)
				}
				return
			}
			s.dev.Poll()
			if time.Now().After(deadline) {
				b.Fatal("no completion in 10s")
			}
		}
	}
	// await polls s until the peer's value v is in its offset 1.
	await := func(s *side, v byte) {
		for deadline := time.Now().Add(10 * time.Second); s.buf[1] != v; {
			s.dev.Poll()
			if time.Now().After(deadline) {
				b.Fatalf("value %d not written in 10s", v)
			}
		}
	}
	turn := func(i, s int) {
		me := sides[s]
		v := byte(i%255 + 1)
		me.buf[64*(i%2+1)+1] = v
		if _, err := me.qp.PostSend(wrs[s][i%2 : i%2+1]); err != nil {
			b.Fatal(err)
		}
		if i > 0 {
			reap(me)
		}
		await(sides[1-s], v)
	}
	b.ReportAllocs()
	// The workers wake for the QPs' timers, not for the packets: a few a
	// millisecond, far below one a round trip.
	turns0 := a.dev.WorkerTurns() + bb.dev.WorkerTurns()
	i := 0
	for b.Loop() {
		turn(i, 0)
		turn(i, 1)
		i++
	}
	b.ReportMetric(float64(a.dev.WorkerTurns()+bb.dev.WorkerTurns()-turns0)/float64(i), "worker-turns/op")
}

// BenchmarkRawPingPong is BenchmarkPolledPingPong's four datagrams
// between two plain UDP sockets on loopback: each side sends a 36-byte
// message (a 2-byte RDMA WRITE's UDP payload) and then a 20-byte one (an
// ACK's), in one sendmmsg, and its peer reads both with recvmmsg.
func BenchmarkRawPingPong(b *testing.B) {
	addrs := [2]netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")}
	var fds [2]int
	var sas [2]unix.RawSockaddrInet4
	for i, a := range addrs {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { unix.Close(fd) })
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: a.As4()}); err != nil {
			b.Fatal(err)
		}
		sa, err := unix.Getsockname(fd)
		if err != nil {
			b.Fatal(err)
		}
		port := sa.(*unix.SockaddrInet4).Port
		fds[i] = fd
		sas[i] = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.As4()}
		p := (*[2]byte)(unsafe.Pointer(&sas[i].Port))
		p[0], p[1] = byte(port>>8), byte(port)
	}
	type mmsghdr struct {
		hdr unix.Msghdr
		n   uint32
	}
	msg, ack, in := make([]byte, 36), make([]byte, 20), make([]byte, 2*2048)
	var tx, rx [2]mmsghdr
	var txIov, rxIov [2]unix.Iovec
	for k, p := range [2][]byte{msg, ack} {
		txIov[k] = unix.Iovec{Base: &p[0]}
		txIov[k].SetLen(len(p))
		tx[k].hdr.Iov = &txIov[k]
		tx[k].hdr.SetIovlen(1)
		rxIov[k] = unix.Iovec{Base: &in[k*2048]}
		rxIov[k].SetLen(2048)
		rx[k].hdr.Iov = &rxIov[k]
		rx[k].hdr.SetIovlen(1)
	}
	turn := func(from, to int) {
		for k := range tx {
			tx[k].hdr.Name = (*byte)(unsafe.Pointer(&sas[to]))
			tx[k].hdr.Namelen = unix.SizeofSockaddrInet4
		}
		// The message, then the ACK, as gorxe sends them.
		if n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fds[from]), uintptr(unsafe.Pointer(&tx[0])), 2, 0, 0, 0); e != 0 || n != 2 {
			b.Fatalf("sendmmsg sent %d of 2: %v", n, e)
		}
		for got := 0; got < 2; {
			n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fds[to]), uintptr(unsafe.Pointer(&rx[got])), uintptr(2-got), unix.MSG_DONTWAIT, 0, 0)
			switch e {
			case 0:
				got += int(n)
			case unix.EAGAIN:
			default:
				b.Fatal(e)
			}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		turn(0, 1)
		turn(1, 0)
	}
}

// Command udpraw measures the path gorxe's udp link rides on, with nothing
// of gorxe in it: UDP datagrams with batched sendmmsg and recvmmsg, and a
// one-datagram ping-pong. test/bench/bench.sh runs it beside gorxe and
// prints gorxe's figures as ratios to it.
//
//	udpraw sink  -addr 10.77.0.2:9000 -d 5s              receive, then print JSON
//	udpraw blast -addr 10.77.0.2:9000 -size 4096 -d 5s   send as fast as possible
//	udpraw blast ... -gso 15                             the same, 15 datagrams per UDP GSO send
//	udpraw pong  -addr 10.77.0.2:9001                    echo datagrams back
//	udpraw pong  -addr 10.77.0.2:9001 -bye               the same, and exit when a ping says it is done
//	udpraw ping  -addr 10.77.0.2:9001 -n 5000            round trips, then print JSON
//	udpraw ping|pong ... -ack                            each side also sends an ACK-sized datagram behind each message
//	udpraw ping|pong ... -ack -ackgso                    the message and its ACK as one UDP GSO send, cut by the receiving kernel
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: udpraw sink|blast|pong|ping [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	addr := fs.String("addr", "", "address to bind (sink, pong) or send to (blast, ping)")
	size := fs.Int("size", 4096, "datagram payload size")
	dur := fs.Duration("d", 5*time.Second, "how long to run (sink stops this long after the first datagram)")
	n := fs.Int("n", 5000, "round trips (ping)")
	batch := fs.Int("batch", 64, "datagrams per sendmmsg/recvmmsg call")
	gso := fs.Int("gso", 0, "blast: send this many datagrams at a time as one UDP GSO send (UDP_SEGMENT), as gorxe's udp link does")
	busy := fs.Bool("busy", false, "ping, pong: busy poll the socket instead of sleeping in the Go runtime's poller")
	ack := fs.Bool("ack", false, "ping, pong: send a 20-byte datagram behind every message in the same sendmmsg, as a reliable connection's ACK of the message before")
	ackGSO := fs.Bool("ackgso", false, "ping, pong, with -ack: send the message and its ACK as one UDP GSO send (UDP_SEGMENT), which the receiving kernel cuts in two; ping's -size at least 20")
	ppoll := fs.Int("ppoll", 0, "ping, pong, with -busy: wait in poll(2), a blocking system call, between reads rather than spin, as gorxe's udp link waits for a program that sleeps, with this timeout in milliseconds (negative: none)")
	bye := fs.Bool("bye", false, "pong: exit when a ping says it is done (each ping ends by saying so), so that whoever started pong need not stop it")
	gro := fs.Bool("gro", false, "sink, and sleeping ping and pong: turn on UDP_GRO on the socket, so that datagrams a sender's GSO joined (blast -gso, -ackgso) arrive as one, not cut by the receiving kernel")
	fs.Parse(os.Args[2:])
	if *ackGSO && (!*ack || (os.Args[1] == "ping" && *size < len(ackMessage))) {
		fmt.Fprintf(os.Stderr, "udpraw: -ackgso needs -ack, and ping a -size of at least %d\n", len(ackMessage))
		os.Exit(2)
	}
	joinAck = *ackGSO
	receiveGRO = *gro
	waitInPoll, pollTimeout = *ppoll != 0, *ppoll
	var err error
	switch os.Args[1] {
	case "sink":
		err = sink(*addr, *dur, *batch)
	case "blast":
		err = blast(*addr, *size, *dur, *batch, *gso)
	case "pong":
		err = pong(*addr, *busy, *ack, *bye)
	case "ping":
		err = ping(*addr, *size, *n, *busy, *ack)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "udpraw:", err)
		os.Exit(1)
	}
}

func sink(addr string, d time.Duration, batch int) error {
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if uc, ok := c.(*net.UDPConn); ok {
		uc.SetReadBuffer(8 << 20)
		if receiveGRO {
			if err := setGRO(uc); err != nil {
				return err
			}
		}
	}
	pc := ipv4.NewPacketConn(c)
	msgs := make([]ipv4.Message, batch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 65536)}
		if receiveGRO {
			msgs[i].OOB = make([]byte, 64)
		}
	}
	var bytes, pkts int64
	var start time.Time
	for {
		if !start.IsZero() {
			c.SetReadDeadline(start.Add(d))
		}
		k, err := pc.ReadBatch(msgs, 0)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				break
			}
			return err
		}
		if start.IsZero() {
			start = time.Now()
		}
		for _, m := range msgs[:k] {
			bytes += int64(m.N)
			pkts++
			if seg := groSegment(m.OOB[:m.NN]); seg > 0 && seg < m.N {
				pkts += int64((m.N+seg-1)/seg - 1) // the datagrams the sender's GSO joined
			}
		}
	}
	el := d.Seconds()
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"mode": "sink", "bytes": bytes, "packets": pkts, "seconds": el,
		"MBps": float64(bytes) / el / (1 << 20), "kpps": float64(pkts) / el / 1e3,
	})
}

func blast(addr string, size int, d time.Duration, batch, gso int) error {
	dst, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return err
	}
	c, err := net.ListenPacket("udp4", ":0")
	if err != nil {
		return err
	}
	defer c.Close()
	payload := make([]byte, size)
	if gso > 1 {
		// One send of gso datagrams; the batch holds the same number of
		// datagrams as without GSO.
		payload = make([]byte, size*gso)
		batch = max(batch/gso, 1)
		rc, err := c.(*net.UDPConn).SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT, size) }); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("UDP_SEGMENT: %w", serr)
		}
	}
	pc := ipv4.NewPacketConn(c)
	msgs := make([]ipv4.Message, batch)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{payload}
		msgs[i].Addr = dst
	}
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if _, err := pc.WriteBatch(msgs, 0); err != nil {
			continue // ENOBUFS and the like: a drop, as on a wire
		}
	}
	return nil
}

func pong(addr string, busy, ack, bye bool) error {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return err
	}
	e, err := newEndpoint(ap, busy)
	if err != nil {
		return err
	}
	defer e.close()
	buf := make([]byte, 65536)
	for {
		n, from, err := e.recv(buf, time.Time{})
		if err != nil {
			return err
		}
		if !ack || !isAck(buf[:n]) {
			e.send(buf[:n], from, ack)
		}
		if bye && isBye(buf[:n]) {
			return nil
		}
	}
}

func ping(addr string, size, n int, busy, ack bool) error {
	dst, err := netip.ParseAddrPort(addr)
	if err != nil {
		return err
	}
	unspec := netip.IPv4Unspecified()
	if dst.Addr().Is6() {
		unspec = netip.IPv6Unspecified()
	}
	e, err := newEndpoint(netip.AddrPortFrom(unspec, 0), busy)
	if err != nil {
		return err
	}
	defer e.close()
	defer sayBye(e, dst) // a failed run too: a pong -bye must not wait for ever
	msg, buf := make([]byte, size), make([]byte, max(size, 64))
	rtts := make([]float64, 0, n)
	for i := 0; i < n+100; i++ { // the first 100 warm up
		t0 := time.Now()
		if err := e.send(msg, dst, ack); err != nil {
			return err
		}
		for {
			m, _, err := e.recv(buf, t0.Add(time.Second))
			if err != nil {
				return fmt.Errorf("round trip %d: %w", i, err)
			}
			if !ack || !isAck(buf[:m]) {
				break
			}
		}
		if i >= 100 {
			rtts = append(rtts, float64(time.Since(t0))/1e3)
		}
	}
	slices.Sort(rtts)
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"mode": "ping", "n": n, "rtt_median_us": rtts[len(rtts)/2], "rtt_min_us": rtts[0], "rtt_p99_us": rtts[len(rtts)*99/100],
		"rtt_p90_us": rtts[len(rtts)*90/100], "rtt_p99_9_us": rtts[len(rtts)*999/1000], "rtt_max_us": rtts[len(rtts)-1],
	})
}

// ackMessage stands for a RoCE ACK: its UDP payload is 20 bytes (BTH 12,
// AETH 4, ICRC 4). Its first byte tells it from a message, whose bytes
// are zero.
var ackMessage = append([]byte{0xac}, make([]byte, 19)...)

func isAck(b []byte) bool { return len(b) == len(ackMessage) && b[0] == ackMessage[0] }

// byeMessage ends a ping's run: a pong started with -bye echoes it and
// exits. A message is all zero and an ACK 20 bytes, so neither is it.
var byeMessage = []byte{0xbb, 'b', 'y', 'e'}

func isBye(b []byte) bool { return string(b) == string(byeMessage) }

// sayBye tells the pong at dst that the run is over, until it echoes the
// goodbye or ten tries have gone (a pong without -bye echoes it too).
func sayBye(e endpoint, dst netip.AddrPort) {
	buf := make([]byte, 65536)
	for range 10 {
		if e.send(byeMessage, dst, false) != nil {
			return
		}
		deadline := time.Now().Add(100 * time.Millisecond)
		for {
			m, _, err := e.recv(buf, deadline)
			if err != nil {
				break // timed out: say it again
			}
			if isBye(buf[:m]) {
				return
			}
		}
	}
}

// joinAck (-ackgso) has send hand the kernel a message and its ACK as one
// UDP GSO datagram, which the receiving kernel cuts into the two before
// it queues them, together, on the socket.
var joinAck bool

// joined returns msg and the ACK behind it as one buffer, and the
// UDP_SEGMENT control message that has the kernel send them as two
// datagrams, the first len(msg) bytes long.
func joined(msg []byte) (b, oob []byte) {
	b = append(append(make([]byte, 0, len(msg)+len(ackMessage)), msg...), ackMessage...)
	oob = make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(len(msg)))
	return b, oob
}

// An endpoint is one side of the ping-pong. send with ack sends an ACK
// behind the message in the same sendmmsg, as gorxe's udp link sends an
// answer and the ACK of the message it answers: on a reliable connection
// every message costs two datagrams.
type endpoint interface {
	recv(buf []byte, deadline time.Time) (int, netip.AddrPort, error)
	send(msg []byte, to netip.AddrPort, ack bool) error
	close()
}

func newEndpoint(addr netip.AddrPort, busy bool) (endpoint, error) {
	if busy {
		return newBusyEndpoint(addr)
	}
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, err
	}
	e := &sleepingEndpoint{c: c, pc: ipv4.NewPacketConn(c)}
	if receiveGRO {
		if err := setGRO(c); err != nil {
			c.Close()
			return nil, err
		}
		e.oob = make([]byte, unix.CmsgSpace(4))
	}
	return e, nil
}

// setGRO turns on UDP_GRO on c: datagrams a sender's GSO joined (or the
// NIC's GRO) arrive joined, with their segment size in a control message.
func setGRO(c *net.UDPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1) }); err != nil || serr != nil {
		return fmt.Errorf("UDP_GRO: %w", errors.Join(err, serr))
	}
	return nil
}

// waitInPoll (-ppoll) has a busy endpoint wait in poll(2) between reads,
// for at most pollTimeout milliseconds (forever if negative).
var (
	waitInPoll  bool
	pollTimeout int
)

// receiveGRO (-gro) turns on UDP_GRO on a sleeping endpoint's socket.
var receiveGRO bool

// sleepingEndpoint waits in the Go runtime's poller, as an ordinary Go
// program does.
type sleepingEndpoint struct {
	c   *net.UDPConn
	pc  *ipv4.PacketConn
	oob []byte // with -gro, room for the UDP_GRO control message
}

// recv returns the next datagram; with -gro, the first segment of one the
// kernel left joined (the message; the ACK behind it is dropped).
func (e *sleepingEndpoint) recv(buf []byte, deadline time.Time) (int, netip.AddrPort, error) {
	e.c.SetReadDeadline(deadline)
	if e.oob == nil {
		return e.c.ReadFromUDPAddrPort(buf)
	}
	n, oobn, _, from, err := e.c.ReadMsgUDPAddrPort(buf, e.oob)
	if err != nil {
		return 0, from, err
	}
	if seg := groSegment(e.oob[:oobn]); seg > 0 && seg < n {
		n = seg
	}
	return n, from, nil
}

// groSegment returns the segment size of a UDP_GRO control message in
// oob, or 0.
func groSegment(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_UDP && m.Header.Type == unix.UDP_GRO && len(m.Data) >= 2 {
			if len(m.Data) >= 4 {
				return int(binary.NativeEndian.Uint32(m.Data))
			}
			return int(binary.NativeEndian.Uint16(m.Data))
		}
	}
	return 0
}

func (e *sleepingEndpoint) send(msg []byte, to netip.AddrPort, ack bool) error {
	if !ack {
		_, err := e.c.WriteToUDPAddrPort(msg, to)
		return err
	}
	if joinAck {
		b, oob := joined(msg)
		_, _, err := e.c.WriteMsgUDPAddrPort(b, oob, to)
		return err
	}
	a := net.UDPAddrFromAddrPort(to)
	_, err := e.pc.WriteBatch([]ipv4.Message{{Buffers: [][]byte{msg}, Addr: a}, {Buffers: [][]byte{ackMessage}, Addr: a}}, 0)
	return err
}

func (e *sleepingEndpoint) close() { e.c.Close() }

// busyEndpoint spins on non-blocking reads, as a busy-polling RDMA
// program (perftest, gorxe's tools) waits, on a socket the Go runtime
// does not poll, as gorxe's udp link's is: a socket it polls wakes a
// sleeping runtime thread for every datagram, and the best raw figure is
// one without those.
type busyEndpoint struct {
	fd   int
	hdrs [2]struct {
		hdr unix.Msghdr
		n   uint32
	}
	iov  [2]unix.Iovec
	name unix.RawSockaddrInet6
}

func newBusyEndpoint(addr netip.AddrPort) (*busyEndpoint, error) {
	family := unix.AF_INET
	if addr.Addr().Is6() {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, sockaddr(addr)); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &busyEndpoint{fd: fd}, nil
}

func sockaddr(a netip.AddrPort) unix.Sockaddr {
	if a.Addr().Is4() {
		return &unix.SockaddrInet4{Port: int(a.Port()), Addr: a.Addr().As4()}
	}
	return &unix.SockaddrInet6{Port: int(a.Port()), Addr: a.Addr().As16()}
}

func (e *busyEndpoint) recv(buf []byte, deadline time.Time) (int, netip.AddrPort, error) {
	for spins := 1; ; spins++ {
		n, from, err := unix.Recvfrom(e.fd, buf, unix.MSG_DONTWAIT)
		if err == nil {
			switch a := from.(type) {
			case *unix.SockaddrInet4:
				return n, netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), nil
			case *unix.SockaddrInet6:
				return n, netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)), nil
			}
			return n, netip.AddrPort{}, nil
		}
		if err != unix.EAGAIN && err != unix.EINTR {
			return 0, netip.AddrPort{}, err
		}
		if waitInPoll {
			fds := []unix.PollFd{{Fd: int32(e.fd), Events: unix.POLLIN}}
			if _, err := unix.Poll(fds, pollTimeout); err != nil && err != unix.EINTR {
				return 0, netip.AddrPort{}, err
			}
		}
		// A spin looks at the clock now and then; a wait in poll(2) each
		// time, as 1024 of them could outlast the deadline by minutes.
		if (waitInPoll || spins%1024 == 0) && !deadline.IsZero() && time.Now().After(deadline) {
			return 0, netip.AddrPort{}, os.ErrDeadlineExceeded
		}
	}
}

func (e *busyEndpoint) send(msg []byte, to netip.AddrPort, ack bool) error {
	if !ack {
		return unix.Sendto(e.fd, msg, 0, sockaddr(to))
	}
	if joinAck {
		b, oob := joined(msg)
		return unix.Sendmsg(e.fd, b, oob, sockaddr(to), 0)
	}
	// The same destination for both: one raw address, two messages.
	namelen := uint32(unix.SizeofSockaddrInet6)
	if to.Addr().Is4() {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&e.name))
		*sa = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: to.Addr().As4()}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], to.Port())
		namelen = unix.SizeofSockaddrInet4
	} else {
		e.name = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: to.Addr().As16()}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&e.name.Port))[:], to.Port())
	}
	for i, b := range [2][]byte{msg, ackMessage} {
		e.iov[i].Base = unsafe.SliceData(b)
		e.iov[i].SetLen(len(b))
		h := &e.hdrs[i].hdr
		h.Name, h.Namelen = (*byte)(unsafe.Pointer(&e.name)), namelen
		h.Iov = &e.iov[i]
		h.SetIovlen(1)
	}
	_, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(e.fd), uintptr(unsafe.Pointer(&e.hdrs[0])), 2, 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func (e *busyEndpoint) close() { unix.Close(e.fd) }

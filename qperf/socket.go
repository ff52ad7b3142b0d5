package qperf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// socketTest is one of qperf's socket tests (socket.c): TCP or UDP
// between the two hosts' kernels, for a figure to set gorxe's beside.
type socketTest struct {
	udp, lat   bool
	measure    measure
	msgSize    uint32
	accessRecv bool
}

// socketTests are qperf's TCP and UDP tests; SCTP, SDP and RDS need
// kernel modules this host may not have, and are refused.
var socketTests = map[string]socketTest{
	"tcp_bw":  {measure: bandwidth, msgSize: k64, accessRecv: true},
	"tcp_lat": {lat: true, measure: latency, msgSize: 1},
	"udp_bw":  {udp: true, measure: bandwidthSR, msgSize: 32 * 1024, accessRecv: true},
	"udp_lat": {udp: true, lat: true, measure: latency, msgSize: 1},
}

// runSocket runs one side of a socket test: the server opens a socket on
// the request's port (0: the kernel chooses) and sends its port, the
// client connects to it, and after the synchronization the client
// sends (and for the latency tests the server answers) messages of the
// test's size until the time is up.
func (t socketTest) run(ctx context.Context, s *side) error {
	conn, err := s.openSocket(ctx, t.udp)
	if err != nil {
		return err
	}
	defer conn.Close()
	buf := make([]byte, s.req.MsgSize)
	ctx, err = s.start(ctx)
	if err != nil {
		return err
	}
	// The test's end wakes a blocked read or write, as qperf's SIGALRM
	// interrupts one.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	send := func() bool {
		n, err := conn.Write(buf)
		return s.count(ctx, &s.stat.S, n, err)
	}
	recv := func() bool {
		var n int
		var err error
		switch {
		case !t.udp:
			n, err = io.ReadFull(conn, buf)
		case s.client:
			n, err = conn.Read(buf)
		default:
			var from net.Addr
			n, from, err = conn.(*net.UDPConn).ReadFrom(buf)
			s.peer = from
		}
		if err == nil && s.req.AccessRecv != 0 {
			touchBytes(buf[:n])
		}
		return s.count(ctx, &s.stat.R, n, err)
	}
	answer := func() bool {
		if !t.udp {
			return send()
		}
		n, err := conn.(*net.UDPConn).WriteTo(buf, s.peer)
		return s.count(ctx, &s.stat.S, n, err)
	}
	for {
		var more bool
		switch {
		case s.client && t.lat:
			more = send() && recv()
		case s.client:
			more = send()
		case t.lat:
			more = recv() && answer()
		default:
			more = recv()
		}
		if !more {
			return nil
		}
	}
}

// count counts a message sent or received in u, as qperf's loops do: not
// once the time is up; an error as an error, but the end of the stream
// (the peer closed it) as the end of the test. It reports whether to go
// on.
func (s *side) count(ctx context.Context, u *UStat, n int, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	switch {
	case err == nil:
		u.Bytes += uint64(n)
		u.Msgs++
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNRESET):
		s.finish()
		return false
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, net.ErrClosed):
		return false
	default:
		u.Errs++
	}
	return true
}

// touchBytes reads every byte, for -ar (access_recv).
func touchBytes(b []byte) {
	var x byte
	for _, c := range b {
		x ^= c
	}
	_ = x
}

// openSocket is qperf's client_init and stream_server_init or
// datagram_server_init.
func (s *side) openSocket(ctx context.Context, udp bool) (net.Conn, error) {
	network, kind := "tcp", "TCP"
	if udp {
		network, kind = "udp", "UDP"
	}
	if s.client {
		b, err := s.ctl.recv(4, "port")
		if err != nil {
			return nil, err
		}
		host := addrOf(s.ctl.c.RemoteAddr().String())
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, net.JoinHostPort(host.String(), fmt.Sprint(binary.LittleEndian.Uint32(b))))
		if err != nil {
			return nil, fmt.Errorf("could not make %s connection to server: %w", kind, err)
		}
		return conn, nil
	}
	lc := net.ListenConfig{Control: reuseAddr}
	addr := fmt.Sprintf(":%d", s.req.Port)
	var port [4]byte
	if udp {
		// Bound to the address the client reached, where qperf binds
		// every address: a reply then leaves from the address the
		// client's connected socket takes datagrams from, and not from
		// the one the kernel's route to the client would choose on a
		// host with several.
		local := addrOf(s.ctl.c.LocalAddr().String())
		pc, err := lc.ListenPacket(ctx, network, net.JoinHostPort(local.String(), fmt.Sprint(s.req.Port)))
		if err != nil {
			return nil, fmt.Errorf("unable to make %s socket: %w", kind, err)
		}
		conn := pc.(*net.UDPConn)
		if err := s.setBuffers(conn); err != nil {
			conn.Close()
			return nil, err
		}
		binary.LittleEndian.PutUint32(port[:], uint32(conn.LocalAddr().(*net.UDPAddr).Port))
		if err := s.ctl.send(port[:], "port"); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	}
	ln, err := lc.Listen(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("unable to make %s socket: %w", kind, err)
	}
	defer ln.Close()
	binary.LittleEndian.PutUint32(port[:], uint32(ln.Addr().(*net.TCPAddr).Port))
	if err := s.ctl.send(port[:], "port"); err != nil {
		return nil, err
	}
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(s.ctl.timeout))
	conn, err := ln.Accept()
	if err != nil {
		return nil, fmt.Errorf("accept failed: %w", err)
	}
	if err := s.setBuffers(conn.(*net.TCPConn)); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// setBuffers sets the socket's send and receive buffers to -sb's size.
func (s *side) setBuffers(c interface {
	SetReadBuffer(int) error
	SetWriteBuffer(int) error
}) error {
	if n := int(s.req.SockBufSize); n != 0 {
		if err := c.SetWriteBuffer(n); err != nil {
			return fmt.Errorf("Failed to set send buffer size on socket: %w", err)
		}
		if err := c.SetReadBuffer(n); err != nil {
			return fmt.Errorf("Failed to set receive buffer size on socket: %w", err)
		}
	}
	return nil
}

// reuseAddr sets SO_REUSEADDR, as qperf does on its sockets.
func reuseAddr(_, _ string, rc syscall.RawConn) error {
	var err error
	rc.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1) })
	return err
}

package cmtool

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"time"
)

// UDPongPort is udpong's default port.
const UDPongPort = 7174

// udpong's messages: struct message, an 8-byte header (op, id, seqno, a
// reserved byte, be32 data) and the payload, 2 KiB at most.
const (
	udpongLogin = iota
	udpongStart
	udpongData
	udpongEcho
	udpongEnd

	udpongCtrlSize = 16 // CTRL_MSG_SIZE
	udpongMsgSize  = 8 + 2048
)

// udpongSizes are udpong's tests' sizes (test_size).
var udpongSizes = []int{1 << 6, 1 << 7, 1<<7 + 1<<6, 1 << 8, 1<<8 + 1<<7, 1 << 9, 1<<9 + 1<<8, 1 << 10, 1<<10 + 1<<9}

// UDPongParams are udpong's options.
type UDPongParams struct {
	// Custom is one test of Count transfers of Size bytes (-C, -S),
	// instead of the latency and bandwidth tests of each of udpong's
	// sizes.
	Custom      bool
	Size, Count int
	// Echo makes the custom test a latency test: the server echoes each
	// message (-T e).
	Echo bool
	// MaxSize, when not 0, is the longest message the socket carries:
	// udpong's own tests skip the sizes above it.
	MaxSize int
}

// SkippedSizes returns udpong's own tests' sizes that MaxSize leaves
// out.
func (p UDPongParams) SkippedSizes() []int {
	var out []int
	for _, size := range udpongSizes {
		if p.skips(size) {
			out = append(out, size)
		}
	}
	return out
}

// skips reports whether MaxSize leaves size out of udpong's own tests.
func (p UDPongParams) skips(size int) bool { return p.MaxSize != 0 && size > p.MaxSize }

// DefaultUDPongParams are udpong's defaults: 1000 transfers of 1000
// bytes for a custom test.
func DefaultUDPongParams() UDPongParams { return UDPongParams{Size: 1000, Count: 1000} }

// Check reports what udpong would refuse, and sizes its buffer cannot
// hold.
func (p UDPongParams) Check() error {
	switch {
	case p.Size < udpongCtrlSize:
		return fmt.Errorf("size must be at least %d bytes", udpongCtrlSize)
	case p.Size > udpongMsgSize:
		return fmt.Errorf("-S %d: udpong's message is at most %d bytes", p.Size, udpongMsgSize)
	case p.Count < 1:
		return fmt.Errorf("-C %d: the transfer count is at least 1", p.Count)
	}
	return nil
}

// DatagramSocket is what udpong sends and receives on: a datagram
// rsocket (rsocket.PacketConn), or with -T s a kernel UDP socket
// (UDPSocket). A read deadline set while a read waits applies to that
// read, as a net.PacketConn's does.
type DatagramSocket interface {
	WriteToAddrPort(p []byte, addr netip.AddrPort) (int, error)
	ReadFromAddrPort(p []byte) (int, netip.AddrPort, error)
	SetReadDeadline(t time.Time) error
}

// UDPSocket is a kernel UDP socket as a DatagramSocket.
type UDPSocket struct{ *net.UDPConn }

func (u UDPSocket) WriteToAddrPort(p []byte, addr netip.AddrPort) (int, error) {
	return u.WriteToUDPAddrPort(p, addr)
}

func (u UDPSocket) ReadFromAddrPort(p []byte) (int, netip.AddrPort, error) {
	n, a, err := u.ReadFromUDPAddrPort(p)
	return n, netip.AddrPortFrom(a.Addr().Unmap(), a.Port()), err
}

// UDPongServer is udpong's server: it answers each client's login (and
// prints it), start, echo and end messages, counting what each client
// sends, until ctx ends or the socket fails.
func UDPongServer(ctx context.Context, s DatagramSocket, stdout io.Writer) error {
	var (
		counts [256]uint64 // by client id
		nextID uint8
		msg    [udpongMsgSize]byte
	)
	// The end of ctx ends a read that waits: a deadline set while a
	// read waits applies to it. The server owns the read deadline.
	s.SetReadDeadline(time.Time{})
	defer context.AfterFunc(ctx, func() { s.SetReadDeadline(time.Unix(1, 0)) })()
	for ctx.Err() == nil {
		n, from, err := s.ReadFromAddrPort(msg[:])
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			return fmt.Errorf("rrecv: %w", err)
		case n < 8:
			continue // not udpong's
		}
		id := &msg[1]
		switch msg[0] {
		case udpongLogin:
			fmt.Fprintf(stdout, "client login from %v\n", from.Addr())
			*id = nextID
			nextID++
			counts[*id] = 0
		case udpongStart:
			counts[*id] = 0
		case udpongEcho:
			counts[*id]++
		case udpongEnd:
			binary.BigEndian.PutUint32(msg[4:], uint32(counts[*id]))
		default: // data, and what udpong does not know: counted, not answered
			counts[*id]++
			continue
		}
		if _, err := s.WriteToAddrPort(msg[:n], from); err != nil {
			return fmt.Errorf("rsend: %w", err)
		}
	}
	return nil
}

// udpongClient is the client's state: its message, whose id the server's
// answer to the login sets, and the sequence number of its next request.
type udpongClient struct {
	s      DatagramSocket
	server netip.AddrPort
	msg    [udpongMsgSize]byte
	reply  [udpongMsgSize]byte
	seqno  uint8
}

// UDPongClient is udpong's client: it logs in to server, runs the tests p
// asks for, and prints a line for each as udpong does.
func UDPongClient(ctx context.Context, s DatagramSocket, server netip.AddrPort, p UDPongParams, stdout io.Writer) error {
	fmt.Fprintf(stdout, "%-10s%-8s%-8s%-8s%8s %10s%13s\n", "name", "bytes", "xfers", "total", "time", "Gb/sec", "usec/xfer")
	c := &udpongClient{s: s, server: server}
	c.msg[0] = udpongLogin
	if err := c.sendRecv(ctx, udpongCtrlSize, time.Second); err != nil {
		return err
	}
	if p.Custom {
		return c.run(ctx, "custom", p.Size, p.Count, p.Echo, stdout)
	}
	for _, echo := range []bool{true, false} {
		for _, size := range udpongSizes {
			if p.skips(size) {
				continue
			}
			name, count := sizeStr(int64(size))+"_bw", sizeToCount(size)
			if echo {
				name, count = sizeStr(int64(size))+"_lat", count/10
			}
			if err := c.run(ctx, name, size, count, echo, stdout); err != nil {
				return err
			}
		}
	}
	return nil
}

// run is run_test: start, count transfers of size bytes (each echoed, or
// not), end, and the line: with no echo, the transfers are those the
// server counted.
func (c *udpongClient) run(ctx context.Context, name string, size, count int, echo bool, stdout io.Writer) error {
	c.msg[0] = udpongStart
	if err := c.sendRecv(ctx, udpongCtrlSize, time.Second); err != nil {
		return err
	}
	c.msg[0] = udpongData
	if echo {
		c.msg[0] = udpongEcho
	}
	start := time.Now()
	for range count {
		var err error
		if echo {
			err = c.sendRecv(ctx, size, time.Millisecond)
		} else {
			err = c.send(size)
		}
		if err != nil {
			return err
		}
	}
	c.msg[0] = udpongEnd
	if err := c.sendRecv(ctx, udpongCtrlSize, time.Millisecond); err != nil {
		return err
	}
	elapsed := time.Since(start)
	transfers := int64(binary.BigEndian.Uint32(c.msg[4:]))
	if echo {
		transfers = int64(count) * 2
	}
	usec := float64(elapsed.Microseconds())
	bytes := transfers * int64(size)
	perXfer := 0.0
	if transfers > 0 {
		perXfer = usec / float64(transfers)
	}
	fmt.Fprintf(stdout, "%-10s%-8s%-8s%-8s%8.2fs%10.2f%11.2f\n", name, sizeStr(int64(size)), cntStr(transfers), sizeStr(bytes),
		usec/1e6, float64(bytes*8)/(1000*usec), perXfer)
	return nil
}

func (c *udpongClient) send(size int) error {
	n, err := c.s.WriteToAddrPort(c.msg[:size], c.server)
	if err != nil {
		return fmt.Errorf("rsend: %w", err)
	}
	if n != size {
		return fmt.Errorf("rsend: %d of %d bytes", n, size)
	}
	return nil
}

// sendRecv sends the message and waits up to timeout for the server's
// answer with its sequence number, sending it again after each timeout;
// the answer becomes the message. (udpong's loop keeps the sequence
// number of a late answer and so can wait for ever; here each try
// carries the one it waits for.)
func (c *udpongClient) sendRecv(ctx context.Context, size int, timeout time.Duration) error {
	seq := c.seqno
	for ctx.Err() == nil {
		c.msg[2] = seq
		if err := c.send(size); err != nil {
			return err
		}
		c.s.SetReadDeadline(time.Now().Add(timeout))
		for {
			n, _, err := c.s.ReadFromAddrPort(c.reply[:])
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				return fmt.Errorf("rrecv: %w", err)
			}
			if n >= 8 && c.reply[2] == seq {
				copy(c.msg[:], c.reply[:n])
				c.seqno++
				return nil
			}
		}
	}
	return ctx.Err()
}

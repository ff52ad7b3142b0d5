package cmtool

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/rsocket"
)

// RstreamParams are librdmacm's rstream's options.
type RstreamParams struct {
	// Custom is set by -I, -C or -S SIZE: one test of Iterations ×
	// Count transfers of Size bytes each way, on one connection. Without
	// it rstream runs its latency tests, then its bandwidth tests on a
	// second connection, for 64 B, 4 KiB, 64 KiB and 1 MiB (AllSizes, -S
	// all: 64 B to 6 MiB in 25 steps).
	Custom                  bool
	Size, Count, Iterations int
	AllSizes                bool
	BufferSize              int  // -B: the sockets' SO_SNDBUF and SO_RCVBUF (512 KiB)
	Inline                  int  // -i: the latency tests' inline size (64)
	Verify                  bool // -T v: the bytes carry a sequence the receiver checks
	Sockets                 bool // -T s: TCP sockets instead of rsockets
	// KeepAlive is -k (seconds there): a keepalive every KeepAlive on
	// each connection (rsocket.Options.KeepAlive; TCP's with -T s); 0
	// for none.
	KeepAlive time.Duration
	// IOMapped runs riostream's tests instead of rstream's: each side
	// maps a transfer's worth of memory (riomap), and the transfers are
	// riowrites into the peer's, each round's last marked in its last
	// byte, which the peer watches for.
	IOMapped bool
}

// DefaultRstreamParams returns rstream's defaults.
func DefaultRstreamParams() RstreamParams {
	return RstreamParams{Size: 1000, Count: 1000, Iterations: 1, Inline: 64}
}

// Check refuses what rstream could not run.
func (p RstreamParams) Check() error {
	switch {
	case p.Size < 1 || p.Size > 1<<30:
		return fmt.Errorf("-S %d: a transfer size is 1 byte to 1 GiB", p.Size)
	case p.Count < 1 || p.Iterations < 1:
		return fmt.Errorf("-C %d, -I %d: at least one transfer and one iteration", p.Count, p.Iterations)
	case p.BufferSize < 0 || p.Inline < 0:
		return fmt.Errorf("-B %d, -i %d: sizes are not negative", p.BufferSize, p.Inline)
	case p.KeepAlive < 0:
		return fmt.Errorf("-k %v: a keepalive time is not negative", p.KeepAlive)
	}
	return nil
}

// rstream's test sizes (rstream.c's test_size), each with the -S it
// needs: 0 runs by default, 1 with -S all.
var rstreamSizes = []struct{ size, option int }{
	{1 << 6, 0},
	{1 << 7, 1}, {1<<7 + 1<<6, 1}, {1 << 8, 1}, {1<<8 + 1<<7, 1}, {1 << 9, 1}, {1<<9 + 1<<8, 1},
	{1 << 10, 1}, {1<<10 + 1<<9, 1}, {1 << 11, 1}, {1<<11 + 1<<10, 1},
	{1 << 12, 0}, {1<<12 + 1<<11, 1}, {1 << 13, 1}, {1<<13 + 1<<12, 1}, {1 << 14, 1}, {1<<14 + 1<<13, 1},
	{1 << 15, 1}, {1<<15 + 1<<14, 1},
	{1 << 16, 0}, {1<<16 + 1<<15, 1}, {1 << 17, 1}, {1<<17 + 1<<16, 1}, {1 << 18, 1}, {1<<18 + 1<<17, 1},
	{1 << 19, 1}, {1<<19 + 1<<18, 1},
	{1 << 20, 0}, {1<<20 + 1<<19, 1}, {1 << 21, 1}, {1<<21 + 1<<20, 1}, {1 << 22, 1}, {1<<22 + 1<<21, 1},
}

// sizeToCount is common.c's size_to_count: how many transfers a test of
// size bytes makes.
func sizeToCount(size int) int {
	switch {
	case size >= 1<<20:
		return 100
	case size >= 1<<16:
		return 1000
	case size >= 1<<10:
		return 10000
	}
	return 100000
}

// sizeStr and cntStr are common.c's size_str and cnt_str.
func sizeStr(size int64) string {
	base, mag := int64(1), ""
	switch {
	case size >= 1<<30:
		base, mag = 1<<30, "g"
	case size >= 1<<20:
		base, mag = 1<<20, "m"
	case size >= 1<<10:
		base, mag = 1<<10, "k"
	}
	if size/base < 10 {
		if fraction := size % base * 10 / base; fraction != 0 {
			return fmt.Sprintf("%d.%d%s", size/base, fraction, mag)
		}
	}
	return fmt.Sprintf("%d%s", size/base, mag)
}

func cntStr(n int64) string {
	switch {
	case n >= 1000000000:
		return fmt.Sprintf("%db", n/1000000000)
	case n >= 1000000:
		return fmt.Sprintf("%dm", n/1000000)
	case n >= 1000:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// rstreamTest is one of rstream's tests.
type rstreamTest struct {
	name                    string
	size, count, iterations int
}

// tests returns the tests p asks for: the custom one, or the latency
// tests then the bandwidth tests.
func (p RstreamParams) tests() (latency, bandwidth []rstreamTest) {
	if p.Custom {
		return []rstreamTest{{"custom", p.Size, p.Count, p.Iterations}}, nil
	}
	for _, s := range rstreamSizes {
		if s.option == 1 && !p.AllSizes {
			continue
		}
		latency = append(latency, rstreamTest{sizeStr(int64(s.size)) + "_lat", s.size, 1, sizeToCount(s.size)})
		bandwidth = append(bandwidth, rstreamTest{sizeStr(int64(s.size)) + "_bw", s.size, sizeToCount(s.size), 1})
	}
	return latency, bandwidth
}

// Rstream is librdmacm's rstream (librdmacm/examples/rstream.c): the
// client (dial set) and the server (listen set) time transfers of a byte
// stream both ways over rsockets (package rsocket), or TCP sockets with
// p.Sockets, and each prints rstream's table. dial connects once per
// connection the tests need; listen takes one.
func Rstream(p RstreamParams, dial func(rsocket.Options) (io.ReadWriteCloser, error),
	accept func(rsocket.Options) (io.ReadWriteCloser, error), stdout io.Writer) error {
	latency, bandwidth := p.tests()
	return rstream(p, latency, bandwidth, dial, accept, stdout)
}

// rstream runs the latency tests on one connection, then the bandwidth
// tests on another.
func rstream(p RstreamParams, latency, bandwidth []rstreamTest, dial func(rsocket.Options) (io.ReadWriteCloser, error),
	accept func(rsocket.Options) (io.ReadWriteCloser, error), stdout io.Writer) error {
	client := dial != nil
	fmt.Fprintf(stdout, "%-10s%-8s%-8s%-8s%-8s%8s %10s%13s\n", "name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer")
	buffer := p.BufferSize
	if buffer == 0 {
		buffer = 1 << 19
	}
	// format_buf's and verify_buf's sequences are the program's: they run
	// on from one test, and one connection, to the next.
	v := &verifier{on: p.Verify}
	run := func(tests []rstreamTest, inline int) error {
		if len(tests) == 0 {
			return nil
		}
		o := rsocket.Options{RBufSize: uint32(2 * buffer), SBufSize: uint32(2 * buffer), Inline: uint32(inline), KeepAlive: p.KeepAlive}
		testRun := rstreamRun
		if p.IOMapped {
			o.IOMapSize = 1 // riostream's RDMA_IOMAPSIZE
			testRun = riostreamRun
		}
		if inline < 0 {
			o.Inline = rsocket.NoInline
		}
		connect := accept
		if client {
			connect = dial
		}
		s, err := connect(o)
		if err != nil {
			return err
		}
		defer s.Close()
		for _, t := range tests {
			if err := testRun(s, client, t, v, stdout); err != nil {
				return err
			}
		}
		return nil
	}
	if err := run(latency, p.Inline); err != nil {
		return err
	}
	return run(bandwidth, -1) // rstream's bandwidth tests set RDMA_INLINE 0
}

// verifier is common.c's format_buf and verify_buf: the bytes sent carry
// a running sequence, which the receiver checks.
type verifier struct {
	on        bool
	out, in   byte
	totalSeen int64
}

// format and check keep the sequence in a local while they loop: through
// the pointer, each byte cost a store of it (10 ns a byte, where a
// 1 MiB transfer between two processes takes 1 ms).
func (v *verifier) format(b []byte) {
	out := v.out
	for i := range b {
		b[i] = out
		out++
	}
	v.out = out
}

func (v *verifier) check(b []byte) error {
	in := v.in
	for i := range b {
		if b[i] != in {
			return fmt.Errorf("data verification failed byte %d", v.totalSeen+int64(i))
		}
		in++
	}
	v.in = in
	v.totalSeen += int64(len(b))
	return nil
}

// rstreamRun is rstream's run_test: a sync of 16 bytes each way, then the
// test's transfers, the client sending first, and its line.
func rstreamRun(s io.ReadWriter, client bool, t rstreamTest, v *verifier, stdout io.Writer) error {
	buf := make([]byte, max(t.size, 16))
	send := func(n int) error {
		if v.on {
			v.format(buf[:n])
		}
		if _, err := s.Write(buf[:n]); err != nil {
			return fmt.Errorf("rsend: %w", err)
		}
		return nil
	}
	recv := func(n int) error {
		if _, err := io.ReadFull(s, buf[:n]); err != nil {
			return fmt.Errorf("rrecv: %w", err)
		}
		if v.on {
			return v.check(buf[:n])
		}
		return nil
	}
	first, second := recv, send
	if client {
		first, second = send, recv
	}
	if err := first(16); err != nil {
		return err
	}
	if err := second(16); err != nil {
		return err
	}
	start := time.Now()
	for range t.iterations {
		for range t.count {
			if err := first(t.size); err != nil {
				return err
			}
		}
		for range t.count {
			if err := second(t.size); err != nil {
				return err
			}
		}
	}
	t.show(time.Since(start), stdout)
	return nil
}

// show prints the test's line (show_perf) for a run that took d.
func (t rstreamTest) show(d time.Duration, stdout io.Writer) {
	usec := float64(d.Microseconds())
	bytes := int64(t.iterations) * int64(t.count) * int64(t.size) * 2
	fmt.Fprintf(stdout, "%-10s%-8s%-8s%-8s%-8s%8.2fs%10.2f%11.2f\n", t.name, sizeStr(int64(t.size)), cntStr(int64(t.count)),
		cntStr(int64(t.iterations)), sizeStr(bytes), usec/1e6, float64(bytes*8)/(1000*usec), usec/float64(t.iterations)/float64(t.count*2))
}

// RstreamDialer returns rstream's client connection maker: rsockets to
// server from local on m, or with sockets a TCP connection.
func RstreamDialer(ctx context.Context, m *cm.Manager, server netip.AddrPort, local netip.Addr, sockets bool) func(rsocket.Options) (io.ReadWriteCloser, error) {
	return func(o rsocket.Options) (io.ReadWriteCloser, error) {
		if sockets {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", server.String())
			if err != nil {
				return nil, fmt.Errorf("connect: %w", err)
			}
			return c, keepAliveTCP(c, o.KeepAlive)
		}
		c, err := rsocket.Dial(ctx, m, server, local, o)
		if err != nil {
			return nil, fmt.Errorf("rconnect: %w", err)
		}
		return c, nil
	}
}

// RstreamAcceptor returns rstream's server connection taker from l, or
// with sockets from the TCP listener tl.
func RstreamAcceptor(ctx context.Context, l *rsocket.Listener, tl net.Listener) func(rsocket.Options) (io.ReadWriteCloser, error) {
	return func(o rsocket.Options) (io.ReadWriteCloser, error) {
		if tl != nil {
			c, err := tl.Accept()
			if err != nil {
				return nil, fmt.Errorf("accept: %w", err)
			}
			return c, keepAliveTCP(c, o.KeepAlive)
		}
		c, err := l.AcceptOptions(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("raccept: %w", err)
		}
		return c, nil
	}
}

// keepAliveTCP sets c's keepalive as rstream sets a socket's: with -k,
// SO_KEEPALIVE and TCP_KEEPIDLE, the probes' interval and count left to
// the kernel; without, none (Go turns it on by default).
func keepAliveTCP(c net.Conn, every time.Duration) error {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	if every == 0 {
		return tc.SetKeepAlive(false)
	}
	return tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: every, Interval: -1, Count: -1})
}

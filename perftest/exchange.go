package perftest

// perftest's out-of-band exchange over TCP (port 18515), byte for byte as
// rdma-core perftest speaks it, so that gorxe can run a test against a
// stock ib_write_bw & co. PROTOCOL.md has the sequence of every test and
// where in perftest's source each step comes from.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gorxe/gorxe/internal/perfkey"
	"github.com/gorxe/gorxe/internal/tcpdial"
	"github.com/gorxe/gorxe/qp"
)

// Version is the perftest version gorxe advertises in the version exchange.
// "6.06" is what Debian bookworm's perftest (4.5-0.17) reports. Any version
// from 5.70 (the oldest a stock perftest talks to) up to 6.27 works with
// every stock perftest; from 6.28 on a stock peer of 6.28 or later would
// expect negotiate_params, which gorxe does not speak (Setup refuses).
var Version = "6.06"

// DefaultPort is perftest's out-of-band TCP port (DEF_PORT, -p).
const DefaultPort = 18515

// Defaults of a Conn's timeouts.
const (
	// DefaultTimeout bounds every step in which the peer should answer
	// at once (it may be allocating its buffers, or sleeping the second
	// ib_write_bw sleeps after connecting).
	DefaultTimeout = 60 * time.Second
	// DefaultRunTimeout bounds the steps in which the peer may still be
	// running the test: the first handshake of Finish.
	DefaultRunTimeout = 15 * time.Minute
	// DialRetry is how long Dial keeps retrying while the server refuses
	// the connection (it is not listening yet).
	DialRetry = 5 * time.Second
)

// Sizes on the wire (perftest_communication.h, perftest_parameters.h).
const (
	versionSize = 16          // MAX_VERSION: char version[16]
	keyMsgSize  = perfkey.Len // KEY_MSG_SIZE_GID, the trailing NUL included
	doneMsg     = "done\x00"
)

// Versions at which perftest's exchange changed. perftest compares the
// REMOTE's version, as atof() reads it, with each.
const (
	verMTU       = 5.1  // check_mtu: MTU exchanged at all
	verMTU2      = 5.31 // check_mtu: 2 bytes instead of sizeof(int)
	verSysData   = 5.32 // check_sys_data: page and cache line size
	verIters64   = 5.33 // xchg_bw_reports: iters as 8 bytes, not 4
	verMin       = 5.70 // check_version_compatibility: older → exit(1)
	verNoDone    = 6.17 // ctx_close_connection: no "done" (commit dbf395e)
	verNegotiate = 6.28 // negotiate_params
)

// Dest is perftest's struct pingpong_dest as the key message carries it.
type Dest struct {
	LID      uint16
	OutReads uint16 // out_reads: the max outstanding RDMA READs/atomics it offers
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits
	RKey     uint32
	VAddr    uint64
	GID      [16]byte
	SRQN     uint32
	// GIDIndex is gid_index, which only rdma_cm's binary key (-R, -z)
	// carries.
	GIDIndex int32
}

// BWReport is perftest's struct bw_report_data as xchg_bw_reports
// exchanges it (without the --report-per-port fields).
type BWReport struct {
	Size        uint64
	Iters       uint64
	PeakMBps    float64 // bw_peak
	AvgMBps     float64 // bw_avg
	MsgRateMpps float64 // msgRate_avg
}

// ExchangesBWReport reports whether perftest's test t, without -b or
// --write_with_imm, exchanges bandwidth reports in Finish: the tests
// whose server is passive (write_bw, read_bw, atomic_bw). The server
// prints the client's report. Flow.PassiveServer says it for any flags.
func ExchangesBWReport(t Test) bool { return Flow{Test: t}.PassiveServer() }

// Conn is the out-of-band TCP connection of a test, client or server role.
//
// Every exchange is symmetric, as perftest's ctx_xchg_data_ethernet and
// ctx_hand_shake are: the client writes its message and then reads the
// peer's; the server reads first, then writes. Each message goes out in
// one write; reads wait for the whole message.
//
// A Conn honours the context it was made with (Listen, Dial, Accept): when
// it is done, the step under way fails at once. Use SetContext to change it.
// Each step also has a deadline: Timeout, or RunTimeout while the peer may
// be running the test. A Conn is for one goroutine at a time.
type Conn struct {
	nc     net.Conn
	server bool
	ctx    context.Context

	// Timeout bounds each step in which the peer should answer at once;
	// DefaultTimeout if zero.
	Timeout time.Duration
	// RunTimeout bounds a step that waits for the peer to finish running
	// the test; DefaultRunTimeout if zero.
	RunTimeout time.Duration
	// PageSize and CacheLine are what check_sys_data sends: perftest's
	// cycle_buffer (sysconf(_SC_PAGESIZE)) and cache_line_size.
	PageSize, CacheLine uint32

	remoteVersion     string
	remoteVer         float64 // atof(remoteVersion)
	versionsExchanged bool
	remotePage        uint32
	remoteCache       uint32

	flow          Flow
	setUp         bool
	local, remote Dest // QP 0's: every handshake after the per-QP loops sends them
	closed        bool
	// peeked holds what WatchPeer read ahead of the next step.
	peeked []byte
	// comm, with -R or -z, is the rdma_cm comm QP nc is: each message
	// is a SEND, and the keys are binary (rdmacm.go).
	comm *comm
	// version, when set, is advertised instead of Version (tests).
	version string
}

// Listen is perftest's server side of establish_connection
// (ethernet_server_connect): it binds addr (e.g. ":18515"), accepts ONE
// connection and closes the listener.
func Listen(ctx context.Context, addr string) (*Conn, error) {
	var lc net.ListenConfig // Go sets SO_REUSEADDR, as perftest does
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("perftest: listening on %s: %w", addr, err)
	}
	return Accept(ctx, ln)
}

// Accept accepts one connection on ln for the server side and closes ln.
func Accept(ctx context.Context, ln net.Listener) (*Conn, error) {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	nc, err := ln.Accept()
	stop()
	ln.Close()
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("perftest: waiting for the client on %s: %w", ln.Addr(), err)
	}
	return NewConn(ctx, nc, true), nil
}

// Dial is perftest's client side of establish_connection
// (ethernet_client_connect). perftest tries once; Dial retries for up to
// DialRetry while the server refuses the connection, since a server that
// is started at the same time may not listen yet.
func Dial(ctx context.Context, addr string) (*Conn, error) {
	return DialWith(ctx, &net.Dialer{}, addr)
}

// DialWith is Dial with d's settings, such as the source address
// (perftest's --bind_source_ip).
func DialWith(ctx context.Context, d *net.Dialer, addr string) (*Conn, error) {
	nc, err := tcpdial.Dial(ctx, d, addr, DialRetry)
	if err != nil {
		return nil, fmt.Errorf("perftest: connecting to %s: %w", addr, err)
	}
	return NewConn(ctx, nc, false), nil
}

// NewConn wraps an established connection: server tells the role.
func NewConn(ctx context.Context, nc net.Conn, server bool) *Conn {
	if ctx == nil {
		ctx = context.Background()
	}
	return &Conn{nc: nc, server: server, ctx: ctx, PageSize: uint32(os.Getpagesize()), CacheLine: 64}
}

// SetContext replaces the context the Conn's steps honour.
func (c *Conn) SetContext(ctx context.Context) {
	if ctx == nil {
		ctx = context.Background()
	}
	c.ctx = ctx
}

// LocalAddr returns the connection's local address: on a server, the
// address the client reached it on.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// IsServer reports whether c is the server (the side without a peer name).
func (c *Conn) IsServer() bool { return c.server }

// RemoteVersion returns the version the peer advertised ("" before
// ExchangeVersions).
func (c *Conn) RemoteVersion() string { return c.remoteVersion }

// RemoteSysData returns the page and cache line size the peer sent
// (zero before, or when the peer's version has no check_sys_data).
func (c *Conn) RemoteSysData() (pageSize, cacheLine uint32) { return c.remotePage, c.remoteCache }

// Close closes the connection.
func (c *Conn) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	return c.nc.Close()
}

// lingerMax bounds how long a write_lat side waits for its peer to close
// the connection.
const lingerMax = 5 * time.Second

// linger ends a write_lat side's part of the connection, which perftest
// ends with no handshake: it half-closes the socket and waits, at most
// lingerMax, until the peer has closed it too. The side's QP lives until
// then. Both sides of a timed run end on their own clocks, and the peer's
// last WRITE may still be on its way when this side's ends: were the QP
// gone, nothing would acknowledge it, and perftest waits for its
// completion forever (a perftest 6.06 client did, behind a gorxe server
// that had closed). A perftest peer closes once its run is over; a gorxe
// one half-closes, as this side does, so neither waits for the other.
func (c *Conn) linger() {
	hc, ok := c.nc.(interface{ CloseWrite() error })
	if c.closed || !ok || hc.CloseWrite() != nil {
		return
	}
	c.nc.SetReadDeadline(time.Now().Add(lingerMax))
	io.Copy(io.Discard, c.nc)
}

// ---------------------------------------------------------------------------
// Transport.

var aLongTimeAgo = time.Unix(1, 0)

// do runs f with the connection's deadline set from timeout and the
// context, and turns what went wrong into an error naming step.
func (c *Conn) do(step string, timeout time.Duration, f func() error) error {
	if c.closed {
		return fmt.Errorf("perftest: %s: the connection is closed", step)
	}
	if err := c.ctx.Err(); err != nil {
		return fmt.Errorf("perftest: %s: %w", step, err)
	}
	dl := time.Now().Add(timeout)
	d, ctxDeadline := c.ctx.Deadline()
	if ctxDeadline = ctxDeadline && d.Before(dl); ctxDeadline {
		dl = d
	}
	c.nc.SetDeadline(dl)
	stop := context.AfterFunc(c.ctx, func() { c.nc.SetDeadline(aLongTimeAgo) })
	err := f()
	stop()
	if err == nil {
		return nil
	}
	cerr := c.ctx.Err()
	if cerr == nil && ctxDeadline && errors.Is(err, os.ErrDeadlineExceeded) {
		// The context's deadline, which the connection's reached first.
		cerr = context.DeadlineExceeded
	}
	if cerr != nil {
		return fmt.Errorf("perftest: %s: %w (%v)", step, cerr, err)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("perftest: %s: no answer from the peer within %v: %w", step, timeout, err)
	}
	return fmt.Errorf("perftest: %s: %w", step, err)
}

func (c *Conn) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

func (c *Conn) runTimeout() time.Duration {
	if c.RunTimeout > 0 {
		return c.RunTimeout
	}
	return DefaultRunTimeout
}

func (c *Conn) write(msg []byte) error {
	if _, err := c.nc.Write(msg); err != nil {
		return fmt.Errorf("sending %d bytes: %w", len(msg), err)
	}
	return nil
}

func (c *Conn) read(n int) ([]byte, error) {
	if c.comm != nil {
		return c.comm.recv(n)
	}
	buf := make([]byte, n)
	ahead := copy(buf, c.peeked)
	c.peeked = c.peeked[ahead:]
	got, err := io.ReadFull(c.nc, buf[ahead:])
	got += ahead
	switch {
	case err == nil:
		return buf, nil
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return nil, fmt.Errorf("the peer closed the connection after %d of %d bytes: %w", got, n, err)
	default:
		return nil, fmt.Errorf("reading %d bytes (got %d): %w", n, got, err)
	}
}

// WatchPeer waits, on a goroutine of its own, for the peer's next
// message: the returned channel is closed when its first byte comes (or
// the connection fails), which during a run means the peer has finished
// its part. stop ends the wait and keeps the byte for the next step; it
// must be called before the next step, and the Conn not used until then.
func (c *Conn) WatchPeer() (spoke <-chan struct{}, stop func()) {
	if c.comm != nil {
		return c.comm.watch()
	}
	ch := make(chan struct{})
	ended := make(chan struct{})
	c.nc.SetReadDeadline(time.Time{})
	go func() {
		defer close(ended)
		var b [1]byte
		if n, _ := c.nc.Read(b[:]); n == 1 {
			c.peeked = append(c.peeked, b[0])
		}
		close(ch)
	}()
	return ch, func() {
		c.nc.SetReadDeadline(aLongTimeAgo) // ends a Read still waiting
		<-ended
		c.nc.SetReadDeadline(time.Time{})
	}
}

// xchg is ctx_xchg_data_ethernet / ctx_hand_shake: the client writes then
// reads, the server reads then writes.
func (c *Conn) xchg(step string, timeout time.Duration, msg []byte, n int) ([]byte, error) {
	var got []byte
	err := c.do(step, timeout, func() error {
		var err error
		if !c.server {
			if err = c.write(msg); err != nil {
				return err
			}
			got, err = c.read(n)
			return err
		}
		if got, err = c.read(n); err != nil {
			return err
		}
		return c.write(msg)
	})
	return got, err
}

// ---------------------------------------------------------------------------
// Low-level exchanges.

// atof reads a version as C's atof does: the longest prefix that is a
// decimal number, 0 if there is none.
func atof(s string) float64 {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	end, digits := 0, false
	if end < len(s) && (s[end] == '+' || s[end] == '-') {
		end++
	}
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end, digits = end+1, true
	}
	if end < len(s) && s[end] == '.' {
		end++
		for end < len(s) && s[end] >= '0' && s[end] <= '9' {
			end, digits = end+1, true
		}
	}
	if !digits {
		return 0
	}
	if end < len(s) && (s[end] == 'e' || s[end] == 'E') {
		e := end + 1
		if e < len(s) && (s[e] == '+' || s[e] == '-') {
			e++
		}
		if e < len(s) && s[e] >= '0' && s[e] <= '9' {
			for e < len(s) && s[e] >= '0' && s[e] <= '9' {
				e++
			}
			end = e
		}
	}
	v, _ := strconv.ParseFloat(s[:end], 64)
	return v
}

// ExchangeVersions is exchange_versions: 16 bytes, the version
// NUL-padded (strncpy). It returns the peer's, up to its first NUL.
func (c *Conn) ExchangeVersions(local string) (remote string, err error) {
	const step = "exchanging versions"
	if len(local) >= versionSize || strings.IndexByte(local, 0) >= 0 {
		return "", fmt.Errorf("perftest: %s: local version %q does not fit perftest's %d bytes", step, local, versionSize)
	}
	msg := make([]byte, versionSize)
	copy(msg, local)
	got, err := c.xchg(step, c.timeout(), msg, versionSize)
	if err != nil {
		return "", err
	}
	if i := bytes.IndexByte(got, 0); i >= 0 {
		got = got[:i]
	}
	c.remoteVersion, c.remoteVer, c.versionsExchanged = string(got), atof(string(got)), true
	return c.remoteVersion, nil
}

// ExchangeSysData is check_sys_data's exchange: the page size, then (in
// a second exchange) the cache line size, each a big-endian int. perftest
// does it only when the remote version is 5.32 or later; both sides then
// use the larger of each.
func (c *Conn) ExchangeSysData(pageSize, cacheLine uint32) (remotePage, remoteCache uint32, err error) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], pageSize)
	got, err := c.xchg("exchanging page size (check_sys_data)", c.timeout(), b[:], 4)
	if err != nil {
		return 0, 0, err
	}
	remotePage = binary.BigEndian.Uint32(got)
	binary.BigEndian.PutUint32(b[:], cacheLine)
	if got, err = c.xchg("exchanging cache line size (check_sys_data)", c.timeout(), b[:], 4); err != nil {
		return 0, 0, err
	}
	remoteCache = binary.BigEndian.Uint32(got)
	c.remotePage, c.remoteCache = remotePage, remoteCache
	return remotePage, remoteCache, nil
}

// ExchangeMTU is check_mtu's exchange: the enum ibv_mtu (1 = 256 …
// 5 = 4096) as sprintf("%d") writes it, 2 bytes ("3\0") when the remote
// version is 5.31 or later, else sizeof(int) = 4. It returns the smaller
// of the two. perftest ignores an invalid remote MTU; gorxe refuses it.
// It needs the versions exchanged first.
func (c *Conn) ExchangeMTU(local qp.MTU) (qp.MTU, error) {
	const step = "exchanging MTU (check_mtu)"
	if !c.versionsExchanged {
		return 0, fmt.Errorf("perftest: %s: the versions are not exchanged yet", step)
	}
	if local < qp.MTU256 || local > qp.MTU4096 {
		return 0, fmt.Errorf("perftest: %s: invalid local MTU enum %d", step, local)
	}
	n := 4
	// check_mtu holds the remote version in a float.
	if float64(float32(c.remoteVer)) >= verMTU2 {
		n = 2
	}
	msg := make([]byte, n)
	msg[0] = '0' + byte(local)
	got, err := c.xchg(step, c.timeout(), msg, n)
	if err != nil {
		return 0, err
	}
	if got[0] < '0'+byte(qp.MTU256) || got[0] > '0'+byte(qp.MTU4096) || got[1] != 0 {
		return 0, fmt.Errorf("perftest: %s: the peer sent %q, not an MTU enum 1..5", step, got)
	}
	return min(local, qp.MTU(got[0]-'0')), nil
}

// MarshalKey returns d as perftest's GID key message, NUL included.
func (d Dest) MarshalKey() ([]byte, error) {
	return perfkey.Key{LID: d.LID, OutReads: d.OutReads, QPN: d.QPN, PSN: d.PSN, RKey: d.RKey, VAddr: d.VAddr, GID: d.GID, SRQN: d.SRQN}.
		Append(make([]byte, 0, keyMsgSize))
}

// ParseKey parses perftest's GID key message strictly: exactly the
// fields and widths sprintf writes, each followed by ':', then a NUL.
func ParseKey(msg []byte) (Dest, error) {
	k, err := perfkey.Parse(msg)
	return Dest{LID: k.LID, OutReads: k.OutReads, QPN: k.QPN, PSN: k.PSN, RKey: k.RKey, VAddr: k.VAddr, GID: k.GID, SRQN: k.SRQN}, err
}

// handShake is perftest's ctx_hand_shake on Ethernet: both sides send
// their pingpong_dest as the key message. Every "handshake" of perftest is
// this exchange, with the same content each time.
func (c *Conn) handShake(step string, timeout time.Duration, local Dest) (Dest, error) {
	if c.comm != nil {
		return c.handShakeCM(step, timeout, local)
	}
	msg, err := local.MarshalKey()
	if err != nil {
		return Dest{}, fmt.Errorf("perftest: %s: %w", step, err)
	}
	got, err := c.xchg(step, timeout, msg, keyMsgSize)
	if err != nil {
		return Dest{}, err
	}
	d, err := ParseKey(got)
	if err != nil {
		return Dest{}, fmt.Errorf("perftest: %s: %w", step, err)
	}
	return d, nil
}

// ExchangeBWReport is xchg_bw_reports: size, iters, bw_peak, bw_avg and
// msgRate_avg, each in its own exchange, each 8 bytes big-endian (the
// doubles' bits byte-swapped, hton_double); iters is 4 bytes if the remote
// version is before 5.33. A passive perftest server sends a report it never
// filled in: whatever was on its stack.
func (c *Conn) ExchangeBWReport(local BWReport) (BWReport, error) {
	return c.exchangeBWReport(local, c.timeout())
}

// exchangeBWReport is ExchangeBWReport with the first exchange waiting up
// to first.
func (c *Conn) exchangeBWReport(local BWReport, first time.Duration) (BWReport, error) {
	var r BWReport
	timeout := first
	x := func(name string, v uint64, n int) (uint64, error) {
		b := make([]byte, 8)
		binary.BigEndian.PutUint64(b, v)
		if n == 4 {
			binary.BigEndian.PutUint32(b, uint32(v))
		}
		got, err := c.xchg("exchanging bandwidth reports ("+name+")", timeout, b[:n], n)
		timeout = c.timeout()
		if err != nil {
			return 0, err
		}
		if n == 4 {
			return uint64(binary.BigEndian.Uint32(got)), nil
		}
		return binary.BigEndian.Uint64(got), nil
	}
	itersLen := 8
	// xchg_bw_reports takes the remote version as a float.
	if c.versionsExchanged && float64(float32(c.remoteVer)) < verIters64 {
		itersLen = 4
	}
	var err error
	var u uint64
	if r.Size, err = x("size", local.Size, 8); err != nil {
		return r, err
	}
	if r.Iters, err = x("iters", local.Iters, itersLen); err != nil {
		return r, err
	}
	if u, err = x("bw_peak", math.Float64bits(local.PeakMBps), 8); err != nil {
		return r, err
	}
	r.PeakMBps = math.Float64frombits(u)
	if u, err = x("bw_avg", math.Float64bits(local.AvgMBps), 8); err != nil {
		return r, err
	}
	r.AvgMBps = math.Float64frombits(u)
	if u, err = x("msgRate_avg", math.Float64bits(local.MsgRateMpps), 8); err != nil {
		return r, err
	}
	r.MsgRateMpps = math.Float64frombits(u)
	return r, nil
}

// closeConnection is ctx_close_connection: a handshake, then (perftest
// before 6.17) "done\0" written by both sides, then close. gorxe writes
// "done\0" when the peer is older than 6.17, as two such perftests do, and
// reads the peer's so that closing does not reset the connection. The
// handshake waits up to RunTimeout, as the peer may still be running.
//
// Over rdma_cm (-z) the handshake races the disconnect: a side that has
// its peer's message, and the ACK of its own, disconnects at once, and
// the peer's SEND, whose ACK was lost or not yet sent, is flushed with
// the QP before it completes. A peer disconnects only once its side of
// the handshake is over (or it failed, which it reports itself), and the
// run's results are in: the peer's close ends the connection as the
// close would have.
func (c *Conn) closeConnection() error {
	if _, err := c.handShake("closing the connection (ctx_close_connection)", c.runTimeout(), c.local); err != nil {
		c.Close()
		if c.comm != nil && errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	if c.remoteVer < verNoDone && c.comm == nil {
		// Both sides write "done" and neither must fail on it (the
		// race commit dbf395e removed it for); read the peer's so the
		// close is not a reset. Errors here change nothing any more.
		wait := min(c.timeout(), 2*time.Second)
		var got []byte
		err := c.do("closing the connection (done)", wait, func() error {
			c.write([]byte(doneMsg))
			var err error
			got, err = c.read(len(doneMsg))
			return err
		})
		if err == nil && string(got) != doneMsg {
			c.Close()
			return fmt.Errorf("perftest: closing the connection: the peer sent %q, not \"done\\0\"", got)
		}
	}
	return c.Close()
}

// ---------------------------------------------------------------------------
// GIDs.

// gidV4Mapped is perftest's ipv6_addr_v4mapped: ::ffff:a.b.c.d, or the
// IPv4-encoded multicast ff0e::ffff:a.b.c.d.
func gidV4Mapped(g [16]byte) bool {
	w := func(i int) uint32 { return binary.BigEndian.Uint32(g[4*i:]) }
	return w(0)|w(1)|(w(2)^0x0000ffff) == 0 ||
		(w(0) == 0xff0e0000 && w(1)|(w(2)^0x0000ffff) == 0)
}

// CheckGIDs is ctx_check_gid_compatibility: both GIDs IPv4-mapped (RoCE
// v2 over IPv4) or neither.
func CheckGIDs(local, remote [16]byte) error {
	l, r := gidV4Mapped(local), gidV4Mapped(remote)
	if l == r {
		return nil
	}
	kind := func(m bool) string {
		if m {
			return "IPv4-mapped"
		}
		return "not IPv4-mapped"
	}
	return fmt.Errorf("perftest: checking GIDs: the local GID %s is %s but the peer's %s is %s "+
		"(perftest: \"Found Incompatibility issue with GID types\"; use GIDs of the same IP version)",
		netip.AddrFrom16(local), kind(l), netip.AddrFrom16(remote), kind(r))
}

// ---------------------------------------------------------------------------
// The sequence of each test (PROTOCOL.md).

// Flow is what decides a test's sequence of exchange steps: the test and
// the perftest flags that add or remove steps. The number of QPs (-q) is
// the number of dests Setup is given.
type Flow struct {
	Test Test
	// Duplex is -b: the servers of write_bw, read_bw and atomic_bw take
	// part in the run, every test shakes hands before each size's run,
	// and both sides exchange reports after it.
	Duplex bool
	// WithImm is --write_with_imm: write_bw and write_lat shake hands
	// before each size's run (once the receives are posted), and the
	// write_bw server receives instead of being passive. perftest has
	// it from 6.20 (write_bw.c, write_lat.c); a peer must run with it
	// too. With send_bw and send_lat it is --send_with_imm (6.28), which
	// changes no step.
	WithImm bool
	// AllSizes is -a: some tests shake hands after each size's run.
	AllSizes bool
	// Duration is -D: with -b, send_bw and write_bw with WithImm then
	// exchange no reports (send_bw.c, write_bw.c: "test_type !=
	// DURATION").
	Duration bool
	// RDMACM is -R: the test QPs are connected with rdma_cm, between two
	// more handshakes (create_rdma_cm_connection), instead of from the
	// key messages; the GIDs are not checked. It needs a Conn made by
	// DialCM or ListenCM.
	RDMACM bool
}

func (f Flow) writeImm() bool { return f.WithImm && (f.Test == WriteBW || f.Test == WriteLat) }

// PassiveServer reports whether the server takes no part in the run: it
// goes from Connected straight to Finish, whose handshake waits for the
// client's run, and prints the client's report (write_bw, read_bw and
// atomic_bw: "For half duplex tests, server just waits for client to
// exit"; write_bw with --write_with_imm receives instead).
func (f Flow) PassiveServer() bool {
	return (f.Test == WriteBW || f.Test == ReadBW || f.Test == AtomicBW) && !f.Duplex && !f.writeImm()
}

// ReportsPerSize reports whether both sides exchange bandwidth reports
// after each size's run, in AfterRun: -b, unless -D stops it (send_bw,
// and write_bw with WithImm). Each side then prints the sum of its own
// report and the peer's (print_full_bw_report).
func (f Flow) ReportsPerSize() bool {
	if !f.Duplex || f.Test.IsLatency() {
		return false
	}
	return !f.Duration || !(f.Test == SendBW || f.writeImm())
}

// validate refuses what perftest's parser refuses of the flow.
func (f Flow) validate(qps int) error {
	p := Params{Test: f.Test, NumQPs: qps, Duplex: f.Duplex, WithImm: f.WithImm}
	if !p.known() {
		return fmt.Errorf("unknown test %q", f.Test)
	}
	if qps < 1 {
		return fmt.Errorf("no QP")
	}
	return p.checkFlags()
}

func (c *Conn) checkSetUp(step string) error {
	if !c.setUp {
		return fmt.Errorf("perftest: %s: Setup has not run", step)
	}
	return nil
}

// Setup runs everything before the QPs are connected: exchange_versions,
// check_version_compatibility, check_sys_data, check_mtu, (no
// negotiate_params: see PROTOCOL.md), the key exchange of every QP (one
// handshake each, in order; ib_write_lat and ib_read_lat shake hands
// once more before), ctx_check_gid_compatibility of QP 0's GIDs. It
// returns the peer's dest of each QP and the MTU both sides use.
func (c *Conn) Setup(f Flow, local []Dest, mtu qp.MTU) (remote []Dest, agreedMTU qp.MTU, err error) {
	if err := f.validate(len(local)); err != nil {
		return nil, 0, fmt.Errorf("perftest: setup: %w", err)
	}
	if c.setUp {
		return nil, 0, fmt.Errorf("perftest: setup: Setup already ran")
	}
	for i, d := range local {
		if _, err := d.MarshalKey(); err != nil {
			return nil, 0, fmt.Errorf("perftest: setup: local dest of QP %d: %w", i, err)
		}
	}
	own := Version
	if c.version != "" {
		own = c.version
	}
	rv, err := c.ExchangeVersions(own)
	if err != nil {
		return nil, 0, err
	}
	if c.remoteVer < verMin {
		return nil, 0, fmt.Errorf("perftest: checking versions: the peer's version %q is older than 5.70, which perftest refuses", rv)
	}
	if c.remoteVer >= verSysData {
		if _, _, err := c.ExchangeSysData(c.PageSize, c.CacheLine); err != nil {
			return nil, 0, err
		}
	}
	agreedMTU = mtu
	if float64(float32(c.remoteVer)) >= verMTU {
		if agreedMTU, err = c.ExchangeMTU(mtu); err != nil {
			return nil, 0, err
		}
	}
	// negotiate_params runs in a perftest of 6.28 or later only if the
	// PEER's version is 6.28 or later: on the wire iff both are.
	if c.remoteVer >= verNegotiate && atof(own) >= verNegotiate {
		return nil, 0, fmt.Errorf("perftest: negotiating parameters: the peer (%s) would run negotiate_params since gorxe advertises %s; "+
			"gorxe does not speak it: advertise a Version below 6.28", rv, own)
	}
	if f.RDMACM {
		if err := c.createCMConnection(agreedMTU); err != nil {
			return nil, 0, err
		}
	}
	if f.Test == WriteLat || f.Test == ReadLat || f.Test == AtomicLat {
		// write_lat.c, read_lat.c, atomic_lat.c: one handshake of QP 0
		// before the per-QP loop.
		if _, err := c.handShake("exchanging keys (first handshake of the latency tests)", c.timeout(), local[0]); err != nil {
			return nil, 0, err
		}
	}
	remote = make([]Dest, len(local))
	for i, d := range local {
		if remote[i], err = c.handShake(keyStep("exchanging keys (ctx_hand_shake)", i, len(local)), c.timeout(), d); err != nil {
			return nil, 0, err
		}
	}
	if !f.RDMACM {
		if err := CheckGIDs(local[0].GID, remote[0].GID); err != nil {
			return nil, 0, err
		}
	}
	c.flow, c.setUp, c.local, c.remote = f, true, local[0], remote[0]
	return remote, agreedMTU, nil
}

// keyStep names a handshake of the per-QP loop i of n.
func keyStep(step string, i, n int) string {
	if n == 1 {
		return step
	}
	return fmt.Sprintf("%s of QP %d of %d", step, i, n)
}

// Connected runs the handshakes after the QPs are moved to RTR/RTS: the
// per-QP loop ("remote" side, one handshake of each QP's dest) and one
// of QP 0's, in perftest's order: send_bw and send_lat shake hands with
// QP 0 first ("after connecting") and then loop; the others loop and
// then shake hands with QP 0 ("after moving QP to RTR"). It checks that
// the peer still names the same QPs.
func (c *Conn) Connected(local, remote []Dest) error {
	if err := c.checkSetUp("connected"); err != nil {
		return err
	}
	if len(local) != len(remote) || len(local) == 0 {
		return fmt.Errorf("perftest: connected: %d local and %d remote dests", len(local), len(remote))
	}
	one := func(step string, i int) error {
		got, err := c.handShake(step, c.timeout(), local[i])
		if err != nil {
			return err
		}
		if got.QPN != remote[i].QPN {
			return fmt.Errorf("perftest: %s: the peer now names QP %#x, not %#x", step, got.QPN, remote[i].QPN)
		}
		if i == 0 {
			c.remote = got
		}
		return nil
	}
	loop := func(step string) error {
		for i := range local {
			if err := one(keyStep(step, i, len(local)), i); err != nil {
				return err
			}
		}
		return nil
	}
	c.local = local[0]
	if c.flow.Test == SendBW || c.flow.Test == SendLat {
		if err := one("handshake after connecting the QPs", 0); err != nil {
			return err
		}
		return loop("handshake printing the peer's QP")
	}
	if err := loop("handshake after connecting the QPs"); err != nil {
		return err
	}
	return one("handshake after moving the QPs to RTR", 0)
}

// BeforeRun runs the handshake before each message size's run, which
// lets the peer start: ib_send_bw and ib_send_lat, every test with -b,
// and ib_write_bw and ib_write_lat with --write_with_imm. Receives are
// posted before it. The other tests have none. A passive server does not
// call it.
func (c *Conn) BeforeRun() error {
	if err := c.checkSetUp("before the run"); err != nil {
		return err
	}
	f := c.flow
	if f.Test != SendBW && f.Test != SendLat && !f.Duplex && !f.writeImm() {
		return nil
	}
	// The peer may be posting thousands of receives.
	_, err := c.handShake("handshake before the run (receives posted)", c.timeout(), c.local)
	return err
}

// AfterRun runs the exchange after each message size's run, and returns
// the peer's report when the sides exchange them (Flow.ReportsPerSize),
// else a zero one. In perftest's order:
//   - write_bw and read_bw with -a and -b (own version >= 4.6, as every
//     perftest is) or WithImm (write_bw): a handshake; then with -b,
//     xchg_bw_reports;
//   - atomic_bw with -b: xchg_bw_reports (-a changes nothing);
//   - send_bw: with -b, xchg_bw_reports; then with -a, a handshake.
//
// Call it after every size's run, the last one included, and before
// Finish. A passive server does not call it.
func (c *Conn) AfterRun(local BWReport) (remote BWReport, err error) {
	if err := c.checkSetUp("after the run"); err != nil {
		return BWReport{}, err
	}
	f := c.flow
	shake := func() error {
		_, err := c.handShake("handshake after the run of one size", c.runTimeout(), c.local)
		return err
	}
	if (f.Test == WriteBW || f.Test == ReadBW) && f.AllSizes && (f.Duplex || f.writeImm()) {
		if err := shake(); err != nil {
			return BWReport{}, err
		}
	}
	if f.ReportsPerSize() {
		// The peer may still be running its half of the test.
		if remote, err = c.exchangeBWReport(local, c.runTimeout()); err != nil {
			return BWReport{}, err
		}
	}
	if f.Test == SendBW && f.AllSizes {
		if err := shake(); err != nil {
			return BWReport{}, err
		}
	}
	return remote, nil
}

// Finish runs what follows the test, once, after the last size, and
// closes the connection:
//   - write_bw, read_bw, atomic_bw (passive server: Flow.PassiveServer):
//     a handshake, xchg_bw_reports (the peer's report is returned: a
//     perftest client's is its result, a perftest server's is garbage),
//     ctx_close_connection. A passive server calls Finish right after
//     Connected: it waits for the client's run.
//   - write_lat: nothing; perftest just exits. gorxe half-closes the
//     socket and waits for the peer to close it (linger) before it
//     closes it.
//   - everything else: ctx_close_connection only. No report: a zero
//     BWReport.
func (c *Conn) Finish(local BWReport) (remote BWReport, err error) {
	if err := c.checkSetUp("finish"); err != nil {
		return BWReport{}, err
	}
	switch f := c.flow; {
	case f.Test == WriteLat:
		c.linger()
		return BWReport{}, c.Close()
	case f.PassiveServer():
		if _, err := c.handShake("handshake after the run", c.runTimeout(), c.local); err != nil {
			return BWReport{}, err
		}
		if remote, err = c.ExchangeBWReport(local); err != nil {
			return BWReport{}, err
		}
	}
	return remote, c.closeConnection()
}

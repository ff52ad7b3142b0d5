package pingpong

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/link/udp"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire/bth"
)

// devices opens two gorxe devices on one in-memory fabric, at 10.0.0.1
// and 10.0.0.2, closed when the test ends.
func devices(t *testing.T) (a, b *rnic.Device) {
	t.Helper()
	return devicesAt(t, "10.0.0.1", "10.0.0.2")
}

// udpDevices opens two gorxe devices on kernel UDP sockets at 127.0.0.1
// and 127.0.0.2 (udp.LoopbackPair), closed when the test ends.
func udpDevices(t *testing.T) (a, b *rnic.Device) {
	t.Helper()
	ls, err := udp.LoopbackPair(udp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var devs [2]*rnic.Device
	for i, l := range ls {
		if devs[i], err = rnic.Open(rnic.Config{Link: l, Port: l.SourcePort()}); err != nil {
			l.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { devs[i].Close() })
	}
	return devs[0], devs[1]
}

// listen opens a TCP listener on a free loopback port.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

type outcome struct {
	r   *Result
	out string
	err error
}

// both runs a server on a and a client on b, each with its params, and
// returns what each returned and printed.
func both(t *testing.T, ps, pc Params) (server, client outcome) {
	t.Helper()
	a, b := devices(t)
	return bothOn(t, a, b, ps, pc)
}

// bothOn runs a server on a and a client on b.
func bothOn(t *testing.T, a, b *rnic.Device, ps, pc Params) (server, client outcome) {
	t.Helper()
	ln := listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan outcome, 1)
	go func() {
		var out bytes.Buffer
		r, err := Server(ctx, a, ps, ln, &out)
		done <- outcome{r, out.String(), err}
	}()
	var out bytes.Buffer
	r, err := Client(ctx, b, pc, ln.Addr().String(), &out)
	client = outcome{r, out.String(), err}
	return <-done, client
}

func params() Params {
	p := DefaultParams()
	p.GIDIndex = 0
	p.GiveUp = 10 * time.Second
	return p
}

// The lines rc_pingpong prints, with the values a run decides.
var (
	localLine  = regexp.MustCompile(`^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:(10\.0\.0|127\.0\.0)\.[12]$`)
	remoteLine = regexp.MustCompile(`^  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:(10\.0\.0|127\.0\.0)\.[12]$`)
	bytesLine  = regexp.MustCompile(`^(\d+) bytes in \d+\.\d\d seconds = (\d+\.\d\d|inf) Mbit/sec$`)
	itersLine  = regexp.MustCompile(`^(\d+) iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter$`)
)

// checkOutput checks a side's output: rc_pingpong's four lines, in order,
// with the byte and iteration counts of size and iters.
func checkOutput(t *testing.T, who, out string, size, iters int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 4 || !localLine.MatchString(lines[0]) || !remoteLine.MatchString(lines[1]) ||
		!bytesLine.MatchString(lines[2]) || !itersLine.MatchString(lines[3]) {
		t.Fatalf("%s printed:\n%s\nwant rc_pingpong's local, remote, bytes and iters lines", who, out)
	}
	if m := bytesLine.FindStringSubmatch(lines[2]); m[1] != strconv.Itoa(2*size*iters) {
		t.Errorf("%s: %s bytes, want %d", who, m[1], 2*size*iters)
	}
	if m := itersLine.FindStringSubmatch(lines[3]); m[1] != strconv.Itoa(iters) {
		t.Errorf("%s: %s iters, want %d", who, m[1], iters)
	}
}

func TestPingPong(t *testing.T) {
	for _, tc := range []struct {
		name         string
		size, iters  int
		rxDepth      int
		events, chk  bool
		wantBadPages bool
	}{
		{name: "defaults", size: 4096, iters: 1000, rxDepth: 500},
		{name: "check", size: 65536, iters: 50, rxDepth: 500, chk: true},
		{name: "events", size: 1, iters: 100, rxDepth: 500, events: true, chk: true},
		{name: "rx depth 1", size: 100, iters: 20, rxDepth: 1, chk: true},
		{name: "zero bytes", size: 0, iters: 10, rxDepth: 4},
		{name: "odd size", size: 4096*2 + 7, iters: 10, rxDepth: 3, chk: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := params()
			p.Size, p.Iters, p.RxDepth, p.Events, p.Check = tc.size, tc.iters, tc.rxDepth, tc.events, tc.chk
			p.PageSize = 4096
			srv, cli := both(t, p, p)
			if srv.err != nil || cli.err != nil {
				t.Fatalf("server: %v\nclient: %v", srv.err, cli.err)
			}
			checkOutput(t, "server", srv.out, tc.size, tc.iters)
			checkOutput(t, "client", cli.out, tc.size, tc.iters)
			if srv.r.Remote != cli.r.Local || cli.r.Remote != srv.r.Local {
				t.Errorf("the sides disagree on their addresses: server %+v / %+v, client %+v / %+v",
					srv.r.Local, srv.r.Remote, cli.r.Local, cli.r.Remote)
			}
			if srv.r.BadPages != nil || cli.r.BadPages != nil {
				t.Errorf("bad pages: server %v, client %v", srv.r.BadPages, cli.r.BadPages)
			}
		})
	}
}

// TestPingPongUDP runs the two sides on kernel UDP sockets, whose
// devices a polling side drives itself.
func TestPingPongUDP(t *testing.T) {
	for _, events := range []bool{false, true} {
		a, b := udpDevices(t)
		p := params()
		p.Size, p.Iters, p.Events, p.Check, p.PageSize = 65536, 100, events, true, 4096
		srv, cli := bothOn(t, a, b, p, p)
		if srv.err != nil || cli.err != nil {
			t.Fatalf("events %v: server: %v\nclient: %v", events, srv.err, cli.err)
		}
		checkOutput(t, "server", srv.out, p.Size, p.Iters)
		checkOutput(t, "client", cli.out, p.Size, p.Iters)
		if srv.r.BadPages != nil || cli.r.BadPages != nil {
			t.Errorf("events %v: bad pages: server %v, client %v", events, srv.r.BadPages, cli.r.BadPages)
		}
	}
}

// TestCheckFindsDifferences runs a client without -c against a server
// with it: the client's pages carry no mark, and the server says so for
// each, as rc_pingpong's does.
func TestCheckFindsDifferences(t *testing.T) {
	ps, pc := params(), params()
	ps.Size, ps.Iters, ps.Check, ps.PageSize = 3*4096, 5, true, 4096
	pc.Size, pc.Iters = ps.Size, ps.Iters
	srv, cli := both(t, ps, pc)
	if srv.err != nil || cli.err != nil {
		t.Fatalf("server: %v\nclient: %v", srv.err, cli.err)
	}
	if want := []int{0, 1, 2}; len(srv.r.BadPages) != 3 {
		t.Fatalf("server's bad pages %v, want %v", srv.r.BadPages, want)
	}
	if !strings.HasSuffix(srv.out, "usec/iter\ninvalid data in page 0\ninvalid data in page 1\ninvalid data in page 2\n") {
		t.Errorf("server printed\n%s\nwant the result lines, then rc_pingpong's line for each page", srv.out)
	}
	if cli.r.BadPages != nil || strings.Contains(cli.out, "invalid") {
		t.Errorf("the client without -c checked: %v\n%s", cli.r.BadPages, cli.out)
	}
}

// TestSizeMismatch: a client sending more than the server's buffer holds
// fails the server's receive, and the server says so in rc_pingpong's
// words; the client, whose send the server's responder refused, fails too.
func TestSizeMismatch(t *testing.T) {
	ps, pc := params(), params()
	ps.Size, pc.Size = 100, 200
	ps.GiveUp, pc.GiveUp = 3*time.Second, 3*time.Second
	srv, cli := both(t, ps, pc)
	if srv.err == nil || !strings.Contains(srv.err.Error(), "Failed status local length error (1) for wr_id 1") {
		t.Errorf("server: %v, want a local length error on a receive", srv.err)
	}
	if cli.err == nil {
		t.Errorf("client succeeded against a server whose receives are too small")
	}
}

// fakeServer accepts one connection on ln and runs script on it.
func fakeServer(t *testing.T, ln net.Listener, script func(c net.Conn)) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		script(c)
	}()
	t.Cleanup(func() { ln.Close(); <-done })
}

func TestClientErrors(t *testing.T) {
	good := Dest{QPN: 0x99, PSN: 1, GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 9}}.Message()
	for _, tc := range []struct {
		name   string
		script func(c net.Conn)
		want   string
		is     error
	}{
		// Closing with the client's message unread resets the connection.
		{"server closes at once", func(c net.Conn) {}, "reading the server's address: the peer closed the connection", nil},
		{"server closes mid-message", func(c net.Conn) {
			io.ReadFull(c, make([]byte, MessageLen))
			c.Write(good[:20])
		}, "reading the server's address: the peer closed the connection", io.ErrUnexpectedEOF},
		{"malformed message", func(c net.Conn) {
			io.ReadFull(c, make([]byte, MessageLen))
			c.Write(msg("hello, world"))
			io.ReadFull(c, make([]byte, len(Done)))
		}, `"hello, world": want LID:QPN:PSN:GID`, ErrMessage},
		{"zero GID", func(c net.Conn) {
			io.ReadFull(c, make([]byte, MessageLen))
			m := Dest{QPN: 0x99}.Message()
			c.Write(m[:])
			io.ReadFull(c, make([]byte, len(Done)))
		}, "the peer's GID :: has no interface ID", nil},
		{"server silent", func(c net.Conn) {
			io.ReadFull(c, make([]byte, MessageLen))
			c.Read(make([]byte, 1)) // until the client gives up and closes
		}, "reading the server's address: read tcp", nil},
		{"server answers, then never sends", func(c net.Conn) {
			io.ReadFull(c, make([]byte, MessageLen))
			c.Write(good[:])
			io.ReadFull(c, make([]byte, len(Done)))
		}, "no progress: nothing completed for 500ms", ErrStalled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, b := devices(t)
			ln := listen(t)
			fakeServer(t, ln, tc.script)
			p := params()
			p.GiveUp = 500 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out bytes.Buffer
			_, err := Client(ctx, b, p, ln.Addr().String(), &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("error %v, want one with %q (is %v)", err, tc.want, tc.is)
			}
			if !localLine.MatchString(strings.Split(out.String(), "\n")[0]) {
				t.Errorf("printed %q, want the local address first", out.String())
			}
		})
	}
}

func TestServerErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script func(c net.Conn) // the client's side
		want   string
		is     error
	}{
		{"client closes at once", func(c net.Conn) {}, "reading the client's address: the peer closed the connection", io.EOF},
		{"malformed message", func(c net.Conn) {
			c.Write(msg("0000:000011:abcdef:xyz"))
		}, "GID has 3 characters", ErrMessage},
		{"zero GID: no connection, no answer", func(c net.Conn) {
			m := Dest{QPN: 0x99}.Message()
			c.Write(m[:])
			if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
				panic("the server answered a client it could not connect to")
			}
		}, "has no interface ID", nil},
		{"wrong done", func(c net.Conn) {
			m := Dest{QPN: 0x99, GID: [16]byte{10: 0xff, 11: 0xff, 12: 10}}.Message()
			c.Write(m[:])
			io.ReadFull(c, make([]byte, MessageLen))
			c.Write([]byte("DONE\x00"))
		}, `the client sent "DONE\x00" where "done\x00" belongs`, ErrMessage},
		{"client never says done", func(c net.Conn) {
			m := Dest{QPN: 0x99, GID: [16]byte{10: 0xff, 11: 0xff, 12: 10}}.Message()
			c.Write(m[:])
			c.Read(make([]byte, MessageLen+1))
			c.Read(make([]byte, 1))
		}, `reading the client's "done"`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := devices(t)
			ln := listen(t)
			p := params()
			p.GiveUp = 500 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := Server(ctx, a, p, ln, io.Discard)
				done <- err
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			tc.script(c)
			c.Close()
			err = <-done
			if err == nil || !strings.Contains(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("error %v, want one with %q (is %v)", err, tc.want, tc.is)
			}
		})
	}
}

// TestServerCancel: a server waiting for its client stops when its
// context ends.
func TestServerCancel(t *testing.T) {
	a, _ := devices(t)
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Server(ctx, a, params(), ln, io.Discard)
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		change func(*Params)
		want   string
	}{
		{func(p *Params) { p.GIDIndex = -1 }, "RoCE needs one (-g)"},
		{func(p *Params) { p.RxDepth = 0 }, "rx depth 0"},
		{func(p *Params) { p.Size = -1 }, "size -1"},
		{func(p *Params) { p.Iters = -1 }, "-1 iterations"},
		{func(p *Params) { p.MTU = 6 }, "path MTU 6"},
		{func(p *Params) { p.Port = 2 }, "IB port 2"},
		{func(p *Params) { p.SL = 16 }, "SL 16"},
		{func(p *Params) { p.NumQP, p.RxDepth = 16, 15 }, "rx_depth 15 is too small for 16 QPs"},
		{func(p *Params) { p.NumQP, p.RxDepth = MaxQP, 500 }, "num_qp 256 must be less than 256"},
		{func(p *Params) { p.NumQP, p.Type = 2, qp.TypeUC }, "srq_pingpong runs one or more RC QPs"},
		{func(p *Params) { p.NumQP, p.Type = 2, qp.TypeUD }, "srq_pingpong runs one or more RC QPs"},
	} {
		p := params()
		tc.change(&p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error with %q", p, err, tc.want)
		}
	}
	p := params()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	a, _ := devices(t)
	p.GIDIndex = 1
	if _, err := NewSide(a, p); err == nil || !strings.Contains(err.Error(), "can't read sgid of index 1") {
		t.Errorf("GID index 1 of a device with one GID: %v", err)
	}
}

// TestUCPingPong runs uc_pingpong's exchange and run: rc_pingpong's, over
// UC QPs, whose packets are UC's.
func TestUCPingPong(t *testing.T) {
	p := params()
	p.Type, p.Size, p.Iters, p.Check, p.PageSize = qp.TypeUC, 10000, 100, true, 4096
	a, b := devices(t)
	srv, cli := bothOn(t, a, b, p, p)
	if srv.err != nil || cli.err != nil {
		t.Fatalf("server: %v\nclient: %v", srv.err, cli.err)
	}
	checkOutput(t, "server", srv.out, p.Size, p.Iters)
	checkOutput(t, "client", cli.out, p.Size, p.Iters)
	if srv.r.BadPages != nil || cli.r.BadPages != nil {
		t.Errorf("bad pages: server %v, client %v", srv.r.BadPages, cli.r.BadPages)
	}
	for _, d := range []*rnic.Device{a, b} {
		// Ten UC packets a message, and no ACK: RC would have sent more.
		if c := d.Counters(); c.SentPkts != uint64(10*p.Iters) || c.BadOpcode != 0 || c.UCDroppedMsgs != 0 {
			t.Errorf("%s: sent_pkts %d (want %d), bad_opcode %d, uc_dropped_msgs %d", d.Name(), c.SentPkts, 10*p.Iters, c.BadOpcode, c.UCDroppedMsgs)
		}
	}
}

// checkSRQOutput checks what an srq_pingpong side printed: a local
// address line for each of its n QPs, as many remote lines, then the
// bytes and iters lines.
func checkSRQOutput(t *testing.T, who, out string, n, size, iters int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2*n+2 {
		t.Fatalf("%s printed %d lines:\n%s\nwant %d", who, len(lines), out, 2*n+2)
	}
	for i, l := range lines[:n] {
		if !localLine.MatchString(l) || !remoteLine.MatchString(lines[n+i]) {
			t.Fatalf("%s: address lines %d: %q, %q", who, i, l, lines[n+i])
		}
	}
	checkOutput(t, who, strings.Join(append([]string{lines[0], lines[n]}, lines[2*n:]...), "\n"), size, iters)
}

// TestSRQPingPong runs srq_pingpong's exchange and run: 16 QPs on each
// side receiving from one SRQ, MaxQP addresses each way.
func TestSRQPingPong(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		numQP, rxDepth, size, iter int
		events                     bool
	}{
		{"defaults", DefaultNumQP, 500, 4096, 1000, false},
		{"one receive per QP", 4, 4, 3000, 200, false},
		{"events", 3, 50, 100, 100, true},
		{"one QP", 1, 1, 10, 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := params()
			p.NumQP, p.RxDepth, p.Size, p.Iters, p.Events, p.Check, p.PageSize = tc.numQP, tc.rxDepth, tc.size, tc.iter, tc.events, true, 4096
			a, b := devices(t)
			srv, cli := bothOn(t, a, b, p, p)
			if srv.err != nil || cli.err != nil {
				t.Fatalf("server: %v\nclient: %v", srv.err, cli.err)
			}
			checkSRQOutput(t, "server", srv.out, tc.numQP, p.Size, p.Iters)
			checkSRQOutput(t, "client", cli.out, tc.numQP, p.Size, p.Iters)
			if srv.r.BadPages != nil || cli.r.BadPages != nil {
				t.Errorf("bad pages: server %v, client %v", srv.r.BadPages, cli.r.BadPages)
			}
			for _, d := range []*rnic.Device{a, b} {
				if c := d.Counters(); c.RcvdPkts < uint64(p.Iters) {
					t.Errorf("%s received %d packets, want %d or more", d.Name(), c.RcvdPkts, p.Iters)
				}
			}
		})
	}
}

// TestSRQPingPongFewerPeerQPs: a client with more QPs than its server
// finds the server's surplus addresses empty, and says so.
func TestSRQPingPongFewerPeerQPs(t *testing.T) {
	ps, pc := params(), params()
	ps.NumQP, pc.NumQP = 2, 4
	ps.GiveUp, pc.GiveUp = time.Second, time.Second
	srv, cli := both(t, ps, pc)
	if cli.err == nil || !strings.Contains(cli.err.Error(), "the peer's address 2 is empty") {
		t.Fatalf("client: %v; want the empty address named", cli.err)
	}
	if srv.err == nil {
		t.Fatal("the server finished a run the client never began")
	}
}

// TestSRQExchange: srq_pingpong's exchange is MaxQP messages each way,
// the ones beyond the side's QPs all zero, then the client's "done".
func TestSRQExchange(t *testing.T) {
	cc, sc := net.Pipe()
	locals := []Dest{{QPN: 0x11, PSN: 1, GID: [16]byte{15: 1}}, {QPN: 0x12, PSN: 2, GID: [16]byte{15: 1}}}
	ctx := context.Background()
	done := make(chan error, 1)
	var wire []byte
	go func() {
		all := make([]byte, MaxQP*MessageLen)
		if _, err := io.ReadFull(sc, all); err != nil {
			done <- err
			return
		}
		wire = all
		answer := make([]byte, 0, MaxQP*MessageLen)
		for i := range MaxQP {
			m := Dest{QPN: 0x40 + bth.QPN(i), GID: [16]byte{15: 2}}.Message()
			answer = append(answer, m[:]...)
		}
		if _, err := sc.Write(answer); err != nil {
			done <- err
			return
		}
		d := make([]byte, len(Done))
		_, err := io.ReadFull(sc, d)
		done <- err
	}()
	remotes, err := ExchangeClientN(ctx, cc, locals, MaxQP)
	if err != nil || <-done != nil {
		t.Fatal(err)
	}
	if len(remotes) != MaxQP || remotes[255].QPN != 0x40+255 {
		t.Fatalf("%d remotes, the last %+v", len(remotes), remotes[len(remotes)-1])
	}
	for i := range MaxQP {
		got, err := ParseMessage(wire[i*MessageLen : (i+1)*MessageLen])
		want := Dest{}
		if i < len(locals) {
			want = locals[i]
		}
		if err != nil || got != want {
			t.Fatalf("message %d: %+v, %v; want %+v", i, got, err, want)
		}
	}
	if string(wire[2*MessageLen:3*MessageLen]) != "0000:000000:000000:00000000000000000000000000000000\x00" {
		t.Fatalf("an empty address reads %q", wire[2*MessageLen:3*MessageLen])
	}
}

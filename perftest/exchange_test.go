package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/gorxe/gorxe/internal/pcaptest"
	"io"
	"math"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/gorxe/gorxe/qp"
)

// ---------------------------------------------------------------------------
// The captures: TCP 18515 between two stock perftests 6.06 (testdata/rxe).

type segment struct {
	fromClient bool
	data       []byte
}

type capStream struct {
	clientPort uint16
	segs       []segment
}

// loadCapture returns the TCP 18515 streams of a capture, in order, each
// as its payload-carrying segments (perftest writes each message at once,
// so a segment is a message; retransmissions are dropped).
func loadCapture(t *testing.T, name string) []capStream {
	t.Helper()
	c := pcaptest.Read(t, "../testdata/rxe/"+name)
	var streams []capStream
	index := map[uint16]int{}
	next := map[[2]uint16]uint32{}
	for _, data := range c.Frames {
		pkt := gopacket.NewPacket(data, c.Link, gopacket.Default)
		tl, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if tl == nil || (tl.SrcPort != DefaultPort && tl.DstPort != DefaultPort) {
			continue
		}
		fromClient := tl.DstPort == DefaultPort
		port := uint16(tl.SrcPort)
		if !fromClient {
			port = uint16(tl.DstPort)
		}
		if tl.SYN && fromClient {
			index[port] = len(streams)
			streams = append(streams, capStream{clientPort: port})
		}
		if len(tl.Payload) == 0 {
			continue
		}
		key := [2]uint16{uint16(tl.SrcPort), uint16(tl.DstPort)}
		if n, ok := next[key]; ok && tl.Seq != n {
			continue // retransmission
		}
		next[key] = tl.Seq + uint32(len(tl.Payload))
		i, ok := index[port]
		if !ok {
			t.Fatalf("%s: data on a connection whose SYN is not captured", name)
		}
		streams[i].segs = append(streams[i].segs, segment{fromClient, bytes.Clone(tl.Payload)})
	}
	return streams
}

// The tests the streams ran (identified from the RoCE traffic: see
// testdata/rxe/README.md and PROTOCOL.md).
var captureTests = map[string][]Test{
	"perftest-mtu1024.pcap": {WriteBW, ReadBW, AtomicBW, SendBW},
	"perftest-mtu4096-mixed.pcap": {WriteBW, WriteLat, ReadBW, ReadLat, SendBW, SendLat,
		AtomicBW /* CMP_AND_SWAP */, AtomicBW /* FETCH_AND_ADD */, WriteBW /* -s 9000 */, SendBW /* -c UD */},
}

// side is what one role of a captured stream sent, decoded.
type side struct {
	version   string
	page      uint32
	cacheLine uint32
	mtu       qp.MTU
	dest      Dest
	report    BWReport
	hasReport bool
}

func decodeSide(t *testing.T, s capStream, client bool) side {
	t.Helper()
	var d side
	var eights []uint64
	keys := 0
	for i, g := range s.segs {
		if g.fromClient != client {
			continue
		}
		switch {
		case i < 2:
			d.version = string(bytes.TrimRight(g.data, "\x00"))
		case len(g.data) == 4 && d.page == 0:
			d.page = binary.BigEndian.Uint32(g.data)
		case len(g.data) == 4:
			d.cacheLine = binary.BigEndian.Uint32(g.data)
		case len(g.data) == 2:
			d.mtu = qp.MTU(g.data[0] - '0')
		case len(g.data) == keyMsgSize:
			k, err := ParseKey(g.data)
			if err != nil {
				t.Fatalf("captured key message %d: %v", i, err)
			}
			if keys == 0 {
				d.dest = k
			} else if k != d.dest {
				t.Fatalf("captured key message %d differs from the first", i)
			}
			keys++
		case len(g.data) == 8:
			eights = append(eights, binary.BigEndian.Uint64(g.data))
		case string(g.data) == doneMsg:
		default:
			t.Fatalf("captured segment %d: unexpected %d bytes %x", i, len(g.data), g.data)
		}
	}
	if len(eights) == 5 {
		d.hasReport = true
		d.report = BWReport{Size: eights[0], Iters: eights[1], PeakMBps: math.Float64frombits(eights[2]),
			AvgMBps: math.Float64frombits(eights[3]), MsgRateMpps: math.Float64frombits(eights[4])}
	} else if len(eights) != 0 {
		t.Fatalf("captured %d 8-byte messages, want 0 or 5", len(eights))
	}
	return d
}

func TestCaptureKeyMessage(t *testing.T) {
	streams := loadCapture(t, "perftest-mtu1024.pcap")
	if len(streams) != 4 {
		t.Fatalf("%d streams in the capture, want 4", len(streams))
	}
	// ib_write_bw's client: the 9th segment is its first key message.
	got := streams[0].segs[8]
	want := Dest{
		OutReads: 1, QPN: 0x11, PSN: 0xe6959f, RKey: 0x2b8, VAddr: 0x7f309928e000,
		GID: netip.MustParseAddr("::ffff:10.9.0.3").As16(),
	}
	msg, err := want.MarshalKey()
	if err != nil {
		t.Fatal(err)
	}
	if !got.fromClient || !bytes.Equal(msg, got.data) {
		t.Fatalf("key message\n got %q\nwant %q", msg, got.data)
	}
	if d, err := ParseKey(got.data); err != nil || d != want {
		t.Fatalf("ParseKey = %+v, %v; want %+v", d, err, want)
	}
	// Every key message of both captures parses and re-marshals to itself.
	for name := range captureTests {
		n := 0
		for _, s := range loadCapture(t, name) {
			for _, g := range s.segs {
				if len(g.data) != keyMsgSize {
					continue
				}
				d, err := ParseKey(g.data)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if back, _ := d.MarshalKey(); !bytes.Equal(back, g.data) {
					t.Fatalf("%s: %q re-marshals to %q", name, g.data, back)
				}
				if !gidV4Mapped(d.GID) {
					t.Fatalf("%s: GID %x is IPv4-mapped in the capture", name, d.GID)
				}
				n++
			}
		}
		t.Logf("%s: %d key messages", name, n)
	}
	// The server of read_bw (stream 1) offers out_reads 128, as rxe does.
	d, _ := ParseKey(streams[1].segs[9].data)
	if d.OutReads != 0x80 || d.QPN != 0x12 || d.PSN != 0xf2e73e || d.RKey != 0x3fb || d.VAddr != 0x7f439ac80000 ||
		netip.AddrFrom16(d.GID).String() != "::ffff:10.9.0.2" {
		t.Fatalf("read_bw server dest %+v", d)
	}
}

// replayPeer plays one role of a captured stream on nc: it sends that
// role's segments and checks that what it reads is byte for byte the other
// role's. Then it expects the connection to be closed.
func replayPeer(nc net.Conn, segs []segment, asClient bool) error {
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	for i, g := range segs {
		if g.fromClient == asClient {
			if _, err := nc.Write(g.data); err != nil {
				return fmt.Errorf("segment %d: write: %w", i, err)
			}
			continue
		}
		got := make([]byte, len(g.data))
		if _, err := io.ReadFull(nc, got); err != nil {
			return fmt.Errorf("segment %d: reading %d bytes: %w", i, len(g.data), err)
		}
		if !bytes.Equal(got, g.data) {
			return fmt.Errorf("segment %d: gorxe sent\n%q\nthe capture has\n%q", i, got, g.data)
		}
	}
	var rest [64]byte
	n, err := nc.Read(rest[:])
	if n > 0 || (err != io.EOF && !errors.Is(err, net.ErrClosed) && !errors.Is(err, syscall.ECONNRESET)) {
		return fmt.Errorf("after the last segment: got %q, %v; want the connection closed", rest[:n], err)
	}
	return nil
}

// runAll runs one role of test tst, one QP, no flags, through the whole
// sequence.
func runAll(c *Conn, tst Test, local Dest, mtu qp.MTU, rep BWReport, sizes int) (Dest, qp.MTU, BWReport, error) {
	remote, agreed, got, _, err := runFlow(c, Flow{Test: tst, AllSizes: sizes > 1}, []Dest{local}, mtu, rep, sizes, false)
	if len(remote) == 0 {
		return Dest{}, agreed, got, err
	}
	return remote[0], agreed, got, err
}

// runFlow runs one role of flow f through the whole sequence, as
// RunRemote calls the steps: a passive server goes from Connected to
// Finish. It returns the peer's dests, the MTU, the report Finish got and
// those AfterRun got.
func runFlow(c *Conn, f Flow, local []Dest, mtu qp.MTU, rep BWReport, sizes int, server bool) ([]Dest, qp.MTU, BWReport, []BWReport, error) {
	remote, agreed, err := c.Setup(f, local, mtu)
	if err != nil {
		return remote, agreed, BWReport{}, nil, err
	}
	if err := c.Connected(local, remote); err != nil {
		return remote, agreed, BWReport{}, nil, err
	}
	var reps []BWReport
	for range sizes {
		if server && f.PassiveServer() {
			break
		}
		if err := c.BeforeRun(); err != nil {
			return remote, agreed, BWReport{}, reps, err
		}
		r, err := c.AfterRun(rep)
		if err != nil {
			return remote, agreed, BWReport{}, reps, err
		}
		reps = append(reps, r)
	}
	got, err := c.Finish(rep)
	return remote, agreed, got, reps, err
}

// TestCaptureReplay drives gorxe's client against the captured server and
// gorxe's server against the captured client, for every test of both
// captures, giving gorxe the captured side's values: every byte gorxe
// sends must be the captured one.
func TestCaptureReplay(t *testing.T) {
	for name, tests := range captureTests {
		streams := loadCapture(t, name)
		if len(streams) != len(tests) {
			t.Fatalf("%s: %d streams, want %d", name, len(streams), len(tests))
		}
		for i, tst := range tests {
			s := streams[i]
			for _, gorxeServer := range []bool{false, true} {
				role := "client"
				if gorxeServer {
					role = "server"
				}
				t.Run(fmt.Sprintf("%s/%d-%s/%s", name, i, tst, role), func(t *testing.T) {
					mine, theirs := decodeSide(t, s, !gorxeServer), decodeSide(t, s, gorxeServer)
					if mine.version != Version || theirs.version != "6.06" {
						t.Fatalf("versions %q %q", mine.version, theirs.version)
					}
					if mine.hasReport != ExchangesBWReport(tst) {
						t.Fatalf("the capture has a report: %v; ExchangesBWReport(%s) = %v", mine.hasReport, tst, ExchangesBWReport(tst))
					}
					c, peer := connPair(t, gorxeServer)
					c.PageSize, c.CacheLine = mine.page, mine.cacheLine
					done := make(chan error, 1)
					go func() { done <- replayPeer(peer, s.segs, gorxeServer) }()
					remote, mtu, rep, err := runAll(c, tst, mine.dest, mine.mtu, mine.report, 1)
					if err != nil {
						t.Fatal(err)
					}
					if err := <-done; err != nil {
						t.Fatal(err)
					}
					if remote != theirs.dest {
						t.Errorf("remote dest %+v, want %+v", remote, theirs.dest)
					}
					if mtu != min(mine.mtu, theirs.mtu) {
						t.Errorf("MTU %d", mtu)
					}
					if p, cl := c.RemoteSysData(); p != theirs.page || cl != theirs.cacheLine {
						t.Errorf("remote sys data %d %d", p, cl)
					}
					if math.Float64bits(rep.PeakMBps) != math.Float64bits(theirs.report.PeakMBps) ||
						math.Float64bits(rep.AvgMBps) != math.Float64bits(theirs.report.AvgMBps) ||
						math.Float64bits(rep.MsgRateMpps) != math.Float64bits(theirs.report.MsgRateMpps) ||
						rep.Size != theirs.report.Size || rep.Iters != theirs.report.Iters {
						t.Errorf("remote report %+v, want %+v", rep, theirs.report)
					}
					if !gorxeServer && ExchangesBWReport(tst) {
						t.Logf("server's (never filled) report as the client gets it: %+v", rep)
					}
				})
			}
		}
	}
}

// connPair returns a gorxe Conn in the given role and the raw other end,
// over 127.0.0.1.
func connPair(t *testing.T, gorxeServer bool) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if gorxeServer {
		type res struct {
			c   *Conn
			err error
		}
		ch := make(chan res, 1)
		go func() { c, err := Accept(ctx, ln); ch <- res{c, err} }()
		peer, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Cleanup(func() { r.c.Close(); peer.Close() })
		return r.c, peer
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() { nc, _ := ln.Accept(); ch <- nc }()
	c, err := Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer := <-ch
	if peer == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); peer.Close() })
	return c, peer
}

// ---------------------------------------------------------------------------
// gorxe against gorxe.

func testDest(qpn uint32, ip string) Dest {
	return Dest{OutReads: 16, QPN: qpn, PSN: qpn * 7919 & 0xffffff, RKey: qpn<<8 | 3, VAddr: 0x7f0000001000 + uint64(qpn),
		GID: netip.MustParseAddr(ip).As16()}
}

func TestGorxeToGorxe(t *testing.T) {
	for _, tst := range Tests {
		for _, sizes := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/%d", tst, sizes), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				cd, sd := testDest(0x11, "::ffff:10.0.0.1"), testDest(0x22, "::ffff:10.0.0.2")
				cr := BWReport{Size: 65536, Iters: 5000, PeakMBps: 1234.5, AvgMBps: 1200.25, MsgRateMpps: 0.0192}
				sr := BWReport{Size: 1, Iters: 2, PeakMBps: 3, AvgMBps: 4, MsgRateMpps: 5}
				type out struct {
					remote Dest
					mtu    qp.MTU
					rep    BWReport
					err    error
				}
				srv := make(chan out, 1)
				go func() {
					c, err := Accept(ctx, ln)
					if err != nil {
						srv <- out{err: err}
						return
					}
					defer c.Close()
					var o out
					o.remote, o.mtu, o.rep, o.err = runAll(c, tst, sd, qp.MTU4096, sr, sizes)
					srv <- o
				}()
				c, err := Dial(ctx, ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				var co out
				co.remote, co.mtu, co.rep, co.err = runAll(c, tst, cd, qp.MTU1024, cr, sizes)
				so := <-srv
				if co.err != nil || so.err != nil {
					t.Fatalf("client: %v; server: %v", co.err, so.err)
				}
				if co.remote != sd || so.remote != cd {
					t.Errorf("dests: client got %+v, server got %+v", co.remote, so.remote)
				}
				if co.mtu != qp.MTU1024 || so.mtu != qp.MTU1024 {
					t.Errorf("MTUs %d %d", co.mtu, so.mtu)
				}
				if ExchangesBWReport(tst) {
					if co.rep != sr || so.rep != cr {
						t.Errorf("reports: client got %+v, server got %+v", co.rep, so.rep)
					}
				} else if co.rep != (BWReport{}) || so.rep != (BWReport{}) {
					t.Errorf("reports without an exchange: %+v %+v", co.rep, so.rep)
				}
				if c.RemoteVersion() != Version {
					t.Errorf("remote version %q", c.RemoteVersion())
				}
			})
		}
	}
}

func TestListenDial(t *testing.T) {
	// Dial retries while the server is not listening yet.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		c, err := Listen(ctx, addr)
		if err == nil {
			if !c.IsServer() {
				err = errors.New("server conn not IsServer")
			}
			_, err = c.ExchangeVersions("6.06")
			c.Close()
		}
		srv <- err
	}()
	c, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.IsServer() {
		t.Error("client conn IsServer")
	}
	if v, err := c.ExchangeVersions("6.06"); err != nil || v != "6.06" {
		t.Fatalf("ExchangeVersions = %q, %v", v, err)
	}
	if err := <-srv; err != nil {
		t.Fatal(err)
	}

	// Listen gives up when its context ends.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if _, err := Listen(ctx2, "127.0.0.1:0"); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Listen without a client: %v", err)
	}
	// Dial gives up on a port nobody listens on.
	start := time.Now()
	ctx3, cancel3 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel3()
	if _, err := Dial(ctx3, addr); err == nil || !strings.Contains(err.Error(), "perftest: connecting to") {
		t.Fatalf("Dial to nobody: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Dial took %v", d)
	}
}

// ---------------------------------------------------------------------------
// Versions.

// scriptedServer is a scripted perftest server of the given version that
// runs ib_send_bw's server sequence (as 6.06, without negotiate_params).
func scriptedServer(version string, dest Dest) func(nc net.Conn) error {
	return func(nc net.Conn) error {
		ver := make([]byte, 16)
		copy(ver, version)
		key, _ := dest.MarshalKey()
		steps := []struct {
			n   int
			msg []byte
		}{
			{16, ver}, {4, []byte{0, 0, 0x10, 0}}, {4, []byte{0, 0, 0, 0x40}}, {2, []byte("3\x00")},
			{108, key}, {108, key}, {108, key}, {108, key}, {108, key},
		}
		for i, s := range steps {
			got := make([]byte, s.n)
			if _, err := io.ReadFull(nc, got); err != nil {
				return fmt.Errorf("step %d: %w", i, err)
			}
			if _, err := nc.Write(s.msg); err != nil {
				return err
			}
		}
		return nil
	}
}

func fakeServer(t *testing.T, script func(nc net.Conn) error) (*Conn, chan error) {
	t.Helper()
	c, peer := connPair(t, false)
	done := make(chan error, 1)
	go func() { err := script(peer); peer.Close(); done <- err }()
	return c, done
}

func TestRemoteVersion629(t *testing.T) {
	// A 6.29 peer decides on OUR version (6.06 < 6.28) to skip
	// negotiate_params, and so do we on its: no parameters on the wire.
	sd := testDest(0x33, "::ffff:10.0.0.2")
	c, done := fakeServer(t, scriptedServer("6.29", sd))
	c.Timeout = 5 * time.Second
	remote, mtu, _, err := runAll(c, SendBW, testDest(0x11, "::ffff:10.0.0.1"), qp.MTU4096, BWReport{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if remote != sd || mtu != qp.MTU1024 || c.RemoteVersion() != "6.29" {
		t.Fatalf("remote %+v mtu %d version %q", remote, mtu, c.RemoteVersion())
	}

	// Advertising 6.28 or later to a 6.28+ peer would need
	// negotiate_params: refused clearly.
	old := Version
	Version = "6.29"
	defer func() { Version = old }()
	c, done = fakeServer(t, scriptedServer("6.29", sd))
	_, _, err = c.Setup(Flow{Test: SendBW}, []Dest{testDest(0x11, "::ffff:10.0.0.1")}, qp.MTU4096)
	if err == nil || !strings.Contains(err.Error(), "negotiating parameters") {
		t.Fatalf("Setup with both at 6.29: %v", err)
	}
	c.Close()
	<-done
}

func TestRemoteVersionTooOld(t *testing.T) {
	c, done := fakeServer(t, func(nc net.Conn) error {
		io.ReadFull(nc, make([]byte, 16))
		nc.Write([]byte("5.60\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
		return nil
	})
	_, _, err := c.Setup(Flow{Test: WriteBW}, []Dest{testDest(1, "::ffff:10.0.0.1")}, qp.MTU1024)
	if err == nil || !strings.Contains(err.Error(), "older than 5.70") {
		t.Fatalf("Setup: %v", err)
	}
	<-done
}

func TestAtof(t *testing.T) {
	for s, want := range map[string]float64{"6.06": 6.06, "6.29": 6.29, " 5.7x": 5.7, "": 0, "abc": 0, "6": 6, ".5": 0.5, "1e1": 10, "1e": 1} {
		if got := atof(s); got != want {
			t.Errorf("atof(%q) = %v, want %v", s, got, want)
		}
	}
}

// ---------------------------------------------------------------------------
// Bad peers: each gives an error naming the step, never a hang or panic.

func TestBadPeers(t *testing.T) {
	goodVer := []byte("6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")
	ok := func(nc net.Conn, msgs ...[]byte) {
		for _, m := range msgs {
			io.ReadFull(nc, make([]byte, len(m)))
			nc.Write(m)
		}
	}
	sys := [][]byte{goodVer, {0, 0, 0x10, 0}, {0, 0, 0, 0x40}}
	key, _ := testDest(0x22, "::ffff:10.0.0.2").MarshalKey()
	cases := []struct {
		name   string
		script func(nc net.Conn)
		want   string
	}{
		{"short version then close", func(nc net.Conn) {
			io.ReadFull(nc, make([]byte, 16))
			nc.Write([]byte("6.0"))
		}, "exchanging versions: the peer closed the connection after 3 of 16 bytes"},
		{"closed before sys data", func(nc net.Conn) { ok(nc, goodVer) }, "exchanging page size"},
		{"garbage MTU", func(nc net.Conn) { ok(nc, append(sys, []byte("9\x00"))...) }, "exchanging MTU (check_mtu): the peer sent \"9\\x00\""},
		{"garbage key", func(nc net.Conn) {
			ok(nc, append(sys, []byte("3\x00"), bytes.Repeat([]byte("z"), 108))...)
		}, "exchanging keys (ctx_hand_shake): key message"},
		{"key without NUL", func(nc net.Conn) {
			ok(nc, append(sys, []byte("3\x00"), append(bytes.Clone(key[:107]), ':'))...)
		}, "does not end in NUL"},
		{"key with a bad field", func(nc net.Conn) {
			k := bytes.Clone(key)
			copy(k[5:9], "00g1")
			ok(nc, append(sys, []byte("3\x00"), k)...)
		}, "out_reads \"00g1\" is not 4 hex digits"},
		{"key with a misplaced colon", func(nc net.Conn) {
			k := bytes.Clone(key)
			k[4] = '0'
			ok(nc, append(sys, []byte("3\x00"), k)...)
		}, "no ':' after LID"},
		{"short key then close", func(nc net.Conn) {
			ok(nc, append(sys, []byte("3\x00"))...)
			io.ReadFull(nc, make([]byte, 108))
			nc.Write(key[:50])
		}, "exchanging keys (ctx_hand_shake): the peer closed the connection after 50 of 108 bytes"},
		{"IPv6 GID against IPv4-mapped", func(nc net.Conn) {
			k, _ := testDest(0x22, "fe80::1").MarshalKey()
			ok(nc, append(sys, []byte("3\x00"), k)...)
		}, "checking GIDs: the local GID ::ffff:10.0.0.1 is IPv4-mapped but the peer's fe80::1 is not"},
		{"silent", func(nc net.Conn) { time.Sleep(time.Second) }, "exchanging versions: no answer from the peer within 300ms"},
		{"closed after connecting", func(nc net.Conn) { ok(nc, append(sys, []byte("3\x00"), key, key)...) }, "handshake after moving the QPs to RTR"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := connPair(t, false)
			c.Timeout = 300 * time.Millisecond
			done := make(chan struct{})
			go func() { tc.script(peer); peer.Close(); close(done) }()
			start := time.Now()
			_, _, _, err := runAll(c, WriteBW, testDest(0x11, "::ffff:10.0.0.1"), qp.MTU1024, BWReport{}, 1)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "perftest: ") {
				t.Fatalf("err = %v\nwant it to contain %q", err, tc.want)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("took %v", d)
			}
			t.Log(err)
			c.Close()
			<-done
		})
	}
}

// A server whose client says nothing gives up when the Conn's context ends.
func TestContextCancel(t *testing.T) {
	c, peer := connPair(t, true)
	defer peer.Close()
	ctx, cancel := context.WithCancel(context.Background())
	c.SetContext(ctx)
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err := c.ExchangeVersions(Version)
	if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "perftest: exchanging versions: ") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
	// A cancelled context fails the next step at once.
	if _, _, err := c.ExchangeSysData(4096, 64); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

// Messages that arrive in pieces are read whole.
func TestShortReads(t *testing.T) {
	c, done := fakeServer(t, func(nc net.Conn) error {
		io.ReadFull(nc, make([]byte, 16))
		for _, p := range []string{"6.", "06\x00\x00\x00\x00", "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"} {
			nc.Write([]byte(p))
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	})
	if v, err := c.ExchangeVersions(Version); err != nil || v != "6.06" {
		t.Fatalf("ExchangeVersions = %q, %v", v, err)
	}
	<-done
}

func TestMisuse(t *testing.T) {
	c, peer := connPair(t, false)
	defer peer.Close()
	if err := c.Connected([]Dest{{}}, []Dest{{}}); err == nil || !strings.Contains(err.Error(), "Setup has not run") {
		t.Errorf("Connected before Setup: %v", err)
	}
	for _, step := range []func() error{
		c.BeforeRun,
		func() error { _, err := c.AfterRun(BWReport{}); return err },
		func() error { _, err := c.Finish(BWReport{}); return err },
	} {
		if err := step(); err == nil || !strings.Contains(err.Error(), "Setup has not run") {
			t.Errorf("a step before Setup: %v", err)
		}
	}
	if _, _, err := c.Setup(Flow{Test: "nope"}, []Dest{{}}, qp.MTU1024); err == nil || !strings.Contains(err.Error(), "unknown test") {
		t.Errorf("Setup of an unknown test: %v", err)
	}
	if _, _, err := c.Setup(Flow{Test: WriteBW}, []Dest{{QPN: 1 << 24}}, qp.MTU1024); err == nil || !strings.Contains(err.Error(), "24 bits") {
		t.Errorf("Setup with a 25-bit QPN: %v", err)
	}
	if _, _, err := c.Setup(Flow{Test: WriteBW}, nil, qp.MTU1024); err == nil || !strings.Contains(err.Error(), "no QP") {
		t.Errorf("Setup without a dest: %v", err)
	}
	if _, _, err := c.Setup(Flow{Test: WriteLat}, []Dest{{}, {}}, qp.MTU1024); err == nil || !strings.Contains(err.Error(), "Multiple QPs only available on bw tests") {
		t.Errorf("Setup of write_lat with 2 QPs: %v", err)
	}
	if _, _, err := c.Setup(Flow{Test: SendLat, Duplex: true}, []Dest{{}}, qp.MTU1024); err == nil || !strings.Contains(err.Error(), "Bidirectional is only available in BW test") {
		t.Errorf("Setup of send_lat with -b: %v", err)
	}
	if _, err := c.ExchangeMTU(qp.MTU1024); err == nil || !strings.Contains(err.Error(), "not exchanged yet") {
		t.Errorf("ExchangeMTU before versions: %v", err)
	}
	if _, err := c.ExchangeVersions("a-version-too-long"); err == nil {
		t.Error("a 17-byte version")
	}
}

func TestGIDCheck(t *testing.T) {
	v4 := netip.MustParseAddr("::ffff:192.168.1.1").As16()
	v6 := netip.MustParseAddr("fe80::1234").As16()
	mc := netip.MustParseAddr("ff0e::ffff:239.1.1.1").As16()
	if CheckGIDs(v4, v4) != nil || CheckGIDs(v6, v6) != nil || CheckGIDs(v4, mc) != nil {
		t.Error("compatible GIDs refused")
	}
	if CheckGIDs(v4, v6) == nil || CheckGIDs(v6, v4) == nil {
		t.Error("incompatible GIDs accepted")
	}
}

// Both sides of gorxe close cleanly even when they finish at once.
func TestConcurrentClose(t *testing.T) {
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Error(err)
				return
			}
			ctx := context.Background()
			errs := make(chan error, 1)
			go func() {
				c, err := Accept(ctx, ln)
				if err == nil {
					_, _, _, err = runAll(c, SendLat, testDest(2, "::ffff:10.0.0.2"), qp.MTU1024, BWReport{}, 1)
				}
				errs <- err
			}()
			c, err := Dial(ctx, ln.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			if _, _, _, err := runAll(c, SendLat, testDest(1, "::ffff:10.0.0.1"), qp.MTU1024, BWReport{}, 1); err != nil {
				t.Error(err)
			}
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// TestWriteLatLingers: perftest's write_lat ends with no handshake, so a
// side's Finish half-closes the connection and returns once the peer has
// closed it (its run over, its last WRITE answered), not before; two gorxe
// sides, both half-closing, finish together.
func TestWriteLatLingers(t *testing.T) {
	c, peer := connPair(t, true)
	c.setUp, c.flow = true, Flow{Test: WriteLat}
	done := make(chan error, 1)
	// finished fails the test unless Finish returns, without an error,
	// well before lingerMax.
	finished := func(why string) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(lingerMax - time.Second):
			t.Fatal(why)
		}
	}
	go func() { _, err := c.Finish(BWReport{}); done <- err }()
	// The half-close reaches the peer as an end of file.
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := peer.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("the peer read %d bytes, %v; want the end of file", n, err)
	}
	select {
	case err := <-done:
		t.Fatalf("Finish returned (%v) before the peer closed", err)
	case <-time.After(200 * time.Millisecond):
	}
	peer.Close()
	finished("Finish still waits after the peer closed")

	a, b := connPair(t, true)
	nb := NewConn(context.Background(), b, false)
	for _, x := range []*Conn{a, nb} {
		x.setUp, x.flow = true, Flow{Test: WriteLat}
	}
	go func() { _, err := nb.Finish(BWReport{}); done <- err }()
	if _, err := a.Finish(BWReport{}); err != nil {
		t.Fatal(err)
	}
	finished("two half-closed sides wait for each other")
}

package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorxe/gorxe/qp"
)

// ---------------------------------------------------------------------------
// The exchange's sequence with -q, -b, -a, -D and --write_with_imm:
// gorxe's client against gorxe's server over a TCP socket on the loopback,
// each side's writes recorded and named.

// recorder is a net.Conn that keeps a copy of every write: perftest and
// gorxe write each message in one write().
type recorder struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (r *recorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	r.writes = append(r.writes, bytes.Clone(b))
	r.mu.Unlock()
	return r.Conn.Write(b)
}

// steps names what a side wrote, in order: "ver", "sys", "mtu", "k<i>"
// for a key message of QP i (by QPN: qpn0 + i), "rep" for the five
// writes of xchg_bw_reports, "done".
func (r *recorder) steps(t *testing.T, qpn0 uint32) string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []string
	eights := 0
	for _, w := range r.writes {
		if len(w) == 8 {
			if eights++; eights == 5 {
				s, eights = append(s, "rep"), 0
			}
			continue
		}
		if eights != 0 {
			t.Fatalf("a report of %d messages", eights)
		}
		switch {
		case len(w) == versionSize:
			s = append(s, "ver")
		case len(w) == 4:
			s = append(s, "sys")
		case len(w) == 2:
			s = append(s, "mtu")
		case len(w) == keyMsgSize:
			d, err := ParseKey(w)
			if err != nil {
				t.Fatal(err)
			}
			s = append(s, fmt.Sprintf("k%d", d.QPN-qpn0))
		case string(w) == doneMsg:
			s = append(s, "done")
		default:
			t.Fatalf("unexpected write %q", w)
		}
	}
	return strings.Join(s, " ")
}

// seqDests returns n dests with QPNs qpn0, qpn0+1, …
func seqDests(qpn0 uint32, n int, ip string) []Dest {
	d := make([]Dest, n)
	for i := range d {
		d[i] = testDest(qpn0+uint32(i), ip)
		d[i].VAddr += uint64(i) * 0x10000
	}
	return d
}

// The sequences, from perftest's source (v4.5-0.17 = 6.06, and HEAD =
// 6.29, whose steps are the same unless said; PROTOCOL.md has the lines).
// Both roles write the same steps: every exchange is symmetric. "pre" is
// versions, page size, cache line, MTU.
var sequences = []struct {
	name  string
	flow  Flow
	qps   int
	sizes int
	want  string
}{
	// write_bw.c: setup loop (k0 k1), remote loop (k0 k1), RTR (k0),
	// then the passive server's hs + xchg_bw_reports + close, which the
	// client meets after its run.
	{"write_bw -q 1", Flow{Test: WriteBW}, 1, 1, "pre k0 k0 k0 k0 rep k0 done"},
	{"write_bw -q 2", Flow{Test: WriteBW}, 2, 1, "pre k0 k1 k0 k1 k0 k0 rep k0 done"},
	{"read_bw -q 3", Flow{Test: ReadBW}, 3, 1, "pre k0 k1 k2 k0 k1 k2 k0 k0 rep k0 done"},
	{"atomic_bw -q 2", Flow{Test: AtomicBW}, 2, 1, "pre k0 k1 k0 k1 k0 k0 rep k0 done"},
	// -a does not change the half-duplex write/read tests.
	{"write_bw -q 2 -a", Flow{Test: WriteBW, AllSizes: true}, 2, 3, "pre k0 k1 k0 k1 k0 k0 rep k0 done"},
	// -b: RUN_REGULAR is hs, run, xchg_bw_reports; no handshake after.
	{"write_bw -b", Flow{Test: WriteBW, Duplex: true}, 1, 1, "pre k0 k0 k0 k0 rep k0 done"},
	{"write_bw -q 2 -b", Flow{Test: WriteBW, Duplex: true}, 2, 1, "pre k0 k1 k0 k1 k0 k0 rep k0 done"},
	{"read_bw -q 2 -b", Flow{Test: ReadBW, Duplex: true}, 2, 1, "pre k0 k1 k0 k1 k0 k0 rep k0 done"},
	{"atomic_bw -q 2 -b", Flow{Test: AtomicBW, Duplex: true}, 2, 1, "pre k0 k1 k0 k1 k0 k0 rep k0 done"},
	// -b -a (RUN_ALL): per size hs, run, hs ("version >= 4.6"), report.
	{"write_bw -q 2 -b -a", Flow{Test: WriteBW, Duplex: true, AllSizes: true}, 2, 2,
		"pre k0 k1 k0 k1 k0 k0 k0 rep k0 k0 rep k0 done"},
	{"read_bw -b -a", Flow{Test: ReadBW, Duplex: true, AllSizes: true}, 1, 2,
		"pre k0 k0 k0 k0 k0 rep k0 k0 rep k0 done"},
	// atomic_bw.c runs RUN_ALL as RUN_REGULAR: no handshake after.
	{"atomic_bw -b -a", Flow{Test: AtomicBW, Duplex: true, AllSizes: true}, 1, 1, "pre k0 k0 k0 k0 rep k0 done"},
	// send_bw.c: setup loop, hs of QP 0 after ctx_connect, remote loop;
	// per size: receives, hs, run [, report with -b] [, hs with -a].
	{"send_bw -q 2", Flow{Test: SendBW}, 2, 1, "pre k0 k1 k0 k0 k1 k0 k0 done"},
	{"send_bw -q 2 -a", Flow{Test: SendBW, AllSizes: true}, 2, 2, "pre k0 k1 k0 k0 k1 k0 k0 k0 k0 k0 done"},
	{"send_bw -q 2 -b", Flow{Test: SendBW, Duplex: true}, 2, 1, "pre k0 k1 k0 k0 k1 k0 rep k0 done"},
	{"send_bw -q 2 -b -a", Flow{Test: SendBW, Duplex: true, AllSizes: true}, 2, 2,
		"pre k0 k1 k0 k0 k1 k0 rep k0 k0 rep k0 k0 done"},
	{"send_bw -b -D", Flow{Test: SendBW, Duplex: true, Duration: true}, 1, 1, "pre k0 k0 k0 k0 k0 done"},
	{"send_bw --send_with_imm", Flow{Test: SendBW, WithImm: true}, 1, 1, "pre k0 k0 k0 k0 k0 done"},
	// write_bw --write_with_imm (6.20+): the server receives: hs before
	// the run, none after (RUN_REGULAR), no report; with -a a hs after.
	{"write_bw --write_with_imm", Flow{Test: WriteBW, WithImm: true}, 1, 1, "pre k0 k0 k0 k0 k0 done"},
	{"write_bw -q 2 --write_with_imm", Flow{Test: WriteBW, WithImm: true}, 2, 1, "pre k0 k1 k0 k1 k0 k0 k0 done"},
	{"write_bw --write_with_imm -a", Flow{Test: WriteBW, WithImm: true, AllSizes: true}, 1, 2,
		"pre k0 k0 k0 k0 k0 k0 k0 k0 done"},
	{"write_bw --write_with_imm -b", Flow{Test: WriteBW, WithImm: true, Duplex: true}, 1, 1, "pre k0 k0 k0 k0 rep k0 done"},
	{"write_bw --write_with_imm -b -D", Flow{Test: WriteBW, WithImm: true, Duplex: true, Duration: true}, 1, 1,
		"pre k0 k0 k0 k0 k0 done"},
	// -D alone changes nothing for write_bw -b.
	{"write_bw -b -D", Flow{Test: WriteBW, Duplex: true, Duration: true}, 1, 1, "pre k0 k0 k0 k0 rep k0 done"},
	// write_lat.c: an extra hs before the setup loop, remote loop, RTR;
	// with --write_with_imm a hs before each size's run; never a close.
	{"write_lat", Flow{Test: WriteLat}, 1, 1, "pre k0 k0 k0 k0"},
	// read_lat.c and atomic_lat.c (:186 the extra hs, :194 per QP, :234
	// per QP, :243 after RTR, then ctx_close_connection: the passive
	// server's right away, the client's after its run).
	{"read_lat", Flow{Test: ReadLat}, 1, 1, "pre k0 k0 k0 k0 k0 done"},
	{"atomic_lat", Flow{Test: AtomicLat}, 1, 1, "pre k0 k0 k0 k0 k0 done"},
	{"write_lat --write_with_imm", Flow{Test: WriteLat, WithImm: true}, 1, 1, "pre k0 k0 k0 k0 k0"},
	{"write_lat --write_with_imm -a", Flow{Test: WriteLat, WithImm: true, AllSizes: true}, 1, 3, "pre k0 k0 k0 k0 k0 k0 k0"},
	{"send_lat --send_with_imm", Flow{Test: SendLat, WithImm: true}, 1, 1, "pre k0 k0 k0 k0 k0 done"},
}

func TestSequences(t *testing.T) {
	const pre = "ver sys sys mtu"
	for _, sq := range sequences {
		t.Run(sq.name, func(t *testing.T) {
			want := strings.Replace(sq.want, "pre", pre, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			cd, sd := seqDests(0x100, sq.qps, "::ffff:10.0.0.1"), seqDests(0x200, sq.qps, "::ffff:10.0.0.2")
			cr := BWReport{Size: 4096, Iters: uint64(1000 * sq.qps), PeakMBps: 100, AvgMBps: 90, MsgRateMpps: 0.02}
			sr := BWReport{Size: 4096, Iters: uint64(1000 * sq.qps), PeakMBps: 70, AvgMBps: 60, MsgRateMpps: 0.01}
			type out struct {
				remote []Dest
				fin    BWReport
				reps   []BWReport
				rec    *recorder
				err    error
			}
			run := func(nc net.Conn, server bool, local []Dest, rep BWReport) out {
				rec := &recorder{Conn: nc}
				c := NewConn(ctx, rec, server)
				c.Timeout = 5 * time.Second
				defer c.Close()
				remote, _, fin, reps, err := runFlow(c, sq.flow, local, qp.MTU1024, rep, sq.sizes, server)
				return out{remote, fin, reps, rec, err}
			}
			srv := make(chan out, 1)
			go func() {
				nc, err := ln.Accept()
				if err != nil {
					srv <- out{err: err}
					return
				}
				srv <- run(nc, true, sd, sr)
			}()
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			co := run(nc, false, cd, cr)
			so := <-srv
			if co.err != nil || so.err != nil {
				t.Fatalf("client: %v\nserver: %v", co.err, so.err)
			}
			if got := co.rec.steps(t, 0x100); got != want {
				t.Errorf("the client wrote\n %s\nwant\n %s", got, want)
			}
			if got := so.rec.steps(t, 0x200); got != want {
				t.Errorf("the server wrote\n %s\nwant\n %s", got, want)
			}
			for i := range sq.qps {
				if co.remote[i] != sd[i] || so.remote[i] != cd[i] {
					t.Errorf("QP %d: the client got %+v, the server %+v", i, co.remote[i], so.remote[i])
				}
			}
			// Reports: per size with -b, at Finish for a passive server.
			wantReps := 0
			if sq.flow.ReportsPerSize() {
				wantReps = sq.sizes
			}
			for _, o := range []struct {
				name   string
				o      out
				theirs BWReport
				server bool
			}{{"client", co, sr, false}, {"server", so, cr, true}} {
				n := 0
				for _, r := range o.o.reps {
					if r != (BWReport{}) {
						n++
						if r != o.theirs {
							t.Errorf("%s: report %+v, want %+v", o.name, r, o.theirs)
						}
					}
				}
				if n != wantReps {
					t.Errorf("%s: %d reports after the runs, want %d", o.name, n, wantReps)
				}
				if fin := o.o.fin; sq.flow.PassiveServer() != (fin != BWReport{}) || fin != (BWReport{}) && fin != o.theirs {
					t.Errorf("%s: report at Finish %+v", o.name, fin)
				}
			}
		})
	}
}

// ---------------------------------------------------------------------------
// A scripted stock perftest for -q 2 and -b, message by message as its
// source has it, checking every byte gorxe sends.

// scriptStep is one exchange of perftest's: what it writes, and what it
// must read back from gorxe.
type scriptStep struct {
	what string // perftest's function and source line
	send []byte
	want []byte
}

// playPerftest plays the script on nc as perftest's client (write then
// read) or server (read then write), then expects the connection closed.
func playPerftest(nc net.Conn, script []scriptStep, client bool) error {
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	for i, s := range script {
		if client {
			if _, err := nc.Write(s.send); err != nil {
				return fmt.Errorf("step %d (%s): %w", i, s.what, err)
			}
		}
		got := make([]byte, len(s.want))
		if _, err := io.ReadFull(nc, got); err != nil {
			return fmt.Errorf("step %d (%s): reading %d bytes: %w", i, s.what, len(s.want), err)
		}
		if !bytes.Equal(got, s.want) {
			return fmt.Errorf("step %d (%s): gorxe sent\n%q\nwant\n%q", i, s.what, got, s.want)
		}
		if !client {
			if _, err := nc.Write(s.send); err != nil {
				return fmt.Errorf("step %d (%s): %w", i, s.what, err)
			}
		}
	}
	var rest [16]byte
	if n, err := nc.Read(rest[:]); n > 0 || err != io.EOF {
		return fmt.Errorf("after the script: %q, %v; want the connection closed", rest[:n], err)
	}
	return nil
}

// scriptBuilder builds a perftest script of one version against gorxe
// (which advertises Version and has the page size and cache line below).
type scriptBuilder struct {
	version    string
	mine, gors []Dest // perftest's dests and gorxe's
	s          []scriptStep
}

const (
	scriptPage  = 4096
	scriptCache = 64
)

func (b *scriptBuilder) add(what string, send, want []byte) {
	b.s = append(b.s, scriptStep{what, send, want})
}

// prefix: exchange_versions, check_sys_data, check_mtu (MTU 1024 on both
// sides); negotiate_params is skipped because gorxe advertises 6.06.
func (b *scriptBuilder) prefix() {
	ver := func(v string) []byte { m := make([]byte, versionSize); copy(m, v); return m }
	be := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	b.add("exchange_versions", ver(b.version), ver(Version))
	b.add("check_sys_data: page size", be(scriptPage), be(scriptPage))
	b.add("check_sys_data: cache line", be(scriptCache), be(scriptCache))
	b.add("check_mtu", []byte("3\x00"), []byte("3\x00"))
}

// hs is ctx_hand_shake of QP i: both sides' dests of that QP.
func (b *scriptBuilder) hs(what string, i int) {
	m, _ := b.mine[i].MarshalKey()
	g, _ := b.gors[i].MarshalKey()
	b.add(what, m, g)
}

// rep is xchg_bw_reports (perftest_communication.c): size, iters (8
// bytes: the remote is >= 5.33), bw_peak, bw_avg, msgRate_avg.
func (b *scriptBuilder) rep(what string, mine, gorxe BWReport) {
	enc := func(r BWReport) [][]byte {
		var out [][]byte
		for _, v := range []uint64{r.Size, r.Iters, math.Float64bits(r.PeakMBps), math.Float64bits(r.AvgMBps), math.Float64bits(r.MsgRateMpps)} {
			out = append(out, binary.BigEndian.AppendUint64(nil, v))
		}
		return out
	}
	m, g := enc(mine), enc(gorxe)
	for i := range m {
		b.add(what, m[i], g[i])
	}
}

// close is ctx_close_connection: a hs of QP 0, then up to 6.16 "done\0"
// written (and gorxe's read) by both.
func (b *scriptBuilder) close(what string) {
	b.hs(what+": ctx_close_connection", 0)
	if atof(b.version) < verNoDone {
		b.add(what+": ctx_close_connection \"done\"", []byte(doneMsg), []byte(doneMsg))
	}
}

func TestScriptedPerftest(t *testing.T) {
	gorxeRep := BWReport{Size: 65536, Iters: 10000, PeakMBps: 2000.5, AvgMBps: 1900.25, MsgRateMpps: 0.0304}
	theirRep := BWReport{Size: 65536, Iters: 10000, PeakMBps: 1500.5, AvgMBps: 1400.75, MsgRateMpps: 0.0224}
	cases := []struct {
		name  string
		flow  Flow
		qps   int
		sizes int
		build func(b *scriptBuilder)
	}{
		{
			// write_bw.c at v4.5-0.17 (HEAD lines in brackets): the
			// setup loop :177-185 [:194-202], the remote loop :217-225
			// [:233-240], the RTR hs :228-232 [:255-259]; the passive
			// server :246-262 [:278-297] or, after its run, the client
			// :395-407 [:553-565]: hs, xchg_bw_reports, close.
			name: "write_bw -q 2", flow: Flow{Test: WriteBW}, qps: 2, sizes: 1,
			build: func(b *scriptBuilder) {
				b.prefix()
				b.hs("write_bw.c:181 setup loop, QP 0", 0)
				b.hs("write_bw.c:181 setup loop, QP 1", 1)
				b.hs("write_bw.c:220 remote loop, QP 0", 0)
				b.hs("write_bw.c:220 remote loop, QP 1", 1)
				b.hs("write_bw.c:229 after RTR", 0)
				b.hs("write_bw.c:250/:396 after the run", 0)
				b.rep("write_bw.c:255/:401 xchg_bw_reports", theirRep, gorxeRep)
				b.close("write_bw.c:258/:405")
			},
		},
		{
			// write_bw.c RUN_REGULAR with -b (v4.5-0.17 :328-359, HEAD
			// :419-490): hs :343 [:448], run_iter_bw on both, no hs
			// after, xchg_bw_reports :357 [:488], close :405 [:563].
			name: "write_bw -q 2 -b", flow: Flow{Test: WriteBW, Duplex: true}, qps: 2, sizes: 1,
			build: func(b *scriptBuilder) {
				b.prefix()
				b.hs("write_bw.c:181 setup loop, QP 0", 0)
				b.hs("write_bw.c:181 setup loop, QP 1", 1)
				b.hs("write_bw.c:220 remote loop, QP 0", 0)
				b.hs("write_bw.c:220 remote loop, QP 1", 1)
				b.hs("write_bw.c:229 after RTR", 0)
				b.hs("write_bw.c:343 before the run (duplex)", 0)
				b.rep("write_bw.c:357 xchg_bw_reports", theirRep, gorxeRep)
				b.close("write_bw.c:405")
			},
		},
		{
			// read_bw.c RUN_ALL with -b (v4.5-0.17 :287-326): per size
			// hs :302, run_iter_bw, hs :314 ("version >= 4.6"),
			// xchg_bw_reports :323; then close :400.
			name: "read_bw -q 2 -b -a", flow: Flow{Test: ReadBW, Duplex: true, AllSizes: true}, qps: 2, sizes: 2,
			build: func(b *scriptBuilder) {
				b.prefix()
				b.hs("read_bw.c:176 setup loop, QP 0", 0)
				b.hs("read_bw.c:176 setup loop, QP 1", 1)
				b.hs("read_bw.c:215 remote loop, QP 0", 0)
				b.hs("read_bw.c:215 remote loop, QP 1", 1)
				b.hs("read_bw.c:225 after RTR", 0)
				for range 2 {
					b.hs("read_bw.c:302 before the run", 0)
					b.hs("read_bw.c:314 after the run", 0)
					b.rep("read_bw.c:323 xchg_bw_reports", theirRep, gorxeRep)
				}
				b.close("read_bw.c:400")
			},
		},
		{
			// send_bw.c (v4.5-0.17; HEAD lines in brackets): the setup
			// loop :300-307 [:317-323], hs after ctx_connect :354
			// [:371], the remote loop :374-380 [:393-399]; RUN_REGULAR
			// :478-518 [:495-534]: receives, hs :490 [:506],
			// run_iter_bi, xchg_bw_reports :516 [:532] (not with -D);
			// close :576 [:591].
			name: "send_bw -q 2 -b", flow: Flow{Test: SendBW, Duplex: true}, qps: 2, sizes: 1,
			build: func(b *scriptBuilder) {
				b.prefix()
				b.hs("send_bw.c:303 setup loop, QP 0", 0)
				b.hs("send_bw.c:303 setup loop, QP 1", 1)
				b.hs("send_bw.c:354 after ctx_connect", 0)
				b.hs("send_bw.c:376 remote loop, QP 0", 0)
				b.hs("send_bw.c:376 remote loop, QP 1", 1)
				b.hs("send_bw.c:490 receives posted", 0)
				b.rep("send_bw.c:516 xchg_bw_reports", theirRep, gorxeRep)
				b.close("send_bw.c:576")
			},
		},
	}
	for _, tc := range cases {
		for _, version := range []string{"6.06", "6.29"} {
			for _, gorxeServer := range []bool{false, true} {
				role := "gorxe-client"
				if gorxeServer {
					role = "gorxe-server"
				}
				t.Run(tc.name+"/"+version+"/"+role, func(t *testing.T) {
					b := &scriptBuilder{version: version,
						mine: seqDests(0x300, tc.qps, "::ffff:10.9.0.3"), gors: seqDests(0x11, tc.qps, "::ffff:10.9.0.2")}
					tc.build(b)
					c, peer := connPair(t, gorxeServer)
					c.PageSize, c.CacheLine = scriptPage, scriptCache
					c.Timeout = 5 * time.Second
					done := make(chan error, 1)
					go func() { done <- playPerftest(peer, b.s, gorxeServer) }()
					remote, _, fin, reps, err := runFlow(c, tc.flow, b.gors, qp.MTU1024, gorxeRep, tc.sizes, gorxeServer)
					if err != nil {
						t.Fatal(err)
					}
					if err := <-done; err != nil {
						t.Fatal(err)
					}
					for i := range remote {
						if remote[i] != b.mine[i] {
							t.Errorf("QP %d: remote %+v, want %+v", i, remote[i], b.mine[i])
						}
					}
					if tc.flow.ReportsPerSize() {
						if len(reps) != tc.sizes {
							t.Fatalf("%d reports, want %d", len(reps), tc.sizes)
						}
						for _, r := range reps {
							if r != theirRep {
								t.Errorf("report %+v, want %+v", r, theirRep)
							}
						}
					} else if fin != theirRep {
						t.Errorf("report at Finish %+v, want %+v", fin, theirRep)
					}
				})
			}
		}
	}
}

package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire"
	wcm "github.com/gorxe/gorxe/wire/cm"
)

// cmPair is two devices, each with a connection manager.
type cmPair struct {
	devs [2]*rnic.Device
	ms   [2]*cm.Manager
}

func newCMPair(t *testing.T, links [2]link.Link) *cmPair {
	t.Helper()
	var cp cmPair
	for i, l := range links {
		cfg := rnic.Config{Link: l}
		if sp, ok := l.(link.SourcePorter); ok {
			cfg.Port = sp.SourcePort()
		}
		var err error
		if cp.devs[i], err = rnic.Open(cfg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cp.devs[i].Close() })
		if cp.ms[i], err = cm.New(cp.devs[i], cm.Config{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cp.ms[i].Close() })
	}
	return &cp
}

// runCMPairOn runs the client with pc and the server with ps, their
// exchange over rdma_cm (DialCM, ListenCM); the client advertises
// clientVersion if set.
func runCMPairOn(t *testing.T, cp *cmPair, pc, ps Params, clientVersion string) (client, server []Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const port = 18515
	type res struct {
		r   []Result
		err error
	}
	srv := make(chan res, 1)
	go func() {
		conn, err := ListenCM(ctx, cp.ms[1], netip.Addr{}, port, ps.RetryCount)
		if err != nil {
			srv <- res{nil, err}
			return
		}
		defer conn.Close()
		r, err := RunRemote(ctx, ps, RemoteOptions{Dev: cp.devs[1], Conn: conn})
		srv <- res{r, err}
	}()
	to := netip.AddrPortFrom(cp.devs[1].GIDs()[0].Unmap(), port)
	conn, err := DialCM(ctx, cp.ms[0], to, netip.Addr{}, pc.RetryCount)
	if err != nil {
		t.Fatal(err)
	}
	conn.version = clientVersion
	client, err = RunRemote(ctx, pc, RemoteOptions{Dev: cp.devs[0], Conn: conn})
	conn.Close()
	s := <-srv
	if err != nil {
		t.Fatalf("client: %v (server: %v)", err, s.err)
	}
	if s.err != nil {
		t.Fatalf("server: %v", s.err)
	}
	return client, s.r
}

// TestRDMACMEveryTest: each test with -R, gorxe against gorxe over the
// in-memory fabric (with loss) and kernel UDP, --check verifying what
// arrived; and -z, the exchange over rdma_cm and the QPs connected from
// the keys.
func TestRDMACMEveryTest(t *testing.T) {
	for _, kind := range []string{"mem", "udp", "z"} {
		for _, tt := range Tests {
			t.Run(kind+"/"+string(tt), func(t *testing.T) {
				p := Params{Test: tt, Iters: 200, Check: true, RDMACM: kind != "z", CommRDMACM: kind == "z"}
				if !tt.IsLatency() && tt != AtomicBW {
					p.Size = 10000
				}
				links := memLinks(t, mem.Faults{Drop: 0.005, Seed: 3})
				if kind == "udp" {
					links = udpLinks(t)
				}
				c, s := runCMPairOn(t, newCMPair(t, links), p, p, "")
				if len(c) != 1 || len(s) != 1 || !c[0].Checked || !s[0].Checked {
					t.Fatalf("client %+v server %+v", c, s)
				}
				if tt.IsLatency() {
					if c[0].Lat == nil || c[0].Lat.Iters != 200 {
						t.Fatalf("client latency %+v", c[0].Lat)
					}
					return
				}
				if c[0].BW == nil || s[0].BW == nil || c[0].BW.Iters != 200 {
					t.Fatalf("client %+v server %+v", c[0].BW, s[0].BW)
				}
			})
		}
	}
}

// TestRDMACMQPs: -R with -q 3, and -b: every QP connected with rdma_cm.
func TestRDMACMQPs(t *testing.T) {
	for _, p := range []Params{
		{Test: WriteBW, NumQPs: 3}, {Test: ReadBW, NumQPs: 3}, {Test: SendBW, NumQPs: 3},
		{Test: AtomicBW, NumQPs: 3}, {Test: SendBW, NumQPs: 2, Duplex: true}, {Test: WriteBW, Duplex: true},
	} {
		name := string(p.Test)
		if p.Duplex {
			name += "-b"
		}
		t.Run(name, func(t *testing.T) {
			p.Iters, p.Check, p.RDMACM = 100, true, true
			if p.Test != AtomicBW {
				p.Size = 4096
			}
			c, s := runCMPairOn(t, newCMPair(t, memLinks(t, mem.Faults{})), p, p, "")
			if len(c) != 1 || len(s) != 1 || c[0].BW == nil || c[0].BW.Iters != 100*p.qps() {
				t.Fatalf("client %+v server %+v", c, s)
			}
		})
	}
}

// TestRDMACMKeyVersions: a peer of 6.29 or later takes the 64-byte key
// (tail_markers_vaddr moved the GID), an older one the 56-byte one; a
// gorxe client faking 6.29 gets 64-byte keys from the server and sends
// it 56-byte ones.
func TestRDMACMKeyVersions(t *testing.T) {
	for _, v := range []string{"6.29", "6.24", "6.06"} {
		t.Run(v, func(t *testing.T) {
			p := Params{Test: SendBW, Size: 512, Iters: 50, Check: true, RDMACM: true, NumQPs: 2}
			c, s := runCMPairOn(t, newCMPair(t, memLinks(t, mem.Faults{})), p, p, v)
			if len(c) != 1 || len(s) != 1 {
				t.Fatalf("client %+v server %+v", c, s)
			}
			// The keys carried the QPs' numbers and GIDs either way.
			if c[0].Remotes[1].QPN != s[0].Locals[1].QPN || c[0].Remote.GID != s[0].Local.GID || !c[0].Remote.GID.IsValid() {
				t.Fatalf("client saw %+v, server was %+v", c[0].Remotes, s[0].Locals)
			}
		})
	}
}

// TestCMKeyLayout: struct pingpong_dest as rdma_write_keys sends it.
func TestCMKeyLayout(t *testing.T) {
	d := Dest{LID: 0x1234, OutReads: 0x80, QPN: 0x11, PSN: 0xabcdef, RKey: 0xdeadbeef, VAddr: 0x7f0011223344,
		GID: netip.MustParseAddr("::ffff:10.9.0.2").As16(), SRQN: 5, GIDIndex: 1}
	for _, size := range []int{cmKeySize, cmKeySize629} {
		b := d.cmKey(size)
		be := binary.BigEndian
		g := 32
		if size == cmKeySize629 {
			g = 40
		}
		if len(b) != size || be.Uint32(b) != 0x1234 || be.Uint32(b[4:]) != 0x80 || be.Uint32(b[8:]) != 0x11 ||
			be.Uint32(b[12:]) != 0xabcdef || be.Uint32(b[16:]) != 0xdeadbeef || be.Uint64(b[24:]) != 0x7f0011223344 ||
			!bytes.Equal(b[g:g+16], d.GID[:]) || be.Uint32(b[g+16:]) != 5 || be.Uint32(b[g+20:]) != 1 {
			t.Fatalf("%d-byte key % x", size, b)
		}
		// A perftest's padding is its stack: anything.
		b[20], b[23] = 0xaa, 0x55
		got, err := parseCMKey(b)
		if err != nil || got != d {
			t.Fatalf("%d-byte key parsed as %+v, %v", size, got, err)
		}
	}
	if _, err := parseCMKey(make([]byte, 108)); err == nil || !strings.Contains(err.Error(), "108 bytes") {
		t.Fatalf("a TCP key message over rdma_cm: %v", err)
	}
}

// TestRDMACMBanner: -R and -z in the banner, as ctx_print_test_info.
func TestRDMACMBanner(t *testing.T) {
	var b bytes.Buffer
	p := Params{Test: WriteBW, RDMACM: true, TrafficClass: 32}
	p.Defaults()
	PrintBanner(&b, &p, BannerInfo{Device: "gorxe0", GIDIndex: 1})
	if !strings.Contains(b.String(), " rdma_cm QPs\t : ON\n Data ex. method : rdma_cm \tTOS    : 32\n") {
		t.Fatalf("banner:\n%s", b.String())
	}
	b.Reset()
	p = Params{Test: WriteBW, CommRDMACM: true}
	p.Defaults()
	PrintBanner(&b, &p, BannerInfo{Device: "gorxe0", GIDIndex: 1})
	if !strings.Contains(b.String(), " rdma_cm QPs\t : OFF\n Data ex. method : rdma_cm\n") {
		t.Fatalf("banner:\n%s", b.String())
	}
}

// TestRDMACMUD: send_bw and send_lat on UD QPs with -R (rdma_cm's UDP
// port space: a SIDR_REQ for each QP, the server's QPN and rdma_cm's
// Q_Key in the SIDR_REP, the client's QPN in a SEND with immediate when
// the server sends too), gorxe against gorxe over the in-memory fabric
// and kernel UDP, with -q 2 and -b, --check verifying what arrived; and
// -z on UD, whose QPs are connected from the keys. On a lossy fabric
// (send_bw only: its server never needs the client's QPN, which perftest
// sends once) the server ends with what came.
func TestRDMACMUD(t *testing.T) {
	for _, kind := range []string{"mem", "lossy", "udp", "z"} {
		for _, tc := range []struct {
			name string
			p    Params
		}{
			{"send_bw", Params{Test: SendBW}},
			{"send_bw/q2", Params{Test: SendBW, NumQPs: 2}},
			{"send_bw/b/q2", Params{Test: SendBW, NumQPs: 2, Duplex: true}},
			{"send_lat", Params{Test: SendLat}},
		} {
			p := tc.p
			lossy := kind == "lossy"
			if lossy && (p.Duplex || p.Test.IsLatency()) {
				continue
			}
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				p.Connection, p.Iters, p.Size, p.Check = qp.TypeUD, 200, 1000, !lossy
				p.RDMACM, p.CommRDMACM = kind != "z", kind == "z"
				var faults mem.Faults
				if lossy {
					p.Iters, faults = 2000, mem.Faults{Drop: 0.01, Seed: 5}
				}
				links := memLinks(t, faults)
				if kind == "udp" {
					links = udpLinks(t)
				}
				c, s := runCMPairOn(t, newCMPair(t, links), p, p, "")
				if len(c) != 1 || len(s) != 1 || c[0].Checked != p.Check || s[0].Checked != p.Check {
					t.Fatalf("client %+v server %+v", c, s)
				}
				if p.Test.IsLatency() {
					if c[0].Lat == nil || c[0].Lat.Iters != p.Iters {
						t.Fatalf("latency: client %+v", c[0].Lat)
					}
					return
				}
				n := p.Iters * p.qps()
				if c[0].BW == nil || s[0].BW == nil || c[0].BW.Iters != n {
					t.Fatalf("client %+v server %+v", c[0].BW, s[0].BW)
				}
				if got := s[0].BW.Iters; lossy && (got >= n || got == 0) || !lossy && got != n {
					t.Fatalf("the server received %d of %d", got, n)
				}
			})
		}
	}
}

// TestRDMACMRetryCount: --retry_count goes in the REQs of the test QPs
// (for timeouts and RNR NAKs alike), 0 as none, and in the exchange QP's
// for timeouts only (its RNR retry count stays 7), as perftest's
// rdma_client_connect; without it all of them have 7.
func TestRDMACMRetryCount(t *testing.T) {
	for _, c := range []struct {
		count      int
		comm, want string
	}{{0, "7/7", "7/7 7/7"}, {3, "3/7", "3/3 3/3"}, {NoRetries, "0/7", "0/0 0/0"}, {12, "7/7", "7/7 7/7"}} {
		var mu sync.Mutex
		var reqs []string
		watch := func(pkt []byte, _ uint64) bool {
			var p wire.Packet
			if wire.ParseIP(&p, pkt) != nil || p.BTH.DestQP() != rnic.GSIQPN {
				return false
			}
			if m, _, err := wcm.Decode(p.Payload); err == nil {
				if req, ok := m.(*wcm.REQ); ok {
					mu.Lock()
					reqs = append(reqs, fmt.Sprintf("%d/%d", req.RetryCount, req.RNRRetryCount))
					mu.Unlock()
				}
			}
			return false
		}
		p := Params{Test: WriteBW, NumQPs: 2, Iters: 20, Size: 64, RDMACM: true, RetryCount: c.count}
		cl, s := runCMPairOn(t, newCMPair(t, memLinks(t, mem.Faults{DropFunc: watch})), p, p, "")
		if len(cl) != 1 || len(s) != 1 {
			t.Fatalf("client %+v server %+v", cl, s)
		}
		// The exchange's QP's REQ comes first (again, while the server
		// is not listening yet), the two test QPs' last.
		mu.Lock()
		if n := len(reqs); n < 3 || reqs[0] != c.comm || strings.Join(reqs[n-2:], " ") != c.want {
			t.Errorf("--retry_count %d: REQs' retry/RNR retry counts %q, want %s ... %s", c.count, reqs, c.comm, c.want)
		}
		mu.Unlock()
	}
}

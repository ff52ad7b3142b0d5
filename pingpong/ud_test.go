package pingpong

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/rnic/rnictest"
)

// udParams are ud_pingpong's defaults with a GID and a give-up time.
func udParams() Params {
	p := params()
	p.Type, p.Size = qp.TypeUD, DefaultUDSize
	return p
}

// devicesAt opens two gorxe devices on one in-memory fabric at a and b.
func devicesAt(t *testing.T, a, b string) (*rnic.Device, *rnic.Device) {
	t.Helper()
	f := mem.NewFabric()
	return rnictest.Open(t, f, a), rnictest.Open(t, f, b)
}

// ud_pingpong's local line has a colon before the GID; its remote line
// is rc_pingpong's.
var udLocalLine = regexp.MustCompile(`^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}: GID (::ffff:10\.0\.0\.[12]|fd00::[12])$`)

// TestUDPingPong runs ud_pingpong's exchange and run over UD QPs, on
// IPv4 and IPv6 GIDs: every message is one UD SEND with the Q_Key
// 0x11111111 and arrives whole behind the GRH area, and the lines are
// ud_pingpong's.
func TestUDPingPong(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{{"IPv4", "10.0.0.1", "10.0.0.2"}, {"IPv6", "fd00::1", "fd00::2"}} {
		t.Run(tc.name, func(t *testing.T) {
			p := udParams()
			p.Iters, p.Check, p.PageSize = 300, true, 256
			a, b := devicesAt(t, tc.a, tc.b)
			srv, cli := bothOn(t, a, b, p, p)
			if srv.err != nil || cli.err != nil {
				t.Fatalf("server: %v\nclient: %v", srv.err, cli.err)
			}
			for who, o := range map[string]outcome{"server": srv, "client": cli} {
				lines := strings.Split(strings.TrimSuffix(o.out, "\n"), "\n")
				if len(lines) != 4 || !udLocalLine.MatchString(lines[0]) || !strings.HasPrefix(lines[1], "  remote address: LID 0x0000, QPN 0x") ||
					!strings.Contains(lines[1], ", GID ") || !bytesLine.MatchString(lines[2]) || !itersLine.MatchString(lines[3]) {
					t.Errorf("%s printed:\n%s\nwant ud_pingpong's four lines", who, o.out)
				}
				if m := bytesLine.FindStringSubmatch(lines[len(lines)-2]); m == nil || m[1] != "614400" {
					t.Errorf("%s: bytes line %q, want 614400 bytes", who, lines[len(lines)-2])
				}
				if o.r.BadPages != nil {
					t.Errorf("%s: bad pages %v", who, o.r.BadPages)
				}
			}
			if srv.r.Remote != cli.r.Local || cli.r.Remote != srv.r.Local {
				t.Errorf("the sides disagree on their addresses")
			}
			for _, d := range []*rnic.Device{a, b} {
				if c := d.Counters(); c.SentPkts != uint64(p.Iters) || c.BadOpcode != 0 {
					t.Errorf("%s: sent_pkts %d (want %d: one UD SEND a message, nothing else), bad_opcode %d", d.Name(), c.SentPkts, p.Iters, c.BadOpcode)
				}
			}
		})
	}
}

// TestUDPingPongUDP runs UD over kernel UDP sockets, at the MTU.
func TestUDPingPongUDP(t *testing.T) {
	a, b := udpDevices(t)
	p := udParams()
	p.Size, p.Iters, p.Check, p.PageSize = min(a.MTU(), b.MTU()).Bytes(), 200, true, 4096
	srv, cli := bothOn(t, a, b, p, p)
	if srv.err != nil || cli.err != nil {
		t.Fatalf("server: %v\nclient: %v", srv.err, cli.err)
	}
	if srv.r.BadPages != nil || cli.r.BadPages != nil {
		t.Errorf("bad pages: server %v, client %v", srv.r.BadPages, cli.r.BadPages)
	}
}

// TestUDSizeOverMTU: ud_pingpong refuses a message longer than the
// port's MTU before it creates its QP, with its words.
func TestUDSizeOverMTU(t *testing.T) {
	a, _ := devices(t)
	p := udParams()
	p.Size = a.MTU().Bytes() + 1
	want := "Requested size larger than port MTU (" + strconv.Itoa(a.MTU().Bytes()) + ")"
	if _, err := NewSide(a, p); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("size MTU+1: %v, want %q", err, want)
	}
	p.Size = a.MTU().Bytes()
	s, err := NewSide(a, p)
	if err != nil {
		t.Fatalf("size MTU: %v", err)
	}
	s.Close()
}

// TestUDCheckFindsDifferences: a UD client without -c, whose pages carry
// no mark, makes a checking server report each page, as with RC.
func TestUDCheckFindsDifferences(t *testing.T) {
	ps, pc := udParams(), udParams()
	ps.Iters, ps.Check, ps.PageSize = 5, true, 256
	pc.Iters = 5
	srv, cli := both(t, ps, pc)
	if srv.err != nil || cli.err != nil {
		t.Fatalf("server: %v\nclient: %v", srv.err, cli.err)
	}
	if len(srv.r.BadPages) != 4 || !strings.Contains(srv.out, "invalid data in page 3\n") {
		t.Fatalf("server's bad pages %v, output:\n%s", srv.r.BadPages, srv.out)
	}
}

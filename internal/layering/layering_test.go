// Package layering holds a test that gorxe's packages import one another
// only downwards: link (frames in and out) -> rnic (demultiplexing by QPN,
// ICRC) -> internal/rc (requester, responder, completer) -> qp (the verbs'
// types), mr and cq, with wire, pure encoding, under all of them.
package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// module is gorxe's module path.
const module = "github.com/gorxe/gorxe"

// layers says what each part of gorxe may import of gorxe, from the bottom
// up: a package pattern and the space-separated patterns it may import.
// The first entry whose pattern matches a package applies to it; "x/..."
// matches x and every package below it. Every package must match an
// entry, so a new one takes its place in the architecture on purpose.
var layers = []struct{ pkg, may string }{
	{"link/mem/fabric", "link wire/... internal/monotime"},                  // a switch model in virtual time
	{"internal/rc", "qp mr cq congestion trace wire/... internal/monotime"}, // the RC engine, under rnic; its QPs run congestion control
	{"internal/capture", "wire/..."},                                        // reading RoCE packets from pcap files, for decode and explain
	{"internal/...", ""},                                                    // leaf helpers
	{"wire/...", "wire/..."},                                                // pure encoding
	{"link", ""},                                                            // the Link interface
	{"link/internal/...", "link"},                                           // shared by the links
	{"link/xdp", "link link/internal/... wire/... internal/xdpprog internal/xsk internal/pages"}, // AF_XDP: the program and the sockets
	{"link/...", "link link/internal/... wire/... internal/pages"},                               // links, test doubles, conformance suite
	{"cq", "internal/..."},                     // completion queues
	{"mr", "internal/... wire/..."},            // memory regions; keys are wire's
	{"qp", "mr cq wire/..."},                   // the verbs' types
	{"congestion", "internal/monotime"},        // DCQCN: a leaf the transport plugs in
	{"trace", ""},                              // transport events: a leaf every layer reports with
	{"explain", "trace wire/... internal/..."}, // a capture explained: a model of both ends, no device
	{"rnic", "internal/rc congestion trace qp mr cq link wire/... internal/..."},                                                                   // the device: links to QP engines
	{"rnic/rnictest", "rnic congestion qp mr cq link/... wire/... internal/..."},                                                                   // a scripted peer for tests
	{"perftest", "cm rnic congestion qp mr cq link/... wire/... internal/..."},                                                                     // perftest's protocol over gorxe
	{"pingpong", "rnic congestion qp mr cq link/... wire/... internal/..."},                                                                        // ibv_rc_pingpong's exchange and run over gorxe
	{"sim", "rnic congestion qp mr cq link/... wire/... internal/..."},                                                                             // DCQCN scenarios: devices on the fabric in virtual time
	{"cm", "rnic qp mr cq wire/... internal/..."},                                                                                                  // the connection manager on QP 1, above the device
	{"cm/cmtest", "cm rnic rnic/rnictest link/..."},                                                                                                // devices with a connection manager, for tests
	{"rping", "cm rnic qp mr cq wire/... internal/..."},                                                                                            // librdmacm's rping over cm
	{"rsocket", "cm rnic qp mr cq wire/... internal/..."},                                                                                          // librdmacm's rsockets over cm
	{"cmtool", "rsocket cm rnic qp mr cq wire/... internal/..."},                                                                                   // librdmacm's rdma_server/client, ucmatose over cm
	{"qperf", "cm rnic qp mr cq wire/... internal/..."},                                                                                            // qperf's tests over cm
	{"scene", "explain trace cm rnic congestion qp mr cq link/... wire/... internal/..."},                                                          // scripted scenes of the transport at work, in virtual time
	{"cmd/...", "scene explain trace sim pingpong perftest rping cmtool rsocket qperf cm rnic congestion qp mr cq link/... wire/... internal/..."}, // the gorxe command
	{"test/...", "scene explain trace perftest cm rnic congestion qp mr cq link/... wire/... internal/..."},                                        // system tests and benchmarks
}

// match reports whether pkg, a path below the module, matches pattern.
func match(pattern, pkg string) bool {
	if dir, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == dir || strings.HasPrefix(pkg, dir+"/")
	}
	return pkg == pattern
}

// layer returns the entry of the layers table that applies to pkg, a path
// below the module.
func layer(pkg string) (pattern string, may []string, ok bool) {
	for _, l := range layers {
		if match(l.pkg, pkg) {
			return l.pkg, strings.Fields(l.may), true
		}
	}
	return "", nil, false
}

// check returns why pkg may not import imp, both paths below the module,
// or "" if it may.
func check(pkg, imp string) string {
	pattern, may, ok := layer(pkg)
	if !ok {
		return pkg + " is in no layer: add it to the layers table"
	}
	for _, m := range may {
		if match(m, imp) {
			return ""
		}
	}
	list := strings.Join(may, ", ")
	if list == "" {
		list = "nothing of gorxe"
	}
	return pkg + " imports " + imp + ", but " + pattern + " may import only " + list
}

// TestImportsGoDown lists every package of the module with go list and
// checks each of its non-test imports, for this platform, against the
// layers table. Load errors are left to the build (-e).
func TestImportsGoDown(t *testing.T) {
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports", "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	n := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkg := strings.TrimPrefix(p.ImportPath, module+"/")
		n++
		if _, _, ok := layer(pkg); !ok {
			t.Errorf("%s is in no layer: add it to the layers table", pkg)
			continue
		}
		for _, imp := range p.Imports {
			if imp, ok := strings.CutPrefix(imp, module+"/"); ok {
				if why := check(pkg, imp); why != "" {
					t.Error(why)
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("go list found only %d packages", n)
	}
}

// TestCheck pins the rules the layers table is there for.
func TestCheck(t *testing.T) {
	for _, c := range []struct {
		pkg, imp string
		ok       bool
	}{
		{"rnic", "qp", true},
		{"qp", "rnic", false},
		{"qp", "link", false},
		{"mr", "qp", false},
		{"cq", "link", false},
		{"link/udp", "rnic", false},
		{"link/udp", "wire", true},
		{"link/mem", "link/internal/pollfd", true},
		{"link", "wire", false},
		{"link/mem/fabric", "internal/monotime", true},
		{"link/mem/fabric", "rnic", false},
		{"link/mem/fabric", "congestion", false},
		{"link/mem", "internal/monotime", false},
		{"wire", "wire/bth", true},
		{"wire/bth", "internal/bitnames", false},
		{"wire/reth", "mr", false},
		{"perftest", "cmd/gorxe", false},
		{"rnic", "link/udp", false},
		{"cmd/gorxe", "rnic", true},
		{"congestion", "internal/monotime", true},
		{"congestion", "qp", false},
		{"congestion", "rnic", false},
		{"congestion", "link", false},
		{"congestion", "wire", false},
		{"internal/rc", "congestion", true},
		{"rnic", "congestion", true},
		{"qp", "congestion", false},
	} {
		if why := check(c.pkg, c.imp); (why == "") != c.ok {
			t.Errorf("check(%s, %s) = %q, want allowed %v", c.pkg, c.imp, why, c.ok)
		}
	}
	if why := check("newpkg", "wire"); !strings.Contains(why, "no layer") {
		t.Errorf("a package in no layer: %q", why)
	}
}

package main

import (
	"bytes"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gorxe/gorxe/perftest"
)

// TestBannerAsPerftest: for each command line in testdata's capture of
// perftest 6.06's output on rxe, gorxe's banner is perftest's, line for
// line, but for the PCIe line ("ON" in Debian's build, which has relaxed
// ordering; "Unsupported" in gorxe, which has no PCIe), and its address
// lines for the same QPs are perftest's, C's printf formats included.
func TestBannerAsPerftest(t *testing.T) {
	b, err := os.ReadFile("testdata/perftest-6.06-banners.txt")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(b), "\n=== ")[1:]
	if len(blocks) < 6 {
		t.Fatalf("%d blocks", len(blocks))
	}
	addr := regexp.MustCompile(`^ (local|remote) address: LID 0000 QPN (\S+) PSN (\S+)(?: OUT (\S+))?(?: RKey (\S+) VAddr (\S+))?$`)
	for _, block := range blocks {
		lines := strings.Split(strings.TrimSuffix(block, "\n"), "\n")
		cmdline := strings.Fields(lines[0])
		t.Run(strings.Join(cmdline, " "), func(t *testing.T) {
			test := perftest.Test(strings.TrimPrefix(cmdline[0], "ib_"))
			r, err := parsePerf(test, cmdline[1:])
			if err != nil {
				t.Fatal(err)
			}
			p, err := r.params()
			if err != nil {
				t.Fatal(err)
			}
			// The banner runs to the rule before the first address line,
			// the addresses to the next rule.
			var rules []int
			for i, l := range lines {
				if strings.HasPrefix(l, "-----") {
					rules = append(rules, i)
				}
			}
			for len(rules) > 3 {
				rules = append(rules[:1], rules[2:]...)
			}
			want := strings.Join(lines[rules[0]:rules[1]+1], "\n") + "\n"
			want = strings.Replace(want, " PCIe relax order: ON\n", " PCIe relax order: Unsupported\n", 1)
			var got bytes.Buffer
			perftest.PrintBanner(&got, &p, perftest.BannerInfo{Device: r.device, GIDIndex: r.gidIndex, Server: r.server == ""})
			if got.String() != want {
				t.Errorf("banner\n%s\nwant\n%s", got.String(), want)
			}
			var locals, remotes []perftest.Info
			for i := rules[1] + 1; i < rules[2]; i += 2 {
				m := addr.FindStringSubmatch(lines[i])
				if m == nil {
					t.Fatalf("line %q", lines[i])
				}
				n := func(s string) uint64 {
					v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
					if s != "" && err != nil {
						t.Fatalf("%q: %v", s, err)
					}
					return v
				}
				var gid [16]byte
				for k, f := range strings.Split(strings.TrimPrefix(lines[i+1], " GID: "), ":") {
					v, _ := strconv.Atoi(f)
					gid[k] = byte(v)
				}
				info := perftest.Info{QPN: uint32(n(m[2])), PSN: uint32(n(m[3])), OutReads: uint16(n(m[4])),
					RKey: uint32(n(m[5])), VAddr: n(m[6]), GID: netip.AddrFrom16(gid)}
				if m[1] == "local" {
					locals = append(locals, info)
				} else {
					remotes = append(remotes, info)
				}
			}
			got.Reset()
			perftest.PrintAllAddresses(&got, &p, locals, remotes)
			if want := strings.Join(lines[rules[1]+1:rules[2]+1], "\n") + "\n"; got.String() != want {
				t.Errorf("addresses\n%s\nwant\n%s", got.String(), want)
			}
		})
	}
}

// TestPerfServerLines: across hosts, write_lat's and send_lat's servers
// print their own result line under the table's header, as perftest's do
// (print_report_lat on either side), and read_lat's and atomic_lat's,
// which take no part in the run, print nothing after their address
// lines' rule.
func TestPerfServerLines(t *testing.T) {
	rule := "---------------------------------------------------------------------------------------\n"
	for _, test := range []string{"write_lat", "send_lat", "read_lat", "atomic_lat"} {
		srv, cli := pingpongPair(t, test, []string{"--ip", "127.0.0.1", "-n", "100"}, []string{"-n", "100"})
		if srv.code != 0 || cli.code != 0 {
			t.Fatalf("%s: exit %d and %d\n%s\n%s", test, srv.code, cli.code, srv.errOut, cli.errOut)
		}
		header := regexp.MustCompile(`(?m)^ #bytes #iterations .*\n (2|8) +100 +\d+\.\d\d`)
		if !header.MatchString(cli.out) {
			t.Errorf("%s: client\n%s", test, cli.out)
		}
		passive := test == "read_lat" || test == "atomic_lat"
		if passive {
			if strings.Contains(srv.out, "#bytes") || !strings.HasSuffix(srv.out, " GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:02\n"+rule) {
				t.Errorf("%s: server\n%s", test, srv.out)
			}
		} else if !header.MatchString(srv.out) || !strings.HasSuffix(srv.out, rule) {
			t.Errorf("%s: server\n%s", test, srv.out)
		}
	}
}

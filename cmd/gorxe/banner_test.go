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

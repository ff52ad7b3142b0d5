//go:build linux

package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDropIn runs perftest command lines as people type them, with gorxe
// under perftest's own tool names, between two namespaces: no --link, no
// --ip, options after the server's name, a device named as the host's
// RDMA device. The server takes the address the client reached it on;
// the client the one the kernel's route to the server picks; -x and
// --ipv6 pick GIDs from the table laid out as rxe's (veth: 0 link-local,
// 1 IPv4, 2 IPv6).
func TestDropIn(t *testing.T) {
	needRoot(t)
	a, b := newNS(t, "a"), newNS(t, "b")
	vethPair(t, a, b, 1500)
	dir := t.TempDir()
	for _, tool := range []string{"ib_write_bw", "ib_send_bw", "ib_read_bw", "ib_read_lat", "ib_write_lat", "ib_atomic_lat"} {
		if err := os.Symlink(gorxeBin, filepath.Join(dir, tool)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name     string
		tool     string
		server   string
		client   string
		want     []string // in both sides' output
		wantGIDs string   // the GID index both banners print
		counts   map[string]int
	}{
		{"defaults", "ib_write_bw", "-d rxe0 -F --check", "-d mlx5_0 -F 10.77.0.2 -s 4K -n 50 --check",
			[]string{"RDMA_Write BW Test", " 4096       50 "}, "1", nil},
		{"options after the server", "ib_send_bw", "-d rxe0 -x 1 -s 1K -n 100 --check", "10.77.0.2 -d rxe0 -x 1 -s1K -n100 --check",
			[]string{"Send BW Test", " 1024       100 "}, "1", nil},
		{"ipv6 by -x", "ib_read_lat", "-d rxe0 -x 2 -n 100 --check", "-x 2 -n 100 fd77::2 --check",
			[]string{"RDMA_Read Latency Test", "GID: 253:119:"}, "2", nil},
		{"ipv6 by --ipv6", "ib_write_bw", "--ipv6 -n 20 --check", "--ipv6 -n 20 --check 10.77.0.2",
			[]string{"GID: 253:119:"}, "2", nil},
		{"-q 4 -b", "ib_write_bw", "-q 4 -b -s 4K -n 50 --check", "10.77.0.2 -bq4 -s4K -n50 --check",
			[]string{"Number of qps   : 4", "Bidirectional", " 4096       200 "}, "1",
			map[string]int{" local address: ": 4, " remote address: ": 4}},
		{"send -q 2 -b", "ib_send_bw", "-q 2 -b -s 1K -n 100 --check", "-q 2 -b -s 1K -n 100 --check 10.77.0.2",
			[]string{"Number of qps   : 2", " 1024       200 "}, "1", nil},
		{"read -o 4", "ib_read_bw", "-o 4 -n 50 --check", "-o 4 -n 50 --check 10.77.0.2",
			[]string{"RDMA_Read BW Test", " 65536      50 "}, "1", nil},
		{"-D 2", "ib_send_bw", "-D 2 -d rxe0 --report_gbits", "-D2 -d rxe0 --report_gbit 10.77.0.2",
			[]string{"BW average[Gb/sec]"}, "1", nil},
		{"write_lat -D 2", "ib_write_lat", "-D 2", "10.77.0.2 -D 2",
			[]string{"t_avg[usec]"}, "1", nil},
		{"atomic_lat", "ib_atomic_lat", "-A CMP_AND_SWAP -n 200 --check", "-A CMP_AND_SWAP -n 200 --check 10.77.0.2",
			[]string{"Atomic CMP_AND_SWAP Latency Test"}, "1", nil},
		{"write_lat with immediate", "ib_write_lat", "--write_with_imm -n 100 --check", "--write_with_imm -n 100 --check 10.77.0.2",
			[]string{"RDMA_Write_imm Latency Test"}, "1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := filepath.Join(dir, tc.tool)
			srv := startAs(t, b, bin, strings.Fields(tc.server)...)
			time.Sleep(200 * time.Millisecond)
			cli := startAs(t, a, bin, strings.Fields(tc.client)...)
			for _, g := range []*gorxe{cli, srv} {
				if err := g.wait(t, 60*time.Second); err != nil {
					t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", g.cmd.Args[3:], err, g.out.String(), g.errOut.String())
				}
				out := g.out.String()
				want := append(tc.want, " GID index       : "+tc.wantGIDs+"\n")
				if strings.Contains(tc.client, "--check") {
					want = append(want, "data check: ok")
				}
				for _, w := range want {
					if !strings.Contains(out, w) {
						t.Errorf("%v: no %q in\n%s", g.cmd.Args[3:], w, out)
					}
				}
				for w, n := range tc.counts {
					if got := strings.Count(out, w); got != n {
						t.Errorf("%v: %d lines with %q, want %d:\n%s", g.cmd.Args[3:], got, w, n, out)
					}
				}
			}
			if !strings.Contains(srv.out.String(), "Device         : rxe0") && strings.Contains(tc.server, "rxe0") {
				t.Errorf("the server's banner does not name its device rxe0:\n%s", srv.out.String())
			}
		})
	}
}

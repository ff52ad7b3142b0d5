package rping_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cm/cmtest"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/rping"
)

// TestPing runs rping's client and server between two devices: the
// client's -V passes, both print rping's lines, the server's run ends
// when the client disconnects.
func TestPing(t *testing.T) {
	for _, size := range []int{rping.MinSize, rping.DefaultSize, 4000, rping.MaxSize} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			f := mem.NewFabric()
			sdev, sm := cmtest.Open(t, f, "10.0.0.2")
			cdev, cm := cmtest.Open(t, f, "10.0.0.1")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			l, err := sm.Listen(netip.Addr{}, rping.DefaultPort)
			if err != nil {
				t.Fatal(err)
			}
			p := rping.Params{Count: 5, Size: size, Verbose: true, Validate: true}
			var sout, serr, cout bytes.Buffer
			served := make(chan error, 1)
			go func() { served <- rping.Server(ctx, sdev, l, p, &sout, &serr) }()
			if err := rping.Client(ctx, cm, cdev, netip.MustParseAddrPort("10.0.0.2:7174"), netip.Addr{}, p, &cout); err != nil {
				t.Fatal(err)
			}
			if err := <-served; err != nil {
				t.Fatal(err)
			}
			clines := strings.Split(strings.TrimSpace(cout.String()), "\n")
			slines := strings.Split(strings.TrimSpace(sout.String()), "\n")
			if len(clines) != 5 || len(slines) != 5 {
				t.Fatalf("client printed %d lines, server %d; want 5 each:\n%s\n%s", len(clines), len(slines), cout.String(), sout.String())
			}
			for i := range 5 {
				text := fmt.Sprintf("rdma-ping-%d: ", i)
				if !strings.HasPrefix(clines[i], "ping data: "+text) || slines[i] != "server "+clines[i] {
					t.Fatalf("ping %d: client %q, server %q", i, clines[i], slines[i])
				}
				if got := len(clines[i]) - len("ping data: "); got != size-1 {
					t.Fatalf("ping %d: %d bytes of text, want %d", i, got, size-1)
				}
			}
			// rping's letters: 'A' + ping after the prefix, cycling to 'z'.
			if want := "rdma-ping-1: BCD"; !strings.HasPrefix(clines[1][len("ping data: "):], want) {
				t.Fatalf("ping 1 is %q, want it to start %q", clines[1], want)
			}
			if !strings.Contains(serr.String(), "server DISCONNECT EVENT...") {
				t.Fatalf("server stderr %q", serr.String())
			}
		})
	}
}

// TestNoServer: rping's client against nobody fails with the REJ's
// reason, not a hang.
func TestNoServer(t *testing.T) {
	f := mem.NewFabric()
	cmtest.Open(t, f, "10.0.0.2")
	cdev, cm := cmtest.Open(t, f, "10.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := rping.Client(ctx, cm, cdev, netip.MustParseAddrPort("10.0.0.2:7174"), netip.Addr{}, rping.Params{Count: 1, Size: 64}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "rejected") {
		t.Fatalf("rping to nobody: %v", err)
	}
}

//go:build linux

package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestRouter runs test/router/router.sh --short: two gorxe senders and a
// receiver in namespaces, routed through Debian's kernel in a qemu VM
// whose egress toward the receiver is htb with RED marking ECN under it,
// 10 s a flow with --cc dcqcn and again with --cc none. It passes when the
// script does: with DCQCN the capture has CNPs (tshark and gorxe decode),
// the router drops nothing (or at most 10% of what it drops without
// congestion control), the two flows' goodputs are within 20% of each
// other; without it the router drops and both clients still complete.
// About a minute and a half, more the first time, when the VM image is
// built (test/interop/lib.sh). Its logs and captures stay in
// test/router/cache/gotest/last.
func TestRouter(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Fatal("tshark is not installed: make test installs it")
	}
	cache, err := filepath.Abs("router/cache/gotest")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "router/router.sh", "--short")
	cmd.Env = append(os.Environ(), "GORXE_ROUTER_CACHE="+cache)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("router/router.sh --short:\n%s", out)
	if err != nil {
		t.Fatalf("router/router.sh --short: %v (logs: %s/last)", err, cache)
	}
}

package xdpprog

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
)

var vethSeq atomic.Int32

// newVeth creates a veth pair, both ends up, each with queues receive and
// transmit queues, in the test's network namespace (see TestMain), and
// returns the first end; the pair is deleted in cleanup.
func newVeth(t testing.TB, queues int) *net.Interface {
	t.Helper()
	needRoot(t)
	n := vethSeq.Add(1)
	a, b := fmt.Sprintf("xdpt%da", n), fmt.Sprintf("xdpt%db", n)
	q := fmt.Sprint(queues)
	ip(t, "link", "add", a, "numtxqueues", q, "numrxqueues", q, "type", "veth", "peer", "name", b, "numtxqueues", q, "numrxqueues", q)
	t.Cleanup(func() { exec.Command("ip", "link", "del", a).Run() })
	ip(t, "link", "set", a, "up")
	ip(t, "link", "set", b, "up")
	ifi, err := net.InterfaceByName(a)
	if err != nil {
		t.Fatal(err)
	}
	return ifi
}

// peerOf returns the name of the other end of a veth newVeth made.
func peerOf(name string) string { return strings.TrimSuffix(name, "a") + "b" }

// ip runs ip(8) and returns its output, failing t if it fails.
func ip(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

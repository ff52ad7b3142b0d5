//go:build linux

// Package test holds gorxe's integration tests: gorxe hosts in network
// namespaces on one machine, joined by veth pairs and bridges, running the
// gorxe command as users do. They need root (CI runs as root) and skip
// with the reason otherwise.
package test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// gorxeBin is the gorxe command, built once by TestMain.
var gorxeBin string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "gorxe-test")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		gorxeBin = filepath.Join(dir, "gorxe")
		build := exec.Command("go", "build", "-o", gorxeBin, "../cmd/gorxe")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building gorxe: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}())
}

// needRoot skips a test that needs root (namespaces, veth, TAP).
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, veth pairs, bridges and TAP devices (CI runs as root)")
	}
}

// sh runs a command, failing the test with its output on error.
func sh(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// stdout runs a command and returns its standard output alone, failing the
// test with its error output on error.
func stdout(t testing.TB, args ...string) string {
	t.Helper()
	var errOut bytes.Buffer
	c := exec.Command(args[0], args[1:]...)
	c.Stderr = &errOut
	out, err := c.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return string(out)
}

// netns is a network namespace the test created.
type netns struct{ name string }

// newNS creates a namespace with its loopback up, deleted when the test
// ends.
func newNS(t *testing.T, prefix string) *netns {
	t.Helper()
	n := &netns{name: fmt.Sprintf("gx%s%04x", prefix, rand.Uint32()&0xffff)}
	sh(t, "ip", "netns", "add", n.name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", n.name).Run() })
	n.ip(t, "link", "set", "lo", "up")
	return n
}

// ip runs ip(8) inside the namespace.
func (n *netns) ip(t testing.TB, args ...string) string {
	t.Helper()
	return sh(t, append([]string{"ip", "-n", n.name}, args...)...)
}

// cmd returns a command that runs inside the namespace.
func (n *netns) cmd(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.name}, args...)...)
}

// vethPair joins two namespaces with a veth pair of the given MTU and gives
// each end an IPv4 and an IPv6 address (10.77.0.N/24, fd77::N/64).
func vethPair(t *testing.T, a, b *netns, mtu int) {
	t.Helper()
	sh(t, "ip", "link", "add", "va", "netns", a.name, "mtu", fmt.Sprint(mtu), "type", "veth", "peer", "name", "vb", "netns", b.name, "mtu", fmt.Sprint(mtu))
	for i, n := range []*netns{a, b} {
		dev := []string{"va", "vb"}[i]
		n.ip(t, "addr", "add", fmt.Sprintf("10.77.0.%d/24", i+1), "dev", dev)
		n.ip(t, "addr", "add", fmt.Sprintf("fd77::%d/64", i+1), "dev", dev, "nodad")
		n.ip(t, "link", "set", dev, "up")
	}
}

// bridgeNS creates a namespace with a bridge br0 of the given MTU that has
// addresses 10.78.0.254/24 and fd78::fe/64, for TAP-link hosts to join.
func bridgeNS(t *testing.T, mtu int) *netns {
	t.Helper()
	n := newNS(t, "br")
	n.ip(t, "link", "add", "br0", "mtu", fmt.Sprint(mtu), "type", "bridge")
	n.ip(t, "addr", "add", "10.78.0.254/24", "dev", "br0")
	n.ip(t, "addr", "add", "fd78::fe/64", "dev", "br0", "nodad")
	n.ip(t, "link", "set", "br0", "up")
	return n
}

// gorxe is a running gorxe process.
type gorxe struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	errOut bytes.Buffer
	done   chan error
}

// start runs gorxe with args in the namespace; it is killed when the test
// ends if it is still running.
func start(t *testing.T, n *netns, args ...string) *gorxe {
	t.Helper()
	return startAs(t, n, gorxeBin, args...)
}

// startAs is start with the binary at bin: gorxe under another name.
func startAs(t *testing.T, n *netns, bin string, args ...string) *gorxe {
	t.Helper()
	g := &gorxe{done: make(chan error, 1)}
	g.cmd = n.cmd(context.Background(), append([]string{bin}, args...)...)
	g.cmd.Stdout, g.cmd.Stderr = &g.out, &g.errOut
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { g.done <- g.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case err := <-g.done: // exited already
			g.done <- err
		default:
			g.cmd.Process.Kill()
			<-g.done
		}
	})
	return g
}

// wait waits for the process to exit, at most d, and returns its error.
func (g *gorxe) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-g.done:
		g.done <- err
		return err
	case <-time.After(d):
		g.cmd.Process.Kill()
		// Wait returns once the output is copied: only then may the
		// buffers be read.
		err := <-g.done
		g.done <- err
		t.Fatalf("gorxe %v did not exit within %v\nstdout:\n%s\nstderr:\n%s", g.cmd.Args[3:], d, g.out.String(), g.errOut.String())
		return nil
	}
}

// pair runs a test as server in ns and client in nc and checks that both
// exit 0 with the data check passed.
func pair(t *testing.T, ns, nc *netns, serverArgs, clientArgs []string) (server, client *gorxe) {
	t.Helper()
	return pairUnder(t, nil, ns, nc, serverArgs, clientArgs)
}

// pairOneCPU is pair with both sides held to one CPU, the one the test
// itself may use last. Two UC senders sharing one CPU take turns, so
// neither can stream at the other for longer than a scheduler's slice;
// on two, another program taking one side's CPU lets the other send at
// it for as long as that lasts, and UC loses what its queues cannot hold
// whatever the NIC does.
func pairOneCPU(t *testing.T, ns, nc *netns, serverArgs, clientArgs []string) (server, client *gorxe) {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	cpu := -1
	for i := range len(set) * 64 {
		if set.IsSet(i) {
			cpu = i
		}
	}
	return pairUnder(t, []string{"taskset", "-c", strconv.Itoa(cpu)}, ns, nc, serverArgs, clientArgs)
}

// pairUnder is pair with each gorxe run by the command in wrap, if any.
func pairUnder(t *testing.T, wrap []string, ns, nc *netns, serverArgs, clientArgs []string) (server, client *gorxe) {
	t.Helper()
	run := func(n *netns, args []string) *gorxe {
		if wrap == nil {
			return start(t, n, args...)
		}
		return startAs(t, n, wrap[0], append(append(slices.Clone(wrap[1:]), gorxeBin), args...)...)
	}
	server = run(ns, serverArgs)
	time.Sleep(200 * time.Millisecond) // let the server listen; the client also retries
	client = run(nc, clientArgs)
	for i, g := range []*gorxe{client, server} {
		if err := g.wait(t, 120*time.Second); err != nil {
			// A side's failure is often the other's doing (a server that
			// gave up closes the report exchange), so show both.
			other := []*gorxe{server, client}[i]
			oerr := other.wait(t, 60*time.Second)
			t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s\nthe other side, %v: %v\nstdout:\n%s\nstderr:\n%s",
				g.cmd.Args[3:], err, g.out.String(), g.errOut.String(),
				other.cmd.Args[3:], oerr, other.out.String(), other.errOut.String())
		}
		if strings.Contains(strings.Join(g.cmd.Args, " "), "--check") && !strings.Contains(g.out.String(), `"check":"ok"`) && !strings.Contains(g.out.String(), "data check: ok") {
			t.Fatalf("%v: no passed data check in\n%s", g.cmd.Args[3:], g.out.String())
		}
	}
	return server, client
}

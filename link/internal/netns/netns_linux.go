// Package netns gives tests their own network namespaces: an isolated
// loopback, or two "hosts" joined by a veth pair, and a way to open
// sockets inside them from an ordinary test process.
//
// Namespaces are made with iproute2's ip command, as named namespaces
// (/run/netns/NAME), so a failing test leaves something an engineer can
// inspect with `ip netns`, and removed in t.Cleanup. Code runs inside a
// namespace on a locked OS thread (see Do); a socket stays in the namespace
// it was created in, so the rest of the test uses it from any goroutine.
//
// Everything here needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN).
package netns

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// NS is a named network namespace.
type NS struct {
	Name string
}

// Path returns the namespace's bind mount.
func (ns *NS) Path() string { return "/run/netns/" + ns.Name }

// Skip skips t unless the process can create network namespaces.
func Skip(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip command: ", err)
	}
}

var seq atomic.Uint32

// New creates a namespace with its loopback up, removed when t ends.
// It skips t without root.
func New(t testing.TB) *NS {
	t.Helper()
	Skip(t)
	ns := &NS{Name: fmt.Sprintf("gorxe-%d-%d", os.Getpid(), seq.Add(1))}
	Run(t, "ip", "netns", "add", ns.Name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns.Name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns.Name, err, out)
		}
	})
	ns.IP(t, "link", "set", "lo", "up")
	return ns
}

// IP runs `ip -n NAME args...` and fails t if it fails.
func (ns *NS) IP(t testing.TB, args ...string) {
	t.Helper()
	Run(t, "ip", append([]string{"-n", ns.Name}, args...)...)
}

// Run runs a command and fails t if it fails.
func Run(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// Pair is two namespaces joined by a veth pair, with one IPv4 and one
// IPv6 address at each end.
type Pair struct {
	A, B     *NS
	IfA, IfB string     // the veth ends' names inside A and B
	A4, B4   netip.Addr // 10.x.y.1 and 10.x.y.2
	A6, B6   netip.Addr // fd00:x:y::1 and fd00:x:y::2
}

// NewPair creates two namespaces joined by a veth pair whose ends have
// the given MTU (0 keeps the kernel's 1500), both up, with addresses
// ready for use: no IPv6 duplicate address detection, static neighbors.
func NewPair(t testing.TB, mtu int) *Pair {
	t.Helper()
	return NewPairQueues(t, mtu, 0)
}

// NewPairQueues is NewPair with veth ends of the given number of receive
// and transmit queues (0 keeps the kernel's default, one in use).
func NewPairQueues(t testing.TB, mtu, queues int) *Pair {
	t.Helper()
	a, b := New(t), New(t)
	n := seq.Add(1)
	p := &Pair{
		A: a, B: b, IfA: "veth0", IfB: "veth1",
		A4: netip.AddrFrom4([4]byte{10, byte(n >> 8), byte(n), 1}),
		B4: netip.AddrFrom4([4]byte{10, byte(n >> 8), byte(n), 2}),
		A6: netip.MustParseAddr(fmt.Sprintf("fd00:%x:%x::1", n>>8, n&0xff)),
		B6: netip.MustParseAddr(fmt.Sprintf("fd00:%x:%x::2", n>>8, n&0xff)),
	}
	macA := fmt.Sprintf("02:00:00:%02x:%02x:01", byte(n>>8), byte(n))
	macB := fmt.Sprintf("02:00:00:%02x:%02x:02", byte(n>>8), byte(n))
	var q []string
	if queues > 0 {
		q = []string{"numtxqueues", fmt.Sprint(queues), "numrxqueues", fmt.Sprint(queues)}
	}
	add := append([]string{"link", "add", p.IfA, "address", macA}, q...)
	add = append(add, "type", "veth", "peer", "name", p.IfB, "address", macB, "netns", b.Name)
	a.IP(t, append(add, q...)...)
	for _, end := range []struct {
		ns           *NS
		ifname       string
		v4, v6       netip.Addr
		peer4, peer6 netip.Addr
		peerMAC      string
	}{{a, p.IfA, p.A4, p.A6, p.B4, p.B6, macB}, {b, p.IfB, p.B4, p.B6, p.A4, p.A6, macA}} {
		if mtu > 0 {
			end.ns.IP(t, "link", "set", end.ifname, "mtu", fmt.Sprint(mtu))
		}
		// No link-local address, no duplicate address detection and
		// static neighbors: a packet sent the moment the pair is up goes
		// out at once, where neighbor discovery may first lose a
		// solicitation and wait a second to repeat it.
		end.ns.IP(t, "link", "set", end.ifname, "addrgenmode", "none")
		end.ns.IP(t, "addr", "add", end.v4.String()+"/24", "dev", end.ifname)
		end.ns.IP(t, "-6", "addr", "add", end.v6.String()+"/64", "dev", end.ifname, "nodad")
		end.ns.IP(t, "link", "set", end.ifname, "up")
		for _, peer := range []netip.Addr{end.peer4, end.peer6} {
			end.ns.IP(t, "neigh", "replace", peer.String(), "lladdr", end.peerMAC, "dev", end.ifname, "nud", "permanent")
		}
	}
	return p
}

// Do runs fn on an OS thread that has joined ns, and returns fn's error.
// Sockets fn creates belong to ns for their whole life. fn must not start
// goroutines that expect to be in ns: they run on other threads.
func (ns *NS) Do(fn func() error) error {
	target, err := unix.Open(ns.Path(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	defer unix.Close(target)

	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: %w", err)
	}
	defer unix.Close(orig)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: setns %s: %w", ns.Name, err)
	}
	ferr := fn()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		// The thread stays in ns: keep it locked so the runtime ends it
		// when this goroutine exits instead of reusing it.
		return fmt.Errorf("netns: returning from %s: %w", ns.Name, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

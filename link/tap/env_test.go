//go:build linux

package tap

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The tests create TAP devices and bridges, which needs root. So that they
// never touch the machine's own network, and nothing they create survives
// them even if they crash, TestMain runs the test binary again in a new
// network namespace (and a mount namespace, to mount a sysfs that shows
// that network namespace's interfaces). Everything is also removed in
// t.Cleanup, so each test starts from an empty namespace.

const netnsEnv = "GORXE_TAP_TEST_NETNS"

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 && os.Getenv(netnsEnv) == "" {
		cmd := exec.Command(os.Args[0], os.Args[1:]...)
		cmd.Env = append(os.Environ(), netnsEnv+"=1")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNET | unix.CLONE_NEWNS}
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			os.Exit(ee.ExitCode())
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "tap tests: running in a new network namespace: %v\n", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	if os.Getenv(netnsEnv) == "1" {
		if err := mountSysfs(); err != nil {
			fmt.Fprintf(os.Stderr, "tap tests: %v\n", err)
			os.Exit(2)
		}
		// Processes this one starts (fuzz workers) share the namespaces
		// and the mount.
		os.Setenv(netnsEnv, "2")
	}
	os.Exit(m.Run())
}

func mountSysfs() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := unix.Mount("sysfs", "/sys", "sysfs", 0, ""); err != nil {
		return fmt.Errorf("mounting sysfs for the test namespace: %w", err)
	}
	return nil
}

// needRoot skips a test that creates network devices when not root.
func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating TAP devices and bridges needs root (CAP_NET_ADMIN); CI runs as root")
	}
}

var bridgeSeq atomic.Int32

// newBridge creates a bridge, up, with multicast snooping off (so neighbour
// solicitations reach every port without MLD), and deletes it in cleanup.
func newBridge(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("gtbr%d", bridgeSeq.Add(1))
	s := ctlSocket(t, unix.AF_INET)
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(s), unix.SIOCBRADDBR, uintptr(unsafe.Pointer(p))); e != 0 {
		t.Fatalf("creating bridge %s: %v", name, e)
	}
	t.Cleanup(func() {
		setFlags(t, name, 0, unix.IFF_UP)
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(s), unix.SIOCBRDELBR, uintptr(unsafe.Pointer(p))); e != 0 {
			t.Errorf("deleting bridge %s: %v", name, e)
		}
	})
	writeFile(t, "/sys/class/net/"+name+"/bridge/multicast_snooping", "0")
	writeFile(t, "/proc/sys/net/ipv6/conf/"+name+"/accept_dad", "0")
	setFlags(t, name, unix.IFF_UP, 0)
	return name
}

// ctlSocket returns a socket for interface ioctls, closed in cleanup.
func ctlSocket(t testing.TB, family int) int {
	t.Helper()
	s, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	t.Cleanup(func() { unix.Close(s) })
	return s
}

func writeFile(t testing.TB, path, v string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(v), 0); err != nil {
		t.Fatal(err)
	}
}

func setFlags(t testing.TB, name string, set, clear uint16) {
	t.Helper()
	s := ctlSocket(t, unix.AF_INET)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		t.Fatalf("flags of %s: %v", name, err)
	}
	ifr.SetUint16(ifr.Uint16()&^clear | set)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		t.Fatalf("setting flags of %s: %v", name, err)
	}
}

// addAddr gives the kernel an address on a bridge: the test's stand-in for
// another host on the wire.
func addAddr(t testing.TB, name string, p netip.Prefix) {
	t.Helper()
	if p.Addr().Is4() {
		s := ctlSocket(t, unix.AF_INET)
		m := ^uint32(0) << (32 - p.Bits())
		mask := []byte{byte(m >> 24), byte(m >> 16), byte(m >> 8), byte(m)}
		for _, x := range []struct {
			req uint
			a   []byte
		}{{unix.SIOCSIFADDR, p.Addr().AsSlice()}, {unix.SIOCSIFNETMASK, mask}} {
			ifr, err := unix.NewIfreq(name)
			if err != nil {
				t.Fatal(err)
			}
			if err := ifr.SetInet4Addr(x.a); err != nil {
				t.Fatal(err)
			}
			if err := unix.IoctlIfreq(s, x.req, ifr); err != nil {
				t.Fatalf("adding %v to %s: %v", p, name, err)
			}
		}
		return
	}
	s := ctlSocket(t, unix.AF_INET6)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFINDEX, ifr); err != nil {
		t.Fatal(err)
	}
	req := struct { // struct in6_ifreq
		addr      [16]byte
		prefixLen uint32
		ifindex   int32
	}{p.Addr().As16(), uint32(p.Bits()), int32(ifr.Uint32())}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(s), unix.SIOCSIFADDR, uintptr(unsafe.Pointer(&req))); e != 0 {
		t.Fatalf("adding %v to %s: %v", p, name, e)
	}
	// The address is tentative until the kernel sees the bridge's carrier,
	// which comes a moment after its first port is up.
	a := p.Addr()
	if a.IsLinkLocalUnicast() {
		a = a.WithZone(name)
	}
	eventually(t, 3*time.Second, "address "+a.String()+" usable", func() bool {
		c, err := net.ListenPacket("udp6", net.JoinHostPort(a.String(), "0"))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// open opens a TAP link on bridge and closes it in cleanup.
func open(t testing.TB, c Config) *Link {
	t.Helper()
	l, err := Open(c)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func prefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// eventually polls cond until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tapGoroutines returns the stacks of goroutines running this package's
// code.
func tapGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "link/tap.(*Link)") || strings.Contains(g, "link/tap.(*reader)") {
			out = append(out, g)
		}
	}
	return out
}

// beside opens a link at 10.9.0.5/24 and fd00::5/64 (with c's other
// fields) on a new bridge on which the kernel, the test's other host, has
// 10.9.0.1/24, fd00::1/64 and fe80::1/64, and returns it and the bridge.
func beside(t testing.TB, c Config) (*Link, string) {
	t.Helper()
	br := newBridge(t)
	c.Bridge, c.Addrs = br, []netip.Prefix{prefix("10.9.0.5/24"), prefix("fd00::5/64")}
	l := open(t, c)
	for _, p := range []string{"10.9.0.1/24", "fd00::1/64", "fe80::1/64"} {
		addAddr(t, br, prefix(p))
	}
	return l, br
}

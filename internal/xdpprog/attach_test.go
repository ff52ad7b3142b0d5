package xdpprog

import (
	"errors"
	"net"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The attach tests use veth pairs in the test's own network namespace (see
// TestMain). They check what the kernel says, with `ip -d link show`, as
// well as what the package returns.

// xdpOn returns what `ip -d link show` says is attached to the interface:
// "" for nothing, else ip's keyword for the mode ("xdp" for driver mode,
// "xdpgeneric") and the program's name, as in "xdp gorxe_xdp".
func xdpOn(t testing.TB, ifname string) string {
	t.Helper()
	out := ip(t, "-d", "link", "show", "dev", ifname)
	mode := regexp.MustCompile(` (xdp|xdpgeneric|xdpoffload|xdpmulti) `).FindStringSubmatch(out)
	if mode == nil {
		return ""
	}
	name := regexp.MustCompile(`prog/xdp id \d+ name (\S+)`).FindStringSubmatch(out)
	if name == nil {
		return mode[1]
	}
	return mode[1] + " " + name[1]
}

// wantErr checks that err wraps errno and its message contains each of the
// phrases, and is one line.
func wantErr(t testing.TB, what string, err error, errno unix.Errno, phrases ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %v", what, errno)
		return
	}
	t.Logf("%s: %v", what, err)
	if !errors.Is(err, errno) {
		t.Errorf("%s: error does not wrap %v (%d)", what, errno, errno)
	}
	for _, p := range phrases {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error does not say %q", what, p)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("%s: error is more than one line", what)
	}
}

// TestAttach attaches in driver mode, checks that a second program cannot
// take the interface while the first holds it, and that Close leaves the
// interface with no program.
func TestAttach(t *testing.T) {
	v := newVeth(t, 1)
	p := load(t, Config{Queues: 1})
	a, err := p.Attach(v.Index, ModeAuto)
	if err != nil {
		t.Fatal(err)
	}
	if a.Mode != ModeDriver || a.Interface != v.Name || a.DriverErr != nil || p.Attachment() != a {
		t.Errorf("Attach: %+v, Attachment(): %+v; want %s in driver mode", a, p.Attachment(), v.Name)
	}
	t.Logf("attached: %v", a)
	if got := xdpOn(t, v.Name); got != "xdp "+programName {
		t.Errorf("ip link shows %q, want %q", got, "xdp "+programName)
	}
	_, err = p.Attach(v.Index, ModeAuto)
	if err == nil || !strings.Contains(err.Error(), "already attached") {
		t.Errorf("second Attach of one program: %v", err)
	}

	q := load(t, Config{Queues: 1})
	_, err = q.Attach(v.Index, ModeDriver)
	wantErr(t, "second program, driver mode", err, unix.EBUSY, "another process holds", "BPF link", "another gorxe")
	_, err = q.Attach(v.Index, ModeGeneric)
	wantErr(t, "second program, generic mode", err, unix.EEXIST, "another process holds", "BPF link")
	_, err = q.Attach(v.Index, ModeAuto)
	wantErr(t, "second program, auto", err, unix.EBUSY, "in driver mode")
	if err := setXDPNetlink(t, v.Index, q.prog.FD(), unix.XDP_FLAGS_DRV_MODE); !errors.Is(err, unix.EBUSY) {
		t.Errorf("netlink attach over the BPF link, driver mode: %v, want EBUSY", err)
	}
	if err := setXDPNetlink(t, v.Index, -1, 0); !errors.Is(err, unix.EBUSY) {
		t.Errorf("netlink detach of the BPF link (ip link set dev %s xdp off): %v, want EBUSY", v.Name, err)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if got := xdpOn(t, v.Name); got != "" {
		t.Errorf("after Close, ip link shows %q attached", got)
	}
	if a := p.Attachment(); a.Interface != "" {
		t.Errorf("after Close, Attachment() = %+v", a)
	}
	if _, err := p.Attach(v.Index, ModeAuto); err == nil {
		t.Errorf("Attach after Close succeeded")
	}
	if err := p.Register(0, newXSK(t, 0, 0)); err == nil {
		t.Errorf("Register after Close succeeded")
	}
	if _, err := p.Stats(); err == nil {
		t.Errorf("Stats after Close succeeded")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := q.Attach(v.Index, ModeGeneric); err != nil {
		t.Fatalf("attach after the first program closed: %v", err)
	}
	if got := xdpOn(t, v.Name); got != "xdpgeneric "+programName {
		t.Errorf("ip link shows %q, want %q", got, "xdpgeneric "+programName)
	}
}

// TestAttachOverNetlink puts another program on the interface the old way,
// as ip link or an XDP tool would, checks the error Attach gives in each
// mode, then follows its advice.
func TestAttachOverNetlink(t *testing.T) {
	other := load(t, Config{Queues: 1})
	for _, c := range []struct {
		name        string
		flags       uint32
		driverErrno unix.Errno // Attach in driver mode
		suggestion  string
	}{
		{"driver mode", unix.XDP_FLAGS_DRV_MODE, unix.EBUSY, "xdpdrv off"},
		{"generic mode", unix.XDP_FLAGS_SKB_MODE, unix.EEXIST, "xdpgeneric off"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newVeth(t, 1)
			if err := setXDPNetlink(t, v.Index, other.prog.FD(), c.flags); err != nil {
				t.Fatalf("netlink attach: %v", err)
			}
			p := load(t, Config{Queues: 1})
			_, err := p.Attach(v.Index, ModeAuto)
			wantErr(t, "Attach, auto", err, c.driverErrno, "another XDP program is attached", "ip link set dev "+v.Name+" "+c.suggestion)
			if err == nil {
				return
			}
			cmd := regexp.MustCompile("`ip (link set dev [^`]+)`").FindStringSubmatch(err.Error())
			if cmd == nil {
				t.Fatalf("no ip command in %q", err)
			}
			ip(t, strings.Fields(cmd[1])...)
			if got := xdpOn(t, v.Name); got != "" {
				t.Fatalf("after `ip %s`, ip link shows %q", cmd[1], got)
			}
			a, err := p.Attach(v.Index, ModeAuto)
			if err != nil || a.Mode != ModeDriver {
				t.Fatalf("Attach after `ip %s`: %v, %v", cmd[1], a, err)
			}
		})
	}
}

// TestAttachGeneric attaches to the loopback interface, whose driver has no
// native XDP: driver mode fails, auto falls back to generic mode.
func TestAttachGeneric(t *testing.T) {
	needRoot(t)
	ip(t, "link", "set", "lo", "up")
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	p := load(t, Config{Queues: 1})
	_, err = p.Attach(lo.Index, ModeDriver)
	wantErr(t, "driver mode on lo", err, unix.EOPNOTSUPP, "has no native XDP")
	a, err := p.Attach(lo.Index, ModeAuto)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("attached: %v", a)
	if a.Mode != ModeGeneric || !errors.Is(a.DriverErr, unix.EOPNOTSUPP) {
		t.Errorf("auto on lo: %+v, want generic mode because of EOPNOTSUPP", a)
	}
	if got := xdpOn(t, "lo"); got != "xdpgeneric "+programName {
		t.Errorf("ip link shows %q", got)
	}
}

// TestAttachMTU attaches to a veth pair with 9000-byte MTUs, more than one
// page holds: driver mode needs a program loaded with Frags.
func TestAttachMTU(t *testing.T) {
	v := newVeth(t, 1)
	ip(t, "link", "set", v.Name, "mtu", "9000")
	ip(t, "link", "set", peerOf(v.Name), "mtu", "9000")
	p := load(t, Config{Queues: 1})
	_, err := p.Attach(v.Index, ModeDriver)
	wantErr(t, "driver mode, MTU 9000", err, unix.ERANGE, "MTU", "Frags")
	a, err := p.Attach(v.Index, ModeAuto)
	if err != nil || a.Mode != ModeGeneric || !errors.Is(a.DriverErr, unix.ERANGE) {
		t.Errorf("auto, MTU 9000: %+v, %v; want generic mode because of ERANGE", a, err)
	}
	t.Logf("attached: %v", a)
	p.Close()

	f := load(t, Config{Queues: 1, Frags: true})
	a, err = f.Attach(v.Index, ModeAuto)
	if err != nil || a.Mode != ModeDriver {
		t.Errorf("auto with Frags, MTU 9000: %+v, %v; want driver mode", a, err)
	}
}

func TestAttachErrors(t *testing.T) {
	v := newVeth(t, 1)
	p := load(t, Config{Queues: 1})
	ip(t, "link", "set", v.Name, "down")
	_, err := p.Attach(v.Index, ModeAuto)
	wantErr(t, "interface down", err, unix.ENETDOWN, "is down", "ip link set dev "+v.Name+" up")
	ip(t, "link", "del", v.Name)
	_, err = p.Attach(v.Index, ModeAuto)
	wantErr(t, "interface gone", err, unix.ENODEV, "no interface")
}

// TestPermissions drops capabilities from the thread that loads the
// program, one set at a time, and checks that the error names the missing
// ones.
func TestPermissions(t *testing.T) {
	v := newVeth(t, 1)
	load(t, Config{Queues: 1}) // first, so cilium/ebpf's feature probes run with every capability
	for _, c := range []struct {
		drop []uint
		want string
	}{
		{[]uint{capBPF, capSysAdmin}, "gorxe needs CAP_BPF:"},
		{[]uint{capNetAdmin, capSysAdmin}, "gorxe needs CAP_NET_ADMIN:"},
		{[]uint{capBPF, capNetAdmin, capSysAdmin}, "gorxe needs CAP_BPF and CAP_NET_ADMIN:"},
	} {
		withoutCaps(t, c.drop, func() {
			p, err := Load(Config{Queues: 1})
			if err == nil {
				p.Close()
			}
			wantErr(t, "Load without "+capNames(c.drop), err, unix.EPERM, c.want)
		})
	}
	// Attaching a loaded program through a BPF link needs no capability
	// (Linux 6.18): holding the program's file descriptor is enough.
	p := load(t, Config{Queues: 1})
	withoutCaps(t, []uint{capBPF, capNetAdmin, capSysAdmin}, func() {
		if _, err := p.Attach(v.Index, ModeDriver); err != nil {
			t.Errorf("Attach without capabilities: %v", err)
		}
	})
	// Without CAP_SYS_ADMIN the BPF links cannot be listed, so the error
	// cannot tell a BPF link from a program attached over netlink.
	q := load(t, Config{Queues: 1})
	withoutCaps(t, []uint{capSysAdmin}, func() {
		_, err := q.Attach(v.Index, ModeDriver)
		wantErr(t, "Attach over a BPF link without CAP_SYS_ADMIN", err, unix.EBUSY, "xdpdrv off", "Can't replace active BPF XDP link")
	})
}

// withoutCaps runs fn on an OS thread that lacks the capabilities drop.
// The thread is never used again: it ends with its goroutine, locked.
func withoutCaps(t *testing.T, drop []uint, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			t.Error(err)
			return
		}
		for _, c := range drop {
			data[c/32].Effective &^= 1 << (c % 32)
		}
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			t.Error(err)
			return
		}
		fn()
	}()
	<-done
}

func capNames(cs []uint) string {
	names := map[uint]string{capBPF: "CAP_BPF", capNetAdmin: "CAP_NET_ADMIN", capSysAdmin: "CAP_SYS_ADMIN"}
	var s []string
	for _, c := range cs {
		s = append(s, names[c])
	}
	return strings.Join(s, ", ")
}

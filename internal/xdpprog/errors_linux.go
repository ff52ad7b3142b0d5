package xdpprog

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// errnoOf returns the errno inside err, or 0.
func errnoOf(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

// loadError explains a failure to create a map or load the program.
func loadError(what string, err, memlockErr error) error {
	var ve *ebpf.VerifierError
	switch e := errnoOf(err); {
	case errors.As(err, &ve):
		return fmt.Errorf("xdp: %s: the kernel's verifier refused it, a bug in gorxe: %w", what, err)
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("xdp: %s: the kernel has no XDP or AF_XDP support (needs Linux 4.18 or later with CONFIG_BPF_SYSCALL and CONFIG_XDP_SOCKETS): %w", what, err)
	case e == unix.EPERM:
		if missing := missingCaps(); missing != "" {
			return fmt.Errorf("xdp: %s: %w: gorxe needs %s: run it as root, or grant them (setcap, or systemd's AmbientCapabilities)", what, e, missing)
		}
		if memlockErr != nil {
			return fmt.Errorf("xdp: %s: %w: the locked-memory limit is too low and gorxe cannot raise it: run `ulimit -l unlimited` first, or grant CAP_SYS_RESOURCE", what, e)
		}
		return fmt.Errorf("xdp: %s: %w although gorxe has CAP_BPF and CAP_NET_ADMIN: kernel lockdown or a security module (SELinux, AppArmor) refuses BPF", what, e)
	case e != 0:
		return fmt.Errorf("xdp: %s: %w", what, e)
	}
	return fmt.Errorf("xdp: %s: %w", what, err)
}

// attachError explains a failure to attach to ifi in mode m.
func attachError(ifi *net.Interface, m Mode, err error) error {
	name := ifi.Name
	e := errnoOf(err)
	prefix := fmt.Sprintf("xdp: attaching to %s in %s mode", name, m)
	switch {
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("%s: the kernel has no BPF links, which gorxe attaches XDP with (needs Linux 5.9 or later): %w", prefix, err)
	case e == unix.EINVAL && !kernelAtLeast(5, 9):
		return fmt.Errorf("%s: %w: the kernel cannot attach XDP with a BPF link (needs Linux 5.9 or later)", prefix, e)
	case e == unix.EPERM:
		if missing := missingCaps(); missing != "" {
			return fmt.Errorf("%s: %w: gorxe needs %s", prefix, e, missing)
		}
		return fmt.Errorf("%s: %w", prefix, e)
	case e == unix.ENODEV:
		return fmt.Errorf("%s: %w: the interface is gone", prefix, e)
	case e == unix.EOPNOTSUPP && m == ModeDriver:
		return fmt.Errorf("%s: %w: the driver of %s has no native XDP; generic mode works on any interface", prefix, e, name)
	case e == unix.EOPNOTSUPP:
		return fmt.Errorf("%s: %w", prefix, e)
	case e == unix.ERANGE:
		return fmt.Errorf("%s: %w: the MTU of %s (%d), or of a veth's peer, is too large for XDP in driver mode without multi-buffer support: lower it, load with Frags, or use generic mode", prefix, e, name, ifi.MTU)
	case e == unix.EBUSY, e == unix.EEXIST:
		// EBUSY: a program is attached in this mode; EEXIST: one is
		// attached in the other mode, and the kernel allows only one
		// of driver and generic at a time (net/core/dev.c:
		// dev_xdp_attach).
		other := m
		if e == unix.EEXIST {
			other = ModeDriver
			if m == ModeDriver {
				other = ModeGeneric
			}
		}
		holder, listed := xdpLinkOn(ifi.Index)
		if holder != "" {
			return fmt.Errorf("%s: %w: another process holds %s's XDP hook with %s, until it exits; stop that process", prefix, e, name, holder)
		}
		remove := fmt.Sprintf("remove it with `ip link set dev %s %s off`", name, other.ipLinkKeyword())
		if !listed {
			remove += " (if ip says \"Can't replace active BPF XDP link\", another process holds it with a BPF link: stop that process)"
		}
		return fmt.Errorf("%s: %w: another XDP program is attached to %s in %s mode; %s", prefix, e, name, other, remove)
	case e != 0:
		return fmt.Errorf("%s: %w", prefix, e)
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// xdpLinkOn describes the BPF link that holds the XDP hook of the interface
// ifindex, "" if none does. listed is false if the links could not be
// listed, which needs CAP_SYS_ADMIN.
func xdpLinkOn(ifindex int) (holder string, listed bool) {
	var it link.Iterator
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil || info.Type != link.XDPType || info.XDP() == nil || int(info.XDP().Ifindex) != ifindex {
			continue
		}
		holder = fmt.Sprintf("BPF link %d (program %d", info.ID, info.Program)
		if prog, err := ebpf.NewProgramFromID(info.Program); err == nil {
			if pi, err := prog.Info(); err == nil && pi.Name != "" {
				holder += " " + strconv.Quote(pi.Name)
				if pi.Name == programName {
					holder += ", another gorxe"
				}
			}
			prog.Close()
		}
		return holder + ")", true
	}
	return "", it.Err() == nil
}

// Capabilities (include/uapi/linux/capability.h).
const (
	capNetAdmin = 12
	capSysAdmin = 21
	capBPF      = 39
)

// missingCaps names the capabilities the calling thread lacks to load and
// attach an XDP program with an XSKMAP, "" if it has them:
// kernel/bpf/syscall.c wants CAP_BPF for the program and the maps, and
// bpf_net_capable() (CAP_NET_ADMIN or CAP_SYS_ADMIN) for an XDP program and
// an XSKMAP; CAP_SYS_ADMIN stands for CAP_BPF too, and is the only one
// before Linux 5.8, which has no CAP_BPF.
func missingCaps() string {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return ""
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	if has(capSysAdmin) {
		return ""
	}
	if !kernelHasCapBPF() {
		return "CAP_SYS_ADMIN (this kernel predates CAP_BPF)"
	}
	var missing []string
	if !has(capBPF) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(capNetAdmin) {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	return strings.Join(missing, " and ")
}

func kernelHasCapBPF() bool {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return true
	}
	last, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err != nil || last >= capBPF
}

// kernelAtLeast reports whether the running kernel's release is at least
// major.minor; true if it cannot tell.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return true
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		return true
	}
	return ma > major || ma == major && mi >= minor
}

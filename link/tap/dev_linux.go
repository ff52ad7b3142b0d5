//go:build linux

package tap

import (
	"fmt"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/link/internal/pollfd"
)

// openTAP creates a non-persistent TAP device named name (the kernel picks
// "tapN" when name is empty) and returns its file and actual name, and
// whether the kernel hands it runs of UDP packets whole (gso.go). The
// file is non-blocking and kept out of the Go runtime's poller (package
// link/internal/pollfd says why); the device disappears when it is closed.
//
// This is what github.com/songgao/water does too, written out because
// water opens the fd without O_CLOEXEC (a child the process execs keeps the
// TAP alive after Close), leaks the fd when TUNSETIFF fails, and hides the
// file behind an io.ReadWriteCloser, while the rest of the setup (MTU,
// queue length, up, bridge) needs golang.org/x/sys/unix anyway.
func openTAP(name string) (f *pollfd.FD, actual string, whole bool, err error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", false, fmt.Errorf("tap: open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, "", false, fmt.Errorf("tap: interface name %q: %w", name, err)
	}
	// Each frame behind a virtio-net header (gso.go).
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, "", false, fmt.Errorf("tap: TUNSETIFF %q: %w", name, err)
	}
	// Runs of UDP packets handed over whole, where the kernel can (Linux
	// 6.2); else no offload at all, and the kernel cuts and checksums
	// what it hands over.
	whole = unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, tunFCsum|tunFUSO4|tunFUSO6) == nil
	if !whole {
		if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, 0); err != nil {
			unix.Close(fd)
			return nil, "", false, fmt.Errorf("tap: TUNSETOFFLOAD %q: %w", name, err)
		}
	}
	if f, err = pollfd.New(fd); err != nil {
		return nil, "", false, fmt.Errorf("tap: %w", err)
	}
	return f, ifr.Name(), whole, nil
}

// configure sets the TAP's MTU and transmit queue length (the ring of
// frames the kernel queues for gorxe to read), keeps the kernel from giving
// it IPv6 addresses, brings it up and attaches it to bridge if one is named.
func configure(name string, mtu, txQueueLen int, bridge string) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("tap: control socket: %w", err)
	}
	defer unix.Close(s)
	ioctl := func(req uint, what string, set func(*unix.Ifreq)) (*unix.Ifreq, error) {
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return nil, err
		}
		if set != nil {
			set(ifr)
		}
		if err := unix.IoctlIfreq(s, req, ifr); err != nil {
			return nil, fmt.Errorf("tap: %s %s: %w", what, name, err)
		}
		return ifr, nil
	}
	if _, err := ioctl(unix.SIOCSIFMTU, "set MTU of", func(r *unix.Ifreq) { r.SetUint32(uint32(mtu)) }); err != nil {
		return err
	}
	if _, err := ioctl(unix.SIOCSIFTXQLEN, "set queue length of", func(r *unix.Ifreq) { r.SetUint32(uint32(txQueueLen)) }); err != nil {
		return err
	}
	// gorxe is the host behind the TAP; the kernel side of it has no
	// address. IPv4 never configures one by itself, IPv6 would add a
	// link-local address and send DAD, router and MLD traffic. A kernel
	// without IPv6 has no such file, and nothing to disable.
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+name+"/disable_ipv6", []byte("1"), 0); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("tap: disable IPv6 on %s: %w", name, err)
	}
	ifr, err := ioctl(unix.SIOCGIFFLAGS, "get flags of", nil)
	if err != nil {
		return err
	}
	flags := ifr.Uint16() | unix.IFF_UP
	if _, err := ioctl(unix.SIOCSIFFLAGS, "bring up", func(r *unix.Ifreq) { r.SetUint16(flags) }); err != nil {
		return err
	}
	if bridge == "" {
		return nil
	}
	ifr, err = ioctl(unix.SIOCGIFINDEX, "get index of", nil)
	if err != nil {
		return err
	}
	index := ifr.Uint32()
	br, err := unix.NewIfreq(bridge)
	if err != nil {
		return fmt.Errorf("tap: bridge name %q: %w", bridge, err)
	}
	br.SetUint32(index)
	if err := unix.IoctlIfreq(s, unix.SIOCBRADDIF, br); err != nil {
		return fmt.Errorf("tap: attach %s to bridge %s: %w", name, bridge, err)
	}
	return nil
}

// statsHandle returns a netlink handle in the calling thread's network
// namespace, the TAP's, and the TAP's interface index, for reading its
// statistics later from any thread.
func statsHandle(name string) (*netlink.Handle, int, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, 0, fmt.Errorf("tap: netlink: %w", err)
	}
	nl, err := h.LinkByName(name)
	if err != nil {
		h.Close()
		return nil, 0, fmt.Errorf("tap: netlink: %s: %w", name, err)
	}
	return h, nl.Attrs().Index, nil
}

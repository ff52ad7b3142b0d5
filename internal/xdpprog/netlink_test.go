package xdpprog

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// setXDPNetlink attaches the XDP program progFD to the interface ifindex
// the old way, with an RTM_SETLINK netlink message carrying IFLA_XDP (what
// `ip link set dev IFACE xdpdrv/xdpgeneric` does), and returns the kernel's
// errno. A program attached so stays until someone removes it; the tests
// use it to stand for another tool's program.
func setXDPNetlink(t testing.TB, ifindex, progFD int, flags uint32) error {
	t.Helper()
	s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(s)

	attr := func(typ uint16, payload []byte) []byte {
		b := make([]byte, unix.SizeofRtAttr, unix.SizeofRtAttr+len(payload)+3)
		binary.NativeEndian.PutUint16(b[0:2], uint16(unix.SizeofRtAttr+len(payload)))
		binary.NativeEndian.PutUint16(b[2:4], typ)
		b = append(b, payload...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	u32 := func(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
	xdp := append(attr(unix.IFLA_XDP_FD, u32(uint32(int32(progFD)))), attr(unix.IFLA_XDP_FLAGS, u32(flags))...)

	msg := make([]byte, unix.SizeofNlMsghdr+unix.SizeofIfInfomsg)
	ifi := (*unix.IfInfomsg)(unsafe.Pointer(&msg[unix.SizeofNlMsghdr]))
	ifi.Family = unix.AF_UNSPEC
	ifi.Index = int32(ifindex)
	msg = append(msg, attr(unix.IFLA_XDP|unix.NLA_F_NESTED, xdp)...)
	h := (*unix.NlMsghdr)(unsafe.Pointer(&msg[0]))
	h.Len = uint32(len(msg))
	h.Type = unix.RTM_SETLINK
	h.Flags = unix.NLM_F_REQUEST | unix.NLM_F_ACK
	h.Seq = 1
	if err := unix.Sendto(s, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(s, buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n < unix.SizeofNlMsghdr+4 || (*unix.NlMsghdr)(unsafe.Pointer(&buf[0])).Type != unix.NLMSG_ERROR {
		t.Fatalf("netlink: unexpected answer of %d bytes", n)
	}
	if e := int32(binary.NativeEndian.Uint32(buf[unix.SizeofNlMsghdr:])); e != 0 {
		return unix.Errno(-e)
	}
	return nil
}

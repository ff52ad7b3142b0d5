package xdpprog

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// newXSK returns an AF_XDP socket with a UMEM and its fill, completion and
// RX rings (64 entries each) set up, bound to queue of the interface
// ifindex unless ifindex is 0; closed in cleanup. Its rings are never
// mapped: the tests need a socket the XSKMAP takes and the kernel delivers
// to, and read what arrived from its statistics (see xskStats).
func newXSK(t testing.TB, ifindex, queue int) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("AF_XDP socket: %v", err)
	}
	umem, err := unix.Mmap(-1, 0, 64*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unix.Close(fd)
		unix.Munmap(umem)
	})
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&umem[0]))), Len: uint64(len(umem)), Size: 4096}
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_UMEM_REG,
		uintptr(unsafe.Pointer(&reg)), unsafe.Sizeof(reg), 0); e != 0 {
		t.Fatalf("XDP_UMEM_REG: %v", e)
	}
	for _, ring := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, ring, 64); err != nil {
			t.Fatalf("AF_XDP ring %d: %v", ring, err)
		}
	}
	if ifindex != 0 {
		sa := &unix.SockaddrXDP{Flags: unix.XDP_COPY, Ifindex: uint32(ifindex), QueueID: uint32(queue)}
		if err := unix.Bind(fd, sa); err != nil {
			t.Fatalf("binding AF_XDP socket to ifindex %d queue %d: %v", ifindex, queue, err)
		}
	}
	return fd
}

// xskStats returns the socket's XDP_STATISTICS.
func xskStats(t testing.TB, fd int) unix.XDPStatistics {
	t.Helper()
	var s unix.XDPStatistics
	n := uint32(unsafe.Sizeof(s))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&s)), uintptr(unsafe.Pointer(&n)), 0); e != 0 {
		t.Fatalf("XDP_STATISTICS: %v", e)
	}
	return s
}

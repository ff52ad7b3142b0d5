package pages

import (
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

var pageSize = uintptr(os.Getpagesize())

// span returns the whole pages b touches, from a page-aligned start, as
// madvise and mincore want them: all mapped, as b's first and last bytes
// are. b is not empty.
func span(b []byte) (start, length uintptr) {
	start = uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	end := start + uintptr(len(b))
	start &^= pageSize - 1
	return start, end - start
}

func populate(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	start, length := span(b)
	_, _, errno := unix.Syscall(unix.SYS_MADVISE, start, length, unix.MADV_POPULATE_WRITE)
	runtime.KeepAlive(b)
	if errno != 0 {
		return os.NewSyscallError("madvise MADV_POPULATE_WRITE", errno)
	}
	return nil
}

func resident(b []byte) (present, pages int, err error) {
	if len(b) == 0 {
		return 0, 0, nil
	}
	start, length := span(b)
	vec := make([]byte, (length+pageSize-1)/pageSize)
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, start, length, uintptr(unsafe.Pointer(&vec[0])))
	runtime.KeepAlive(b)
	if errno != 0 {
		return 0, len(vec), os.NewSyscallError("mincore", errno)
	}
	for _, v := range vec {
		present += int(v & 1)
	}
	return present, len(vec), nil
}

func memory() uint64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}

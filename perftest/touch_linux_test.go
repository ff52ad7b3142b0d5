//go:build linux

package perftest

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestBuffersPresent: a side's buffers have every page present before a
// run (touch), as perftest's filled buffers and rxe's pinned memory do,
// so that the run's first messages do not fault them in. 8 MiB messages
// take buffers fresh from the kernel, whose pages no one has touched.
func TestBuffersPresent(t *testing.T) {
	dev, _ := memDevices(t)
	p := Params{Test: WriteBW, Size: 8 << 20}
	p.Defaults()
	s, err := NewSide(dev, &p, p.Size)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := s.qps[0].buf
	// mincore takes a page-aligned start.
	start := (uintptr(unsafe.Pointer(&b[0])) + uintptr(pageSize) - 1) &^ uintptr(pageSize-1)
	skip := int(start - uintptr(unsafe.Pointer(&b[0])))
	aligned := b[skip : skip+(len(b)-skip)/pageSize*pageSize]
	vec := make([]byte, len(aligned)/pageSize)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&aligned[0])), uintptr(len(aligned)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore: %v", e)
	}
	absent := 0
	for _, v := range vec {
		if v&1 == 0 {
			absent++
		}
	}
	if absent != 0 {
		t.Fatalf("%d of the buffer's %d pages not present after NewSide", absent, len(vec))
	}
}

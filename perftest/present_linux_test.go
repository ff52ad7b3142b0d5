//go:build linux

package perftest

import (
	"testing"

	"github.com/gorxe/gorxe/internal/pages"
	"github.com/gorxe/gorxe/rnic"
)

// TestBuffersPresent: a side's buffers have every page present before a
// run, as perftest's filled buffers and rxe's pinned memory do (RegMR
// populates what it registers), so that the run's first messages do not
// fault them in. 8 MiB messages take buffers fresh from the kernel, whose
// pages no one has touched.
func TestBuffersPresent(t *testing.T) {
	dev, _ := memDevices(t, rnic.Config{})
	p := Params{Test: WriteBW, Size: 8 << 20}
	p.Defaults()
	s, err := NewSide(dev, &p, p.Size, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	present, n, err := pages.Resident(s.qps[0].buf)
	if err != nil {
		t.Fatal(err)
	}
	if present != n {
		t.Fatalf("%d of the buffer's %d pages not present after NewSide", n-present, n)
	}
}

package rnic_test

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/internal/pages"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/rnic"
)

// TestRegMRPopulates registers memory fresh from the kernel, a few of its
// pages written: after RegMR every page is present, as rxe's registration
// pins them, and what was written is still there; memory over the
// largest region RegMR populates stays as it was.
func TestRegMRPopulates(t *testing.T) {
	a, _ := newPair(t, pairOpts{})
	const size = 4 << 20
	m := freshMemory(t, size)
	want := make([]byte, size)
	for i := 0; i < size; i += 1 << 18 {
		m[i+5], want[i+5] = byte(i>>18)|0x80, byte(i>>18)|0x80
	}
	if present, n, err := pages.Resident(m); err != nil || present >= n {
		t.Fatalf("before RegMR: %d of %d pages present, %v; want some absent", present, n, err)
	}
	region, err := a.dev.RegMR(a.pd, m, mr.LocalWrite|mr.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer region.Deregister()
	present, n, err := pages.Resident(m)
	if err != nil {
		t.Fatal(err)
	}
	if present != n {
		t.Errorf("after RegMR: %d of %d pages present, want all", present, n)
	}
	if !bytes.Equal(m, want) {
		t.Error("RegMR changed what the region held")
	}

	// A region larger than RegMR populates is registered as it is.
	rnic.SetPopulateMax(t, size/2)
	big := freshMemory(t, size)
	region, err = a.dev.RegMR(a.pd, big, mr.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer region.Deregister()
	if present, n, err := pages.Resident(big); err != nil || present != 0 {
		t.Errorf("a region over the limit: %d of %d pages present after RegMR (%v), want none", present, n, err)
	}
}

// freshMemory maps size bytes straight from the kernel, none of its pages
// present yet, unmapped when the test ends.
func freshMemory(t *testing.T, size int) []byte {
	t.Helper()
	m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return m
}

package pages

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"
)

// present returns how many of the pages m spans are present.
func present(t *testing.T, m []byte) int {
	t.Helper()
	n, _, err := Resident(m)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func mapped(t *testing.T, pages int) []byte {
	t.Helper()
	m, err := unix.Mmap(-1, 0, pages*int(pageSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return m
}

// TestPopulate maps fresh anonymous memory, none of it present, and
// populates a range that starts and ends inside pages: every page the
// range touches becomes present, the pages outside it do not.
func TestPopulate(t *testing.T) {
	const n = 64
	m := mapped(t, n)
	if r := present(t, m); r != 0 {
		t.Fatalf("%d of %d fresh pages present before Populate", r, n)
	}
	ps := int(pageSize)
	b := m[ps+100 : 9*ps-100] // touches pages 1 to 8
	if err := Populate(b); err != nil {
		t.Fatalf("Populate: %v", err)
	}
	if r := present(t, m[ps:9*ps]); r != 8 {
		t.Errorf("%d of the 8 pages the range touches present, want all", r)
	}
	if r := present(t, m[:ps]) + present(t, m[9*ps:]); r != 0 {
		t.Errorf("%d pages outside the range present, want none", r)
	}
}

// TestPopulateKeepsContents populates memory already written, partly:
// what was written stays, the rest reads zero.
func TestPopulateKeepsContents(t *testing.T) {
	m := mapped(t, 16)
	want := make([]byte, len(m))
	for i := 0; i < len(m); i += 3 * int(pageSize) {
		m[i], m[i+7] = byte(i>>12)|1, 0xa5
		want[i], want[i+7] = m[i], m[i+7]
	}
	if err := Populate(m); err != nil {
		t.Fatalf("Populate: %v", err)
	}
	if !bytes.Equal(m, want) {
		t.Error("Populate changed what the memory held")
	}
	if err := Populate(nil); err != nil {
		t.Errorf("Populate(nil): %v", err)
	}
}

// TestMemory: the machine's memory is told, and is at least what this
// process has mapped.
func TestMemory(t *testing.T) {
	m := Memory()
	if m < 64<<20 {
		t.Fatalf("Memory() = %d bytes, want the machine's memory", m)
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		t.Fatal(err)
	}
	if free := uint64(si.Freeram) * uint64(si.Unit); free > m {
		t.Errorf("free memory %d over Memory() %d", free, m)
	}
}

// Package pages makes memory present before it is first used.
//
// A NIC's driver pins the memory it is given: registering a region with
// the kernel's rxe, or with a hardware NIC, faults in and locks every
// page of it, so the first packets that reach a page find it there. Go
// memory fresh from the heap is not: each page is faulted in the first
// time something writes to it, a fault that costs a microsecond on a
// host and far more under qemu's emulation (a huge page is zeroed whole).
// Left to the data path, those faults land in the first window of a
// transfer, all at once, where they stretch the answer that the peer's
// ACK timeout is waiting for.
package pages

// Populate makes every page that b spans present and writable, without
// changing what b holds, where the system can (Linux 5.14 and later:
// madvise(2) MADV_POPULATE_WRITE); elsewhere it does nothing and returns
// the error that says why. Pages are not locked: the kernel may still
// reclaim them, as it would the pages of any process under pressure.
func Populate(b []byte) error { return populate(b) }

// Resident returns how many of the pages b spans are present in memory,
// and how many it spans (mincore(2) where the system has it; elsewhere an
// error). Tests use it to see that memory was populated.
func Resident(b []byte) (present, pages int, err error) { return resident(b) }

// Memory returns the machine's memory in bytes, or 0 where it cannot
// tell (sysinfo(2) on Linux).
func Memory() uint64 { return memory() }

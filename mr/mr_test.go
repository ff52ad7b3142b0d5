package mr

import (
	"bytes"
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

const allAccess = LocalWrite | RemoteWrite | RemoteRead | RemoteAtomic

func mustRegister(t testing.TB, tab *Table, pd *PD, buf []byte, iova uint64, access Access) *MR {
	t.Helper()
	m, err := tab.Register(pd, buf, iova, access)
	if err != nil {
		t.Fatalf("Register(%d bytes, iova %#x, %v): %v", len(buf), iova, access, err)
	}
	return m
}

func TestAccessString(t *testing.T) {
	for _, tc := range []struct {
		a    Access
		want string
	}{
		{0, "0"},
		{LocalWrite, "LOCAL_WRITE"},
		{LocalWrite | RemoteRead, "LOCAL_WRITE|REMOTE_READ"},
		{allAccess, "LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC"},
		{RemoteAtomic | 0x30, "REMOTE_ATOMIC|0x30"},
		{0x100, "0x100"},
	} {
		if got := tc.a.String(); got != tc.want {
			t.Errorf("Access(%#x).String() = %q, want %q", uint32(tc.a), got, tc.want)
		}
	}
}

func TestAccessValuesMatchRdmaCore(t *testing.T) {
	// enum ibv_access_flags, libibverbs/verbs.h.
	if LocalWrite != 1 || RemoteWrite != 2 || RemoteRead != 4 || RemoteAtomic != 8 {
		t.Fatal("access bits differ from ibv_access_flags")
	}
	if LocalRead.Remote() || LocalWrite.Remote() || !RemoteRead.Remote() || !(LocalWrite | RemoteAtomic).Remote() {
		t.Fatal("Access.Remote misclassifies")
	}
}

func TestRegisterErrors(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	other := NewTable().AllocPD()
	dead := tab.AllocPD()
	if err := dead.Dealloc(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)

	for _, tc := range []struct {
		name   string
		pd     *PD
		buf    []byte
		iova   uint64
		access Access
		want   error
	}{
		{"nil pd", nil, buf, 0, LocalWrite, ErrBadPD},
		{"zero PD value", &PD{}, buf, 0, LocalWrite, ErrBadPD},
		{"pd of another table", other, buf, 0, LocalWrite, ErrBadPD},
		{"deallocated pd", dead, buf, 0, LocalWrite, ErrBadPD},
		{"remote write without local write", pd, buf, 0, RemoteWrite, ErrInvalidAccess},
		{"remote atomic without local write", pd, buf, 0, RemoteAtomic | RemoteRead, ErrInvalidAccess},
		{"unknown bit", pd, buf, 0, LocalWrite | 1<<4, ErrInvalidAccess},
		{"iova+len overflows", pd, buf, math.MaxUint64 - 10, LocalWrite, ErrBounds},
		{"iova+len wraps to 0", pd, buf, math.MaxUint64 - 63, LocalWrite, ErrBounds},
		{"atomic iova not congruent to address", pd, buf, 0x1004, allAccess, ErrMisaligned},
		{"atomic on odd slice with aligned iova", pd, buf[1:], 0x1000, allAccess, ErrMisaligned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := tab.Register(tc.pd, tc.buf, tc.iova, tc.access)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Register = %v, %v; want %v", m, err, tc.want)
			}
			if m != nil {
				t.Fatalf("Register returned a region with error %v", err)
			}
		})
	}
	if n := tab.Len(); n != 0 {
		t.Fatalf("failed registrations left %d regions", n)
	}
}

func TestRegisterAccepts(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	buf := make([]byte, 64)
	for _, tc := range []struct {
		name   string
		buf    []byte
		iova   uint64
		access Access
	}{
		{"no rights", buf, 0, 0},
		{"remote read only", buf, 0, RemoteRead},
		{"everything", buf, 0, allAccess},
		{"zero length", nil, 0x1000, LocalWrite},
		{"empty non-nil", buf[:0], 0, allAccess},
		{"ends at 2^64-1", buf, math.MaxUint64 - 64, LocalWrite},
		// iova congruent to the address mod 8: atomics stay aligned.
		{"atomic on odd slice with odd iova", buf[1:], 0x1001, allAccess},
		{"atomic with iova = address", buf[1:], 0, allAccess},
		{"non-atomic with any iova", buf[1:], 0x1000, LocalWrite | RemoteWrite},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mustRegister(t, tab, pd, tc.buf, tc.iova, tc.access)
			want := tc.iova
			if want == 0 {
				want = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(tc.buf))))
			}
			if m.IOVA() != want || m.Len() != uint64(len(tc.buf)) || m.Access() != tc.access || m.PD() != pd {
				t.Errorf("got %v pd %p, want iova %#x len %d access %v pd %p", m, m.PD(), want, len(tc.buf), tc.access, pd)
			}
			if m.LKey() == 0 || m.LKey() != m.RKey() {
				t.Errorf("lkey %v rkey %v", m.LKey(), m.RKey())
			}
			if err := m.Deregister(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestRegisterDefaultIOVAIsAddress(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	buf := make([]byte, 128)
	m := mustRegister(t, tab, pd, buf, 0, LocalWrite|RemoteWrite)
	addr := uint64(uintptr(unsafe.Pointer(&buf[0])))
	if m.IOVA() != addr {
		t.Fatalf("IOVA = %#x, want &buf[0] = %#x", m.IOVA(), addr)
	}
	// A peer writing to the raw virtual address of buf[100] reaches it.
	got, off, err := tab.Lookup(m.RKey(), pd, addr+100, 4, RemoteWrite)
	if err != nil || got != m || off != 100 {
		t.Fatalf("Lookup = %v, %d, %v", got, off, err)
	}
	if err := m.WriteAt(addr+100, []byte("gorx")); err != nil {
		t.Fatal(err)
	}
	if string(buf[100:104]) != "gorx" {
		t.Fatalf("buf[100:104] = %q", buf[100:104])
	}
}

// lookupFixture registers a set of regions that TestLookup probes.
type lookupFixture struct {
	tab                   *Table
	pd, pd2               *PD
	full, local, ro, nil0 *MR
	empty                 *MR
	deadKey               Key
}

const fixIOVA = 0x10000
const fixLen = 4096

func newLookupFixture(t *testing.T) *lookupFixture {
	f := &lookupFixture{tab: NewTable()}
	f.pd = f.tab.AllocPD()
	f.pd2 = f.tab.AllocPD()
	f.full = mustRegister(t, f.tab, f.pd, make([]byte, fixLen), fixIOVA, allAccess)
	f.local = mustRegister(t, f.tab, f.pd, make([]byte, fixLen), fixIOVA, LocalWrite)
	f.ro = mustRegister(t, f.tab, f.pd, make([]byte, fixLen), fixIOVA, RemoteRead)
	f.nil0 = mustRegister(t, f.tab, f.pd, make([]byte, fixLen), fixIOVA, 0)
	f.empty = mustRegister(t, f.tab, f.pd, nil, fixIOVA, allAccess)
	dead := mustRegister(t, f.tab, f.pd, make([]byte, fixLen), fixIOVA, allAccess)
	f.deadKey = dead.RKey()
	if err := dead.Deregister(); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestLookup(t *testing.T) {
	f := newLookupFixture(t)
	unknown := Key(1)
	for unknown == f.full.LKey() || unknown == f.local.LKey() || unknown == f.ro.LKey() ||
		unknown == f.nil0.LKey() || unknown == f.empty.LKey() || unknown == f.deadKey {
		unknown++
	}
	const end = fixIOVA + fixLen

	for _, tc := range []struct {
		name    string
		key     Key
		pd      *PD
		iova    uint64
		length  uint64
		need    Access
		want    error
		wantOff uint64
	}{
		// Keys.
		{"unknown key", unknown, f.pd, fixIOVA, 1, LocalRead, ErrInvalidKey, 0},
		{"key 0", 0, f.pd, fixIOVA, 1, LocalRead, ErrInvalidKey, 0},
		{"deregistered key", f.deadKey, f.pd, fixIOVA, 1, LocalRead, ErrInvalidKey, 0},
		// Protection domains.
		{"other pd", f.full.RKey(), f.pd2, fixIOVA, 1, RemoteRead, ErrPDMismatch, 0},
		{"nil pd", f.full.RKey(), nil, fixIOVA, 1, RemoteRead, ErrPDMismatch, 0},
		// Rights, one missing at a time.
		{"local read of no-rights region", f.nil0.LKey(), f.pd, fixIOVA, 8, LocalRead, nil, 0},
		{"local write without LOCAL_WRITE", f.nil0.LKey(), f.pd, fixIOVA, 8, LocalWrite, ErrAccess, 0},
		{"local write without LOCAL_WRITE (remote read region)", f.ro.LKey(), f.pd, fixIOVA, 8, LocalWrite, ErrAccess, 0},
		{"remote write without REMOTE_WRITE", f.local.RKey(), f.pd, fixIOVA, 8, RemoteWrite, ErrAccess, 0},
		{"remote read without REMOTE_READ", f.local.RKey(), f.pd, fixIOVA, 8, RemoteRead, ErrAccess, 0},
		{"remote atomic without REMOTE_ATOMIC", f.local.RKey(), f.pd, fixIOVA, 8, RemoteAtomic, ErrAccess, 0},
		{"remote write on read-only region", f.ro.RKey(), f.pd, fixIOVA, 8, RemoteWrite, ErrAccess, 0},
		{"unknown right", f.full.RKey(), f.pd, fixIOVA, 8, 1 << 4, ErrAccess, 0},
		{"local write", f.local.LKey(), f.pd, fixIOVA, 8, LocalWrite, nil, 0},
		{"remote read", f.ro.RKey(), f.pd, fixIOVA + 8, 8, RemoteRead, nil, 8},
		{"remote write", f.full.RKey(), f.pd, fixIOVA, 8, RemoteWrite, nil, 0},
		{"remote atomic", f.full.RKey(), f.pd, fixIOVA + 16, 8, RemoteAtomic, nil, 16},
		{"two rights at once", f.full.RKey(), f.pd, fixIOVA, 8, RemoteRead | RemoteWrite, nil, 0},
		// Bounds.
		{"whole region", f.full.RKey(), f.pd, fixIOVA, fixLen, RemoteRead, nil, 0},
		{"one byte before start", f.full.RKey(), f.pd, fixIOVA - 1, 1, RemoteRead, ErrBounds, 0},
		{"starts before, ends inside", f.full.RKey(), f.pd, fixIOVA - 1, 2, RemoteRead, ErrBounds, 0},
		{"first byte", f.full.RKey(), f.pd, fixIOVA, 1, RemoteRead, nil, 0},
		{"last byte", f.full.RKey(), f.pd, end - 1, 1, RemoteRead, nil, fixLen - 1},
		{"one byte past end", f.full.RKey(), f.pd, end, 1, RemoteRead, ErrBounds, 0},
		{"last byte plus one", f.full.RKey(), f.pd, end - 1, 2, RemoteRead, ErrBounds, 0},
		{"whole region plus one", f.full.RKey(), f.pd, fixIOVA, fixLen + 1, RemoteRead, ErrBounds, 0},
		{"far beyond", f.full.RKey(), f.pd, 1 << 40, 1, RemoteRead, ErrBounds, 0},
		{"iova+length overflows", f.full.RKey(), f.pd, fixIOVA + 8, math.MaxUint64, RemoteRead, ErrBounds, 0},
		{"iova+length overflows to inside", f.full.RKey(), f.pd, fixIOVA + 8, math.MaxUint64 - 7, RemoteRead, ErrBounds, 0},
		{"iova max", f.full.RKey(), f.pd, math.MaxUint64, 1, RemoteRead, ErrBounds, 0},
		// Zero length.
		{"zero length at start", f.full.RKey(), f.pd, fixIOVA, 0, RemoteWrite, nil, 0},
		{"zero length at end", f.full.RKey(), f.pd, end, 0, RemoteWrite, nil, fixLen},
		{"zero length past end", f.full.RKey(), f.pd, end + 1, 0, RemoteWrite, ErrBounds, 0},
		{"zero length before start", f.full.RKey(), f.pd, fixIOVA - 1, 0, RemoteWrite, ErrBounds, 0},
		{"zero-length region, zero length", f.empty.RKey(), f.pd, fixIOVA, 0, RemoteWrite, nil, 0},
		{"zero-length region, one byte", f.empty.RKey(), f.pd, fixIOVA, 1, RemoteWrite, ErrBounds, 0},
		{"zero-length region, after", f.empty.RKey(), f.pd, fixIOVA + 1, 0, RemoteWrite, ErrBounds, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, off, err := f.tab.Lookup(tc.key, tc.pd, tc.iova, tc.length, tc.need)
			if err != tc.want { // sentinels are returned unwrapped
				t.Fatalf("Lookup = %v, %d, %v; want error %v", m, off, err, tc.want)
			}
			if err != nil {
				if m != nil || off != 0 {
					t.Fatalf("Lookup returned %v, %d with error", m, off)
				}
				return
			}
			if m == nil || m.RKey() != tc.key || off != tc.wantOff {
				t.Fatalf("Lookup = %v, %d; want key %v offset %d", m, off, tc.key, tc.wantOff)
			}
		})
	}
}

func TestReadWriteAt(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	buf := make([]byte, 16)
	const iova = 0x4000
	m := mustRegister(t, tab, pd, buf, iova, LocalWrite)

	if err := m.WriteAt(iova+4, []byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteAt(iova+12, []byte{5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	want := []byte{0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0, 5, 6, 7, 8}
	if !bytes.Equal(buf, want) {
		t.Fatalf("buf = %v, want %v", buf, want)
	}
	got := make([]byte, 16)
	if err := m.ReadAt(iova, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadAt = %v, %v", got, err)
	}
	if err := m.Peek(iova+6, got[:3]); err != nil || !bytes.Equal(got[:3], want[6:9]) {
		t.Fatalf("Peek = %v, %v", got[:3], err)
	}

	// Out of range: nothing is copied either way.
	for _, tc := range []struct {
		name string
		iova uint64
		n    int
	}{
		{"before", iova - 1, 1},
		{"straddles start", iova - 1, 2},
		{"straddles end", iova + 15, 2},
		{"past end", iova + 16, 1},
		{"longer than region", iova, 17},
		{"overflow", math.MaxUint64 - 2, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := bytes.Repeat([]byte{0xee}, tc.n)
			if err := m.WriteAt(tc.iova, src); err != ErrBounds {
				t.Errorf("WriteAt = %v, want ErrBounds", err)
			}
			if !bytes.Equal(buf, want) {
				t.Errorf("failed WriteAt changed buf to %v", buf)
			}
			dst := bytes.Repeat([]byte{0xee}, tc.n)
			if err := m.ReadAt(tc.iova, dst); err != ErrBounds {
				t.Errorf("ReadAt = %v, want ErrBounds", err)
			}
			if !bytes.Equal(dst, src) {
				t.Errorf("failed ReadAt changed dst to %v", dst)
			}
			if err := m.Peek(tc.iova, dst); err != ErrBounds || !bytes.Equal(dst, src) {
				t.Errorf("Peek = %v, dst %v; want ErrBounds, dst untouched", err, dst)
			}
		})
	}
	// Zero-length at the end is fine.
	if err := m.WriteAt(iova+16, nil); err != nil {
		t.Errorf("zero-length WriteAt at end: %v", err)
	}
	if err := m.ReadAt(iova+16, nil); err != nil {
		t.Errorf("zero-length ReadAt at end: %v", err)
	}

	// A region without LOCAL_WRITE can be read but never written.
	ro := mustRegister(t, tab, pd, buf, iova, RemoteRead)
	if err := ro.WriteAt(iova, []byte{9}); err != ErrAccess {
		t.Errorf("WriteAt on read-only region = %v, want ErrAccess", err)
	}
	if err := ro.ReadAt(iova, got[:1]); err != nil {
		t.Errorf("ReadAt on read-only region = %v", err)
	}
}

func TestDeregister(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	buf := make([]byte, 64)
	m := mustRegister(t, tab, pd, buf, 0, allAccess)
	key := m.RKey()
	if tab.Len() != 1 {
		t.Fatalf("Len = %d", tab.Len())
	}
	if err := pd.Dealloc(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Dealloc with a region = %v, want ErrBusy", err)
	}
	if err := m.Deregister(); err != nil {
		t.Fatal(err)
	}
	if tab.Len() != 0 {
		t.Fatalf("Len after Deregister = %d", tab.Len())
	}
	for _, need := range []Access{LocalRead, LocalWrite, RemoteRead, RemoteWrite, RemoteAtomic} {
		if _, _, err := tab.Lookup(key, pd, m.IOVA(), 8, need); err != ErrInvalidKey {
			t.Errorf("Lookup(%v) after Deregister = %v", need, err)
		}
	}
	if err := m.WriteAt(m.IOVA(), []byte{1}); err != ErrInvalidKey {
		t.Errorf("WriteAt after Deregister = %v", err)
	}
	if err := m.ReadAt(m.IOVA(), make([]byte, 1)); err != ErrInvalidKey {
		t.Errorf("ReadAt after Deregister = %v", err)
	}
	if _, err := m.FetchAndAdd(m.IOVA(), 1); err != ErrInvalidKey {
		t.Errorf("FetchAndAdd after Deregister = %v", err)
	}
	if _, err := m.CompareAndSwap(m.IOVA(), 0, 1); err != ErrInvalidKey {
		t.Errorf("CompareAndSwap after Deregister = %v", err)
	}
	if !bytes.Equal(buf, make([]byte, 64)) {
		t.Errorf("buf changed after Deregister: %v", buf)
	}
	if err := m.Deregister(); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("second Deregister = %v, want ErrInvalidKey", err)
	}
	if err := pd.Dealloc(); err != nil {
		t.Fatalf("Dealloc of empty PD = %v", err)
	}
	if err := pd.Dealloc(); !errors.Is(err, ErrBadPD) {
		t.Fatalf("second Dealloc = %v, want ErrBadPD", err)
	}
	var nilPD *PD
	if err := nilPD.Dealloc(); !errors.Is(err, ErrBadPD) {
		t.Fatalf("nil Dealloc = %v, want ErrBadPD", err)
	}
	if _, err := tab.Register(pd, buf, 0, LocalWrite); !errors.Is(err, ErrBadPD) {
		t.Fatalf("Register on deallocated PD = %v", err)
	}
}

// TestDeregisterFencesAccesses checks the guarantee the application relies
// on to reuse memory: once Deregister returns, no write lands in it, even
// from writers that resolved the key before.
func TestDeregisterFencesAccesses(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	buf := make([]byte, 4096)
	m := mustRegister(t, tab, pd, buf, 0, allAccess)

	var ready, wg sync.WaitGroup
	var writes atomic.Int64
	for g := range 8 {
		ready.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Alternate contents, so a write after Deregister would show.
			srcs := [2][]byte{bytes.Repeat([]byte{byte(2*g + 1)}, 512), bytes.Repeat([]byte{byte(2*g + 2)}, 512)}
			mr, off, err := tab.Lookup(m.RKey(), pd, m.IOVA(), 4096, RemoteWrite)
			ready.Done()
			if err != nil {
				t.Error(err)
				return
			}
			for i := 0; ; i++ {
				if err := mr.WriteAt(mr.IOVA()+off+uint64(g)*512, srcs[i%2][:i%512+1]); err != nil {
					if err != ErrInvalidKey {
						t.Error(err)
					}
					return
				}
				writes.Add(1)
			}
		}()
	}
	ready.Wait()
	for writes.Load() < 1000 {
		runtime.Gosched()
	}
	if err := m.Deregister(); err != nil {
		t.Fatal(err)
	}
	snapshot := bytes.Clone(buf)
	wg.Wait()
	if !bytes.Equal(buf, snapshot) {
		t.Fatal("memory changed after Deregister returned")
	}
}

func TestKeysUnpredictable(t *testing.T) {
	const n = 10000
	tab := NewTable()
	pd := tab.AllocPD()
	buf := make([]byte, 8)
	keys := make([]Key, n)
	seen := make(map[Key]bool, n)
	for i := range keys {
		m := mustRegister(t, tab, pd, buf, 0, LocalWrite)
		k := m.LKey()
		if k == 0 {
			t.Fatal("key 0")
		}
		if seen[k] {
			t.Fatalf("key %v issued twice among live regions", k)
		}
		seen[k] = true
		keys[i] = k
	}
	// No constant stride, nor a few repeating ones: differences between
	// consecutive keys are nearly all distinct.
	strides := make(map[uint32]int)
	ascending := 0
	for i := 1; i < n; i++ {
		strides[uint32(keys[i]-keys[i-1])]++
		if keys[i] > keys[i-1] {
			ascending++
		}
	}
	if len(strides) < n*99/100 {
		t.Errorf("only %d distinct strides among %d keys", len(strides), n)
	}
	if ascending < n*45/100 || ascending > n*55/100 {
		t.Errorf("%d of %d consecutive keys ascend; want about half", ascending, n)
	}
	// Every bit is set in about half of the keys.
	for bit := range 32 {
		ones := 0
		for _, k := range keys {
			ones += int(k>>bit) & 1
		}
		if ones < n*45/100 || ones > n*55/100 {
			t.Errorf("bit %d set in %d of %d keys", bit, ones, n)
		}
	}
	// A second table starts from an unrelated key.
	tab2 := NewTable()
	k2 := mustRegister(t, tab2, tab2.AllocPD(), buf, 0, 0).LKey()
	if k2 == keys[0] {
		t.Errorf("two tables issued the same first key %v", k2)
	}
}

func TestKeyString(t *testing.T) {
	if got := Key(0x1a2b).String(); got != "0x00001a2b" {
		t.Errorf("Key.String = %q", got)
	}
	tab := NewTable()
	m := mustRegister(t, tab, tab.AllocPD(), nil, 0x1000, LocalWrite|RemoteRead)
	if s := m.String(); !strings.Contains(s, "iova=0x1000") || !strings.Contains(s, "LOCAL_WRITE|REMOTE_READ") {
		t.Errorf("MR.String = %q", s)
	}
}

// TestConcurrentTable registers, looks up, moves data and deregisters from
// many goroutines at once; run with -race.
func TestConcurrentTable(t *testing.T) {
	tab := NewTable()
	pds := []*PD{tab.AllocPD(), tab.AllocPD()}
	const workers = 16
	const rounds = 300

	var wg sync.WaitGroup
	var live sync.Map // Key -> *MR some worker has registered
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pd := pds[w%2]
			buf := make([]byte, 256)
			src := make([]byte, 64)
			for i := range rounds {
				m, err := tab.Register(pd, buf, 0, allAccess)
				if err != nil {
					t.Error(err)
					return
				}
				live.Store(m.RKey(), m)
				got, off, err := tab.Lookup(m.RKey(), pd, m.IOVA()+64, 64, RemoteWrite)
				if err != nil || got != m || off != 64 {
					t.Errorf("Lookup of own region = %v, %d, %v", got, off, err)
					return
				}
				if err := got.WriteAt(m.IOVA()+off, src); err != nil {
					t.Error(err)
				}
				if _, err := got.FetchAndAdd(m.IOVA(), 1); err != nil {
					t.Error(err)
				}
				// Probe other workers' keys: any outcome but a wrong
				// region is fine, as they come and go.
				live.Range(func(k, v any) bool {
					key, want := k.(Key), v.(*MR)
					other, _, err := tab.Lookup(key, pd, want.IOVA(), 8, LocalRead)
					switch {
					case err == nil && other != want:
						t.Errorf("Lookup(%v) returned region %v", key, other)
					case err == nil && want.PD() != pd:
						t.Errorf("Lookup(%v) crossed protection domains", key)
					case err == ErrPDMismatch && want.PD() == pd:
						t.Errorf("Lookup(%v) refused its own protection domain", key)
					case err != nil && err != ErrInvalidKey && err != ErrPDMismatch:
						t.Errorf("Lookup(%v) = %v", key, err)
					}
					return i%4 != 0
				})
				live.Delete(m.RKey())
				if err := m.Deregister(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if n := tab.Len(); n != 0 {
		t.Fatalf("%d regions left", n)
	}
}

// TestHotPathAllocatesNothing guards the per-packet path in ordinary test
// runs; the benchmarks report the same.
func TestHotPathAllocatesNothing(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	m := mustRegister(t, tab, pd, make([]byte, 8192), 0, allAccess)
	payload := make([]byte, 4096)
	if n := testing.AllocsPerRun(1000, func() {
		r, off, err := tab.Lookup(m.RKey(), pd, m.IOVA()+64, 4096, RemoteWrite)
		if err != nil {
			panic(err)
		}
		r.WriteAt(r.IOVA()+off, payload)
		r.ReadAt(r.IOVA()+off, payload)
		r.FetchAndAdd(r.IOVA()+8, 1)
		r.CompareAndSwap(r.IOVA()+8, 0, 1)
		tab.Lookup(m.RKey()+1, pd, 0, 0, 0) // error paths too
		r.WriteAt(0, payload)
	}); n != 0 {
		t.Fatalf("hot path allocates %v times per run", n)
	}
}

func TestWritesCounts(t *testing.T) {
	tab := NewTable()
	pd := tab.AllocPD()
	m := mustRegister(t, tab, pd, make([]byte, 64), 0x1000, LocalWrite|RemoteAtomic)
	if m.Writes() != 0 {
		t.Fatalf("fresh region has %d writes", m.Writes())
	}
	if err := m.WriteAt(0x1000, []byte{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.FetchAndAdd(0x1008, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CompareAndSwap(0x1008, 1, 2); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteAt(0x1040, []byte{1}); err == nil {
		t.Fatal("write past the end succeeded")
	}
	if m.Writes() != 3 {
		t.Fatalf("%d writes counted, want 3", m.Writes())
	}
}

func TestWaitWrite(t *testing.T) {
	tab := NewTable()
	m := mustRegister(t, tab, tab.AllocPD(), make([]byte, 64), 0x1000, LocalWrite)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := m.WaitWrite(ctx, m.Writes()); err == nil {
		t.Fatal("WaitWrite returned with no write")
	}
	done := make(chan uint64)
	go func() {
		w, _ := m.WaitWrite(context.Background(), 0)
		done <- w
	}()
	time.Sleep(time.Millisecond)
	if err := m.WriteAt(0x1000, []byte{7}); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-done:
		if w != 1 {
			t.Fatalf("count %d after one write", w)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("WaitWrite missed the write")
	}
}

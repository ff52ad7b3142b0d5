//go:build linux

package xsk

import (
	"errors"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fakeSocket is a Socket whose rings are fake rings in ordinary memory
// and whose descriptor is one end of a datagram socket pair, so that
// every kick (sendto) and wakeup (recvfrom) is visible: a kick arrives as
// an empty datagram at peer. kernel holds the kernel's side of each ring.
type fakeSocket struct {
	*Socket
	peer   int
	kernel struct {
		fill *Consumer[uint64]
		comp *Producer[uint64]
		rx   *Producer[Desc]
		tx   *Consumer[Desc]
	}
	fillMem, compMem *fakeRing[uint64]
	rxMem, txMem     *fakeRing[Desc]
}

func newFakeSocket(t *testing.T, size uint32) *fakeSocket {
	t.Helper()
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeSocket{peer: sp[1]}
	f.fillMem, f.compMem = newFakeRing[uint64](size, 0), newFakeRing[uint64](size, 0)
	f.rxMem, f.txMem = newFakeRing[Desc](size, 0), newFakeRing[Desc](size, 0)
	f.Socket = &Socket{
		umem: &UMEM{frameSize: 4096}, fd: sp[0], efd: efd, kickTries: 1,
		fill: *f.fillMem.producer(size), comp: *f.compMem.consumer(size),
		rx: *f.rxMem.consumer(size), tx: *f.txMem.producer(size),
	}
	f.kernel.fill, f.kernel.comp = f.fillMem.consumer(size), f.compMem.producer(size)
	f.kernel.rx, f.kernel.tx = f.rxMem.producer(size), f.txMem.consumer(size)
	t.Cleanup(func() { f.Close(); unix.Close(sp[1]) })
	return f
}

// kicks returns how many kicks arrived at the peer since the last call.
func (f *fakeSocket) kicks() int {
	n := 0
	var b [1]byte
	for {
		if _, _, err := unix.Recvfrom(f.peer, b[:], unix.MSG_DONTWAIT); err != nil {
			return n
		}
		n++
	}
}

// kernelTakes has the kernel take n descriptors off the TX ring and
// complete them.
func (f *fakeSocket) kernelTakes(t *testing.T, n uint32) {
	t.Helper()
	first, got := f.kernel.tx.Peek(n)
	if got != n {
		t.Fatalf("kernel found %d descriptors on the TX ring, want %d", got, n)
	}
	cf, cn := f.kernel.comp.Reserve(n)
	for i := range cn {
		f.kernel.comp.Set(cf+i, f.kernel.tx.Get(first+i).Addr)
	}
	f.kernel.tx.Release(n)
	f.kernel.comp.Submit(cn)
}

// TestDescLayout checks that Desc is struct xdp_desc.
func TestDescLayout(t *testing.T) {
	var d Desc
	var k unix.XDPDesc
	if unsafe.Sizeof(d) != unsafe.Sizeof(k) || unsafe.Offsetof(d.Len) != unsafe.Offsetof(k.Len) || unsafe.Offsetof(d.Options) != unsafe.Offsetof(k.Options) {
		t.Fatalf("Desc is not laid out as struct xdp_desc")
	}
}

func descs(lens ...int) []Desc {
	d := make([]Desc, len(lens))
	for i, l := range lens {
		d[i] = Desc{Addr: uint64(i) * 4096, Len: uint32(max(l, -l))}
		if l < 0 { // a negative length marks a descriptor the packet continues after
			d[i].Options = OptionMore
		}
	}
	return d
}

// TestKickOnlyWhenAsked checks that Transmit and Complete make a sendto
// system call only while the TX ring's need-wakeup flag is set and the
// kernel has descriptors to take.
func TestKickOnlyWhenAsked(t *testing.T) {
	f := newFakeSocket(t, 8)
	if n, err := f.Transmit(descs(64, 64, 64)); n != 3 || err != nil {
		t.Fatalf("Transmit = %d, %v", n, err)
	}
	if k := f.kicks(); k != 0 {
		t.Fatalf("%d kicks without the need-wakeup flag", k)
	}
	f.txMem.mem.flags = flagNeedWakeup
	if n, err := f.Transmit(descs(64)); n != 1 || err != nil {
		t.Fatalf("Transmit = %d, %v", n, err)
	}
	if k := f.kicks(); k != 1 {
		t.Fatalf("%d kicks with the need-wakeup flag set, want 1", k)
	}
	// Complete kicks while the kernel has not taken everything ...
	var addrs [8]uint64
	if n, _ := f.Complete(addrs[:]); n != 0 || f.kicks() != 1 {
		t.Fatalf("Complete with 4 descriptors waiting: %d completions, want 0 and a kick", n)
	}
	// ... and not once it has.
	f.kernelTakes(t, 4)
	if n, _ := f.Complete(addrs[:]); n != 4 || addrs[2] != 2*4096 {
		t.Fatalf("Complete = %d, %v", n, addrs[:n])
	}
	if k := f.kicks(); k != 0 {
		t.Fatalf("%d kicks with an empty TX ring", k)
	}
	if got := f.c.kicks.Load(); got != 2 {
		t.Fatalf("kick counter %d, want 2", got)
	}
	if f.c.txPackets.Load() != 4 || f.c.txBytes.Load() != 256 {
		t.Fatalf("counted %d packets, %d bytes; want 4, 256", f.c.txPackets.Load(), f.c.txBytes.Load())
	}
}

// TestTransmitWholePackets checks that Transmit never leaves the end of a
// multi-buffer packet off the ring.
func TestTransmitWholePackets(t *testing.T) {
	f := newFakeSocket(t, 8)
	if n, _ := f.Transmit(descs(1, 1, 1, 1, 1)); n != 5 {
		t.Fatalf("Transmit of 5 = %d", n)
	}
	// 3 free: the first 2-descriptor packet goes, the next does not fit.
	if n, _ := f.Transmit(descs(-4096, 100, -4096, 200)); n != 2 {
		t.Fatalf("Transmit of two 2-descriptor packets into 3 free entries = %d, want 2", n)
	}
	// 1 free: a 2-descriptor packet does not go at all.
	if n, _ := f.Transmit(descs(-4096, 100)); n != 0 {
		t.Fatalf("Transmit of a 2-descriptor packet into 1 free entry = %d, want 0", n)
	}
	// A batch cut in the middle of a packet keeps the cut packet back.
	f.kernelTakes(t, 7)
	if n, _ := f.Transmit(descs(1, -4096)); n != 1 {
		t.Fatalf("Transmit of a packet and half of the next = %d, want 1", n)
	}
	if got := f.c.txPackets.Load(); got != 7 {
		t.Fatalf("counted %d packets, want 7", got)
	}
}

// TestReceiveWholePackets checks that Receive returns whole multi-buffer
// packets, unless one packet has more descriptors than the batch.
func TestReceiveWholePackets(t *testing.T) {
	f := newFakeSocket(t, 16)
	k := f.kernel.rx
	first, _ := k.Reserve(7)
	for i, d := range descs(-3840, 330, 60, -3840, -3840, -3840, 10) {
		k.Set(first+uint32(i), d)
	}
	k.Submit(7)
	got := make([]Desc, 3)
	if n, _ := f.Receive(got); n != 3 || got[2].Len != 60 {
		t.Fatalf("Receive(3) = %d %v; want the first two packets", n, got[:n])
	}
	if n, _ := f.Receive(got[:2]); n != 2 || !got[1].More() {
		t.Fatalf("Receive(2) of a 4-descriptor packet = %d %v; want its first 2", n, got[:n])
	}
	if n, _ := f.Receive(got); n != 2 || got[1].More() || got[1].Len != 10 {
		t.Fatalf("Receive = %d %v; want the last 2 of the packet", n, got[:n])
	}
	if f.c.rxPackets.Load() != 3 || f.c.rxBytes.Load() != 3840*4+330+60+10 {
		t.Fatalf("counted %d packets, %d bytes", f.c.rxPackets.Load(), f.c.rxBytes.Load())
	}
}

// TestWakeRXOnlyWhenAsked checks that FillFrom and an empty Receive wake
// the driver only while the fill ring's need-wakeup flag is set, and that
// FillFrom fills no more than the ring holds.
func TestWakeRXOnlyWhenAsked(t *testing.T) {
	f := newFakeSocket(t, 8)
	fs := newFrameStack(20, 4096)
	for i := range 20 {
		fs.Push(uint64(i) * 4096)
	}
	if n, err := f.FillFrom(fs, 100); n != 8 || err != nil || fs.Len() != 12 {
		t.Fatalf("FillFrom into an 8-entry ring = %d, %v, %d left", n, err, fs.Len())
	}
	var got [4]Desc
	if n, _ := f.Receive(got[:]); n != 0 {
		t.Fatalf("Receive of an empty ring = %d", n)
	}
	if f.c.rxWakeups.Load() != 0 {
		t.Fatal("woke the driver without the need-wakeup flag")
	}
	first, n := f.kernel.fill.Peek(3)
	if n != 3 || f.kernel.fill.Get(first) != 19*4096 {
		t.Fatalf("kernel took %d fill entries, first %d", n, f.kernel.fill.Get(first))
	}
	f.kernel.fill.Release(3)
	f.fillMem.mem.flags = flagNeedWakeup
	if n, _ := f.Receive(got[:]); n != 0 || f.c.rxWakeups.Load() != 1 {
		t.Fatalf("empty Receive with the fill ring asking: %d wakeups, want 1", f.c.rxWakeups.Load())
	}
	if n, _ := f.Fill([]uint64{0, 4096, 8192, 12288}); n != 3 || f.c.rxWakeups.Load() != 2 {
		t.Fatalf("Fill of 4 into 3 free = %d with %d wakeups; want 3 and 2", n, f.c.rxWakeups.Load())
	}
}

// TestCloseFake checks that Close wakes Wait, and that every call after
// it returns ErrClosed.
func TestCloseFake(t *testing.T) {
	f := newFakeSocket(t, 8)
	done := make(chan error, 1)
	go func() {
		_, err := f.Wait(-1)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Wait after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake Wait")
	}
	var d [1]Desc
	var a [1]uint64
	for name, err := range map[string]error{
		"Close":    f.Close(),
		"Kick":     f.Kick(),
		"Transmit": second(f.Transmit(d[:])),
		"Receive":  second(f.Receive(d[:])),
		"Fill":     second(f.Fill(a[:])),
		"Complete": second(f.Complete(a[:])),
		"Wait":     second(f.Wait(0)),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

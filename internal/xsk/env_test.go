//go:build linux

package xsk_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gorxe/gorxe/internal/xsk"
)

// timeout bounds every wait for packets.
const timeout = 10 * time.Second

// needRoot skips t unless the test runs as root. As root nothing skips:
// a missing tool or kernel feature fails the test.
func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, veth pairs, XDP programs and AF_XDP sockets (CI runs as root)")
	}
}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// host is one end of a veth pair, alone in its network namespace.
type host struct {
	ns      string
	ifname  string
	ifindex int
	mac     net.HardwareAddr
	ip      netip.Addr
}

var seq atomic.Uint32

// newPair makes two namespaces joined by a veth pair whose ends have mtu
// and queues RX and TX queues each (veth otherwise gets one per CPU, and
// a socket bound to queue 0 would miss what lands on the others), with
// IPv4 addresses and static neighbors: no ARP, no IPv6, so that the only
// frames on the link are the test's.
func newPair(t testing.TB, mtu, queues int) (a, b *host) {
	t.Helper()
	needRoot(t)
	n := seq.Add(1)
	a = &host{ns: fmt.Sprintf("gxxsk-%d-%d-a", os.Getpid(), n), ifname: "xa"}
	b = &host{ns: fmt.Sprintf("gxxsk-%d-%d-b", os.Getpid(), n), ifname: "xb"}
	for i, h := range []*host{a, b} {
		run(t, "ip", "netns", "add", h.ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", h.ns).Run() })
		h.mac = net.HardwareAddr{0x02, 0, 0, byte(n >> 8), byte(n), byte(i + 1)}
		h.ip = netip.AddrFrom4([4]byte{10, 213, byte(n), byte(i + 1)})
	}
	q := fmt.Sprint(queues)
	run(t, "ip", "-n", a.ns, "link", "add", a.ifname, "address", a.mac.String(), "numtxqueues", q, "numrxqueues", q,
		"type", "veth", "peer", "name", b.ifname, "address", b.mac.String(), "numtxqueues", q, "numrxqueues", q, "netns", b.ns)
	for _, e := range []struct{ h, peer *host }{{a, b}, {b, a}} {
		ip := func(args ...string) { run(t, append([]string{"ip", "-n", e.h.ns}, args...)...) }
		ip("link", "set", "lo", "up")
		ip("link", "set", e.h.ifname, "mtu", fmt.Sprint(mtu), "addrgenmode", "none")
		ip("addr", "add", e.h.ip.String()+"/24", "dev", e.h.ifname)
		ip("link", "set", e.h.ifname, "up")
		ip("neigh", "replace", e.peer.ip.String(), "lladdr", e.peer.mac.String(), "dev", e.h.ifname, "nud", "permanent")
		e.h.do(t, func() error {
			ifi, err := net.InterfaceByName(e.h.ifname)
			if err == nil {
				e.h.ifindex = ifi.Index
			}
			return err
		})
	}
	return a, b
}

// do runs fn on an OS thread inside h's namespace. What fn creates there
// (sockets, XDP links) stays there, usable from any thread.
func (h *host) do(t testing.TB, fn func() error) {
	t.Helper()
	if err := h.try(fn); err != nil {
		t.Fatal(err)
	}
}

// try is do that returns fn's error.
func (h *host) try(fn func() error) error {
	target, err := unix.Open("/run/netns/"+h.ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(target)
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer unix.Close(orig)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		return err // the thread stays locked, and dies with this goroutine
	}
	runtime.UnlockOSThread()
	return ferr
}

// redirectProgram returns a minimal XDP program that redirects every
// frame to the socket of its RX queue in xsks, or passes it to the
// kernel's stack if that entry is empty:
//
//	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
//
// frags loads it with BPF_F_XDP_HAS_FRAGS, which a multi-buffer socket
// needs, and which veth needs for an MTU above about 3.5 KB.
func redirectProgram(t testing.TB, frags bool) (*ebpf.Program, *ebpf.Map) {
	t.Helper()
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: 16})
	if err != nil {
		t.Fatalf("XSKMAP: %v", err)
	}
	t.Cleanup(func() { xsks.Close() })
	spec := &ebpf.ProgramSpec{
		Type: ebpf.XDP,
		Instructions: asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, 16, asm.Word), // struct xdp_md's rx_queue_index
			asm.LoadMapPtr(asm.R1, xsks.FD()),
			asm.Mov.Imm(asm.R3, 2), // XDP_PASS
			asm.FnRedirectMap.Call(),
			asm.Return(),
		},
		License: "MIT",
	}
	if frags {
		spec.Flags = unix.BPF_F_XDP_HAS_FRAGS
	}
	prog, err := ebpf.NewProgram(spec)
	if err != nil {
		t.Fatalf("loading the XDP program: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog, xsks
}

// attachXDP attaches prog to the interface in driver (native) mode, which
// veth has, in the calling thread's namespace.
func attachXDP(prog *ebpf.Program, ifindex int) (link.Link, error) {
	return attachXDPMode(prog, ifindex, link.XDPDriverMode)
}

// attachXDPMode is attachXDP in the given mode.
func attachXDPMode(prog *ebpf.Program, ifindex int, mode link.XDPAttachFlags) (link.Link, error) {
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: mode})
	if err != nil {
		return nil, fmt.Errorf("attaching XDP to interface %d: %w", ifindex, err)
	}
	return l, nil
}

// endpoint is an AF_XDP socket on a host, with its UMEM's frames split
// in two stacks: rx for the fill ring, tx for sending.
type endpoint struct {
	h      *host
	umem   *xsk.UMEM
	sock   *xsk.Socket
	rx, tx *xsk.FrameStack
	xsks   *ebpf.Map // nil: no XDP program, the socket only sends
}

// open opens a socket on queue 0 of h with its own UMEM and fills its
// fill ring; with attach, it also attaches a redirect program in driver
// mode so that the socket receives everything h's interface does.
func open(t testing.TB, h *host, c xsk.Config, attach bool) *endpoint {
	t.Helper()
	var mode link.XDPAttachFlags
	if attach {
		mode = link.XDPDriverMode
	}
	return openMode(t, h, c, mode)
}

// openMode is open that attaches the program in the given mode, or not
// at all if mode is 0.
func openMode(t testing.TB, h *host, c xsk.Config, mode link.XDPAttachFlags) *endpoint {
	t.Helper()
	attach := mode != 0
	u, err := xsk.NewUMEM(xsk.UMEMConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	e := &endpoint{h: h, umem: u}
	var prog *ebpf.Program
	if attach {
		// A frags program serves single-buffer sockets too (the kernel
		// drops what does not fit a frame), and veth wants one above an
		// MTU of about 3.5 KB.
		prog, e.xsks = redirectProgram(t, true)
	}
	h.do(t, func() error {
		s, err := xsk.Open(u, h.ifindex, 0, c)
		if err != nil {
			return err
		}
		e.sock = s
		if !attach {
			return nil
		}
		if err := e.xsks.Put(uint32(0), uint32(s.FD())); err != nil {
			return fmt.Errorf("XSKMAP entry: %w", err)
		}
		l, err := attachXDPMode(prog, h.ifindex, mode)
		if err != nil {
			return err
		}
		t.Cleanup(func() { l.Close() })
		return nil
	})
	if e.sock.ZeroCopy() {
		t.Errorf("socket on veth is in zero-copy mode; veth has none")
	}
	// Copy mode, then, and the socket says why: asked for it, or the
	// driver refused zero-copy.
	zcErr := e.sock.ZeroCopyErr()
	if c.Mode == xsk.ModeCopy && zcErr != nil || c.Mode == xsk.ModeAuto && !errors.Is(zcErr, unix.EOPNOTSUPP) {
		t.Errorf("mode %v on veth: ZeroCopyErr %v", c.Mode, zcErr)
	}
	all := u.FreeFrames()
	e.rx = all.Split(all.Len() / 2)
	e.tx = all
	if _, err := e.sock.FillFrom(e.rx, e.rx.Len()); err != nil {
		t.Fatal(err)
	}
	return e
}

// udpFrame returns an Ethernet frame with an IPv4 UDP datagram from src
// to dst, with DF set and no UDP checksum (allowed over IPv4).
func udpFrame(src, dst *host, sport, dport uint16, payload []byte) []byte {
	b := make([]byte, 14+20+8+len(payload))
	copy(b[0:], dst.mac)
	copy(b[6:], src.mac)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	ip[8], ip[9] = 64, unix.IPPROTO_UDP
	s4, d4 := src.ip.As4(), dst.ip.As4()
	copy(ip[12:], s4[:])
	copy(ip[16:], d4[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := b[34:42]
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	copy(b[42:], payload)
	return b
}

// udpPayload returns the payload of frame if it is an IPv4 UDP datagram
// to port, or nil.
func udpPayload(frame []byte, port uint16) []byte {
	if len(frame) < 42 || binary.BigEndian.Uint16(frame[12:]) != 0x0800 || frame[14] != 0x45 || frame[23] != unix.IPPROTO_UDP ||
		binary.BigEndian.Uint16(frame[36:]) != port {
		return nil
	}
	n := int(binary.BigEndian.Uint16(frame[38:])) - 8
	if n < 0 || 42+n > len(frame) {
		return nil
	}
	return frame[42 : 42+n]
}

// payload returns the payload of test packet seq, of n bytes (at least
// 4): seq, then bytes that depend on seq and their offset.
func payload(seq uint32, n int) []byte {
	p := make([]byte, n)
	binary.BigEndian.PutUint32(p, seq)
	for i := 4; i < n; i++ {
		p[i] = byte(seq*7 + uint32(i))
	}
	return p
}

// checkPayload returns the sequence number of p, or an error if p is not
// a test payload.
func checkPayload(p []byte) (uint32, error) {
	if len(p) < 4 {
		return 0, fmt.Errorf("%d-byte payload", len(p))
	}
	seq := binary.BigEndian.Uint32(p)
	if !bytes.Equal(p, payload(seq, len(p))) {
		return seq, fmt.Errorf("payload of packet %d (%d bytes) corrupted", seq, len(p))
	}
	return seq, nil
}

// send transmits frames, each in as many descriptors as it takes whole
// frames of the UMEM, and returns once the kernel has completed them all.
func (e *endpoint) send(t testing.TB, frames [][]byte) {
	t.Helper()
	fs := int(e.umem.FrameSize())
	descs := make([]xsk.Desc, 0, 64)
	deadline := time.Now().Add(timeout)
	outstanding := 0
	flush := func() {
		for len(descs) > 0 {
			n, err := e.sock.Transmit(descs)
			if err != nil {
				t.Fatalf("Transmit: %v", err)
			}
			outstanding += n
			descs = append(descs[:0], descs[n:]...)
			if len(descs) > 0 {
				e.complete(t, &outstanding, deadline)
			}
		}
	}
	for _, f := range frames {
		need := (len(f) + fs - 1) / fs
		if len(descs)+need > cap(descs) {
			flush()
		}
		for e.tx.Len() < need {
			e.complete(t, &outstanding, deadline)
		}
		for off := 0; off < len(f); off += fs {
			addr, _ := e.tx.Pop()
			n := copy(e.umem.Frame(addr), f[off:])
			d := xsk.Desc{Addr: addr, Len: uint32(n)}
			if off+n < len(f) {
				d.Options = xsk.OptionMore
			}
			descs = append(descs, d)
		}
	}
	flush()
	for outstanding > 0 {
		e.complete(t, &outstanding, deadline)
	}
}

// complete takes sent frames back onto the tx stack, giving the kernel a
// moment if there are none.
func (e *endpoint) complete(t testing.TB, outstanding *int, deadline time.Time) {
	t.Helper()
	n, err := e.sock.CompleteTo(e.tx)
	if err != nil {
		t.Fatalf("CompleteTo: %v", err)
	}
	*outstanding -= n
	if n == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d frames not completed in %v", *outstanding, timeout)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// receive receives until it has n packets for which keep returns true,
// and returns them (copies, whole packets however many descriptors they
// took) and the descriptor count of each.
func (e *endpoint) receive(t testing.TB, n int, keep func([]byte) bool) (pkts [][]byte, ndesc []int) {
	t.Helper()
	descs := make([]xsk.Desc, 64)
	var cur []byte
	curDescs := 0
	deadline := time.Now().Add(timeout)
	for len(pkts) < n {
		k, err := e.sock.Receive(descs)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		for _, d := range descs[:k] {
			b := e.umem.Bytes(d)
			if b == nil {
				t.Fatalf("descriptor %+v outside the UMEM", d)
			}
			cur = append(cur, b...)
			curDescs++
			e.rx.Push(d.Addr)
			if d.More() {
				continue
			}
			if keep(cur) {
				pkts = append(pkts, cur)
				ndesc = append(ndesc, curDescs)
			}
			cur, curDescs = nil, 0
		}
		if _, err := e.sock.FillFrom(e.rx, e.rx.Len()); err != nil {
			t.Fatalf("FillFrom: %v", err)
		}
		if k == 0 {
			if time.Now().After(deadline) {
				st, _ := e.sock.Stats()
				t.Fatalf("received %d of %d packets in %v; stats %+v", len(pkts), n, timeout, st)
			}
			if _, err := e.sock.Wait(10 * time.Millisecond); err != nil {
				t.Fatalf("Wait: %v", err)
			}
		}
	}
	return pkts, ndesc
}

// udpConn opens a kernel UDP socket in h's namespace on port, with a
// large receive buffer.
func udpConn(t testing.TB, h *host, port uint16) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	h.do(t, func() (err error) {
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(h.ip, port)))
		if err != nil {
			return err
		}
		raw, err := c.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		err = raw.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
		})
		return errors.Join(err, serr)
	})
	t.Cleanup(func() { c.Close() })
	return c
}

package xdpprog

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// programName is the program's name in the kernel, as `ip link` and
// bpftool show it.
const programName = "gorxe_xdp"

// MaxQueues is the largest Config.Queues: more receive queues than any NIC
// has, and a bound on the XSKMAP's size.
const MaxQueues = 4096

var errClosed = errors.New("xdp: program closed")

// Config says what the program redirects.
type Config struct {
	// Port is the UDP destination port of the RoCE v2 frames to redirect;
	// 0 means DefaultPort (4791).
	Port uint16

	// Queues is the number of receive queues that may have an AF_XDP
	// socket: queues 0 to Queues-1. Frames on a queue at or above it go to
	// the kernel. It is the size of the XSKMAP.
	Queues int

	// Frags loads the program as able to see frames in several buffers
	// (BPF_F_XDP_HAS_FRAGS, Linux 5.18), which drivers, veth among them,
	// require before they attach in driver mode to an interface whose MTU
	// is larger than a page can hold. The program looks only at the first
	// buffer, which always holds the headers it reads; the AF_XDP sockets
	// then need XDP_USE_SG to receive such frames.
	Frags bool
}

// Mode is the place in the receive path where the program runs.
type Mode int

const (
	// ModeAuto tries ModeDriver, then ModeGeneric if the driver has no
	// XDP or refuses it for the interface (see Program.Attach).
	ModeAuto Mode = iota
	// ModeDriver runs the program in the driver, before the kernel makes
	// an skb (XDP_FLAGS_DRV_MODE, "xdpdrv" to ip link).
	ModeDriver
	// ModeGeneric runs it in the kernel's generic receive path, after the
	// skb is made: slower, but every interface has it (XDP_FLAGS_SKB_MODE,
	// "xdpgeneric").
	ModeGeneric
)

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeDriver:
		return "driver"
	case ModeGeneric:
		return "generic"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ipLinkKeyword is the word ip-link(8) uses for the mode.
func (m Mode) ipLinkKeyword() string {
	if m == ModeGeneric {
		return "xdpgeneric"
	}
	return "xdpdrv"
}

func (m Mode) flags() link.XDPAttachFlags {
	if m == ModeGeneric {
		return link.XDPGenericMode
	}
	return link.XDPDriverMode
}

// Stats are the program's counters, summed over CPUs. A device shows them
// as xdp_redirected, xdp_passed_no_socket, xdp_passed and
// xdp_passed_malformed.
type Stats struct {
	Redirected      uint64 // RoCE frames redirected to an AF_XDP socket
	PassedNoSocket  uint64 // RoCE frames passed to the kernel: no socket on their queue
	Passed          uint64 // frames passed to the kernel as not RoCE, or not parsed (see the package doc)
	PassedMalformed uint64 // frames passed to the kernel that end inside a header, or with a bad IP version or IHL
}

// Program is gorxe's XDP program, loaded, with its maps, and attached to at
// most one interface. Its methods may be called from any goroutine.
type Program struct {
	cfg      Config
	prog     *ebpf.Program
	xsks     *ebpf.Map
	counters *ebpf.Map

	mu       sync.Mutex
	link     link.Link
	attached Attachment
	closed   bool
}

// Load creates the program's maps and loads it into the kernel, without
// attaching it to any interface.
func Load(cfg Config) (*Program, error) {
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Queues < 1 || cfg.Queues > MaxQueues {
		return nil, fmt.Errorf("xdp: %d queues: want 1 to %d", cfg.Queues, MaxQueues)
	}
	// Before Linux 5.11 BPF memory counts against RLIMIT_MEMLOCK; raising
	// it needs CAP_SYS_RESOURCE. If that fails, loading may still fit.
	memlockErr := rlimit.RemoveMemlock()

	p := &Program{cfg: cfg}
	var err error
	p.counters, err = ebpf.NewMap(&ebpf.MapSpec{
		Name:       "gorxe_xdp_stats",
		Type:       ebpf.PerCPUArray,
		KeySize:    4,
		ValueSize:  8,
		MaxEntries: numStats,
	})
	if err != nil {
		return nil, loadError("creating the counters map", err, memlockErr)
	}
	p.xsks, err = ebpf.NewMap(&ebpf.MapSpec{
		Name:       "gorxe_xsks",
		Type:       ebpf.XSKMap,
		KeySize:    4,
		ValueSize:  4,
		MaxEntries: uint32(cfg.Queues),
	})
	if err != nil {
		p.counters.Close()
		return nil, loadError("creating the XSKMAP", err, memlockErr)
	}
	spec := &ebpf.ProgramSpec{
		Name:         programName,
		Type:         ebpf.XDP,
		Instructions: instructions(cfg.Port, p.xsks.FD(), p.counters.FD()),
		// No license: the program calls no GPL-only helper.
	}
	if cfg.Frags {
		spec.Flags = unix.BPF_F_XDP_HAS_FRAGS
	}
	p.prog, err = ebpf.NewProgram(spec)
	if err != nil {
		p.xsks.Close()
		p.counters.Close()
		return nil, loadError("loading the program", err, memlockErr)
	}
	return p, nil
}

// Attachment says where and how the program is attached.
type Attachment struct {
	Interface string // the interface's name
	Mode      Mode   // ModeDriver or ModeGeneric

	// DriverErr is why ModeAuto did not get driver mode, nil otherwise.
	DriverErr error
}

func (a Attachment) String() string {
	if a.Interface == "" {
		return "not attached"
	}
	s := a.Interface + " in " + a.Mode.String() + " mode"
	if a.DriverErr != nil {
		s += " (" + strings.TrimPrefix(a.DriverErr.Error(), "xdp: ") + ")"
	}
	return s
}

// Attach attaches the program to the interface with index ifindex, which
// must be up, in the given mode. ModeAuto tries driver mode, then generic
// mode if the driver has no XDP (EOPNOTSUPP) or refuses it for this
// interface (EINVAL, or ERANGE for an MTU too large), and says so in the
// Attachment. The attachment is a BPF link, which the kernel removes when
// gorxe exits.
func (p *Program) Attach(ifindex int, mode Mode) (Attachment, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Attachment{}, errClosed
	}
	if p.link != nil {
		return Attachment{}, fmt.Errorf("xdp: attach: already attached to %s", p.attached)
	}
	ifi, err := net.InterfaceByIndex(ifindex)
	if err != nil {
		return Attachment{}, fmt.Errorf("xdp: no interface with index %d: %w", ifindex, unix.ENODEV)
	}
	if ifi.Flags&net.FlagUp == 0 {
		return Attachment{}, fmt.Errorf("xdp: interface %s is down: bring it up with `ip link set dev %s up`: %w", ifi.Name, ifi.Name, unix.ENETDOWN)
	}
	attach := func(m Mode) (link.Link, error) {
		l, err := link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifindex, Flags: m.flags()})
		if err != nil {
			return nil, attachError(ifi, m, err)
		}
		return l, nil
	}
	a := Attachment{Interface: ifi.Name, Mode: mode}
	if mode == ModeAuto {
		a.Mode = ModeDriver
	}
	l, err := attach(a.Mode)
	if err != nil && mode == ModeAuto {
		switch errnoOf(err) {
		case unix.EOPNOTSUPP, unix.EINVAL, unix.ERANGE:
			a.Mode, a.DriverErr = ModeGeneric, err
			var gerr error
			if l, gerr = attach(ModeGeneric); gerr != nil {
				err = fmt.Errorf("%w; %s", err, strings.TrimPrefix(gerr.Error(), "xdp: "))
			} else {
				err = nil
			}
		}
	}
	if err != nil {
		return Attachment{}, err
	}
	p.link, p.attached = l, a
	return a, nil
}

// Attachment returns where and how the program is attached; its Interface
// is "" if it is not.
func (p *Program) Attachment() Attachment {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attached
}

// Register makes the AF_XDP socket xskFD the destination of RoCE frames
// arriving on queue, replacing any socket registered before. The socket must
// be bound to the same interface and queue, or the kernel drops the frames.
func (p *Program) Register(queue, xskFD int) error {
	if queue < 0 || queue >= p.cfg.Queues {
		return fmt.Errorf("xdp: register queue %d: the program was loaded for queues 0 to %d", queue, p.cfg.Queues-1)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	if err := p.xsks.Put(uint32(queue), uint32(xskFD)); err != nil {
		e := errnoOf(err)
		switch e {
		case unix.ENOTSOCK:
			return fmt.Errorf("xdp: register queue %d: fd %d is not a socket: %w", queue, xskFD, e)
		case unix.EBADF:
			return fmt.Errorf("xdp: register queue %d: %d is not an open file descriptor: %w", queue, xskFD, e)
		case unix.EOPNOTSUPP:
			return fmt.Errorf("xdp: register queue %d: fd %d is not an AF_XDP socket with its rings set up: %w", queue, xskFD, e)
		}
		return fmt.Errorf("xdp: register queue %d: %w", queue, err)
	}
	return nil
}

// Unregister removes queue's socket; its RoCE frames go to the kernel again.
// A queue with no socket is not an error.
func (p *Program) Unregister(queue int) error {
	if queue < 0 || queue >= p.cfg.Queues {
		return fmt.Errorf("xdp: unregister queue %d: the program was loaded for queues 0 to %d", queue, p.cfg.Queues-1)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	if err := p.xsks.Delete(uint32(queue)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("xdp: unregister queue %d: %w", queue, err)
	}
	return nil
}

// Stats returns the program's counters, summed over CPUs.
func (p *Program) Stats() (Stats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Stats{}, errClosed
	}
	var s [numStats]uint64
	var perCPU []uint64
	for i := range s {
		if err := p.counters.Lookup(uint32(i), &perCPU); err != nil {
			return Stats{}, fmt.Errorf("xdp: reading counters: %w", err)
		}
		for _, v := range perCPU {
			s[i] += v
		}
	}
	return Stats{
		Redirected:      s[statRedirected],
		PassedNoSocket:  s[statNoSocket],
		Passed:          s[statPassed],
		PassedMalformed: s[statMalformed],
	}, nil
}

// Close detaches the program and releases it and its maps. The kernel
// frees the program once nothing else holds it.
func (p *Program) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var err error
	if p.link != nil {
		if e := p.link.Close(); e != nil {
			err = fmt.Errorf("xdp: detaching from %s: %w", p.attached.Interface, e)
		}
		p.link, p.attached = nil, Attachment{}
	}
	p.prog.Close()
	p.xsks.Close()
	p.counters.Close()
	return err
}

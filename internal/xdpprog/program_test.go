package xdpprog

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"
)

// The program's tests run it on crafted frames with BPF_PROG_TEST_RUN. A
// RoCE frame's verdict is XDP_REDIRECT when an AF_XDP socket is registered
// for the frame's queue (the run does not deliver the frame; it returns the
// program's action) and XDP_PASS when none is.

// outcome is what the program does with a frame, and so which counter it
// adds one to.
type outcome int

const (
	redirected outcome = iota // XDP_REDIRECT, Stats.Redirected
	noSocket                  // XDP_PASS, Stats.PassedNoSocket
	passed                    // XDP_PASS, Stats.Passed
	malformed                 // XDP_PASS, Stats.PassedMalformed
)

func (o outcome) String() string {
	return [...]string{"redirected", "passed (no socket)", "passed", "passed (malformed)"}[o]
}

// xdpMD is struct xdp_md, the context BPF_PROG_TEST_RUN takes: Data is the
// length of the metadata in front of the frame, DataEnd the input's
// length, and RxQueueIndex needs IngressIfindex, an interface with that
// many receive queues.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// run runs the program once on frame and returns what it did, checking
// that the action and the one counter that moved agree.
func run(t testing.TB, p *Program, frame []byte, ctx *xdpMD) outcome {
	t.Helper()
	before, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	opts := &ebpf.RunOptions{Data: frame}
	if ctx != nil {
		opts.Context = *ctx
	}
	action, err := p.prog.Run(opts)
	if err != nil {
		t.Fatalf("running the program on %d bytes: %v", len(frame), err)
	}
	after, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	d := [...]uint64{
		after.Redirected - before.Redirected,
		after.PassedNoSocket - before.PassedNoSocket,
		after.Passed - before.Passed,
		after.PassedMalformed - before.PassedMalformed,
	}
	counted := -1
	for i, n := range d {
		switch {
		case n == 1 && counted < 0:
			counted = i
		case n != 0:
			t.Fatalf("counters moved by %v (redirected, no socket, passed, malformed); want one by 1", d)
		}
	}
	if counted < 0 {
		t.Fatalf("no counter moved")
	}
	o := outcome(counted)
	if want := uint32(xdpPass); o == redirected {
		want = xdpRedirect
		if action != want {
			t.Fatalf("action %d counted as %v", action, o)
		}
	} else if action != want {
		t.Fatalf("action %d counted as %v", action, o)
	}
	return o
}

type frameCase struct {
	name  string
	frame []byte
	want  outcome // with a socket registered for the frame's queue
}

func frameCases(t testing.TB) []frameCase {
	noDF := ipv4(layers.IPProtocolUDP)
	noDF.Flags = 0
	firstFrag := ipv4(layers.IPProtocolUDP)
	firstFrag.Flags = layers.IPv4MoreFragments
	laterFrag := ipv4(layers.IPProtocolUDP)
	laterFrag.Flags, laterFrag.FragOffset = 0, 1480/8
	options := ipv4(layers.IPProtocolUDP)
	options.Options = []layers.IPv4Option{{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}} // router alert
	fromRoCE := udp(49152)
	fromRoCE.SrcPort = DefaultPort
	hopByHop := &layers.IPv6HopByHop{Options: []*layers.IPv6HopByHopOption{{OptionType: 1, OptionData: make([]byte, 4)}}} // PadN to 8 bytes
	hopByHop.NextHeader = layers.IPProtocolUDP
	fragment := &layers.IPv6Fragment{NextHeader: layers.IPProtocolUDP, Identification: 7}
	tcp4 := &layers.TCP{SrcPort: 49152, DstPort: DefaultPort, SYN: true, Window: 64240}
	tcp6 := &layers.TCP{SrcPort: 49152, DstPort: DefaultPort, SYN: true, Window: 64240}

	v4, v6 := roce4(t, DefaultPort), roce6(t, DefaultPort)
	return []frameCase{
		{"RoCE/IPv4", v4, redirected},
		{"RoCE/IPv6", v6, redirected},
		{"RoCE/IPv4 without DF", frame(t, eth(layers.EthernetTypeIPv4), noDF, udp(DefaultPort), rocePayload), redirected},
		{"RoCE/IPv4 VLAN 100", roce4VLAN(t, 100), redirected},
		{"RoCE/IPv4 priority tag (VLAN 0)", roce4VLAN(t, 0), redirected},
		{"RoCE/IPv6 VLAN 4094", roce6VLAN(t, 4094), redirected},

		{"RoCE/IPv4 QinQ (802.1ad outer, 802.1Q inner)", frame(t, eth(layers.EthernetTypeQinQ), dot1q(10, layers.EthernetTypeDot1Q),
			dot1q(100, layers.EthernetTypeIPv4), ipv4(layers.IPProtocolUDP), udp(DefaultPort), rocePayload), passed},
		{"RoCE/IPv4 802.1ad tag alone", frame(t, eth(layers.EthernetTypeQinQ), dot1q(10, layers.EthernetTypeIPv4),
			ipv4(layers.IPProtocolUDP), udp(DefaultPort), rocePayload), passed},
		{"RoCE/IPv4 two 802.1Q tags", frame(t, eth(layers.EthernetTypeDot1Q), dot1q(10, layers.EthernetTypeDot1Q),
			dot1q(100, layers.EthernetTypeIPv4), ipv4(layers.IPProtocolUDP), udp(DefaultPort), rocePayload), passed},
		{"IPv4 first fragment (MF)", frame(t, eth(layers.EthernetTypeIPv4), firstFrag, udp(DefaultPort), rocePayload), passed},
		{"IPv4 later fragment (offset 1480)", frame(t, eth(layers.EthernetTypeIPv4), laterFrag, udp(DefaultPort), rocePayload), passed},
		{"IPv4 with options (IHL 6)", frame(t, eth(layers.EthernetTypeIPv4), options, udp(DefaultPort), rocePayload), passed},
		{"IPv4 IHL 4", patched(v4, ip4VerIHL, 0x44), malformed},
		{"IPv4 version 3", patched(v4, ip4VerIHL, 0x35), malformed},
		{"IPv4 version 6", patched(v4, ip4VerIHL, 0x65), malformed},
		{"IPv6 version 4", patched(v6, ip6Version, 0x40), malformed},
		{"UDP/IPv4 to 4792", roce4(t, DefaultPort+1), passed},
		{"UDP/IPv6 to 4792", roce6(t, DefaultPort+1), passed},
		{"UDP/IPv4 to 46866 (4791 byte-swapped)", roce4(t, 0xB712), passed},
		{"UDP/IPv4 to DNS", roce4(t, 53), passed},
		{"UDP/IPv4 from 4791", frame(t, eth(layers.EthernetTypeIPv4), ipv4(layers.IPProtocolUDP), fromRoCE, rocePayload), passed},
		{"TCP/IPv4 to 4791", frame(t, eth(layers.EthernetTypeIPv4), ipv4(layers.IPProtocolTCP), tcp4), passed},
		{"TCP/IPv6 to 4791", frame(t, eth(layers.EthernetTypeIPv6), ipv6(layers.IPProtocolTCP), tcp6), passed},
		{"ICMP echo", frame(t, eth(layers.EthernetTypeIPv4), ipv4(layers.IPProtocolICMPv4),
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0)}), passed},
		// Ethernet pads these two to 60 bytes; cut off, they end before
		// where a UDP header would.
		{"IPv4 IGMP, 38 bytes", frame(t, eth(layers.EthernetTypeIPv4), ipv4(layers.IPProtocolIGMP), gopacket.Payload{0x11, 0, 0xee, 0xff})[:ip4End+4], passed},
		{"ARP request", frame(t, eth(layers.EthernetTypeARP), &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
			HwAddressSize: 6, ProtAddressSize: 4, Operation: layers.ARPRequest,
			SourceHwAddress: macA, SourceProtAddress: ip4A, DstHwAddress: make([]byte, 6), DstProtAddress: ip4B}), passed},
		{"IPv6 neighbor solicitation", frame(t, eth(layers.EthernetTypeIPv6), ipv6(layers.IPProtocolICMPv6),
			&layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeNeighborSolicitation, 0)}, gopacket.Payload(make([]byte, 20))), passed},
		{"IPv6 no next header, 54 bytes", frame(t, eth(layers.EthernetTypeIPv6), ipv6(layers.IPProtocolNoNextHeader))[:ip6End], passed},
		{"RoCE/IPv6 after a hop-by-hop header", frame(t, eth(layers.EthernetTypeIPv6), ipv6(layers.IPProtocolIPv6HopByHop), hopByHop, udp(DefaultPort), rocePayload), passed},
		{"RoCE/IPv6 after a fragment header", frame(t, eth(layers.EthernetTypeIPv6), ipv6(layers.IPProtocolIPv6Fragment), fragment, udp(DefaultPort), rocePayload), passed},
		{"LLDP", frame(t, eth(layers.EthernetTypeLinkLayerDiscovery), gopacket.Payload(make([]byte, 46))), passed},
		{"IPv4 EtherType, no IP header", v4[:ethLen], malformed},
	}
}

func TestFrames(t *testing.T) {
	p := load(t, Config{Queues: 1})
	xsk := newXSK(t, 0, 0)
	for _, c := range frameCases(t) {
		t.Run(c.name, func(t *testing.T) {
			if err := p.Register(0, xsk); err != nil {
				t.Fatal(err)
			}
			if got := run(t, p, c.frame, nil); got != c.want {
				t.Errorf("with a socket on the queue: %v, want %v", got, c.want)
			}
			if err := p.Unregister(0); err != nil {
				t.Fatal(err)
			}
			want := c.want
			if want == redirected {
				want = noSocket
			}
			if got := run(t, p, c.frame, nil); got != want {
				t.Errorf("with no socket on the queue: %v, want %v", got, want)
			}
		})
	}
}

// TestTruncated cuts RoCE frames short at every length from 14 bytes that
// ends inside a header the program reads: each is passed to the kernel as
// malformed. Shorter frames cannot be tried (see TestTooShortForTestRun).
func TestTruncated(t *testing.T) {
	p := load(t, Config{Queues: 1})
	if err := p.Register(0, newXSK(t, 0, 0)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		frame []byte
		end   int // the end of the UDP header
	}{
		{"IPv4", roce4(t, DefaultPort), ip4End + udpLen},
		{"IPv6", roce6(t, DefaultPort), ip6End + udpLen},
		{"IPv4 VLAN", roce4VLAN(t, 100), vlanLen + ip4End + udpLen},
		{"IPv6 VLAN", roce6VLAN(t, 100), vlanLen + ip6End + udpLen},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := run(t, p, c.frame[:c.end], nil); got != redirected {
				t.Fatalf("cut after the UDP header: %v, want %v", got, redirected)
			}
			for n := ethLen; n < c.end; n++ {
				if got := run(t, p, c.frame[:n], nil); got != malformed {
					t.Errorf("cut to %d bytes: %v, want %v", n, got, malformed)
				}
			}
		})
	}
}

// TestTooShortForTestRun records that BPF_PROG_TEST_RUN (Linux 6.18)
// refuses a frame shorter than an Ethernet header, even behind metadata,
// so the program's first bounds check, which the verifier demands, cannot
// be run on a 13-byte frame here. Nor can such a frame reach the program
// through a veth: AF_PACKET pads a short frame to the 14-byte header
// (dev_validate_header), and real NICs drop runts.
func TestTooShortForTestRun(t *testing.T) {
	p := load(t, Config{Queues: 1})
	f := roce4(t, DefaultPort)[:ethLen-1]
	if _, err := p.prog.Run(&ebpf.RunOptions{Data: f}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("13-byte frame: %v, want EINVAL", err)
	}
	const meta = 16
	in := append(make([]byte, meta), f...)
	if _, err := p.prog.Run(&ebpf.RunOptions{Data: in, Context: xdpMD{Data: meta, DataEnd: uint32(len(in))}}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("13-byte frame after %d bytes of metadata: %v, want EINVAL", meta, err)
	}
}

func TestPort(t *testing.T) {
	p := load(t, Config{Port: 4792, Queues: 1})
	if err := p.Register(0, newXSK(t, 0, 0)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []frameCase{
		{"IPv4 to 4792", roce4(t, 4792), redirected},
		{"IPv6 to 4792", roce6(t, 4792), redirected},
		{"IPv4 to 4791", roce4(t, DefaultPort), passed},
		{"IPv6 to 4791", roce6(t, DefaultPort), passed},
	} {
		if got := run(t, p, c.frame, nil); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestQueues runs the program as if frames arrived on each receive queue of
// a veth with 4 of them, with sockets on queues 0 and 2 of a program
// loaded for 3: a frame goes to its own queue's socket, or to the kernel.
func TestQueues(t *testing.T) {
	p := load(t, Config{Queues: 3})
	ifi := newVeth(t, 4)
	xsk0, xsk2 := newXSK(t, 0, 0), newXSK(t, 0, 0)
	if err := p.Register(0, xsk0); err != nil {
		t.Fatal(err)
	}
	if err := p.Register(2, xsk2); err != nil {
		t.Fatal(err)
	}
	f := roce4(t, DefaultPort)
	for q, want := range []outcome{redirected, noSocket, redirected, noSocket} {
		got := run(t, p, f, &xdpMD{DataEnd: uint32(len(f)), IngressIfindex: uint32(ifi.Index), RxQueueIndex: uint32(q)})
		if got != want {
			t.Errorf("queue %d: %v, want %v", q, got, want)
		}
	}
}

func TestRegisterErrors(t *testing.T) {
	p := load(t, Config{Queues: 2})
	udpFD, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(udpFD)
	for _, c := range []struct {
		queue, fd int
		errno     unix.Errno
	}{
		{2, newXSK(t, 0, 0), 0},
		{-1, newXSK(t, 0, 0), 0},
		{0, udpFD, unix.EOPNOTSUPP},
		{0, 1 << 20, unix.EBADF},
	} {
		err := p.Register(c.queue, c.fd)
		t.Logf("Register(%d, %d): %v", c.queue, c.fd, err)
		if err == nil || c.errno != 0 && !errors.Is(err, c.errno) {
			t.Errorf("Register(%d, %d): %v, want an error wrapping %v", c.queue, c.fd, err, c.errno)
		}
	}
	if err := p.Unregister(1); err != nil {
		t.Errorf("Unregister of a queue with no socket: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	needRoot(t)
	for _, q := range []int{0, -1, MaxQueues + 1} {
		if p, err := Load(Config{Queues: q}); err == nil {
			p.Close()
			t.Errorf("Load with %d queues succeeded", q)
		} else {
			t.Log(err)
		}
	}
}

// TestInstructions shows the program, with its size, in the verbose log.
func TestInstructions(t *testing.T) {
	insns := instructions(DefaultPort, 3, 4)
	t.Logf("%d instructions (%d with the counters' part left out)", len(insns), len(instructions(DefaultPort, 3, -1)))
	t.Log("\n" + fmt.Sprint(insns))
}

package xdpprog

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket/layers"
)

// BenchmarkProgram measures what the program costs a frame, with
// BPF_PROG_TEST_RUN repeating it b.N times in the kernel: the program
// alone, not the redirect that follows it on a real receive path. The
// "nocount" variants leave out the counters, to show what they cost.
func BenchmarkProgram(b *testing.B) {
	p := load(b, Config{Queues: 1})
	if err := p.Register(0, newXSK(b, 0, 0)); err != nil {
		b.Fatal(err)
	}
	noCount, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "gorxe_xdp_nocnt",
		Type:         ebpf.XDP,
		Instructions: instructions(DefaultPort, p.xsks.FD(), -1),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { noCount.Close() })

	tcp := &layers.TCP{SrcPort: 49152, DstPort: 22, ACK: true, Window: 64240}
	frames := []struct {
		name  string
		frame []byte
	}{
		{"RoCE-IPv4", roce4(b, DefaultPort)},
		{"RoCE-IPv6", roce6(b, DefaultPort)},
		{"RoCE-IPv4-VLAN", roce4VLAN(b, 100)},
		{"UDP-IPv4-other-port", roce4(b, 53)},
		{"TCP-IPv4", frame(b, eth(layers.EthernetTypeIPv4), ipv4(layers.IPProtocolTCP), tcp)},
		{"ARP", frame(b, eth(layers.EthernetTypeARP), &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
			HwAddressSize: 6, ProtAddressSize: 4, Operation: layers.ARPRequest,
			SourceHwAddress: macA, SourceProtAddress: ip4A, DstHwAddress: make([]byte, 6), DstProtAddress: ip4B})},
	}
	for _, prog := range []struct {
		name string
		p    *ebpf.Program
	}{{"count", p.prog}, {"nocount", noCount}} {
		for _, f := range frames {
			b.Run(prog.name+"/"+f.name, func(b *testing.B) {
				_, per, err := prog.p.Benchmark(f.frame, b.N, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(per)/float64(time.Nanosecond), "ns/frame")
			})
		}
	}
	b.Run("count/RoCE-IPv4-no-socket", func(b *testing.B) {
		if err := p.Unregister(0); err != nil {
			b.Fatal(err)
		}
		_, per, err := p.prog.Benchmark(frames[0].frame, b.N, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(per)/float64(time.Nanosecond), "ns/frame")
	})
}

// Package capture reads the RoCE v2 packets of a pcap or pcapng capture,
// from any link type gopacket decodes, tunnels and uncut GSO datagrams
// included, and formats each as "gorxe decode" prints it. decode and
// explain both read captures through it.
package capture

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/cm"
	"github.com/gorxe/gorxe/wire/mad"
)

// Counts says what a capture held.
type Counts struct {
	RoCE      int `json:"roce_packets"` // UDP to the RoCE port, malformed ones included
	Other     int `json:"other_frames"` // everything else, skipped
	BadICRC   int `json:"bad_icrc"`
	Malformed int `json:"malformed"`               // RoCE packets wire.ParseIP rejected
	GSO       int `json:"gso_datagrams,omitempty"` // uncut UDP GSO datagrams, counted in RoCE as their packets
	Cut       int `json:"cut_short,omitempty"`     // packets the capture's snap length cut short: headers decoded, ICRC not checked
	Unread    int `json:"cut_unread,omitempty"`    // packets it cut too short to decode (ErrCutShort), not counted as malformed

	GSOPackets int `json:"-"` // the RoCE packets the GSO datagrams held

	// V1 counts the RoCE v1 frames among the others: EtherType 0x8915,
	// an InfiniBand GRH and a BTH with no IP or UDP header between. gorxe,
	// like rxe, speaks only RoCE v2 and reads none of them; a program that
	// chose a RoCE v1 GID index on a NIC that offers both sends them.
	V1 int `json:"roce_v1_frames,omitempty"`

	// Elsewhere counts, by UDP destination port, the datagrams to other
	// ports than the RoCE port asked for that are RoCE v2 packets all the
	// same: they parse, and their ICRC verifies. A capture of a device on
	// another port (gorxe's --roce-port) shows them.
	Elsewhere map[uint16]int `json:"roce_elsewhere,omitempty"`
}

// Hint returns a line that says where else the capture has RoCE v2
// packets, and the flag that reads them, and how many RoCE v1 frames it
// has and what would have put them on RoCE v2; or "" if it has neither:
// "RoCE v2 packets on other UDP ports (their ICRCs verify): 69 to port
// 4792; --roce-port 4792 reads them".
func (s Counts) Hint() string {
	v1 := ""
	if s.V1 > 0 {
		v1 = fmt.Sprintf("%d RoCE v1 frames (EtherType 0x8915: a GRH and a BTH, no IP or UDP), which gorxe does not read: "+
			"their sender chose a RoCE v1 GID index; a RoCE v2 one (show_gids' v2 rows) puts the traffic on UDP port %d", s.V1, wire.UDPPort)
	}
	if len(s.Elsewhere) == 0 {
		return v1
	}
	if v1 != "" {
		v1 = "; " + v1
	}
	ports := make([]uint16, 0, len(s.Elsewhere))
	for p := range s.Elsewhere {
		ports = append(ports, p)
	}
	sort.Slice(ports, func(i, j int) bool { // most packets first
		a, b := s.Elsewhere[ports[i]], s.Elsewhere[ports[j]]
		return a > b || a == b && ports[i] < ports[j]
	})
	parts := make([]string, len(ports))
	for k, p := range ports {
		parts[k] = fmt.Sprintf("%d to port %d", s.Elsewhere[p], p)
	}
	return fmt.Sprintf("RoCE v2 packets on other UDP ports (their ICRCs verify): %s; --roce-port %d reads them%s",
		strings.Join(parts, ", "), ports[0], v1)
}

// String formats the counts as decode's summary line.
func (s Counts) String() string {
	gso := ""
	if s.GSO > 0 {
		gso = fmt.Sprintf(" (%d of them from %d uncut GSO datagrams)", s.GSOPackets, s.GSO)
	}
	cut := ""
	if s.Cut > 0 {
		cut = fmt.Sprintf(", %d cut short by the capture's snap length (headers decoded, ICRC not checked)", s.Cut)
	}
	if s.Unread > 0 {
		cut += fmt.Sprintf(", %d cut too short to decode", s.Unread)
	}
	return fmt.Sprintf("%d RoCE packets%s, %d other frames skipped, %d bad ICRC, %d malformed%s",
		s.RoCE, gso, s.Other, s.BadICRC, s.Malformed, cut)
}

// Packet is one RoCE packet of a capture.
type Packet struct {
	Index    int           // 1-based among the capture's RoCE packets
	Time     time.Duration // since the capture's first frame
	Src, Dst string        // IP addresses
	P        wire.Packet   // empty when Err is set
	Err      error         // why wire.ParseIP rejected the packet
	ICRCErr  error         // the ICRC check's result
	GSO      string        // "K/N": packet K of the N an uncut GSO datagram holds
	// IfIndex is the interface a tcpdump -i any capture saw the packet
	// on, from its Linux cooked (v2) header; 0 where the frame does not
	// say. Such a capture sees a packet once on each interface it
	// crosses (a VLAN and its parent, a bridge and its port).
	IfIndex int
	// Cut is how many bytes at the end of the packet the capture left
	// out, its snap length having cut the frame short (tcpdump -s): the
	// headers are decoded from what it kept, a payload's missing bytes
	// read as zeros, and the ICRC is not checked (ICRCErr is nil). 0 for
	// a whole packet.
	Cut int
	// Interface is the index of the pcapng interface the packet was
	// captured on; 0 in a pcap file.
	Interface int
}

// Magic numbers that start a capture file, as the first four bytes read in
// big-endian order.
const (
	pcapMicros        = 0xa1b2c3d4
	pcapMicrosSwapped = 0xd4c3b2a1
	pcapNanos         = 0xa1b23c4d
	pcapNanosSwapped  = 0x4d3cb2a1
	pcapngSection     = 0x0a0d0d0a // Section Header Block type, a palindrome
)

// ErrCutShort is wrapped by a Packet's Err when the capture's snap
// length kept too little of the packet to decode it: part of its headers,
// or part of an uncut GSO datagram. The packet may have been sound.
var ErrCutShort = errors.New("cut short by the capture's snap length")

// ErrNotCapture reports a file that is neither pcap nor pcapng.
var ErrNotCapture = errors.New("not a pcap or pcapng file")

// OpenError is an error of a file that could not be read as a capture at
// all: not a pcap or pcapng file (it wraps ErrNotCapture), or one whose
// header is bad. Read read no packet.
type OpenError struct{ Err error }

func (e *OpenError) Error() string { return e.Err.Error() }
func (e *OpenError) Unwrap() error { return e.Err }

// reader is what Read needs of pcapgo's two readers.
type reader interface {
	ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
}

// open detects the file format by its magic number and returns a reader
// and a function giving each packet's link type. A gzip-compressed
// capture (capture.pcap.gz, which tshark and Wireshark read as it is) is
// read through gzip.
func open(r io.Reader) (reader, func(gopacket.CaptureInfo) layers.LinkType, error) {
	return openFormat(r, true)
}

func openFormat(r io.Reader, gzipped bool) (reader, func(gopacket.CaptureInfo) layers.LinkType, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	magic, err := br.Peek(4)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, fmt.Errorf("%w (%d bytes long)", ErrNotCapture, len(magic))
		}
		return nil, nil, err
	}
	if gzipped && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("gzip: %w", err)
		}
		return openFormat(zr, false)
	}
	switch binary.BigEndian.Uint32(magic) {
	case pcapMicros, pcapMicrosSwapped, pcapNanos, pcapNanosSwapped:
		pr, err := pcapgo.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("pcap: %w", err)
		}
		lt := pr.LinkType()
		if !supported(lt) {
			return nil, nil, fmt.Errorf("unsupported link type %d (%v)", uint32(lt), lt)
		}
		return pr, func(gopacket.CaptureInfo) layers.LinkType { return lt }, nil
	case pcapngSection:
		nr, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true, SkipUnknownVersion: true})
		if err != nil {
			return nil, nil, fmt.Errorf("pcapng: %w", err)
		}
		return nr, func(ci gopacket.CaptureInfo) layers.LinkType {
			if len(ci.AncillaryData) > 0 {
				if lt, ok := ci.AncillaryData[0].(layers.LinkType); ok {
					return lt
				}
			}
			return nr.LinkType()
		}, nil
	}
	return nil, nil, ErrNotCapture
}

// supported reports whether gopacket decodes frames of link type lt.
func supported(lt layers.LinkType) bool {
	switch lt {
	case layers.LinkTypeIPv4, layers.LinkTypeIPv6:
		return true
	}
	return int(lt) < len(layers.LinkTypeMetadata) && layers.LinkTypeMetadata[lt].DecodeWith != nil
}

// linkDecoder returns the gopacket decoder for frames of link type lt.
// gopacket has none for the raw IPv4 and IPv6 link types (228, 229).
func linkDecoder(lt layers.LinkType) gopacket.Decoder {
	switch lt {
	case layers.LinkTypeIPv4:
		return layers.LayerTypeIPv4
	case layers.LinkTypeIPv6:
		return layers.LayerTypeIPv6
	}
	return lt
}

// Read calls fn with every RoCE v2 packet of the pcap or pcapng capture
// r, in order, and returns the counts. It returns an *OpenError, calling
// fn for nothing, for a file of another format (wrapping ErrNotCapture) or
// a bad header, and stops at the
// first read error or error of fn. Packets that do not parse and bad ICRCs
// are counted and passed to fn, not errors. fn must not keep p, which is
// reused, but may keep what p.P's slices point to.
func Read(r io.Reader, fn func(p *Packet) error) (Counts, error) {
	return ReadPort(r, wire.UDPPort, fn)
}

// ReadPort is Read for a capture whose RoCE v2 packets go to UDP port
// port instead of 4791, as those of devices given another port
// (gorxe's --roce-port) do.
func ReadPort(r io.Reader, port uint16, fn func(p *Packet) error) (Counts, error) {
	return ReadOptions(r, Options{Port: port}, fn)
}

// Options are what ReadOptions reads for.
type Options struct {
	Port uint16 // the RoCE v2 UDP port; 0 is 4791
	// TCP, if set, sees the payload of every TCP segment that carries
	// one, in the capture's order with the RoCE packets: perftest's
	// exchange (its key messages name the QPs a run connects) travels
	// so. It must not keep s.Payload.
	TCP func(s *Segment) error
}

// Segment is a TCP segment's payload and where it goes.
type Segment struct {
	Before   int // the RoCE packets passed to fn before it
	Time     time.Duration
	Src, Dst netip.AddrPort
	Payload  []byte
}

// ReadOptions is ReadPort with the TCP segments beside the RoCE packets.
func ReadOptions(r io.Reader, opt Options, fn func(p *Packet) error) (Counts, error) {
	port := opt.Port
	if port == 0 {
		port = wire.UDPPort
	}
	var sum Counts
	cr, linkType, err := open(r)
	if err != nil {
		return sum, &OpenError{err}
	}
	var (
		t0  time.Time
		rec Packet
	)
	for n := 0; ; n++ {
		data, ci, err := cr.ReadPacketData()
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return sum, fmt.Errorf("the file ends inside frame %d, cut short as a capture whose writer was stopped mid-write is: %w", n+1, err)
			}
			if !errors.Is(err, io.EOF) {
				return sum, fmt.Errorf("frame %d: %w", n+1, err)
			}
			return sum, nil
		}
		if n == 0 {
			t0 = ci.Timestamp
		}
		f, ok := roceIP(data, linkType(ci), port, opt.TCP != nil)
		if !ok {
			if f.tcp != nil {
				seg := Segment{Before: sum.RoCE, Time: ci.Timestamp.Sub(t0), Src: f.tcpSrc, Dst: f.tcpDst, Payload: f.tcp}
				if err := opt.TCP(&seg); err != nil {
					return sum, err
				}
			}
			sum.Other++
			if f.v1 {
				sum.V1++
			}
			if f.otherPort != 0 && ci.CaptureLength == ci.Length {
				if n := roceElsewhere(f.ip); n > 0 {
					if sum.Elsewhere == nil {
						sum.Elsewhere = map[uint16]int{}
					}
					sum.Elsewhere[f.otherPort] += n
				}
			}
			continue
		}
		ip := f.ip
		rec = Packet{Index: sum.RoCE + 1, Time: ci.Timestamp.Sub(t0), Interface: ci.InterfaceIndex, IfIndex: f.ifIndex}
		if ci.CaptureLength < ci.Length || f.mirrorCut {
			rec.parseCut(ip)
		} else {
			rec.parse(ip)
		}
		if rec.Err != nil || rec.ICRCErr != nil {
			if segs, ok := wire.SplitGSO(ip); ok {
				sum.GSO++
				sum.GSOPackets += len(segs)
				for k, seg := range segs {
					sum.RoCE++
					rec = Packet{Index: sum.RoCE, Time: rec.Time, GSO: fmt.Sprintf("%d/%d", k+1, len(segs)), Interface: rec.Interface, IfIndex: rec.IfIndex}
					rec.parse(seg)
					sum.count(&rec)
					if err := fn(&rec); err != nil {
						return sum, err
					}
				}
				continue
			}
		}
		sum.RoCE++
		sum.count(&rec)
		if err := fn(&rec); err != nil {
			return sum, err
		}
	}
}

func (s *Counts) count(p *Packet) {
	switch {
	case errors.Is(p.Err, ErrCutShort):
		s.Unread++
	case p.Err != nil:
		s.Malformed++
	case p.ICRCErr != nil:
		s.BadICRC++
	case p.Cut > 0:
		s.Cut++
	}
}

// roceFrame is what roceIP finds in a frame.
type roceFrame struct {
	ip []byte // the RoCE packet, from its IP header on
	// mirrorCut says the mirroring switch truncated the packet (ERSPAN's
	// T bit), as a mirror session with a length limit does.
	mirrorCut bool
	ifIndex   int // the interface of a Linux cooked v2 frame, or 0
	// otherPort is, for a frame with no RoCE packet, the destination
	// port of its innermost UDP datagram (ip is that datagram's packet),
	// or 0.
	otherPort uint16
	v1        bool // a RoCE v1 frame (and no RoCE v2 packet)
	// tcp is the payload of the frame's TCP segment, when asked for, and
	// tcpSrc, tcpDst its ends.
	tcp            []byte
	tcpSrc, tcpDst netip.AddrPort
}

// etherTypeRoCEv1 is the EtherType of RoCE v1 (IBTA Annex A16): the
// InfiniBand GRH and transport headers straight after the Ethernet header.
const etherTypeRoCEv1 layers.EthernetType = 0x8915

// isRoCEv1 reports whether the payload of an EtherType 0x8915 header looks
// like RoCE v1: a GRH (IP version 6, next header 0x1B, the IBTA's for a
// BTH) followed by a BTH of transport version 0 and an ICRC.
func isRoCEv1(b []byte) bool {
	const grhLen, nextBTH = 40, 0x1b
	return len(b) >= grhLen+12+wire.ICRCLen && b[0]>>4 == 6 && b[6] == nextBTH && maybeBTH(b[grhLen:])
}

// roceElsewhere returns how many RoCE v2 packets ip, an IP packet with a
// UDP datagram to a port other than the RoCE port, holds all the same:
// 1 if it parses and its ICRC verifies, which a datagram of another
// protocol does once in 2^32; the GSO datagram's packets if it is one;
// else 0.
func roceElsewhere(ip []byte) int {
	var p wire.Packet
	if wire.ParseIP(&p, ip) == nil && p.CheckICRC() == nil {
		return 1
	}
	segs, _ := wire.SplitGSO(ip)
	return len(segs)
}

// roceIP decodes a frame with gopacket and, when it carries UDP to port
// (4791), returns the bytes from that packet's IP header on. A tunnelled
// packet (VXLAN, Geneve, GRE, MPLS) or a mirrored one (ERSPAN Type II and
// III) is found under its outer headers.
func roceIP(data []byte, lt layers.LinkType, port uint16, tcp bool) (roceFrame, bool) {
	pkt := gopacket.NewPacket(data, linkDecoder(lt), gopacket.DecodeOptions{NoCopy: true})
	var f roceFrame
	var last gopacket.Layer // the innermost IP header so far
	for _, l := range pkt.Layers() {
		switch l := l.(type) {
		case *layers.LinuxSLL2:
			f.ifIndex = int(l.InterfaceIndex)
			f.v1 = f.v1 || l.ProtocolType == etherTypeRoCEv1 && isRoCEv1(l.LayerPayload())
		case *layers.LinuxSLL:
			f.v1 = f.v1 || l.EthernetType == etherTypeRoCEv1 && isRoCEv1(l.LayerPayload())
		case *layers.Ethernet:
			f.v1 = f.v1 || l.EthernetType == etherTypeRoCEv1 && isRoCEv1(l.LayerPayload())
		case *layers.Dot1Q:
			f.v1 = f.v1 || l.Type == etherTypeRoCEv1 && isRoCEv1(l.LayerPayload())
		case *layers.ERSPANII:
			f.mirrorCut = l.IsTruncated
		case *erspan3:
			f.mirrorCut = l.Truncated
		case *layers.IPv4, *layers.IPv6:
			last = l
		case *layers.TCP:
			if tcp && last != nil && len(l.Payload) > 0 {
				f.tcp = l.Payload
				f.tcpSrc, f.tcpDst = tcpEnds(last, uint16(l.SrcPort), uint16(l.DstPort))
			}
		case *layers.UDP:
			if last == nil {
				continue
			}
			match := uint16(l.DstPort) == port
			if !match && !maybeBTH(l.Payload) {
				continue // not even worth a look as RoCE elsewhere
			}
			// Contents and payload are adjacent in data, but gopacket
			// does not promise it; wire.ParseIP wants them contiguous.
			b := make([]byte, 0, len(last.LayerContents())+len(last.LayerPayload()))
			f.ip = append(append(b, last.LayerContents()...), last.LayerPayload()...)
			if match {
				return f, true
			}
			f.otherPort = uint16(l.DstPort)
		}
	}
	return roceFrame{ip: f.ip, otherPort: f.otherPort, v1: f.v1, tcp: f.tcp, tcpSrc: f.tcpSrc, tcpDst: f.tcpDst}, false
}

// tcpEnds returns a TCP segment's source and destination, from the IP
// header ip in front of it.
func tcpEnds(ip gopacket.Layer, sport, dport uint16) (src, dst netip.AddrPort) {
	var s, d netip.Addr
	switch h := ip.(type) {
	case *layers.IPv4:
		s, _ = netip.AddrFromSlice(h.SrcIP.To4())
		d, _ = netip.AddrFromSlice(h.DstIP.To4())
	case *layers.IPv6:
		s, _ = netip.AddrFromSlice(h.SrcIP)
		d, _ = netip.AddrFromSlice(h.DstIP)
	}
	return netip.AddrPortFrom(s, sport), netip.AddrPortFrom(d, dport)
}

// maybeBTH reports whether a UDP payload could be a RoCE v2 packet: a
// BTH and an ICRC long, transport version 0. It spares most datagrams of
// other protocols the ICRC check.
func maybeBTH(udpPayload []byte) bool {
	return len(udpPayload) >= 12+wire.ICRCLen && udpPayload[1]&0x0f == 0
}

// ipAddrs returns the addresses of an IPv4 or IPv6 header that wire.ParseIP
// rejected, or "?" where the header is too short to hold them.
func ipAddrs(b []byte) (src, dst string) {
	pkt := gopacket.NewPacket(b, layers.LayerTypeIPv4, gopacket.DecodeOptions{NoCopy: true})
	if len(b) > 0 && b[0]>>4 == 6 {
		pkt = gopacket.NewPacket(b, layers.LayerTypeIPv6, gopacket.DecodeOptions{NoCopy: true})
	}
	if nl := pkt.NetworkLayer(); nl != nil {
		f := nl.NetworkFlow()
		return f.Src().String(), f.Dst().String()
	}
	return "?", "?"
}

// parse parses ip, a packet from its IP header on, into p.
func (p *Packet) parse(ip []byte) {
	if p.Err = wire.ParseIP(&p.P, ip); p.Err != nil {
		p.Err = opcodeErr(p.Err, ip)
		p.Src, p.Dst = ipAddrs(ip)
		return
	}
	p.Src, p.Dst = p.P.Src().String(), p.P.Dst().String()
	p.ICRCErr = p.P.CheckICRC()
}

// opcodeErr returns err, with what it is about when it is one of the
// parser's errors about the BTH: the opcode and what it is for
// wire.ErrOpcode ("unsupported opcode 0xa4 (XRC_SEND_ONLY: XRC, which
// gorxe, like rxe, does not have)"), the opcode for ErrPayload and ErrPad,
// the version for ErrTVer. The parser's own errors name nothing, so as
// to cost nothing on a device's receive path.
func opcodeErr(err error, ip []byte) error {
	if len(ip) == 0 {
		return err
	}
	off := wire.IPv6Len
	if ip[0]>>4 == 4 {
		off = wire.IPv4(ip).HeaderLen()
	}
	off += wire.UDPLen
	if off+1 >= len(ip) {
		return err
	}
	op := bth.Opcode(ip[off])
	switch {
	case errors.Is(err, wire.ErrTVer):
		return fmt.Errorf("%w %d", err, ip[off+1]&0xf)
	case errors.Is(err, wire.ErrPayload), errors.Is(err, wire.ErrPad):
		return fmt.Errorf("%w: %v", err, op)
	case !errors.Is(err, wire.ErrOpcode):
		return err
	}
	what := "reserved in " + op.Service().String()
	switch name := op.String(); {
	case op.Service() == bth.ServiceXRC && !strings.HasPrefix(name, "OPCODE_"):
		what = name + ": XRC, which gorxe, like rxe, does not have"
	case op.Service() == bth.ServiceRD && !strings.HasPrefix(name, "OPCODE_"):
		what = name + ": Reliable Datagram, which no RoCE NIC has"
	case op == 0x80:
		what = "InfiniBand's CNP; RoCE v2's is 0x81"
	case op.Service() > bth.ServiceXRC:
		what = "manufacturer-specific"
	}
	return fmt.Errorf("%w 0x%02x (%s)", err, uint8(op), what)
}

// onePacket reports whether p's payload fits one packet: at most a
// 4096-byte path MTU, and exactly a path MTU (256 to 4096 bytes, a power
// of two) in the first and middle packets of a message. A payload that
// does not is an uncut GSO datagram's.
func onePacket(p *wire.Packet) bool {
	n := len(p.Payload)
	if p.Info != nil && (p.Info.Position == wire.First || p.Info.Position == wire.Middle) {
		return n >= 256 && n <= 4096 && n&(n-1) == 0
	}
	return n <= 4096
}

// parseCut parses ip, the first bytes of a packet whose frame the
// capture's snap length cut short. It fills the missing bytes with
// zeros, to the length the IP header gives, and decodes the headers if
// the capture kept them all; a cut inside them, or in an uncut GSO
// datagram (whose packets cannot be told apart without their ICRCs), is
// an error.
func (p *Packet) parseCut(ip []byte) {
	total := ipTotalLen(ip)
	if total <= len(ip) {
		p.parse(ip) // the cut took only what follows the IP packet
		return
	}
	whole := make([]byte, total)
	copy(whole, ip)
	err := wire.ParseIP(&p.P, whole)
	if err == nil {
		headers := total - len(p.P.Payload) - len(p.P.Pad) - wire.ICRCLen
		switch {
		case headers > len(ip):
			err = fmt.Errorf("%w inside its headers: %d of their %d bytes kept", ErrCutShort, len(ip), headers)
		case !onePacket(&p.P):
			err = fmt.Errorf("%w: a %v with a %d-byte payload, which one packet cannot carry, so an uncut GSO datagram (%d of %d bytes kept) whose packets cannot be told apart",
				ErrCutShort, p.P.BTH.Opcode(), len(p.P.Payload), len(ip), total)
		}
	} else {
		err = fmt.Errorf("%w (the capture kept %d of its %d bytes)", opcodeErr(err, ip), len(ip), total)
	}
	if err != nil {
		p.P, p.Err = wire.Packet{}, err
		p.Src, p.Dst = ipAddrs(ip)
		return
	}
	p.Src, p.Dst = p.P.Src().String(), p.P.Dst().String()
	p.Cut = total - len(ip)
}

// ipTotalLen returns the length an IPv4 or IPv6 header gives its packet,
// or 0 if b does not hold one.
func ipTotalLen(b []byte) int {
	switch {
	case len(b) >= wire.IPv4Len && b[0]>>4 == 4:
		return int(wire.IPv4(b).TotalLen())
	case len(b) >= wire.IPv6Len && b[0]>>4 == 6:
		return wire.IPv6Len + int(wire.IPv6(b).PayloadLen())
	}
	return 0
}

// PayloadCaptured reports whether the capture holds the packet's whole
// payload: the snap length, if it cut the packet, took only pad and ICRC.
func (p *Packet) PayloadCaptured() bool { return p.Cut <= len(p.P.Pad)+wire.ICRCLen }

// ICRCWord returns what decode shows of the packet's ICRC: "ok", bad
// when the check failed, or "cut" when the capture did not keep all of
// the packet and it was not checked.
func (p *Packet) ICRCWord(bad string) string {
	if p.Cut > 0 && p.ICRCErr == nil {
		return "cut"
	}
	return ICRCWord(p.ICRCErr, bad)
}

// Seconds formats d as seconds with microseconds, as tshark shows relative
// times: "0.000341".
func Seconds(d time.Duration) string {
	d = d.Round(time.Microsecond)
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	return fmt.Sprintf("%s%d.%06d", sign, d/time.Second, d%time.Second/time.Microsecond)
}

// Line returns decode's line for the packet, without a newline:
//
//	1   1.181646 10.9.0.3 -> 10.9.0.2 sport=49441 RC_RDMA_WRITE_FIRST          qp=0x000011 psn=15111583 ack=0 se=0 mig=0 pad=0 reth(va=0x7fe20ab5c000 rkey=0x00000276 len=65536) payload=1024 icrc=ok
//
// and for a malformed packet its index, time, addresses and parse error.
func (p *Packet) Line() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%5d %10s %s -> %s ", p.Index, Seconds(p.Time), p.Src, p.Dst)
	if p.Err != nil {
		fmt.Fprintf(&sb, "malformed: %v", p.Err)
		return sb.String()
	}
	h := p.P.BTH
	fmt.Fprintf(&sb, "sport=%-5d %-28v qp=0x%06x psn=%-8d ", p.P.SrcPort(), h.Opcode(), uint32(h.DestQP()), uint32(h.PSN()))
	p.appendFields(&sb)
	return sb.String()
}

// Fields returns the part of Line after the PSN: the BTH's flags, the
// extended headers, the payload's length, the ICRC's check, the GSO
// position and the interface a tcpdump -i any capture saw it on. For a
// malformed packet it is the parse error.
func (p *Packet) Fields() string {
	if p.Err != nil {
		return "malformed: " + p.Err.Error()
	}
	var sb strings.Builder
	p.appendFields(&sb)
	return sb.String()
}

func (p *Packet) appendFields(sb *strings.Builder) {
	h := p.P.BTH
	fmt.Fprintf(sb, "ack=%d se=%d mig=%d pad=%d", b2i(h.AckReq()), b2i(h.SE()), b2i(h.MigReq()), h.PadCnt())
	// RoCE v2 marks congestion in the IP ECN field; the BTH bits appear
	// set only in a CNP's BECN, so they are shown only when set.
	if h.FECN() {
		sb.WriteString(" fecn=1")
	}
	if h.BECN() {
		sb.WriteString(" becn=1")
	}
	// The IP header's traffic class, where it says something: a DSCP
	// other than 0 (the class a NIC gives RoCE, 48 for ConnectX's CNPs)
	// and a switch's congestion mark.
	if dscp := p.P.TrafficClass() >> 2; dscp != 0 {
		fmt.Fprintf(sb, " dscp=%d", dscp)
	}
	if p.P.CE() {
		sb.WriteString(" ecn=CE")
	}
	q := &p.P
	if q.DETH != nil {
		fmt.Fprintf(sb, " deth(qkey=0x%08x srcqp=0x%06x)", q.DETH.QKey(), uint32(q.DETH.SrcQP()))
	}
	if q.FETH != nil {
		fmt.Fprintf(sb, " feth(sel=%d plt=%d)", q.FETH.Selectivity(), q.FETH.PlacementType())
	}
	if q.RETH != nil {
		fmt.Fprintf(sb, " reth(va=%#x rkey=0x%08x len=%d)", q.RETH.VA(), uint32(q.RETH.RKey()), q.RETH.DMALen())
	}
	if a := q.AtomicETH; a != nil {
		fmt.Fprintf(sb, " atomic(va=%#x rkey=0x%08x swap_add=%#x compare=%#x)", a.VA(), uint32(a.RKey()), a.SwapAdd(), a.Compare())
	}
	if q.AETH != nil {
		fmt.Fprintf(sb, " aeth(%v msn=%d)", q.AETH.Syndrome(), uint32(q.AETH.MSN()))
	}
	if q.AtomicAck != nil {
		fmt.Fprintf(sb, " atomic_ack(orig=%#x)", q.AtomicAck.OrigData())
	}
	if q.ImmDt != nil {
		fmt.Fprintf(sb, " imm=0x%08x", q.ImmDt.Imm())
	}
	if q.IETH != nil {
		fmt.Fprintf(sb, " ieth(rkey=0x%08x)", uint32(q.IETH.RKey()))
	}
	if m := p.CM(); m != "" {
		fmt.Fprintf(sb, " cm(%s)", m)
	}
	fmt.Fprintf(sb, " payload=%d icrc=%s", len(q.Payload), p.ICRCWord("BAD"))
	if p.GSO != "" {
		fmt.Fprintf(sb, " gso=%s", p.GSO)
	}
	if p.IfIndex != 0 {
		fmt.Fprintf(sb, " if=%d", p.IfIndex)
	}
}

// CM returns what decode shows of the CM message the packet carries:
// CMMessage's account, "cut short by the capture" where the capture's
// snap length left out part of the message (what it would read is the
// zeros the cut was filled with), or "" for a packet that is not a MAD
// to QP 1.
func (p *Packet) CM() string {
	m := CMMessage(&p.P)
	if m != "" && !p.PayloadCaptured() {
		return "cut short by the capture"
	}
	return m
}

// CMMessage returns a one-line account of the CM message a UD SEND to
// QP 1 carries (wire/cm's String), "mad(...)" for a MAD of another class
// or one that does not decode, or "" for a packet that is not a MAD to
// QP 1.
func CMMessage(p *wire.Packet) string {
	if p.DETH == nil || p.BTH.DestQP() != 1 || len(p.Payload) < mad.Len {
		return ""
	}
	m, tid, err := cm.Decode(p.Payload)
	if err != nil {
		h := mad.Header(p.Payload)
		return fmt.Sprintf("mad class=%#02x version=%d attr=%v: %v", uint8(h.Class()), h.ClassVersion(), h.AttrID(), err)
	}
	return fmt.Sprintf("%v tid=%#x", m, tid)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ICRCWord returns "ok", or bad when the ICRC check failed.
func ICRCWord(err error, bad string) string {
	if err != nil {
		return bad
	}
	return "ok"
}

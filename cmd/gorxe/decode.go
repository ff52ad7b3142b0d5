package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/cm"
	"github.com/gorxe/gorxe/wire/mad"
)

const decodeUsage = `usage: gorxe decode [--json] FILE

Decode prints every RoCE v2 packet (UDP to port 4791) of a pcap or pcapng
capture, one line each: its index among the RoCE packets, the time since the
capture's first frame, addresses, the BTH, each extended header, the payload
length and whether the ICRC verifies. A summary line ends the output.

A capture taken on the host that sends with UDP GSO (gorxe's udp link does)
shows runs of packets as one uncut datagram; decode finds the packets the
kernel cut it into, verifies each ICRC, and marks each gso=K/N.

With --json it prints one JSON object per packet per line (JSON Lines) and
ends with {"summary": {...}}, all on standard output.

Flags:
`

// runDecode is the decode subcommand.
func runDecode(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("decode", flag.ContinueOnError)
	flags.SetOutput(stderr)
	jsonOut := flags.Bool("json", false, "print JSON Lines instead of text")
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), decodeUsage)
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if flags.NArg() != 1 {
		fmt.Fprintln(stderr, "gorxe decode: want exactly one FILE")
		flags.Usage()
		return exitUsage
	}
	name := flags.Arg(0)
	f, err := os.Open(name)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the message names the file already
		}
		fmt.Fprintf(stderr, "gorxe decode: %s: %v\n", name, err)
		return exitError
	}
	defer f.Close()
	if _, err := decode(stdout, f, *jsonOut); err != nil {
		fmt.Fprintf(stderr, "gorxe decode: %s: %v\n", name, err)
		return exitError
	}
	return exitOK
}

// summary counts what decode saw.
type summary struct {
	RoCE      int `json:"roce_packets"` // UDP to port 4791, malformed ones included
	Other     int `json:"other_frames"` // everything else, skipped
	BadICRC   int `json:"bad_icrc"`
	Malformed int `json:"malformed"`               // RoCE packets wire.ParseIP rejected
	GSO       int `json:"gso_datagrams,omitempty"` // uncut UDP GSO datagrams, counted in RoCE as their packets

	gsoPackets int
}

// String formats the summary line of the text output.
func (s summary) String() string {
	gso := ""
	if s.GSO > 0 {
		gso = fmt.Sprintf(" (%d of them from %d uncut GSO datagrams)", s.gsoPackets, s.GSO)
	}
	return fmt.Sprintf("%d RoCE packets%s, %d other frames skipped, %d bad ICRC, %d malformed",
		s.RoCE, gso, s.Other, s.BadICRC, s.Malformed)
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

// errNotCapture reports a file that is neither pcap nor pcapng.
var errNotCapture = errors.New("not a pcap or pcapng file")

// captureReader is what decode needs of pcapgo's two readers.
type captureReader interface {
	ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
}

// openCapture detects the file format by its magic number and returns a
// reader and a function giving each packet's link type.
func openCapture(r io.Reader) (captureReader, func(gopacket.CaptureInfo) layers.LinkType, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	magic, err := br.Peek(4)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, fmt.Errorf("%w (%d bytes long)", errNotCapture, len(magic))
		}
		return nil, nil, err
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
	return nil, nil, errNotCapture
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

// decode writes every RoCE v2 packet of the pcap or pcapng capture r to w,
// as text or as JSON Lines, followed by the summary. It returns
// errNotCapture (wrapped) for a file of another format, writing nothing,
// and stops at the first read error, after writing the summary of what it
// read. Packets that do not parse and bad ICRCs are counted, not errors.
func decode(w io.Writer, r io.Reader, jsonOut bool) (summary, error) {
	var sum summary
	cr, linkType, err := openCapture(r)
	if err != nil {
		return sum, err
	}
	bw := bufio.NewWriter(w)
	out := textPrinter(bw)
	if jsonOut {
		out = jsonPrinter(bw)
	}
	var t0 time.Time
	var readErr error
	for n := 0; ; n++ {
		data, ci, err := cr.ReadPacketData()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = fmt.Errorf("frame %d: %w", n+1, err)
			}
			break
		}
		if n == 0 {
			t0 = ci.Timestamp
		}
		ip, ok := roceIP(data, linkType(ci))
		if !ok {
			sum.Other++
			continue
		}
		rec := record{index: sum.RoCE + 1, rel: ci.Timestamp.Sub(t0)}
		rec.parse(ip)
		if rec.err != nil || rec.icrcErr != nil {
			if segs, ok := wire.SplitGSO(ip); ok {
				sum.GSO++
				sum.gsoPackets += len(segs)
				for k, seg := range segs {
					sum.RoCE++
					rec := record{index: sum.RoCE, rel: rec.rel, gso: fmt.Sprintf("%d/%d", k+1, len(segs))}
					rec.parse(seg)
					if err := out.packet(&rec); err != nil {
						return sum, err
					}
				}
				continue
			}
		}
		sum.RoCE++
		if rec.err != nil {
			sum.Malformed++
		} else if rec.icrcErr != nil {
			sum.BadICRC++
		}
		if err := out.packet(&rec); err != nil {
			return sum, err
		}
	}
	if err := out.summary(sum); err != nil {
		return sum, err
	}
	if err := bw.Flush(); err != nil {
		return sum, err
	}
	return sum, readErr
}

// roceIP decodes a frame with gopacket and, when it carries UDP to port
// 4791, returns the bytes from that packet's IP header on. A tunnelled
// packet (VXLAN, GRE) is found under its outer headers.
func roceIP(data []byte, lt layers.LinkType) ([]byte, bool) {
	pkt := gopacket.NewPacket(data, linkDecoder(lt), gopacket.DecodeOptions{NoCopy: true})
	var ip gopacket.Layer
	for _, l := range pkt.Layers() {
		switch l := l.(type) {
		case *layers.IPv4, *layers.IPv6:
			ip = l
		case *layers.UDP:
			if l.DstPort == wire.UDPPort && ip != nil {
				// Contents and payload are adjacent in data, but gopacket
				// does not promise it; wire.ParseIP wants them contiguous.
				b := make([]byte, 0, len(ip.LayerContents())+len(ip.LayerPayload()))
				return append(append(b, ip.LayerContents()...), ip.LayerPayload()...), true
			}
		}
	}
	return nil, false
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

// record is one RoCE packet as the printers see it.
type record struct {
	index    int
	rel      time.Duration // since the capture's first frame
	src, dst string
	p        wire.Packet
	err      error // from wire.ParseIP; p is empty when set
	icrcErr  error
	gso      string // "K/N": packet K of the N an uncut GSO datagram holds
}

// parse parses ip, a packet from its IP header on, into r.
func (r *record) parse(ip []byte) {
	if r.err = wire.ParseIP(&r.p, ip); r.err != nil {
		r.src, r.dst = ipAddrs(ip)
		return
	}
	r.src, r.dst = r.p.Src().String(), r.p.Dst().String()
	r.icrcErr = r.p.CheckICRC()
}

// seconds formats d as seconds with microseconds, as tshark shows relative
// times: "0.000341".
func seconds(d time.Duration) string {
	d = d.Round(time.Microsecond)
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	return fmt.Sprintf("%s%d.%06d", sign, d/time.Second, d%time.Second/time.Microsecond)
}

// printer writes records and the summary in one output format.
type printer struct {
	packet  func(*record) error
	summary func(summary) error
}

// textPrinter prints one line per packet, its BTH in aligned columns and
// then the extended headers the opcode carries, for example
//
//	1   1.181646 10.9.0.3 -> 10.9.0.2 sport=49441 RC_RDMA_WRITE_FIRST          qp=0x000011 psn=15111583 ack=0 se=0 mig=0 pad=0 reth(va=0x7fe20ab5c000 rkey=0x00000276 len=65536) payload=1024 icrc=ok
//
// and a malformed packet as its index, time, addresses and parse error.
func textPrinter(w io.Writer) printer {
	var sb strings.Builder
	return printer{
		packet: func(r *record) error {
			sb.Reset()
			fmt.Fprintf(&sb, "%5d %10s %s -> %s ", r.index, seconds(r.rel), r.src, r.dst)
			if r.err != nil {
				fmt.Fprintf(&sb, "malformed: %v\n", r.err)
				_, err := io.WriteString(w, sb.String())
				return err
			}
			p := &r.p
			h := p.BTH
			fmt.Fprintf(&sb, "sport=%-5d %-28v qp=0x%06x psn=%-8d ack=%d se=%d mig=%d pad=%d",
				p.SrcPort(), h.Opcode(), uint32(h.DestQP()), uint32(h.PSN()),
				b2i(h.AckReq()), b2i(h.SE()), b2i(h.MigReq()), h.PadCnt())
			// RoCE v2 marks congestion in the IP ECN field; the BTH bits
			// appear set only in a CNP's BECN, so they are shown only when set.
			if h.FECN() {
				sb.WriteString(" fecn=1")
			}
			if h.BECN() {
				sb.WriteString(" becn=1")
			}
			if p.DETH != nil {
				fmt.Fprintf(&sb, " deth(qkey=0x%08x srcqp=0x%06x)", p.DETH.QKey(), uint32(p.DETH.SrcQP()))
			}
			if p.FETH != nil {
				fmt.Fprintf(&sb, " feth(sel=%d plt=%d)", p.FETH.Selectivity(), p.FETH.PlacementType())
			}
			if p.RETH != nil {
				fmt.Fprintf(&sb, " reth(va=%#x rkey=0x%08x len=%d)", p.RETH.VA(), uint32(p.RETH.RKey()), p.RETH.DMALen())
			}
			if p.AtomicETH != nil {
				a := p.AtomicETH
				fmt.Fprintf(&sb, " atomic(va=%#x rkey=0x%08x swap_add=%#x compare=%#x)", a.VA(), uint32(a.RKey()), a.SwapAdd(), a.Compare())
			}
			if p.AETH != nil {
				fmt.Fprintf(&sb, " aeth(%v msn=%d)", p.AETH.Syndrome(), uint32(p.AETH.MSN()))
			}
			if p.AtomicAck != nil {
				fmt.Fprintf(&sb, " atomic_ack(orig=%#x)", p.AtomicAck.OrigData())
			}
			if p.ImmDt != nil {
				fmt.Fprintf(&sb, " imm=0x%08x", p.ImmDt.Imm())
			}
			if p.IETH != nil {
				fmt.Fprintf(&sb, " ieth(rkey=0x%08x)", uint32(p.IETH.RKey()))
			}
			if m := cmMessage(p); m != "" {
				fmt.Fprintf(&sb, " cm(%s)", m)
			}
			fmt.Fprintf(&sb, " payload=%d icrc=%s", len(p.Payload), icrcWord(r.icrcErr, "BAD"))
			if r.gso != "" {
				fmt.Fprintf(&sb, " gso=%s", r.gso)
			}
			sb.WriteByte('\n')
			_, err := io.WriteString(w, sb.String())
			return err
		},
		summary: func(s summary) error {
			_, err := fmt.Fprintln(w, s)
			return err
		},
	}
}

// cmMessage returns a one-line account of the CM message a UD SEND to
// QP 1 carries (wire/cm's String), "mad(...)" for a MAD of another class
// or one that does not decode, or "" for a packet that is not a MAD to
// QP 1.
func cmMessage(p *wire.Packet) string {
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

// icrcWord returns "ok", or bad when the ICRC check failed.
func icrcWord(err error, bad string) string {
	if err != nil {
		return bad
	}
	return "ok"
}

// The JSON Lines records. Numbers are JSON numbers; 64-bit values
// (addresses, atomic operands) may exceed what a float64 holds exactly.
type (
	jsonPacket struct {
		Index      int            `json:"index"`
		Time       json.Number    `json:"time"` // seconds since the capture's first frame
		Src        string         `json:"src"`
		Dst        string         `json:"dst"`
		Sport      uint16         `json:"sport"`
		Opcode     uint8          `json:"opcode"`
		Op         string         `json:"op"`
		DQPN       uint32         `json:"dqpn"`
		PSN        uint32         `json:"psn"`
		AckReq     bool           `json:"ackreq"`
		SE         bool           `json:"se"`
		MigReq     bool           `json:"migreq"`
		PadCnt     int            `json:"padcnt"`
		FECN       bool           `json:"fecn"`
		BECN       bool           `json:"becn"`
		DETH       *jsonDETH      `json:"deth,omitempty"`
		CM         string         `json:"cm,omitempty"`
		FETH       *jsonFETH      `json:"feth,omitempty"`
		RETH       *jsonRETH      `json:"reth,omitempty"`
		Atomic     *jsonAtomic    `json:"atomic,omitempty"`
		AETH       *jsonAETH      `json:"aeth,omitempty"`
		AtomicAck  *jsonAtomicAck `json:"atomic_ack,omitempty"`
		Imm        *jsonImm       `json:"imm,omitempty"`
		IETH       *jsonIETH      `json:"ieth,omitempty"`
		PayloadLen int            `json:"payload_len"`
		GSO        string         `json:"gso,omitempty"` // "K/N": packet K of an uncut GSO datagram of N
		ICRC       string         `json:"icrc"`          // "ok" or "bad"
	}
	// jsonMalformed is a RoCE packet that wire.ParseIP rejected.
	jsonMalformed struct {
		Index int         `json:"index"`
		Time  json.Number `json:"time"`
		Src   string      `json:"src"`
		Dst   string      `json:"dst"`
		Error string      `json:"error"`
	}
	jsonDETH struct {
		QKey  uint32 `json:"qkey"`
		SrcQP uint32 `json:"srcqp"`
	}
	jsonFETH struct {
		Sel uint8 `json:"sel"`
		PLT uint8 `json:"plt"`
	}
	jsonRETH struct {
		VA   uint64 `json:"va"`
		RKey uint32 `json:"rkey"`
		Len  uint32 `json:"len"`
	}
	jsonAtomic struct {
		VA      uint64 `json:"va"`
		RKey    uint32 `json:"rkey"`
		SwapAdd uint64 `json:"swap_add"`
		Compare uint64 `json:"compare"`
	}
	jsonAETH struct {
		Syndrome uint8  `json:"syndrome"`
		Type     string `json:"type"` // "ACK", "RNR_NAK", "NAK" or "RESERVED"
		Value    uint8  `json:"value"`
		MSN      uint32 `json:"msn"`
	}
	jsonAtomicAck struct {
		Orig uint64 `json:"orig"`
	}
	jsonImm struct {
		Data uint32 `json:"data"`
	}
	jsonIETH struct {
		RKey uint32 `json:"rkey"`
	}
)

// aethType names a syndrome type as the IBTA does (Vol 1 Table 42).
func aethType(t aeth.Type) string {
	switch t {
	case aeth.TypeACK:
		return "ACK"
	case aeth.TypeRNRNAK:
		return "RNR_NAK"
	case aeth.TypeNAK:
		return "NAK"
	}
	return "RESERVED"
}

// jsonPrinter prints one JSON object per packet per line, and the summary
// as a last line {"summary": {...}}.
func jsonPrinter(w io.Writer) printer {
	enc := json.NewEncoder(w)
	return printer{
		packet: func(r *record) error {
			t := json.Number(seconds(r.rel))
			if r.err != nil {
				return enc.Encode(jsonMalformed{Index: r.index, Time: t, Src: r.src, Dst: r.dst, Error: r.err.Error()})
			}
			p := &r.p
			h := p.BTH
			j := jsonPacket{
				Index: r.index, Time: t, Src: r.src, Dst: r.dst, Sport: p.SrcPort(),
				Opcode: uint8(h.Opcode()), Op: h.Opcode().String(),
				DQPN: uint32(h.DestQP()), PSN: uint32(h.PSN()),
				AckReq: h.AckReq(), SE: h.SE(), MigReq: h.MigReq(), PadCnt: h.PadCnt(),
				FECN: h.FECN(), BECN: h.BECN(),
				PayloadLen: len(p.Payload), ICRC: icrcWord(r.icrcErr, "bad"), GSO: r.gso,
			}
			j.CM = cmMessage(p)
			if p.DETH != nil {
				j.DETH = &jsonDETH{QKey: p.DETH.QKey(), SrcQP: uint32(p.DETH.SrcQP())}
			}
			if p.FETH != nil {
				j.FETH = &jsonFETH{Sel: p.FETH.Selectivity(), PLT: p.FETH.PlacementType()}
			}
			if p.RETH != nil {
				j.RETH = &jsonRETH{VA: p.RETH.VA(), RKey: uint32(p.RETH.RKey()), Len: p.RETH.DMALen()}
			}
			if a := p.AtomicETH; a != nil {
				j.Atomic = &jsonAtomic{VA: a.VA(), RKey: uint32(a.RKey()), SwapAdd: a.SwapAdd(), Compare: a.Compare()}
			}
			if p.AETH != nil {
				s := p.AETH.Syndrome()
				j.AETH = &jsonAETH{Syndrome: uint8(s), Type: aethType(s.Type()), Value: s.Value(), MSN: uint32(p.AETH.MSN())}
			}
			if p.AtomicAck != nil {
				j.AtomicAck = &jsonAtomicAck{Orig: p.AtomicAck.OrigData()}
			}
			if p.ImmDt != nil {
				j.Imm = &jsonImm{Data: p.ImmDt.Imm()}
			}
			if p.IETH != nil {
				j.IETH = &jsonIETH{RKey: uint32(p.IETH.RKey())}
			}
			return enc.Encode(&j)
		},
		summary: func(s summary) error {
			return enc.Encode(struct {
				Summary summary `json:"summary"`
			}{s})
		},
	}
}

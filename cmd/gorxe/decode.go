package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/gorxe/gorxe/internal/capture"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
)

const decodeUsage = `usage: gorxe decode [--json] [--roce-port PORT] FILE

Decode prints every RoCE v2 packet (UDP to port 4791, or --roce-port's) of a
pcap or pcapng capture, one line each: its index among the RoCE packets, the time since the
capture's first frame, addresses, the BTH, each extended header, the payload
length and whether the ICRC verifies. A summary line ends the output.

The IP header's traffic class shows where it says something: dscp=N for a
DSCP other than 0, ecn=CE for a switch's congestion mark (which the ICRC
does not cover); --json gives both always.

A capture taken with tcpdump -i any (Linux cooked v2) names the interface
of each frame: if=N, the interface index. It sees a packet once on each
interface it crosses (a bridge and its port, a VLAN and its parent).

Packets under a tunnel's or a mirror's outer headers (VXLAN, Geneve, GRE,
MPLS, ERSPAN Type II and III) are found and shown with their own addresses.

A capture taken on the host that sends with UDP GSO (gorxe's udp link does)
shows runs of packets as one uncut datagram; decode finds the packets the
kernel cut it into, verifies each ICRC, and marks each gso=K/N.

FILE may be compressed with gzip (capture.pcap.gz), and "-" reads the
standard input, printing each packet as it arrives:

    tcpdump -i eth0 -U -w - udp port 4791 | gorxe decode -

A capture taken with a snap length (tcpdump -s) keeps only the first bytes
of each frame: decode shows the headers it kept, the payload length the IP
header gives, and icrc=cut, as the ICRC is not in the file to check.

When RoCE v2 packets go to another UDP port than the one read (their
ICRCs verify, so they are not another protocol's), decode says so on
stderr with the --roce-port that reads them, and explain at the end of its
report.

With --json it prints one JSON object per packet per line (JSON Lines) and
ends with {"summary": {...}}, all on standard output.

Flags:
`

// rocePortFlag adds decode's and explain's --roce-port, the UDP port the
// capture's RoCE v2 packets go to, as the tools' --roce-port sets it.
func rocePortFlag(flags *flag.FlagSet) *uint {
	return flags.Uint("roce-port", wire.UDPPort, "the UDP `port` RoCE v2 packets go to, for devices given another with --roce-port")
}

// openCapture opens the capture file name for decode and explain. Its
// error leaves the name out: their messages put it in front.
// "-" is the standard input, as in tcpdump -U -w - | gorxe decode -.
func openCapture(name string) (*os.File, error) {
	if name == "-" {
		return os.Stdin, nil
	}
	f, err := os.Open(name)
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return f, err
}

// parseCaptureArgs parses decode's or explain's command line: the flags,
// then exactly one capture FILE. It returns the file's name, or ok false
// and the exit code when there is nothing to read (help asked for, or a
// usage error, already reported on stderr).
func parseCaptureArgs(flags *flag.FlagSet, args []string, port *uint, stderr io.Writer) (name string, code int, ok bool) {
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", exitOK, false
		}
		return "", exitUsage, false
	}
	if *port == 0 || *port > 65535 {
		fmt.Fprintf(stderr, "gorxe %s: --roce-port %d: not a UDP port\n", flags.Name(), *port)
		return "", exitUsage, false
	}
	if flags.NArg() != 1 {
		fmt.Fprintf(stderr, "gorxe %s: want exactly one FILE\n", flags.Name())
		flags.Usage()
		return "", exitUsage, false
	}
	return flags.Arg(0), exitOK, true
}

// runDecode is the decode subcommand.
func runDecode(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("decode", flag.ContinueOnError)
	flags.SetOutput(stderr)
	jsonOut := flags.Bool("json", false, "print JSON Lines instead of text")
	port := rocePortFlag(flags)
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), decodeUsage)
		flags.PrintDefaults()
	}
	name, code, ok := parseCaptureArgs(flags, args, port, stderr)
	if !ok {
		return code
	}
	f, err := openCapture(name)
	if err != nil {
		fmt.Fprintf(stderr, "gorxe decode: %s: %v\n", name, err)
		return exitError
	}
	defer f.Close()
	sum, err := decodePort(stdout, f, *jsonOut, uint16(*port))
	if h := sum.Hint(); h != "" {
		fmt.Fprintf(stderr, "gorxe decode: %s\n", h)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gorxe decode: %s: %v\n", name, err)
		return exitError
	}
	return exitOK
}

// summary counts what decode saw.
type summary = capture.Counts

// decode writes every RoCE v2 packet of the pcap or pcapng capture r to w,
// as text or as JSON Lines, followed by the summary. For a file of
// another format, or one with a bad header, it writes nothing and returns
// a *capture.OpenError; it stops at the first read error, after writing
// the summary of what it read. Packets that do not parse and bad ICRCs are counted, not errors.
func decode(w io.Writer, r io.Reader, jsonOut bool) (summary, error) {
	return decodePort(w, r, jsonOut, wire.UDPPort)
}

// decodePort is decode for RoCE v2 packets to UDP port port.
func decodePort(w io.Writer, r io.Reader, jsonOut bool, port uint16) (summary, error) {
	bw := bufio.NewWriter(w)
	out := textPrinter(bw)
	if jsonOut {
		out = jsonPrinter(bw)
	}
	sum, readErr := capture.ReadPort(flushingReader{r, bw}, port, out.packet)
	var oerr *capture.OpenError
	if errors.As(readErr, &oerr) {
		return sum, readErr // nothing was read: no summary
	}
	var werr *writeError
	if errors.As(readErr, &werr) {
		return sum, werr.err
	}
	if err := out.summary(sum); err != nil {
		return sum, err
	}
	if err := bw.Flush(); err != nil {
		return sum, err
	}
	return sum, readErr
}

// flushingReader flushes w before each read of r, so that decode's output
// keeps up with a capture read as it is taken (tcpdump -U -w - | gorxe
// decode -); from a file it flushes once per 64 KiB read.
type flushingReader struct {
	r io.Reader
	w *bufio.Writer
}

func (f flushingReader) Read(p []byte) (int, error) {
	f.w.Flush() // an error shows again at the next write, which stops decode
	return f.r.Read(p)
}

// writeError is an error writing the output, which stops decode at once,
// as against an error reading the capture, after which the summary is
// still written.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }

// seconds formats d as decode prints times.
func seconds(d time.Duration) string { return capture.Seconds(d) }

// printer writes packets and the summary in one output format.
type printer struct {
	packet  func(*capture.Packet) error
	summary func(summary) error
}

// textPrinter prints one line per packet, capture.Packet's Line, and the
// summary line.
func textPrinter(w io.Writer) printer {
	return printer{
		packet: func(p *capture.Packet) error {
			if _, err := io.WriteString(w, p.Line()+"\n"); err != nil {
				return &writeError{err}
			}
			return nil
		},
		summary: func(s summary) error {
			_, err := fmt.Fprintln(w, s)
			return err
		},
	}
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
		DSCP       uint8          `json:"dscp"` // the IP header's DSCP: its traffic class without the ECN bits
		ECN        string         `json:"ecn"`  // "Not-ECT", "ECT(0)", "ECT(1)" or "CE"
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
		GSO        string         `json:"gso,omitempty"`     // "K/N": packet K of an uncut GSO datagram of N
		ICRC       string         `json:"icrc"`              // "ok", "bad", or "cut" (the capture did not keep it, so it was not checked)
		IfIndex    int            `json:"ifindex,omitempty"` // the interface of a tcpdump -i any capture (Linux cooked v2)
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
		packet: func(r *capture.Packet) error {
			if err := encodePacket(enc, r); err != nil {
				return &writeError{err}
			}
			return nil
		},
		summary: func(s summary) error {
			return enc.Encode(struct {
				Summary summary `json:"summary"`
			}{s})
		},
	}
}

// encodePacket writes r as one JSON Lines record.
func encodePacket(enc *json.Encoder, r *capture.Packet) error {
	t := json.Number(seconds(r.Time))
	if r.Err != nil {
		return enc.Encode(jsonMalformed{Index: r.Index, Time: t, Src: r.Src, Dst: r.Dst, Error: r.Err.Error()})
	}
	p := &r.P
	h := p.BTH
	j := jsonPacket{
		Index: r.Index, Time: t, Src: r.Src, Dst: r.Dst, Sport: p.SrcPort(),
		Opcode: uint8(h.Opcode()), Op: h.Opcode().String(),
		DQPN: uint32(h.DestQP()), PSN: uint32(h.PSN()),
		AckReq: h.AckReq(), SE: h.SE(), MigReq: h.MigReq(), PadCnt: h.PadCnt(),
		FECN: h.FECN(), BECN: h.BECN(), DSCP: p.TrafficClass() >> 2, ECN: wire.ECN(p.ECN()).String(),
		PayloadLen: len(p.Payload), ICRC: r.ICRCWord("bad"), GSO: r.GSO, CM: r.CM(), IfIndex: r.IfIndex,
	}
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
}

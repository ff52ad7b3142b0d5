package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorxe/gorxe/internal/pcaptest"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
	"github.com/gorxe/gorxe/wire/feth"
	"github.com/gorxe/gorxe/wire/reth"
)

const (
	mtu1024 = "../../testdata/rxe/perftest-mtu1024.pcap"
	mtu4096 = "../../testdata/rxe/perftest-mtu4096-mixed.pcap"
)

// runDecodeFile runs "gorxe decode [args] path" and returns its exit status
// and output.
func runDecodeFile(t *testing.T, path string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(append(append([]string{"decode"}, args...), path), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func lines(s string) []string { return strings.Split(strings.TrimSuffix(s, "\n"), "\n") }

func TestDecodeCaptures(t *testing.T) {
	tests := []struct {
		file string
		want summary
	}{
		{mtu1024, summary{RoCE: 1120, Other: 150}},
		{mtu4096, summary{RoCE: 209, Other: 340}},
	}
	total := 0
	for _, tt := range tests {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			f, err := os.Open(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var out bytes.Buffer
			sum, err := decode(&out, f, false)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(sum, tt.want) {
				t.Errorf("summary = %+v, want %+v", sum, tt.want)
			}
			total += sum.RoCE
			ls := lines(out.String())
			if len(ls) != tt.want.RoCE+1 {
				t.Errorf("%d lines, want one per RoCE packet and the summary", len(ls))
			}
			if got, want := ls[len(ls)-1], tt.want.String(); got != want {
				t.Errorf("last line %q, want %q", got, want)
			}
			if n := strings.Count(out.String(), " icrc=ok\n"); n != tt.want.RoCE {
				t.Errorf("%d lines end icrc=ok, want %d", n, tt.want.RoCE)
			}
		})
	}
	if total != 1329 {
		t.Errorf("%d RoCE packets in the two captures, want 1329", total)
	}
}

func TestDecodeSummaryLine(t *testing.T) {
	code, out, errOut := runDecodeFile(t, mtu1024)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	ls := lines(out)
	if got, want := ls[len(ls)-1], "1120 RoCE packets, 150 other frames skipped, 0 bad ICRC, 0 malformed"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
}

// TestDecodeLines pins the text of one packet of each kind of header.
func TestDecodeLines(t *testing.T) {
	tests := []struct {
		file  string
		index int
		want  string
	}{
		{mtu1024, 1, "    1   1.181646 10.9.0.3 -> 10.9.0.2 sport=49441 RC_RDMA_WRITE_FIRST          qp=0x000011 psn=15111583 ack=0 se=0 mig=0 pad=0 reth(va=0x7fe20ab5c000 rkey=0x00000276 len=65536) payload=1024 icrc=ok"},
		{mtu1024, 2, "    2   1.193138 10.9.0.3 -> 10.9.0.2 sport=49441 RC_RDMA_WRITE_MIDDLE         qp=0x000011 psn=15111584 ack=0 se=0 mig=0 pad=0 payload=1024 icrc=ok"},
		{mtu1024, 284, "  284   4.413222 10.9.0.2 -> 10.9.0.3 sport=49476 RC_RDMA_READ_RESPONSE_FIRST  qp=0x000012 psn=4902746  ack=0 se=0 mig=0 pad=0 aeth(ACK credits=31 msn=1) payload=1024 icrc=ok"},
		{mtu1024, 561, "  561   7.389298 10.9.0.3 -> 10.9.0.2 sport=49513 RC_FETCH_ADD                 qp=0x000013 psn=3960740  ack=1 se=0 mig=0 pad=0 atomic(va=0x56266d1be000 rkey=0x00000406 swap_add=0x1 compare=0x0) payload=0 icrc=ok"},
		{mtu1024, 594, "  594   7.390456 10.9.0.2 -> 10.9.0.3 sport=49513 RC_ATOMIC_ACKNOWLEDGE        qp=0x000013 psn=3960740  ack=0 se=0 mig=0 pad=0 aeth(ACK credits=31 msn=1) atomic_ack(orig=0xa23a9a4f918f204b) payload=0 icrc=ok"},
		{mtu1024, 1120, " 1120   9.888559 10.9.0.2 -> 10.9.0.3 sport=49552 RC_ACKNOWLEDGE               qp=0x000014 psn=12286122 ack=0 se=0 mig=0 pad=0 aeth(ACK credits=31 msn=140) payload=0 icrc=ok"},
		{mtu4096, 121, "  121  24.994791 10.9.0.3 -> 10.9.0.2 sport=55410 UD_SEND_ONLY                 qp=0x000001 psn=0        ack=1 se=0 mig=0 pad=0 deth(qkey=0x80010000 srcqp=0x000001) cm(REQ comm_id=0x8e945bd service_id=0x0000000001064853 qpn=0x00001a psn=0xa7142e mtu=4096 transport=RC resp_res=0 init_depth=0 qkey=0x0 pkey=0xffff retry=7 rnr_retry=7 srq=false cm_timeout=20/20 max_cm_retries=15 ca_guid=0x505400fffe000003 gid=10.9.0.3->10.9.0.2 lid=0xffff->0xffff flow_label=0xb8791 rate=0 tclass=0 hop_limit=64 sl=0 subnet_local=false ack_timeout=19 cma src=10.9.0.3:57602 dst=10.9.0.2 tid=0x2bd45e908) payload=256 icrc=ok"},
		{mtu4096, 204, "  204  26.367558 10.9.0.3 -> 10.9.0.2 sport=55410 UD_SEND_ONLY                 qp=0x000001 psn=5        ack=1 se=0 mig=0 pad=0 deth(qkey=0x80010000 srcqp=0x000001) cm(DREP comm_id=0x8e945bd remote_comm_id=0x2fd06609 tid=0x20966d02f) payload=256 icrc=ok"},
	}
	outs := map[string][]string{}
	for _, tt := range tests {
		if outs[tt.file] == nil {
			code, out, errOut := runDecodeFile(t, tt.file)
			if code != exitOK {
				t.Fatalf("%s: exit %d: %s", tt.file, code, errOut)
			}
			outs[tt.file] = lines(out)
		}
		if got := outs[tt.file][tt.index-1]; got != tt.want {
			t.Errorf("%s packet %d:\n got %q\nwant %q", filepath.Base(tt.file), tt.index, got, tt.want)
		}
	}
}

func TestDecodeJSON(t *testing.T) {
	for _, file := range []string{mtu1024, mtu4096} {
		code, out, errOut := runDecodeFile(t, file, "--json")
		if code != exitOK {
			t.Fatalf("%s: exit %d: %s", file, code, errOut)
		}
		ls := lines(out)
		seen := map[string]bool{}
		for i, l := range ls[:len(ls)-1] {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("line %d: %v: %s", i+1, err, l)
			}
			want := map[string]string{
				"index": "number", "time": "number", "src": "string", "dst": "string",
				"sport": "number", "opcode": "number", "op": "string", "dqpn": "number",
				"psn": "number", "ackreq": "bool", "se": "bool", "migreq": "bool",
				"padcnt": "number", "payload_len": "number", "icrc": "string",
			}
			for k, typ := range want {
				if got := jsonType(m[k]); got != typ {
					t.Fatalf("line %d: %q is %s, want %s: %s", i+1, k, got, typ, l)
				}
			}
			if m["index"].(float64) != float64(i+1) || m["icrc"] != "ok" {
				t.Fatalf("line %d: index %v icrc %v", i+1, m["index"], m["icrc"])
			}
			for _, k := range []string{"reth", "aeth", "atomic", "atomic_ack", "imm", "ieth", "deth", "feth"} {
				if v, ok := m[k]; ok {
					if jsonType(v) != "object" {
						t.Fatalf("line %d: %q is %s, want object", i+1, k, jsonType(v))
					}
					seen[k] = true
				}
			}
			if a, ok := m["aeth"].(map[string]any); ok {
				if a["type"] != "ACK" || jsonType(a["syndrome"]) != "number" || jsonType(a["value"]) != "number" || jsonType(a["msn"]) != "number" {
					t.Fatalf("line %d: aeth %v", i+1, a)
				}
			}
		}
		t.Logf("%s: extended headers seen: %v", filepath.Base(file), seen)
		var last struct{ Summary *summary }
		if err := json.Unmarshal([]byte(ls[len(ls)-1]), &last); err != nil || last.Summary == nil {
			t.Fatalf("last line %q: %v", ls[len(ls)-1], err)
		}
		if last.Summary.RoCE != len(ls)-1 || last.Summary.BadICRC != 0 || last.Summary.Malformed != 0 {
			t.Errorf("summary %+v", *last.Summary)
		}
	}

	// One line pinned whole, keys in order.
	_, out, _ := runDecodeFile(t, mtu1024, "--json")
	want := `{"index":1,"time":1.181646,"src":"10.9.0.3","dst":"10.9.0.2","sport":49441,"opcode":6,"op":"RC_RDMA_WRITE_FIRST","dqpn":17,"psn":15111583,"ackreq":false,"se":false,"migreq":false,"padcnt":0,"fecn":false,"becn":false,"dscp":0,"ecn":"Not-ECT","reth":{"va":140608819019776,"rkey":630,"len":65536},"payload_len":1024,"icrc":"ok"}`
	if got := lines(out)[0]; got != want {
		t.Errorf("first JSON line\n got %s\nwant %s", got, want)
	}
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "missing"
	case float64:
		return "number"
	case string:
		return "string"
	case bool:
		return "bool"
	case map[string]any:
		return "object"
	}
	return "other"
}

// captured is a capture file read into memory.
type captured = pcaptest.Capture

func readCapture(t *testing.T, path string) captured { return pcaptest.Read(t, path) }

// writePcap writes c to a new pcap file in a temporary directory.
func writePcap(t *testing.T, c captured) string {
	t.Helper()
	return writeSnapped(t, c, 65536)
}

// roceUDPPayload returns the offset of the UDP payload in an untagged
// Ethernet/IPv4 frame to port 4791, or -1.
func roceUDPPayload(frame []byte) int {
	const udp = wire.EthernetLen + wire.IPv4Len
	if len(frame) < udp+wire.UDPLen || binary.BigEndian.Uint16(frame[12:]) != 0x0800 || frame[23] != 17 ||
		binary.BigEndian.Uint16(frame[udp+2:]) != wire.UDPPort {
		return -1
	}
	return udp + wire.UDPLen
}

// TestDecodeCorrupted flips a payload byte of the first RoCE packet, which
// breaks its ICRC, and makes the second one's opcode reserved, which makes
// it malformed; the next five get opcodes gorxe does not parse, each named
// with what it is.
func TestDecodeCorrupted(t *testing.T) {
	c := readCapture(t, mtu1024)
	var roce []int
	for i, f := range c.Frames {
		if roceUDPPayload(f) >= 0 {
			roce = append(roce, i)
		}
	}
	first := bytes.Clone(c.Frames[roce[0]])
	first[roceUDPPayload(first)+100] ^= 0x01
	c.Frames[roce[0]] = first
	second := bytes.Clone(c.Frames[roce[1]])
	second[roceUDPPayload(second)] = 0x15 // reserved RC opcode
	c.Frames[roce[1]] = second
	// Opcodes gorxe does not parse are named, with what they are.
	others := []struct {
		op   byte
		want string
	}{
		{0xa4, "unsupported opcode 0xa4 (XRC_SEND_ONLY: XRC, which gorxe, like rxe, does not have)"},
		{0x44, "unsupported opcode 0x44 (RD_SEND_ONLY: Reliable Datagram, which no RoCE NIC has)"},
		{0xe0, "unsupported opcode 0xe0 (manufacturer-specific)"},
		{0x80, "unsupported opcode 0x80 (InfiniBand's CNP; RoCE v2's is 0x81)"},
		{0x1c, "payload on an opcode that carries none: RC_FLUSH"},
	}
	for i, o := range others {
		f := bytes.Clone(c.Frames[roce[2+i]])
		f[roceUDPPayload(f)] = o.op
		c.Frames[roce[2+i]] = f
	}
	path := writePcap(t, c)

	code, out, errOut := runDecodeFile(t, path)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	ls := lines(out)
	if !strings.HasPrefix(ls[0], "    1 ") || !strings.HasSuffix(ls[0], " payload=1024 icrc=BAD") {
		t.Errorf("corrupted packet: %q", ls[0])
	}
	if want := "    2   1.193138 10.9.0.3 -> 10.9.0.2 malformed: wire: unsupported opcode 0x15 (reserved in RC)"; ls[1] != want {
		t.Errorf("malformed packet:\n got %q\nwant %q", ls[1], want)
	}
	for i, o := range others {
		if !strings.HasSuffix(ls[2+i], " malformed: wire: "+o.want) {
			t.Errorf("opcode %#x: %q, want it to end %q", o.op, ls[2+i], o.want)
		}
	}
	if got, want := ls[len(ls)-1], "1120 RoCE packets, 150 other frames skipped, 1 bad ICRC, 6 malformed"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}

	_, out, _ = runDecodeFile(t, path, "--json")
	ls = lines(out)
	if !strings.Contains(ls[0], `"icrc":"bad"`) {
		t.Errorf("JSON of corrupted packet: %s", ls[0])
	}
	if want := `{"index":2,"time":1.193138,"src":"10.9.0.3","dst":"10.9.0.2","error":"wire: unsupported opcode 0x15 (reserved in RC)"}`; ls[1] != want {
		t.Errorf("JSON of malformed packet:\n got %s\nwant %s", ls[1], want)
	}
	if want := `{"summary":{"roce_packets":1120,"other_frames":150,"bad_icrc":1,"malformed":6}}`; ls[len(ls)-1] != want {
		t.Errorf("JSON summary %s, want %s", ls[len(ls)-1], want)
	}

	// explain says an XRC packet is one rxe drops and another NIC may not.
	var stdout bytes.Buffer
	if code := run([]string{"explain", path}, &stdout, io.Discard); code != exitOK {
		t.Fatalf("explain: exit %d", code)
	}
	want := "A packet whose opcode gorxe does not read (wire: " + others[0].want + "): rxe drops it; a NIC that has its service may take it"
	if !strings.Contains(stdout.String(), want) {
		t.Errorf("explain does not say %q:\n%s", want, stdout.String()[:min(stdout.Len(), 2000)])
	}
}

// TestDecodePcapng writes the captures as pcapng and expects the same output.
func TestDecodePcapng(t *testing.T) {
	for _, file := range []string{mtu1024, mtu4096} {
		c := readCapture(t, file)
		path := filepath.Join(t.TempDir(), "c.pcapng")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w, err := pcapgo.NewNgWriter(f, c.Link)
		if err != nil {
			t.Fatal(err)
		}
		for i, data := range c.Frames {
			if err := w.WritePacket(c.Infos[i], data); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		for _, args := range [][]string{nil, {"--json"}} {
			_, want, _ := runDecodeFile(t, file, args...)
			code, got, errOut := runDecodeFile(t, path, args...)
			if code != exitOK || got != want {
				t.Errorf("%s as pcapng %v: exit %d, stderr %q, output differs: %v", filepath.Base(file), args, code, errOut, firstDiff(got, want))
			}
		}
	}
}

// TestDecodeLinkTypes rewrites the Ethernet frames of a capture as raw IP
// and as Linux cooked (SLL) frames and expects the same RoCE lines.
func TestDecodeLinkTypes(t *testing.T) {
	c := readCapture(t, mtu4096)
	_, want, _ := runDecodeFile(t, mtu4096)
	rewrite := func(link layers.LinkType, hdr func(etherType []byte) []byte) captured {
		out := captured{Link: link, Infos: c.Infos}
		for _, f := range c.Frames {
			out.Frames = append(out.Frames, append(hdr(f[12:14]), f[14:]...))
		}
		return out
	}
	cases := map[string]captured{
		"raw": rewrite(layers.LinkTypeRaw, func([]byte) []byte { return nil }),
		"sll": rewrite(layers.LinkTypeLinuxSLL, func(et []byte) []byte {
			// packet type 0 (to us), ARPHRD_ETHER, 6-byte address, protocol
			h := []byte{0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0}
			return append(h, et...)
		}),
	}
	for name, cc := range cases {
		// Non-IP frames (ARP) of the original are "other" either way.
		code, got, errOut := runDecodeFile(t, writePcap(t, cc))
		if code != exitOK || got != want {
			t.Errorf("%s: exit %d, stderr %q, output differs: %v", name, code, errOut, firstDiff(got, want))
		}
	}
}

// firstDiff describes the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := lines(got), lines(want)
	for i := 0; i < len(g) && i < len(w); i++ {
		if g[i] != w[i] {
			return "line " + g[i] + " != " + w[i]
		}
	}
	if len(g) != len(w) {
		return "line counts differ"
	}
	return "none"
}

func TestDecodeTruncatedFile(t *testing.T) {
	b, err := os.ReadFile(mtu1024)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cut.pcap")
	if err := os.WriteFile(path, b[:len(b)-10], 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runDecodeFile(t, path)
	if code != exitError {
		t.Errorf("exit %d, want %d", code, exitError)
	}
	if !strings.HasPrefix(errOut, "gorxe decode: "+path+": the file ends inside frame 1270, ") {
		t.Errorf("stderr %q", errOut)
	}
	ls := lines(out)
	if !strings.HasSuffix(ls[len(ls)-1], "malformed") {
		t.Errorf("no summary of the frames read: %q", ls[len(ls)-1])
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pcap")
	if err := os.WriteFile(garbage, []byte("this is not a capture file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.pcap")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	badPcap := filepath.Join(dir, "bad.pcap")
	if err := os.WriteFile(badPcap, []byte{0xd4, 0xc3, 0xb2, 0xa1, 0}, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pcap")
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string // substring
		stderr string // substring
	}{
		{"missing file", []string{"decode", missing}, exitError, "", "gorxe decode: " + missing + ": no such file or directory\n"},
		{"garbage", []string{"decode", garbage}, exitError, "", "gorxe decode: " + garbage + ": not a pcap or pcapng file"},
		{"empty", []string{"decode", empty}, exitError, "", "gorxe decode: " + empty + ": not a pcap or pcapng file (0 bytes long)"},
		{"short pcap header", []string{"decode", badPcap}, exitError, "", "gorxe decode: " + badPcap + ": pcap: "},
		{"directory", []string{"decode", dir}, exitError, "", "gorxe decode: " + dir + ": "},
		{"no args", nil, exitUsage, "", "gorxe decode [--json] [--roce-port PORT] FILE"},
		{"help", []string{"help"}, exitOK, "gorxe decode [--json] [--roce-port PORT] FILE", ""},
		{"help decode", []string{"help", "decode"}, exitOK, "usage: gorxe decode [--json] [--roce-port PORT] FILE", ""},
		{"unknown command", []string{"frobnicate"}, exitUsage, "", `gorxe: unknown command "frobnicate"`},
		{"decode no file", []string{"decode"}, exitUsage, "", "usage: gorxe decode"},
		{"decode two files", []string{"decode", mtu1024, mtu4096}, exitUsage, "", "want exactly one FILE"},
		{"decode bad flag", []string{"decode", "--yaml", mtu1024}, exitUsage, "", "flag provided but not defined: -yaml"},
		{"decode -h", []string{"decode", "-h"}, exitOK, "", "usage: gorxe decode"},
		{"decode port 0", []string{"decode", "--roce-port", "0", mtu1024}, exitUsage, "", "--roce-port 0: not a UDP port"},
		{"explain port 70000", []string{"explain", "--roce-port", "70000", mtu1024}, exitUsage, "", "--roce-port 70000: not a UDP port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit %d, want %d", code, tt.code)
			}
			if !strings.Contains(stdout.String(), tt.stdout) || tt.stdout == "" && stdout.Len() != 0 {
				t.Errorf("stdout %q, want it to contain %q", stdout.String(), tt.stdout)
			}
			if !strings.Contains(stderr.String(), tt.stderr) || tt.stderr == "" && stderr.Len() != 0 {
				t.Errorf("stderr %q, want it to contain %q", stderr.String(), tt.stderr)
			}
		})
	}
}

// TestSeconds checks the relative time format.
func TestSeconds(t *testing.T) {
	for d, want := range map[int64]string{0: "0.000000", 341_000: "0.000341", 1_181_646_499: "1.181646", 1_181_646_500: "1.181647", -2_000: "-0.000002"} {
		if got := seconds(time.Duration(d)); got != want {
			t.Errorf("seconds(%d ns) = %q, want %q", d, got, want)
		}
	}
}

// writeFrames writes the packets frames build to a raw-IP pcap file, a
// microsecond apart, and returns its path.
func writeFrames(t *testing.T, frames []wire.Frame) string {
	t.Helper()
	c := captured{Link: layers.LinkTypeRaw}
	for i := range frames {
		b, err := frames[i].Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Frames = append(c.Frames, b)
		c.Infos = append(c.Infos, gopacket.CaptureInfo{Timestamp: time.Unix(1700000000, int64(i)*1000)})
	}
	return writePcap(t, c)
}

// TestDecodeBuiltPackets decodes packets gorxe's wire package builds, for
// the headers the rxe captures do not show, over IPv4 and IPv6.
func TestDecodeBuiltPackets(t *testing.T) {
	v4 := wire.IPFields{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"), HopLimit: 64, DontFrag: true}
	v6 := wire.IPFields{Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("2001:db8::2"), HopLimit: 64}
	rc := func(op bth.Opcode) wire.Headers {
		return wire.Headers{BTH: bth.Fields{Opcode: op, PKey: bth.DefaultPKey, DestQP: 0xabcdef, PSN: 42, AckReq: true}}
	}
	imm := rc(bth.RCSendOnlyWithImm)
	imm.Imm = 0xdeadbeef
	inv := rc(bth.RCSendOnlyWithInvalidate)
	inv.IETH = 0x1234
	flush := rc(bth.RCFlush)
	flush.FETH = feth.Fields{Selectivity: 1, PlacementType: 2}
	flush.RETH = reth.Fields{VA: 0x1000, RKey: 0x99, DMALen: 64}
	rnr := rc(bth.RCAcknowledge)
	rnr.AETH = aeth.Fields{Syndrome: aeth.RNRNAK(12), MSN: 7}
	nak := rc(bth.RCAcknowledge)
	nak.AETH = aeth.Fields{Syndrome: aeth.NAK(aeth.NAKPSNSequenceError), MSN: 8}
	frames := []wire.Frame{
		{IP: v4, SrcPort: 50000, DstPort: wire.UDPPort, Headers: imm, Payload: []byte("hello")},
		{IP: v4, SrcPort: 50000, DstPort: wire.UDPPort, Headers: inv},
		{IP: v4, SrcPort: 50000, DstPort: wire.UDPPort, Headers: flush},
		wire.CNP(v4, 0x11),
		{IP: v6, SrcPort: 50001, DstPort: wire.UDPPort, Headers: rnr},
		{IP: v6, SrcPort: 50001, DstPort: wire.UDPPort, Headers: nak},
	}
	path := writeFrames(t, frames)
	code, out, errOut := runDecodeFile(t, path)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := `    1   0.000000 192.0.2.1 -> 192.0.2.2 sport=50000 RC_SEND_ONLY_WITH_IMMEDIATE  qp=0xabcdef psn=42       ack=1 se=0 mig=0 pad=3 imm=0xdeadbeef payload=5 icrc=ok
    2   0.000001 192.0.2.1 -> 192.0.2.2 sport=50000 RC_SEND_ONLY_WITH_INVALIDATE qp=0xabcdef psn=42       ack=1 se=0 mig=0 pad=0 ieth(rkey=0x00001234) payload=0 icrc=ok
    3   0.000002 192.0.2.1 -> 192.0.2.2 sport=50000 RC_FLUSH                     qp=0xabcdef psn=42       ack=1 se=0 mig=0 pad=0 feth(sel=1 plt=2) reth(va=0x1000 rkey=0x00000099 len=64) payload=0 icrc=ok
    4   0.000003 192.0.2.1 -> 192.0.2.2 sport=0     CNP                          qp=0x000011 psn=0        ack=0 se=0 mig=0 pad=0 becn=1 payload=0 icrc=ok
    5   0.000004 2001:db8::1 -> 2001:db8::2 sport=50001 RC_ACKNOWLEDGE               qp=0xabcdef psn=42       ack=1 se=0 mig=0 pad=0 aeth(RNR_NAK timer=0.64ms msn=7) payload=0 icrc=ok
    6   0.000005 2001:db8::1 -> 2001:db8::2 sport=50001 RC_ACKNOWLEDGE               qp=0xabcdef psn=42       ack=1 se=0 mig=0 pad=0 aeth(NAK PSN_SEQ_ERROR msn=8) payload=0 icrc=ok
6 RoCE packets, 0 other frames skipped, 0 bad ICRC, 0 malformed
`
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}

	_, out, _ = runDecodeFile(t, path, "--json")
	ls := lines(out)
	for i, key := range []string{`"imm":{"data":3735928559}`, `"ieth":{"rkey":4660}`, `"feth":{"sel":1,"plt":2},"reth":{"va":4096,"rkey":153,"len":64}`, `"becn":true`,
		`"aeth":{"syndrome":44,"type":"RNR_NAK","value":12,"msn":7}`, `"aeth":{"syndrome":96,"type":"NAK","value":0,"msn":8}`} {
		if !strings.Contains(ls[i], key) {
			t.Errorf("JSON line %d lacks %s: %s", i+1, key, ls[i])
		}
	}
}

// TestDecodeOtherPort: a capture of devices given another RoCE port
// (--roce-port 4792, as make bench-vm runs gorxe beside rxe) is read with
// the same flag, by decode and explain; without it only port 4791's
// packets are RoCE.
func TestDecodeOtherPort(t *testing.T) {
	v4 := wire.IPFields{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"), HopLimit: 64, DontFrag: true}
	send := wire.Headers{BTH: bth.Fields{Opcode: bth.RCSendOnly, PKey: bth.DefaultPKey, DestQP: 0x12, PSN: 7, AckReq: true}}
	frames := []wire.Frame{
		{IP: v4, SrcPort: 50000, DstPort: 4792, Headers: send, Payload: []byte("on 4792")},
		{IP: v4, SrcPort: 50000, DstPort: wire.UDPPort, Headers: send, Payload: []byte("on 4791")},
		{IP: v4, SrcPort: 50000, DstPort: 4792, Headers: send, Payload: []byte("on 4792 again")},
	}
	path := writeFrames(t, frames)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "1 RoCE packets, 2 other frames skipped, 0 bad ICRC, 0 malformed"},
		{[]string{"--roce-port", "4792"}, "2 RoCE packets, 1 other frames skipped, 0 bad ICRC, 0 malformed"},
		{[]string{"--roce-port=4791"}, "1 RoCE packets, 2 other frames skipped, 0 bad ICRC, 0 malformed"},
	} {
		code, out, errOut := runDecodeFile(t, path, tc.args...)
		if code != exitOK || !strings.HasSuffix(out, tc.want+"\n") {
			t.Errorf("decode %v: exit %d (%s), output:\n%s\nwant it to end %q", tc.args, code, errOut, out, tc.want)
		}
		var stdout, stderr bytes.Buffer
		code = run(append(append([]string{"explain"}, tc.args...), path), &stdout, &stderr)
		if code != exitOK || !strings.Contains(stdout.String(), tc.want) {
			t.Errorf("explain %v: exit %d (%s), output:\n%s\nwant %q in it", tc.args, code, stderr.String(), stdout.String(), tc.want)
		}
	}
}

// writeSnapped writes c to a new pcap file in a temporary directory, as
// a capture taken with snap length snap (tcpdump -s): each frame keeps
// its first snap bytes and its length.
func writeSnapped(t *testing.T, c captured, snap int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(uint32(snap), c.Link); err != nil {
		t.Fatal(err)
	}
	for i, data := range c.Frames {
		ci := c.Infos[i]
		kept := data[:min(snap, len(data))]
		ci.CaptureLength, ci.Length = len(kept), len(data)
		if err := w.WritePacket(ci, kept); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// TestDecodeSnapLength: a capture taken with a snap length that keeps
// every header decodes as the whole capture does, packet for packet
// (payload lengths from the IP header), with icrc=cut where the frame was
// cut and a CM message's body, if cut off, not read; one that cuts into
// the headers reports each packet as cut too short to decode, not as
// malformed; explain of the first gives every connection's summary as of
// the whole capture.
func TestDecodeSnapLength(t *testing.T) {
	cmBody := regexp.MustCompile(` cm\([^)]*\)`)
	for _, file := range []string{mtu1024, mtu4096} {
		c := readCapture(t, file)
		_, whole, _ := runDecodeFile(t, file)
		wantLines := lines(whole)
		for _, snap := range []int{96, 200} {
			path := writeSnapped(t, c, snap)
			code, out, errOut := runDecodeFile(t, path)
			if code != exitOK {
				t.Fatalf("%s -s %d: exit %d: %s", file, snap, code, errOut)
			}
			got := lines(out)
			if len(got) != len(wantLines) {
				t.Fatalf("%s -s %d: %d lines, want %d", file, snap, len(got), len(wantLines))
			}
			cut := 0
			for i, g := range got[:len(got)-1] {
				w := wantLines[i]
				if strings.HasSuffix(g, " icrc=cut") {
					cut++
					w = strings.TrimSuffix(w, " icrc=ok") + " icrc=cut"
					if strings.Contains(g, " cm(cut short by the capture)") {
						w = cmBody.ReplaceAllString(w, " cm(cut short by the capture)")
					}
				}
				if g != w {
					t.Fatalf("%s -s %d: line %d\n got %s\nwant %s", file, snap, i+1, g, w)
				}
			}
			// Every RoCE frame longer than the snap length was cut.
			longer := 0
			for _, f := range c.Frames {
				if len(f) > snap && isRoCEFrame(f) {
					longer++
				}
			}
			if cut == 0 || cut != longer {
				t.Errorf("%s -s %d: %d packets marked cut, %d RoCE frames longer than the snap length", file, snap, cut, longer)
			}
			want := summary{RoCE: len(got) - 1, Other: len(c.Frames) - (len(got) - 1), Cut: cut}
			if last := got[len(got)-1]; last != want.String() {
				t.Errorf("%s -s %d: summary %q, want %q", file, snap, last, want.String())
			}
			if snap == 96 {
				var a, b bytes.Buffer
				if code := run([]string{"explain", path}, &a, io.Discard); code != exitOK {
					t.Fatalf("explain %s: exit %d", path, code)
				}
				run([]string{"explain", file}, &b, io.Discard)
				if x, y := connLines(a.String()), connLines(b.String()); x != y {
					t.Errorf("%s -s 96: explain's connections\n%s\nwant, as from the whole capture,\n%s", file, x, y)
				}
				// The rdma_cm exchange of the second capture: its MADs
				// are cut, and neither tool reads their zeros.
				cms, cutCMs := strings.Count(whole, " cm("), strings.Count(out, " cm(cut short by the capture)")
				explained := strings.Count(a.String(), "whose body the capture's snap length cut off")
				_, js, _ := runDecodeFile(t, path, "--json")
				jsonCMs := strings.Count(js, `"cm":"cut short by the capture"`)
				if cutCMs != cms || explained != cms || jsonCMs != cms {
					t.Errorf("%s -s 96: %d CM messages, %d shown cut by decode, %d by decode --json, %d explained as cut", file, cms, cutCMs, jsonCMs, explained)
				}
			}
		}
		// 50 bytes: Ethernet, IP and UDP headers (42) and 8 of the BTH's 12.
		code, out, _ := runDecodeFile(t, writeSnapped(t, c, 50))
		got := lines(out)
		if code != exitOK || !strings.Contains(got[0], "malformed: cut short by the capture's snap length inside its headers") {
			t.Errorf("%s -s 50: exit %d, first line %q", file, code, got[0])
		}
		want := summary{RoCE: len(got) - 1, Other: len(c.Frames) - (len(got) - 1), Unread: len(got) - 1}
		if last := got[len(got)-1]; last != want.String() {
			t.Errorf("%s -s 50: summary %q, want %q", file, last, want.String())
		}
	}
}

// isRoCEFrame reports whether an untagged Ethernet frame carries UDP to
// the RoCE port.
func isRoCEFrame(f []byte) bool { return roceUDPPayload(f) > 0 }

// connLines returns explain's per-connection summaries, in which the
// connections the CM sets up, whose messages a short snap length cuts off,
// are left out.
func connLines(out string) string {
	var sb strings.Builder
	for _, block := range strings.Split(out, "\n\n") {
		if strings.HasPrefix(block, "connection ") && !strings.Contains(block, ": CM,") {
			_, rest, _ := strings.Cut(block, ":") // the connection's number
			sb.WriteString(rest + "\n")
		}
	}
	return sb.String()
}

// TestDecodeSnappedGSO: an uncut GSO datagram (a capture on a host whose
// udp link sends runs) that the snap length cut short cannot be cut into
// its packets, whose ICRCs are gone: decode says so rather than show one
// packet with the whole run's payload; whole, it shows the three packets.
func TestDecodeSnappedGSO(t *testing.T) {
	var datagram []byte
	for k := range 3 {
		f := wire.Frame{
			IP:      wire.IPFields{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"), HopLimit: 64, DontFrag: true, ID: uint16(k)},
			SrcPort: 50000, DstPort: wire.UDPPort,
			Headers: wire.Headers{BTH: bth.Fields{Opcode: bth.RCRDMAWriteMiddle, PKey: bth.DefaultPKey, DestQP: 0x11, PSN: bth.PSN(7 + k)}},
			Payload: bytes.Repeat([]byte{byte(k)}, 1024),
		}
		p, err := f.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			datagram = append(datagram, p[:wire.IPv4Len+wire.UDPLen]...)
		}
		datagram = append(datagram, p[wire.IPv4Len+wire.UDPLen:]...)
	}
	binary.BigEndian.PutUint16(datagram[2:], uint16(len(datagram)))
	binary.BigEndian.PutUint16(datagram[wire.IPv4Len+4:], uint16(len(datagram)-wire.IPv4Len))
	eth := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00}
	c := captured{Link: layers.LinkTypeEthernet, Frames: [][]byte{append(eth, datagram...)}, Infos: []gopacket.CaptureInfo{{Timestamp: time.Unix(1, 0)}}}

	_, out, _ := runDecodeFile(t, writeSnapped(t, c, len(c.Frames[0])))
	if n := strings.Count(out, "RC_RDMA_WRITE_MIDDLE"); n != 3 || !strings.Contains(out, "gso=3/3") {
		t.Errorf("whole: %d packets, want the three of the run:\n%s", n, out)
	}
	_, out, _ = runDecodeFile(t, writeSnapped(t, c, 200))
	got := lines(out)
	want := summary{RoCE: 1, Unread: 1}
	if len(got) != 2 || !strings.Contains(got[0], "an uncut GSO datagram") || got[1] != want.String() {
		t.Errorf("cut at 200 bytes:\n%s\nwant one line naming an uncut GSO datagram and %q", out, want.String())
	}
}

// syncBuffer is a bytes.Buffer that one goroutine writes while another
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDecodeStdin: "gorxe decode -" reads the capture from the standard
// input, gzipped or not, and prints each packet as its frame arrives,
// before the capture ends, as it does behind tcpdump -U -w -.
func TestDecodeStdin(t *testing.T) {
	whole, err := os.ReadFile(mtu1024)
	if err != nil {
		t.Fatal(err)
	}
	_, want, _ := runDecodeFile(t, mtu1024)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(whole)
	zw.Close()
	for _, c := range []struct {
		name  string
		input []byte
		split int // bytes written before the output is checked
	}{
		{"pcap", whole, 30000},
		{"gzip", gz.Bytes(), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			stdin := os.Stdin
			os.Stdin = r
			defer func() { os.Stdin = stdin }()
			var stdout, stderr syncBuffer
			done := make(chan int)
			go func() { done <- run([]string{"decode", "-"}, &stdout, &stderr) }()
			rest := c.input
			if c.split > 0 {
				if _, err := w.Write(c.input[:c.split]); err != nil {
					t.Fatal(err)
				}
				rest = c.input[c.split:]
				// The packets of the first 30000 bytes are printed
				// while the rest has not been written.
				deadline := time.Now().Add(10 * time.Second)
				for !strings.Contains(stdout.String(), "\n") {
					if time.Now().After(deadline) {
						t.Fatalf("nothing printed 10 s after the capture's first %d bytes", c.split)
					}
					time.Sleep(5 * time.Millisecond)
				}
				if !strings.HasPrefix(want, stdout.String()) {
					t.Fatalf("printed before the rest arrived:\n%s\nnot the start of\n%s", stdout.String(), want[:200])
				}
			}
			go func() {
				w.Write(rest)
				w.Close()
			}()
			if code := <-done; code != exitOK || stdout.String() != want {
				t.Errorf("exit %d, stderr %q; output equal to the file's: %v", code, stderr.String(), stdout.String() == want)
			}
		})
	}
}

// TestDecodeOtherPortHint: a capture whose RoCE packets all go to another UDP
// port has none at 4791; decode says on stderr where they are and which
// flag reads them, and explain ends its report with the same.
func TestDecodeOtherPortHint(t *testing.T) {
	const path = "../../testdata/other-port/gorxe-write_bw-4792.pcap"
	const hint = "RoCE v2 packets on other UDP ports (their ICRCs verify): 69 to port 4792; --roce-port 4792 reads them"
	code, out, errOut := runDecodeFile(t, path)
	if code != exitOK || !strings.HasPrefix(out, "0 RoCE packets, 21 other frames") || errOut != "gorxe decode: "+hint+"\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = runDecodeFile(t, path, "--roce-port", "4792")
	if code != exitOK || !strings.HasSuffix(out, "69 RoCE packets (64 of them from 16 uncut GSO datagrams), 0 other frames skipped, 0 bad ICRC, 0 malformed\n") || errOut != "" {
		t.Errorf("--roce-port 4792: exit %d, stdout ends %q, stderr %q", code, out[max(0, len(out)-120):], errOut)
	}
	var ex bytes.Buffer
	if code := run([]string{"explain", path}, &ex, io.Discard); code != exitOK || !strings.HasSuffix(ex.String(), "\n"+hint+".\n") {
		t.Errorf("explain: exit %d, report ends %q", code, ex.String()[max(0, ex.Len()-200):])
	}
}

// TestDecodeRoCEv1Hint: a capture of RoCE v1 frames (a sender that chose a
// RoCE v1 GID index) has no RoCE v2 packet; decode says on stderr what the
// frames are and what would put them on UDP, and explain ends its report
// with the same.
func TestDecodeRoCEv1Hint(t *testing.T) {
	c := readCapture(t, mtu1024)
	v1 := 0
	for k, f := range c.Frames {
		if roceUDPPayload(f) >= 0 {
			c.Frames[k] = pcaptest.RoCEv1(f)
			v1++
		}
	}
	path := writePcap(t, c)
	hint := fmt.Sprintf("%d RoCE v1 frames (EtherType 0x8915: a GRH and a BTH, no IP or UDP), which gorxe does not read: "+
		"their sender chose a RoCE v1 GID index; a RoCE v2 one (show_gids' v2 rows) puts the traffic on UDP port 4791", v1)
	code, out, errOut := runDecodeFile(t, path)
	if code != exitOK || !strings.HasPrefix(out, fmt.Sprintf("0 RoCE packets, %d other frames", len(c.Frames))) || errOut != "gorxe decode: "+hint+"\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var ex bytes.Buffer
	if code := run([]string{"explain", path}, &ex, io.Discard); code != exitOK || !strings.HasSuffix(ex.String(), "\n"+hint+".\n") {
		t.Errorf("explain: exit %d, report ends %q", code, ex.String()[max(0, ex.Len()-300):])
	}
}

package explain

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/gorxe/gorxe/internal/capture"
	"github.com/gorxe/gorxe/internal/perfkey"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire"
	"github.com/gorxe/gorxe/wire/aeth"
	"github.com/gorxe/gorxe/wire/bth"
	wirecm "github.com/gorxe/gorxe/wire/cm"
	"github.com/gorxe/gorxe/wire/deth"
	"github.com/gorxe/gorxe/wire/reth"
)

// read explains the capture at path.
func read(t *testing.T, path string) *Report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Read(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPerftestCapture explains kernel rxe's perftest capture (write_bw,
// read_bw, atomic_bw, send_bw, no loss): four RC connections paired
// across the two hosts, every packet explained and none an anomaly.
func TestPerftestCapture(t *testing.T) {
	r := read(t, "../testdata/rxe/perftest-mtu1024.pcap")
	if r.Counts.RoCE != 1120 || len(r.Packets) != 1120 {
		t.Fatalf("%d RoCE packets, %d explained, want 1120", r.Counts.RoCE, len(r.Packets))
	}
	if len(r.Conns) != 4 {
		t.Fatalf("%d connections, want 4: %+v", len(r.Conns), r.Conns)
	}
	for k, c := range r.Conns {
		if c.Service != "RC" || c.Ends[0].QPN == 0 || c.Ends[1].QPN == 0 {
			t.Errorf("connection %d: %+v: want RC with both QPNs known", k, c)
		}
		if c.Summary.Retransmissions != [2]int{} || len(c.Summary.NAKs[0])+len(c.Summary.NAKs[1]) != 0 {
			t.Errorf("connection %d: %+v: want no retransmission and no NAK", k, c.Summary)
		}
	}
	for _, p := range r.Packets {
		if p.Text == "" || p.Conn < 0 {
			t.Fatalf("packet %d unexplained: %+v", p.Index, p)
		}
		if p.Anomaly != "" {
			t.Errorf("packet %d: anomaly %q: %s", p.Index, p.Anomaly, p.Text)
		}
	}
	// The READ connection: its responses complete READs, one per 64.
	var reads, lasts int
	for _, p := range r.Packets {
		switch p.Opcode {
		case "RC_RDMA_READ_REQUEST":
			reads++
		case "RC_RDMA_READ_RESPONSE_LAST":
			lasts++
			if !strings.HasPrefix(p.Text, "Last READ response (64 of 64)") {
				t.Errorf("packet %d: %s", p.Index, p.Text)
			}
		}
	}
	if reads == 0 || lasts == 0 {
		t.Errorf("%d READ requests, %d last responses", reads, lasts)
	}
}

// TestJSON checks that the JSON report decodes into the same report.
func TestJSON(t *testing.T) {
	r := read(t, "../testdata/rxe/perftest-mtu1024.pcap")
	var b bytes.Buffer
	if err := WriteJSON(&b, r); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Packets) != len(r.Packets) || back.Packets[5].Text != r.Packets[5].Text || back.Conns[1].Summary.Bytes != r.Conns[1].Summary.Bytes {
		t.Errorf("the JSON report does not decode to the same report")
	}
}

// TestNotCapture checks the error for a file that is no capture.
func TestNotCapture(t *testing.T) {
	if _, err := Read(strings.NewReader("hello, this is not a pcap file")); err == nil || !strings.Contains(err.Error(), "not a pcap") {
		t.Errorf("err = %v", err)
	}
}

// TestCMCapture explains rdma_cm's handshake with kernel rxe (rdma_server
// on rxe, gorxe's rdma_client; the interop harness's capture): the CM
// messages on QP 1 are one conversation, and the RC connection they set
// up is paired with the QPNs the REQ and the REP name.
func TestCMCapture(t *testing.T) {
	r := read(t, "../testdata/interop/cm/rdma_cm-rxe-server.pcap")
	if len(r.Conns) != 2 || r.Conns[0].Service != "CM" || r.Conns[1].Service != "RC" {
		t.Fatalf("connections %+v, want CM then RC", r.Conns)
	}
	if e := r.Conns[1].Ends; e[0].QPN != 0x11 || e[1].QPN != 0x1a {
		t.Errorf("the RC connection's ends are %+v, want QP 0x11 (the REQ's) and 0x1a (the REP's)", e)
	}
	for k, want := range []string{"CM REQ: asks to connect QP 0x11", "CM REP: accepts, naming its QP 0x1a", "CM RTU", "SEND of 16 bytes", "ACK", "SEND of 16 bytes", "ACK", "CM DREQ", "CM DREP"} {
		if !strings.Contains(r.Packets[k].Text, want) {
			t.Errorf("packet %d: %q, want %q", k+1, r.Packets[k].Text, want)
		}
	}
	if rp := read(t, "../testdata/interop/cm/rping-rxe-server.pcap"); len(rp.Conns) != 2 {
		t.Errorf("rping: %d connections, want the CM's and the RC's", len(rp.Conns))
	}
}

// TestCMReusedQPNs explains two connections, one after the other, that
// the CM sets up between the same two QPNs (a program that opens a new
// device for each connection numbers its QPs alike each time): each
// handshake starts a connection of its own, so the second one's PSNs,
// far from the first's, are no anomaly.
func TestCMReusedQPNs(t *testing.T) {
	pkt, _ := packets(t)
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	mad := func(back bool, tid uint64, m wirecm.Message) []byte {
		f := wire.Frame{IP: wire.IPFields{Src: a, Dst: b, HopLimit: 64}, SrcPort: 49152, DstPort: wire.UDPPort}
		if back {
			f.IP.Src, f.IP.Dst = b, a
		}
		f.BTH = bth.Fields{Opcode: bth.UDSendOnly, PKey: bth.DefaultPKey, DestQP: 1}
		f.DETH = deth.Fields{QKey: deth.GSIQKey, SrcQP: 1}
		f.Payload = wirecm.Append(nil, tid, m)
		p, err := f.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	var pkts [][]byte
	for k, start := range []bth.PSN{100, 9000} {
		tid := uint64(k + 1)
		pkts = append(pkts,
			mad(false, tid, &wirecm.REQ{LocalQPN: 0x11, StartingPSN: start, ServiceID: wirecm.ServiceID(wirecm.PortSpaceTCP, 7174)}),
			mad(true, tid, &wirecm.REP{LocalQPN: 0x22, StartingPSN: start}),
			mad(false, tid, &wirecm.RTU{}),
			pkt(false, bth.RCSendOnly, start, 16), pkt(true, bth.RCAcknowledge, start, 0),
			pkt(true, bth.RCSendOnly, start, 16), pkt(false, bth.RCAcknowledge, start, 0),
			mad(false, tid+10, &wirecm.DREQ{}), mad(true, tid+10, &wirecm.DREP{}))
	}
	r := readPackets(t, pkts...)
	if len(r.Conns) != 3 || r.Conns[0].Service != "CM" || r.Conns[1].Service != "RC" || r.Conns[2].Service != "RC" {
		t.Fatalf("connections %+v, want the CM's, then two RC", r.Conns)
	}
	for _, c := range r.Conns[1:] {
		if e := c.Ends; e[0].QPN != 0x11 || e[1].QPN != 0x22 {
			t.Errorf("an RC connection's ends are %+v, want QP 0x11 (the REQ's) and 0x22 (the REP's)", e)
		}
	}
	for k, p := range r.Packets {
		if p.Anomaly != "" {
			t.Errorf("packet %d (%s): anomaly %q: %s", k+1, p.Opcode, p.Anomaly, p.Text)
		}
		if want := 1 + k/9; p.Opcode != "UD_SEND_ONLY" && p.Conn != want {
			t.Errorf("packet %d (%s) is in connection %d, want %d", k+1, p.Opcode, p.Conn, want)
		}
	}
}

// TestPerftestExchange explains two perftest runs one after the other
// between the same two QPNs, each connected by perftest's TCP exchange
// (its key messages, sent again at each handshake, over addresses other
// than the RoCE ones): the key messages name the QPs by their GIDs, and
// each run is a connection of its own.
func TestPerftestExchange(t *testing.T) {
	pkt, _ := packets(t)
	seg := func(back bool, sport uint16, k perfkey.Key) []byte {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: []byte{192, 168, 0, 1}, DstIP: []byte{192, 168, 0, 2}}
		tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: 18515, PSH: true, ACK: true, Window: 512}
		if back {
			ip.SrcIP, ip.DstIP = ip.DstIP, ip.SrcIP
			tcp.SrcPort, tcp.DstPort = tcp.DstPort, tcp.SrcPort
		}
		tcp.SetNetworkLayerForChecksum(ip)
		msg, err := k.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ip, tcp, gopacket.Payload(msg)); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	gid := func(a string) (g [16]byte) {
		g = netip.MustParseAddr(a).As16()
		return g
	}
	var pkts [][]byte
	for k, start := range []bth.PSN{100, 9000} {
		sport := uint16(40000 + k)
		client := perfkey.Key{QPN: 0x11, PSN: uint32(start), GID: gid("::ffff:10.0.0.1")}
		server := perfkey.Key{QPN: 0x22, PSN: uint32(start), GID: gid("::ffff:10.0.0.2")}
		pkts = append(pkts, seg(false, sport, client), seg(true, sport, server), seg(false, sport, client), seg(true, sport, server),
			pkt(false, bth.RCSendOnly, start, 16), pkt(true, bth.RCAcknowledge, start, 0),
			pkt(true, bth.RCSendOnly, start, 16), pkt(false, bth.RCAcknowledge, start, 0))
	}
	r := readPackets(t, pkts...)
	if len(r.Conns) != 2 {
		t.Fatalf("connections %+v, want one RC connection a run", r.Conns)
	}
	for _, c := range r.Conns {
		if e := c.Ends; e[0].QPN != 0x11 || e[1].QPN != 0x22 {
			t.Errorf("a connection's ends are %+v, want QP 0x11 and 0x22", e)
		}
	}
	for k, p := range r.Packets {
		if p.Anomaly != "" || p.Conn != k/4 {
			t.Errorf("packet %d (%s): connection %d, anomaly %q (want connection %d, none): %s", k+1, p.Opcode, p.Conn, p.Anomaly, k/4, p.Text)
		}
	}
}

// packets returns builders of RC packets between 10.0.0.1's QP 0x11 and
// 10.0.0.2's QP 0x22: pkt from either side (back: from 10.0.0.2), req a
// request of 10.0.0.1's.
func packets(t *testing.T) (pkt func(back bool, op bth.Opcode, psn bth.PSN, n int) []byte, req func(op bth.Opcode, psn bth.PSN, n int) []byte) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	pkt = func(back bool, op bth.Opcode, psn bth.PSN, n int) []byte {
		f := wire.Frame{IP: wire.IPFields{Src: a, Dst: b, HopLimit: 64}, SrcPort: 49152, DstPort: wire.UDPPort, Payload: make([]byte, n)}
		f.BTH = bth.Fields{Opcode: op, PKey: bth.DefaultPKey, DestQP: 0x22, PSN: psn}
		if back {
			f.IP.Src, f.IP.Dst, f.BTH.DestQP = b, a, 0x11
		}
		if op == bth.RCAcknowledge {
			f.AETH = aeth.Fields{Syndrome: aeth.ACK(31), MSN: 0}
		}
		p, err := f.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	return pkt, func(op bth.Opcode, psn bth.PSN, n int) []byte { return pkt(false, op, psn, n) }
}

// TestOpcodeSequence explains requests that arrive in PSN order with
// opcodes out of sequence: a SEND begun and not finished, then another
// FIRST; a LAST with no FIRST. Each is an error the responder refuses; the
// requests in sequence around them are not.
func TestOpcodeSequence(t *testing.T) {
	_, req := packets(t)
	for _, tc := range []struct {
		name string
		pkts [][]byte
		bad  int // the index of the packet out of sequence, or -1
	}{
		{"in sequence", [][]byte{req(bth.RCSendFirst, 7, 1024), req(bth.RCSendMiddle, 8, 1024), req(bth.RCSendLast, 9, 10), req(bth.RCSendOnly, 10, 10)}, -1},
		{"FIRST before LAST", [][]byte{req(bth.RCSendFirst, 7, 1024), req(bth.RCSendMiddle, 8, 1024), req(bth.RCSendFirst, 9, 1024)}, 2},
		{"LAST after LAST", [][]byte{req(bth.RCSendFirst, 7, 1024), req(bth.RCSendLast, 8, 1024), req(bth.RCSendLast, 9, 1024)}, 2},
		{"WRITE into a SEND", [][]byte{req(bth.RCSendFirst, 7, 1024), req(bth.RCRDMAWriteMiddle, 8, 1024)}, 1},
		{"captured from the middle", [][]byte{req(bth.RCRDMAWriteMiddle, 7, 1024), req(bth.RCRDMAWriteLast, 8, 1024), req(bth.RCSendOnly, 9, 8)}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := readPackets(t, tc.pkts...)
			for k, p := range r.Packets {
				bad := p.Anomaly == "error" && strings.Contains(p.Text, "breaks the sequence")
				if bad != (k == tc.bad) {
					t.Errorf("packet %d (%s): out of sequence %v, want %v: %q", k, p.Opcode, bad, k == tc.bad, p.Text)
				}
			}
		})
	}
}

// TestResendMismatch explains a requester that resends a PSN as another
// packet than it first sent (kernel rxe 6.1 does, under load: a zero-length
// SEND_ONLY where a SEND_FIRST was, and the message cut one PSN later):
// each such packet is an error, and a faithful resend is not.
func TestResendMismatch(t *testing.T) {
	pkt, req := packets(t)
	sent := [][]byte{
		req(bth.RCSendFirst, 100, 1024),
		req(bth.RCSendMiddle, 101, 1024),
		req(bth.RCSendLast, 102, 512),
		pkt(true, bth.RCAcknowledge, 100, 0),
	}
	for _, tc := range []struct {
		name   string
		resent [][]byte
		errors []int // the resent packets that are errors, by index
	}{
		{"faithful", [][]byte{req(bth.RCSendMiddle, 101, 1024), req(bth.RCSendLast, 102, 512)}, nil},
		{"cut again", [][]byte{req(bth.RCSendOnly, 101, 0), req(bth.RCSendFirst, 102, 1024)}, []int{0, 1}},
		{"shorter", [][]byte{req(bth.RCSendMiddle, 101, 1024), req(bth.RCSendLast, 102, 256)}, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := readPackets(t, append(slices.Clone(sent), tc.resent...)...)
			if len(r.Packets) != len(sent)+len(tc.resent) {
				t.Fatalf("%d packets, want %d", len(r.Packets), len(sent)+len(tc.resent))
			}
			for k, p := range r.Packets[len(sent):] {
				want := slices.Contains(tc.errors, k)
				if got := p.Anomaly == "error" && strings.Contains(p.Text, "is not what"); got != want {
					t.Errorf("resent packet %d (%s): flagged %v, want %v: %s %q", k, p.Opcode, got, want, p.Anomaly, p.Text)
				}
				if !strings.Contains(p.Text, "Resent") && !strings.Contains(p.Text, "Retransmission") {
					t.Errorf("resent packet %d not told as a retransmission: %q", k, p.Text)
				}
			}
		})
	}
}

// TestReadLostBeforeCapture explains a READ request lost before the
// capture point, as kernel rxe's requester recovers from it (case 27 of
// the quick interop matrix): the responder NAKs the next READ, the
// requester sends the lost READ alone, waits for its answers and then
// sends the READs after it again. That is one go-back, after the NAK;
// the answers to the lost READ, which come before those of the READs
// sent first after it, are in PSN order and imply no other NAK.
func TestReadLostBeforeCapture(t *testing.T) {
	frame, read, answers := readTraffic(t)
	nak := frame(true, wire.Headers{BTH: bth.Fields{Opcode: bth.RCAcknowledge, PSN: 116},
		AETH: aeth.Fields{Syndrome: aeth.NAK(aeth.NAKPSNSequenceError)}}, 0)
	// The READ at 116 is lost before the capture point. (The one at 84
	// shows the path MTU: the next request comes 16 PSNs later.)
	pkts := [][]byte{read(84), read(100), read(132), read(148)}
	pkts = append(pkts, answers(84)...)
	pkts = append(pkts, answers(100)...)
	pkts = append(pkts, nak, read(116))
	pkts = append(pkts, answers(116)...)
	pkts = append(pkts, read(132), read(148))
	pkts = append(pkts, answers(132)...)
	pkts = append(pkts, answers(148)...)
	r := readPackets(t, pkts...)
	got := goBacks(r)
	if len(got) != 1 || got[0].Kind != trace.GoBack || got[0].Reason != trace.GoBackNAK || got[0].PSN != 116 {
		t.Errorf("events %v, want one go-back to PSN 116 after the NAK", got)
	}
	if s := r.Conns[0].Summary.Retransmissions; s != [2]int{3, 0} {
		t.Errorf("retransmissions %v, want [3 0]", s)
	}
}

// readTraffic returns builders of an RC connection's packets between
// 10.0.0.1 (the requester) and 10.0.0.2 at path MTU 4096: frame, any
// packet (back: the responder's); read, a READ of 16 MTUs at a PSN; and
// answers, the 16 responses to the READ at a PSN, in order.
func readTraffic(t *testing.T) (frame func(back bool, h wire.Headers, n int) []byte, read func(bth.PSN) []byte, answers func(bth.PSN) [][]byte) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	frame = func(back bool, h wire.Headers, n int) []byte {
		f := wire.Frame{IP: wire.IPFields{Src: a, Dst: b, HopLimit: 64}, SrcPort: 49152, DstPort: wire.UDPPort, Headers: h, Payload: make([]byte, n)}
		f.BTH.PKey, f.BTH.DestQP = bth.DefaultPKey, 0x22
		if back {
			f.IP.Src, f.IP.Dst, f.BTH.DestQP = b, a, 0x11
		}
		p, err := f.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	const mtu, span = 4096, 16
	read = func(psn bth.PSN) []byte {
		return frame(false, wire.Headers{BTH: bth.Fields{Opcode: bth.RCRDMAReadRequest, PSN: psn},
			RETH: reth.Fields{VA: 0x1000, RKey: 7, DMALen: span * mtu}}, 0)
	}
	answers = func(psn bth.PSN) (pkts [][]byte) {
		for k := range bth.PSN(span) {
			op := bth.RCRDMAReadResponseMiddle
			var h wire.Headers
			switch k {
			case 0:
				op, h.AETH = bth.RCRDMAReadResponseFirst, aeth.Fields{Syndrome: aeth.ACK(31)}
			case span - 1:
				op, h.AETH = bth.RCRDMAReadResponseLast, aeth.Fields{Syndrome: aeth.ACK(31)}
			}
			h.BTH = bth.Fields{Opcode: op, PSN: psn + k}
			pkts = append(pkts, frame(true, h, mtu))
		}
		return pkts
	}
	return frame, read, answers
}

// goBacks returns the go-backs, probes, implied NAKs and timeouts r's
// packets show, in order.
func goBacks(r *Report) (got []trace.Event) {
	for _, p := range r.Packets {
		for _, e := range p.Events {
			if e.Kind == trace.GoBack || e.Kind == trace.Probe || e.Kind == trace.ImpliedNAK || e.Kind == trace.Timeout {
				got = append(got, e)
			}
		}
	}
	return got
}

// TestImpliedNAKInRun: a READ response that shows the responses before
// it lost, coming while a go-back run has still to resend that READ and
// has had no answer since it began, is covered by the run, whose resend
// of the READ in its turn is no second go-back (rxe's requester neither
// starts nor counts one then). Once the run has had an answer that
// acknowledges something new, the same response begins a new go-back.
func TestImpliedNAKInRun(t *testing.T) {
	frame, read, answers := readTraffic(t)
	middle := func(psn bth.PSN) []byte { // a response from inside a READ's
		return frame(true, wire.Headers{BTH: bth.Fields{Opcode: bth.RCRDMAReadResponseMiddle, PSN: psn}}, 4096)
	}
	for _, c := range []struct {
		name     string
		progress bool
		want     []string
	}{
		{"no answer since the run began", false, []string{trace.GoBackTimeout}},
		{"an answer since the run began", true, []string{trace.GoBackTimeout, trace.GoBackImpliedNAK}},
	} {
		// READs at 100, 116, 132 and 148; nothing answers, and the
		// requester goes back at its timer, resending 100 and 116.
		pkts := [][]byte{read(100), read(116), read(132), read(148), read(100), read(116)}
		if c.progress {
			pkts = append(pkts, answers(100)...)
		}
		// A late response from the middle of the READ at 132, whose
		// first ones are lost; then the run resends 132 and 148.
		pkts = append(pkts, middle(134), read(132), read(148))
		for _, psn := range []bth.PSN{100, 116, 132, 148} {
			if psn != 100 || !c.progress {
				pkts = append(pkts, answers(psn)...)
			}
		}
		var got []string
		implied := 0
		for _, e := range goBacks(readPackets(t, pkts...)) {
			switch e.Kind {
			case trace.GoBack:
				got = append(got, e.Reason)
			case trace.ImpliedNAK:
				implied++
			}
		}
		if !slices.Equal(got, c.want) || implied != 1 {
			t.Errorf("%s: go-backs %v and %d implied NAKs, want %v and 1", c.name, got, implied, c.want)
		}
	}
}

// TestCapturedTwice: a tcpdump -i any capture on a host whose address is
// on a bridge sees every packet twice, on the bridge and on its port;
// explain leaves the second sighting out, so that nothing is taken for a
// resend. The same bytes again on the same interface are a packet sent
// again, and a capture whose frames do not name their interface shows
// no packet twice.
func TestCapturedTwice(t *testing.T) {
	const path = "../testdata/any/gorxe-bridge-any.pcap"
	r := read(t, path)
	if r.Counts.RoCE == 0 || r.Counts.Twice*2 != r.Counts.RoCE {
		t.Fatalf("%d RoCE packets, %d seen twice: want half of them", r.Counts.RoCE, r.Counts.Twice)
	}
	for k, c := range r.Conns {
		if c.Summary.Retransmissions != [2]int{} || c.Summary.Timeouts != [2]int{} || c.Summary.Messages[0]+c.Summary.Messages[1] != 8 {
			t.Errorf("connection %d: %+v: want 8 messages, no resend and no timeout", k, c.Summary)
		}
	}
	twice := 0
	for _, p := range r.Packets {
		switch {
		case p.Anomaly == "captured twice":
			twice++
			// Leaving, on the bridge then on its port; arriving, the
			// other way round.
			if p.Conn != -1 || !strings.Contains(p.Text, "on another interface of the capturing host (index 3, then 2)") &&
				!strings.Contains(p.Text, "on another interface of the capturing host (index 2, then 3)") {
				t.Errorf("packet %d: %+v", p.Index, p)
			}
		case p.Anomaly != "":
			t.Errorf("packet %d: anomaly %q: %s", p.Index, p.Anomaly, p.Text)
		}
	}
	if twice != r.Counts.Twice {
		t.Errorf("%d packets marked captured twice, %d counted", twice, r.Counts.Twice)
	}
	var text bytes.Buffer
	WriteText(&text, r)
	if want := fmt.Sprintf("; %d of the RoCE packets seen twice by the capture, left out\n", r.Counts.Twice); !strings.HasSuffix(text.String(), want) {
		t.Errorf("text report ends %q, want %q", text.String()[max(0, text.Len()-120):], want)
	}

	// Every frame on one interface: the second sightings are resends.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	oneIf := rewriteSLL2(t, b, func(h []byte) { binary.BigEndian.PutUint32(h[4:], 3) })
	r, err = Read(bytes.NewReader(oneIf))
	if err != nil {
		t.Fatal(err)
	}
	if r.Counts.Twice != 0 || r.Conns[0].Summary.Retransmissions[0] == 0 {
		t.Errorf("one interface: %d seen twice, %v resent; want none seen twice, all taken as resent", r.Counts.Twice, r.Conns[0].Summary.Retransmissions)
	}
}

// rewriteSLL2 applies edit to the 20-byte Linux cooked v2 header of every
// frame of a little-endian pcap file.
func rewriteSLL2(t *testing.T, file []byte, edit func(h []byte)) []byte {
	t.Helper()
	out := bytes.Clone(file)
	if binary.LittleEndian.Uint32(out[20:]) != 276 {
		t.Fatalf("link type %d, want Linux cooked v2 (276)", binary.LittleEndian.Uint32(out[20:]))
	}
	for off := 24; off+16 <= len(out); {
		n := int(binary.LittleEndian.Uint32(out[off+8:]))
		edit(out[off+16 : off+16+20])
		off += 16 + n
	}
	return out
}

// TestResendNotNeeded: a requester resends after a silence (a tail-loss
// probe, or its ACK timer), and the PSN it resent is then acknowledged
// twice: the first ACK answered the original, late, and the second the
// copy, so the resend was not needed, and explain says so of the second.
// One ACK, or a repeat after a later PSN's, proves nothing.
func TestResendNotNeeded(t *testing.T) {
	pkt, req := packets(t)
	w := func(psn bth.PSN) []byte { return req(bth.RCRDMAWriteOnly, psn, 64) }
	ack := func(psn bth.PSN) []byte { return pkt(true, bth.RCAcknowledge, psn, 0) }
	for _, tc := range []struct {
		name string
		pkts [][]byte
		want int // the packet told as the copy's answer, or -1
	}{
		{"timeout, answered twice", [][]byte{w(10), ack(10), w(11), w(11), ack(11), ack(11)}, 5},
		{"probe, answered twice", [][]byte{w(10), w(11), w(11), ack(11), ack(11)}, 4},
		{"answered once", [][]byte{w(10), ack(10), w(11), w(11), ack(11), w(12), ack(12)}, -1},
		{"a repeat after a later PSN's answer", [][]byte{w(10), w(11), w(11), ack(11), w(12), ack(12), ack(11)}, -1},
		// The WRITE's LAST was lost: the resent FIRST and MIDDLE are
		// duplicates, each acknowledged, but the resend was needed.
		{"a tail lost, the rest resent", [][]byte{
			req(bth.RCRDMAWriteFirst, 10, 1024), req(bth.RCRDMAWriteMiddle, 11, 1024),
			req(bth.RCRDMAWriteFirst, 10, 1024), req(bth.RCRDMAWriteMiddle, 11, 1024), req(bth.RCRDMAWriteLast, 12, 64),
			ack(11), ack(11), ack(12)}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := readPackets(t, tc.pkts...)
			for k, p := range r.Packets {
				if got := strings.Contains(p.Text, "was not needed"); got != (k == tc.want) {
					t.Errorf("packet %d (%s): told as the copy's answer %v, want %v: %q", k, p.Opcode, got, k == tc.want, p.Text)
				}
			}
		})
	}
}

// TestFewResentAtTimeout: after a silence the requester resends a few
// packets from the oldest, and the rest of the WRITE once they are
// acknowledged, as gorxe's does after a local ACK timeout. explain tells
// the timeout at the first resend, one timeout in all, and at the first
// packet after the answer, that the run went on after it.
func TestFewResentAtTimeout(t *testing.T) {
	ack, middle, first, last, window := writeWindow(t)
	for _, tc := range []struct {
		name   string
		resend [][]byte
		want   int    // the packet told as going on after the answer, or -1
		text   string // what it says
	}{
		{"one, then the rest", [][]byte{first(), ack(10), middle(11), middle(12), middle(13), middle(14), last(), ack(15)},
			8, "resent 1 packet from packet 7, and the rest only after the ACK of packet 8"},
		{"four, then the rest", [][]byte{first(), middle(11), middle(12), middle(13), ack(13), middle(14), last(), ack(15)},
			11, "resent 4 packets from packet 7, and the rest only after the ACK of packet 11"},
		{"all at once", [][]byte{first(), middle(11), middle(12), middle(13), middle(14), last(), ack(15)}, -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := readPackets(t, append(slices.Clone(window), tc.resend...)...)
			for k, p := range r.Packets {
				if got := strings.Contains(p.Text, "only after the ACK"); got != (k == tc.want) {
					t.Errorf("packet %d (%s): told as the run after the answer %v, want %v: %q", k, p.Opcode, got, k == tc.want, p.Text)
				}
				if k == tc.want && !strings.Contains(p.Text, tc.text) {
					t.Errorf("packet %d: %q, want it to say %q", k, p.Text, tc.text)
				}
			}
			if !strings.Contains(r.Packets[len(window)].Text, "local ACK timer fired") {
				t.Errorf("packet %d not told as the timeout's: %q", len(window), r.Packets[len(window)].Text)
			}
			sum := r.Conns[0].Summary
			if sum.Timeouts[0] != 1 || sum.Retransmissions[0] != len(window) {
				t.Errorf("timeouts %d, retransmissions %d; want 1 and %d", sum.Timeouts[0], sum.Retransmissions[0], len(window))
			}
		})
	}
}

// TestGoBackUndone: after a silence the requester resends a few packets
// from the oldest, and an ACK then covers a PSN past them: the originals
// are arriving. A requester that sends new requests next (gorxe's) has
// undone its go-back, and explain says so; one that goes on resending
// (rxe's) has not.
func TestGoBackUndone(t *testing.T) {
	_, req := packets(t)
	ack, middle, first, last, window := writeWindow(t)
	few := [][]byte{first(), middle(11), middle(12), middle(13)}
	for _, tc := range []struct {
		name string
		then [][]byte
		undo bool
	}{
		{"new requests", [][]byte{ack(14), req(bth.RCRDMAWriteOnly, 16, 64), ack(16)}, true},
		{"the rest of the run", [][]byte{ack(14), middle(14), last(), ack(15)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := readPackets(t, slices.Concat(window, few, tc.then)...)
			a, next := r.Packets[len(window)+len(few)], r.Packets[len(window)+len(few)+1]
			if !strings.Contains(a.Text, "has not sent again since it went back at packet 7") {
				t.Errorf("the ACK past the resent packets: %q", a.Text)
			}
			var undone bool
			for _, e := range next.Events {
				undone = undone || e.Kind == trace.GoBackUndone
			}
			if told := strings.Contains(next.Text, "undoes such a go-back"); told != tc.undo || undone != tc.undo {
				t.Errorf("packet %d (%s): told undone %v, event %v; want %v: %q", next.Index, next.Opcode, told, undone, tc.undo, next.Text)
			}
		})
	}
}

// TestConfirmProbe: after a silence the requester resends a few packets
// from the oldest, an ACK answers one of them, and the requester sends
// its last packet again (gorxe's recoveryConfirm). explain tells it as
// the probe it is, not as the run going on, and what follows as the
// probe's answer says: a NAK of the gap sends the requester back from
// there; an ACK past the resent packets, then new requests, undo the
// go-back.
func TestConfirmProbe(t *testing.T) {
	_, req := packets(t)
	ack, middle, first, last, window := writeWindow(t)
	nak := func(psn bth.PSN) []byte {
		f := wire.Frame{IP: wire.IPFields{Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.MustParseAddr("10.0.0.1"), HopLimit: 64}, SrcPort: 49152, DstPort: wire.UDPPort}
		f.BTH = bth.Fields{Opcode: bth.RCAcknowledge, PKey: bth.DefaultPKey, DestQP: 0x11, PSN: psn}
		f.AETH = aeth.Fields{Syndrome: aeth.NAK(aeth.NAKPSNSequenceError)}
		p, err := f.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	few := [][]byte{first(), middle(11), middle(12), middle(13), ack(11), last()}
	for _, tc := range []struct {
		name string
		then [][]byte
		want trace.Event // on the packet after the probe's answer
	}{
		{"the rest lost", [][]byte{nak(14), middle(14), last(), ack(15)}, trace.Event{Kind: trace.GoBack, PSN: 14, Reason: trace.GoBackNAK}},
		{"the rest arriving", [][]byte{ack(15), req(bth.RCRDMAWriteOnly, 16, 64), ack(16)}, trace.Event{Kind: trace.GoBackUndone, PSN: 15, Expected: 16}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := readPackets(t, slices.Concat(window, few, tc.then)...)
			probe := r.Packets[len(window)+len(few)-1]
			if !slices.ContainsFunc(probe.Events, func(e trace.Event) bool { return e.Kind == trace.Probe && e.Reason == trace.ProbeConfirm }) ||
				!strings.Contains(probe.Text, "answered one of the 4 packets") {
				t.Fatalf("packet %d: %q, events %+v; want the probe after the resends' answer", probe.Index, probe.Text, probe.Events)
			}
			next := r.Packets[len(window)+len(few)+1]
			if !slices.ContainsFunc(next.Events, func(e trace.Event) bool {
				return e.Kind == tc.want.Kind && e.PSN == tc.want.PSN && e.Reason == tc.want.Reason && e.Expected == tc.want.Expected
			}) {
				t.Errorf("packet %d: %q, events %+v; want %+v", next.Index, next.Text, next.Events, tc.want)
			}
			if sum := r.Conns[0].Summary; sum.Timeouts[0] != 1 {
				t.Errorf("%d timeouts, want 1: the probe is no timeout's", sum.Timeouts[0])
			}
		})
	}
}

// TestProbeUnanswered explains the go-back after a tail-loss probe (the
// last packet resent alone) that no answer followed as the probe's, not
// the local ACK timer's; an answer in between makes the next go-back the
// timer's again.
func TestProbeUnanswered(t *testing.T) {
	ack, middle, first, last, window := writeWindow(t)
	for _, tc := range []struct {
		name   string
		then   [][]byte
		reason string
	}{
		{"no answer", [][]byte{first(), middle(11), middle(12), middle(13)}, trace.GoBackProbe},
		{"an answer", [][]byte{ack(12), middle(13), middle(14)}, trace.GoBackTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := readPackets(t, slices.Concat(window, [][]byte{last()}, tc.then)...)
			probe := r.Packets[len(window)]
			if !slices.ContainsFunc(probe.Events, func(e trace.Event) bool { return e.Kind == trace.Probe }) {
				t.Fatalf("packet %d: %q, events %+v; want a tail-loss probe", probe.Index, probe.Text, probe.Events)
			}
			var back *Packet
			for k := len(window) + 1; k < len(r.Packets); k++ {
				if p := &r.Packets[k]; slices.ContainsFunc(p.Events, func(e trace.Event) bool { return e.Kind == trace.GoBack }) {
					back = p
					break
				}
			}
			if back == nil {
				t.Fatalf("no go-back after the probe")
			}
			var reason string
			for _, e := range back.Events {
				if e.Kind == trace.GoBack {
					reason = e.Reason
				}
			}
			told := strings.Contains(back.Text, "tail-loss probe (packet 7) went unanswered")
			if reason != tc.reason || told != (tc.reason == trace.GoBackProbe) {
				t.Errorf("packet %d: go-back reason %q, want %q: %q", back.Index, reason, tc.reason, back.Text)
			}
		})
	}
}

// TestLoneResend: a resend of the one packet outstanding is the local
// ACK timer's go-back, and the text says a tail-loss probe would look
// the same; a resend from the oldest of several is the timer's alone.
func TestLoneResend(t *testing.T) {
	_, req := packets(t)
	for _, tc := range []struct {
		name string
		pkts [][]byte
		lone bool
	}{
		{"one outstanding", [][]byte{req(bth.RCRDMAWriteOnly, 10, 8), req(bth.RCRDMAWriteOnly, 10, 8)}, true},
		{"two outstanding", [][]byte{req(bth.RCRDMAWriteOnly, 10, 8), req(bth.RCRDMAWriteOnly, 11, 8), req(bth.RCRDMAWriteOnly, 10, 8)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := readPackets(t, tc.pkts...)
			again := r.Packets[len(r.Packets)-1]
			if !slices.ContainsFunc(again.Events, func(e trace.Event) bool { return e.Kind == trace.Timeout }) {
				t.Fatalf("packet %d: %q, events %+v; want the local ACK timer's go-back", again.Index, again.Text, again.Events)
			}
			if told := strings.Contains(again.Text, "does not tell the two apart"); told != tc.lone {
				t.Errorf("packet %d: probe named %v, want %v: %q", again.Index, told, tc.lone, again.Text)
			}
		})
	}
}

// TestResendCrossesAnswer explains a request resent after the capture
// saw its answer go by: the requester's timer fired before the answer
// reached it. It is its local ACK timer's go-back from that PSN, not a
// tail-loss probe, and the text says the answer had passed.
func TestResendCrossesAnswer(t *testing.T) {
	pkt, req := packets(t)
	for _, tc := range []struct {
		name string
		pkts [][]byte
	}{
		{"WRITE", [][]byte{req(bth.RCRDMAWriteOnly, 10, 8), pkt(true, bth.RCAcknowledge, 10, 0), req(bth.RCRDMAWriteOnly, 10, 8)}},
		{"READ", [][]byte{req(bth.RCRDMAReadRequest, 10, 0), pkt(true, bth.RCRDMAReadResponseOnly, 10, 8), req(bth.RCRDMAReadRequest, 10, 0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := readPackets(t, tc.pkts...)
			again := r.Packets[2]
			if !strings.Contains(again.Text, "PSN 10 was acknowledged already, by packet 2") {
				t.Errorf("the resend: %q", again.Text)
			}
			var timeout bool
			for _, e := range again.Events {
				if e.Kind == trace.Probe {
					t.Errorf("the resend is told as a tail-loss probe: %+v", again.Events)
				}
				timeout = timeout || e.Kind == trace.Timeout && e.PSN == 10
			}
			if !timeout {
				t.Errorf("no timeout of PSN 10 among %+v", again.Events)
			}
		})
	}
}

// writeWindow returns builders of the packets of a WRITE of PSNs 10 to 15
// at MTU 1024 (FIRST, MIDDLEs 11 to 14, LAST) and of an ACK, and the
// WRITE's six packets as first sent.
func writeWindow(t *testing.T) (ack, middle func(bth.PSN) []byte, first, last func() []byte, window [][]byte) {
	pkt, req := packets(t)
	ack = func(psn bth.PSN) []byte { return pkt(true, bth.RCAcknowledge, psn, 0) }
	first = func() []byte { return req(bth.RCRDMAWriteFirst, 10, 1024) }
	middle = func(psn bth.PSN) []byte { return req(bth.RCRDMAWriteMiddle, psn, 1024) }
	last = func() []byte { return req(bth.RCRDMAWriteLast, 15, 64) }
	return ack, middle, first, last, [][]byte{first(), middle(11), middle(12), middle(13), middle(14), last()}
}

// readPackets explains a capture of the IP packets pkts.
func readPackets(t *testing.T, pkts ...[]byte) *Report {
	t.Helper()
	r, err := Read(bytes.NewReader(rawCapture(pkts...)))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPerftestExchangeFound reads the key messages of perftest's TCP
// exchange in rxe's capture of four perftest runs: each side of each run
// names its QP and its GID.
func TestPerftestExchangeFound(t *testing.T) {
	f, err := os.Open("../testdata/rxe/perftest-mtu1024.pcap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var segs []keySegment
	if _, err := capture.ReadOptions(f, capture.Options{TCP: keySegments(&segs)}, func(*capture.Packet) error { return nil }); err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, s := range segs {
		for _, k := range s.keys {
			found[fmt.Sprintf("%s QP %#x", keyAddr(k, s.src), k.QPN)] = true
		}
	}
	for _, host := range []string{"10.9.0.2", "10.9.0.3"} {
		for qpn := 0x11; qpn <= 0x14; qpn++ {
			if want := fmt.Sprintf("%s QP %#x", host, qpn); !found[want] {
				t.Errorf("no key message for %s; found %v", want, found)
			}
		}
	}
	if len(found) != 8 {
		t.Errorf("key messages for %v, want the 8 QPs of four runs", found)
	}
}

// TestMulticastSend explains a UD SEND to the multicast QP at a group as
// a copy for every QP attached to the group, and one at a unicast
// address as reaching no QP.
func TestMulticastSend(t *testing.T) {
	send := func(dst string) []byte {
		f := wire.Frame{
			IP:      wire.IPFields{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr(dst), HopLimit: 64},
			SrcPort: 49152, DstPort: wire.UDPPort,
			Headers: wire.Headers{BTH: bth.Fields{Opcode: bth.UDSendOnlyWithImm, PKey: bth.DefaultPKey, DestQP: bth.MulticastQPN},
				DETH: deth.Fields{QKey: 0x01234567, SrcQP: 0x11}, Imm: 0x11},
			Payload: make([]byte, 100),
		}
		p, err := f.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	r := readPackets(t, send("239.0.9.1"), send("10.0.0.2"))
	if p := r.Packets[0]; p.Anomaly != "" || !strings.Contains(p.Text, "multicast QP (0xffffff) of group 239.0.9.1") || !strings.Contains(p.Text, "every QP attached to the group") {
		t.Errorf("to the group: %q (anomaly %q)", p.Text, p.Anomaly)
	}
	if p := r.Packets[1]; p.Anomaly != "malformed" || !strings.Contains(p.Text, "no multicast group") {
		t.Errorf("to a unicast address: %q (anomaly %q)", p.Text, p.Anomaly)
	}
	var b strings.Builder
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	if txt := b.String(); !strings.Contains(txt, "connection 1: UD multicast, 10.0.0.1 QP 0x11 <-> group 239.0.9.1 (multicast QP 0xffffff)") ||
		strings.Contains(txt, "group 239.0.9.1 (multicast QP 0xffffff) sent") {
		t.Errorf("the summary names the group as a sender, or not as a group:\n%s", txt)
	}
}

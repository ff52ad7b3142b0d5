package explain

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gorxe/gorxe/internal/capture"
	"github.com/gorxe/gorxe/trace"
	"github.com/gorxe/gorxe/wire/aeth"
)

// rxeAddr is kernel rxe's address in the interop captures.
const rxeAddr = "10.9.0.2"

// counters reads an interop case's counters.N.txt: each of rxe's
// hw_counters and its change over the case.
func counters(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		m[name] = n
	}
	return m
}

// naksInCapture counts the NAK packets each address sent, read straight
// from the capture.
func naksInCapture(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	naks := map[string]int{}
	if _, err := capture.Read(f, func(p *capture.Packet) error {
		if p.Err == nil && p.P.AETH != nil && p.P.AETH.Syndrome().Type() == aeth.TypeNAK {
			naks[p.Src]++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return naks
}

// TestRxeLossCounters explains captures of gorxe against kernel rxe under
// 1% loss (testdata/interop/loss, taken by the interop harness on the
// bridge between them, with netem dropping 1% of what rxe sends) and
// checks explain's account against the capture and against rxe's own
// hw_counters for the same run:
//   - the NAKs explain counts for each side are the NAK packets the
//     capture holds, and those gorxe sent are rxe's rcvd_seq_err (nothing
//     gorxe sends is dropped);
//   - the go-back runs explain infers for rxe's requester (after a NAK,
//     after a timeout) are rxe's completer_retry_err;
//   - the duplicate requests explain sees reach rxe are rxe's
//     duplicate_request.
func TestRxeLossCounters(t *testing.T) {
	for _, n := range []int{24, 25, 29, 44} {
		t.Run(fmt.Sprintf("case%d", n), func(t *testing.T) {
			path := fmt.Sprintf("../testdata/interop/loss/case.%d.pcap", n)
			r := read(t, path)
			hw := counters(t, fmt.Sprintf("../testdata/interop/loss/counters.%d.txt", n))
			if len(r.Conns) != 1 {
				t.Fatalf("%d connections, want 1", len(r.Conns))
			}
			c := r.Conns[0]
			inCapture := naksInCapture(t, path)
			for side, e := range c.Ends {
				got := 0
				for _, k := range c.Summary.NAKs[side] {
					got += k
				}
				if got != inCapture[e.Addr] {
					t.Errorf("%s: explain counts %d NAKs, the capture holds %d", e.Addr, got, inCapture[e.Addr])
				}
				if e.Addr != rxeAddr && got != hw["rcvd_seq_err"] {
					t.Errorf("gorxe sent %d NAKs, rxe's rcvd_seq_err is %d", got, hw["rcvd_seq_err"])
				}
			}
			var resends, duplicates int
			for _, p := range r.Packets {
				for _, e := range p.Events {
					switch {
					case (e.Kind == trace.GoBack || e.Kind == trace.Probe) && p.Src == rxeAddr:
						resends++
					case e.Kind == trace.Duplicate && p.Dst == rxeAddr:
						duplicates++
					}
				}
			}
			if resends != hw["completer_retry_err"] {
				t.Errorf("explain infers %d go-backs of rxe's requester, rxe's completer_retry_err is %d", resends, hw["completer_retry_err"])
			}
			if duplicates != hw["duplicate_request"] {
				t.Errorf("explain sees %d duplicates reach rxe, rxe's duplicate_request is %d", duplicates, hw["duplicate_request"])
			}
			if want := retransmittedInCapture(t, path); c.Summary.Retransmissions != want {
				t.Errorf("explain counts %v retransmitted packets, the capture holds %v", c.Summary.Retransmissions, want)
			}
			t.Logf("NAKs %v, rxe go-backs %d, duplicates at rxe %d, retransmitted %v; rxe: %v", inCapture, resends, duplicates, c.Summary.Retransmissions, hw)
		})
	}
}

// retransmittedInCapture counts, for the capture's one connection, the
// request packets each end sent at a PSN it had used already, in the
// order of the connection's ends (the first to send first): a request
// uses its PSN, and a READ as many more as its responses take at the
// path MTU, which the largest payload in the capture shows.
func retransmittedInCapture(t *testing.T, path string) [2]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pkts []capture.Packet
	mtu := 0
	if _, err := capture.Read(strings.NewReader(string(b)), func(p *capture.Packet) error {
		if p.Err == nil {
			pkts = append(pkts, *p)
			mtu = max(mtu, len(p.P.Payload))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var out [2]int
	var first string
	next := map[string]uint32{} // by sender: the PSN after the highest used
	for _, p := range pkts {
		op := p.P.BTH.Opcode()
		if isResponse(op) || p.P.DETH != nil || op == 0x81 {
			continue
		}
		if first == "" {
			first = p.Src
		}
		side := 0
		if p.Src != first {
			side = 1
		}
		psn := uint32(p.P.BTH.PSN())
		span := 1
		if k, _ := classify(op); k == opRead {
			span = max(1, (int(p.P.RETH.DMALen())+mtu-1)/mtu)
		}
		n, seen := next[p.Src]
		if seen && psnDiff(psn, n) < 0 {
			out[side]++
		}
		if !seen || psnDiff(psnAdd(psn, span), n) > 0 {
			next[p.Src] = psnAdd(psn, span)
		}
	}
	return out
}

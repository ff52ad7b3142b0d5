package explain

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/gorxe/gorxe/internal/capture"
	"github.com/gorxe/gorxe/wire/bth"
)

// WriteText writes the report as "gorxe explain" prints it: a line per
// packet that starts as decode's does (index, time, addresses, opcode,
// QP, PSN) and goes on with what the packet does, then a summary of each
// connection and the capture's counts.
func WriteText(w io.Writer, r *Report) error {
	bw := bufio.NewWriter(w)
	for k := range r.Packets {
		p := &r.Packets[k]
		fmt.Fprintf(bw, "%5d %10s %s -> %s %-28s qp=0x%06x psn=%-8d %s\n",
			p.Index, capture.Seconds(p.Time), p.Src, p.Dst, p.Opcode, p.DestQP, p.PSN, p.Text)
	}
	for k := range r.Conns {
		bw.WriteString("\n")
		writeConn(bw, k, &r.Conns[k])
	}
	c := r.Counts
	cc := capture.Counts{RoCE: c.RoCE, Other: c.Other, BadICRC: c.BadICRC, Malformed: c.Malformed, Cut: c.Cut, Unread: c.Unread, Elsewhere: c.Elsewhere, V1: c.V1}
	fmt.Fprintf(bw, "\n%v", cc)
	if c.Twice > 0 {
		fmt.Fprintf(bw, "; %d of the RoCE packets seen twice by the capture, left out", c.Twice)
	}
	bw.WriteString("\n")
	if h := cc.Hint(); h != "" {
		bw.WriteString(h + ".\n")
	}
	return bw.Flush()
}

// writeConn writes one connection's summary.
func writeConn(w io.Writer, k int, c *Connection) {
	s := &c.Summary
	fmt.Fprintf(w, "connection %d: %s, %s <-> %s, %s\n", k+1, c.Service, endName(c.Ends[0]), endName(c.Ends[1]), seconds(s.Duration))
	for i, e := range c.Ends {
		if bth.QPN(e.QPN) == bth.MulticastQPN && s.Packets[i] == 0 {
			continue // a group, which only receives
		}
		fmt.Fprintf(w, "  %s sent %s: %s, %d bytes of payload first sent (%s), %d retransmitted",
			endName(e), plural(s.Packets[i], "packet"), plural(s.Messages[i], "message"), s.Bytes[i], rate(s.Goodput[i]), s.Retransmissions[i])
		if s.Timeouts[i] > 0 {
			fmt.Fprintf(w, ", %d timeouts inferred from silence", s.Timeouts[i])
		}
		fmt.Fprintf(w, "; NAKs %s", naks(s.NAKs[i]))
		if s.RNRNAKs[i] > 0 {
			fmt.Fprintf(w, ", %d RNR NAKs", s.RNRNAKs[i])
		}
		if s.CNPs[i] > 0 {
			fmt.Fprintf(w, ", %d CNPs", s.CNPs[i])
		}
		fmt.Fprintln(w)
	}
}

// endName names an end in a summary.
func endName(e End) string {
	switch {
	case e.QPN == 0:
		return e.Addr + " (QP unseen)"
	case bth.QPN(e.QPN) == bth.MulticastQPN:
		return fmt.Sprintf("group %s (multicast QP 0xffffff)", e.Addr)
	}
	return fmt.Sprintf("%s QP %#x", e.Addr, e.QPN)
}

// naks lists NAK counts by syndrome: "none", "3 PSN sequence error".
func naks(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for k, n := range names {
		parts[k] = fmt.Sprintf("%d %s", m[n], n)
	}
	return strings.Join(parts, ", ")
}

// rate formats bits per second.
func rate(bps float64) string {
	switch {
	case bps >= 1e9:
		return fmt.Sprintf("%.2f Gb/s", bps/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%.2f Mb/s", bps/1e6)
	default:
		return fmt.Sprintf("%.1f kb/s", bps/1e3)
	}
}

// WriteJSON writes the report as one JSON object.
func WriteJSON(w io.Writer, r *Report) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(r); err != nil {
		return err
	}
	return bw.Flush()
}

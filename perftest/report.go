package perftest

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

const rule = "---------------------------------------------------------------------------------------"

// PrintBanner prints perftest's header: the test's name and its settings.
// gidIndex is the GID's index as perftest's -x names it.
func PrintBanner(w io.Writer, p *Params, device, link string, gidIndex int) {
	kind := "BW"
	if p.Test.IsLatency() {
		kind = "Latency"
	} else if p.Duplex {
		kind = "Bidirectional BW"
	}
	verb := p.Test.Verb()
	if p.WithImm && (verb == "RDMA_Write" || verb == "Send") {
		verb += "_imm" // perftest's testsStr
	}
	fmt.Fprintln(w, rule)
	fmt.Fprintf(w, "                    %s %s Test\n", verb, kind)
	fmt.Fprintf(w, " Dual-port       : OFF\t\tDevice         : %s\n", device)
	fmt.Fprintf(w, " Number of qps   : %d\t\tTransport type : IB\n", p.qps())
	fmt.Fprintf(w, " Connection type : RC\t\tUsing SRQ      : OFF\n")
	if p.Test == AtomicBW {
		fmt.Fprintf(w, " Atomic Operation: %s\n", p.Atomic)
	}
	if !p.Test.IsLatency() {
		fmt.Fprintf(w, " TX depth        : %d\n", p.TxDepth)
	}
	if p.Test == SendBW || p.Test == SendLat {
		fmt.Fprintf(w, " RX depth        : %d\n", p.RxDepth)
	}
	if !p.Test.IsLatency() {
		fmt.Fprintf(w, " CQ Moderation   : %d\n", min(p.CQMod, p.TxDepth))
	}
	fmt.Fprintf(w, " Mtu             : %d[B]\n", p.MTU.Bytes())
	fmt.Fprintf(w, " Link type       : %s\n", link)
	fmt.Fprintf(w, " GID index       : %d\n", gidIndex)
	fmt.Fprintf(w, " Max inline data : 0[B]\n")
	fmt.Fprintf(w, " rdma_cm QPs\t : OFF\n")
	fmt.Fprintf(w, " Data ex. method : %s\n", map[bool]string{true: "in-process", false: "Ethernet"}[link == "mem"])
	fmt.Fprintln(w, rule)
}

// PrintAddresses prints the local and remote address lines of perftest.
func PrintAddresses(w io.Writer, local, remote Info) {
	for _, x := range []struct {
		name string
		i    Info
	}{{"local", local}, {"remote", remote}} {
		fmt.Fprintf(w, " %s address: LID 0000 QPN %#06x PSN %#06x RKey %#08x VAddr %#016x\n",
			x.name, x.i.QPN, x.i.PSN, x.i.RKey, x.i.VAddr)
		g := x.i.GID.As16()
		parts := make([]string, 16)
		for j, b := range g {
			parts[j] = fmt.Sprintf("%02d", b)
		}
		fmt.Fprintf(w, " GID: %s\n", strings.Join(parts, ":"))
	}
	fmt.Fprintln(w, rule)
}

// PrintHeader prints the column names of the result table.
func PrintHeader(w io.Writer, t Test) {
	if t.IsLatency() {
		fmt.Fprintln(w, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ")
		return
	}
	fmt.Fprintln(w, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
}

// PrintResult prints one line of the result table.
func PrintResult(w io.Writer, r *Result) {
	if l := r.Lat; l != nil {
		fmt.Fprintf(w, " %-7d %-10d     %-7.2f        %-7.2f      %-7.2f            %-7.2f        %-7.2f         %-7.2f                %-7.2f\n",
			l.Size, l.Iters, l.Min, l.Max, l.Typical, l.Avg, l.Stdev, l.P99, l.P999)
		return
	}
	b := r.BW
	fmt.Fprintf(w, " %-10d %-10d       %-7.2f            %-7.2f\t\t   %.6f\n", b.Size, b.Iters, b.PeakMBps, b.AvgMBps, b.MsgRate)
}

// JSON is the --json form of a result: one object per size.
type JSON struct {
	Test    Test    `json:"test"`
	Size    int     `json:"size"`
	Iters   int     `json:"iters"`
	PeakMBs float64 `json:"bw_peak_MBps,omitempty"`
	AvgMBs  float64 `json:"bw_avg_MBps,omitempty"`
	MsgRate float64 `json:"msg_rate_Mpps,omitempty"`
	MinUs   float64 `json:"t_min_us,omitempty"`
	MaxUs   float64 `json:"t_max_us,omitempty"`
	TypUs   float64 `json:"t_typical_us,omitempty"`
	AvgUs   float64 `json:"t_avg_us,omitempty"`
	StdUs   float64 `json:"t_stdev_us,omitempty"`
	P99Us   float64 `json:"p99_us,omitempty"`
	P999Us  float64 `json:"p99_9_us,omitempty"`
	Check   string  `json:"check"` // "ok", "failed" or "off"
	Error   string  `json:"error,omitempty"`
	// Retransmissions and drops of the run, from the client's and the
	// server's counters.
	Retransmits uint64 `json:"retransmits"`
	ICRCErrors  uint64 `json:"icrc_errors"`
	// Heap allocations of this process per packet its devices sent or
	// received during the run itself: 0 in the steady state. Allocs and
	// Packets are the two counts, so that the steady state can be told
	// from a run's fixed cost: the difference of two runs of different
	// lengths.
	AllocsPerPacket *float64 `json:"allocs_per_packet,omitempty"`
	Allocs          uint64   `json:"allocs"`
	Packets         uint64   `json:"packets"`
}

// ToJSON converts a result; err is the run's error, if any.
func ToJSON(r *Result, p *Params, err error) JSON {
	j := JSON{Test: p.Test, Size: p.Size, Iters: p.Iters, Check: "off"}
	if r != nil {
		j.Test = r.Test
		if b := r.BW; b != nil {
			j.Size, j.Iters, j.PeakMBs, j.AvgMBs, j.MsgRate = b.Size, b.Iters, b.PeakMBps, b.AvgMBps, b.MsgRate
		}
		if l := r.Lat; l != nil {
			j.Size, j.Iters = l.Size, l.Iters
			j.MinUs, j.MaxUs, j.TypUs, j.AvgUs, j.StdUs, j.P99Us, j.P999Us = l.Min, l.Max, l.Typical, l.Avg, l.Stdev, l.P99, l.P999
		}
		j.Retransmits = r.Client.CompleterRetryErr + r.Server.CompleterRetryErr
		j.ICRCErrors = r.Client.ICRCErrors + r.Server.ICRCErrors
		if r.Packets > 0 {
			a := float64(r.Allocs) / float64(r.Packets)
			j.AllocsPerPacket = &a
		}
		j.Allocs, j.Packets = r.Allocs, r.Packets
		if r.Checked {
			j.Check = "ok"
		}
	}
	if err != nil {
		j.Error = err.Error()
		if p.Check {
			j.Check = "failed"
		}
	}
	return j
}

// WriteJSON writes j as one line.
func WriteJSON(w io.Writer, j JSON) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

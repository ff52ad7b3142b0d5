// Command turnaround splits the round trips of a ping-pong latency test
// (perftest's or gorxe's read_lat, write_lat, send_lat) in a capture taken
// between the two hosts into the time each side took to answer: from the
// peer's message arriving at the capture point to its own leaving. A round
// trip is the sum of the two, so where a slow one spent its time shows
// here, which neither side's own figures can tell.
//
//	turnaround -port 4792 -client 10.9.0.3 CAPTURE.pcap
//
// Messages are the RoCE v2 packets to the port, ACKs and CNPs left out:
// READ requests and responses, WRITEs, SENDs. A side's turnaround runs
// from the last message the other side sent before it to its own first
// message after it; a resend (two messages from one side in a row) starts
// no new turnaround. It prints, per side, the median, 90th, 99th and 99.9th
// percentiles and the longest, in µs, and how many exceeded -slow; with
// -short, one line: "P50/P99/SLOW P50/P99/SLOW", the client's first.
//
// With -first it reads a bandwidth test's capture instead and prints how
// long the server took to send anything at all, ACKs included: "MS/N",
// the milliseconds from the client's first packet to the server's first,
// and the client packets sent before it. A run's first window is its
// slowest answer: a server that answers later than the requester's ACK
// timeout (67 ms at perftest's default) makes it resend in a lossless run.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Opcodes that are not a test's message: RC ACKNOWLEDGE and a CNP.
const (
	opAck = 0x11
	opCNP = 0x81
)

func main() {
	port := flag.Int("port", 4791, "the UDP port RoCE v2 runs on in the capture")
	client := flag.String("client", "", "the client's IP address (the side that sends first)")
	slow := flag.Duration("slow", 2*time.Millisecond, "count turnarounds longer than this")
	short := flag.Bool("short", false, "print one line: each side's p50/p99/count over -slow, the client's first")
	first := flag.Bool("first", false, "print the server's first answer: ms after the client's first packet / client packets before it")
	flag.Parse()
	if flag.NArg() != 1 || *client == "" {
		fmt.Fprintln(os.Stderr, "usage: turnaround [-port N] [-slow D] -client ADDR CAPTURE")
		os.Exit(2)
	}
	do := func() error { return run(flag.Arg(0), uint16(*port), *client, *slow, *short) }
	if *first {
		do = func() error { return runFirst(flag.Arg(0), uint16(*port), *client) }
	}
	if err := do(); err != nil {
		fmt.Fprintln(os.Stderr, "turnaround:", err)
		os.Exit(1)
	}
}

// packets calls f with the side, the time and the BTH opcode of every
// RoCE v2 packet to port in the capture at path.
func packets(path string, port uint16, client string, f func(side int, at time.Time, op byte)) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	r, err := pcapgo.NewReader(file)
	if err != nil {
		return err
	}
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		src, op, ok := message(data, r.LinkType(), port)
		if !ok {
			continue
		}
		side := server
		if src == client {
			side = clientSide
		}
		f(side, ci.Timestamp, op)
	}
}

// runFirst prints the server's first answer in the capture at path.
func runFirst(path string, port uint16, client string) error {
	var fa firstAnswer
	if err := packets(path, port, client, func(side int, at time.Time, _ byte) { fa.add(side, at) }); err != nil {
		return err
	}
	if !fa.answered {
		fmt.Println("-")
		return nil
	}
	fmt.Printf("%.1f/%d\n", float64(fa.wait)/float64(time.Millisecond), fa.before)
	return nil
}

// firstAnswer finds the server's first packet after the client's first.
type firstAnswer struct {
	start    time.Time // the client's first packet
	wait     time.Duration
	before   int // client packets before the server's first
	answered bool
}

func (f *firstAnswer) add(side int, at time.Time) {
	switch {
	case f.answered:
	case side == clientSide:
		if f.before == 0 {
			f.start = at
		}
		f.before++
	case f.before > 0:
		f.wait, f.answered = at.Sub(f.start), true
	}
}

func run(path string, port uint16, client string, slow time.Duration, short bool) error {
	sp := splitter{last: -1}
	err := packets(path, port, client, func(side int, at time.Time, op byte) {
		if op != opAck && op != opCNP {
			sp.add(side, at)
		}
	})
	if err != nil {
		return err
	}
	turns := sp.turns
	var line []string
	for side, name := range []string{"client", "server"} {
		t := turns[side]
		if len(t) == 0 {
			line = append(line, "-")
			if !short {
				fmt.Printf("%s: no turnaround\n", name)
			}
			continue
		}
		slices.Sort(t)
		over := 0
		if i := slices.IndexFunc(t, func(d time.Duration) bool { return d > slow }); i >= 0 {
			over = len(t) - i
		}
		line = append(line, fmt.Sprintf("%s/%s/%d", us(pct(t, 0.5)), us(pct(t, 0.99)), over))
		if !short {
			fmt.Printf("%s turnaround, %d: p50 %s p90 %s p99 %s p99.9 %s max %s us; over %v: %d\n", name, len(t),
				us(pct(t, 0.5)), us(pct(t, 0.9)), us(pct(t, 0.99)), us(pct(t, 0.999)), us(t[len(t)-1]), slow, over)
		}
	}
	if short {
		fmt.Println(strings.Join(line, " "))
	}
	return nil
}

// The sides, as indexes of splitter.turns.
const (
	clientSide = 0
	server     = 1
)

// splitter splits a sequence of messages into the sides' turnarounds.
type splitter struct {
	turns  [2][]time.Duration
	last   int // the side that sent the last message, -1 before the first
	lastAt time.Time
}

// add takes the next message: side sent it at at. The first message of a
// side after the other's ends that side's turnaround, begun by the other
// side's first message since; a side's further messages (resends, the
// packets after a message's first) change nothing.
func (s *splitter) add(side int, at time.Time) {
	if side == s.last {
		return
	}
	if s.last >= 0 {
		s.turns[side] = append(s.turns[side], at.Sub(s.lastAt))
	}
	s.last, s.lastAt = side, at
}

// message returns the source address and BTH opcode of a frame carrying
// UDP to port.
func message(data []byte, lt layers.LinkType, port uint16) (src string, op byte, ok bool) {
	pkt := gopacket.NewPacket(data, lt, gopacket.DecodeOptions{NoCopy: true, Lazy: true})
	udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
	nl := pkt.NetworkLayer()
	if udp == nil || nl == nil || uint16(udp.DstPort) != port || len(udp.Payload) == 0 {
		return "", 0, false
	}
	return nl.NetworkFlow().Src().String(), udp.Payload[0], true
}

// pct returns the q-quantile of sorted d.
func pct(d []time.Duration, q float64) time.Duration {
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond)) }

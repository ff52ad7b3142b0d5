package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/gorxe/gorxe/explain"
)

const explainUsage = `usage: gorxe explain [--json] [--html OUT.html] [--roce-port PORT] FILE

Explain reads a pcap or pcapng capture (from gorxe, kernel rxe, a hardware
NIC or tcpdump anywhere between them; gzipped or not; "-" for the standard
input, read to its end) and replays it through a model of
both ends of every connection it finds: the QPs paired, each requester's
next and oldest unacknowledged PSN and its READs and atomics in flight,
each responder's expected PSN and MSN, NAK and RNR state. Each packet gets
decode's start of line (number, time, addresses, opcode, QP, PSN) and a
plain account of what it is, what it does to the receiver and, when
something goes wrong, which rule applies. A summary per connection
follows: messages, bytes, retransmissions, NAKs by syndrome, RNR NAKs,
timeouts inferred from silence, CNPs and goodput.

A capture shows what passed its capture point: a packet lost after it is
in the capture, one lost before it is not. Explain infers the losses from
what the ends do next (a NAK naming a PSN the capture saw sent, a resend
after silence) and says so.

With --json it prints the whole report as one JSON object; with --html it
also writes a ladder diagram (one self-contained HTML file) to OUT.html.

Flags:
`

// runExplain is the explain subcommand.
func runExplain(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("explain", flag.ContinueOnError)
	flags.SetOutput(stderr)
	jsonOut := flags.Bool("json", false, "print the report as JSON instead of text")
	htmlOut := flags.String("html", "", "also write a ladder diagram to `OUT.html`")
	port := rocePortFlag(flags)
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), explainUsage)
		flags.PrintDefaults()
	}
	name, code, ok := parseCaptureArgs(flags, args, port, stderr)
	if !ok {
		return code
	}
	r, err := explainFile(name, uint16(*port))
	if err != nil {
		fmt.Fprintf(stderr, "gorxe explain: %s: %v\n", name, err)
		if r == nil {
			return exitError
		}
	}
	if *htmlOut != "" {
		if herr := writeHTML(*htmlOut, r, filepath.Base(name)); herr != nil {
			fmt.Fprintf(stderr, "gorxe explain: %v\n", herr)
			return exitError
		}
	}
	write := explain.WriteText
	if *jsonOut {
		write = explain.WriteJSON
	}
	if werr := write(stdout, r); werr != nil {
		fmt.Fprintf(stderr, "gorxe explain: %v\n", werr)
		return exitError
	}
	if err != nil {
		return exitError
	}
	return exitOK
}

// explainFile reads and explains the capture name. On a read error part
// way it returns the report of what came before with the error; when the
// file is no capture at all, no report.
func explainFile(name string, port uint16) (*explain.Report, error) {
	f, err := openCapture(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return explain.ReadPort(f, port)
}

// writeHTML writes r's ladder diagram to the file name.
func writeHTML(name string, r *explain.Report, title string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := explain.WriteHTML(f, r, title); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	return f.Close()
}

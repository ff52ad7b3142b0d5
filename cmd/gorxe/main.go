// Command gorxe is gorxe's tool box. Its subcommands:
//
//	gorxe demo                   two NICs in one process: verbs become packets, loss included
//	gorxe decode [--json] FILE   print the RoCE v2 packets of a pcap or pcapng capture
//	gorxe write_bw ... send_lat  perftest's tests between two gorxe devices
//
// Run "gorxe help" for the list.
package main

import (
	"fmt"
	"io"
	"os"
)

// Exit statuses, as the Go tools use them.
const (
	exitOK    = 0
	exitError = 1 // the command ran and failed: unreadable file, bad capture
	exitUsage = 2 // the command line was wrong
)

// command is one subcommand. Its run parses args, everything after the
// subcommand's name, with its own flag.FlagSet and returns the exit status.
type command struct {
	name    string
	args    string // synopsis of the arguments, for usage
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands lists the subcommands in the order usage shows them. A new one
// (demo, write_bw, ...) is a file with its run function and a row here.
var commands = []command{
	{"demo", "[--quiet] [--pcap FILE]", "two NICs in one process: watch RDMA verbs become packets, loss included", runDemo},
	{"decode", "[--json] FILE", "print the RoCE v2 packets of a pcap or pcapng capture", runDecode},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args (without the program name) and returns the
// process exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c := lookup(args[1]); c != nil {
				return c.run([]string{"-h"}, stdout, stdout)
			}
			fmt.Fprintf(stderr, "gorxe help: unknown command %q\n", args[1])
			usage(stderr)
			return exitUsage
		}
		usage(stdout)
		return exitOK
	}
	c := lookup(args[0])
	if c == nil {
		fmt.Fprintf(stderr, "gorxe: unknown command %q\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return c.run(args[1:], stdout, stderr)
}

// lookup returns the subcommand called name, or nil.
func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// usage prints the list of subcommands.
func usage(w io.Writer) {
	fmt.Fprintln(w, "gorxe: a software RDMA NIC (RoCE v2) in pure Go")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage:")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "\tgorxe %s %s\n\t\t%s\n", c.name, c.args, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "gorxe help COMMAND" for a command's flags.`)
}

// Command gorxe is gorxe's tool box. Its subcommands:
//
//	gorxe demo                   two NICs in one process: verbs become packets, loss included
//	gorxe decode [--json] FILE   print the RoCE v2 packets of a pcap or pcapng capture
//	gorxe explain FILE           say what each packet does to both ends' state, and why
//	gorxe write_bw ... send_lat  perftest's tests between two gorxe devices
//	gorxe rc_pingpong [HOST]     rdma-core's ibv_rc_pingpong, either side
//	gorxe uc_pingpong [HOST]     rdma-core's ibv_uc_pingpong, either side
//	gorxe ud_pingpong [HOST]     rdma-core's ibv_ud_pingpong, either side
//	gorxe srq_pingpong [HOST]    rdma-core's ibv_srq_pingpong, either side
//	gorxe rping -s|-c -a ADDR    librdmacm's rping, either side, over rdma_cm
//	gorxe rdma_server, rdma_client, ucmatose   librdmacm's examples, over rdma_cm (and rdma_xserver,
//	                                           rdma_xclient, udaddy, mckey, cmtime)
//	gorxe qperf [SERVER -cm1 TEST ...]  qperf's RC tests, either side
//
// Run "gorxe help" for the list.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
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
	{"decode", "[--json] [--roce-port PORT] FILE", "print the RoCE v2 packets of a pcap or pcapng capture", runDecode},
	{"explain", "[--json] [--html OUT] [--roce-port PORT] FILE", "say what every packet of a capture does to both ends' state, and why", runExplain},
	{"sim", "[flags] SCENARIO", "DCQCN on a simulated switch in virtual time, gorxe devices as its hosts: figures, CSV, plots", runSim},
	{"devinfo", "[-v] [-d NAME] [-l] [--link udp|tap|xdp --ip ADDR]", "rdma-core's ibv_devinfo for a gorxe device: its attributes and its port's (also: gorxe ibv_devinfo)", runDevinfo},
	{"devices", "[--link udp|tap|xdp --ip ADDR]", "rdma-core's ibv_devices for a gorxe device: its name and node GUID (also: gorxe ibv_devices)", runDevices},
	{"show_gids", "[IFACE]", "print the GID table gorxe uses on each interface, as show_gids prints rxe's", runShowGids},
	{"rc_pingpong", "-g INDEX [-s SIZE] [-n ITERS] [-e] [-c] ... --link udp|tap --ip ADDR[/PREFIX] [HOST]",
		"RC SEND ping-pong against rdma-core's ibv_rc_pingpong, speaking its TCP exchange, flags and output", runRCPingpong},
	{"uc_pingpong", "-g INDEX [-s SIZE] [-n ITERS] [-e] ... --link udp|tap --ip ADDR[/PREFIX] [HOST]",
		"UC SEND ping-pong against rdma-core's ibv_uc_pingpong: rc_pingpong's over UC queue pairs", runUCPingpong},
	{"ud_pingpong", "-g INDEX [-s SIZE] [-n ITERS] [-e] [-c] ... --link udp|tap --ip ADDR[/PREFIX] [HOST]",
		"UD SEND ping-pong against rdma-core's ibv_ud_pingpong: Q_Key 0x11111111, messages up to the MTU", runUDPingpong},
	{"srq_pingpong", "-g INDEX [-q QPS] [-s SIZE] [-n ITERS] [-e] [-c] ... --link udp|tap --ip ADDR[/PREFIX] [HOST]",
		"RC SEND ping-pong on -q QPs sharing one receive queue, against rdma-core's ibv_srq_pingpong", runSRQPingpong},
	{"rping", "-s|-c [-vVd] [-S SIZE] [-C COUNT] -a ADDR [-p PORT] [--link udp|tap|xdp]",
		"librdmacm's rping: RDMA READ and WRITE ping over a connection made with rdma_cm, against stock rping", runRping},
	{"rdma_server", "[-p PORT] [--ip ADDR]", "librdmacm's rdma_server: one 16-byte SEND each way over an rdma_cm connection", runRdmaServer},
	{"rdma_client", "-s SERVER [-p PORT]", "librdmacm's rdma_client, against rdma_server or gorxe's", runRdmaClient},
	{"rdma_xserver", "[-p PORT] [-c r] [--ip ADDR]", "librdmacm's rdma_xserver over RC: one 16-byte SEND from the client over an rdma_cm connection", runRdmaXServer},
	{"rdma_xclient", "-s SERVER [-p PORT] [-c r]", "librdmacm's rdma_xclient over RC, against rdma_xserver or gorxe's", runRdmaXClient},
	{"ucmatose", "[-s SERVER] [-c CONNS] [-C COUNT] [-S SIZE] ...", "librdmacm's ucmatose: SENDs both ways over several rdma_cm connections", runUCMATose},
	{"udaddy", "[-s SERVER] [-c CONNS] [-C COUNT] [-S SIZE] ...", "librdmacm's udaddy: UD SENDs both ways to QPs found with SIDR", runUDAddy},
	{"mckey", "-m GROUP [-s] [-b ADDR] [-c CONNS] [-C COUNT] [-S SIZE] ...", "librdmacm's mckey: UD SENDs to an IPv4 multicast group joined with rdma_cm", runMckey},
	{"rstream", "[-s SERVER] [-S SIZE|all] [-C COUNT] [-I ITERS] [-T s|v] ...", "librdmacm's rstream: a byte stream over rsockets (RDMA WRITEs with immediate), timed, against stock rstream", runRstream},
	{"riostream", "[-s SERVER] [-S SIZE|all] [-C COUNT] [-I ITERS] [-T v] ...", "librdmacm's riostream: rstream's tests as riowrites into memory the peer mapped with riomap, against stock riostream", runRiostream},
	{"udpong", "[-s SERVER] [-S SIZE] [-C COUNT] [-T e|s] ...", "librdmacm's udpong: datagram rsockets over UD QPs, against stock udpong", runUDPong},
	{"rcopy", "[SOURCE SERVER[:DESTINATION]] [-p PORT]", "librdmacm's rcopy: a file copied over rsockets, either side, against stock rcopy", runRcopy},
	{"cmtime", "[-s SERVER] [-b ADDR] [-c CONNS] [-n THREADS] [-S] ...", "librdmacm's cmtime: how long rdma_cm takes to make and end connections, with QPs and without, against stock cmtime", runCmtime},
	{"qperf", "[SERVER -cm1 [-m SIZE] [-t TIME] ... TEST ...]", "qperf's RC tests (rc_bw, rc_lat, rc_rdma_read_bw ...) over rdma_cm, and its TCP and UDP ones, either side, against stock qperf", runQperf},
}

// Names of other tools that gorxe answers to, as "gorxe NAME" or as a
// copy or link of the binary called NAME, so that a script written for
// perftest or rdma-core runs unchanged with gorxe first in PATH. perftest's
// ib_write_bw is gorxe's write_bw, and so on; a name gorxe knows but
// cannot run says why.
var aliases = map[string]string{
	"ibv_rc_pingpong":  "rc_pingpong",
	"ibv_uc_pingpong":  "uc_pingpong",
	"ibv_ud_pingpong":  "ud_pingpong",
	"ibv_srq_pingpong": "srq_pingpong",
	"ibv_devinfo":      "devinfo",
	"ibv_devices":      "devices",
}

// unsupportedTools are tools of perftest's, rdma-core's and librdmacm's
// that gorxe knows of and does not have, with the reason.
var unsupportedTools = map[string]string{
	"raw_ethernet_bw":        "raw Ethernet tests send Ethernet frames of their own, not RoCE: gorxe is a RoCE v2 device",
	"raw_ethernet_lat":       "raw Ethernet tests send Ethernet frames of their own, not RoCE: gorxe is a RoCE v2 device",
	"raw_ethernet_burst_lat": "raw Ethernet tests send Ethernet frames of their own, not RoCE: gorxe is a RoCE v2 device",
	"raw_ethernet_fs_rate":   "raw Ethernet tests send Ethernet frames of their own, not RoCE: gorxe is a RoCE v2 device",
	"ibv_xsrq_pingpong":      "XRC queue pairs are not supported (rxe has none either)",
	"xsrq_pingpong":          "XRC queue pairs are not supported (rxe has none either)",
}

// toolName returns the command that a binary called argv0 runs by its
// name (ib_write_bw, ibv_rc_pingpong, show_gids ...), or "".
func toolName(argv0 string) string {
	name := filepath.Base(argv0)
	if _, ok := unsupportedTools[name]; ok {
		return name
	}
	if c := lookup(name); c != nil && name != "help" {
		return name
	}
	return ""
}

func main() {
	args := os.Args[1:]
	if name := toolName(os.Args[0]); name != "" && name != "gorxe" {
		args = append([]string{name}, args...)
	}
	os.Exit(run(args, os.Stdout, os.Stderr))
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
	case "version", "--version":
		fmt.Fprintln(stdout, version())
		return exitOK
	}
	if why, ok := unsupportedTools[args[0]]; ok {
		fmt.Fprintf(stderr, "gorxe: %s: %s\n", args[0], why)
		return exitError
	}
	c := lookup(args[0])
	if c == nil {
		fmt.Fprintf(stderr, "gorxe: unknown command %q\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return c.run(args[1:], stdout, stderr)
}

// lookup returns the subcommand called name, or by one of its other
// names (ib_write_bw for write_bw), or nil.
func lookup(name string) *command {
	if a, ok := aliases[name]; ok {
		name = a
	} else if t, ok := strings.CutPrefix(name, "ib_"); ok {
		name = t
	}
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
	fmt.Fprintln(w, `Run "gorxe help COMMAND" for a command's flags, "gorxe version" for the build.`)
}

// version says which gorxe this is, for a bug report: the module's
// version (or "(devel)" for a build from a checkout), the commit it was
// built from, marked "+dirty" if the tree had changes, and the Go that
// built it.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "gorxe (unknown build) " + runtime.Version()
	}
	v := []string{"gorxe", bi.Main.Version}
	var rev, when string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	// Go 1.24 and later put the commit in a pseudo-version already.
	if rev = rev[:min(len(rev), 12)]; rev != "" && !strings.Contains(bi.Main.Version, rev) {
		if dirty {
			rev += "+dirty"
		}
		if when != "" {
			rev += " (" + when + ")"
		}
		v = append(v, rev)
	}
	return strings.Join(append(v, bi.GoVersion, runtime.GOOS+"/"+runtime.GOARCH), " ")
}

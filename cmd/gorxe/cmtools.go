package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorxe/gorxe/cmtool"
	"github.com/gorxe/gorxe/internal/getopt"
	"github.com/gorxe/gorxe/rsocket"
	"github.com/gorxe/gorxe/wire"
)

// cmToolRun is the command line of one of librdmacm's example programs:
// rdma_server, rdma_client, ucmatose, udaddy or mckey.
type cmToolRun struct {
	link    linkFlags
	server  string // -s (rdma_client, ucmatose): the server's address
	bind    string // -b (ucmatose): the address to bind
	port    int    // -p
	format  string // -f (ucmatose)
	space   string // -P (ucmatose)
	tos     int    // -t (ucmatose)
	migrate bool   // -m (ucmatose)
	trace   bool   // --cm-trace
	p       cmtool.CMAToseParams
	help    bool

	commType string // -c (rdma_xserver, rdma_xclient)

	// mckey's
	group    string // -m: the multicast group
	unmapped string // -M
	sender   bool   // -s
	sendOnly bool   // -o
	noLoop   bool   // -l

	// rstream's
	rs        cmtool.RstreamParams
	keepalive int // -k

	// rcopy's: the file to copy, and its name on the server
	rcopySrc, rcopyDst string

	// udpong's
	up        cmtool.UDPongParams
	upSockets bool // -T s
	upBuffer  int  // -B

	// cmtime's
	ct      cmtool.CmtimeParams
	mimic   int  // -m: µs
	sockets bool // -S
	timeout int  // -t: ms
}

type cmToolOption = toolOption[cmToolRun]

// cmToolOptions returns the options of tool, as its getopt string has
// them (rdma_server "p:", rdma_client "s:p:", cmatose
// "s:b:f:P:c:C:S:t:p:m"), and gorxe's.
func cmToolOptions(tool string) []cmToolOption {
	str, num, flag := setString[cmToolRun], setInt[cmToolRun], setTrue[cmToolRun]
	const (
		no  = getopt.NoArg
		req = getopt.RequiredArg
	)
	port := cmToolOption{'p', "", req, honoured, false, "port number (7471)", num(func(r *cmToolRun) *int { return &r.port })}
	server := cmToolOption{'s', "", req, honoured, false, "server address", str(func(r *cmToolRun) *string { return &r.server })}
	var opts []cmToolOption
	switch tool {
	case "rcopy":
		opts = []cmToolOption{{'p', "", req, honoured, false, "port number (7427)", num(func(r *cmToolRun) *int { return &r.port })}}
	case "udpong":
		custom := func(field func(r *cmToolRun) *int) func(r *cmToolRun, s string) error {
			return func(r *cmToolRun, s string) error {
				r.up.Custom = true
				return parseInt(s, field(r))
			}
		}
		opts = []cmToolOption{
			server,
			{'b', "", req, honoured, false, "bind address: the server's address and port to take datagrams on, the client's to send from", str(func(r *cmToolRun) *string { return &r.bind })},
			{'B', "", req, honoured, false, "buffer size: SO_SNDBUF and SO_RCVBUF, a 2 KiB message each way for each 2 KiB (512 KiB)", num(func(r *cmToolRun) *int { return &r.upBuffer })},
			{'C', "", req, honoured, false, "transfer count: one test of this many transfers (1000)", custom(func(r *cmToolRun) *int { return &r.up.Count })},
			{'S', "", req, honoured, false, "transfer size: one test of transfers this size, 16 bytes or more (1000)", custom(func(r *cmToolRun) *int { return &r.up.Size })},
			{'p', "", req, honoured, false, "port number (7174)", num(func(r *cmToolRun) *int { return &r.port })},
			{'T', "", req, honoured, false, "test option: s (UDP sockets), e (the custom test echoed: latency), a, b, n (how the C program waits: the same for gorxe)", (*cmToolRun).udpongTestOption},
		}
	case "rdma_server":
		opts = []cmToolOption{port}
	case "rdma_client":
		opts = []cmToolOption{server, port}
	case "rdma_xserver", "rdma_xclient":
		opts = []cmToolOption{port, {'c', "", req, honoured, false, "communication type: r (RC, the default); x (XRC) is refused: gorxe, like rxe, has no XRC", str(func(r *cmToolRun) *string { return &r.commType })}}
		if tool == "rdma_xclient" {
			opts = append([]cmToolOption{server}, opts...)
		}
	case "udaddy":
		opts = []cmToolOption{
			server,
			{'b', "", req, honoured, false, "bind address", str(func(r *cmToolRun) *string { return &r.bind })},
			{'c', "", req, honoured, false, "connections (1)", num(func(r *cmToolRun) *int { return &r.p.Connections })},
			{'C', "", req, honoured, false, "message count (10)", num(func(r *cmToolRun) *int { return &r.p.MessageCount })},
			{'S', "", req, honoured, false, "message size (100, at most the MTU)", num(func(r *cmToolRun) *int { return &r.p.MessageSize })},
			{'t', "", req, honoured, false, "type of service: the IP traffic class", num(func(r *cmToolRun) *int { return &r.tos })},
			{'p', "", req, honoured, false, "port space as a number: 0x111 (UDP, the default); others are refused", str(func(r *cmToolRun) *string { return &r.space })},
			{'P', "", req, honoured, false, "port space: udp (ipoib is refused)", str(func(r *cmToolRun) *string { return &r.space })},
			{'f', "", req, honoured, false, "address format: name, ip or ipv6 (gid is refused)", str(func(r *cmToolRun) *string { return &r.format })},
		}
	case "mckey":
		opts = []cmToolOption{
			{'m', "", req, honoured, false, "the IPv4 multicast group to join", str(func(r *cmToolRun) *string { return &r.group })},
			{'M', "", req, refused, false, "unmapped (AF_IB) multicast addresses are InfiniBand's: gorxe's connection manager takes IP addresses (RoCE)", str(func(r *cmToolRun) *string { return &r.unmapped })},
			{'s', "", no, honoured, false, "sender: send to the group (else receive from it)", flag(func(r *cmToolRun) *bool { return &r.sender })},
			{'b', "", req, honoured, false, "bind address: this host's address to send from", str(func(r *cmToolRun) *string { return &r.bind })},
			{'c', "", req, honoured, false, "connections: UD QPs, each joined to the group (1)", num(func(r *cmToolRun) *int { return &r.p.Connections })},
			{'C', "", req, honoured, false, "message count (10)", num(func(r *cmToolRun) *int { return &r.p.MessageCount })},
			{'S', "", req, honoured, false, "message size (100, at most the MTU)", num(func(r *cmToolRun) *int { return &r.p.MessageSize })},
			{'p', "", req, honoured, false, "port space as a number: 0x111 (UDP, the default); 0x2 (IPoIB) is refused", str(func(r *cmToolRun) *string { return &r.space })},
			{'o', "", no, honoured, false, "join as a send-only full member: receive nothing from the group", flag(func(r *cmToolRun) *bool { return &r.sendOnly })},
			{'l', "", no, refused, false, "blocking multicast loopback needs IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, which gorxe, like rxe, does not have", flag(func(r *cmToolRun) *bool { return &r.noLoop })},
		}
	case "rstream", "riostream":
		// -I, -C and -S SIZE make the run one custom test.
		custom := func(field func(r *cmToolRun) *int) func(r *cmToolRun, s string) error {
			return func(r *cmToolRun, s string) error {
				r.rs.Custom = true
				return parseInt(s, field(r))
			}
		}
		opts = []cmToolOption{
			server,
			{'b', "", req, honoured, false, "bind address: this host's address to connect from", str(func(r *cmToolRun) *string { return &r.bind })},
			{'f', "", req, honoured, false, "address format: name, ip or ipv6 (gid is refused)", str(func(r *cmToolRun) *string { return &r.format })},
			{'B', "", req, honoured, false, "buffer size: SO_SNDBUF and SO_RCVBUF, rsockets' buffers twice that (512 KiB)", num(func(r *cmToolRun) *int { return &r.rs.BufferSize })},
			{'i', "", req, honoured, false, "inline size of the latency tests' writes (64)", num(func(r *cmToolRun) *int { return &r.rs.Inline })},
			{'I', "", req, honoured, false, "iterations: one test of this many rounds", custom(func(r *cmToolRun) *int { return &r.rs.Iterations })},
			{'C', "", req, honoured, false, "transfer count: one test of this many transfers each way a round", custom(func(r *cmToolRun) *int { return &r.rs.Count })},
			{'S', "", req, honoured, false, "transfer size: one test of transfers this size; all: every size of the default tests' list", func(r *cmToolRun, s string) error {
				if strings.HasPrefix(strings.ToLower(s), "all") {
					r.rs.AllSizes = true
					return nil
				}
				return custom(func(r *cmToolRun) *int { return &r.rs.Size })(r, s)
			}},
			port,
		}
		if tool == "riostream" { // no -k, and fewer -T options
			opts = append(opts, cmToolOption{'T', "", req, honoured, false, "test option: v (verify the data), a, b, n (how the C program waits: the same for gorxe)", func(r *cmToolRun, s string) error { return r.rstreamTestOption(tool, s) }})
			break
		}
		opts = append(opts,
			cmToolOption{'k', "", req, honoured, false, "keepalive time in seconds: a keepalive every so often, idle or not (SO_KEEPALIVE and TCP_KEEPIDLE)", num(func(r *cmToolRun) *int { return &r.keepalive })},
			cmToolOption{'T', "", req, honoured, false, "test option: s (TCP sockets), v (verify the data), a, b, n, r (how the C program waits and resolves: the same for gorxe); f (fork) is refused", func(r *cmToolRun, s string) error { return r.rstreamTestOption(tool, s) }})
	case "cmtime":
		opts = []cmToolOption{
			server,
			{'b', "", req, honoured, false, "bind address: this host's address to connect from", str(func(r *cmToolRun) *string { return &r.bind })},
			{'c', "", req, honoured, false, "connections each test makes (100)", num(func(r *cmToolRun) *int { return &r.ct.Connections })},
			{'p', "", req, honoured, false, "port number, of rdma_cm and of the TCP socket the two sides sync on (7471)", num(func(r *cmToolRun) *int { return &r.port })},
			{'q', "", req, honoured, false, "the first QP number the tests without QPs name (1000)", func(r *cmToolRun, v string) error {
				var n int
				if err := parseInt(v, &n); err != nil {
					return err
				}
				r.ct.BaseQPN = uint32(n)
				return nil
			}},
			{'m', "", req, honoured, false, "mimic QPs: the first test too makes none, each QP step taking this many µs", func(r *cmToolRun, v string) error {
				r.ct.Mimic = true
				return parseInt(v, &r.mimic)
			}},
			{'n', "", req, honoured, false, "threads: connections worked on at once (1)", num(func(r *cmToolRun) *int { return &r.ct.Threads })},
			{'r', "", req, accepted, false, "retries of the address and route resolution (2), which gorxe's connection manager does not do apart; an older cmtime's server gets them as the REQs' retry count", num(func(r *cmToolRun) *int { return &r.ct.Retries })},
			{'S', "", no, honoured, false, "time TCP connections instead, the baseline", flag(func(r *cmToolRun) *bool { return &r.sockets })},
			{'t', "", req, accepted, false, "timeout of the address and route resolution in ms (2000), which gorxe's connection manager does not do apart", num(func(r *cmToolRun) *int { return &r.timeout })},
		}
	case "ucmatose":
		opts = []cmToolOption{
			server,
			{'b', "", req, honoured, false, "bind address", str(func(r *cmToolRun) *string { return &r.bind })},
			{'f', "", req, honoured, false, "address format: name, ip or ipv6 (gid is refused)", str(func(r *cmToolRun) *string { return &r.format })},
			{'P', "", req, honoured, false, "port space: tcp (ib is refused)", str(func(r *cmToolRun) *string { return &r.space })},
			{'c', "", req, honoured, false, "connections (1)", num(func(r *cmToolRun) *int { return &r.p.Connections })},
			{'C', "", req, honoured, false, "message count (10)", num(func(r *cmToolRun) *int { return &r.p.MessageCount })},
			{'S', "", req, honoured, false, "message size (100)", num(func(r *cmToolRun) *int { return &r.p.MessageSize })},
			{'t', "", req, honoured, false, "type of service: the connections' IP traffic class", num(func(r *cmToolRun) *int { return &r.tos })},
			port,
			{'m', "", no, accepted, false, "migrate to a new event channel: gorxe has none to migrate", flag(func(r *cmToolRun) *bool { return &r.migrate })},
		}
	}
	switch tool {
	case "rdma_server", "rdma_client", "rdma_xserver", "rdma_xclient", "ucmatose", "udaddy", "mckey":
		what := "once connected, fail when nothing comes from the peer (a completion, a DREP, a DREQ) for this long: the peer is taken for gone (10s; the C program learns of a dead peer from the kernel's DREQ, which a killed gorxe does not send)"
		if tool == "mckey" {
			what = "a sender fails when its sends do not complete for this long (10s); a receiver waits for the group's messages for ever, as mckey"
		}
		opts = append(opts, cmToolOption{0, "give-up", req, honoured, true, what, setPositiveDuration(func(r *cmToolRun) *time.Duration { return &r.p.GiveUp })})
	}
	opts = append(opts,
		cmToolOption{0, "cm-trace", no, honoured, true, "print every connection-manager message to stderr", flag(func(r *cmToolRun) *bool { return &r.trace })},
		cmToolOption{'h', "help", no, honoured, true, "print this help", flag(func(r *cmToolRun) *bool { return &r.help })})
	return append(opts, linkOptions(func(r *cmToolRun) *linkFlags { return &r.link },
		"how packets travel: udp (a kernel UDP socket, the default), tap (a TAP device on which gorxe is a whole host) or xdp (AF_XDP on --dev's interface, root)",
		"this host's address, ADDR or ADDR/PREFIX; tap needs the prefix (udp default: the route to the server's host; a server's, that of the host's only interface, or of the default route's of several)")...)
}

func parseCMTool(tool string, args []string) (*cmToolRun, error) {
	port := cmtool.DefaultPort
	switch tool {
	case "rcopy":
		port = cmtool.RcopyPort
	case "udpong":
		port = cmtool.UDPongPort
	}
	r := &cmToolRun{port: port, link: linkFlags{port: wire.UDPPort}, p: cmtool.DefaultCMAToseParams(), ct: cmtool.DefaultCmtimeParams(), rs: cmtool.DefaultRstreamParams(), up: cmtool.DefaultUDPongParams()}
	r.p.GiveUp = 10 * time.Second
	operands, err := parseOptions(cmToolOptions(tool), r, args, false)
	if err != nil || r.help {
		return r, err
	}
	switch {
	case tool == "rcopy" && len(operands) == 0: // the server
	case tool == "rcopy" && len(operands) == 2:
		// SOURCE SERVER[:DESTINATION]; the destination is the source's
		// name when not given.
		r.rcopySrc = operands[0]
		var named bool
		if r.server, r.rcopyDst, named = strings.Cut(operands[1], ":"); !named {
			r.rcopyDst = r.rcopySrc
		}
	case tool == "rcopy":
		return r, errors.New("give SOURCE SERVER[:DESTINATION] to copy a file, or nothing to be the server")
	case len(operands) > 0:
		return r, fmt.Errorf("unexpected operands %q", operands)
	}
	r.link.kind = cmp.Or(r.link.kind, "udp")
	switch {
	case r.port <= 0 || r.port > 65535:
		return r, fmt.Errorf("-p %d: not a port", r.port)
	case r.tos < 0 || r.tos > 255:
		return r, fmt.Errorf("-t %d: a type of service is 0 to 255", r.tos)
	case strings.HasPrefix(strings.ToLower(r.format), "gid"):
		return r, fmt.Errorf("%w: -f gid: gorxe's connection manager takes IP addresses (RoCE), not AF_IB GIDs", errRefused)
	case (tool == "udaddy" || tool == "mckey") && r.space != "" && !strings.HasPrefix(strings.ToLower(r.space), "udp") && !isUDPSpace(r.space):
		return r, fmt.Errorf("%w: port space %s: %s runs in the UDP port space only in gorxe", errRefused, r.space, tool)
	case (tool == "rdma_xserver" || tool == "rdma_xclient") && r.commType != "" && !strings.EqualFold(r.commType[:1], "r"):
		if strings.EqualFold(r.commType[:1], "x") {
			return r, fmt.Errorf("%w: -c x: XRC queue pairs are not supported (rxe has none either)", errRefused)
		}
		return r, fmt.Errorf("-c %s: the communication type is r (RC) or x (XRC)", r.commType)
	case tool == "mckey" && r.group == "":
		return r, errors.New("-m: give the multicast group to join")
	case tool != "udaddy" && tool != "mckey" && r.space != "" && !strings.HasPrefix(strings.ToLower(r.space), "tcp"):
		return r, fmt.Errorf("%w: -P %s: gorxe's connection manager has the TCP port space only", errRefused, r.space)
	case r.link.kind == "mem":
		return r, errors.New("--link mem: the peer is another process: use --link udp, tap or xdp")
	}
	r.p.TOS = uint8(r.tos)
	if tool == "rstream" || tool == "riostream" {
		r.rs.KeepAlive = time.Duration(r.keepalive) * time.Second
		r.rs.IOMapped = tool == "riostream"
		if err := r.rs.Check(); err != nil {
			return r, err
		}
	}
	if tool == "udpong" {
		if err := r.up.Check(); err != nil {
			return r, err
		}
		if r.upBuffer < 0 {
			return r, fmt.Errorf("-B %d: a buffer size is not negative", r.upBuffer)
		}
	}
	if tool == "cmtime" {
		if r.mimic < 0 {
			return r, fmt.Errorf("-m %d: a delay is not negative", r.mimic)
		}
		r.ct.MimicDelay = time.Duration(r.mimic) * time.Microsecond
		if err := r.ct.Check(); err != nil {
			return r, err
		}
	}
	if err := r.p.Check(); err != nil {
		return r, err
	}
	if err := r.link.validateKind(); err != nil {
		return r, err
	}
	return r, r.link.validateCC()
}

func cmToolUsage(w io.Writer, tool string) {
	fmt.Fprintf(w, "Usage: gorxe %s [options]\n\n", tool)
	switch tool {
	case "rdma_server":
		fmt.Fprintf(w, "librdmacm's rdma_server: takes one connection on port 7471 (rdma_cm, no TCP),\nreceives a 16-byte message, answers with one, disconnects.\n")
	case "rdma_client":
		fmt.Fprintf(w, "librdmacm's rdma_client: connects to -s's port 7471 with rdma_cm, sends a\n16-byte message, receives the answer, disconnects.\n")
	case "rdma_xserver":
		fmt.Fprintf(w, "librdmacm's rdma_xserver over RC: takes one connection on port 7471 (rdma_cm),\nreceives a 16-byte message, disconnects.\n")
	case "rdma_xclient":
		fmt.Fprintf(w, "librdmacm's rdma_xclient over RC: connects to -s's port 7471 with rdma_cm,\nsends a 16-byte message, disconnects.\n")
	case "udaddy":
		fmt.Fprintf(w, "librdmacm's udaddy: UD QPs found with service ID resolution (SIDR) on port 7174\nof rdma_cm's UDP port space; the client sends -C messages of -S bytes from each\nof -c QPs, the server answers each. Without -s it is the server.\n")
	case "mckey":
		fmt.Fprintf(w, "librdmacm's mckey: -c UD QPs join the IPv4 multicast group -m with rdma_cm (on\nRoCE: IGMP, no MADs); after 3 s a sender (-s) sends -C messages of -S bytes\nfrom each to the group, and a receiver waits for as many on each.\n")
	case "rcopy":
		fmt.Fprintf(w, "librdmacm's rcopy: copies a file over rsockets, port 7427. With no operand it is the\nserver, which writes each file its clients send where they name it, and serves\nuntil stopped; gorxe rcopy SOURCE SERVER[:DESTINATION] sends one (DESTINATION\nis SOURCE's name when not given).\n")
	case "riostream":
		fmt.Fprintf(w, "librdmacm's riostream: rstream's tests with rsockets' I/O-mapped writes: each side\nmaps its buffer (riomap) and the transfers are RDMA WRITEs into the peer's\n(riowrite), each round's last marked in its last byte, which the peer watches.\nWithout -s it is the server.\n")
	case "udpong":
		fmt.Fprintf(w, "librdmacm's udpong: datagram rsockets (UD QPs; the first datagram to a peer goes\nover UDP and teaches it the sender's QPN). The client logs in to the server, then\nfor each size from 64 B to 1.5 KiB times echoed messages (_lat), then a stream of\nthem the server counts (_bw); -S or -C make it one test. Without -s it is the\nserver, which answers until stopped. The messages must fit the path MTU.\n")
	case "rstream":
		fmt.Fprintf(w, "librdmacm's rstream: a byte stream over rsockets (RDMA WRITE with immediate into\nthe peer's buffer, credits back), timed both ways: without -I, -C or -S SIZE its\nlatency tests, then its bandwidth tests on a second connection, for 64 B, 4 KiB,\n64 KiB and 1 MiB (-S all: 33 sizes up to 6 MiB). Without -s it is the server.\n")
	case "cmtime":
		fmt.Fprintf(w, "librdmacm's cmtime: times each step of making and ending -c connections with\nrdma_cm: a warm-up, a test with QPs and one without (made-up QP numbers from\n-q). The two sides sync over a TCP connection to the server's -p, as cmtime\nsince rdma-core 52; against an older cmtime's server (no TCP) the client makes\nits connections once, as that cmtime did. Without -s it is the server.\n")
	case "ucmatose":
		fmt.Fprintf(w, "librdmacm's ucmatose (cmatose): -c connections with rdma_cm; the server sends -C\nmessages of -S bytes on each, the client answers with as many; the server\ndisconnects. Without -s it is the server.\n")
	}
	printOptions(w, cmToolOptions(tool), tool)
}

func runRdmaServer(args []string, stdout, stderr io.Writer) int {
	return runCMTool("rdma_server", args, stdout, stderr)
}
func runRdmaClient(args []string, stdout, stderr io.Writer) int {
	return runCMTool("rdma_client", args, stdout, stderr)
}
func runRdmaXServer(args []string, stdout, stderr io.Writer) int {
	return runCMTool("rdma_xserver", args, stdout, stderr)
}
func runRdmaXClient(args []string, stdout, stderr io.Writer) int {
	return runCMTool("rdma_xclient", args, stdout, stderr)
}
func runUCMATose(args []string, stdout, stderr io.Writer) int {
	return runCMTool("ucmatose", args, stdout, stderr)
}
func runUDAddy(args []string, stdout, stderr io.Writer) int {
	return runCMTool("udaddy", args, stdout, stderr)
}
func runMckey(args []string, stdout, stderr io.Writer) int {
	return runCMTool("mckey", args, stdout, stderr)
}
func runRstream(args []string, stdout, stderr io.Writer) int {
	return runCMTool("rstream", args, stdout, stderr)
}
func runRcopy(args []string, stdout, stderr io.Writer) int {
	return runCMTool("rcopy", args, stdout, stderr)
}
func runRiostream(args []string, stdout, stderr io.Writer) int {
	return runCMTool("riostream", args, stdout, stderr)
}
func runUDPong(args []string, stdout, stderr io.Writer) int {
	return runCMTool("udpong", args, stdout, stderr)
}
func runCmtime(args []string, stdout, stderr io.Writer) int {
	return runCMTool("cmtime", args, stdout, stderr)
}

// isUDPSpace reports whether v names rdma_cm's UDP port space as a number
// (udaddy's -p): 0x111, or 273.
func isUDPSpace(v string) bool {
	var n int
	return parseInt(v, &n) == nil && n == 0x111
}

// runCMTool runs one of librdmacm's examples. A run that fails exits 1,
// where the C programs exit with their int's low byte.
func runCMTool(tool string, args []string, stdout, stderr io.Writer) int {
	name := "gorxe " + tool
	r, err := parseCMTool(tool, args)
	if err != nil {
		return badCommandLine(stderr, name, err)
	}
	r.link.log = stderr
	if r.help {
		cmToolUsage(stdout, tool)
		return exitOK
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fail := func(err error) int {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitError
	}
	client := tool == "rdma_client" || tool == "rdma_xclient" || (tool == "ucmatose" || tool == "udaddy" || tool == "cmtime" || tool == "rstream" || tool == "riostream" || tool == "rcopy" || tool == "udpong") && r.server != ""
	if tool == "rdma_client" || tool == "rdma_xclient" {
		r.server = cmp.Or(r.server, "127.0.0.1") // their default
	}
	if tool == "mckey" {
		// The group stands for the peer: its route names this host's
		// address, as rdma_resolve_addr's does.
		r.server, client = r.group, true
	}
	peer, err := resolveHost(r.server)
	if err != nil {
		return fail(err)
	}
	if tool == "cmtime" && r.sockets {
		return cmtimeSockets(ctx, r, peer, client, stdout, fail)
	}
	if tool == "rstream" && r.rs.Sockets {
		return rstreamSockets(ctx, r, peer, client, stdout, fail)
	}
	if tool == "udpong" && r.upSockets {
		return udpongSockets(ctx, r, peer, client, stdout, fail)
	}
	local, also, err := cmLocal(r.link, r.bind, peer, client)
	r.link.also = also
	if err != nil && tool == "mckey" {
		err = fmt.Errorf("%v: give this host's address to send from with -b or --ip", err)
	}
	if err != nil {
		return fail(err)
	}
	closeTraceJSON, err := r.link.openTraceJSON(name, stderr)
	if err != nil {
		return fail(err)
	}
	defer closeTraceJSON()
	dev, m, err := openCM(r.link, local, r.trace)
	if err != nil {
		return fail(err)
	}
	defer dev.Close()
	defer m.Close()
	bind, err := r.bindAddr()
	if err != nil {
		return fail(err)
	}
	server := netip.AddrPortFrom(peer, uint16(r.port))
	switch {
	case tool == "rdma_client":
		if cmtool.RdmaClient(ctx, m, dev, server, bind, r.p.GiveUp, stdout) != nil {
			return exitError
		}
	case tool == "rdma_xclient":
		if cmtool.RdmaXClient(ctx, m, dev, server, bind, r.p.GiveUp, stdout) != nil {
			return exitError
		}
	case tool == "ucmatose" && client:
		if cmtool.CMAToseClient(ctx, m, dev, server, bind, r.p, stdout) != 0 {
			return exitError
		}
	case tool == "udaddy" && client:
		if cmtool.UDAddyClient(ctx, m, dev, peer, bind, r.p, stdout) != 0 {
			return exitError
		}
	case tool == "rcopy" && client:
		conn, err := rsocket.Dial(ctx, m, server, bind, rsocket.Options{})
		if err != nil {
			return fail(fmt.Errorf("rconnect failed: %w", err))
		}
		if err := untilSignal(ctx, func() error { return cmtool.RcopyClient(conn, r.rcopySrc, r.rcopyDst, stdout) }); err != nil {
			fmt.Fprintln(stdout)
			return fail(err)
		}
	case tool == "rcopy":
		l, err := rsocket.Listen(m, bind, uint16(r.port), rsocket.Options{})
		if err != nil {
			return fail(err)
		}
		defer l.Close()
		if err := untilSignal(ctx, func() error { return cmtool.RcopyServer(ctx, l, stdout) }); err != nil && ctx.Err() == nil {
			return fail(err)
		}
	case (tool == "rstream" || tool == "riostream") && client:
		if err := untilSignal(ctx, func() error {
			return cmtool.Rstream(r.rs, cmtool.RstreamDialer(ctx, m, server, bind, false), nil, stdout)
		}); err != nil {
			return fail(err)
		}
	case tool == "rstream" || tool == "riostream":
		l, err := rsocket.Listen(m, bind, uint16(r.port), rsocket.Options{})
		if err != nil {
			return fail(err)
		}
		defer l.Close()
		if err := untilSignal(ctx, func() error {
			return cmtool.Rstream(r.rs, nil, cmtool.RstreamAcceptor(ctx, l, nil), stdout)
		}); err != nil {
			return fail(err)
		}
	case tool == "udpong":
		laddr, err := udpongBind(r, local, client)
		if err != nil {
			return fail(err)
		}
		s, err := rsocket.ListenPacket(dev, laddr, rsocket.PacketOptions{BufferSize: r.upBuffer})
		if err != nil {
			return fail(err)
		}
		defer s.Close()
		if client && !r.up.Custom {
			r.up.MaxSize = s.MaxPayload()
			if skipped := r.up.SkippedSizes(); len(skipped) > 0 {
				fmt.Fprintf(stderr, "%s: not testing %v bytes: a datagram and rsockets' header must fit the path MTU (%v)\n", name, skipped, dev.MTU())
			}
		}
		if err := udpongRun(ctx, s, server, client, r, stdout); err != nil {
			return fail(err)
		}
	case tool == "cmtime" && client:
		oob, err := cmtool.DialCmtime(ctx, server)
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			fmt.Fprintf(stderr, "%s: nothing takes TCP connections at %v: the server is a cmtime of rdma-core 51 or before, which syncs nothing\n", name, server)
		case err != nil:
			return fail(fmt.Errorf("oob_client_setup: %w", err))
		default:
			defer oob.Close()
		}
		if err := cmtool.CmtimeClient(ctx, m, oob, server, bind, r.ct, stdout); err != nil {
			return fail(err)
		}
	case tool == "cmtime":
		l, err := m.Listen(bind, uint16(r.port))
		if err != nil {
			return fail(err)
		}
		defer l.Close()
		// After rdma_cm's listener, as cmtime: a client that finds the
		// TCP socket finds the listener.
		oob, err := listenOOB(ctx, bind, r.port)
		if err != nil {
			return fail(err)
		}
		defer oob.Close()
		if err := cmtool.CmtimeServer(ctx, dev, l, oob, r.ct, stdout); err != nil {
			return fail(err)
		}
	case tool == "mckey":
		p := cmtool.DefaultMckeyParams()
		p.CMAToseParams, p.Sender, p.SendOnly = r.p, r.sender, r.sendOnly
		if cmtool.Mckey(ctx, m, peer, bind, p, stdout) != 0 {
			return exitError
		}
	case tool == "udaddy":
		l, err := m.ListenUD(bind, cmtool.UDAddyPort)
		if err != nil {
			return fail(err)
		}
		defer l.Close()
		if cmtool.UDAddyServer(ctx, dev, l, r.p, stdout) != 0 {
			return exitError
		}
	default:
		l, err := m.Listen(bind, uint16(r.port))
		if err != nil {
			return fail(err)
		}
		defer l.Close()
		if tool == "rdma_xserver" {
			if err := cmtool.RdmaXServer(ctx, dev, l, r.p.GiveUp, stdout); err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", name, err)
				return exitError
			}
		} else if tool == "rdma_server" {
			if err := cmtool.RdmaServer(ctx, dev, l, r.p.GiveUp, stdout); err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", name, err)
				return exitError
			}
		} else if cmtool.CMAToseServer(ctx, dev, l, r.p, stdout) != 0 {
			return exitError
		}
	}
	return exitOK
}

// listenOOB listens on TCP port at bind (every address when it is not
// valid) for cmtime's out-of-band socket.
func listenOOB(ctx context.Context, bind netip.Addr, port int) (net.Listener, error) {
	addr := net.JoinHostPort("", strconv.Itoa(port))
	if bind.IsValid() {
		addr = netip.AddrPortFrom(bind, uint16(port)).String()
	}
	var lc net.ListenConfig
	return lc.Listen(ctx, "tcp", addr)
}

// cmtimeSockets runs cmtime -S, its baseline of TCP connections, which
// needs no RDMA device.
func cmtimeSockets(ctx context.Context, r *cmToolRun, peer netip.Addr, client bool, stdout io.Writer, fail func(error) int) int {
	return overTCP(ctx, r, peer, client, fail,
		func(server netip.AddrPort) error { return cmtool.CmtimeSocketClient(ctx, server, r.ct, stdout) },
		func(l net.Listener) error { return cmtool.CmtimeSocketServer(ctx, l, r.ct, stdout) })
}

// overTCP runs a tool's test over TCP sockets, which needs no RDMA
// device: the client to peer at the tool's port, or the server on a
// listener at its -b address (every address without one).
func overTCP(ctx context.Context, r *cmToolRun, peer netip.Addr, client bool, fail func(error) int,
	dial func(netip.AddrPort) error, serve func(net.Listener) error) int {
	if client {
		if err := dial(netip.AddrPortFrom(peer, uint16(r.port))); err != nil {
			return fail(err)
		}
		return exitOK
	}
	bind, err := r.bindAddr()
	if err != nil {
		return fail(err)
	}
	l, err := listenOOB(ctx, bind, r.port)
	if err != nil {
		return fail(err)
	}
	defer l.Close()
	if err := serve(l); err != nil {
		return fail(err)
	}
	return exitOK
}

// rstreamTestOption takes rstream's -T: s or socket, v or verify, and
// the options of how the C program waits (a, async; b, block; n,
// nonblock) or resolves (r, resolve), which change nothing in gorxe; f
// (fork) is refused.
func (r *cmToolRun) rstreamTestOption(tool, v string) error {
	o := strings.ToLower(v)
	long := map[string]string{"socket": "s", "async": "a", "block": "b", "nonblock": "n", "resolve": "r", "verify": "v", "fork": "f"}
	if len(o) > 1 {
		short := ""
		for name, s := range long {
			if strings.HasPrefix(o, name) && (short == "" || len(name) > len(long[short])) {
				short = s
			}
		}
		o = short
	}
	if tool == "riostream" && (o == "s" || o == "r" || o == "f") {
		return errors.New("riostream's test options are a, b, n and v")
	}
	switch o {
	case "s":
		r.rs.Sockets = true
	case "v":
		r.rs.Verify = true
	case "a", "b", "n", "r":
	case "f":
		return fmt.Errorf("%w: gorxe's rstream server does not fork a process per connection", errRefused)
	default:
		return errors.New("a test option is s, a, b, f, n, r or v")
	}
	return nil
}

// rstreamSockets runs rstream -T s, its test over TCP sockets.
func rstreamSockets(ctx context.Context, r *cmToolRun, peer netip.Addr, client bool, stdout io.Writer, fail func(error) int) int {
	return overTCP(ctx, r, peer, client, fail,
		func(server netip.AddrPort) error {
			return cmtool.Rstream(r.rs, cmtool.RstreamDialer(ctx, nil, server, netip.Addr{}, true), nil, stdout)
		},
		func(l net.Listener) error {
			return cmtool.Rstream(r.rs, nil, cmtool.RstreamAcceptor(ctx, nil, l), stdout)
		})
}

// udpongTestOption is udpong's -T: s (sockets), a, b, n and e, or their
// names' prefixes (socket, async, block, nonblock, echo).
func (r *cmToolRun) udpongTestOption(v string) error {
	o := strings.ToLower(v)
	if len(o) > 1 {
		for _, name := range []string{"socket", "async", "block", "nonblock", "echo"} {
			if strings.HasPrefix(o, name) {
				o = name[:1]
				break
			}
		}
	}
	switch o {
	case "s":
		r.upSockets = true
	case "e":
		r.up.Echo = true
	case "a", "b", "n":
	default:
		return errors.New("a test option is s, a, b, n or e")
	}
	return nil
}

// udpongBind returns where udpong's socket binds: -b's address, else the
// device's; the server on -p's port, the client on one the kernel picks.
func udpongBind(r *cmToolRun, local string, client bool) (netip.AddrPort, error) {
	addr := local
	if r.bind != "" {
		addr = r.bind
	}
	ip, err := resolveHost(addr)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if !ip.IsValid() {
		ip = netip.IPv6Unspecified()
	}
	port := uint16(r.port)
	if client {
		port = 0
	}
	return netip.AddrPortFrom(ip, port), nil
}

// udpongRun runs udpong's client or server on s.
func udpongRun(ctx context.Context, s cmtool.DatagramSocket, server netip.AddrPort, client bool, r *cmToolRun, stdout io.Writer) error {
	if client {
		return cmtool.UDPongClient(ctx, s, server, r.up, stdout)
	}
	if err := cmtool.UDPongServer(ctx, s, stdout); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// udpongSockets runs udpong -T s, over kernel UDP sockets.
func udpongSockets(ctx context.Context, r *cmToolRun, peer netip.Addr, client bool, stdout io.Writer, fail func(error) int) int {
	laddr, err := udpongBind(r, "", client)
	if err != nil {
		return fail(err)
	}
	u, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(laddr))
	if err != nil {
		return fail(err)
	}
	defer u.Close()
	if err := udpongRun(ctx, cmtool.UDPSocket{UDPConn: u}, netip.AddrPortFrom(peer, uint16(r.port)), client, r, stdout); err != nil {
		return fail(err)
	}
	return exitOK
}

// untilSignal runs fn and returns its error, or, as soon as a signal ends
// ctx, the signal's: a stream over rsockets whose peer went silent (its
// host died; no DREQ will come) waits in a read for ever, as rstream's
// rrecv does, and the C program still dies of SIGTERM or Ctrl-C, which it
// does not catch. fn's goroutine is left behind, for the process's exit.
func untilSignal(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// bindAddr returns -b's address, or the zero Addr (any address) when -b is
// not given or is unspecified (0.0.0.0, ::), whose family cmLocal has
// taken the interface's address of.
func (r *cmToolRun) bindAddr() (netip.Addr, error) {
	a, err := resolveHost(r.bind)
	if err != nil || a.IsUnspecified() {
		return netip.Addr{}, err
	}
	return a, nil
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorxe/gorxe/perftest"
	"github.com/gorxe/gorxe/rnic"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/tap"
	"github.com/gorxe/gorxe/link/udp"
	"github.com/gorxe/gorxe/wire"
)

// linkFlags are the flags that choose how a gorxe device reaches the
// network, shared by every command that opens one.
type linkFlags struct {
	kind    string
	ip      string
	tapName string
	bridge  string
	port    uint
	mtu     int
	noGSO   bool
	trace   bool
}

func (l *linkFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.kind, "link", "mem", "how packets travel: mem (both sides in this process), udp (a kernel UDP socket), tap (a TAP device on which gorxe is a whole host)")
	fs.StringVar(&l.ip, "ip", "", "this host's address for the udp and tap links, ADDR or ADDR/PREFIX (IPv4 or IPv6); tap needs the prefix")
	fs.StringVar(&l.tapName, "tap", "", "name of the TAP device to create (tap link; default: the kernel picks)")
	fs.StringVar(&l.bridge, "bridge", "", "attach the TAP device to this existing bridge (tap link)")
	fs.UintVar(&l.port, "port", wire.UDPPort, "UDP port of RoCE v2")
	fs.IntVar(&l.mtu, "link-mtu", 0, "the link's IP MTU (tap: default 1500; udp: the interface's); path MTU 4096 needs at least 4176")
	fs.BoolVar(&l.noGSO, "no-gso", false, "udp link: send every packet as a datagram of its own, not runs of them as one datagram the kernel cuts (UDP GSO; a capture on the sending host then shows each packet)")
	fs.BoolVar(&l.trace, "trace", false, "print every QP state change and transport event (retransmission, NAK, RNR wait, tail probe) to stderr")
}

// validate reports a combination of link flags that cannot work, a usage
// error, before anything is opened.
func (l *linkFlags) validate() error {
	switch l.kind {
	case "mem":
		return nil
	case "udp", "tap":
	default:
		return fmt.Errorf("--link %s: want mem, udp or tap", l.kind)
	}
	if l.port == 0 || l.port > 65535 {
		return fmt.Errorf("--port %d: not a UDP port", l.port)
	}
	if l.ip == "" {
		return fmt.Errorf("--link %s needs --ip", l.kind)
	}
	if l.kind == "tap" && !strings.Contains(l.ip, "/") {
		return fmt.Errorf("--link tap needs --ip ADDR/PREFIX: gorxe answers ARP and neighbour discovery for its subnet")
	}
	return nil
}

// open opens the link the flags describe. The mem link is not opened here:
// it joins two devices in one process.
func (l *linkFlags) open() (link.Link, error) {
	if err := l.validate(); err != nil {
		return nil, err
	}
	var pfx netip.Prefix
	var err error
	if strings.Contains(l.ip, "/") {
		pfx, err = netip.ParsePrefix(l.ip)
	} else {
		var a netip.Addr
		a, err = netip.ParseAddr(l.ip)
		pfx = netip.PrefixFrom(a, a.BitLen())
	}
	if err != nil {
		return nil, fmt.Errorf("--ip %s: %v", l.ip, err)
	}
	switch l.kind {
	case "udp":
		return udp.Open(udp.Config{Addr: pfx.Addr(), Port: uint16(l.port), MTU: l.mtu, NoGSO: l.noGSO})
	case "tap":
		return tap.Open(tap.Config{Name: l.tapName, Addrs: []netip.Prefix{pfx}, Bridge: l.bridge, MTU: l.mtu, Port: uint16(l.port)})
	}
	return nil, fmt.Errorf("--link %s: want mem, udp or tap", l.kind)
}

// openRemote opens the device for a test across hosts and the out-of-band
// connection: as the client when server is set, else as the server.
func openRemote(ctx context.Context, lf *linkFlags, p *perftest.Params, server string, tcpPort int, stdout io.Writer, quiet bool) (*rnic.Device, *perftest.Conn, error) {
	l, err := lf.open()
	if err != nil {
		return nil, nil, err
	}
	cfg := rnic.Config{Link: l, Port: uint16(lf.port), Window: p.Window}
	if lf.trace {
		cfg.Trace = traceTo(os.Stderr)
	}
	dev, err := rnic.Open(cfg)
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	var conn *perftest.Conn
	if server != "" {
		conn, err = perftest.Dial(ctx, net.JoinHostPort(server, strconv.Itoa(tcpPort)))
	} else {
		if !quiet {
			fmt.Fprintln(stdout, "\n************************************\n* Waiting for client to connect... *\n************************************")
		}
		conn, err = perftest.Listen(ctx, net.JoinHostPort("", strconv.Itoa(tcpPort)))
	}
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	return dev, conn, nil
}

// traceTo returns a device trace function that writes each line to w,
// stamped with the time of day to the microsecond.
func traceTo(w io.Writer) func(string) {
	var mu sync.Mutex
	return func(line string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "%s %s\n", time.Now().Format("15:04:05.000000"), line)
	}
}

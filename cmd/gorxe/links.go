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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/congestion"
	"github.com/gorxe/gorxe/internal/xdpprog"
	"github.com/gorxe/gorxe/perftest"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/trace"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/tap"
	"github.com/gorxe/gorxe/link/udp"
	"github.com/gorxe/gorxe/link/xdp"
	"github.com/gorxe/gorxe/wire"
)

// linkFlags are the flags that choose how a gorxe device reaches the
// network, shared by every command that opens one.
type linkFlags struct {
	kind    string
	ip      string
	tapName string
	bridge  string
	dev     string       // --dev: the xdp link's interface
	queues  []int        // --queue: nil for all
	xdpMode xdpprog.Mode // --xdp-mode
	port    uint
	mtu     int
	noGSO   bool
	sockBuf int // --socket-buffer: the udp link's; 0 for its default
	// also are more addresses of --ip's interface for the udp link
	// (udp.Config.Also): a server that listens on all of them, as the
	// kernel's rdma_cm on the wildcard address, is reached at any.
	also []netip.Addr

	trace bool
	// log, if set, gets the lines a link writes about what it got (the
	// xdp link: driver or generic mode, copy or zero-copy), as
	// "gorxe: ...".
	log io.Writer
	// traceJSON is --trace-json's file; events is where its JSON Lines
	// go once openTraceJSON has opened it.
	traceJSON string
	events    *jsonLines

	// --cc, --cc-profile, --cc-param and --line-rate, parsed: the
	// devices' congestion control. ccSets are --cc-param's NAME=VALUE
	// pairs in the order given, which validateCC applies over the
	// profile.
	cc        rnic.CCMode
	ccParams  congestion.Params
	ccProfile string // as given, for the error that --cc none refuses it
	ccSets    [][2]string
	lineRate  congestion.Rate
	burst     int // --pacing-burst, bytes

	busyPoll time.Duration // --busy-poll, as rnic.Config.BusyPoll
}

// setQueue takes --queue: a receive queue's number, or all.
func (l *linkFlags) setQueue(v string) error {
	if v == "all" {
		l.queues = nil
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return errors.New("want a receive queue's number (ethtool -l shows how many), or all")
	}
	l.queues = []int{n}
	return nil
}

// setXDPMode takes --xdp-mode: auto, driver or generic.
func (l *linkFlags) setXDPMode(v string) error {
	for _, m := range []xdpprog.Mode{xdpprog.ModeAuto, xdpprog.ModeDriver, xdpprog.ModeGeneric} {
		if v == m.String() {
			l.xdpMode = m
			return nil
		}
	}
	return errors.New("want auto, driver or generic")
}

// setCC takes --cc: dcqcn or none.
func (l *linkFlags) setCC(v string) error {
	m, err := rnic.ParseCCMode(v)
	if err != nil {
		return errors.New("want dcqcn (the default, as on ConnectX) or none")
	}
	l.cc = m
	return nil
}

// setCCProfile takes --cc-profile: connectx or paper.
func (l *linkFlags) setCCProfile(v string) error {
	p, err := congestion.Profile(v)
	if err != nil {
		return errors.New("want connectx (NVIDIA's firmware defaults, the default) or paper (the SIGCOMM'15 paper's)")
	}
	l.ccParams, l.ccProfile = p, v
	return nil
}

// setCCParam takes --cc-param NAME=VALUE[,NAME=VALUE...]: DCQCN
// parameters by NVIDIA's names and in its units (congestion.Params.Set),
// over the profile's whichever comes first on the command line.
func (l *linkFlags) setCCParam(v string) error {
	for _, kv := range strings.Split(v, ",") {
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("%q: want NAME=VALUE, as rpg_time_reset=300", kv)
		}
		var p congestion.Params
		if err := p.Set(name, value); err != nil {
			return err
		}
		l.ccSets = append(l.ccSets, [2]string{name, value})
	}
	return nil
}

// setLineRate takes --line-rate: a rate with its unit, 100M, 25G, or as
// congestion.ParseRate writes one (40Gb/s, 100Mbps).
func (l *linkFlags) setLineRate(v string) error {
	s := withRateUnit(v)
	bare := s == "" || strings.ContainsRune("0123456789.", rune(s[len(s)-1]))
	r, err := congestion.ParseRate(s, congestion.BitPerSecond)
	if bare || err != nil || r == 0 {
		return errors.New("want a rate with its unit, as 100M, 25G or 40Gb/s")
	}
	l.lineRate = r
	return nil
}

// withRateUnit spells out a rate's one-letter unit (100M, 25G, 10K) as
// congestion.ParseRate takes it (100Mb/s); other strings are returned as
// they are.
func withRateUnit(v string) string {
	for _, u := range []struct{ suffix, unit string }{{"K", "kb/s"}, {"k", "kb/s"}, {"M", "Mb/s"}, {"G", "Gb/s"}} {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			return n + u.unit
		}
	}
	return v
}

// setPacingBurst takes --pacing-burst: bytes, with perftest's K and M
// suffixes (4K).
func (l *linkFlags) setPacingBurst(v string) error {
	n, err := parseSize(v)
	if err != nil || n > congestion.MaxBurst {
		return fmt.Errorf("want a size in bytes from 1 to %d, as 4096 or 4K", congestion.MaxBurst)
	}
	l.burst = n
	return nil
}

// setSocketBuffer sets --socket-buffer.
func (l *linkFlags) setSocketBuffer(v string) error {
	n, err := parseSize(v)
	if err != nil || n < 4<<10 || n > 1<<30 {
		return fmt.Errorf("want a size in bytes from 4K to 1G, as 256K or 64M")
	}
	l.sockBuf = n
	return nil
}

// validateCC checks the congestion control flags together, once they are
// all parsed, and applies --cc-param's pairs over the profile (ConnectX's
// when none is given). It refuses the flags that tune DCQCN with --cc
// none, and parameters or a line rate DCQCN cannot run with.
func (l *linkFlags) validateCC() error {
	if l.cc == rnic.CCNone {
		switch {
		case l.ccProfile != "":
			return fmt.Errorf("--cc-profile %s: congestion control is off (--cc none)", l.ccProfile)
		case len(l.ccSets) > 0:
			return fmt.Errorf("--cc-param %s=%s: congestion control is off (--cc none)", l.ccSets[0][0], l.ccSets[0][1])
		case l.lineRate != 0:
			return fmt.Errorf("--line-rate %v: congestion control is off (--cc none), and nothing is paced", l.lineRate)
		case l.burst != 0:
			return fmt.Errorf("--pacing-burst %d: congestion control is off (--cc none), and nothing is paced", l.burst)
		}
		return nil
	}
	if len(l.ccSets) > 0 {
		if l.ccParams == (congestion.Params{}) {
			l.ccParams = congestion.ConnectX()
		}
		for _, kv := range l.ccSets {
			if err := l.ccParams.Set(kv[0], kv[1]); err != nil {
				return err
			}
		}
		l.ccSets = nil
	}
	if l.ccParams == (congestion.Params{}) && l.lineRate == 0 && l.burst == 0 {
		return nil
	}
	p := l.ccParams
	if p == (congestion.Params{}) {
		p = congestion.ConnectX()
	}
	rate := l.lineRate
	if rate == 0 {
		rate = rnic.DefaultLineRate
	}
	burst := cmp.Or(l.burst, rnic.DefaultPacingBurst)
	if _, err := congestion.NewReactionPoint(congestion.Config{Params: p, LineRate: rate, Burst: burst}); err != nil {
		return err
	}
	return nil
}

// openDevice opens the link the flags describe and a device on it; cfg
// gives the rest of the device's configuration (its name, its window),
// and the flags its port, congestion control, busy polling and trace. A
// device that does not open closes the link.
func (l *linkFlags) openDevice(cfg rnic.Config) (*rnic.Device, error) {
	lk, err := l.open()
	if err != nil {
		return nil, err
	}
	cfg.Link, cfg.Port = lk, uint16(l.port)
	l.applyDevice(&cfg)
	cfg.Trace = l.deviceTrace()
	dev, err := rnic.Open(cfg)
	if err != nil {
		lk.Close()
		return nil, err
	}
	return dev, nil
}

// applyDevice gives cfg what the flags ask of the device: its congestion
// control, and how long it busy polls.
func (l *linkFlags) applyDevice(cfg *rnic.Config) {
	cfg.CC, cfg.CCParams, cfg.LineRate, cfg.PacingBurst = l.cc, l.ccParams, l.lineRate, l.burst
	cfg.BusyPoll = l.busyPoll
}

// setBusyPoll takes --busy-poll: a duration, 0 or off for none.
func (l *linkFlags) setBusyPoll(v string) error {
	if v == "off" {
		v = "0"
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return errors.New("want a duration such as 200us, or 0 (or off) for none")
	}
	if d == 0 {
		d = -1 // rnic.Config's never; its 0 is the default
	}
	l.busyPoll = d
	return nil
}

// ccHelp, ccProfileHelp, ccParamHelp, burstHelp and lineRateHelp
// describe --cc, --cc-profile, --cc-param, --pacing-burst and --line-rate.
const (
	ccHelp        = "congestion control: dcqcn (DCQCN, the default, as on ConnectX: CNPs answer ECN marks, the sender paces to the rate they leave it) or none"
	ccProfileHelp = "DCQCN's parameters: connectx (NVIDIA's firmware defaults, the default) or paper (the SIGCOMM'15 paper's)"
	ccParamHelp   = "DCQCN parameters over the profile's, NAME=VALUE[,NAME=VALUE...] by NVIDIA's names and in its units (mlxconfig's: µs, Mb/s), as rpg_time_reset=300,rpg_ai_rate=5; may be repeated"
	burstHelp     = "bytes a QP that DCQCN paces below the line rate sends at a time (default: 64K, or 50us of its rate if less, at least 4K)"
	lineRateHelp  = "the port's rate, where DCQCN starts each flow and which it never exceeds: 100M, 25G, 40Gb/s (default: the link's if it knows it, else 100G)"
)

// validateKind reports a --link that names no link.
func (l *linkFlags) validateKind() error {
	switch l.kind {
	case "mem", "udp", "tap", "xdp":
		return nil
	}
	return fmt.Errorf("--link %s: want mem, udp, tap or xdp", l.kind)
}

// validate reports a combination of link flags that cannot work, a usage
// error, before anything is opened.
func (l *linkFlags) validate() error {
	switch l.kind {
	case "mem":
		return nil
	case "udp", "tap", "xdp":
	default:
		return fmt.Errorf("--link %s: want mem, udp, tap or xdp", l.kind)
	}
	if l.port == 0 || l.port > 65535 {
		return fmt.Errorf("--roce-port %d: not a UDP port", l.port)
	}
	if l.kind == "xdp" {
		switch {
		case l.dev == "":
			return fmt.Errorf("--link xdp needs --dev IFACE: the interface whose RoCE traffic gorxe takes")
		case l.ip != "":
			return fmt.Errorf("--link xdp takes its addresses from --dev %s: choose one with -x (gorxe show_gids %s), not --ip", l.dev, l.dev)
		}
		return nil
	}
	if l.ip == "" {
		return fmt.Errorf("--link %s needs --ip", l.kind)
	}
	if l.kind == "tap" && !strings.Contains(l.ip, "/") {
		return fmt.Errorf("--link tap needs --ip ADDR/PREFIX: gorxe answers ARP and neighbour discovery for its subnet")
	}
	return nil
}

// ipAddr returns --ip's address without its prefix length.
func (l *linkFlags) ipAddr() (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.SplitN(l.ip, "/", 2)[0])
	if err != nil {
		return netip.Addr{}, fmt.Errorf("--ip %s: %v", l.ip, err)
	}
	return a, nil
}

// validateEarly is validate for what can be checked before anything is
// known of the peer: everything but a udp link without --ip, whose
// address a server learns from its client and a client from the route
// to its server.
func (l *linkFlags) validateEarly() error {
	if l.kind == "udp" && l.ip == "" {
		return nil
	}
	return l.validate()
}

// open opens the link the flags describe. The mem link is not opened here:
// it joins two devices in one process.
func (l *linkFlags) open() (link.Link, error) {
	if err := l.validate(); err != nil {
		return nil, err
	}
	if l.kind == "xdp" {
		c := xdp.Config{Interface: l.dev, Queues: l.queues, Port: uint16(l.port), Mode: l.xdpMode}
		if l.log != nil {
			c.Logf = func(format string, args ...any) { fmt.Fprintf(l.log, "gorxe: "+format+"\n", args...) }
		}
		return xdp.Open(c)
	}
	var pfx netip.Prefix
	var addr netip.Addr // with its zone, which a Prefix drops
	var err error
	if strings.Contains(l.ip, "/") {
		pfx, err = netip.ParsePrefix(l.ip)
		addr = pfx.Addr()
	} else {
		addr, err = netip.ParseAddr(l.ip)
		pfx = netip.PrefixFrom(addr, addr.BitLen())
	}
	if err != nil {
		return nil, fmt.Errorf("--ip %s: %v", l.ip, err)
	}
	switch l.kind {
	case "udp":
		lk, err := udp.Open(udp.Config{Addr: addr, Also: bindable(l.also, cmp.Or(uint16(l.port), wire.UDPPort)), Port: uint16(l.port), MTU: l.mtu, NoGSO: l.noGSO, SocketBuffer: l.sockBuf})
		if errors.Is(err, syscall.EADDRINUSE) {
			// Two tools on one host, each taking its address from the
			// same route, is the usual way to get here.
			other := "--ip"
			if next := addr.Next(); addr.Is4() && addr.IsLoopback() && next.IsLoopback() {
				other = fmt.Sprintf("--ip %v: all of 127.0.0.0/8 is this host's", next)
			}
			err = fmt.Errorf("%w: another RoCE device (a gorxe, or kernel rxe on %v) has UDP port %d there; give this one another address (%s) or RoCE port (--roce-port)", err, addr, l.port, other)
		}
		return lk, err
	case "tap":
		return tap.Open(tap.Config{Name: l.tapName, Addrs: []netip.Prefix{pfx}, LinkLocal: true, Bridge: l.bridge, MTU: l.mtu, Port: uint16(l.port)})
	}
	return nil, fmt.Errorf("--link %s: want mem, udp, tap or xdp", l.kind)
}

// bindable returns the addresses of addrs that a socket can be bound to
// at port now: not an IPv6 address still in duplicate address detection,
// as an interface's link-local one is for a second or two after it comes
// up, nor one gone since its table was read, nor one where another
// program (a gorxe client on this host) has the port. A server is then
// reached at the others, as the kernel's rdma_cm is while such an
// address is unusable.
func bindable(addrs []netip.Addr, port uint16) []netip.Addr {
	var ok []netip.Addr
	for _, a := range addrs {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, port)))
		if err == nil {
			c.Close()
			ok = append(ok, a)
		}
	}
	return ok
}

// endpoint is one side of a test across hosts: its device, the
// out-of-band connection, and the GID it uses.
type endpoint struct {
	dev  *rnic.Device
	cm   *cm.Manager // -R and -z: the exchange's and QPs' connection manager
	conn *perftest.Conn
	// gidIndex is the GID's index as perftest's -x names it: in the
	// interface's table laid out as rxe's (udp link), or in the device's
	// (tap link). devGID is its index in the device's own table.
	gidIndex, devGID int
}

// openRemote opens one side of a test across hosts. The client (r.server
// set) picks its address, opens its device and connects; the server first
// waits for the client, since without --ip the address the client reached
// it on says which interface, and which of its GIDs, to use.
func openRemote(ctx context.Context, r *perfRun, name string, stdout io.Writer, quiet bool) (*endpoint, error) {
	ep := &endpoint{}
	fail := func(err error) (*endpoint, error) {
		ep.close()
		return nil, err
	}
	if r.p.CommRDMACM {
		return openRemoteCM(ctx, r, name, stdout, quiet, ep, fail)
	}
	// The device comes first, as in perftest, wherever its address is
	// known: --ip (a tap host then answers ARP and ping while its server
	// waits), or the route to the server. A server without --ip on the
	// udp link learns its address from the client's connection.
	early := r.link.kind == "tap" || r.link.kind == "xdp" || r.link.ip != ""
	if r.server != "" && !early {
		reached, err := routeSource(r.server)
		if err != nil {
			return nil, err
		}
		if err := ep.openDevice(r, name, reached); err != nil {
			return fail(err)
		}
	} else if early {
		if err := ep.openDevice(r, name, netip.Addr{}); err != nil {
			return fail(err)
		}
	}
	var err error
	if !quiet && r.testServer() {
		// perftest prints it on the test's server, which with
		// --reversed is the side that dials.
		fmt.Fprintln(stdout, "\n************************************\n* Waiting for client to connect... *\n************************************")
	}
	if r.server == "" {
		if ep.conn, err = perftest.Listen(ctx, net.JoinHostPort(r.bindIP, strconv.Itoa(r.tcpPort))); err != nil {
			return fail(err)
		}
		if ep.dev == nil {
			var reached netip.Addr
			if a, ok := ep.conn.LocalAddr().(*net.TCPAddr); ok {
				reached = a.AddrPort().Addr()
			}
			if err := ep.openDevice(r, name, reached); err != nil {
				return fail(err)
			}
		}
		return ep, nil
	}
	d := &net.Dialer{}
	if r.bindIP != "" {
		a, err := netip.ParseAddr(r.bindIP)
		if err != nil {
			return fail(fmt.Errorf("--bind_source_ip %s: %v", r.bindIP, err))
		}
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(a, 0))
	}
	if ep.conn, err = perftest.DialWith(ctx, d, net.JoinHostPort(r.server, strconv.Itoa(r.tcpPort))); err != nil {
		return fail(err)
	}
	return ep, nil
}

// close closes what openRemote opened: the out-of-band connection (with
// rdma_cm, its disconnects), the connection manager, the device.
func (ep *endpoint) close() {
	if ep.conn != nil {
		ep.conn.Close()
	}
	if ep.cm != nil {
		ep.cm.Close()
	}
	if ep.dev != nil {
		ep.dev.Close()
	}
}

// openDevice opens the link and the device. On the udp link the address
// is --ip, or else the GID -x names in the GID table of the interface that
// holds reached, or else the one perftest would choose there (reached
// itself when it is among the best).
func (ep *endpoint) openDevice(r *perfRun, name string, reached netip.Addr) error {
	lf := r.link
	if lf.kind == "udp" {
		var table []gidEntry
		var at netip.Addr // the address that names the interface
		switch {
		case lf.ip != "":
			a, err := lf.ipAddr()
			if err != nil {
				return err
			}
			at = a
		case reached.IsValid():
			at = reached.Unmap()
		default:
			return fmt.Errorf("--link udp needs --ip, or the server's name")
		}
		iface, table, err := localGIDs(at)
		if err != nil {
			return fmt.Errorf("%v: gorxe's udp link needs an address of this host", err)
		}
		if lf.ip != "" {
			ep.gidIndex = slices.IndexFunc(table, func(e gidEntry) bool { return e.GID == netip.AddrFrom16(at.As16()) })
			if r.gidIndex >= 0 && r.gidIndex != ep.gidIndex {
				return fmt.Errorf("-x %d names GID %d of %s, but --ip %s is GID %d (%s); give one of them", r.gidIndex, r.gidIndex, iface, lf.ip, ep.gidIndex, gidsHint(iface, table, ep.gidIndex))
			}
		} else {
			e, i, err := pickGID(table, r.gidIndex, r.ipv6, reached)
			if err != nil {
				return err
			}
			ep.gidIndex = i
			lf.ip = e.addr().String()
		}
	}
	var gid netip.Addr // the xdp link's GID, chosen in its interface's table
	if lf.kind == "xdp" {
		table, err := interfaceGIDs(lf.dev)
		if err != nil {
			return fmt.Errorf("--dev %s: %v", lf.dev, err)
		}
		if reached.IsValid() {
			reached = reached.Unmap()
		}
		e, i, err := pickGID(table, r.gidIndex, r.ipv6, reached)
		if err != nil {
			return err
		}
		ep.gidIndex, gid = i, e.GID.Unmap()
	}
	var err error
	if ep.dev, err = lf.openDevice(rnic.Config{Name: name, Window: r.p.Window}); err != nil {
		return err
	}
	if lf.kind == "xdp" {
		// The xdp link's device holds the interface's addresses, in
		// the order the interface lists them.
		if ep.devGID = ep.dev.GIDIndex(gid); ep.devGID < 0 {
			return fmt.Errorf("GID %d of %s (%v) is the port's default GID, but %s does not hold that address: choose another with -x (gorxe show_gids %s)", ep.gidIndex, lf.dev, gid, lf.dev, lf.dev)
		}
	}
	if lf.kind == "tap" {
		// The tap link is a host of gorxe's own: -x indexes the
		// device's table, its link-local address and --ip.
		ip, err := lf.ipAddr() // parsed already when the link opened
		if err != nil {
			return err
		}
		if ep.devGID, err = tapGID(ep.dev, r.gidIndex, r.ipv6, ip); err != nil {
			return err
		}
		ep.gidIndex = ep.devGID
	}
	return nil
}

// routeSource returns the source address the kernel's routing table picks
// for packets to server (a name or an address).
func routeSource(server string) (netip.Addr, error) {
	c, err := net.Dial("udp", net.JoinHostPort(server, strconv.Itoa(wire.UDPPort)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("finding the route to %s: %v", server, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// linesTo returns a function that writes each line it is given to w,
// stamped with the time of day to the microsecond: the connection
// manager's trace, and the device's (traceTo).
func linesTo(w io.Writer) func(string) {
	var mu sync.Mutex
	return func(line string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "%s %s\n", time.Now().Format("15:04:05.000000"), line)
	}
}

// traceTo returns a device trace function that writes each event to w as
// a line of linesTo's: "gorxe0 qp 0x11: go back to PSN 12: NAK".
func traceTo(w io.Writer) func(trace.Event) {
	line := linesTo(w)
	return func(ev trace.Event) {
		gsi := ""
		if ev.QP == uint32(rnic.GSIQPN) {
			gsi = " (GSI)"
		}
		line(fmt.Sprintf("%s qp %#x%s: %v", ev.Device, ev.QP, gsi, ev))
	}
}

// jsonLines writes device events to a file as JSON Lines, with one write
// an event, so that the file holds every event reported before a crash.
type jsonLines struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
	err error // the first write's
}

func (j *jsonLines) write(ev trace.Event) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.buf = append(ev.AppendJSON(j.buf[:0]), '\n')
	if j.err == nil {
		_, j.err = j.w.Write(j.buf)
	}
}

// openTraceJSON creates --trace-json's file, if the flag was given, for
// the devices the command opens next (deviceTrace). It returns the
// function that closes it, to call once they are closed, which reports
// the first error writing it on stderr, as the command name.
func (l *linkFlags) openTraceJSON(name string, stderr io.Writer) (func(), error) {
	if l.traceJSON == "" {
		return func() {}, nil
	}
	f, err := os.Create(l.traceJSON)
	if err != nil {
		return nil, fmt.Errorf("--trace-json: %v", err)
	}
	j := &jsonLines{w: f}
	l.events = j
	return func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		if err := cmp.Or(j.err, f.Close()); err != nil {
			fmt.Fprintf(stderr, "%s: --trace-json: %v\n", name, err)
		}
	}, nil
}

// deviceTrace returns the Trace function of a device the flags open:
// --trace's lines on stderr, --trace-json's records in its file, both, or
// nil for neither.
func (l *linkFlags) deviceTrace() func(trace.Event) {
	j := l.events
	switch {
	case l.trace && j != nil:
		text := traceTo(os.Stderr)
		return func(ev trace.Event) { text(ev); j.write(ev) }
	case l.trace:
		return traceTo(os.Stderr)
	case j != nil:
		return j.write
	}
	return nil
}

package qperf

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// par is one of qperf's test parameters (PAR_INDEX without its local and
// remote halves): each has a value for this side and one for the server,
// which the request carries.
type par int

const (
	parAccessRecv par = iota
	parAffinity
	parAltPort
	parFlip
	parID
	parMsgSize
	parMTUSize
	parNoMsgs
	parPollMode
	parPort
	parRdAtomic
	parSL
	parSockBufSize
	parSrcPathBits
	parStaticRate
	parTime
	parTimeout
	parUseCM
	nPar
)

// parNames are the names -vu shows the parameters by (ParName), in its
// order; kinds their types: 'l' a number, 'p' a string, 's' a size, 't'
// a time.
var parNames = [nPar]struct {
	name string
	kind byte
}{
	{"access_recv", 'l'}, {"affinity", 'l'}, {"alt_port", 'l'}, {"flip", 'l'}, {"id", 'p'},
	{"msg_size", 's'}, {"mtu_size", 's'}, {"no_msgs", 'l'}, {"poll_mode", 'l'}, {"port", 'l'},
	{"rd_atomic", 'l'}, {"service_level", 'l'}, {"sock_buf_size", 's'}, {"src_path_bits", 's'},
	{"static_rate", 'p'}, {"time", 't'}, {"timeout", 't'}, {"use_cm", 'l'},
}

// parValue is one half of a parameter: its value, and who set it.
type parValue struct {
	n     uint32
	s     string
	setBy string // the option that set it, "" for a default
	used  bool   // a test read it
	inuse bool   // the current test reads it
}

// params are a client's parameters: each one's local and remote halves.
type params struct {
	loc, rem [nPar]parValue
}

func (p *params) half(local bool) *[nPar]parValue {
	if local {
		return &p.loc
	}
	return &p.rem
}

// setDefault gives both halves of k the value v unless an option set them
// (setp_u32 with no name), and marks them in use.
func (p *params) setDefault(k par, v uint32) {
	p.setDefaultHalf(true, k, v)
	p.setDefaultHalf(false, k, v)
}

// setDefaultHalf is setDefault for one half.
func (p *params) setDefaultHalf(local bool, k par, v uint32) {
	h := &p.half(local)[k]
	h.used, h.inuse = true, true
	if h.setBy == "" {
		h.n = v
	}
}

// use marks k as read by the test (par_use).
func (p *params) use(k par) {
	p.loc[k].used, p.loc[k].inuse = true, true
	p.rem[k].used, p.rem[k].inuse = true, true
}

// force sets k without it counting as set by anyone (setv_u32).
func (p *params) force(k par, v uint32) {
	p.loc[k].n, p.rem[k].n = v, v
}

// check warns of each parameter set but read by no test so far, once
// (opt_check).
func (p *params) check(w io.Writer, test string) {
	warned := map[string]bool{}
	for _, h := range []*[nPar]parValue{&p.loc, &p.rem} {
		for k := range h {
			v := &h[k]
			if v.used || v.setBy == "" || warned[v.setBy] {
				continue
			}
			warned[v.setBy] = true
			fmt.Fprintf(w, "warning: %s set but not used in test %s\n", v.setBy, test)
		}
	}
	for _, h := range []*[nPar]parValue{&p.loc, &p.rem} {
		for k := range h {
			if warned[h[k].setBy] && !h[k].used {
				h[k].setBy = "" // warned once
			}
		}
	}
}

// request builds the request the server gets: the remote halves.
func (p *params) request(index int) Request {
	r := &p.rem
	return Request{VerMaj: VerMajor, VerMin: VerMinor, VerInc: VerInc, Index: uint16(index),
		AccessRecv: r[parAccessRecv].n, Affinity: r[parAffinity].n, AltPort: r[parAltPort].n, Flip: r[parFlip].n,
		MsgSize: r[parMsgSize].n, MTUSize: r[parMTUSize].n, NoMsgs: r[parNoMsgs].n, PollMode: r[parPollMode].n,
		Port: r[parPort].n, RdAtomic: r[parRdAtomic].n, SL: r[parSL].n, SockBufSize: r[parSockBufSize].n,
		SrcPathBits: r[parSrcPathBits].n, Time: r[parTime].n, Timeout: r[parTimeout].n, UseCM: r[parUseCM].n,
		ID: r[parID].s, StaticRate: r[parStaticRate].s}
}

// local returns the local halves as a request, which this side's test
// reads as a server reads the one it got.
func (p *params) local(index int) Request {
	q := params{rem: p.loc}
	return q.request(index)
}

// An option's kind, qperf's OPTION type.
const (
	optInt = iota
	optSet1
	optSize
	optSL
	optStr
	optTime
	optDebug
	optHelp
	optHost
	optLoop
	optListenPort
	optPrecision
	optBits
	optUnifyNodes
	optUnifyUnits
	optVerbose
	optVersion
	optWait
)

// option is a row of qperf's option table: the parameter it sets, on
// which sides, or what else it does; server marks the options a server
// takes (the rest make qperf a client); verbose is which -v it is.
type option struct {
	name     string
	kind     int
	p        par
	loc, rem bool
	server   bool
	verbose  string
}

// options is qperf's option table.
var options = func() map[string]option {
	m := map[string]option{}
	both := func(k int, p par, names ...string) {
		for _, n := range names {
			m[n] = option{name: n, kind: k, p: p, loc: true, rem: true}
		}
	}
	loc := func(k int, p par, names ...string) {
		for _, n := range names {
			m[n] = option{name: n, kind: k, p: p, loc: true}
		}
	}
	rem := func(k int, p par, names ...string) {
		for _, n := range names {
			m[n] = option{name: n, kind: k, p: p, rem: true}
		}
	}
	other := func(k int, server bool, names ...string) {
		for _, n := range names {
			m[n] = option{name: n, kind: k, server: server}
		}
	}
	both(optInt, parAccessRecv, "--access_recv", "-ar")
	both(optSet1, parAccessRecv, "-ar1")
	both(optInt, parAltPort, "--alt_port", "-ap")
	loc(optInt, parAltPort, "--loc_alt_port", "-lap")
	rem(optInt, parAltPort, "--rem_alt_port", "-rap")
	both(optInt, parAffinity, "--cpu_affinity", "-ca")
	loc(optInt, parAffinity, "--loc_cpu_affinity", "-lca")
	rem(optInt, parAffinity, "--rem_cpu_affinity", "-rca")
	other(optDebug, true, "--debug", "-D")
	both(optInt, parFlip, "--flip", "-f")
	both(optSet1, parFlip, "-f1")
	other(optHelp, false, "--help", "-h")
	other(optHost, false, "--host", "-H")
	both(optStr, parID, "--id", "-i")
	loc(optStr, parID, "--loc_id", "-li")
	rem(optStr, parID, "--rem_id", "-ri")
	other(optListenPort, true, "--listen_port", "-lp")
	other(optLoop, false, "--loop", "-oo")
	both(optSize, parMsgSize, "--msg_size", "-m")
	both(optSize, parMTUSize, "--mtu_size", "-mt")
	both(optInt, parNoMsgs, "--no_msgs", "-n")
	both(optInt, parPollMode, "--cq_poll", "-cp")
	both(optSet1, parPollMode, "-cp1")
	loc(optInt, parPollMode, "--loc_cq_poll", "-lcp")
	loc(optSet1, parPollMode, "-lcp1")
	rem(optInt, parPollMode, "--rem_cq_poll", "-rcp")
	rem(optSet1, parPollMode, "-rcp1")
	both(optInt, parPort, "--ip_port", "-ip")
	other(optPrecision, false, "--precision", "-e")
	both(optInt, parRdAtomic, "--rd_atomic", "-nr")
	loc(optInt, parRdAtomic, "--loc_rd_atomic", "-lnr")
	rem(optInt, parRdAtomic, "--rem_rd_atomic", "-rnr")
	both(optSL, parSL, "--service_level", "-sl")
	loc(optSL, parSL, "--loc_service_level", "-lsl")
	rem(optSL, parSL, "--rem_service_level", "-rsl")
	both(optSize, parSockBufSize, "--sock_buf_size", "-sb")
	loc(optSize, parSockBufSize, "--loc_sock_buf_size", "-lsb")
	rem(optSize, parSockBufSize, "--rem_sock_buf_size", "-rsb")
	both(optSize, parSrcPathBits, "--src_path_bits", "-sp")
	loc(optSize, parSrcPathBits, "--loc_src_path_bits", "-lsp")
	rem(optSize, parSrcPathBits, "--rem_src_path_bits", "-rsp")
	both(optStr, parStaticRate, "--static_rate", "-sr")
	loc(optStr, parStaticRate, "--loc_static_rate", "-lsr")
	rem(optStr, parStaticRate, "--rem_static_rate", "-rsr")
	both(optTime, parTime, "--time", "-t")
	both(optTime, parTimeout, "--timeout", "-to")
	for _, n := range []string{"--loc_timeout", "-lto"} {
		m[n] = option{name: n, kind: optTime, p: parTimeout, loc: true, server: true}
	}
	rem(optTime, parTimeout, "--rem_timeout", "-rto")
	other(optUnifyNodes, false, "--unify_nodes", "-un")
	other(optUnifyUnits, false, "--unify_units", "-uu")
	other(optBits, false, "--use_bits_per_sec", "-ub")
	both(optInt, parUseCM, "--use_cm", "-cm")
	both(optSet1, parUseCM, "-cm1")
	for n, v := range map[string]string{
		"--verbose": "v", "-v": "v", "--verbose_conf": "vc", "-vc": "vc", "--verbose_stat": "vs", "-vs": "vs",
		"--verbose_time": "vt", "-vt": "vt", "--verbose_used": "vu", "-vu": "vu", "--verbose_more": "vv", "-vv": "vv",
		"--verbose_more_conf": "vvc", "-vvc": "vvc", "--verbose_more_stat": "vvs", "-vvs": "vvs",
		"--verbose_more_time": "vvt", "-vvt": "vvt", "--verbose_more_used": "vvu", "-vvu": "vvu",
	} {
		m[n] = option{name: n, kind: optVerbose, verbose: v}
	}
	other(optVersion, false, "--version", "-V")
	other(optWait, false, "--wait_server", "-ws")
	return m
}()

// renamed are qperf's obsolete option names and their new ones; qperf
// takes them with a warning.
var renamed = map[string]string{
	"--affinity": "--cpu_affinity", "-a": "-ca", "--loc_affinity": "--loc_cpu_affinity", "-la": "-lca",
	"--rem_affinity": "--rem_cpu_affinity", "-ra": "-rca", "--rate": "--static_rate", "-r": "-sr",
	"--loc_rate": "--loc_static_rate", "-lr": "-lsr", "--rem_rate": "--rem_static_rate", "-rr": "-rsr",
	"--port": "--ip_port", "-p": "-ip", "--poll": "--cq_poll", "-P": "-cp", "--loc_poll": "--loc_cq_poll",
	"-lP": "-lcp", "--rem_poll": "--rem_cq_poll", "-rP": "-rcp", "-R": "-nr", "-lR": "-lnr", "-rR": "-rnr",
	"-T": "-to", "-lT": "-lto", "-rT": "-rto", "-S": "-sb", "-lS": "-lsb", "-rS": "-rsb",
	"--wait": "--wait_server", "-W": "-ws", "-vC": "-vvc", "-vS": "-vvs", "-vT": "-vvt", "-vU": "-vvu",
	"-aro": "-ar1", "-cmo": "-cm1", "-fo": "-f1", "-cpo": "-cp1", "-lcpo": "-lcp1", "-rcpo": "-rcp1",
	"-Ar": "-ar", "-M": "-mt", "-u": "-uu",
}

// Verbosity is how much of the results the client shows: each of -v's
// four kinds at level 0, 1 (-vc...) or 2 (-vvc...).
type Verbosity struct {
	Conf, Stat, Time, Used int
}

func (v *Verbosity) set(which string) {
	lvl := 1
	if strings.HasPrefix(which, "vv") {
		lvl, which = 2, which[2:]
	} else {
		which = which[1:]
	}
	raise := func(p *int) { *p = max(*p, lvl) }
	set := func(p *int) { *p = lvl }
	switch which {
	case "":
		if lvl == 1 {
			raise(&v.Conf)
			raise(&v.Stat)
			raise(&v.Time)
			raise(&v.Used)
		} else {
			set(&v.Conf)
			set(&v.Stat)
			set(&v.Time)
			set(&v.Used)
		}
	case "c":
		set(&v.Conf)
	case "s":
		set(&v.Stat)
	case "t":
		set(&v.Time)
	case "u":
		set(&v.Used)
	}
}

// loop is one -oo: a parameter stepped from init to last.
type loop struct {
	opt         option
	init, last  int64
	incr        int64
	mult        bool
	description string
}

// Command is a qperf command line, parsed.
type Command struct {
	Server        bool     // no client option and no host: the server
	Host          string   // the server (a client)
	Tests         []string // the tests, in order
	ListenPort    int      // -lp
	Precision     int      // -e: significant digits
	Bits          bool     // -ub
	UnifyNodes    bool     // -un
	UnifyUnits    bool     // -uu
	Verbose       Verbosity
	Debug         bool // -D
	WaitServer    int  // -ws: seconds to keep trying to reach the server
	Help          string
	HelpWanted    bool
	Version       bool
	ServerTimeout uint32 // a server's -lto/-to
	Warnings      []string
	p             params
	loops         []loop
	steps         []step
}

// ErrUsage marks a command line qperf would refuse.
var ErrUsage = errors.New("qperf: bad command line")

// step is one argument of a client's command line, in order: an option
// to apply, or a test to run. qperf runs each test as its parser meets
// it, with the options before it: in "HOST rc_bw -m 4K rc_lat" only rc_lat
// sends 4 KB messages.
type step struct {
	apply func(*Command) error
	test  string
}

func newCommand() *Command { return &Command{ListenPort: DefaultPort, Precision: 3, WaitServer: 5} }

// Parse parses a qperf command line: options, the server's name, then
// tests, in any order, as qperf's do_args takes them. It checks every
// argument before any test runs, where qperf stops at a bad one after
// running the tests before it.
func Parse(args []string) (*Command, error) {
	c := newCommand()
	client := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			client = true
			if c.Host == "" {
				host := a
				c.Host = host
				c.steps = append(c.steps, step{apply: func(c *Command) error { c.Host = host; return nil }})
				continue
			}
			if testIndex(a) < 0 {
				return nil, fmt.Errorf("%w: %s: bad test; try: qperf --help tests", ErrUsage, a)
			}
			c.Tests = append(c.Tests, a)
			c.steps = append(c.steps, step{test: a})
			continue
		}
		name := a
		if n, ok := renamed[a]; ok {
			c.Warnings = append(c.Warnings, fmt.Sprintf("warning: obsolete option: %s; use %s instead", a, n))
			name = n
		}
		o, ok := options[name]
		if !ok {
			return nil, fmt.Errorf("%w: %s: bad option; try: qperf --help options", ErrUsage, a)
		}
		if !o.server {
			client = true
		}
		value := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("%w: missing argument to %s", ErrUsage, a)
			}
			i++
			return args[i], nil
		}
		var apply func(c *Command) error
		switch o.kind {
		case optHelp:
			c.HelpWanted, c.Help = true, "main"
			if i+1 < len(args) {
				c.Help = args[i+1]
			}
			return c, nil
		case optVersion:
			c.Version = true
			return c, nil
		case optDebug:
			apply = func(c *Command) error { c.Debug = true; return nil }
		case optHost:
			v, err := value()
			if err != nil {
				return nil, err
			}
			apply = func(c *Command) error { c.Host = v; return nil }
		case optLoop:
			v, err := value()
			if err != nil {
				return nil, err
			}
			l, err := parseLoop(a, v)
			if err != nil {
				return nil, err
			}
			apply = func(c *Command) error { c.loops = append(c.loops, l); return nil }
		case optListenPort, optPrecision, optWait:
			v, err := value()
			if err != nil {
				return nil, err
			}
			var n int64
			if o.kind == optWait {
				n, err = parseTime(a, v)
			} else {
				n, err = parseLong(a, v)
			}
			if err != nil {
				return nil, err
			}
			switch o.kind {
			case optListenPort:
				if n == 0 || n > 65535 {
					return nil, fmt.Errorf("%w: %s %d: not a TCP port", ErrUsage, a, n)
				}
				apply = func(c *Command) error { c.ListenPort = int(n); return nil }
			case optPrecision:
				apply = func(c *Command) error { c.Precision = int(min(n, 20)); return nil }
			case optWait:
				apply = func(c *Command) error { c.WaitServer = int(n); return nil }
			}
		case optBits:
			apply = func(c *Command) error { c.Bits = true; return nil }
		case optUnifyNodes:
			apply = func(c *Command) error { c.UnifyNodes = true; return nil }
		case optUnifyUnits:
			apply = func(c *Command) error { c.UnifyUnits = true; return nil }
		case optVerbose:
			apply = func(c *Command) error { c.Verbose.set(o.verbose); return nil }
		default:
			v := "1"
			if o.kind != optSet1 {
				var err error
				if v, err = value(); err != nil {
					return nil, err
				}
			}
			apply = func(c *Command) error { return c.setParam(o, v) }
		}
		if err := apply(c); err != nil {
			return nil, err
		}
		c.steps = append(c.steps, step{apply: apply})
	}
	switch {
	case !client:
		c.Server = true
	case len(c.Tests) == 0 && c.Host == "":
		return nil, fmt.Errorf("%w: you used a client-only option but did not specify the server name.\nDo you want to be a client or server?", ErrUsage)
	case len(c.Tests) == 0 && testIndex(c.Host) >= 0:
		return nil, fmt.Errorf("%w: must specify host name first; try: qperf --help", ErrUsage)
	case len(c.Tests) == 0:
		return nil, fmt.Errorf("%w: must specify a test type; try: qperf --help", ErrUsage)
	}
	if c.Server {
		c.ServerTimeout = c.p.loc[parTimeout].n
	}
	return c, nil
}

// setParam sets o's parameter to the value v, as its kind reads it.
func (c *Command) setParam(o option, v string) error {
	var n int64
	var err error
	switch o.kind {
	case optInt, optSet1:
		n, err = parseLong(o.name, v)
	case optSL:
		if n, err = parseLong(o.name, v); err == nil && n > 15 {
			err = fmt.Errorf("%w: service level must be between 0 and 15: %d given", ErrUsage, n)
		}
	case optSize:
		n, err = parseSize(o.name, v)
	case optTime:
		n, err = parseTime(o.name, v)
	case optStr:
		if len(v) >= strLen {
			return fmt.Errorf("%w: %s: too long", ErrUsage, v)
		}
	}
	if err != nil {
		return err
	}
	if n > math.MaxUint32 {
		return fmt.Errorf("%w: %s %s: too large", ErrUsage, o.name, v)
	}
	for _, h := range []struct {
		on   bool
		half *[nPar]parValue
	}{{o.loc, &c.p.loc}, {o.rem, &c.p.rem}} {
		if h.on {
			h.half[o.p].n, h.half[o.p].s, h.half[o.p].setBy = uint32(n), v, o.name
		}
	}
	return nil
}

func parseLong(opt, v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: bad argument: %s", ErrUsage, v)
	}
	if n < 0 {
		return 0, fmt.Errorf("%w: %s requires a non-negative number", ErrUsage, opt)
	}
	return n, nil
}

// parseSize reads a size as qperf's str_size does: a number, then kb, mb,
// gb (or k, m, g) for powers of 1000, kib, mib, gib (or K, M, G) for
// powers of 1024.
func parseSize(opt, v string) (int64, error) {
	num, unit := splitNumber(v)
	d, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: bad size: %s", ErrUsage, opt, v)
	}
	mult := map[string]float64{"": 1, "kb": 1e3, "k": 1e3, "mb": 1e6, "m": 1e6, "gb": 1e9, "g": 1e9,
		"kib": 1 << 10, "K": 1 << 10, "mib": 1 << 20, "M": 1 << 20, "gib": 1 << 30, "G": 1 << 30}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("%w: %s: bad size: %s", ErrUsage, opt, v)
	}
	if d < 0 {
		return 0, fmt.Errorf("%w: %s requires a non-negative number", ErrUsage, opt)
	}
	return int64(d * mult), nil
}

// parseTime reads a time as qperf's arg_time does: seconds, or a number
// and one of s, m, h, d.
func parseTime(opt, v string) (int64, error) {
	num, unit := splitNumber(v)
	d, err := strconv.ParseFloat(num, 64)
	if err != nil || len(unit) > 1 {
		return 0, fmt.Errorf("%w: bad argument: %s", ErrUsage, v)
	}
	if d < 0 {
		return 0, fmt.Errorf("%w: %s requires a non-negative number", ErrUsage, opt)
	}
	switch strings.ToLower(unit) {
	case "", "s":
	case "m":
		d *= 60
	case "h":
		d *= 3600
	case "d":
		d *= 86400
	default:
		return 0, fmt.Errorf("%w: bad argument: %s", ErrUsage, v)
	}
	return int64(d), nil
}

// splitNumber splits v into its leading number and the rest.
func splitNumber(v string) (string, string) {
	i := 0
	for i < len(v) && (v[i] >= '0' && v[i] <= '9' || v[i] == '.' || v[i] == '-' || v[i] == '+') {
		i++
	}
	return v[:i], v[i:]
}

// parseLoop reads -oo's NAME:INIT:LAST:INCR (INCR with a * multiplies);
// the name defaults to msg_size, INIT to 0 (1 multiplying).
func parseLoop(opt, v string) (loop, error) {
	parts := strings.SplitN(v, ":", 4)
	for len(parts) < 4 {
		parts = append(parts, "")
	}
	name := parts[0]
	if name == "" {
		name = "msg_size"
	}
	o, ok := options["--"+name]
	if !ok {
		o, ok = options["-"+name]
	}
	if !ok || o.kind != optInt && o.kind != optSize && o.kind != optTime && o.kind != optSL {
		return loop{}, fmt.Errorf("%w: %s: %s: no such variable", ErrUsage, opt, name)
	}
	l := loop{opt: o, description: v}
	if incr := parts[3]; incr != "" {
		if strings.HasPrefix(incr, "*") {
			l.mult, incr = true, incr[1:]
		}
		n, err := parseSize(opt, incr)
		if err != nil {
			return loop{}, err
		}
		if n < 1 {
			return loop{}, fmt.Errorf("%w: %s: %s: increment must be positive", ErrUsage, opt, parts[3])
		}
		l.incr = n
	}
	if l.incr == 0 || l.mult && l.incr < 2 {
		return loop{}, fmt.Errorf("%w: %s: %s: increment must be positive (and above 1 when it multiplies)", ErrUsage, opt, parts[3])
	}
	l.init = 0
	if l.mult {
		l.init = 1
	}
	if parts[1] != "" {
		n, err := parseSize(opt, parts[1])
		if err != nil {
			return loop{}, err
		}
		l.init = n
	}
	if parts[2] == "" {
		return loop{}, fmt.Errorf("%w: %s: must specify limit", ErrUsage, opt)
	}
	n, err := parseSize(opt, parts[2])
	if err != nil {
		return loop{}, err
	}
	l.last = n
	if l.mult && l.init < 1 {
		return loop{}, fmt.Errorf("%w: %s: a multiplying loop must start above 0", ErrUsage, opt)
	}
	return l, nil
}

// runs calls fn for each combination of the loops' values, setting each
// loop's parameter first, as qperf's do_loop; with no loops, once.
func (c *Command) runs(fn func() error) error {
	var step func(i int) error
	step = func(i int) error {
		if i == len(c.loops) {
			return fn()
		}
		l := c.loops[i]
		for v := l.init; v <= l.last; {
			if err := c.setParam(l.opt, strconv.FormatInt(v, 10)); err != nil {
				return err
			}
			if err := step(i + 1); err != nil {
				return err
			}
			if l.mult {
				v *= l.incr
			} else {
				v += l.incr
			}
		}
		return nil
	}
	return step(0)
}

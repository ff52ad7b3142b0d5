package qperf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Env is what a qperf run needs of the program around it.
type Env struct {
	Open   Opener    // opens a device on a local address
	Stdout io.Writer // the figures, warnings, and this side's errors
	Stderr io.Writer // the peer's errors, and -D's lines
	// Listening, if set, learns the server's TCP address once it
	// listens (for a -lp of 0, the port the kernel chose).
	Listening func(net.Addr)
}

// Client runs c's tests against its server one after the other, as
// qperf's client does: each test's name, then its figures. It stops at
// the first test that fails, with its error (printed already).
func Client(ctx context.Context, c *Command, env Env) error {
	for _, w := range c.Warnings {
		fmt.Fprintln(env.Stdout, w)
	}
	devs := newDevices(env.Open)
	defer devs.close()
	env.Open = devs.get
	// The options, applied in order, and each test run as it comes, with
	// those before it.
	r := newCommand()
	for _, st := range c.steps {
		if st.test == "" {
			if err := st.apply(r); err != nil {
				return err
			}
			continue
		}
		if err := r.runs(func() error { return r.runTest(ctx, st.test, env) }); err != nil {
			return err
		}
	}
	return nil
}

// runTest runs one test as qperf's client does, printing its figures.
func (c *Command) runTest(ctx context.Context, test string, env Env) error {
	p := &c.p
	for k := range nPar {
		p.loc[k].inuse, p.rem[k].inuse = false, false
	}
	if p.loc[parNoMsgs].setBy == "" {
		p.setDefaultHalf(true, parTime, 2)
	}
	if p.rem[parNoMsgs].setBy == "" {
		p.setDefaultHalf(false, parTime, 2)
	}
	p.setDefault(parTimeout, 5)
	p.use(parAffinity)
	p.use(parTime)
	fmt.Fprintf(env.Stdout, "%s:\n", test)
	sh := &shower{c: c}
	err := c.clientTest(ctx, test, env, sh)
	sh.flush(env.Stdout)
	if err != nil {
		var pe *PeerError
		if errors.As(err, &pe) {
			fmt.Fprintln(env.Stderr, err)
		} else {
			fmt.Fprintln(env.Stdout, err)
		}
	}
	return err
}

func (c *Command) clientTest(ctx context.Context, test string, env Env, sh *shower) error {
	p := &c.p
	index := testIndex(test)
	switch test {
	case "conf":
		ct, err := c.dial(ctx, p.request(index))
		if err != nil {
			return err
		}
		defer ct.close()
		b, err := ct.recv(confLen, "configuration")
		if err != nil {
			return err
		}
		r, err := ParseConf(b)
		if err != nil {
			return err
		}
		l := localConf()
		for _, v := range []struct{ name, v string }{{"loc_node", l.Node}, {"loc_cpu", l.CPU}, {"loc_os", l.OS}, {"loc_qperf", l.Qperf},
			{"rem_node", r.Node}, {"rem_cpu", r.CPU}, {"rem_os", r.OS}, {"rem_qperf", r.Qperf}} {
			sh.str('a', v.name, v.v)
		}
		return nil
	case "quit":
		p.check(env.Stdout, test)
		ct, err := c.dial(ctx, p.request(index))
		if err != nil {
			return err
		}
		defer ct.close()
		return ct.sync(syncBefore)
	}
	var body func(context.Context, *side) error
	var m measure
	if st, ok := socketTests[test]; ok {
		// ip_parameters
		p.setDefault(parMsgSize, st.msgSize)
		p.use(parPort)
		p.use(parSockBufSize)
		if st.accessRecv {
			p.use(parAccessRecv)
		}
		body, m = st.run, st.measure
	} else {
		t, ok := rdmaTests[test]
		if !ok {
			return fmt.Errorf("%s: %s", test, notRun)
		}
		// rd_params
		p.use(parUseCM)
		if p.loc[parUseCM].n == 0 {
			return errNeedCM
		}
		if t.msgSize != 0 {
			p.setDefault(parMsgSize, t.msgSize)
		}
		if t.poll {
			p.use(parPollMode)
		}
		if t.atomic {
			p.use(parRdAtomic)
		}
		for _, k := range t.uses {
			p.use(k)
		}
		body, m = t.client, t.measure
	}
	p.check(env.Stdout, test)
	if p.loc[parTime].n == 0 && !p.loc[parNoMsgs].used {
		return fmt.Errorf("%s counts no messages (-n is rc_bw's): it would never end; give it a time (-t)", test)
	}
	ct, err := c.dial(ctx, p.request(index))
	if err != nil {
		return err
	}
	defer ct.close()
	s := &side{client: true, test: test, req: p.local(index), ctl: ct, open: env.Open, debugf: c.debugf(env), stat: newStat()}
	rstat, err := s.run(ctx, body)
	if err != nil {
		return err
	}
	sh.report(m, &s.stat, &rstat, p)
	return nil
}

// notRun says which of qperf's tests gorxe runs.
const notRun = "gorxe's qperf runs the RC tests (rc_*, ver_rc_*), tcp_bw, tcp_lat, udp_bw, udp_lat, conf and quit; not this one"

func (c *Command) debugf(env Env) func(string, ...any) {
	return func(format string, args ...any) {
		if c.Debug {
			fmt.Fprintf(env.Stderr, format+"\n", args...)
		}
	}
}

// dial connects to the server, trying again each second for -ws seconds
// (5), and sends the request.
func (c *Command) dial(ctx context.Context, req Request) (*ctl, error) {
	addr := net.JoinHostPort(c.Host, fmt.Sprint(c.ListenPort))
	deadline := time.Now().Add(time.Duration(c.WaitServer) * time.Second)
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			ct := newCtl(conn.(*net.TCPConn), req.Timeout, "server")
			if err := ct.send(req.Marshal(), "request data"); err != nil {
				ct.close()
				return nil, err
			}
			return ct, nil
		}
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) {
			return nil, fmt.Errorf("getaddrinfo failed: %s", dnsErr.Err)
		}
		if c.WaitServer == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("%s: failed to connect", c.Host)
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
}

// Server answers qperf clients one at a time, as qperf's server does,
// until ctx ends or a client runs the quit test. It prints nothing but
// the errors of the tests it runs (and with -D what it does).
func Server(ctx context.Context, c *Command, env Env) error {
	var lc net.ListenConfig // Go sets SO_REUSEADDR, as qperf does
	ln, err := lc.Listen(ctx, "tcp", fmt.Sprintf(":%d", c.ListenPort))
	if err != nil {
		return fmt.Errorf("unable to bind to listen port: %w", err)
	}
	defer ln.Close()
	if env.Listening != nil {
		env.Listening(ln.Addr())
	}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	devs := newDevices(env.Open)
	defer devs.close()
	env.Open = devs.get
	debugf := c.debugf(env)
	for {
		debugf("ready for requests")
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept failed: %w", err)
		}
		quit, err := serve(ctx, conn.(*net.TCPConn), c, env)
		if err != nil {
			var pe *PeerError
			if !errors.As(err, &pe) || c.Debug {
				fmt.Fprintln(env.Stdout, err)
			}
		}
		if quit {
			return nil
		}
	}
}

// serve runs one request; quit is true for the quit test.
func serve(ctx context.Context, conn *net.TCPConn, c *Command, env Env) (quit bool, err error) {
	timeout := c.ServerTimeout
	if timeout == 0 {
		timeout = 5
	}
	ct := newCtl(conn, timeout, "client")
	defer ct.close()
	var req Request
	b, err := ct.recv(verLen, "request version")
	if err != nil {
		return false, err
	}
	if err := parseVersion(b, &req); err != nil {
		ct.sendError(err)
		return false, err
	}
	if b, err = ct.recv(reqLen-verLen, "request data"); err != nil {
		return false, err
	}
	parseData(b, &req)
	if c.ServerTimeout != 0 {
		req.Timeout = c.ServerTimeout
	}
	ct.timeout = time.Duration(max(req.Timeout, 1)) * time.Second
	if int(req.Index) >= len(Tests) {
		err := fmt.Errorf("bad request index: %d", req.Index)
		ct.sendError(err)
		return false, err
	}
	test := Tests[req.Index]
	c.debugf(env)("received request: %s", test)
	switch test {
	case "conf":
		conf := localConf()
		return false, ct.send(conf.Marshal(), "configuration")
	case "quit":
		if err := ct.sync(syncBefore); err != nil {
			return false, err
		}
		var one [1]byte
		ct.c.SetReadDeadline(time.Now().Add(ct.timeout))
		ct.c.Read(one[:])
		return true, nil
	}
	var body func(context.Context, *side) error
	if st, ok := socketTests[test]; ok {
		body = st.run
	} else if t, ok := rdmaTests[test]; ok {
		body = t.server
	} else {
		err := fmt.Errorf("%s: %s", test, notRun)
		ct.sendError(err)
		return false, err
	}
	s := &side{test: test, req: req, ctl: ct, open: env.Open, debugf: c.debugf(env), stat: newStat()}
	_, err = s.run(ctx, body)
	return false, err
}

// localConf is this host's answer to the conf test.
func localConf() Conf {
	var u unix.Utsname
	unix.Uname(&u)
	str := unix.ByteSliceToString
	return Conf{Node: str(u.Nodename[:]), CPU: cpuName(), OS: str(u.Sysname[:]) + " " + str(u.Release[:]),
		Qperf: fmt.Sprintf("%d.%d.%d", VerMajor, VerMinor, VerInc)}
}

// cpuName describes the host's CPUs as qperf's get_cpu does: "N Cores: "
// and the model name without (R), (TM), "CPU " and "Processor ", and its
// speed unless the name ends with one.
func cpuName() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	var model, mhz string
	cpus, mixed := 0, false
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "model name":
			cpus++
			if model == "" {
				model = v
			} else if v != model {
				mixed = true
			}
		case "cpu MHz":
			if mhz == "" {
				mhz = v
			} else if v != mhz {
				mixed = true
			}
		}
	}
	if mixed {
		model = "Mixed CPUs"
	} else {
		for _, junk := range []string{"(R)", "(r)", "(TM)", "(tm)", "CPU ", "cpu ", "Processor ", "processor "} {
			model = strings.ReplaceAll(model, junk, "")
		}
		model = strings.Join(strings.Fields(model), " ")
		if !strings.HasSuffix(model, "Hz") && mhz != "" {
			var f float64
			fmt.Sscan(mhz, &f)
			if f < 1000 {
				model += fmt.Sprintf(" %dMHz", int(f))
			} else {
				model += fmt.Sprintf(" %.1fGHz", float64(int(f))/1000)
			}
		}
	}
	if cpus > 1 {
		return fmt.Sprintf("%d Cores: %s", cpus, model)
	}
	return model
}

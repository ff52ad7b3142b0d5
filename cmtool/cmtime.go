package cmtool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/internal/tcpdial"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
	"github.com/gorxe/gorxe/wire/bth"
	"golang.org/x/sys/unix"
)

// CmtimeParams are librdmacm's cmtime's options.
type CmtimeParams struct {
	Connections int    // -c: connections a test makes (100)
	BaseQPN     uint32 // -q: the first QP number the tests without QPs name (1000)
	// Mimic (-m) has the first test simulate its QPs too: creating and
	// modifying one takes MimicDelay instead.
	Mimic      bool
	MimicDelay time.Duration
	Threads    int // -n: connections worked on at once (1)
	// Retries (-r) are the retries of the address and route resolution
	// (2), which gorxe's connection manager does not do apart; an older
	// cmtime's REQs (rdma-core 51 and before) carry them as the QP's
	// retry count, and gorxe's do so against such a server.
	Retries int
}

// DefaultCmtimeParams returns cmtime's defaults.
func DefaultCmtimeParams() CmtimeParams {
	return CmtimeParams{Connections: 100, BaseQPN: 1000, Threads: 1, Retries: 2}
}

// Check refuses what cmtime would not run with.
func (p CmtimeParams) Check() error {
	switch {
	case p.Connections < 1:
		return fmt.Errorf("-c %d: at least one connection", p.Connections)
	case p.Threads < 1:
		return fmt.Errorf("-n %d: at least one thread", p.Threads)
	case p.BaseQPN == 0 || p.BaseQPN > uint32(bth.QPNMask):
		return fmt.Errorf("-q %d: a QP number is 1 to %d", p.BaseQPN, bth.QPNMask)
	}
	return nil
}

// cmtime's steps, in the order of its tables (cmtime.c's enum step).
type step int

const (
	stepFullConnect step = iota
	stepCreateID
	stepBind
	stepResolveAddr
	stepResolveRoute
	stepCreateQP
	stepInitQPAttr
	stepInitQP
	stepRTRQPAttr
	stepRTRQP
	stepRTSQPAttr
	stepRTSQP
	stepConnect
	stepEstablish
	stepDisconnect
	stepDestroyID
	stepDestroyQP
	stepCount
)

var stepNames = [stepCount]string{"full connect", "create id", "bind addr", "resolve addr", "resolve route",
	"create qp", "init qp attr", "init qp", "rtr qp attr", "rtr qp", "rts qp attr", "rts qp",
	"cm connect", "establish", "disconnect", "destroy id", "destroy qp"}

// The out-of-band socket's sync bytes (cmtime's oob_sendrecv values): a
// test's start, its connections made, its connections ended.
const (
	syncStart      = 0
	syncConnect    = byte(stepConnect)
	syncDisconnect = byte(stepDisconnect)
)

// span is when a step started and ended, in µs of a run's clock; 0 is
// "not taken", as cmtime's zeroed times.
type span [2]uint64

// cmtimeNode is one connection of a test.
type cmtimeNode struct {
	times [stepCount]span
	qp    *rnic.QP
	conn  *cm.Conn
	sock  int // cmtime -S: the node's socket, -1 for none
}

// cmtime is a cmtime run on one side.
type cmtime struct {
	p     CmtimeParams
	out   io.Writer
	dev   *rnic.Device
	epoch time.Time
	pd    *mr.PD
	cq    *cq.CQ

	mu      sync.Mutex // the fields below, which the acceptor shares
	times   [stepCount]span
	nodes   []cmtimeNode
	next    int    // the server's next node
	fakeQPN uint32 // the next QP number a test without QPs names; 0: tests make QPs
	made    int    // the server's connections established
	ended   int    // the server's connections ended
	change  chan struct{}
	legacy  bool // an older cmtime's client: its REQs carry the retries, it prints less
}

func newCmtime(dev *rnic.Device, p CmtimeParams, out io.Writer) *cmtime {
	return &cmtime{p: p, out: out, dev: dev, epoch: time.Now(), change: make(chan struct{})}
}

// now is the run's clock in µs, never 0.
func (t *cmtime) now() uint64 { return uint64(time.Since(t.epoch)/time.Microsecond) + 1 }

func (t *cmtime) start(s step) { t.times[s][0] = t.now() }
func (t *cmtime) end(s step)   { t.times[s][1] = t.now() }

func (n *cmtimeNode) start(t *cmtime, s step) { n.times[s][0] = t.now() }
func (n *cmtimeNode) end(t *cmtime, s step)   { n.times[s][1] = t.now() }

// each calls fn for every node on the run's threads, and waits for all.
func (t *cmtime) each(fn func(n *cmtimeNode) error) error {
	work := make(chan *cmtimeNode)
	errs := make(chan error, t.p.Threads)
	var wg sync.WaitGroup
	for range t.p.Threads {
		wg.Go(func() {
			var first error
			for n := range work {
				if err := fn(n); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		})
	}
	for i := range t.nodes {
		work <- &t.nodes[i]
	}
	close(work)
	wg.Wait()
	close(errs)
	var err error
	for e := range errs {
		err = errors.Join(err, e)
	}
	return err
}

// reset starts a test of iter connections, with QPs or (qps false)
// without them.
func (t *cmtime) reset(iter int, qps bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.times = [stepCount]span{}
	t.nodes = make([]cmtimeNode, iter)
	t.next, t.made, t.ended = 0, 0, 0
	t.fakeQPN = 0
	if !qps {
		t.fakeQPN = t.p.BaseQPN
	}
}

// resources makes the PD and CQ the run's QPs share at its first QP, as
// cmtime's open_verbs, and says so as it does in a test (an older
// cmtime's rdma_create_qp says nothing, nor does its server).
func (t *cmtime) resources() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pd != nil {
		return nil
	}
	if !t.legacy && t.nodes != nil {
		fmt.Fprintln(t.out, "\tAllocating verbs resources")
	}
	c, err := t.dev.CreateCQ(1)
	if err != nil {
		return fmt.Errorf("ibv_create_cq: %w", err)
	}
	t.pd, t.cq = t.dev.AllocPD(), c
	return nil
}

// createQP makes n's QP and moves it to INIT, timing both steps as
// cmtime's create_qp and modify_qp do; a test without QPs sleeps the
// mimic delay instead of each.
func (t *cmtime) createQP(n *cmtimeNode, qps bool) error {
	if qps {
		if err := t.resources(); err != nil {
			return err
		}
	}
	n.start(t, stepCreateQP)
	if qps {
		q, err := t.dev.CreateQP(qp.InitAttr{Type: qp.TypeRC, PD: t.pd, SendCQ: t.cq, RecvCQ: t.cq, SigAll: true,
			Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return fmt.Errorf("ibv_create_qp: %w", err)
		}
		n.qp = q
	} else {
		time.Sleep(t.p.MimicDelay)
	}
	n.end(t, stepCreateQP)
	return nil
}

func (t *cmtime) initQP(n *cmtimeNode) error {
	n.start(t, stepInitQPAttr)
	n.end(t, stepInitQPAttr)
	n.start(t, stepInitQP)
	if n.qp != nil {
		err := n.qp.Modify(&qp.Attr{State: qp.StateInit, Port: 1}, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags)
		if err != nil {
			return fmt.Errorf("ibv_modify_qp: %w", err)
		}
	} else {
		time.Sleep(t.p.MimicDelay)
	}
	n.end(t, stepInitQP)
	return nil
}

// connParams are cmtime's conn_param: one READ each way, no retries, and
// the node's QP or the next made-up QP number.
func (t *cmtime) connParams(n *cmtimeNode) cm.ConnParams {
	p := cm.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RetryCount: cm.RetryNone, RNRRetryCount: cm.RetryNone}
	if t.legacy && t.p.Retries > 0 {
		p.RetryCount = uint8(min(t.p.Retries, 7))
	}
	if n.qp != nil {
		p.QP = n.qp
		return p
	}
	t.mu.Lock()
	p.QPNum = bth.QPN(t.fakeQPN)
	t.fakeQPN++
	t.mu.Unlock()
	return p
}

// handshakeDone stamps the steps the connection manager took inside the
// handshake (the QP's RTR and RTS, the RTU), which gorxe does not time
// apart, at its end.
func (n *cmtimeNode) handshakeDone(t *cmtime) {
	now := t.now()
	for _, s := range []step{stepRTRQPAttr, stepRTRQP, stepRTSQPAttr, stepRTSQP, stepEstablish} {
		n.times[s] = span{now, now}
	}
}

// timed times step s done for each node in turn by fn (nil for a step
// that takes no time in gorxe): the step in all, and each node's part.
func (t *cmtime) timed(s step, fn func(n *cmtimeNode)) {
	t.start(s)
	for i := range t.nodes {
		n := &t.nodes[i]
		n.start(t, s)
		if fn != nil {
			fn(n)
		}
		n.end(t, s)
	}
	t.end(s)
}

// destroy destroys the test's QPs and connections, timing each.
func (t *cmtime) destroy() {
	t.timed(stepDestroyQP, func(n *cmtimeNode) {
		if n.qp != nil {
			n.qp.Destroy()
		}
	})
	t.timed(stepDestroyID, func(n *cmtimeNode) {
		if n.conn != nil {
			n.conn.Close()
		}
	})
}

// show prints a test's table as cmtime's show_perf: each step's time in
// all (total), per connection (avg/iter), and the sum, largest and
// smallest of the connections' own.
func (t *cmtime) show(simulated bool) {
	iter := uint32(len(t.nodes))
	kind := "qp_conn"
	if simulated {
		kind = "cm_conn"
	}
	fmt.Fprintf(t.out, "%-15s%10d\n", kind, iter)
	fmt.Fprintf(t.out, "%-15s%10d\n", "threads", t.p.Threads)
	fmt.Fprintln(t.out, "step             avg/iter  total(us)    us/conn    sum(us)    max(us)    min(us)")
	for s := range stepCount {
		var sum, most uint32
		least := ^uint32(0)
		for i := range t.nodes {
			sp := t.nodes[i].times[s]
			if sp[0] == 0 || sp[1] == 0 {
				continue
			}
			d := uint32(sp[1] - sp[0])
			sum += d
			most, least = max(most, d), min(least, d)
		}
		if least == ^uint32(0) {
			least = 0
		}
		if s == stepFullConnect {
			sum = 0 // the sum of whole connections means nothing
		}
		total := uint32(t.times[s][1] - t.times[s][0])
		fmt.Fprintf(t.out, "%-13s  %10d %10d %10d %10d %10d %10d\n", stepNames[s], total/iter, total, sum/iter, sum, int32(most), least)
	}
}

// CmtimeClient is librdmacm's cmtime with -s (librdmacm/examples/
// cmtime.c): it times the steps of making and ending p.Connections
// connections to server, three times over: a warm-up of one, a test with
// QPs and one without (the REQs name made-up QP numbers from p.BaseQPN).
// Before each step that involves the server it syncs with it over oob,
// the TCP connection DialCmtime made, as cmtime since rdma-core 52 does.
// With oob nil the server is an older cmtime's (rdma-core 51 and before),
// which syncs nothing: the client then makes its connections once, with
// QPs, and prints that cmtime's table. It prints what cmtime prints and
// returns its error.
func CmtimeClient(ctx context.Context, m *cm.Manager, oob net.Conn, server netip.AddrPort, local netip.Addr, p CmtimeParams, stdout io.Writer) error {
	t := newCmtime(m.Device(), p, stdout)
	if oob == nil {
		return t.legacyClient(ctx, m, server, local)
	}
	stop := context.AfterFunc(ctx, func() { oob.Close() })
	defer stop()
	fmt.Fprintln(stdout, "Client warmup")
	if err := t.clientTest(ctx, m, oob, server, local, 1, true); err != nil {
		return err
	}
	if p.Mimic {
		fmt.Fprintf(stdout, "Connect (%d) simulated QPs test (delay %d us)\n", p.Connections, p.MimicDelay.Microseconds())
	} else {
		fmt.Fprintf(stdout, "Connect (%d) QPs test\n", p.Connections)
	}
	if err := t.clientTest(ctx, m, oob, server, local, p.Connections, !p.Mimic); err != nil {
		return err
	}
	t.show(p.Mimic)
	fmt.Fprintf(stdout, "Connect (%d) test - no QPs\n", p.Connections)
	t.p.MimicDelay = 0
	if err := t.clientTest(ctx, m, oob, server, local, p.Connections, false); err != nil {
		return err
	}
	t.show(true)
	return nil
}

// DialCmtime connects to a cmtime server's TCP socket at server, the
// address and port of its rdma_cm listener. The server opens it just
// after it starts listening for connection requests, so a refusal is
// tried again for a second before it counts: an error wrapping
// syscall.ECONNREFUSED then says the server is a cmtime of rdma-core 51
// or before, which has no such socket.
func DialCmtime(ctx context.Context, server netip.AddrPort) (net.Conn, error) {
	return tcpdial.Dial(ctx, &net.Dialer{}, server.String(), time.Second)
}

// oobSendRecv sends v and waits for the peer to send it back (cmtime's
// oob_sendrecv); oobRecvSend waits for v and sends it back.
func oobSendRecv(c net.Conn, v byte) error {
	if _, err := c.Write([]byte{v}); err != nil {
		return fmt.Errorf("out-of-band sync %d: %w", v, err)
	}
	return oobExpect(c, v)
}

func oobRecvSend(c net.Conn, v byte) error {
	if err := oobExpect(c, v); err != nil {
		return err
	}
	if _, err := c.Write([]byte{v}); err != nil {
		return fmt.Errorf("out-of-band sync %d: %w", v, err)
	}
	return nil
}

func oobExpect(c net.Conn, v byte) error {
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return fmt.Errorf("out-of-band sync %d: %w", v, err)
	}
	if b[0] != v {
		return fmt.Errorf("out-of-band sync: the peer is at step %d, this side at %d", b[0], v)
	}
	return nil
}

// clientTest is cmtime's client_connect: one test of iter connections.
func (t *cmtime) clientTest(ctx context.Context, m *cm.Manager, oob net.Conn, server netip.AddrPort, local netip.Addr, iter int, qps bool) error {
	t.reset(iter, qps)
	if err := oobSendRecv(oob, syncStart); err != nil {
		return err
	}
	t.start(stepFullConnect)
	t.stampIDs(local)
	fmt.Fprintln(t.out, "\tCreating QPs")
	t.start(stepCreateQP)
	if err := t.each(func(n *cmtimeNode) error { return t.createQP(n, qps) }); err != nil {
		return err
	}
	t.end(stepCreateQP)
	fmt.Fprintln(t.out, "\tModify QPs to INIT")
	t.start(stepInitQP)
	if err := t.each(t.initQP); err != nil {
		return err
	}
	t.end(stepInitQP)
	fmt.Fprintln(t.out, "\tConnecting")
	if err := t.connectAll(ctx, m, server, local); err != nil {
		return err
	}
	t.end(stepFullConnect)
	if err := oobSendRecv(oob, syncConnect); err != nil {
		return err
	}
	fmt.Fprintln(t.out, "\tDisconnecting")
	t.start(stepDisconnect)
	err := t.each(func(n *cmtimeNode) error {
		n.start(t, stepDisconnect)
		err := n.conn.Disconnect(ctx)
		n.end(t, stepDisconnect)
		return err
	})
	if err != nil {
		return fmt.Errorf("rdma_disconnect: %w", err)
	}
	t.end(stepDisconnect)
	if err := oobSendRecv(oob, syncDisconnect); err != nil {
		return err
	}
	fmt.Fprintln(t.out, "\tDestroying QPs")
	fmt.Fprintln(t.out, "\tDestroying IDs")
	t.destroy()
	return nil
}

// stampIDs times the client's steps before its QPs: gorxe's connection
// manager has no ID to create, and resolves the address and route as it
// sends the REQ (the link finds the neighbour), so they take no time.
func (t *cmtime) stampIDs(local netip.Addr) {
	for _, s := range []step{stepCreateID, stepBind, stepResolveAddr, stepResolveRoute} {
		switch s {
		case stepCreateID:
			fmt.Fprintln(t.out, "\tCreating IDs")
		case stepBind:
			if !local.IsValid() {
				continue
			}
			fmt.Fprintln(t.out, "\tBinding addresses")
		case stepResolveAddr:
			fmt.Fprintln(t.out, "\tResolving addresses")
		case stepResolveRoute:
			fmt.Fprintln(t.out, "\tResolving routes")
		}
		if s == stepCreateID {
			for i := range t.nodes {
				t.nodes[i].start(t, stepFullConnect)
			}
		}
		t.timed(s, nil)
	}
}

// connectAll sends every node's REQ, as cmtime does from one thread, and
// waits for every connection to be established.
func (t *cmtime) connectAll(ctx context.Context, m *cm.Manager, server netip.AddrPort, local netip.Addr) error {
	t.start(stepConnect)
	for i := range t.nodes {
		n := &t.nodes[i]
		p := t.connParams(n)
		p.Local = local
		n.start(t, stepConnect)
		c, err := m.Connect(server, p)
		if err != nil {
			return fmt.Errorf("rdma_connect: %w", err)
		}
		n.conn = c
	}
	err := t.each(func(n *cmtimeNode) error {
		if err := n.conn.Established(ctx); err != nil {
			return err
		}
		n.handshakeDone(t)
		n.end(t, stepConnect)
		n.end(t, stepFullConnect)
		return nil
	})
	if err != nil {
		return fmt.Errorf("event: %w", err)
	}
	t.end(stepConnect)
	return nil
}

// legacyClient is cmtime's client before rdma-core 52: no out-of-band
// socket, one pass of connections with QPs, and its table (total and
// largest in ms, smallest and per connection in µs).
func (t *cmtime) legacyClient(ctx context.Context, m *cm.Manager, server netip.AddrPort, local netip.Addr) error {
	t.legacy = true
	t.reset(t.p.Connections, true)
	// That cmtime's steps: what it prints as it takes each, and the
	// step's row in its table.
	steps := []struct {
		s            step
		doing, label string
	}{
		{stepCreateID, "creating id", "create id"}, {stepBind, "binding source address", "bind addr"},
		{stepResolveAddr, "resolving address", "resolve addr"}, {stepResolveRoute, "resolving route", "resolve route"},
		{stepCreateQP, "creating qp", "create qp"}, {stepConnect, "connecting", "connect"},
		{stepDisconnect, "disconnecting", "disconnect"}, {stepDestroyID, "destroying id", "destroy"},
	}
	if !local.IsValid() {
		steps = slices.Delete(steps, 1, 2) // no bind
	}
	say := func(s step) {
		for _, st := range steps {
			if st.s == s {
				fmt.Fprintln(t.out, st.doing)
			}
		}
	}
	for _, st := range steps[:len(steps)-4] { // those before the QPs: no time in gorxe
		say(st.s)
		t.timed(st.s, nil)
	}
	say(stepCreateQP)
	t.start(stepCreateQP)
	for i := range t.nodes {
		n := &t.nodes[i]
		// rdma_create_qp: the QP, moved to INIT.
		if err := t.createQP(n, true); err != nil {
			return err
		}
		start := n.times[stepCreateQP][0]
		if err := t.initQP(n); err != nil {
			return err
		}
		n.times[stepCreateQP] = span{start, t.now()}
	}
	t.end(stepCreateQP)
	say(stepConnect)
	if err := t.connectAll(ctx, m, server, local); err != nil {
		return err
	}
	say(stepDisconnect)
	t.start(stepDisconnect)
	for i := range t.nodes {
		n := &t.nodes[i]
		n.start(t, stepDisconnect)
		err := n.conn.Disconnect(ctx)
		n.qp.Destroy()
		n.end(t, stepDisconnect)
		if err != nil {
			return fmt.Errorf("rdma_disconnect: %w", err)
		}
	}
	t.end(stepDisconnect)
	say(stepDestroyID)
	t.timed(stepDestroyID, func(n *cmtimeNode) { n.conn.Close() })

	fmt.Fprintln(t.out, "step              total ms     max ms     min us  us / conn")
	for _, st := range steps {
		s := st.s
		most, least := 0.0, 999999999.0
		for i := range t.nodes {
			if sp := t.nodes[i].times[s]; sp[0] != 0 && sp[1] != 0 {
				d := float64(sp[1] - sp[0])
				most, least = max(most, d), min(least, d)
			}
		}
		us := float64(t.times[s][1] - t.times[s][0])
		fmt.Fprintf(t.out, "%-13s: %11.2f%11.2f%11.2f%11.2f\n", st.label, us/1000, most/1000, least, us/float64(t.p.Connections))
	}
	return nil
}

// CmtimeServer is cmtime without -s: it accepts the connections that come
// to l, with a QP each (a made-up QP number in a test without QPs), and
// disconnects those the client disconnects. A client that connects to
// its TCP socket oob (a cmtime of rdma-core 52 or later, or gorxe's)
// leads it through the warm-up and the two tests, whose tables it prints
// before it returns; without one (an older cmtime's client) it serves
// until ctx ends.
func CmtimeServer(ctx context.Context, dev *rnic.Device, l *cm.Listener, oob net.Listener, p CmtimeParams, stdout io.Writer) error {
	t := newCmtime(dev, p, stdout)
	go t.acceptLoop(ctx, l)
	stop := context.AfterFunc(ctx, func() { oob.Close() })
	defer stop()
	c, err := oob.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped, as an older cmtime's server is
		}
		return fmt.Errorf("oob_server_setup: %w", err)
	}
	defer c.Close()
	context.AfterFunc(ctx, func() { c.Close() })
	fmt.Fprintln(stdout, "Server warmup")
	if err := t.serverTest(ctx, c, 1, true); err != nil {
		return err
	}
	if p.Mimic {
		fmt.Fprintf(stdout, "Accept (%d) simulated QPs test (delay %d us)\n", p.Connections, p.MimicDelay.Microseconds())
	} else {
		fmt.Fprintf(stdout, "Accept (%d) QPs test\n", p.Connections)
	}
	if err := t.serverTest(ctx, c, p.Connections, !p.Mimic); err != nil {
		return err
	}
	t.show(p.Mimic)
	fmt.Fprintf(stdout, "Accept (%d) test - no QPs\n", p.Connections)
	t.p.MimicDelay = 0
	if err := t.serverTest(ctx, c, p.Connections, false); err != nil {
		return err
	}
	t.show(true)
	return nil
}

// serverTest is cmtime's server_connect: one test, whose connections the
// accept loop makes.
func (t *cmtime) serverTest(ctx context.Context, oob net.Conn, iter int, qps bool) error {
	t.reset(iter, qps)
	if err := oobRecvSend(oob, syncStart); err != nil {
		return err
	}
	if err := t.await(ctx, func() bool { return t.made >= iter }); err != nil {
		return err
	}
	if err := oobRecvSend(oob, syncConnect); err != nil {
		return err
	}
	if err := t.await(ctx, func() bool { return t.ended >= iter }); err != nil {
		return err
	}
	if err := oobRecvSend(oob, syncDisconnect); err != nil {
		return err
	}
	t.destroy()
	return nil
}

// await waits until done, read under the lock, holds.
func (t *cmtime) await(ctx context.Context, done func() bool) error {
	for {
		t.mu.Lock()
		ok, change := done(), t.change
		t.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-change:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// changed wakes await; t.mu is held.
func (t *cmtime) changed() {
	close(t.change)
	t.change = make(chan struct{})
}

// acceptLoop takes each connection request and serves it.
func (t *cmtime) acceptLoop(ctx context.Context, l *cm.Listener) {
	for {
		r, err := l.Accept(ctx)
		if err != nil {
			return
		}
		go t.serve(ctx, r)
	}
}

// serve accepts one request as cmtime's req_handler: a QP made and moved
// to INIT (or a made-up number), then rdma_accept; and when the client
// disconnects, counts it.
func (t *cmtime) serve(ctx context.Context, r *cm.Request) {
	t.mu.Lock()
	n := &cmtimeNode{}
	qps := t.fakeQPN == 0
	if t.next < len(t.nodes) {
		if t.next == 0 {
			fmt.Fprintln(t.out, "\tAccepting")
			t.start(stepConnect)
		}
		n = &t.nodes[t.next]
		t.next++
	}
	t.mu.Unlock()
	fail := func(err error) {
		fmt.Fprintf(t.out, "failing connection request: %v\n", err)
		r.Reject(nil)
		if n.qp != nil {
			n.qp.Destroy()
			n.qp = nil
		}
	}
	if err := t.createQP(n, qps); err != nil {
		fail(err)
		return
	}
	if err := t.initQP(n); err != nil {
		fail(err)
		return
	}
	c, err := r.Accept(t.connParams(n))
	if err != nil {
		fail(err)
		return
	}
	n.handshakeDone(t)
	t.mu.Lock()
	n.conn = c
	ours := t.owns(n)
	t.mu.Unlock()
	if !ours {
		// A connection beyond the test's, or an older cmtime client's,
		// which syncs nothing: it is served, and its resources go when
		// it ends.
		select {
		case <-c.Disconnected():
		case <-ctx.Done():
		}
		c.Close()
		if n.qp != nil {
			n.qp.Destroy()
		}
		return
	}
	if c.Established(ctx) == nil {
		t.mu.Lock()
		if t.made++; t.made == len(t.nodes) {
			t.end(stepConnect)
		}
		t.changed()
		t.mu.Unlock()
	}
	select {
	case <-c.Disconnected():
	case <-ctx.Done():
		return
	}
	// The connection manager answered the DREQ; cmtime's
	// server_disconnect calls rdma_disconnect, which sends that DREP.
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended == 0 {
		fmt.Fprintln(t.out, "\tDisconnecting")
		t.start(stepDisconnect)
	}
	n.start(t, stepDisconnect)
	n.end(t, stepDisconnect)
	if t.ended++; t.ended == len(t.nodes) {
		t.end(stepDisconnect)
	}
	t.changed()
}

// owns reports whether n is one of the current test's nodes; t.mu is
// held.
func (t *cmtime) owns(n *cmtimeNode) bool {
	for i := range t.nodes {
		if &t.nodes[i] == n {
			return true
		}
	}
	return false
}

// CmtimeSocketServer is cmtime -S without -s: the baseline of TCP
// connections. It takes connections on oob until it has p.Connections,
// closes them, and prints their times.
func CmtimeSocketServer(ctx context.Context, oob net.Listener, p CmtimeParams, stdout io.Writer) error {
	t := newCmtime(nil, p, stdout)
	t.reset(p.Connections, false)
	fmt.Fprintln(stdout, "Server baseline socket setup")
	stop := context.AfterFunc(ctx, func() { oob.Close() })
	defer stop()
	fmt.Fprintln(stdout, "Accept sockets")
	conns := make([]net.Conn, 0, p.Connections)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range p.Connections {
		c, err := oob.Accept()
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
		conns = append(conns, c)
		if i == 0 {
			t.start(stepFullConnect)
		}
	}
	t.end(stepFullConnect)
	fmt.Fprintln(stdout, "Closing sockets")
	t.start(stepDestroyID)
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	t.end(stepDestroyID)
	fmt.Fprintln(stdout, "Server baseline socket results:")
	t.show(true)
	return nil
}

// CmtimeSocketClient is cmtime -S -s: it creates p.Connections TCP
// sockets, connects each to server, closes them, and prints the times of
// each step.
func CmtimeSocketClient(ctx context.Context, server netip.AddrPort, p CmtimeParams, stdout io.Writer) error {
	t := newCmtime(nil, p, stdout)
	t.reset(p.Connections, false)
	fmt.Fprintln(stdout, "Client baseline socket setup")
	// A Sockaddr holds the bytes Connect passes the kernel: one each.
	family, sockaddr := unix.AF_INET, func() unix.Sockaddr {
		return &unix.SockaddrInet4{Port: int(server.Port()), Addr: server.Addr().Unmap().As4()}
	}
	if !server.Addr().Unmap().Is4() {
		family, sockaddr = unix.AF_INET6, func() unix.Sockaddr {
			return &unix.SockaddrInet6{Port: int(server.Port()), Addr: server.Addr().As16()}
		}
	}
	for i := range t.nodes {
		t.nodes[i].sock = -1
	}
	defer func() {
		for i := range t.nodes {
			if fd := t.nodes[i].sock; fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	t.start(stepFullConnect)
	fmt.Fprintln(stdout, "Creating sockets")
	t.start(stepCreateID)
	err := t.each(func(n *cmtimeNode) error {
		n.start(t, stepCreateID)
		fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("socket: %w", err)
		}
		n.sock = fd
		n.end(t, stepCreateID)
		return nil
	})
	if err != nil {
		return err
	}
	t.end(stepCreateID)
	fmt.Fprintln(stdout, "Connecting sockets")
	t.start(stepConnect)
	err = t.each(func(n *cmtimeNode) error {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		n.start(t, stepConnect)
		if err := unix.Connect(n.sock, sockaddr()); err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		n.end(t, stepConnect)
		return nil
	})
	if err != nil {
		return err
	}
	t.end(stepConnect)
	t.end(stepFullConnect)
	fmt.Fprintln(stdout, "Closing sockets")
	t.start(stepDestroyID)
	for i := range t.nodes {
		unix.Close(t.nodes[i].sock)
		t.nodes[i].sock = -1
	}
	t.end(stepDestroyID)
	fmt.Fprintln(stdout, "Client baseline socket results:")
	t.show(true)
	return nil
}

package cmtool_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/cm"
	"github.com/gorxe/gorxe/cm/cmtest"
	"github.com/gorxe/gorxe/cmtool"
	"github.com/gorxe/gorxe/cq"
	"github.com/gorxe/gorxe/link/mem"
	"github.com/gorxe/gorxe/mr"
	"github.com/gorxe/gorxe/qp"
	"github.com/gorxe/gorxe/rnic"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// TestRdmaServerClient: rdma_client's message reaches rdma_server and its
// answer comes back, and rdma_xclient's reaches rdma_xserver (whose end 0
// says its receive completed well); each prints the C program's two
// lines, and both sides disconnect, their DREQs crossing.
func TestRdmaServerClient(t *testing.T) {
	type server func(context.Context, *rnic.Device, *cm.Listener, time.Duration, io.Writer) error
	type client func(context.Context, *cm.Manager, *rnic.Device, netip.AddrPort, netip.Addr, time.Duration, io.Writer) error
	for _, tc := range []struct {
		server, client string
		serve          server
		dial           client
	}{
		{"rdma_server", "rdma_client", cmtool.RdmaServer, cmtool.RdmaClient},
		{"rdma_xserver", "rdma_xclient", cmtool.RdmaXServer, cmtool.RdmaXClient},
	} {
		t.Run(tc.server, func(t *testing.T) {
			f := mem.NewFabric()
			sdev, sm := cmtest.Open(t, f, "10.0.0.2")
			cdev, cmgr := cmtest.Open(t, f, "10.0.0.1")
			l, err := sm.Listen(netip.Addr{}, cmtool.DefaultPort)
			if err != nil {
				t.Fatal(err)
			}
			var sout, cout bytes.Buffer
			done := make(chan error, 1)
			go func() { done <- tc.serve(ctx(t), sdev, l, 10*time.Second, &sout) }()
			if err := tc.dial(ctx(t), cmgr, cdev, netip.MustParseAddrPort("10.0.0.2:7471"), netip.Addr{}, 10*time.Second, &cout); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if cout.String() != tc.client+": start\n"+tc.client+": end 0\n" || sout.String() != tc.server+": start\n"+tc.server+": end 0\n" {
				t.Fatalf("client printed %q, server %q", cout.String(), sout.String())
			}
		})
	}
}

// TestCMATose: ucmatose's server and client over three connections
// exchange their messages, print cmatose's lines in its order, and both
// return status 0.
func TestCMATose(t *testing.T) {
	f := mem.NewFabric()
	sdev, sm := cmtest.Open(t, f, "10.0.0.2")
	cdev, cm := cmtest.Open(t, f, "10.0.0.1")
	l, err := sm.Listen(netip.Addr{}, cmtool.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	p := cmtool.DefaultCMAToseParams()
	p.Connections = 3
	var sout, cout bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- cmtool.CMAToseServer(ctx(t), sdev, l, p, &sout) }()
	if ret := cmtool.CMAToseClient(ctx(t), cm, cdev, netip.MustParseAddrPort("10.0.0.2:7471"), netip.Addr{}, p, &cout); ret != 0 {
		t.Fatalf("client returned %d:\n%s", ret, cout.String())
	}
	if ret := <-done; ret != 0 {
		t.Fatalf("server returned %d:\n%s", ret, sout.String())
	}
	wantS := "cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\ndata transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
	wantC := "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
	if sout.String() != wantS || cout.String() != wantC {
		t.Fatalf("server printed\n%s\nclient printed\n%s", sout.String(), cout.String())
	}
}

// TestCMAToseRejected: a client to a port nobody listens on prints the
// REJECTED event with reason 8 and returns -1.
func TestCMAToseRejected(t *testing.T) {
	f := mem.NewFabric()
	cmtest.Open(t, f, "10.0.0.2")
	cdev, cm := cmtest.Open(t, f, "10.0.0.1")
	var cout bytes.Buffer
	ret := cmtool.CMAToseClient(ctx(t), cm, cdev, netip.MustParseAddrPort("10.0.0.2:7471"), netip.Addr{}, cmtool.DefaultCMAToseParams(), &cout)
	if ret != -1 || !bytes.Contains(cout.Bytes(), []byte("RDMA_CM_EVENT_REJECTED, error: 8")) {
		t.Fatalf("returned %d, printed\n%s", ret, cout.String())
	}
}

// TestCMAToseNoQP: a client whose QP the device refuses (more messages
// than a queue holds: rxe's and gorxe's 16384 work requests) says it
// could not create the QP, as cmatose does, not that the server was
// unreachable; a server says so too, and rejects the request.
func TestCMAToseNoQP(t *testing.T) {
	f := mem.NewFabric()
	cmtest.Open(t, f, "10.0.0.2")
	cdev, cm := cmtest.Open(t, f, "10.0.0.1")
	p := cmtool.DefaultCMAToseParams()
	p.MessageCount = 20000
	var cout bytes.Buffer
	ret := cmtool.CMAToseClient(ctx(t), cm, cdev, netip.MustParseAddrPort("10.0.0.2:7471"), netip.Addr{}, p, &cout)
	if ret != -1 || !bytes.Contains(cout.Bytes(), []byte("cmatose: unable to create QP: ")) {
		t.Fatalf("returned %d, printed\n%s", ret, cout.String())
	}

	// The server's QP refused: it says so and rejects the request, which
	// the client reports at once.
	sdev, sm := cmtest.Open(t, f, "10.0.0.3")
	l, err := sm.Listen(netip.Addr{}, cmtool.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	var sout bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- cmtool.CMAToseServer(ctx(t), sdev, l, p, &sout) }()
	cout.Reset()
	ret = cmtool.CMAToseClient(ctx(t), cm, cdev, netip.MustParseAddrPort("10.0.0.3:7471"), netip.Addr{}, cmtool.DefaultCMAToseParams(), &cout)
	if ret != -1 || !bytes.Contains(cout.Bytes(), []byte("RDMA_CM_EVENT_REJECTED, error: 28")) {
		t.Errorf("client returned %d, printed\n%s", ret, cout.String())
	}
	if ret := <-done; ret != -1 || !bytes.Contains(sout.Bytes(), []byte("cmatose: unable to create QP: ")) ||
		!bytes.Contains(sout.Bytes(), []byte("cmatose: failing connection request\n")) {
		t.Errorf("server returned %d, printed\n%s", ret, sout.String())
	}
}

// TestUDAddy: udaddy's server and client over two UD "connections"
// resolved with SIDR: ten messages each way on each, the server answering
// to the QPN the immediate data names, and both print udaddy's lines.
func TestUDAddy(t *testing.T) {
	f := mem.NewFabric()
	sdev, sm := cmtest.Open(t, f, "10.0.0.2")
	cdev, cm := cmtest.Open(t, f, "10.0.0.1")
	l, err := sm.ListenUD(netip.Addr{}, cmtool.UDAddyPort)
	if err != nil {
		t.Fatal(err)
	}
	p := cmtool.DefaultCMAToseParams()
	p.Connections = 2
	var sout, cout bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- cmtool.UDAddyServer(ctx(t), sdev, l, p, &sout) }()
	if ret := cmtool.UDAddyClient(ctx(t), cm, cdev, netip.MustParseAddr("10.0.0.2"), netip.Addr{}, p, &cout); ret != 0 {
		t.Fatalf("client returned %d:\n%s", ret, cout.String())
	}
	if ret := <-done; ret != 0 {
		t.Fatalf("server returned %d:\n%s", ret, sout.String())
	}
	wantS := "udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
	wantC := "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"
	if sout.String() != wantS || cout.String() != wantC {
		t.Fatalf("server printed\n%s\nclient printed\n%s", sout.String(), cout.String())
	}
}

// TestMckey: mckey's sender, one QP, sends its messages to an IPv4 group;
// two receivers on two other hosts, two QPs each joined to the group,
// each receive them all on every QP; all print mckey's lines and return
// status 0. An IPv6 group is refused as the kernel's rdma_cm refuses it
// on RoCE v2.
func TestMckey(t *testing.T) {
	f := mem.NewFabric()
	_, sm := cmtest.Open(t, f, "10.0.0.1")
	group := netip.MustParseAddr("239.0.0.7")
	type result struct {
		out    bytes.Buffer
		status int
	}
	var rs [2]result
	var done [2]chan struct{}
	var devs [2]*rnic.Device
	for i := range rs {
		dev, m := cmtest.Open(t, f, []string{"10.0.0.2", "10.0.0.3"}[i])
		devs[i] = dev
		done[i] = make(chan struct{})
		p := cmtool.DefaultMckeyParams()
		p.Connections, p.Pause = 2, 0
		go func() {
			defer close(done[i])
			rs[i].status = cmtool.Mckey(ctx(t), m, group, netip.Addr{}, p, &rs[i].out)
		}()
	}
	// The sender starts once both receivers have joined, two QPs each.
	for end := time.Now().Add(10 * time.Second); devs[0].McastGroups()[group] != 2 || devs[1].McastGroups()[group] != 2; {
		if time.Now().After(end) {
			t.Fatalf("the receivers' groups: %v and %v, want %v with 2 QPs each", devs[0].McastGroups(), devs[1].McastGroups(), group)
		}
		time.Sleep(time.Millisecond)
	}
	p := cmtool.DefaultMckeyParams()
	p.Sender, p.Pause = true, 0
	var sout bytes.Buffer
	if st := cmtool.Mckey(ctx(t), sm, group, netip.Addr{}, p, &sout); st != 0 {
		t.Fatalf("sender: status %d:\n%s", st, sout.String())
	}
	want := "mckey: starting client\nmckey: joining\nmckey: joined dgid: ::ffff:239.0.0.7 mlid 0x0 sl 0\n" +
		"initiating data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"
	if sout.String() != want {
		t.Errorf("sender printed\n%s\nwant\n%s", sout.String(), want)
	}
	joinedTwice := "mckey: joined dgid: ::ffff:239.0.0.7 mlid 0x0 sl 0\n"
	want = "mckey: starting server\nmckey: joining\n" + joinedTwice + joinedTwice +
		"receiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"
	for i := range rs {
		select {
		case <-done[i]:
		case <-time.After(10 * time.Second):
			t.Fatalf("receiver %d: still waiting for its messages", i)
		}
		if rs[i].status != 0 || rs[i].out.String() != want {
			t.Errorf("receiver %d: status %d, printed\n%s\nwant\n%s", i, rs[i].status, rs[i].out.String(), want)
		}
	}

	var out bytes.Buffer
	p.Sender = false
	if st := cmtool.Mckey(ctx(t), sm, netip.MustParseAddr("ff0e::1"), netip.Addr{}, p, &out); st == 0 ||
		!bytes.Contains(out.Bytes(), []byte("mckey: failure joining: ")) || !bytes.Contains(out.Bytes(), []byte("not supported")) {
		t.Errorf("an IPv6 group: status %d, printed\n%s", st, out.String())
	}
}

// mortal opens a device and connection manager at addr whose host can be
// killed: after kill, it sends nothing (no ACK, no DREQ, no DREP), as a
// gorxe killed with SIGKILL. Its CM retries at rdma_cm's timeouts, so that
// a survivor waiting out its DREQ's retries would wait 77 s.
func mortal(t *testing.T, f *mem.Fabric, addr string) (dev *rnic.Device, m *cm.Manager, kill func()) {
	t.Helper()
	l, err := f.NewLink(netip.MustParseAddr(addr))
	if err != nil {
		t.Fatal(err)
	}
	if dev, err = rnic.Open(rnic.Config{Link: l}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	if m, err = cm.New(dev, cm.Config{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return dev, m, func() { l.SetFaults(mem.Faults{DropFunc: func([]byte, uint64) bool { return true }}) }
}

// TestDeadPeer: a program whose peer dies once they are connected (a
// gorxe killed: no DREQ comes, as the kernel sends for a dead C program)
// gives up after the give-up time with "stalled ... the peer is gone" and
// fails, where it waited for ever; closing its connection does not wait
// out the DREQ's retries. The peer here is the CM and a QP with the
// program's receives posted, killed as soon as it is connected.
func TestDeadPeer(t *testing.T) {
	const giveUp = 300 * time.Millisecond
	p := cmtool.DefaultCMAToseParams()
	p.GiveUp = giveUp
	// rcParams is an RC connection's parameters for the peer, with
	// receives for ten of ucmatose's messages.
	rcParams := func(dev *rnic.Device) cm.ConnParams {
		pd := dev.AllocPD()
		c, err := dev.CreateCQ(64)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		m, err := dev.RegMR(pd, buf, mr.LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		cp := cm.ConnParams{PD: pd, SendCQ: c, RecvCQ: c, Cap: qp.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}}
		for range 10 {
			cp.Receives = append(cp.Receives, qp.RecvWR{SGList: []qp.SGE{{Addr: m.IOVA(), Length: uint32(len(buf)), LKey: m.LKey()}}})
		}
		return cp
	}
	// Each runs the program against its peer, which it kills once
	// connected; the program prints to out, and run reports whether it
	// failed.
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, f *mem.Fabric, out io.Writer) bool
	}{
		{"rdma_server", func(t *testing.T, f *mem.Fabric, out io.Writer) bool {
			sdev, l := dyingClient(t, f, rcParams)
			return failed(t, cmtool.RdmaServer(ctx(t), sdev, l, giveUp, out), out)
		}},
		{"rdma_client", func(t *testing.T, f *mem.Fabric, out io.Writer) bool {
			sdev, sm, kill := mortal(t, f, "10.0.0.2")
			cdev, cmgr := cmtest.Open(t, f, "10.0.0.1")
			acceptAndDie(t, sm, sdev, cmtool.DefaultPort, rcParams, kill)
			return failed(t, cmtool.RdmaClient(ctx(t), cmgr, cdev, netip.MustParseAddrPort("10.0.0.2:7471"), netip.Addr{}, giveUp, out), out)
		}},
		{"ucmatose server", func(t *testing.T, f *mem.Fabric, out io.Writer) bool {
			sdev, l := dyingClient(t, f, rcParams)
			return cmtool.CMAToseServer(ctx(t), sdev, l, p, out) != 0
		}},
		{"ucmatose client", func(t *testing.T, f *mem.Fabric, out io.Writer) bool {
			sdev, sm, kill := mortal(t, f, "10.0.0.2")
			cdev, cmgr := cmtest.Open(t, f, "10.0.0.1")
			acceptAndDie(t, sm, sdev, cmtool.DefaultPort, rcParams, kill)
			return cmtool.CMAToseClient(ctx(t), cmgr, cdev, netip.MustParseAddrPort("10.0.0.2:7471"), netip.Addr{}, p, out) != 0
		}},
		{"udaddy client", func(t *testing.T, f *mem.Fabric, out io.Writer) bool {
			sdev, sm, kill := mortal(t, f, "10.0.0.2")
			cdev, cmgr := cmtest.Open(t, f, "10.0.0.1")
			l, err := sm.ListenUD(netip.Addr{}, cmtool.UDAddyPort)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				r, err := l.Accept(ctx(t))
				if err != nil {
					return
				}
				q, err := sdev.CreateQP(qp.InitAttr{Type: qp.TypeUD, PD: sdev.AllocPD(), SendCQ: mustCQ(t, sdev), RecvCQ: mustCQ(t, sdev),
					Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
				if err == nil && cm.InitUD(q, cm.UDPQKey) == nil && r.Answer(q.Num(), cm.UDPQKey, nil) == nil {
					kill()
				}
			}()
			return cmtool.UDAddyClient(ctx(t), cmgr, cdev, netip.MustParseAddr("10.0.0.2"), netip.Addr{}, p, out) != 0
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			done := make(chan bool, 1)
			go func() { done <- tc.run(t, mem.NewFabric(), &out) }()
			select {
			case failed := <-done:
				if !failed || !strings.Contains(out.String(), "stalled") || !strings.Contains(out.String(), "the peer is gone") {
					t.Errorf("failed %v, printed\n%s\nwant a failure: stalled, the peer is gone", failed, out.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("still waiting for the dead peer after 10s; printed\n%s", out.String())
			}
		})
	}
}

// failed prints err, which the command prints, and reports whether it
// is a stall.
func failed(t *testing.T, err error, out io.Writer) bool {
	fmt.Fprintln(out, err)
	if !errors.Is(err, cmtool.ErrStalled) {
		t.Errorf("%v, want ErrStalled", err)
	}
	return err != nil
}

// dyingClient opens a server's device at 10.0.0.2 with a listener on
// port 7471, and a client at 10.0.0.1 that connects to it with params and
// is killed once the connection is established.
func dyingClient(t *testing.T, f *mem.Fabric, params func(*rnic.Device) cm.ConnParams) (*rnic.Device, *cm.Listener) {
	t.Helper()
	sdev, sm := cmtest.Open(t, f, "10.0.0.2")
	cdev, cmgr, kill := mortal(t, f, "10.0.0.1")
	l, err := sm.Listen(netip.Addr{}, cmtool.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	p := params(cdev)
	go func() {
		if _, err := cmgr.Dial(ctx(t), netip.MustParseAddrPort("10.0.0.2:7471"), p); err == nil {
			kill()
		}
	}()
	return sdev, l
}

// acceptAndDie accepts one connection on m's port and kills its host
// once the connection is established.
func acceptAndDie(t *testing.T, m *cm.Manager, dev *rnic.Device, port uint16, params func(*rnic.Device) cm.ConnParams, kill func()) {
	t.Helper()
	l, err := m.Listen(netip.Addr{}, port)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		r, err := l.Accept(ctx(t))
		if err != nil {
			return
		}
		c, err := r.Accept(params(dev))
		if err == nil && c.Established(ctx(t)) == nil {
			kill()
		}
	}()
}

func mustCQ(t *testing.T, dev *rnic.Device) *cq.CQ {
	c, err := dev.CreateCQ(16)
	if err != nil {
		t.Error(err)
	}
	return c
}

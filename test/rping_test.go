//go:build linux

package test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRping runs gorxe rping between two namespaces joined by a veth, over
// the udp link (IPv4, IPv6, and a server given no address or an
// unspecified one) and the xdp
// link, with -C 50 -v -V: the
// connection is made by the connection managers on QP 1, with no TCP; each
// side prints a line a ping, and the server ends when the client
// disconnects. Then a client to a port nobody listens on is rejected at
// once.
func TestRping(t *testing.T) {
	needRoot(t)
	a, b := newNS(t, "a"), newNS(t, "b")
	vethPair(t, a, b, 9000)
	a.ip(t, "addr", "add", "fe80::a/64", "dev", "va", "nodad")
	b.ip(t, "addr", "add", "fe80::b/64", "dev", "vb", "nodad")
	for _, v := range []struct {
		name, srv, cli string
		link           []string
		srvLink        []string
		cliLink        []string
	}{
		{"udp/IPv4", "10.77.0.2", "10.77.0.1", []string{"--link", "udp"}, []string{"-a", "10.77.0.2"}, nil},
		{"udp/IPv6", "fd77::2", "fd77::1", []string{"--link", "udp"}, []string{"-a", "fd77::2"}, nil},
		// As rping's server is typed: no address, the host's only
		// interface's taken.
		{"udp/any", "10.77.0.2", "10.77.0.1", nil, nil, nil},
		// And reached at the interface's other addresses too, as the
		// kernel's rdma_cm listening on every address is: IPv6, and a
		// link-local address not made from the MAC.
		{"udp/any/IPv6", "fd77::2", "fd77::1", nil, nil, nil},
		{"udp/any/link-local", "fe80::b%va", "fe80::a", nil, nil, nil},
		// -a with an unspecified address: any of the interface's
		// addresses of that family (the server took its IPv4 one for
		// -a :: before, and an IPv6 client's REQ went unanswered).
		{"udp/any6", "fd77::2", "fd77::1", nil, []string{"-a", "::"}, nil},
		{"udp/any4", "10.77.0.2", "10.77.0.1", nil, []string{"-a", "0.0.0.0"}, nil},
		{"udp/any6/IPv4", "10.77.0.2", "10.77.0.1", nil, []string{"-a", "::"}, nil},
		// Link-local addresses, typed with their zones as librdmacm's
		// rping takes them.
		{"udp/link-local", "fe80::b%va", "fe80::a", nil, []string{"-a", "fe80::b%vb"}, nil},
		{"xdp/IPv4", "10.77.0.2", "10.77.0.1", []string{"--link", "xdp"}, []string{"-a", "10.77.0.2", "--dev", "vb"}, []string{"--dev", "va"}},
	} {
		t.Run(v.name, func(t *testing.T) {
			srvArgs := append(append([]string{"rping", "-s", "-v", "-S", "1000"}, v.link...), v.srvLink...)
			cliArgs := append(append([]string{"rping", "-c", "-a", v.srv, "-C", "50", "-v", "-V", "-S", "1000"}, v.link...), v.cliLink...)
			server := start(t, b, srvArgs...)
			time.Sleep(time.Second) // the server's device opens and listens; a REQ before is rejected
			client := start(t, a, cliArgs...)
			for _, g := range []*gorxe{client, server} {
				if err := g.wait(t, 60*time.Second); err != nil {
					t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", g.cmd.Args[3:], err, g.out.String(), g.errOut.String())
				}
			}
			for _, g := range []*gorxe{client, server} {
				if n := strings.Count(g.out.String(), "ping data: rdma-ping-"); n != 50 {
					t.Fatalf("%v printed %d ping lines, want 50:\n%s", g.cmd.Args[3:], n, g.out.String())
				}
			}
			if !strings.Contains(server.errOut.String(), "server DISCONNECT EVENT...") {
				t.Fatalf("server stderr: %s", server.errOut.String())
			}
		})
	}
	t.Run("nobody-listens", func(t *testing.T) {
		server := start(t, b, "rping", "-s", "-a", "10.77.0.2")
		time.Sleep(time.Second)
		started := time.Now()
		client := start(t, a, "rping", "-c", "-a", "10.77.0.2", "-p", "7175", "-C", "1")
		if err := client.wait(t, 30*time.Second); err == nil || !strings.Contains(client.errOut.String(), "invalid service ID (8)") {
			t.Fatalf("rping to a port nobody listens on: %v\n%s", err, client.errOut.String())
		}
		if d := time.Since(started); d > 5*time.Second {
			t.Fatalf("the REJ took %v", d)
		}
		_ = server
	})
}

// TestCMTools runs librdmacm's rdma_server/rdma_client,
// rdma_xserver/rdma_xclient, ucmatose, udaddy, mckey, cmtime, rstream and riostream, as gorxe has them, between two namespaces over the udp link: each side
// prints the C program's lines and ends with status 0.
func TestCMTools(t *testing.T) {
	needRoot(t)
	a, b := newNS(t, "a"), newNS(t, "b")
	vethPair(t, a, b, 9000)
	for _, v := range []struct {
		name       string
		srv, cli   []string
		srvEnd     string
		cliEnd     string
		wantOutput []string
	}{
		// Servers as they are typed (rdma_server, ucmatose, udaddy):
		// no address, the host's only interface's taken.
		{"rdma_server", []string{"rdma_server"}, []string{"rdma_client", "-s", "10.77.0.2"},
			"rdma_server: end 0\n", "rdma_client: end 0\n", nil},
		{"rdma_server/IPv6", []string{"rdma_server"}, []string{"rdma_client", "-s", "fd77::2"},
			"rdma_server: end 0\n", "rdma_client: end 0\n", nil},
		{"rdma_xserver", []string{"rdma_xserver", "--ip", "10.77.0.2"}, []string{"rdma_xclient", "-s", "10.77.0.2", "-c", "r"},
			"rdma_xserver: end 0\n", "rdma_xclient: end 0\n", nil},
		{"ucmatose", []string{"ucmatose", "-c", "3", "-C", "20", "-S", "3000"},
			[]string{"ucmatose", "-s", "10.77.0.2", "-c", "3", "-C", "20", "-S", "3000"},
			"return status 0\n", "return status 0\n", []string{"data transfers complete"}},
		{"udaddy", []string{"udaddy", "-c", "2"}, []string{"udaddy", "-s", "10.77.0.2", "-c", "2"},
			"return status 0\n", "return status 0\n", []string{"data transfers complete"}},
		// Bound to an unspecified address: any of the interface's of that
		// family (an error before: the udp link binds a specific one).
		{"ucmatose/any6", []string{"ucmatose", "-b", "::"}, []string{"ucmatose", "-s", "fd77::2", "-f", "ipv6"},
			"return status 0\n", "return status 0\n", []string{"data transfers complete"}},
		{"rstream/any4", []string{"rstream", "-b", "0.0.0.0", "-S", "1000", "-C", "10", "-T", "v"},
			[]string{"rstream", "-s", "10.77.0.2", "-S", "1000", "-C", "10", "-T", "v"},
			"", "", []string{"\ncustom    1000    10      1       "}},
		// mckey's receiver (two QPs in the group) and sender: IGMP joins
		// across the veth, and the group's messages.
		{"mckey", []string{"mckey", "-m", "239.77.0.1", "--ip", "10.77.0.2", "-c", "2", "-S", "1000"},
			[]string{"mckey", "-m", "239.77.0.1", "-s", "--ip", "10.77.0.1", "-S", "1000"},
			"return status 0\n", "return status 0\n", []string{"mckey: joined dgid: ::ffff:239.77.0.1 mlid 0x0 sl 0\n", "data transfers complete"}},
		// cmtime: the two sides sync over TCP through the warm-up and
		// both tests, and each prints its two tables.
		{"cmtime", []string{"cmtime", "-b", "10.77.0.2", "-c", "10"}, []string{"cmtime", "-s", "10.77.0.2", "-c", "10", "-n", "2"},
			"", "", []string{"qp_conn                10\n", " test - no QPs\n", "cm_conn                10\n"}},
		// rstream: a byte stream over rsockets both ways, verified.
		{"rstream", []string{"rstream", "-b", "10.77.0.2", "-S", "10000", "-C", "100", "-I", "2", "-T", "v"},
			[]string{"rstream", "-s", "10.77.0.2", "-S", "10000", "-C", "100", "-I", "2", "-T", "v"},
			"", "", []string{"name      bytes   xfers   iters   total", "\ncustom    9.7k    100     2       3.8m    "}},
		// riostream: riowrites into the peer's mapped memory, verified.
		{"riostream", []string{"riostream", "-b", "10.77.0.2", "-S", "10000", "-C", "100", "-I", "2", "-T", "v"},
			[]string{"riostream", "-s", "10.77.0.2", "-S", "10000", "-C", "100", "-I", "2", "-T", "v"},
			"", "", []string{"name      bytes   xfers   iters   total", "\ncustom    9.7k    100     2       3.8m    "}},
	} {
		t.Run(v.name, func(t *testing.T) {
			// --cm-trace: a run that fails shows each side's CM
			// messages and states.
			server := start(t, b, append(v.srv, "--cm-trace")...)
			time.Sleep(time.Second)
			client := start(t, a, append(v.cli, "--cm-trace")...)
			for i, g := range []*gorxe{client, server} {
				if err := g.wait(t, 60*time.Second); err != nil {
					other := []*gorxe{server, client}[i]
					other.wait(t, 5*time.Second)
					t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s\nthe other side, %v:\nstdout:\n%s\nstderr:\n%s",
						g.cmd.Args[3:], err, g.out.String(), g.errOut.String(), other.cmd.Args[3:], other.out.String(), other.errOut.String())
				}
			}
			if !strings.HasSuffix(server.out.String(), v.srvEnd) || !strings.HasSuffix(client.out.String(), v.cliEnd) {
				t.Fatalf("server printed\n%s\nclient printed\n%s", server.out.String(), client.out.String())
			}
			for _, w := range v.wantOutput {
				if !strings.Contains(server.out.String(), w) || !strings.Contains(client.out.String(), w) {
					t.Fatalf("no %q in\n%s\n%s", w, server.out.String(), client.out.String())
				}
			}
		})
	}
}

// TestRstreamDeadPeer kills an rstream client mid-run, so that no DREQ
// comes: the server waits in its read for ever, as rstream's does, and
// must still end at SIGTERM, as the C program does, with status 1 and the
// signal named.
func TestRstreamDeadPeer(t *testing.T) {
	needRoot(t)
	a, b := newNS(t, "a"), newNS(t, "b")
	vethPair(t, a, b, 1500)
	args := []string{"-S", "65536", "-C", "1000000", "-I", "4", "-T", "v"}
	server := start(t, b, append([]string{"rstream", "-b", "10.77.0.2"}, args...)...)
	time.Sleep(time.Second)
	client := start(t, a, append([]string{"rstream", "-s", "10.77.0.2"}, args...)...)
	time.Sleep(time.Second) // connected, and streaming
	client.cmd.Process.Kill()
	client.wait(t, 10*time.Second)
	time.Sleep(200 * time.Millisecond)
	if err := server.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := server.wait(t, 5*time.Second)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(server.errOut.String(), "terminated signal received") {
		t.Fatalf("server after SIGTERM: %v\nstdout:\n%s\nstderr:\n%s", err, server.out.String(), server.errOut.String())
	}
}

// TestRpingDeadPeer kills one side of an endless rping mid-run, so that
// no DREQ comes (the kernel sends one for a C rping that dies; a killed
// gorxe sends nothing): the other side, waiting for its next message,
// gives up after --give-up, says so, and exits 1, without waiting out
// the CM's retries for a DREP.
func TestRpingDeadPeer(t *testing.T) {
	needRoot(t)
	a, b := newNS(t, "a"), newNS(t, "b")
	vethPair(t, a, b, 1500)
	for _, victim := range []string{"server", "client"} {
		t.Run(victim, func(t *testing.T) {
			server := start(t, b, "rping", "-s", "-a", "10.77.0.2", "-C", "0", "--give-up", "2s")
			time.Sleep(time.Second)
			client := start(t, a, "rping", "-c", "-a", "10.77.0.2", "-C", "0", "--give-up", "2s")
			time.Sleep(time.Second) // connected, and pinging
			killMidRun(t, victim, server, client)
		})
	}
}

// TestCMToolsDeadPeer kills one side of a long ucmatose run (ten
// thousand 2 MB messages each way) mid-transfer: the survivor, waiting
// for completions that will never come, gives up after --give-up, says
// so, and exits 1, where it waited for ever (a killed gorxe sends no
// DREQ), and its Close does not wait out the CM's retries for a DREP.
func TestCMToolsDeadPeer(t *testing.T) {
	needRoot(t)
	a, b := newNS(t, "a"), newNS(t, "b")
	vethPair(t, a, b, 9000)
	args := []string{"-C", "10000", "-S", "2000000", "--give-up", "2s"}
	for _, victim := range []string{"server", "client"} {
		t.Run(victim, func(t *testing.T) {
			server := start(t, b, append([]string{"ucmatose", "--ip", "10.77.0.2"}, args...)...)
			time.Sleep(time.Second)
			client := start(t, a, append([]string{"ucmatose", "-s", "10.77.0.2"}, args...)...)
			time.Sleep(1500 * time.Millisecond) // connected, and sending
			killMidRun(t, victim, server, client)
		})
	}
}

// killMidRun kills victim, "server" or "client", of a pair running with
// --give-up 2s, as SIGKILL kills (no DREQ), and checks that the survivor
// says it gave up on its peer (on stdout or stderr, as the program
// prints) and exits 1 about 2 s later.
func killMidRun(t *testing.T, victim string, server, client *gorxe) {
	t.Helper()
	dead, survivor := server, client
	if victim == "client" {
		dead, survivor = client, server
	}
	dead.cmd.Process.Kill()
	dead.wait(t, 10*time.Second)
	killed := time.Now()
	err := survivor.wait(t, 20*time.Second)
	var exit *exec.ExitError
	said := survivor.out.String() + survivor.errOut.String()
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(said, "stalled: nothing completed for 2s: the peer is gone") {
		t.Fatalf("the %s's survivor: %v\nstdout:\n%s\nstderr:\n%s", victim, err, survivor.out.String(), survivor.errOut.String())
	}
	if d := time.Since(killed); d > 8*time.Second {
		t.Errorf("the survivor took %v to give up, want about 2s", d)
	}
}

// TestUDPong runs librdmacm's udpong as gorxe has it, over datagram
// rsockets between two namespaces on the udp link: the client logs in
// (the first message over UDP, which teaches the server its QPN), then an
// echoed test and a streamed one, each a line of udpong's; the server,
// which answers until it is stopped, printed the logins. (Stock udpong
// cannot run on rxe: see test/interop/interop.sh.)
func TestUDPong(t *testing.T) {
	needRoot(t)
	a, b := newNS(t, "a"), newNS(t, "b")
	vethPair(t, a, b, 1500)
	server := start(t, b, "udpong", "--ip", "10.77.0.2")
	time.Sleep(time.Second)
	for _, v := range []struct {
		args []string
		want string
	}{
		{[]string{"-S", "1000", "-C", "500", "-T", "e"}, "custom    1000    1k      "},
		{[]string{"-S", "500", "-C", "2000"}, "custom    500     "},
	} {
		client := start(t, a, append([]string{"udpong", "-s", "10.77.0.2"}, v.args...)...)
		if err := client.wait(t, 60*time.Second); err != nil || !strings.Contains(client.out.String(), "\n"+v.want) {
			t.Fatalf("udpong %v: %v\nstdout:\n%s\nstderr:\n%s", v.args, err, client.out.String(), client.errOut.String())
		}
	}
	server.cmd.Process.Signal(os.Interrupt)
	if err := server.wait(t, 10*time.Second); err != nil || strings.Count(server.out.String(), "client login from 10.77.0.1\n") != 2 {
		t.Fatalf("server: %v\nstdout:\n%s\nstderr:\n%s", err, server.out.String(), server.errOut.String())
	}
}

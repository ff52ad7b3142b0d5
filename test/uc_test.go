//go:build linux

package test

import (
	"slices"
	"testing"
)

// ucTests are the tests perftest runs on UC QPs (-c UC).
var ucTests = []string{"write_bw", "send_bw", "write_lat", "send_lat"}

// ucArgs returns the gorxe arguments of a short UC run of test, with
// --check.
func ucArgs(test string) []string {
	args := []string{test, "-c", "UC", "--check", "--json", "-m", "4096", "--give-up", "20s"}
	if test == "write_bw" || test == "send_bw" {
		return append(args, "--counters", "-n", "100", "-s", "16384")
	}
	return append(args, "-n", "200", "-s", "1000")
}

// TestUCLinks runs write_bw, send_bw, write_lat and send_lat on UC QPs
// between two namespaces joined by a veth, over the udp and xdp links,
// with every byte checked, the bandwidth servers sending nothing. (A veth
// loses nothing, and this host has no netem: perftest's
// TestRemoteUCLossEnds runs the lossy case over the in-memory fabric.)
func TestUCLinks(t *testing.T) {
	needRoot(t)
	a, b := newNS(t, "a"), newNS(t, "b")
	vethPair(t, a, b, 9000)
	for _, link := range []struct {
		name     string
		srv, cli []string
	}{
		{"udp", []string{"--link", "udp", "--ip", "10.77.0.2"}, []string{"--link", "udp", "--ip", "10.77.0.1", "10.77.0.2"}},
		{"xdp", []string{"--link", "xdp", "--dev", "vb"}, []string{"--link", "xdp", "--dev", "va", "10.77.0.2"}},
	} {
		for _, test := range ucTests {
			t.Run(link.name+"/"+test, func(t *testing.T) {
				base := ucArgs(test)
				srv, _ := pair(t, b, a, append(append([]string{}, base...), link.srv...), append(append([]string{}, base...), link.cli...))
				if test == "write_bw" || test == "send_bw" {
					if sc := jsonCounters(t, srv); sc["sent_pkts"] != 0 || sc["rcvd_pkts"] == 0 {
						t.Errorf("the %s server sent %d packets and received %d; a UC receiver answers nothing", test, sc["sent_pkts"], sc["rcvd_pkts"])
					}
				}
			})
		}
	}
}

// TestUCDuplex runs send_bw -c UC -b, as typed, between two namespaces:
// each side streams 64 KiB UC SENDs at the other and takes in the
// other's at the same time, both on one CPU (pairOneCPU). A side takes
// in what waits on its link before it sends more (rx_batches_before_tx),
// as kernel rxe's receive goes before its sends, so no socket overflows
// and every packet sent arrives; without it, two runs in three lose
// about 2000 datagrams at the receiving sockets (udp_socket_drops), and
// both sides give up waiting for messages UC does not send again.
// (Each side on a CPU of its own is no test of that: a CI neighbour that
// takes one side's CPU lets the other stream at it unanswered.)
func TestUCDuplex(t *testing.T) {
	needRoot(t)
	a, b := newNS(t, "a"), newNS(t, "b")
	vethPair(t, a, b, 1500)
	args := []string{"send_bw", "-d", "rxe0", "-F", "-c", "UC", "-b", "-q", "2", "--counters", "--json", "--give-up", "20s"}
	srv, cli := pairOneCPU(t, b, a, args, append(slices.Clone(args), "10.77.0.2"))
	checkUCDuplex(t, srv, cli, "udp_socket_drops")
}

// TestUCDuplexTAP: the same between two tap-link hosts on a bridge, whose
// TCP exchange goes through the kernel's loopback, so neither has heard
// of the other when the run starts. Each resolves its peer's MAC address
// when its QP moves to RTR, as the kernel does for a RoCE QP, so the
// first burst does not overflow the queue kept for an address being
// resolved (tap_drop_queue_full: 6521 packets before); and the TAP's
// queue (8192 frames) takes the bursts the other host sends while this
// one does not read (if_tx_dropped: 50000 to 78000 frames with 1024).
// Without reading before sending, every run loses 38000 to 126000
// frames at the TAPs' queues.
func TestUCDuplexTAP(t *testing.T) {
	needRoot(t)
	br := bridgeNS(t, 1500)
	args := []string{"send_bw", "-d", "rxe0", "-F", "-c", "UC", "-b", "--counters", "--json", "--give-up", "20s", "--link", "tap", "--bridge", "br0", "-p", "18700"}
	srv, cli := pairOneCPU(t, br, br, append(slices.Clone(args), "--tap", "gxucs", "--ip", "10.78.0.1/24"),
		append(slices.Clone(args), "--tap", "gxucc", "--ip", "10.78.0.2/24", "127.0.0.1"))
	checkUCDuplex(t, srv, cli, "tap_drop_queue_full", "if_tx_dropped")
}

// checkUCDuplex checks that each side of a duplex UC run received every
// packet the other sent, and that the named drop counters are 0.
func checkUCDuplex(t *testing.T, srv, cli *gorxe, drops ...string) {
	t.Helper()
	sc, cc := jsonCounters(t, srv), jsonCounters(t, cli)
	for _, s := range []struct {
		side    string
		c, peer map[string]uint64
	}{{"server", sc, cc}, {"client", cc, sc}} {
		if s.c["rcvd_pkts"] != s.peer["sent_pkts"] || s.c["sent_pkts"] == 0 {
			t.Errorf("%s: received %d of the %d packets sent to it", s.side, s.c["rcvd_pkts"], s.peer["sent_pkts"])
		}
		for _, d := range drops {
			if s.c[d] != 0 {
				t.Errorf("%s: %s %d", s.side, d, s.c[d])
			}
		}
	}
	t.Logf("batches taken in before sending (rx_batches_before_tx): server %d, client %d", sc["rx_batches_before_tx"], cc["rx_batches_before_tx"])
}

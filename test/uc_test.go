//go:build linux

package test

import "testing"

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

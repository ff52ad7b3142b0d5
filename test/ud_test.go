//go:build linux

package test

import "testing"

// TestUDLinks runs send_bw (two QPs) and send_lat on UD QPs (-c UD)
// between two namespaces joined by a veth, over the udp link (IPv4 and
// IPv6 GIDs) and the xdp link, with every byte checked at the veth's
// MTU: a UD message is one packet, and the send_bw server sends nothing.
func TestUDLinks(t *testing.T) {
	needRoot(t)
	a, b := newNS(t, "a"), newNS(t, "b")
	vethPair(t, a, b, 9000)
	for _, link := range []struct {
		name     string
		srv, cli []string
	}{
		{"udp/IPv4", []string{"--link", "udp", "--ip", "10.77.0.2"}, []string{"--link", "udp", "--ip", "10.77.0.1", "10.77.0.2"}},
		{"udp/IPv6", []string{"--link", "udp", "--ip", "fd77::2"}, []string{"--link", "udp", "--ip", "fd77::1", "fd77::2"}},
		{"xdp", []string{"--link", "xdp", "--dev", "vb"}, []string{"--link", "xdp", "--dev", "va", "10.77.0.2"}},
	} {
		for _, test := range []string{"send_bw", "send_lat"} {
			t.Run(link.name+"/"+test, func(t *testing.T) {
				base := []string{test, "-c", "UD", "--check", "--json", "-m", "4096", "-s", "4096", "--give-up", "20s"}
				if test == "send_bw" {
					base = append(base, "--counters", "-n", "500", "-q", "2")
				} else {
					base = append(base, "-n", "200")
				}
				srv, cli := pair(t, b, a, append(append([]string{}, base...), link.srv...), append(append([]string{}, base...), link.cli...))
				if test == "send_bw" {
					if sc, cc := jsonCounters(t, srv), jsonCounters(t, cli); sc["sent_pkts"] != 0 || sc["rcvd_pkts"] != 1000 || cc["sent_pkts"] != 1000 {
						t.Errorf("server sent %d and received %d packets, client sent %d; want 0, 1000, 1000", sc["sent_pkts"], sc["rcvd_pkts"], cc["sent_pkts"])
					}
				}
			})
		}
	}
}

package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestCMToolRefusals: what librdmacm's tools take and gorxe cannot do is
// refused with the reason and exit status 2, before any device opens.
func TestCMToolRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mckey"}, "-m: give the multicast group to join"},
		{[]string{"mckey", "-m", "239.0.0.1", "-l"}, "IBV_QP_CREATE_BLOCK_SELF_MCAST_LB"},
		{[]string{"mckey", "-M", "ff12::1", "-b", "10.0.0.1"}, "unmapped (AF_IB) multicast addresses"},
		{[]string{"mckey", "-m", "239.0.0.1", "-p", "0x2"}, "mckey runs in the UDP port space only"},
		{[]string{"rdma_xclient", "-s", "10.0.0.2", "-c", "x"}, "XRC queue pairs are not supported"},
		{[]string{"rdma_xserver", "-c", "q"}, "-c q: the communication type is r (RC) or x (XRC)"},
		{[]string{"cmtime", "-c", "0"}, "-c 0: at least one connection"},
		{[]string{"cmtime", "-s", "10.0.0.2", "-n", "0"}, "-n 0: at least one thread"},
		{[]string{"cmtime", "-q", "16777216"}, "-q 16777216: a QP number is 1 to 16777215"},
		{[]string{"cmtime", "-m", "-5"}, "-m -5: a delay is not negative"},
		{[]string{"rstream", "-T", "f"}, "does not fork a process per connection"},
		{[]string{"rstream", "-T", "x"}, "-T x: a test option is s, a, b, f, n, r or v"},
		{[]string{"rstream", "-s", "10.0.0.2", "-S", "0"}, "-S 0: a transfer size is 1 byte to 1 GiB"},
		{[]string{"riostream", "-T", "s"}, "-T s: riostream's test options are a, b, n and v"},
		{[]string{"riostream", "-k", "5"}, "invalid option -- 'k'"},
		{[]string{"rcopy", "file"}, "give SOURCE SERVER[:DESTINATION] to copy a file, or nothing to be the server"},
		{[]string{"udpong", "-s", "10.0.0.2", "-S", "8"}, "size must be at least 16 bytes"},
		{[]string{"udpong", "-S", "4000"}, "-S 4000: udpong's message is at most 2056 bytes"},
		{[]string{"udpong", "-T", "x"}, "-T x: a test option is s, a, b, n or e"},
		{[]string{"udpong", "-B", "-1"}, "-B -1: a buffer size is not negative"},
		{[]string{"ucmatose", "--give-up", "0"}, "--give-up 0: want a positive duration"},
		{[]string{"rstream", "--give-up", "5s"}, "unrecognized option '--give-up'"},
	} {
		var out, errOut bytes.Buffer
		if st := run(tc.args, &out, &errOut); st != exitUsage || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%q: status %d, stderr %q; want %d and %q", tc.args, st, errOut.String(), exitUsage, tc.want)
		}
	}
}

// TestCMToolGiveUp: --give-up (10 s unless given) reaches the programs
// that wait for their peer once connected.
func TestCMToolGiveUp(t *testing.T) {
	for _, tool := range []string{"rdma_server", "rdma_client", "rdma_xserver", "rdma_xclient", "ucmatose", "udaddy", "mckey"} {
		args := []string{}
		if tool == "mckey" {
			args = []string{"-m", "239.0.0.1"}
		}
		r, err := parseCMTool(tool, args)
		if err != nil || r.p.GiveUp != 10*time.Second {
			t.Errorf("%s: give-up %v, %v; want 10s", tool, r.p.GiveUp, err)
		}
		if r, err = parseCMTool(tool, append(args, "--give-up", "1500ms")); err != nil || r.p.GiveUp != 1500*time.Millisecond {
			t.Errorf("%s --give-up 1500ms: %v, %v", tool, r.p.GiveUp, err)
		}
	}
}

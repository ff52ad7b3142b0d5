package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestDevinfo: gorxe devinfo prints ibv_devinfo's lines for the device
// on the udp link, its GID with -v, its name with -l, and refuses a port
// other than 1.
func TestDevinfo(t *testing.T) {
	var out, errOut bytes.Buffer
	if st := run([]string{"devinfo", "--ip", "127.0.0.77", "-v", "-d", "rxe0"}, &out, &errOut); st != exitOK {
		t.Fatalf("status %d: %s", st, errOut.String())
	}
	for _, want := range []string{
		"hca_id:\trxe0\n",
		"\ttransport:\t\t\tInfiniBand (0)\n",
		"\tvendor_id:\t\t\t0xffffff\n",
		"\tphys_port_cnt:\t\t\t1\n",
		"\tmax_qp_wr:\t\t\t16384\n",
		"\tmax_mcast_qp_attach:\t\t56\n",
		"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
		"\t\t\tactive_mtu:\t\t4096 (5)\n", // lo's 64 KiB MTU
		"\t\t\tlink_layer:\t\tEthernet\n",
		"\t\t\tGID[  0]:\t\t::ffff:127.0.0.77, RoCE v2\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no line %q in\n%s", want, out.String())
		}
	}
	if !regexp.MustCompile(`(?m)^\tnode_guid:\t\t\t[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}$`).MatchString(out.String()) {
		t.Errorf("no node GUID in\n%s", out.String())
	}
	out.Reset()
	if st := run([]string{"ibv_devinfo", "--ip", "127.0.0.77", "-l"}, &out, &errOut); st != exitOK || out.String() != "1 HCA found:\n\tgorxe0\n" {
		t.Errorf("-l: status %d, %q", st, out.String())
	}
	errOut.Reset()
	if st := run([]string{"devinfo", "--ip", "127.0.0.77", "-i", "2"}, &out, &errOut); st == exitOK || !strings.Contains(errOut.String(), "Invalid port requested for device") {
		t.Errorf("-i 2: status %d, %q", st, errOut.String())
	}
}

// TestDevices: gorxe devices prints ibv_devices' table: the device's name
// and its node GUID, 16 hex digits.
func TestDevices(t *testing.T) {
	var out, errOut bytes.Buffer
	if st := run([]string{"ibv_devices", "--ip", "127.0.0.77", "-d", "rxe7"}, &out, &errOut); st != exitOK {
		t.Fatalf("status %d: %s", st, errOut.String())
	}
	if !regexp.MustCompile(`^    device          \t   node GUID\n    ------          \t----------------\n    rxe7            \t[0-9a-f]{16}\n$`).MatchString(out.String()) {
		t.Fatalf("printed %q", out.String())
	}
}

package main

import (
	"net"
	"strings"
	"testing"
)

// TestLinkPortTaken: a udp link on an address and port something already
// holds, as two tools on one host taking their address from the same
// route get, says what may hold it and which flags to change.
func TestLinkPortTaken(t *testing.T) {
	holder, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	lf := linkFlags{kind: "udp", ip: "127.0.0.1", port: uint(holder.LocalAddr().(*net.UDPAddr).Port)}
	l, err := lf.open()
	if err == nil {
		l.Close()
		t.Fatal("a link opened on a taken port")
	}
	for _, want := range []string{"address already in use", "another RoCE device", "--ip", "--roce-port"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q: want %q in it", err, want)
		}
	}
}

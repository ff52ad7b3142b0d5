package main

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorxe/gorxe/rnic"
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
	for _, want := range []string{"address already in use", "another RoCE device", "--ip 127.0.0.2: all of 127.0.0.0/8 is this host's", "--roce-port"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q: want %q in it", err, want)
		}
	}
}

// TestBusyPollFlag: --busy-poll takes a duration, and 0 or off for never,
// which rnic.Config says with a negative one (its 0 is the default).
func TestBusyPollFlag(t *testing.T) {
	for _, c := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"200us", 200 * time.Microsecond, true},
		{"1ms", time.Millisecond, true},
		{"0", -1, true},
		{"off", -1, true},
		{"-5us", 0, false},
		{"soon", 0, false},
	} {
		var lf linkFlags
		err := lf.setBusyPoll(c.v)
		if (err == nil) != c.ok || c.ok && lf.busyPoll != c.want {
			t.Errorf("--busy-poll %s: %v, error %v; want %v, ok %v", c.v, lf.busyPoll, err, c.want, c.ok)
		}
		var cfg rnic.Config
		lf.applyDevice(&cfg)
		if cfg.BusyPoll != lf.busyPoll {
			t.Errorf("--busy-poll %s: rnic.Config.BusyPoll %v, want %v", c.v, cfg.BusyPoll, lf.busyPoll)
		}
	}
}

// TestBindable: of a server's further addresses, those another socket has
// the port on, and those not this host's, are left out.
func TestBindable(t *testing.T) {
	taken, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := uint16(taken.LocalAddr().(*net.UDPAddr).Port)
	addrs := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("192.0.2.1")}
	if got, want := bindable(addrs, port), addrs[1:2]; !slices.Equal(got, want) {
		t.Errorf("bindable(%v, %d) = %v, want %v", addrs, port, got, want)
	}
}

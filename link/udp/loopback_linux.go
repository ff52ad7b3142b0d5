package udp

import (
	"fmt"
	"net"
	"net/netip"
)

// LoopbackPair opens two links on 127.0.0.1 and 127.0.0.2, on one UDP
// port both addresses have free, as RoCE v2 peers share theirs: two
// devices on one host, for tests and examples. cfg's Addr and Port are
// ignored; the rest applies to both. It tries a few ports, as another
// process may take the one the kernel offered.
func LoopbackPair(cfg Config) ([2]*Link, error) {
	addrs := [2]netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")}
	var last error
	for range 20 {
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrs[0], 0)))
		if err != nil {
			return [2]*Link{}, err
		}
		port := uint16(c.LocalAddr().(*net.UDPAddr).Port)
		c.Close()
		var ls [2]*Link
		for i, a := range addrs {
			cfg.Addr, cfg.Port = a, port
			if ls[i], err = Open(cfg); err != nil {
				break
			}
		}
		if err == nil {
			return ls, nil
		}
		last = err
		for _, l := range ls {
			if l != nil {
				l.Close()
			}
		}
	}
	return [2]*Link{}, fmt.Errorf("udp: no port free on both 127.0.0.1 and 127.0.0.2: %w", last)
}

//go:build linux

package xdp

import (
	"net/netip"
	"time"

	"github.com/gorxe/gorxe/link"
	"github.com/gorxe/gorxe/link/internal/ether"
)

// HoldUnwoken puts a packet (behind link.Headroom) on dst's waiting list
// as send does when dst's next hop is unknown, without waking the
// resolving goroutine: it goes out at the goroutine's next tick, and a
// test has until then to send behind it.
func HoldUnwoken(l *Link, dst netip.Addr, b []byte) {
	l.txMu.Lock()
	defer l.txMu.Unlock()
	pkt := b[link.Headroom:]
	l.pending[dst] = &waiting{
		pkts:  [][]byte{append(make([]byte, ether.HeaderLen), pkt...)},
		bytes: len(pkt),
		since: time.Now(),
	}
	// A packet is held only for a destination that is not the recent one.
	l.recent = netip.Addr{}
}

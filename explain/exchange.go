package explain

import (
	"net/netip"

	"github.com/gorxe/gorxe/internal/capture"
	"github.com/gorxe/gorxe/internal/perfkey"
	"github.com/gorxe/gorxe/wire/bth"
)

// keySegment is a TCP segment of a capture that carries perftest key
// messages, and where it came among the RoCE packets.
type keySegment struct {
	before   int // the RoCE packets before it
	src, dst netip.AddrPort
	keys     []perfkey.Key
}

// keySegments returns a capture.Options TCP hook that collects the key
// messages of perftest's exchange into segs.
func keySegments(segs *[]keySegment) func(*capture.Segment) error {
	return func(s *capture.Segment) error {
		if keys := perfkey.Find(s.Payload); len(keys) > 0 {
			*segs = append(*segs, keySegment{before: s.Before, src: s.Src, dst: s.Dst, keys: keys})
		}
		return nil
	}
}

// keyExchange is one TCP connection's perftest exchange: the distinct key
// messages each end sent, in order (perftest sends the same one again at
// each of its handshakes, and one per QP with -q), and how many of them
// have been paired into connections.
type keyExchange struct {
	ends   [2]netip.AddrPort
	keys   [2][]perfkey.Key
	paired int
}

// exchanged takes in a segment of perftest's exchange. The n-th key each
// end sent name the two QPs of a connection: their packets start a
// connection of its own, as after a CM handshake, even when a run before
// used the same QPNs (a program that opens a new device for each run,
// gorxe's perftest, numbers its QPs alike each time).
func (m *model) exchanged(s keySegment) {
	id := [2]netip.AddrPort{s.src, s.dst}
	if s.dst.Addr().Less(s.src.Addr()) || s.dst.Addr() == s.src.Addr() && s.dst.Port() < s.src.Port() {
		id = [2]netip.AddrPort{s.dst, s.src}
	}
	x := m.keyExchanges[id]
	if x == nil {
		x = &keyExchange{ends: id}
		m.keyExchanges[id] = x
	}
	side := 0
	if s.src != x.ends[0] {
		side = 1
	}
next:
	for _, k := range s.keys {
		for _, had := range x.keys[side] {
			if had == k {
				continue next
			}
		}
		x.keys[side] = append(x.keys[side], k)
	}
	for x.paired < len(x.keys[0]) && x.paired < len(x.keys[1]) {
		a, b := x.keys[0][x.paired], x.keys[1][x.paired]
		m.connectQPs(keyAddr(a, x.ends[0]), bth.QPN(a.QPN), keyAddr(b, x.ends[1]), bth.QPN(b.QPN))
		x.paired++
	}
}

// keyAddr is the address a key message's GID names, or else that of the
// TCP end that sent it.
func keyAddr(k perfkey.Key, from netip.AddrPort) string {
	if a, ok := k.Addr(); ok {
		return a.String()
	}
	return from.Addr().String()
}

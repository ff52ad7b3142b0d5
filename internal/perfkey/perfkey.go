// Package perfkey reads and writes perftest's key message: the line of
// hex fields (LID, out_reads, QPN, PSN, rkey, vaddr, GID, SRQN) that each
// side of a perftest run sends the other over its TCP connection to
// connect their QPs (perftest_communication.c, KEY_PRINT_FMT_GID). gorxe's
// perftest speaks it; explain reads it in a capture to know which QPs a
// run connects, and from which PSNs.
package perfkey

import (
	"fmt"
	"net/netip"
	"strconv"
)

// Len is the message's length: KEY_MSG_SIZE_GID, the trailing NUL
// included.
const Len = 108

// Key is the message's fields: perftest's struct pingpong_dest as it
// travels.
type Key struct {
	LID      uint16
	OutReads uint16 // out_reads: the max outstanding RDMA READs/atomics it offers
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits: the first PSN the sender's QP sends
	RKey     uint32
	VAddr    uint64
	GID      [16]byte
	SRQN     uint32
}

// Addr returns the address the GID names: an IPv4 address for an
// IPv4-mapped GID (RoCE v2 over IPv4), else the IPv6 address; false for
// the zero GID.
func (k Key) Addr() (netip.Addr, bool) {
	a := netip.AddrFrom16(k.GID)
	if a.IsUnspecified() {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// Append appends the message, "%04x:%04x:%06x:%06x:%08x:%016llx:", then
// 16 × "%02x:" and "%08x:", and the NUL, to b.
func (k Key) Append(b []byte) ([]byte, error) {
	if k.QPN > 0xffffff || k.PSN > 0xffffff {
		return b, fmt.Errorf("QPN %#x and PSN %#x must fit 24 bits", k.QPN, k.PSN)
	}
	b = fmt.Appendf(b, "%04x:%04x:%06x:%06x:%08x:%016x:", k.LID, k.OutReads, k.QPN, k.PSN, k.RKey, k.VAddr)
	for _, g := range k.GID {
		b = fmt.Appendf(b, "%02x:", g)
	}
	b = fmt.Appendf(b, "%08x:", k.SRQN)
	return append(b, 0), nil
}

// fields are the widths of the message's fields, in hex digits.
var fields = [...]struct {
	name  string
	width int
}{
	{"LID", 4}, {"out_reads", 4}, {"QPN", 6}, {"PSN", 6}, {"rkey", 8}, {"vaddr", 16},
	{"GID[0]", 2}, {"GID[1]", 2}, {"GID[2]", 2}, {"GID[3]", 2}, {"GID[4]", 2}, {"GID[5]", 2},
	{"GID[6]", 2}, {"GID[7]", 2}, {"GID[8]", 2}, {"GID[9]", 2}, {"GID[10]", 2}, {"GID[11]", 2},
	{"GID[12]", 2}, {"GID[13]", 2}, {"GID[14]", 2}, {"GID[15]", 2}, {"SRQN", 8},
}

// Parse parses a message strictly: exactly the fields and widths sprintf
// writes, each followed by ':', then a NUL.
func Parse(msg []byte) (Key, error) {
	var k Key
	if len(msg) != Len {
		return k, fmt.Errorf("key message is %d bytes, want %d", len(msg), Len)
	}
	if msg[Len-1] != 0 {
		return k, fmt.Errorf("key message %q does not end in NUL", msg)
	}
	p := 0
	var v [len(fields)]uint64
	for i, f := range fields {
		field := msg[p : p+f.width]
		if msg[p+f.width] != ':' {
			return k, fmt.Errorf("key message %q: no ':' after %s at byte %d", msg[:Len-1], f.name, p+f.width)
		}
		x, err := strconv.ParseUint(string(field), 16, 64)
		if err != nil || field[0] == '+' || field[0] == '-' {
			return k, fmt.Errorf("key message %q: %s %q is not %d hex digits", msg[:Len-1], f.name, field, f.width)
		}
		v[i] = x
		p += f.width + 1
	}
	k.LID, k.OutReads, k.QPN, k.PSN = uint16(v[0]), uint16(v[1]), uint32(v[2]), uint32(v[3])
	k.RKey, k.VAddr = uint32(v[4]), v[5]
	for i := range k.GID {
		k.GID[i] = byte(v[6+i])
	}
	k.SRQN = uint32(v[22])
	return k, nil
}

// Find returns the key messages in b, a TCP segment's payload, in order:
// a segment may carry one, several, or one behind perftest's other
// exchanges (its version, its MTU).
func Find(b []byte) []Key {
	var keys []Key
	for i := 0; i+Len <= len(b); {
		if b[i+Len-1] == 0 && b[i+4] == ':' {
			if k, err := Parse(b[i : i+Len]); err == nil {
				keys = append(keys, k)
				i += Len
				continue
			}
		}
		i++
	}
	return keys
}

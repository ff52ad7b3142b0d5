package pingpong

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/gorxe/gorxe/wire/bth"
)

// MessageLen is the size of the address message each side writes:
// sizeof "0000:000000:000000:" plus 32 hex digits of GID, the trailing NUL
// included (rc_pingpong.c, pp_client_exch_dest and pp_server_exch_dest).
const MessageLen = 52

// Done is what the client writes once it has read the server's address,
// "done" with its NUL (sizeof "done" bytes). The server waits for it
// before it closes the connection.
const Done = "done\x00"

// ErrMessage is returned for an address message that is not
// "LID:QPN:PSN:GID" as rc_pingpong writes it.
var ErrMessage = errors.New("pingpong: malformed address message")

// Dest is rc_pingpong's struct pingpong_dest: what one side tells the
// other about its QP.
type Dest struct {
	LID uint16  // 0 on RoCE
	QPN bth.QPN // 24 bits
	PSN bth.PSN // 24 bits: the first PSN this side's requester sends
	GID [16]byte
}

// Message returns d as rc_pingpong writes it: the text
//
//	%04x:%06x:%06x:%s
//
// of LID, QPN, PSN and the wire GID (the 16 GID bytes as 32 lowercase hex
// digits, in order: pingpong.c's gid_to_wire_gid), then a NUL. With the
// widths of the fields it always fills MessageLen bytes exactly.
func (d Dest) Message() [MessageLen]byte {
	var m [MessageLen]byte // the last byte stays the NUL
	copy(m[:], fmt.Sprintf("%04x:%06x:%06x:%x", d.LID, uint32(d.QPN)&bth.QPNMask, uint32(d.PSN)&bth.PSNMask, d.GID[:]))
	return m
}

// ParseMessage reads an address message. rc_pingpong reads one with
// sscanf("%x:%x:%x:%s") and never looks at the result; ParseMessage
// accepts what that reads correctly and refuses the rest with ErrMessage:
//
//   - the text ends at the first NUL, which must come within the message;
//   - LID, QPN and PSN are 1 to 8 hex digits of either case, as %x reads
//     them whatever their width, and must fit 16, 24 and 24 bits;
//   - the GID is exactly 32 hex digits (wire_gid_to_gid reads 4 x 8).
//
// Only the message's length is fixed: a shorter one is an error.
func ParseMessage(m []byte) (Dest, error) {
	if len(m) != MessageLen {
		return Dest{}, fmt.Errorf("%w: %d bytes, want %d", ErrMessage, len(m), MessageLen)
	}
	end := bytes.IndexByte(m, 0)
	if end < 0 {
		return Dest{}, fmt.Errorf("%w: %q has no NUL", ErrMessage, m)
	}
	text := m[:end]
	fields := bytes.Split(text, []byte(":"))
	if len(fields) != 4 {
		return Dest{}, fmt.Errorf("%w: %q: want LID:QPN:PSN:GID", ErrMessage, text)
	}
	var d Dest
	for i, f := range []struct {
		name string
		bits int
		set  func(uint64)
	}{
		{"LID", 16, func(v uint64) { d.LID = uint16(v) }},
		{"QPN", 24, func(v uint64) { d.QPN = bth.QPN(v) }},
		{"PSN", 24, func(v uint64) { d.PSN = bth.PSN(v) }},
	} {
		v, err := parseHex(fields[i], f.bits)
		if err != nil {
			return Dest{}, fmt.Errorf("%w: %q: %s %v", ErrMessage, text, f.name, err)
		}
		f.set(v)
	}
	gid := fields[3]
	if len(gid) != 2*len(d.GID) {
		return Dest{}, fmt.Errorf("%w: %q: GID has %d characters, want 32 hex digits", ErrMessage, text, len(gid))
	}
	for i := range d.GID {
		v, err := parseHex(gid[2*i:2*i+2], 8)
		if err != nil {
			return Dest{}, fmt.Errorf("%w: %q: GID %v", ErrMessage, text, err)
		}
		d.GID[i] = byte(v)
	}
	return d, nil
}

// parseHex reads f, 1 to 8 hex digits, as a value of at most bits bits.
func parseHex(f []byte, bits int) (uint64, error) {
	if len(f) == 0 || len(f) > 8 {
		return 0, fmt.Errorf("%q: want 1 to 8 hex digits", f)
	}
	for _, c := range f {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return 0, fmt.Errorf("%q: not hex", f)
		}
	}
	v, err := strconv.ParseUint(string(f), 16, 64)
	if err != nil || v>>bits != 0 {
		return 0, fmt.Errorf("%q: more than %d bits", f, bits)
	}
	return v, nil
}

// FormatGID returns gid as rc_pingpong prints it, with glibc's
// inet_ntop(AF_INET6): lowercase groups without leading zeros, the
// longest run of two or more zero groups (the first of equals) as "::",
// and the last 32 bits as a dotted quad when the GID is IPv4-mapped
// (::ffff:a.b.c.d) or IPv4-compatible (::a.b.c.d). A RoCE v2 IPv4 GID
// prints as "::ffff:10.0.0.1"; the zero GID of a side without -g as "::".
//
// glibc (resolv/inet_ntop.c, from BIND) writes the dotted quad when the
// "::" run starts the address and is exactly 6 groups long, or 5 groups
// long and followed by ffff. Go's netip prints the IPv4-compatible case
// in hex (::a00:1), hence this function.
func FormatGID(gid [16]byte) string {
	var w [8]uint16
	for i := range w {
		w[i] = uint16(gid[2*i])<<8 | uint16(gid[2*i+1])
	}
	// The longest run of zero groups, the first of equal ones; none
	// shorter than two.
	best, bestLen := -1, 0
	for i := 0; i < len(w); {
		if w[i] != 0 {
			i++
			continue
		}
		j := i
		for j < len(w) && w[j] == 0 {
			j++
		}
		if j-i > bestLen {
			best, bestLen = i, j-i
		}
		i = j
	}
	if bestLen < 2 {
		best, bestLen = -1, 0
	}
	var b []byte
	for i := 0; i < len(w); i++ {
		if best >= 0 && i >= best && i < best+bestLen {
			if i == best {
				b = append(b, ':')
			}
			continue
		}
		if i != 0 {
			b = append(b, ':')
		}
		if i == 6 && best == 0 && (bestLen == 6 || bestLen == 5 && w[5] == 0xffff) {
			b = fmt.Appendf(b, "%d.%d.%d.%d", gid[12], gid[13], gid[14], gid[15])
			return string(b)
		}
		b = strconv.AppendUint(b, uint64(w[i]), 16)
	}
	if best >= 0 && best+bestLen == len(w) {
		b = append(b, ':')
	}
	return string(b)
}

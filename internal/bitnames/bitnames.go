// Package bitnames prints sets of flag bits the way rdma-core's tools and
// gorxe's logs show them: "LOCAL_WRITE|REMOTE_READ".
package bitnames

import (
	"strconv"
	"strings"
)

// Name is the name of one bit of a flag type.
type Name[T ~uint32] struct {
	Bit  T
	Name string
}

// String joins the names of v's bits with "|" in the order of names; bits
// without a name are appended in hex, and no bits at all is "0".
func String[T ~uint32](v T, names []Name[T]) string {
	if v == 0 {
		return "0"
	}
	var b strings.Builder
	for _, n := range names {
		if v&n.Bit != 0 {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(n.Name)
			v &^= n.Bit
		}
	}
	if v != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString("0x")
		b.WriteString(strconv.FormatUint(uint64(v), 16))
	}
	return b.String()
}

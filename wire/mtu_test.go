package wire_test

import (
	"testing"

	"github.com/gorxe/gorxe/wire"
)

func TestMTU(t *testing.T) {
	for _, c := range []struct {
		m     wire.MTU
		bytes int
		s     string
	}{
		{0, 0, "mtu(0)"},
		{wire.MTU256, 256, "256"},
		{wire.MTU512, 512, "512"},
		{wire.MTU1024, 1024, "1024"},
		{wire.MTU2048, 2048, "2048"},
		{wire.MTU4096, 4096, "4096"},
		{6, 0, "mtu(6)"},
		{15, 0, "mtu(15)"},
	} {
		if got := c.m.Bytes(); got != c.bytes {
			t.Errorf("MTU(%d).Bytes() = %d, want %d", uint8(c.m), got, c.bytes)
		}
		if got := c.m.String(); got != c.s {
			t.Errorf("MTU(%d).String() = %q, want %q", uint8(c.m), got, c.s)
		}
		if c.bytes != 0 {
			if got := wire.MTUFromBytes(c.bytes); got != c.m {
				t.Errorf("MTUFromBytes(%d) = %d, want %d", c.bytes, got, c.m)
			}
		}
	}
	for _, n := range []int{0, 128, 1000, 1500, 8192, -1} {
		if got := wire.MTUFromBytes(n); got != 0 {
			t.Errorf("MTUFromBytes(%d) = %d, want 0", n, got)
		}
	}
}

package wire

import (
	"testing"

	"github.com/gorxe/gorxe/wire/bth"
)

// TestUDPSourcePort checks the formula against ports kernel rxe was seen
// to send (../shared/reference/real-rnics.md §1), and that it is the same
// from either end.
func TestUDPSourcePort(t *testing.T) {
	for _, c := range []struct {
		fl         uint32
		lqpn, rqpn bth.QPN
		want       uint16
	}{
		{0, 0x14, 0x14, 49552}, // rxe 6.1, QP 0x14 <-> 0x14
		{0, 0x20, 0x21, 50208}, // rxe 6.8, ibv_rc_pingpong 0x20 <-> 0x21
		{0, 0x21, 0x20, 50208},
		{0x12345, 1, 2, 0xc000 | (0x12345&0x3fff ^ 0x12345>>14)}, // a flow label set wins
		{74565, 0x11, 0x11, 58177},                               // rxe 6.12, perftest 6.24 --flow_label 74565 -q 2, both QPs
		{74565, 0x12, 0x12, 58177},
	} {
		if got := UDPSourcePort(c.fl, c.lqpn, c.rqpn); got != c.want {
			t.Errorf("UDPSourcePort(%#x, %#x, %#x) = %d, want %d", c.fl, c.lqpn, c.rqpn, got, c.want)
		}
	}
	for l := bth.QPN(0x11); l < 0x11+500; l += 7 {
		for r := bth.QPN(0x11); r < 0xffffff; r = r*3 + 1 {
			a, b := UDPSourcePort(0, l, r), UDPSourcePort(0, r, l)
			if a != b || a < 0xc000 {
				t.Fatalf("QPs %#x, %#x: ports %d and %d", l, r, a, b)
			}
		}
	}
}

package wire

import "fmt"

// MTU is a path MTU in the IBTA's 4-bit encoding, the one enum ibv_mtu
// uses and the connection manager's REQ carries: 1 is 256 bytes, 5 is
// 4096. qp.MTU is this type.
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, or 0 for a value that names none.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// String returns the MTU in bytes, like "1024", or "mtu(7)" for a value
// that names none.
func (m MTU) String() string {
	if n := m.Bytes(); n != 0 {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("mtu(%d)", uint8(m))
}

// MTUFromBytes returns the MTU of n bytes (256, 512, ..., 4096), or 0.
func MTUFromBytes(n int) MTU {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

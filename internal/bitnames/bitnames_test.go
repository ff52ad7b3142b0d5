package bitnames

import "testing"

type flags uint32

func TestString(t *testing.T) {
	names := []Name[flags]{{1, "A"}, {2, "B"}, {8, "D"}}
	for v, want := range map[flags]string{0: "0", 1: "A", 3: "A|B", 9: "A|D", 4: "0x4", 0x13: "A|B|0x10"} {
		if got := String(v, names); got != want {
			t.Errorf("String(%#x) = %q, want %q", uint32(v), got, want)
		}
	}
}

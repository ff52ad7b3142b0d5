package wrap

import "testing"

func TestText(t *testing.T) {
	for _, tt := range []struct {
		s             string
		width, indent int
		want          string
	}{
		{"", 10, 0, ""},
		{"one two three", 20, 0, "one two three"},
		{"one two three", 7, 0, "one two\nthree"},
		{"one two three", 9, 2, "one two\n  three"},
		{"  spaced   out  ", 80, 0, "spaced out"},
		{"averyveryverylongword x", 5, 0, "averyveryverylongword\nx"},
	} {
		if got := Text(tt.s, tt.width, tt.indent); got != tt.want {
			t.Errorf("Text(%q, %d, %d) = %q, want %q", tt.s, tt.width, tt.indent, got, tt.want)
		}
	}
}

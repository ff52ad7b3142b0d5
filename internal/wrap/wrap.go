// Package wrap breaks prose into lines for a terminal.
package wrap

import "strings"

// Text breaks s into lines of at most width bytes at spaces (a word
// longer than width gets a line of its own). Every line is taken to start
// indent bytes in: the first after what the caller prints before it, the
// others after indent spaces that Text writes.
func Text(s string, width, indent int) string {
	var b strings.Builder
	line, empty := indent, true
	for _, w := range strings.Fields(s) {
		switch {
		case !empty && line+1+len(w) > width:
			b.WriteByte('\n')
			b.WriteString(strings.Repeat(" ", indent))
			line = indent
		case !empty:
			b.WriteByte(' ')
			line++
		}
		b.WriteString(w)
		line += len(w)
		empty = false
	}
	return b.String()
}

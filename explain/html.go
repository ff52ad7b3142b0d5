package explain

import (
	"encoding/json"
	"html"
	"io"
)

// WriteHTML writes r as a ladder diagram. (A placeholder until the
// diagram lands: the report's JSON in a page.)
func WriteHTML(w io.Writer, r *Report, title string) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, "<!doctype html><title>"+html.EscapeString(title)+"</title><pre>"+html.EscapeString(string(b))+"</pre>")
	return err
}

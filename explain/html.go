package explain

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"html"
	"io"
)

// The page's style and program, kept in files of their own so they read as
// CSS and JavaScript; WriteHTML copies them into every page.
var (
	//go:embed ladder.css
	ladderCSS string
	//go:embed ladder.js
	ladderJS string
)

// WriteHTML writes r as one self-contained HTML page: a ladder diagram of
// the packets between the capture's endpoints, with the explanation of the
// packet one clicks on, the transport events beside the lanes and, when
// the report has the devices' rate changes, a chart of each QP's rate.
//
// The page needs nothing but itself: its style and script are inline, the
// report is embedded as JSON, and its Content-Security-Policy forbids any
// fetch, so it opens the same from a mail attachment as from a web server.
func WriteHTML(w io.Writer, r *Report, title string) error {
	if r == nil {
		r = &Report{}
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	t := html.EscapeString(title)
	bw.WriteString(pageHead)
	bw.WriteString(t)
	bw.WriteString("</title>\n<style>\n")
	bw.WriteString(ladderCSS)
	bw.WriteString("</style>\n</head>\n<body>\n<header>\n<h1>")
	bw.WriteString(t)
	bw.WriteString("</h1>\n")
	bw.WriteString(pageBody)
	// The report goes in a script element the browser does not run, for
	// the page's program to parse. The encoder escapes <, > and & in
	// strings as \u003c, \u003e and \u0026, so no text in the report can
	// close the element ("</script>") or open a comment ("<!--") in it.
	bw.WriteString(`<script type="application/json" id="report">`)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(true)
	if err := enc.Encode(r); err != nil {
		return err
	}
	bw.WriteString("</script>\n<script>\n")
	bw.WriteString(ladderJS)
	bw.WriteString("</script>\n</body>\n</html>\n")
	return bw.Flush()
}

// pageHead opens the page, up to the title. The Content-Security-Policy
// allows the inline style and script and nothing else: the page cannot
// load a font, an image or a script from anywhere, nor send anything.
// The empty data: icon stops the browser asking for /favicon.ico.
const pageHead = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>`

// pageBody is the page's frame, after the title's heading; the script
// fills it in from the report.
const pageBody = `<p id="counts"></p>
<ul id="summaries"></ul>
</header>
<nav id="toolbar" aria-label="diagram controls">
<button type="button" id="zoom-out" title="less space between packets (-, ctrl+wheel)">−</button>
<button type="button" id="zoom-in" title="more space between packets (+, ctrl+wheel)">+</button>
<label>QP <select id="qp-filter"></select></label>
<button type="button" id="prev-anomaly" title="previous packet with an anomaly (A)">◀ previous anomaly</button>
<button type="button" id="next-anomaly" title="next packet with an anomaly (a)">next anomaly ▶</button>
<span id="position"></span>
</nav>
<main>
<div id="left">
<div id="diagram" tabindex="0">
<div id="lane-head"></div>
<div id="canvas"><svg id="ladder" role="img" aria-label="ladder diagram of the packets"></svg></div>
</div>
<section id="rates" hidden>
<h2>Rate of each QP (DCQCN)</h2>
<svg id="rate-chart" role="img" aria-label="rate of each QP over time"></svg>
</section>
</div>
<aside>
<section id="details" aria-live="polite"><p class="empty">Click a packet to see what it is and what it did.</p></section>
<section id="legend"><h2>Legend</h2><ul id="legend-list"></ul>
<p class="keys">Click a packet to see it explained. Keys: <kbd>n</kbd> or <kbd>↓</kbd> the next packet, <kbd>p</kbd> or <kbd>↑</kbd> the previous one, <kbd>a</kbd> / <kbd>A</kbd> the next / previous anomaly, <kbd>+</kbd> / <kbd>-</kbd> zoom (or ctrl+wheel).</p>
</section>
</aside>
</main>
`

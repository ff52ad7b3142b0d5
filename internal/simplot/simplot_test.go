package simplot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"image/png"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot"
)

// pngSignature is the eight bytes every PNG file starts with (RFC 2083,
// 3.1).
const pngSignature = "\x89PNG\r\n\x1a\n"

// flows returns n series of points samples each, rates that ring down
// towards a fair share of 100 Gb/s, as a DCQCN run's do.
func flows(n, points int) []Series {
	ss := make([]Series, n)
	for f := range ss {
		s := Series{Name: fmt.Sprintf("flow %d", f), X: make([]float64, points), Y: make([]float64, points)}
		for i := range points {
			t := float64(i) * 20 / float64(points)
			s.X[i] = t
			s.Y[i] = 100/float64(n) + 30*math.Exp(-t/5)*math.Sin(3*t+float64(f))
		}
		ss[f] = s
	}
	return ss
}

// page returns a rate figure of n flows over a queue figure, the page
// the simulator draws for a run.
func page(n, points int) []Figure {
	q := Series{Name: "switch 0 port 1", X: make([]float64, points), Y: make([]float64, points)}
	for i := range points {
		q.X[i] = float64(i) * 20 / float64(points)
		q.Y[i] = 150 + 100*math.Sin(q.X[i])
	}
	return []Figure{
		{
			Title: "Sending rate", YLabel: "rate (Gb/s)", Series: flows(n, points), YRange: Range{0, 100},
			Refs: []RefLine{{Y: 100 / float64(n), Label: "fair share"}, {Y: 100, Label: "line rate"}},
		},
		{
			Title: "Switch queue", XLabel: "time (ms)", YLabel: "queue (KB)", Series: []Series{q},
			Refs: []RefLine{{Y: 5, Label: "Kmin"}, {Y: 200, Label: "Kmax"}},
		},
	}
}

func TestPNG(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, "png", page(4, 500)...); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b.Bytes(), []byte(pngSignature)) {
		t.Fatalf("output starts % x, not the PNG signature", b.Bytes()[:min(8, b.Len())])
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatal(err)
	}
	// Two figures of the default size at 150 dots per inch.
	if size := img.Bounds().Size(); size.X != 1050 || size.Y != 900 {
		t.Fatalf("image is %v pixels, want 1050x900", size)
	}
}

// svgTexts parses an SVG document strictly and returns the text of its
// <text> elements, as a reader of the XML sees them (entities decoded).
func svgTexts(t *testing.T, doc []byte) []string {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	var texts []string
	var root string
	inText := false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Local
			}
			inText = tok.Name.Local == "text"
		case xml.EndElement:
			inText = false
		case xml.CharData:
			if inText {
				texts = append(texts, string(tok))
			}
		}
	}
	if root != "svg" {
		t.Fatalf("root element is <%s>, want <svg>", root)
	}
	return texts
}

func TestSVG(t *testing.T) {
	figs := page(3, 200)
	figs[0].Title = `Rate <DCQCN> & "friends"`
	figs[0].Series[1].Name = "flow 1 -> 'B'"
	var b bytes.Buffer
	if err := Write(&b, "svg", figs...); err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, b.Bytes())
	for _, want := range []string{
		`Rate <DCQCN> & "friends"`, "Switch queue", "rate (Gb/s)", "time (ms)",
		"flow 0", "flow 1 -> 'B'", "flow 2", "switch 0 port 1",
		"fair share", "line rate", "Kmin", "Kmax",
	} {
		if !contains(texts, want) {
			t.Errorf("SVG has no text %q; it has %q", want, texts)
		}
	}
}

func contains(texts []string, s string) bool {
	for _, t := range texts {
		if t == s {
			return true
		}
	}
	return false
}

// TestLegendCap checks that a figure of many series lists MaxLegend-1 of
// them and a count of the rest, and one of MaxLegend series lists all.
func TestLegendCap(t *testing.T) {
	for _, tc := range []struct {
		n          int
		shown, not []string
	}{
		{8, []string{"flow 0", "flow 7"}, []string{"and 1 more"}},
		{9, []string{"flow 0", "flow 6", "and 2 more"}, []string{"flow 7", "flow 8"}},
		{64, []string{"flow 0", "flow 6", "and 57 more"}, []string{"flow 7", "flow 63"}},
	} {
		var b bytes.Buffer
		if err := Write(&b, "svg", Figure{Title: "rates", Series: flows(tc.n, 50)}); err != nil {
			t.Fatal(err)
		}
		texts := svgTexts(t, b.Bytes())
		for _, s := range tc.shown {
			if !contains(texts, s) {
				t.Errorf("%d series: legend lacks %q", tc.n, s)
			}
		}
		for _, s := range tc.not {
			if contains(texts, s) {
				t.Errorf("%d series: legend has %q", tc.n, s)
			}
		}
	}
}

// TestLegendNames checks that a long name is cut in the legend and that an
// unnamed series has no entry and does not count towards MaxLegend.
func TestLegendNames(t *testing.T) {
	ss := flows(MaxLegend, 20)
	ss[0].Name = strings.Repeat("flow ", 10)
	ss = append(ss, Series{X: []float64{0, 1}, Y: []float64{2, 3}}) // unnamed
	var b bytes.Buffer
	if err := Write(&b, "svg", Figure{Series: ss}); err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, b.Bytes())
	if cut := "flow flow flow flow flo…"; !contains(texts, cut) {
		t.Errorf("legend lacks the cut name %q; it has %q", cut, texts)
	}
	if !contains(texts, fmt.Sprintf("flow %d", MaxLegend-1)) {
		t.Errorf("an unnamed series took the place of flow %d in the legend", MaxLegend-1)
	}
	for _, s := range texts {
		if strings.Contains(s, "more") {
			t.Errorf("legend has entry %q", s)
		}
	}
}

// TestDeterministic checks that the same figures give the same bytes, in
// this process and in a fresh one (a new process draws with fresh font
// caches and new map seeds), for both formats and a page that uses every
// colour and dash.
func TestDeterministic(t *testing.T) {
	for _, format := range []string{"png", "svg"} {
		var a, b bytes.Buffer
		if err := Write(&a, format, page(64, 300)...); err != nil {
			t.Fatal(err)
		}
		if err := Write(&b, format, page(64, 300)...); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatalf("%s: two writes of the same page differ (%d and %d bytes)", format, a.Len(), b.Len())
		}

		path := filepath.Join(t.TempDir(), "page."+format)
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWritePage$")
		cmd.Env = append(os.Environ(), "SIMPLOT_HELPER_OUT="+path)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helper process: %v\n%s", err, out)
		}
		c, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Bytes(), c) {
			t.Fatalf("%s: another process drew the same page differently (%d and %d bytes)", format, a.Len(), len(c))
		}
	}
}

// TestHelperWritePage is TestDeterministic's other process: it writes the
// page to the file SIMPLOT_HELPER_OUT names, and does nothing without it.
func TestHelperWritePage(t *testing.T) {
	path := os.Getenv("SIMPLOT_HELPER_OUT")
	if path == "" {
		t.Skip("run by TestDeterministic")
	}
	if err := WriteFile(path, page(64, 300)...); err != nil {
		t.Fatal(err)
	}
}

func TestErrors(t *testing.T) {
	ok := Series{Name: "a", X: []float64{0, 1}, Y: []float64{1, 2}}
	for _, tc := range []struct {
		name   string
		page   Page
		format string
		want   error
	}{
		{"no figures", Page{}, "png", ErrNoFigures},
		{"unknown format", Page{Figures: []Figure{{Series: []Series{ok}}}}, "jpg", ErrFormat},
		{"format by extension", Page{Figures: []Figure{{Series: []Series{ok}}}}, ".png", ErrFormat},
		{"lengths", Page{Figures: []Figure{{Series: []Series{ok, {Name: "b", X: []float64{0, 1}, Y: []float64{1}}}}}}, "svg", ErrLength},
		{"NaN", Page{Figures: []Figure{{Series: []Series{{X: []float64{0, 1}, Y: []float64{1, math.NaN()}}}}}}, "svg", ErrValue},
		{"infinite X", Page{Figures: []Figure{{Series: []Series{{X: []float64{math.Inf(1)}, Y: []float64{1}}}}}}, "svg", ErrValue},
		{"infinite reference", Page{Figures: []Figure{{Refs: []RefLine{{Y: math.Inf(-1)}}}}}, "svg", ErrValue},
		{"empty range", Page{Figures: []Figure{{Series: []Series{ok}, YRange: Range{5, 5}}}}, "svg", ErrRange},
		{"reversed range", Page{Figures: []Figure{{Series: []Series{ok}, YRange: Range{10, 0}}}}, "svg", ErrRange},
		{"NaN range", Page{Figures: []Figure{{Series: []Series{ok}, YRange: Range{0, math.NaN()}}}}, "svg", ErrRange},
		{"too narrow", Page{Figures: []Figure{{Series: []Series{ok}}}, Width: 0.5}, "png", ErrSize},
		{"too high", Page{Figures: []Figure{{Series: []Series{ok}}}, Height: 1e6}, "png", ErrSize},
		{"negative", Page{Figures: []Figure{{Series: []Series{ok}}}, Width: -7}, "png", ErrSize},
		{"NaN size", Page{Figures: []Figure{{Series: []Series{ok}}}, Height: math.NaN()}, "png", ErrSize},
	} {
		var b bytes.Buffer
		err := tc.page.Write(&b, tc.format)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got error %v, want %v", tc.name, err, tc.want)
		}
		if b.Len() != 0 {
			t.Errorf("%s: wrote %d bytes along with the error", tc.name, b.Len())
		}
	}
}

// TestErrorSaysWhere checks that an error names the figure, the series
// and the point at fault, which is what a reader of a failed run needs.
func TestErrorSaysWhere(t *testing.T) {
	figs := page(4, 10)
	figs[1].Series[0].Y[7] = math.NaN()
	err := Write(io.Discard, "png", figs...)
	for _, want := range []string{`figure 1 ("Switch queue")`, `series 0 ("switch 0 port 1")`, "point 7"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %s", err, want)
		}
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.png", "b.svg", "C.PNG"} {
		path := filepath.Join(dir, name)
		if err := WriteFile(path, page(2, 50)...); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		isPNG := bytes.HasPrefix(b, []byte(pngSignature))
		if wantPNG := strings.EqualFold(filepath.Ext(name), ".png"); isPNG != wantPNG {
			t.Errorf("%s: PNG signature %v, want %v", name, isPNG, wantPNG)
		}
	}
	for _, name := range []string{"c.jpg", "noext"} {
		path := filepath.Join(dir, name)
		if err := WriteFile(path, page(2, 50)...); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: got error %v, want %v", name, err, ErrFormat)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: bad input left a file behind (%v)", name, err)
		}
	}
	if err := WriteFile(filepath.Join(dir, "no", "such", "dir.png"), page(1, 5)...); err == nil {
		t.Error("writing into a missing directory: no error")
	}
}

// TestOddInput draws input that is valid but unusual, each of which
// drives gonum through a path a plain run does not: it must draw without
// error (Write turns a gonum panic into one).
func TestOddInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		figs []Figure
	}{
		{"figure without series", []Figure{{Title: "empty"}}},
		{"series without points", []Figure{{Series: []Series{{Name: "idle"}}}}},
		{"one point", []Figure{{Series: []Series{{Name: "p", X: []float64{3}, Y: []float64{4}}}}}},
		{"constant", []Figure{{Series: []Series{{Name: "c", X: []float64{0, 1, 2}, Y: []float64{7, 7, 7}}}}}},
		{"reference outside fixed range", []Figure{{Series: flows(2, 10), YRange: Range{0, 100}, Refs: []RefLine{{Y: 250, Label: "above"}, {Y: -1, Label: "below"}}}}},
		{"reference only", []Figure{{Refs: []RefLine{{Y: 10, Label: "fair share"}}}}},
		{"data beyond fixed range", []Figure{{Series: []Series{{Name: "x", X: []float64{0, 1, 2}, Y: []float64{-50, 500, 50}}}, YRange: Range{0, 100}}}},
		{"huge values", []Figure{{Series: []Series{{Name: "h", X: []float64{-1e308, 1e308}, Y: []float64{-1e308, 1e308}}}}}},
		{"tiny values", []Figure{{Series: []Series{{Name: "t", X: []float64{0, 1e-300}, Y: []float64{1e-300, 2e-300}}}}}},
		{"many figures", []Figure{{Series: flows(1, 5)}, {Series: flows(1, 5)}, {Series: flows(1, 5)}, {Series: flows(1, 5)}}},
		{"long name", []Figure{{Series: []Series{{Name: strings.Repeat("flow ", 40), X: []float64{0, 1}, Y: []float64{0, 1}}}}}},
	} {
		for _, format := range []string{"png", "svg"} {
			if err := Write(io.Discard, format, tc.figs...); err != nil {
				t.Errorf("%s, %s: %v", tc.name, format, err)
			}
		}
	}
}

// TestSharedX checks that stacked figures get the union of their X
// ranges, so a queue sampled for longer than the rates lines up with them.
func TestSharedX(t *testing.T) {
	a := Figure{Series: []Series{{X: []float64{2, 10}, Y: []float64{0, 1}}}}
	b := Figure{Series: []Series{{X: []float64{5, 20}, Y: []float64{0, 1}}}, Refs: []RefLine{{Y: 3}}}
	pa, _ := a.plot()
	pb, _ := b.plot()
	shareX([]*plot.Plot{pa, pb})
	for i, p := range []*plot.Plot{pa, pb} {
		if p.X.Min != 2 || p.X.Max != 20 {
			t.Errorf("figure %d: X axis [%g, %g], want [2, 20]", i, p.X.Min, p.X.Max)
		}
	}
	if pb.Y.Max != 3 {
		t.Errorf("a reference line above the data: Y axis up to %g, want 3", pb.Y.Max)
	}
}

// TestLineStyles checks that 64 series get 64 different colour and dash
// pairs, and that the first eight are solid.
func TestLineStyles(t *testing.T) {
	seen := map[string]int{}
	for i := range 64 {
		s := lineStyle(i, 64)
		key := fmt.Sprint(s.Color, s.Dashes)
		if j, ok := seen[key]; ok {
			t.Fatalf("series %d and %d share colour and dashes %s", j, i, key)
		}
		seen[key] = i
		if i < 8 && len(s.Dashes) != 0 {
			t.Errorf("series %d is dashed, want solid", i)
		}
	}
}

func TestTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   string // the labelled ticks
	}{
		{0, 100, "0 20 40 60 80 100"},
		{0, 19.99, "0 5 10 15"},
		{3, 247, "50 100 150 200"},
		{0, 1, "0.0 0.2 0.4 0.6 0.8 1.0"},
		{0.5, 1, "0.5 0.6 0.7 0.8 0.9 1.0"},
		{0, 0.25, "0.00 0.05 0.10 0.15 0.20 0.25"},
		{0, 10, "0 2 4 6 8 10"},
		{0, 15, "0.0 2.5 5.0 7.5 10.0 12.5 15.0"},
		{-1, 1, "-1.0 -0.5 0.0 0.5 1.0"},
		{1, 64, "10 20 30 40 50 60"},
		{0.93, 1, "0.93 0.94 0.95 0.96 0.97 0.98 0.99 1.00"},
	} {
		var got []string
		for _, tk := range (ticks{}).Ticks(tc.lo, tc.hi) {
			if tk.Value < tc.lo || tk.Value > tc.hi+1e-12 {
				t.Errorf("[%g, %g]: tick at %g is outside", tc.lo, tc.hi, tk.Value)
			}
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("[%g, %g]: labels %q, want %q", tc.lo, tc.hi, strings.Join(got, " "), tc.want)
		}
	}
}

// BenchmarkWrite draws the largest page the simulator makes, 64 flows of
// 10000 samples over a queue, in each format.
func BenchmarkWrite(b *testing.B) {
	figs := page(64, 10000)
	for _, format := range []string{"png", "svg"} {
		b.Run(format, func(b *testing.B) {
			b.ReportAllocs()
			var n int64
			for b.Loop() {
				c := countWriter{}
				if err := Write(&c, format, figs...); err != nil {
					b.Fatal(err)
				}
				n = c.n
			}
			b.ReportMetric(float64(n), "bytes/page")
		})
	}
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

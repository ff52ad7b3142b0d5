// Package simplot draws the figures of gorxe's fabric simulator: each
// flow's sending rate over time, each switch queue's length over time, and
// summary sweeps such as Jain's fairness index against the number of
// senders. It is a thin layer over gonum/plot that fixes what the
// simulator needs and gonum leaves open: a page of figures stacked one
// above another on one time axis, line styles that stay apart for up to 64
// flows, a legend beside the data rather than over it, and errors, not
// panics, for bad input.
//
// The output is a function of the input alone: the same figures give the
// same PNG or SVG bytes, so a simulator run that is byte-identical for a
// seed stays so with its figures. Nothing here reads the clock, the
// environment or a map's order; gonum's SVG writer prints coordinates
// with five significant digits and its PNG writer is Go's image/png.
package simplot

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Series is one line of a figure: Y over X, named in the legend. X and Y
// have the same length; a series with no points draws nothing but still
// has its entry in the legend, and one with no name has none. The legend
// cuts a name to MaxName characters, so that it stays a narrow column
// beside the data.
type Series struct {
	Name string
	X, Y []float64
}

// Range is a closed interval on an axis. The zero Range means "fit the
// data", so a figure fixes its Y axis only when it says so, as a rate
// figure does from 0 to the line rate.
type Range struct {
	Min, Max float64
}

// RefLine is a horizontal reference line across a figure, such as the fair
// share of the bottleneck or a queue's ECN thresholds Kmin and Kmax, drawn
// in grey with its label at the right end.
type RefLine struct {
	Y     float64
	Label string
}

// Figure is one chart: its series as lines, their axes, and optional
// reference lines. The Y axis fits the series and reference lines unless
// YRange fixes it; the X axis is shared by every figure of a page.
type Figure struct {
	Title, XLabel, YLabel string
	Series                []Series
	YRange                Range
	Refs                  []RefLine
}

// Page is figures stacked top to bottom on one drawing, all on the same X
// axis range (the union of theirs) with their data areas aligned, so a rate
// figure above a queue figure reads as one timeline. Width and Height are
// in inches; zero means DefaultWidth, and DefaultFigureHeight for each
// figure.
type Page struct {
	Figures       []Figure
	Width, Height float64
}

// The default size of a page, in inches: a figure is as wide as a printed
// page's text and a bit less than half as high.
const (
	DefaultWidth        = 7.0
	DefaultFigureHeight = 3.0
)

// MaxLegend is the most entries a figure's legend shows. A figure with
// more named series lists the first MaxLegend-1 and then how many more
// there are: beyond eight the colours repeat, told apart only by dash, and
// a long list would outgrow the figure, while the lines themselves still
// read as a bundle of flows.
const MaxLegend = 8

// MaxName is the most characters of a series' name its legend entry shows.
const MaxName = 24

const (
	dpi      = 150   // PNG resolution, in dots per inch
	maxInch  = 100.0 // largest side accepted, so a typo cannot allocate gigabytes of pixels
	minInch  = 1.0   // smallest side accepted, below which axes and labels overlap
	legendAt = 6     // points between a data area and its legend
)

// Errors returned for bad input. They are wrapped with the figure and
// series at fault, so test with errors.Is.
var (
	ErrNoFigures = errors.New("simplot: no figures")
	ErrFormat    = errors.New("simplot: unknown format (want png or svg)")
	ErrLength    = errors.New("simplot: X and Y differ in length")
	ErrValue     = errors.New("simplot: value is NaN or infinite")
	ErrRange     = errors.New("simplot: range is empty or not finite")
	ErrSize      = errors.New("simplot: page size out of bounds")
)

// Write draws figs, stacked, as one page of the default size into w, in
// format "png" or "svg".
func Write(w io.Writer, format string, figs ...Figure) error {
	return Page{Figures: figs}.Write(w, format)
}

// WriteFile draws figs, stacked, as one page of the default size into the
// file at path, in the format its extension names: .png or .svg.
func WriteFile(path string, figs ...Figure) error {
	return Page{Figures: figs}.WriteFile(path)
}

// WriteFile draws the page into the file at path, in the format its
// extension names: .png or .svg. The file is written only once the page
// has been drawn, so bad input leaves no file behind.
func (p Page) WriteFile(path string) error {
	format := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	var b bytes.Buffer
	if err := p.Write(&b, format); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// Write draws the page into w in format "png" or "svg". It checks the
// whole input before drawing, so on bad input it writes nothing and
// returns an error saying which figure and series is at fault.
func (p Page) Write(w io.Writer, format string) (err error) {
	if len(p.Figures) == 0 {
		return ErrNoFigures
	}
	width, height := p.Width, p.Height
	if width == 0 {
		width = DefaultWidth
	}
	if height == 0 {
		height = DefaultFigureHeight * float64(len(p.Figures))
	}
	if !(width >= minInch && width <= maxInch && height >= minInch && height <= maxInch) {
		return fmt.Errorf("%w: %gx%g inches, want each side in [%g, %g]", ErrSize, width, height, minInch, maxInch)
	}
	for i, f := range p.Figures {
		if err := f.check(); err != nil {
			return fmt.Errorf("figure %d (%q): %w", i, f.Title, err)
		}
	}
	w2, h2 := vg.Length(width)*vg.Inch, vg.Length(height)*vg.Inch
	var c vg.CanvasWriterTo
	switch format {
	case "png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w2, h2), vgimg.UseDPI(dpi))}
	case "svg":
		c = vgsvg.New(w2, h2)
	default:
		return fmt.Errorf("%w: %q", ErrFormat, format)
	}
	// gonum panics on some states it considers programming errors; the
	// input was checked above, so one reaching here is a bug in this
	// package, reported as an error rather than taking the simulator down.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("simplot: drawing failed: %v", r)
		}
	}()
	p.draw(draw.New(c))
	_, err = c.WriteTo(w)
	return err
}

// check reports the first thing wrong with f.
func (f Figure) check() error {
	if f.YRange != (Range{}) && !(f.YRange.Min < f.YRange.Max && finite(f.YRange.Min) && finite(f.YRange.Max)) {
		return fmt.Errorf("YRange [%g, %g]: %w", f.YRange.Min, f.YRange.Max, ErrRange)
	}
	for i, s := range f.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("series %d (%q): %w: %d X, %d Y", i, s.Name, ErrLength, len(s.X), len(s.Y))
		}
		for j := range s.X {
			if !finite(s.X[j]) || !finite(s.Y[j]) {
				return fmt.Errorf("series %d (%q) point %d (%g, %g): %w", i, s.Name, j, s.X[j], s.Y[j], ErrValue)
			}
		}
	}
	for i, r := range f.Refs {
		if !finite(r.Y) {
			return fmt.Errorf("reference line %d (%q) at %g: %w", i, r.Label, r.Y, ErrValue)
		}
	}
	return nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// draw lays the page's figures out on c and draws them: one plot a row,
// aligned by gonum so their data areas have the same left and right edges,
// with a column on the right, as wide as the widest legend, for legends.
func (p Page) draw(c draw.Canvas) {
	plots := make([]*plot.Plot, len(p.Figures))
	legends := make([]plot.Legend, len(p.Figures))
	var legendWidth vg.Length
	for i, f := range p.Figures {
		plots[i], legends[i] = f.plot()
		if w := legends[i].Rectangle(c).Size().X; w > legendWidth {
			legendWidth = w
		}
	}
	shareX(plots)

	pad := vg.Points(8)
	area := c
	if legendWidth > 0 {
		area = draw.Crop(c, 0, -(legendWidth + legendAt), 0, 0)
	}
	tiles := draw.Tiles{
		Rows: len(plots), Cols: 1,
		PadTop: pad, PadBottom: pad, PadLeft: pad, PadRight: pad, PadY: 2 * pad,
	}
	rows := make([][]*plot.Plot, len(plots))
	for i, pl := range plots {
		rows[i] = []*plot.Plot{pl}
	}
	for i, row := range plot.Align(rows, tiles, area) {
		pl, tile := plots[i], row[0]
		pl.Draw(tile)
		data := pl.DataCanvas(tile)
		legends[i].Draw(draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: tile.Max.X + legendAt, Y: data.Min.Y},
			Max: vg.Point{X: c.Max.X, Y: data.Max.Y},
		}})
	}
}

// shareX sets every plot's X axis to the union of their ranges.
func shareX(plots []*plot.Plot) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, pl := range plots {
		lo, hi = math.Min(lo, pl.X.Min), math.Max(hi, pl.X.Max)
	}
	for _, pl := range plots {
		pl.X.Min, pl.X.Max = lo, hi
	}
}

// sans is the typeface of every text on a page: a chart's small labels
// read better without serifs than in gonum's default serif face.
var sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

// plot builds f's gonum plot and, apart from it, its legend, which draw
// places beside the data area rather than over it as gonum would.
func (f Figure) plot() (*plot.Plot, plot.Legend) {
	pl := plot.New()
	pl.Title.Text = f.Title
	pl.Title.TextStyle.Font = font.From(sans, 11)
	pl.Title.Padding = vg.Points(4)
	for _, a := range []*plot.Axis{&pl.X, &pl.Y} {
		a.Label.TextStyle.Font = font.From(sans, 10)
		a.Tick.Label.Font = font.From(sans, 9)
		a.Tick.Marker = ticks{}
	}
	pl.X.Label.Text, pl.Y.Label.Text = f.XLabel, f.YLabel

	grid := plotter.NewGrid()
	grid.Vertical.Color = color.Gray{Y: 0xe4}
	grid.Horizontal.Color = color.Gray{Y: 0xe4}
	pl.Add(grid)

	leg := plot.NewLegend()
	leg.TextStyle.Font = font.From(sans, 9)
	leg.Top, leg.Left = true, true
	leg.ThumbnailWidth = vg.Points(24)
	leg.Padding = vg.Points(2)
	lines := make([]*plotter.Line, len(f.Series))
	var named []int // the series with a legend entry
	for i, s := range f.Series {
		xys := make(plotter.XYs, len(s.X))
		for j := range xys {
			xys[j].X, xys[j].Y = s.X[j], s.Y[j]
		}
		lines[i] = &plotter.Line{XYs: xys, LineStyle: lineStyle(i, len(f.Series))}
		pl.Add(trace{lines[i]})
		if s.Name != "" {
			named = append(named, i)
		}
	}
	for k, i := range named {
		if len(named) > MaxLegend && k == MaxLegend-1 {
			leg.Add(fmt.Sprintf("and %d more", len(named)-k))
			break
		}
		leg.Add(legendName(f.Series[i].Name), lines[i])
	}
	for _, r := range f.Refs {
		pl.Add(refLine(r))
	}
	if f.YRange != (Range{}) {
		pl.Y.Min, pl.Y.Max = f.YRange.Min, f.YRange.Max
	}
	return pl, leg
}

// legendName returns name as the legend shows it: cut to MaxName
// characters, the last an ellipsis, when longer.
func legendName(name string) string {
	if utf8.RuneCountInString(name) <= MaxName {
		return name
	}
	return string([]rune(name)[:MaxName-1]) + "…"
}

// trace is a plotter.Line without the glyph boxes gonum asks of it to keep
// the line's width inside the axes: a box for every point, which gonum
// builds and walks several times a draw, to save half a line's width at an
// axis' ends. For 64 flows of 10000 samples (BenchmarkWrite) they took a
// PNG page from 0.26 s and 0.29 GB allocated to 0.96 s and 2.2 GB.
type trace struct{ l *plotter.Line }

func (t trace) Plot(c draw.Canvas, p *plot.Plot)            { t.l.Plot(c, p) }
func (t trace) DataRange() (xmin, xmax, ymin, ymax float64) { return t.l.DataRange() }

// palette is the line colours, Tableau's ten without its grey, which the
// reference lines use, and its olive, which is faint on white.
var palette = []color.Color{
	color.RGBA{31, 119, 180, 255},  // blue
	color.RGBA{255, 127, 14, 255},  // orange
	color.RGBA{44, 160, 44, 255},   // green
	color.RGBA{214, 39, 40, 255},   // red
	color.RGBA{148, 103, 189, 255}, // purple
	color.RGBA{140, 86, 75, 255},   // brown
	color.RGBA{227, 119, 194, 255}, // pink
	color.RGBA{23, 190, 207, 255},  // cyan
}

// dashes is the dash patterns, in points, from solid to dash-dot-dot.
var dashes = [][]vg.Length{
	nil,
	{6, 3},
	{2, 2},
	{6, 2, 2, 2},
	{10, 3},
	{1, 2},
	{6, 2, 2, 2, 2, 2},
	{10, 2, 4, 2},
}

// lineStyle returns the style of series i of n: the colour changes first
// and the dash every len(palette) series, so 64 series each get their own
// pair and the first eight are solid. Lines thin out when there are many,
// so that a bundle of flows on one rate still shows its members.
func lineStyle(i, n int) draw.LineStyle {
	width := vg.Points(1.25)
	if n > len(palette) {
		width = vg.Points(0.75)
	}
	return draw.LineStyle{
		Color:  palette[i%len(palette)],
		Width:  width,
		Dashes: dashes[i/len(palette)%len(dashes)],
	}
}

// refLine draws a RefLine. Its data range holds its Y alone, so a fitted Y
// axis takes it in and the shared X axis ignores it.
type refLine RefLine

var refStyle = draw.LineStyle{Color: color.Gray{Y: 0x70}, Width: vg.Points(0.75), Dashes: []vg.Length{4, 3}}

func (r refLine) DataRange() (xmin, xmax, ymin, ymax float64) {
	return math.Inf(1), math.Inf(-1), r.Y, r.Y
}

func (r refLine) Plot(c draw.Canvas, p *plot.Plot) {
	if r.Y < p.Y.Min || r.Y > p.Y.Max {
		return // outside a fixed Y range
	}
	_, toY := p.Transforms(&c)
	y := toY(r.Y)
	c.StrokeLine2(refStyle, c.Min.X, y, c.Max.X, y)
	if r.Label == "" {
		return
	}
	sty := p.Y.Tick.Label
	sty.Color = refStyle.Color
	sty.XAlign = draw.XRight
	sty.YAlign = draw.YBottom
	at := vg.Point{X: c.Max.X - vg.Points(2), Y: y + vg.Points(1)}
	if at.Y+sty.Height(r.Label) > c.Max.Y {
		sty.YAlign = draw.YTop // under the line when above it would leave the data area
		at.Y = y - vg.Points(1)
	}
	c.FillText(sty, at, r.Label)
}

// ticks marks an axis at round steps, 1, 2, 2.5 or 5 times a power of ten,
// the smallest that gives at most eight labelled ticks, with an unlabelled
// one halfway between, and labels them with no more decimals than the step
// has: 0, 5, 10 ms rather than gonum's default, which picks steps like 9
// and labels 25.00 KB.
type ticks struct{}

func (ticks) Ticks(lo, hi float64) []plot.Tick {
	span := hi - lo
	if !(span > 0) || !finite(span) {
		return []plot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'g', -1, 64)}}
	}
	mag := math.Pow(10, math.Floor(math.Log10(span/5)))
	var step float64
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if step = m * mag; span/step <= 7 {
			break
		}
	}
	decimals := 0
	for p := 1.0; decimals < 15 && math.Abs(step*p-math.Round(step*p)) > 1e-9*step*p; p *= 10 {
		decimals++
	}
	var ts []plot.Tick
	for k := math.Ceil(lo/step - 0.5); k*step <= hi+step/2; k++ {
		// Counting steps in k, rather than adding step to a running value,
		// keeps every tick a multiple of step with no rounding carried over.
		if minor := (k - 0.5) * step; minor >= lo && minor <= hi {
			ts = append(ts, plot.Tick{Value: minor})
		}
		if v := k * step; v >= lo-step*1e-9 && v <= hi+step*1e-9 {
			ts = append(ts, plot.Tick{Value: v, Label: label(v, decimals)})
		}
	}
	return ts
}

// label formats a tick's value with the given decimals, and zero as "0"
// however it was reached (k*step can give -0).
func label(v float64, decimals int) string {
	if v == 0 {
		v = 0
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

package report

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"math"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Plot is one figure: an inline SVG, or why there is none.
type Plot struct {
	ID      string        // DOM id: plot-batch, plot-time, plot-jaccard, plot-sched, plot-ab
	Title   string        // figure caption
	SVG     template.HTML // gonum's SVG, from numbers and our own labels only
	Missing string        // why there is no plot (not measured)
	Note    string        // what of the data the plot shows when it is a sample ("" = all of it)
}

var (
	colGray = color.RGBA{R: 0xb0, G: 0xb0, B: 0xb0, A: 0xff}
	colRed  = color.RGBA{R: 0xc6, G: 0x28, B: 0x28, A: 0xff}
	colBlue = color.RGBA{R: 0x1f, G: 0x5f, B: 0xa8, A: 0xff}
	colTeal = color.RGBA{R: 0x00, G: 0x89, B: 0x7b, A: 0xff}
)

const (
	plotW = 7 * vg.Inch
	plotH = 3 * vg.Inch
)

// Plots draws the report's figures: those of the subject run (runs[0])
// and the A/B rates of every run.
func (rep *Report) Plots() []Plot {
	r := rep.Runs[0]
	return []Plot{
		batchPlot(r), timePlot(r), jaccardPlot(r), schedPlot(r), abPlot(rep.Runs),
	}
}

func svgOf(p *plot.Plot) (template.HTML, error) {
	wt, err := p.WriterTo(plotW, plotH, "svg")
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return "", err
	}
	s := buf.String()
	if i := strings.Index(s, "<svg"); i >= 0 {
		s = s[i:] // inline: no XML prolog
	}
	return template.HTML(s), nil // #nosec: gonum's output of numbers and fixed labels
}

func finish(pl Plot, p *plot.Plot) Plot {
	svg, err := svgOf(p)
	if err != nil {
		pl.Missing = "could not draw: " + err.Error()
		return pl
	}
	pl.SVG = svg
	return pl
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, x, y
	return p
}

// nominal labels n categories, thinning labels to about 16.
func nominal(p *plot.Plot, labels []string) {
	step := (len(labels) + 15) / 16
	out := make([]string, len(labels))
	for i, l := range labels {
		if i%max(step, 1) == 0 {
			out[i] = l
		}
	}
	p.NominalX(out...)
}

func batchPlot(r *Run) Plot {
	pl := Plot{ID: "plot-batch", Title: "Corruption by batch size: share of decode steps where the captured graph diverged from eager"}
	if r.GraphDiff == nil || len(r.Batches) == 0 {
		pl.Missing = "not measured: the bundle needs replay and graphdiff.sample events"
		return pl
	}
	vals := make(plotter.Values, len(r.Batches))
	labels := make([]string, len(r.Batches))
	for i, b := range r.Batches {
		labels[i] = strconv.Itoa(b.BS)
		if b.Steps > 0 {
			vals[i] = 100 * float64(b.Divergent) / float64(b.Steps)
		}
	}
	p := newPlot("graph≠eager steps by batch size", "batch size", "% of steps diverging")
	bar, err := plotter.NewBarChart(vals, vg.Points(max(2, 360/float64(len(vals)))))
	if err != nil {
		pl.Missing = err.Error()
		return pl
	}
	bar.Color, bar.LineStyle.Width = colRed, 0
	p.Add(bar)
	nominal(p, labels)
	return finish(pl, p)
}

func timePlot(r *Run) Plot {
	pl := Plot{ID: "plot-time", Title: "Corruption over time: sessions finishing in each interval, corrupted ones in red",
		Note: r.SessionEndsSampled.Note("session ends")}
	if len(r.SessionEnds) == 0 {
		pl.Missing = "not measured: the bundle holds no session events"
		return pl
	}
	last := 0.0
	for _, s := range r.SessionEnds {
		last = math.Max(last, s.T)
	}
	const bins = 12
	width := math.Max(last/bins, 1e-9)
	ended, bad := make(plotter.Values, bins), make(plotter.Values, bins)
	for _, s := range r.SessionEnds {
		i := min(int(s.T/width), bins-1)
		ended[i]++
		if s.Corrupted {
			bad[i]++
		}
	}
	labels := make([]string, bins)
	for i := range labels {
		labels[i] = strconv.FormatFloat(float64(i)*width, 'f', 1, 64) + "s"
	}
	p := newPlot("sessions finished per interval", "time since the run's first event", "sessions")
	all, err1 := plotter.NewBarChart(ended, vg.Points(22))
	cor, err2 := plotter.NewBarChart(bad, vg.Points(22))
	if err1 != nil || err2 != nil {
		pl.Missing = fmt.Sprint(err1, err2)
		return pl
	}
	all.Color, all.LineStyle.Width = colGray, 0
	cor.Color, cor.LineStyle.Width = colRed, 0
	p.Add(all, cor)
	p.Legend.Add("all", all)
	p.Legend.Add("corrupted", cor)
	p.Legend.Top = true
	nominal(p, labels)
	return finish(pl, p)
}

func jaccardPlot(r *Run) Plot {
	pl := Plot{ID: "plot-jaccard", Title: "Top-k Jaccard of graph vs eager selections, divergent samples (1 = same selection)",
		Note: r.JaccardsSampled.Note("stated Jaccard values")}
	switch {
	case r.GraphDiff == nil:
		pl.Missing = "not measured: the bundle holds no graphdiff.sample events"
		return pl
	case len(r.Jaccards) == 0:
		pl.Missing = fmt.Sprintf("no divergent sample states a top-k Jaccard (%d samples, %d divergent)", r.GraphDiff.Samples, r.GraphDiff.Divergent)
		return pl
	}
	p := newPlot(fmt.Sprintf("top-k Jaccard of %d divergent samples (of %d)", r.JaccardsSampled.Total, r.GraphDiff.Samples), "Jaccard(top-k graph, top-k eager)", "samples")
	vals := append(plotter.Values{0, 1}, r.Jaccards...) // pin the range to [0,1] …
	h, err := plotter.NewHist(vals, 20)
	if err != nil {
		pl.Missing = err.Error()
		return pl
	}
	h.Bins[0].Weight-- // … and take the two pins out again
	h.Bins[len(h.Bins)-1].Weight--
	h.FillColor, h.LineStyle.Width = colRed, 0
	p.Add(h)
	p.X.Min, p.X.Max = 0, 1
	return finish(pl, p)
}

func schedPlot(r *Run) Plot {
	pl := Plot{ID: "plot-sched", Title: "Scheduler pressure over time, with the corrupted sessions' ends marked"}
	if n := r.SchedSampled.Note("scheduler observations"); n != "" {
		pl.Note = n
		if m := r.SessionEndsSampled.Note("session ends"); m != "" {
			pl.Note += "; marks: " + m
		}
	}
	var xsR, xsU plotter.XYs
	for _, s := range r.Sched {
		if s.Retract {
			continue
		}
		xsR = append(xsR, plotter.XY{X: s.T, Y: float64(s.Running)})
		xsU = append(xsU, plotter.XY{X: s.T, Y: 100 * s.TokenUsage})
	}
	if len(xsR) == 0 {
		pl.Missing = "not measured: the bundle holds no sched events"
		return pl
	}
	p := newPlot("running requests and KV token usage", "time since the run's first event (s)", "requests / % of pool")
	lr, err1 := plotter.NewLine(xsR)
	lu, err2 := plotter.NewLine(xsU)
	if err1 != nil || err2 != nil {
		pl.Missing = fmt.Sprint(err1, err2)
		return pl
	}
	lr.Color, lr.Width = colBlue, vg.Points(1.5)
	lu.Color, lu.Width = colTeal, vg.Points(1.5)
	lu.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(lr, lu)
	p.Legend.Add("running requests", lr)
	p.Legend.Add("KV token usage %", lu)
	var marks plotter.XYs
	for _, s := range r.SessionEnds {
		if s.Corrupted {
			i := sort.Search(len(xsR), func(i int) bool { return xsR[i].X > s.T })
			y := 0.0
			if i > 0 {
				y = xsR[i-1].Y
			}
			marks = append(marks, plotter.XY{X: s.T, Y: y})
		}
	}
	if len(marks) > 0 {
		sc, err := plotter.NewScatter(marks)
		if err == nil {
			sc.GlyphStyle.Shape, sc.GlyphStyle.Color, sc.GlyphStyle.Radius = draw.TriangleGlyph{}, colRed, vg.Points(4)
			p.Add(sc)
			p.Legend.Add("corrupted session ends", sc)
		}
	}
	var retracts plotter.XYs
	for _, s := range r.Sched {
		if s.Retract {
			retracts = append(retracts, plotter.XY{X: s.T, Y: 0})
		}
	}
	if len(retracts) > 0 {
		sc, err := plotter.NewScatter(retracts)
		if err == nil {
			sc.GlyphStyle.Shape, sc.GlyphStyle.Color = draw.CrossGlyph{}, color.Black
			p.Add(sc)
			p.Legend.Add("retractions", sc)
		}
	}
	p.Legend.Top = true
	p.Y.Min = 0
	return finish(pl, p)
}

// abErrors are the runs' corruption rates with their Wilson intervals.
type abErrors struct {
	y, lo, hi []float64
}

func (e abErrors) Len() int                    { return len(e.y) }
func (e abErrors) XY(i int) (float64, float64) { return float64(i), e.y[i] }
func (e abErrors) YError(i int) (float64, float64) {
	return e.y[i] - e.lo[i], e.hi[i] - e.y[i]
}

func abPlot(runs []*Run) Plot {
	pl := Plot{ID: "plot-ab", Title: "Corruption rate per run with its 95% Wilson interval"}
	var e abErrors
	var labels []string
	for i, r := range runs {
		if r.Summary.Sessions == 0 {
			continue
		}
		e.y = append(e.y, 100*r.Summary.CorruptionRate)
		e.lo = append(e.lo, 100*r.CILo)
		e.hi = append(e.hi, 100*r.CIHi)
		labels = append(labels, "run "+strconv.Itoa(i+1))
	}
	if len(e.y) == 0 {
		pl.Missing = "not measured: no run holds session events"
		return pl
	}
	p := newPlot("corruption rate per run (labels as in the A/B table)", "", "% sessions corrupted")
	bar, err := plotter.NewBarChart(plotter.Values(e.y), vg.Points(40))
	if err != nil {
		pl.Missing = err.Error()
		return pl
	}
	bar.Color, bar.LineStyle.Width = colRed, 0
	eb, err := plotter.NewYErrorBars(e)
	if err != nil {
		pl.Missing = err.Error()
		return pl
	}
	p.Add(bar, eb)
	p.NominalX(labels...)
	p.Y.Min = 0
	return finish(pl, p)
}

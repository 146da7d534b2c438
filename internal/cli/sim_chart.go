package cli

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/sluicerl/sluice/sim"
)

// writeChart draws a run's seconds (limit, offered, goodput, throttles,
// adapted rate) to path; the extension (.png, .svg) picks the format.
func writeChart(path, title string, res *sim.Result) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "requests per second"
	p.Legend.Top = true
	series := []struct {
		name string
		get  func(sim.Second) float64
		c    color.RGBA
		dash bool
	}{
		{"limit", func(s sim.Second) float64 { return s.Limit }, color.RGBA{0, 0, 0, 255}, true},
		{"offered", func(s sim.Second) float64 { return float64(s.Offered) }, color.RGBA{120, 120, 120, 255}, false},
		{"goodput", func(s sim.Second) float64 { return float64(s.Goodput) }, color.RGBA{0, 128, 0, 255}, false},
		{"throttles", func(s sim.Second) float64 { return float64(s.Throttles + s.Bans) }, color.RGBA{200, 0, 0, 255}, false},
		{"adapted rate", func(s sim.Second) float64 { return s.Rate }, color.RGBA{0, 0, 200, 255}, true},
	}
	var ymax float64
	for _, s := range res.Seconds {
		ymax = max(ymax, s.Limit, float64(s.Offered))
	}
	for _, sr := range series {
		pts := make(plotter.XYs, len(res.Seconds))
		for i, s := range res.Seconds {
			// The adapted rate can run far above the limit when the
			// workers, not the pace, are the bottleneck: clip it.
			pts[i] = plotter.XY{X: float64(s.T), Y: min(sr.get(s), 2*ymax)}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		l.Color = sr.c
		l.Width = vg.Points(1.5)
		if sr.dash {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(sr.name, l)
	}
	p.Y.Min = 0
	if err := p.Save(9*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
}

package dashboard

import (
	"strconv"
	"strings"
	"time"
)

// Chart geometry, in SVG user units; the SVG scales to its box.
const (
	chartW, chartH = 600, 160
	padL, padR     = 44, 8
	padT, padB     = 8, 22
)

// chart is a line chart rendered server-side as inline SVG.
type chart struct {
	Label  string // the accessible name: what the chart shows, with totals
	W, H   int
	Lines  []chartLine
	YMax   string // the top of the y axis, formatted
	YTicks []chartTick
	XTicks []chartTick
	Empty  bool // no data point is above zero
}

type chartLine struct {
	Name   string
	Class  string // colour class: a, d, s (allowed, denied, shadow), r, h (rate, hint)
	Points string // SVG polyline points
	N      int    // how many points
	Total  string // the sum of the points, or the last point (see newChart)
	Suffix string // " now" after a last point
}

type chartTick struct {
	Pos    float64
	Label  string
	Anchor string // SVG text-anchor: start, middle, end
}

// newChart scales the series (same length each, values at times ts) into
// one chart. format formats y values for the axis. A line's Total is the
// sum of its points when sum is set (counts), else its last point (rates).
func newChart(label string, ts []time.Time, names, classes []string, series [][]float64, format func(float64) string, sum bool) chart {
	c := chart{Label: label, W: chartW, H: chartH, Empty: true}
	ymax := 0.0
	for _, s := range series {
		for _, v := range s {
			ymax = max(ymax, v)
		}
	}
	if ymax > 0 {
		c.Empty = false
	}
	top := niceCeil(ymax)
	c.YMax = format(top)
	plotW, plotH := float64(chartW-padL-padR), float64(chartH-padT-padB)
	x := func(i int) float64 {
		if len(ts) < 2 {
			return padL
		}
		return padL + plotW*float64(i)/float64(len(ts)-1)
	}
	y := func(v float64) float64 { return padT + plotH*(1-v/top) }
	for i, s := range series {
		var b strings.Builder
		total := 0.0
		for j, v := range s {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.FormatFloat(x(j), 'f', 1, 64))
			b.WriteByte(',')
			b.WriteString(strconv.FormatFloat(y(v), 'f', 1, 64))
			total += v
		}
		suffix := ""
		if !sum && len(s) > 0 {
			total, suffix = s[len(s)-1], " now"
		}
		c.Lines = append(c.Lines, chartLine{Name: names[i], Class: classes[i], Points: b.String(), N: len(s), Total: format(total), Suffix: suffix})
	}
	for _, f := range []float64{0, 0.5, 1} {
		l := format(top * f)
		if f == 0.5 && (l == format(0) || l == format(top)) {
			continue // a count axis up to 1 has no middle
		}
		c.YTicks = append(c.YTicks, chartTick{Pos: y(top * f), Label: l, Anchor: "end"})
	}
	if n := len(ts); n > 0 {
		c.XTicks = append(c.XTicks, chartTick{Pos: x(0), Label: ts[0].UTC().Format("15:04"), Anchor: "start"})
		if n >= 3 {
			c.XTicks = append(c.XTicks, chartTick{Pos: x(n / 2), Label: ts[n/2].UTC().Format("15:04"), Anchor: "middle"})
		}
		if n >= 2 {
			c.XTicks = append(c.XTicks, chartTick{Pos: x(n - 1), Label: ts[n-1].UTC().Format("15:04"), Anchor: "end"})
		}
	}
	return c
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (at least 1).
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := 1.0
	for p*10 <= v {
		p *= 10
	}
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func formatCount(v float64) string { return strconv.FormatInt(int64(v+0.5), 10) }

func formatRate(v float64) string {
	if v >= 100 || v == float64(int64(v)) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

package dashboard

import (
	"html/template"
	"strconv"
	"time"
)

var funcs = template.FuncMap{
	// dur formats a duration for people: 1.5s, 250ms, 420µs, 2m0s.
	"dur": func(d time.Duration) string {
		if d <= 0 {
			return "0s"
		}
		if d < time.Millisecond {
			return d.Round(time.Microsecond).String()
		}
		if d < time.Second {
			return d.Round(time.Millisecond).String()
		}
		return d.Round(100 * time.Millisecond).String()
	},
	// ts formats a time as RFC 3339 UTC (seconds), "—" when zero.
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	// iso is a machine-readable time for <time datetime> and countdowns.
	"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"pct": func(a, b int64) int64 {
		if b <= 0 {
			return 0
		}
		return a * 100 / b
	},
	"rate":  formatRate,
	"f1":    func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
	"after": func(a, b time.Time) bool { return a.After(b) },
	"add":   func(a, b int) int { return a + b },
	// untilOf is the time d after t, for a countdown's data-until.
	"untilOf": func(t time.Time, d time.Duration) time.Time { return t.Add(d) },
}

var confirmTemplate = template.Must(template.New("confirm").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Confirm · Sluice</title><link rel="icon" href="data:,"><link rel="stylesheet" href="/ui/static/app.css"></head>
<body><main id="main"><h1>Confirm</h1><p>Do you want to {{.What}}?</p>
<form method="post" action="{{.Action}}">{{range .Fields}}<input type="hidden" name="{{.Name}}" value="{{.Value}}">{{end}}
<input type="hidden" name="confirm" value="yes"><button type="submit">Yes, {{.What}}</button> <a href="{{.Back}}">Cancel</a></form>
</main></body></html>`))

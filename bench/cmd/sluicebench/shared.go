package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/sluicerl/sluice/bench"
)

// sharedOpts are the settings of the shared-state figures.
type sharedOpts struct {
	rounds int
	slice  time.Duration // one alternation slice
	slices int           // slices per case per round
}

// sharedFigure is one shared-state case summed over every slice of every
// round.
type sharedFigure struct {
	c      bench.SharedCase
	total  bench.Sample
	rounds []float64 // decisions/s of each round
}

func (f *sharedFigure) rate() float64 { return f.total.Rate() }

// latency is the mean time one goroutine waited for a decision (Little's
// law on a closed loop: goroutines x time / decisions).
func (f *sharedFigure) latency() time.Duration {
	if f.total.Ops == 0 {
		return 0
	}
	return time.Duration(float64(f.c.Workers) * float64(f.total.Elapsed) / float64(f.total.Ops))
}

// cpuPerOp is this process's CPU time per decision, in nanoseconds.
func (f *sharedFigure) cpuPerOp() float64 {
	return float64(f.total.CPU) / float64(max(f.total.Ops, 1))
}

func (f *sharedFigure) spread() float64 {
	if len(f.rounds) < 2 {
		return math.NaN()
	}
	return (slices.Max(f.rounds) - slices.Min(f.rounds)) / median(f.rounds)
}

// runSection opens a section, runs its matching cases in alternating
// slices, prints its tables and ratios, and closes it. A service that
// cannot be reached is reported as skipped, not as an error.
func runSection(ctx context.Context, w *bufio.Writer, stderr io.Writer, sec *bench.Section, cases []bench.SharedCase, o sharedOpts) error {
	fmt.Fprintf(w, "\n#### %s ####\n", sec.Name)
	w.Flush()
	fmt.Fprintf(stderr, "%s: opening\n", sec.Name)
	if err := sec.Open(ctx); err != nil {
		fmt.Fprintf(w, "skipped: %v\n", err)
		return nil
	}
	defer func() {
		if err := sec.Close(context.WithoutCancel(ctx)); err != nil {
			fmt.Fprintf(w, "cleanup failed: %v\n", err)
		}
	}()
	for _, n := range sec.Notes {
		fmt.Fprintln(w, n)
	}

	// One short unrecorded run of each case opens the connections it
	// needs and warms the server's caches.
	for _, c := range cases {
		if _, err := c.RunFor(ctx, min(o.slice, 100*time.Millisecond)); err != nil {
			return err
		}
	}
	figs := make(map[string]*sharedFigure, len(cases))
	for _, c := range cases {
		figs[c.ID] = &sharedFigure{c: c}
	}
	for r := range o.rounds {
		round := make(map[string]*bench.Sample, len(cases))
		for _, c := range cases {
			round[c.ID] = &bench.Sample{}
		}
		for k := range o.slices {
			// Each pass starts at another case, so that no case always
			// follows the same one (a heavy case leaves garbage and server
			// work behind for the next), and the garbage of the previous
			// slice is collected before a slice starts.
			start := (r*o.slices + k) % len(cases)
			for j := range cases {
				c := cases[(start+j)%len(cases)]
				if err := ctx.Err(); err != nil {
					return err
				}
				runtime.GC()
				s, err := c.RunFor(ctx, o.slice)
				if err != nil {
					return err
				}
				round[c.ID].Add(s)
			}
		}
		for _, c := range cases {
			s := round[c.ID]
			f := figs[c.ID]
			f.total.Add(*s)
			f.rounds = append(f.rounds, s.Rate())
			fmt.Fprintf(stderr, "round %d/%d  %-44s %12.0f decisions/s\n", r+1, o.rounds, c.ID, s.Rate())
		}
	}
	for _, g := range sec.Groups {
		var in []*sharedFigure
		for _, c := range cases {
			if c.Group == g {
				in = append(in, figs[c.ID])
			}
		}
		if len(in) == 0 {
			continue
		}
		sharedTable(w, g, in)
		sharedRatios(w, sectionRatios(sec.Name, g), figs)
	}
	return nil
}

func sharedTable(w io.Writer, g bench.Group, figs []*sharedFigure) {
	fmt.Fprintf(w, "\n== %s ==\n", g)
	fmt.Fprintf(w, "%-48s %5s %12s %9s %9s %6s %8s %7s %10s %6s\n",
		"name", "gor", "decisions/s", "latency", "allocs/op", "B/op", "allowed", "spread", "cpu-µs/op", "cores")
	for _, f := range figs {
		ops := float64(max(f.total.Ops, 1))
		spread := "-"
		if s := f.spread(); !math.IsNaN(s) {
			spread = fmt.Sprintf("%.0f%%", 100*s)
		}
		fmt.Fprintf(w, "%-48s %5d %12s %9s %9.0f %6.0f %8s %7s %10.1f %6.2f\n",
			f.c.Label, f.c.Workers, group3(f.rate()), dur3(f.latency()),
			float64(f.total.Mallocs)/ops, float64(f.total.Bytes)/ops,
			pct(float64(f.total.Allowed)/ops), spread, f.cpuPerOp()/1e3,
			float64(f.total.CPU)/float64(max(f.total.Elapsed, 1)))
	}
}

// sharedRatio compares two shared-state cases.
type sharedRatio struct {
	num, den string // case ids
	text     string
	// latency compares mean latency (num/den, lower is better); otherwise
	// decisions/s (num/den, higher is better).
	latency bool
	// op is "<=" or ">=" against limit, or "" for information.
	op    string
	limit float64
}

// sectionRatios returns the ratio lines printed under a group's table.
func sectionRatios(section string, g bench.Group) []sharedRatio {
	var rs []sharedRatio
	switch section {
	case "redis":
		for _, n := range []int{1, 8, 64} {
			limit := 1.0
			if n == 64 {
				limit = 1.5
			}
			rs = append(rs, sharedRatio{
				num: fmt.Sprintf("redis/sluice/g%d", n), den: fmt.Sprintf("redis/redis_rate/g%d", n),
				text: fmt.Sprintf("gor=%-2d sluice / redis_rate decisions/s", n), op: ">=", limit: limit,
			})
		}
		rs = append(rs,
			sharedRatio{num: "redis/sluice/g1", den: "redis/evalsha/g1", text: "serial latency: sluice / bare EVALSHA", latency: true, op: "<=", limit: 1.3},
			sharedRatio{num: "redis/redis_rate/g1", den: "redis/evalsha/g1", text: "serial latency: redis_rate / bare EVALSHA", latency: true},
			sharedRatio{num: "redis/sluice-inflight2/g8", den: "redis/redis_rate/g8", text: "(ref) gor=8  sluice MaxInFlight 2 / redis_rate decisions/s"},
			sharedRatio{num: "redis/sluice-guard/g1", den: "redis/sluice/g1", text: "(ref) serial latency: guard over redisstore / redisstore", latency: true},
			sharedRatio{num: "redis/sluice-guard/g64", den: "redis/sluice/g64", text: "(ref) gor=64 guard over redisstore / redisstore decisions/s"},
		)
	case "postgres":
		nkeys := 1
		if g == bench.PostgresKeys {
			nkeys = 100
		}
		for _, conns := range bench.PostgresConns {
			base := fmt.Sprintf("postgres/keys%d/conns%d/", nkeys, conns)
			rs = append(rs,
				sharedRatio{num: base + "sluice", den: base + "floor", text: fmt.Sprintf("conns=%d: sluice (default) / floor decisions/s", conns), op: ">=", limit: 0.8},
				sharedRatio{num: base + "sluice-maxbatch1", den: base + "floor", text: fmt.Sprintf("conns=%d: sluice MaxBatch 1 / floor decisions/s", conns), op: ">=", limit: 0.8},
			)
		}
	case "sqlite":
		rs = append(rs, sharedRatio{num: "sqlite/sluice/g8", den: "sqlite/sluice/g1", text: "8 goroutines / serial decisions/s"})
	}
	return rs
}

func sharedRatios(w io.Writer, rs []sharedRatio, figs map[string]*sharedFigure) {
	var lines []string
	for _, r := range rs {
		n, ok1 := figs[r.num]
		d, ok2 := figs[r.den]
		if !ok1 || !ok2 || n.total.Ops == 0 || d.total.Ops == 0 {
			continue
		}
		var x, xcpu float64
		if r.latency {
			x = float64(n.latency()) / float64(d.latency())
			xcpu = n.cpuPerOp() / d.cpuPerOp()
		} else {
			x = n.rate() / d.rate()
			xcpu = d.cpuPerOp() / n.cpuPerOp()
		}
		line := fmt.Sprintf("  %s = %.2fx", r.text, x)
		switch r.op {
		case "<=":
			line += fmt.Sprintf(" (target <= %.1f) %s", r.limit, verdict(x <= r.limit))
		case ">=":
			line += fmt.Sprintf(" (target >= %.1f) %s", r.limit, verdict(x >= r.limit))
		}
		line += fmt.Sprintf("  [by this process's cpu/op: %.2fx]", xcpu)
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, "ratios (decisions/s over all slices; latency = goroutines x time / decisions):")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

func sharedHeader(w io.Writer, o sharedOpts) {
	fmt.Fprintf(w, "\n== shared state: Redis, PostgreSQL, SQLite on real servers ==\n")
	fmt.Fprintf(w, "Closed loop: `gor` goroutines each make one decision after another. The cases of a section run\n")
	fmt.Fprintf(w, "in alternating slices of %s, %d slices per case per round, rounds=%d, so that a change in the\n", o.slice, o.slices, o.rounds)
	fmt.Fprintf(w, "machine's load touches every case alike (each pass starts at another case; a GC precedes each slice).\n")
	fmt.Fprintf(w, "decisions/s = decisions / time over all slices;\n")
	fmt.Fprintf(w, "latency = gor x time / decisions (the mean wait for one decision); spread = (max-min)/median of the\n")
	fmt.Fprintf(w, "rounds' decisions/s; allocs/op, B/op, cpu-µs/op and cores count this process only (the client), not\n")
	fmt.Fprintf(w, "the server's CPU, which shares the machine.\n")
}

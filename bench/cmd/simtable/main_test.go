package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicerl/sluice/sim"
)

func TestRunShort(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if err := run(t.Context(), []string{"-duration", "2s", "-only", "^503$"}, &out, &errb); err != nil {
		t.Fatal(err, errb.String())
	}
	s := out.String()
	for _, want := range []string{"| 503 | sluice |", "| 503 | x/time/rate 0.5x |", "| 503 | x/time/rate 2x |", "| 503 | autothrottle |", "targets (issue 5)"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}

func TestRunFlagErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-duration", "1s"}, {"-only", "("}, {"-only", "nothing-matches"}, {"extra"}, {"-repeat", "0"}, {"-repeat", "101"}, {"-virtual"}, {"-issue18", "-virtual", "-parallel", "0"}, {"-rise"}} {
		var out, errb bytes.Buffer
		if err := run(t.Context(), args, &out, &errb); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

func TestRunRepeat(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	file := filepath.Join(t.TempDir(), "runs.json")
	if err := run(t.Context(), []string{"-duration", "2s", "-only", "^503$", "-repeat", "2", "-out", file}, &out, &errb); err != nil {
		t.Fatal(err, errb.String())
	}
	s := out.String()
	for _, want := range []string{"median of each figure over 2 runs", "| 503 | sluice |", "503                  sluice               met every target in "} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var runs [][]sim.Row
	if err := json.Unmarshal(b, &runs); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || len(runs[0]) != 6 || len(runs[0][0].Result.Seconds) == 0 {
		t.Fatalf("-out holds %d runs of %d rows, want 2 of 6 with their seconds", len(runs), len(runs[0]))
	}
}

func TestMedians(t *testing.T) {
	t.Parallel()
	row := func(gp float64, conv, settle int) []sim.Row {
		return []sim.Row{{Scenario: "d", Contender: "c", Summary: sim.Summary{GoodputRatio: gp, ConvergeS: conv, SettleS: settle, Bans: int64(conv)}}}
	}
	// Three runs: the middle of each figure, "never" (-1) the longest.
	m := medians([][]sim.Row{row(0.9, 4, -1), row(0.99, -1, 2), row(0.95, 9, 3)})
	got := m[0].Summary
	if got.GoodputRatio != 0.95 || got.ConvergeS != 9 || got.SettleS != 3 || got.Bans != 4 {
		t.Fatalf("medians of three = %+v", got)
	}
	if m[0].Scenario != "d" || m[0].Contender != "c" {
		t.Fatalf("row names %q %q", m[0].Scenario, m[0].Contender)
	}
	// Two runs, one of them never converged: the upper middle is never.
	if got := medians([][]sim.Row{row(0.9, 4, 1), row(0.99, -1, 1)})[0].Summary; got.ConvergeS != -1 || got.GoodputRatio != 0.99 {
		t.Fatalf("medians of two = %+v", got)
	}
}

// Issue 18's scenarios on the manual clock: Sluice beside the fixed pace at
// 0.9x, and on the manual clock the fixed pace is exact: 90/s from the
// start, throttled by none of the first second's 100/s.
func TestRunIssue18Virtual(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	file := filepath.Join(t.TempDir(), "rows.json")
	if err := run(t.Context(), []string{"-issue18", "-virtual", "-duration", "2s", "-only", "^503$", "-out", file}, &out, &errb); err != nil {
		t.Fatal(err, errb.String())
	}
	s := out.String()
	for _, want := range []string{"| 503 | sluice |", "| 503 | fixed-0.9x |"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rows []sim.Row
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[1].Contender != "fixed-0.9x" {
		t.Fatalf("rows %+v", rows)
	}
	first := rows[1].Result.Seconds[0]
	if first.Offered != 90 || first.Throttles != 0 {
		t.Fatalf("fixed 0.9x, first second: %+v", first)
	}
}

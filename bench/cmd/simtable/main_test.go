package main

import (
	"bytes"
	"strings"
	"testing"
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
	for _, args := range [][]string{{"-duration", "1s"}, {"-only", "("}, {"-only", "nothing-matches"}, {"extra"}} {
		var out, errb bytes.Buffer
		if err := run(t.Context(), args, &out, &errb); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// TestRunSlotsSmoke runs the short slot figures (the SQLite HTTP load for
// 200ms): each prints its line, verified, or says why it failed.
func TestRunSlotsSmoke(t *testing.T) {
	var out bytes.Buffer
	args := []string{"-only", `^slots/http/sqlite-32$`, "-slots-duration", "200ms"}
	if err := run(context.Background(), args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"slots (seed 003)", "slots/http/sqlite-32", "events/s", "verify ok"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "FAILED") || strings.Contains(s, "postgres") {
		t.Errorf("unexpected output:\n%s", s)
	}
}

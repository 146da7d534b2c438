package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

func TestRunSmoke(t *testing.T) {
	var out bytes.Buffer
	args := []string{"-rounds", "2", "-benchtime", "50x", "-only", "serial/allowed/(sluice-handle|xrate)|http", "-http-duration", "200ms", "-http-conns", "4"}
	if err := run(context.Background(), args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"GOMAXPROCS=",
		"sluice Handle.Allow",
		"x/time/rate Allow",
		"sluice Handle.Allow / x/time/rate Allow = ",
		"(target <= 1.0)",
		"serial/allowed/sluice-handle allocs/op = ",
		"POST /v1/take over loopback HTTP",
		"requests/s",
		"without and with auth", // authfig.go, matched by "http" too
		"median cpu/req: off ",
		"auth throughput overhead: ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "== parallel") {
		t.Errorf("-only did not filter out the parallel group:\n%s", out.String())
	}
}

// TestRunSharedSmoke runs one case of each shared-state section for one
// short slice: each section prints its table, or says why it was skipped.
func TestRunSharedSmoke(t *testing.T) {
	var out bytes.Buffer
	args := []string{"-rounds", "1", "-slices", "1", "-slice", "20ms",
		"-only", `^(redis/(sluice|redis_rate|evalsha)/g1|postgres/keys100/conns8/(sluice|floor)|sqlite/sluice/g1)$`}
	if err := run(context.Background(), args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, sec := range []struct{ name, table, ratio string }{
		{"redis", "== Redis:", "serial latency: sluice / bare EVALSHA = "},
		{"postgres", "== PostgreSQL: 100 keys", "conns=8: sluice (default) / floor decisions/s = "},
		{"sqlite", "== SQLite:", ""},
	} {
		_, after, ok := strings.Cut(s, "#### "+sec.name+" ####")
		if !ok {
			t.Errorf("output lacks the %s section:\n%s", sec.name, s)
			continue
		}
		after, _, _ = strings.Cut(after, "#### ")
		if strings.HasPrefix(strings.TrimSpace(after), "skipped: ") {
			if sec.name == "sqlite" {
				t.Errorf("sqlite needs no server but was skipped:\n%s", after)
			}
			continue
		}
		if !strings.Contains(after, sec.table) || !strings.Contains(after, sec.ratio) {
			t.Errorf("%s section lacks %q or %q:\n%s", sec.name, sec.table, sec.ratio, after)
		}
		if strings.Contains(after, "cleanup failed") {
			t.Errorf("%s section did not clean up:\n%s", sec.name, after)
		}
	}
	if strings.Contains(s, "== serial") || strings.Contains(s, "POST /v1/take") {
		t.Errorf("-only did not filter out the in-memory figures:\n%s", s)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-rounds", "0"},
		{"-only", "("},
		{"-only", "no-such-case"},
		{"-benchtime", "soon"},
		{"-slice", "0s"},
		{"-slices", "0"},
	} {
		if err := run(context.Background(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestGroup3(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 12345678: "12,345,678"} {
		if got := group3(in); got != want {
			t.Errorf("group3(%v) = %q, want %q", in, got, want)
		}
	}
}

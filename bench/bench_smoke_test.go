package bench

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"
)

// TestCases runs every benchmark briefly and checks that it measures what
// its group says: always-allowed cases allow every call, mostly-denied
// cases deny nearly all of them.
func TestCases(t *testing.T) {
	bt := flag.Lookup("test.benchtime")
	old := bt.Value.String()
	if err := flag.Set("test.benchtime", "300x"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = flag.Set("test.benchtime", old) })

	for _, c := range Cases() {
		r := testing.Benchmark(c.F)
		if r.N == 0 {
			t.Errorf("%s: benchmark failed", c.ID)
			continue
		}
		share := AllowedShare(r)
		switch c.Group {
		case SerialAllowed, Parallel10k:
			if share != 1 {
				t.Errorf("%s: allowed %.3f of calls, want all", c.ID, share)
			}
		case SerialDenied:
			if share > 0.05 {
				t.Errorf("%s: allowed %.3f of calls, want nearly none", c.ID, share)
			}
		}
	}
}

func TestCaseIDsUnique(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, c := range Cases() {
		if seen[c.ID] {
			t.Errorf("duplicate id %s", c.ID)
		}
		seen[c.ID] = true
		if !strings.HasPrefix(c.ID, "serial/") && !strings.HasPrefix(c.ID, "parallel/") {
			t.Errorf("%s: id must start with serial/ or parallel/", c.ID)
		}
	}
}

func TestMutexMap(t *testing.T) {
	t.Parallel()
	mm := NewMutexMap(1, 2)
	got := []bool{mm.Allow("a"), mm.Allow("a"), mm.Allow("a"), mm.Allow("b")}
	want := []bool{true, true, false, true}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Allow sequence = %v, want %v", got, want)
		}
	}
}

func TestKeyCursorVisitsEveryKey(t *testing.T) {
	t.Parallel()
	c := newKeyCursor()
	seen := make([]bool, NumKeys)
	for range NumKeys {
		seen[c.nextIndex()] = true
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("key %d never visited", i)
		}
	}
}

// TestRunHTTP drives the real server briefly and checks that every request
// was answered.
func TestRunHTTP(t *testing.T) {
	t.Parallel()
	lim, err := TakeLimiter()
	if err != nil {
		t.Fatal(err)
	}
	h, err := TakeHandler(lim)
	if err != nil {
		t.Fatal(err)
	}
	res, err := RunHTTP(context.Background(), h, HTTPConfig{Conns: 8, Duration: 300 * time.Millisecond, Warmup: -1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.Errors != 0 {
		t.Fatalf("requests=%d errors=%d (first: %s)", res.Requests, res.Errors, res.FirstErr)
	}
	if res.Limited != 0 {
		t.Errorf("%d requests limited under the always-allowed policy", res.Limited)
	}
	if res.P50 <= 0 || res.P99 < res.P50 || res.Max < res.P99 {
		t.Errorf("percentiles out of order: p50=%s p99=%s max=%s", res.P50, res.P99, res.Max)
	}
}

package limiter_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
)

// benchPolicies are one policy per algorithm. The benchmarks measure
// decisions on keys that already hold state (GCRA, at its finest rate of one
// unit a microsecond, denies part of them: a denial is a decision too).
var benchPolicies = []limiter.Policy{
	{Name: "gcra", Algorithm: store.GCRA, Rate: 1_000_000, Period: time.Second, Burst: 1000},
	{Name: "fixed", Algorithm: store.FixedWindow, Rate: 1 << 40, Period: time.Hour},
	{Name: "sliding", Algorithm: store.SlidingWindow, Rate: 1 << 20, Period: time.Second},
}

func newBenchLimiter(b *testing.B) *limiter.Limiter {
	b.Helper()
	l, err := limiter.New(limiter.Config{Policies: benchPolicies}) // memstore, real clock
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkHandleAllow is the hot path: a decision through a Handle on a key
// the store already holds. It must not allocate.
func BenchmarkHandleAllow(b *testing.B) {
	for _, p := range benchPolicies {
		b.Run(p.Algorithm.String(), func(b *testing.B) {
			l := newBenchLimiter(b)
			h, err := l.Handle(p.Name)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if _, err := h.Allow(ctx, "key"); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := h.Allow(ctx, "key"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLimiterAllow decides by policy name, serially on one key and in
// parallel over many keys.
func BenchmarkLimiterAllow(b *testing.B) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		l := newBenchLimiter(b)
		if _, err := l.Allow(ctx, "gcra", "key"); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.Allow(ctx, "gcra", "key"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		l := newBenchLimiter(b)
		keys := make([]string, 1024)
		for i := range keys {
			keys[i] = "key-" + strconv.Itoa(i)
			if _, err := l.Allow(ctx, "gcra", keys[i]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, err := l.Allow(ctx, "gcra", keys[i&(len(keys)-1)]); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	})
}

// TestHandleAllowDoesNotAllocate is not parallel: AllocsPerRun counts every
// allocation in the process.
func TestHandleAllowDoesNotAllocate(t *testing.T) {
	l, err := limiter.New(limiter.Config{Policies: benchPolicies})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, p := range benchPolicies {
		h, err := l.Handle(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Allow(ctx, "key"); err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := h.Allow(ctx, "key"); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Allow(ctx, p.Name, "key"); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per decision on an existing key, want 0", p.Name, allocs)
		}
	}
}

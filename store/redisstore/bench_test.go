package redisstore

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicerl/sluice/store"
)

// benchLimit never runs dry at the rates a benchmark reaches, so every
// decision does the same work.
var benchLimit = store.Limit{Name: "bench", Algorithm: store.GCRA, Rate: 1_000_000, Period: time.Second, Burst: 1_000_000}

// BenchmarkTake measures decisions on one hot key: serially (the latency of
// one decision, against a bare EVALSHA of a trivial script, the floor of
// one round trip), and from 8 and 64 goroutines, batched and not.
func BenchmarkTake(b *testing.B) {
	c := single(b)
	ctx := context.Background()

	b.Run("serial", func(b *testing.B) {
		s := newStore(b, c, Config{})
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: benchLimit, Cost: 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("serial-deadline", func(b *testing.B) {
		// A context that can end: the round trip runs on a goroutine.
		s := newStore(b, c, Config{})
		dctx, cancel := context.WithTimeout(ctx, time.Hour)
		defer cancel()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Take(dctx, store.TakeParams{Key: "k", Limit: benchLimit, Cost: 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("serial-bare-evalsha", func(b *testing.B) {
		script := redis.NewScript("return 1")
		require := func(err error) {
			if err != nil {
				b.Fatal(err)
			}
		}
		require(script.Load(ctx, c).Err())
		b.ReportAllocs()
		for b.Loop() {
			require(script.EvalSha(ctx, c, []string{"sluicetest:bare"}).Err())
		}
	})
	for _, g := range []int{8, 64} {
		for _, tc := range []struct {
			name string
			cfg  Config
		}{{"batched", Config{}}, {"unbatched", Config{Unbatched: true}}} {
			b.Run(fmt.Sprintf("parallel-%d/%s", g, tc.name), func(b *testing.B) {
				s := newStore(b, c, tc.cfg)
				b.ReportAllocs()
				b.SetParallelism(max(1, g/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: benchLimit, Cost: 1}); err != nil {
							b.Error(err)
							return
						}
					}
				})
				if p := s.pipelines.Load(); p > 0 {
					b.ReportMetric(float64(s.batched.Load())/float64(p), "calls/pipeline")
				}
			})
		}
	}
}

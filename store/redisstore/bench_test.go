package redisstore

import (
	"context"
	"errors"
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

// BenchmarkScript breaks a serial decision down, one round trip each: the
// whole Take, the rate script called directly with a Take's arguments, a
// script doing only the Redis calls a take makes (TIME, GET, SET with an
// expiry) and returning a reply of the same shape, a bare `return 1`
// script, and a plain GET. The differences are the Go side's work, the
// script's arithmetic, and what its Redis calls cost.
func BenchmarkScript(b *testing.B) {
	c := single(b)
	ctx := context.Background()
	s := newStore(b, c, Config{})
	key, _ := rateKey(s.Prefix(), "k", benchLimit.Name)
	calls := redis.NewScript(`local tm = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], '1893456000000000', 'PXAT', 1893456000000)
return {1893456000000000, 1, 2, 3}`)
	bare := redis.NewScript("return 1")
	_, args, _, err := s.takeArgs(&store.TakeParams{Key: "k", Limit: benchLimit, Cost: 1})
	if err != nil {
		b.Fatal(err)
	}
	check := func(b *testing.B, err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Run("take", func(b *testing.B) {
		for b.Loop() {
			_, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: benchLimit, Cost: 1})
			check(b, err)
		}
	})
	b.Run("rate-script", func(b *testing.B) {
		for b.Loop() {
			check(b, rateScript.Run(ctx, c, []string{key}, args...).Err())
		}
	})
	b.Run("redis-calls-only", func(b *testing.B) {
		for b.Loop() {
			check(b, calls.Run(ctx, c, []string{key}, args...).Err())
		}
	})
	b.Run("bare-script", func(b *testing.B) {
		for b.Loop() {
			check(b, bare.Run(ctx, c, []string{key}).Err())
		}
	})
	b.Run("get", func(b *testing.B) {
		for b.Loop() {
			if err := c.Get(ctx, key).Err(); err != nil && !errors.Is(err, redis.Nil) {
				b.Fatal(err)
			}
		}
	})
}

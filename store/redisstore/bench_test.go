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

// BenchmarkScript breaks a serial decision down, one round trip each, in
// one loop that makes every call in turn, starting each turn one call
// further on, so that a noisy host weighs on all alike. It reports each call's mean latency:
//
//   - bare-us: a `return 1` script with the take's key (the floor);
//   - shape-us: the same with a take's arguments and a reply of its shape;
//   - calls-us: a script making only the Redis calls a take makes (TIME,
//     GET, SET with an expiry), with the same arguments and reply;
//   - script-us: the rate script called directly with a take's arguments;
//   - take-us: the whole Take.
//
// The differences are the Redis calls, the script's arithmetic, and the Go
// side's work.
func BenchmarkScript(b *testing.B) {
	c := single(b)
	ctx := context.Background()
	s := newStore(b, c, Config{})
	p := store.TakeParams{Key: "k", Limit: benchLimit, Cost: 1}
	r, err := s.takeRequest(&p)
	if err != nil {
		b.Fatal(err)
	}
	keys, args := r.keys, r.args
	bare := redis.NewScript("return 1")
	shape := redis.NewScript("return {1893456000000000, 1, 2, 3}")
	calls := redis.NewScript(`local tm = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], '1893456000000000', 'PXAT', 1893456000000)
return {1893456000000000, 1, 2, 3}`)
	variants := []struct {
		name string
		call func() error
	}{
		{"bare-us", func() error { return bare.Run(ctx, c, keys).Err() }},
		{"shape-us", func() error { return shape.Run(ctx, c, keys, args...).Err() }},
		{"calls-us", func() error { return calls.Run(ctx, c, keys, args...).Err() }},
		{"script-us", func() error { return rateScript.Run(ctx, c, keys, args...).Err() }},
		{"take-us", func() error { _, err := s.Take(ctx, p); return err }},
	}
	spent := make([]time.Duration, len(variants))
	n := 0
	for b.Loop() {
		// Each call's place in the turn moves, for the place weighs too
		// (the first call after the loop's own work is slower).
		for j := range variants {
			i := (j + n) % len(variants)
			start := time.Now()
			if err := variants[i].call(); err != nil {
				b.Fatal(err)
			}
			spent[i] += time.Since(start)
		}
		n++
	}
	for i, v := range variants {
		b.ReportMetric(float64(spent[i].Microseconds())/float64(n), v.name)
	}
}

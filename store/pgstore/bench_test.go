package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/pgstore"
)

// floorTable has the shape of sluice_rate_state; the floor statement is the
// least one statement per decision can do: a conditional increment.
const floorTable = `CREATE TABLE bench_floor (
    name     text   NOT NULL,
    key      text   NOT NULL,
    t        bigint NOT NULL,
    count    bigint NOT NULL DEFAULT 0,
    prev     bigint NOT NULL DEFAULT 0,
    fresh_at bigint NOT NULL,
    PRIMARY KEY (name, key)
);
CREATE INDEX bench_floor_fresh_at ON bench_floor (fresh_at)`

const floorSQL = `UPDATE bench_floor SET count = count + 1 WHERE name = $1 AND key = $2 AND count < $3 RETURNING count`

// BenchmarkTake compares Store.Take with the floor on one hot key and on 100
// keys, with a pool of 8 and of 32 connections and as many goroutines. Every
// decision is an admission: the limit (a million per second, burst 10^12)
// never runs dry, so both sides write every time. The floor commits once
// per decision; the Store, with its default Config, batches concurrent
// Takes (SLUICE_BENCH_INFLIGHT=conns SLUICE_BENCH_BATCH=1 measures it one
// statement per decision, like the floor).
func BenchmarkTake(b *testing.B) {
	bb := setup(b)
	ctx := context.Background()
	_, err := bb.pool.Exec(ctx, floorTable)
	require.NoError(b, err)
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%03d", i)
		_, err := bb.pool.Exec(ctx, "INSERT INTO bench_floor (name, key, t, fresh_at) VALUES ('floor', $1, 0, 0)", keys[i])
		require.NoError(b, err)
	}
	l := store.Limit{Name: "bench", Rate: 1_000_000, Period: time.Second, Burst: 1_000_000_000_000}
	for _, nkeys := range []int{1, 100} {
		for _, conns := range []int{8, 32} {
			pool := benchPool(b, bb.schema, int32(conns))
			s, err := pgstore.New(pool, benchConfig(conns))
			require.NoError(b, err)
			name := fmt.Sprintf("keys=%d/conns=%d", nkeys, conns)
			b.Run(name+"/sluice", func(b *testing.B) {
				parallel(b, conns, func(i int64) error {
					res, err := s.Take(ctx, store.TakeParams{Key: keys[i%int64(nkeys)], Limit: l, Cost: 1})
					if err == nil && !res.Allowed {
						err = fmt.Errorf("denied: %+v", res)
					}
					return err
				})
			})
			b.Run(name+"/floor", func(b *testing.B) {
				parallel(b, conns, func(i int64) error {
					var n int64
					return pool.QueryRow(ctx, floorSQL, "floor", keys[i%int64(nkeys)], int64(1)<<62).Scan(&n)
				})
			})
		}
	}
}

// BenchmarkTakeVsFloor measures the same two workloads as BenchmarkTake,
// alternating between them every 250ms for b.N rounds, and reports both
// rates and their ratio (sluice/floor). Alternating keeps the comparison
// fair on a machine whose load changes while it runs. Use -benchtime=8x.
func BenchmarkTakeVsFloor(b *testing.B) {
	bb := setup(b)
	ctx := context.Background()
	_, err := bb.pool.Exec(ctx, floorTable)
	require.NoError(b, err)
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%03d", i)
		_, err := bb.pool.Exec(ctx, "INSERT INTO bench_floor (name, key, t, fresh_at) VALUES ('floor', $1, 0, 0)", keys[i])
		require.NoError(b, err)
	}
	l := store.Limit{Name: "bench", Rate: 1_000_000, Period: time.Second, Burst: 1_000_000_000_000}
	for _, nkeys := range []int{1, 100} {
		for _, conns := range []int{8, 32} {
			pool := benchPool(b, bb.schema, int32(conns))
			s, err := pgstore.New(pool, benchConfig(conns))
			require.NoError(b, err)
			sluice := func(i int64) error {
				res, err := s.Take(ctx, store.TakeParams{Key: keys[i%int64(nkeys)], Limit: l, Cost: 1})
				if err == nil && !res.Allowed {
					err = fmt.Errorf("denied: %+v", res)
				}
				return err
			}
			floor := func(i int64) error {
				var n int64
				return pool.QueryRow(ctx, floorSQL, "floor", keys[i%int64(nkeys)], int64(1)<<62).Scan(&n)
			}
			b.Run(fmt.Sprintf("keys=%d/conns=%d", nkeys, conns), func(b *testing.B) {
				var ns, nf int64
				var ds, df time.Duration
				for range b.N {
					n, d := forDuration(b, conns, 250*time.Millisecond, sluice)
					ns, ds = ns+n, ds+d
					n, d = forDuration(b, conns, 250*time.Millisecond, floor)
					nf, df = nf+n, df+d
				}
				rs, rf := float64(ns)/ds.Seconds(), float64(nf)/df.Seconds()
				b.ReportMetric(rs, "sluice-decisions/s")
				b.ReportMetric(rf, "floor-decisions/s")
				b.ReportMetric(rs/rf, "ratio")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// forDuration runs f on workers goroutines for about d and returns how many
// calls completed and how long they took.
func forDuration(b *testing.B, workers int, d time.Duration, f func(i int64) error) (int64, time.Duration) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	start := time.Now()
	stop := start.Add(d)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if err := f(next.Add(1)); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	return next.Load(), time.Since(start)
}

// BenchmarkTakeDenied is the saturated case: every decision on the hot key
// is a denial, which only reads.
func BenchmarkTakeDenied(b *testing.B) {
	bb := setup(b)
	ctx := context.Background()
	_, err := bb.pool.Exec(ctx, floorTable)
	require.NoError(b, err)
	_, err = bb.pool.Exec(ctx, "INSERT INTO bench_floor (name, key, t, count, fresh_at) VALUES ('floor', 'hot', 0, 10, 0)")
	require.NoError(b, err)
	l := store.Limit{Name: "bench", Rate: 10, Period: time.Hour}
	_, err = bb.store.Take(ctx, store.TakeParams{Key: "hot", Limit: l, Cost: 10})
	require.NoError(b, err)
	for _, conns := range []int{8, 32} {
		pool := benchPool(b, bb.schema, int32(conns))
		s, err := pgstore.New(pool, benchConfig(conns))
		require.NoError(b, err)
		b.Run(fmt.Sprintf("conns=%d/sluice", conns), func(b *testing.B) {
			parallel(b, conns, func(int64) error {
				res, err := s.Take(ctx, store.TakeParams{Key: "hot", Limit: l, Cost: 1})
				if err == nil && res.Allowed {
					err = fmt.Errorf("allowed: %+v", res)
				}
				return err
			})
		})
		b.Run(fmt.Sprintf("conns=%d/floor", conns), func(b *testing.B) {
			parallel(b, conns, func(int64) error {
				var n int64
				err := pool.QueryRow(ctx, floorSQL, "floor", "hot", 10).Scan(&n)
				if err != nil && err.Error() == "no rows in result set" {
					return nil
				}
				if err == nil {
					err = fmt.Errorf("floor admitted")
				}
				return err
			})
		})
	}
}

func benchPool(b *testing.B, schema string, conns int32) *pgxpool.Pool {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(testURL())
	require.NoError(b, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns, cfg.MinConns = conns, conns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	return pool
}

// parallel runs b.N calls of f on exactly workers goroutines (RunParallel
// ties its goroutine count to GOMAXPROCS) and reports decisions per second.
func parallel(b *testing.B, workers int, f func(i int64) error) {
	b.ReportAllocs()
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	b.ResetTimer()
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
}

// benchConfig is the Store configuration the comparisons use:
// SLUICE_BENCH_INFLIGHT and SLUICE_BENCH_BATCH override the defaults
// ("conns" for one request per connection).
func benchConfig(conns int) pgstore.Config {
	var cfg pgstore.Config
	if v := os.Getenv("SLUICE_BENCH_INFLIGHT"); v == "conns" {
		cfg.MaxInFlight = conns
	} else if v != "" {
		cfg.MaxInFlight, _ = strconv.Atoi(v)
	}
	if v := os.Getenv("SLUICE_BENCH_BATCH"); v != "" {
		cfg.MaxBatch, _ = strconv.Atoi(v)
	}
	return cfg
}

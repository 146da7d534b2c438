package pgstore_test

// The side-by-side figures (Sluice against the floor of one bare
// `UPDATE ... RETURNING` per decision) are in the bench/ module; these
// benchmarks measure the Store alone, for work on pgstore itself.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/testenv"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/pgstore"
	"github.com/sluicerl/sluice/store/storetest"
)

// BenchmarkTake measures admissions on one hot key and on 100 keys, with a
// pool of 8 and of 32 connections and as many goroutines, batched (the
// default Config) and one statement per decision (MaxBatch 1). The limit
// never runs dry, so every decision writes.
func BenchmarkTake(b *testing.B) {
	bb := setup(b)
	ctx := context.Background()
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%03d", i)
	}
	l := store.Limit{Name: "bench", Rate: 1_000_000, Period: time.Second, Burst: 1_000_000_000_000}
	for _, nkeys := range []int{1, 100} {
		for _, conns := range []int{8, 32} {
			pool := benchPool(b, bb.schema, int32(conns))
			for _, batch := range []int{0, 1} {
				s, err := pgstore.New(pool, pgstore.Config{MaxBatch: batch})
				require.NoError(b, err)
				b.Run(fmt.Sprintf("keys=%d/conns=%d/maxbatch=%d", nkeys, conns, batch), func(b *testing.B) {
					storetest.BenchParallel(b, conns, func(i int64) error {
						res, err := s.Take(ctx, store.TakeParams{Key: keys[i%int64(nkeys)], Limit: l, Cost: 1})
						if err == nil && !res.Allowed {
							err = fmt.Errorf("denied: %+v", res)
						}
						return err
					})
				})
			}
		}
	}
}

// BenchmarkTakeDenied is the saturated case: every decision on the hot key
// is a denial, which only reads.
func BenchmarkTakeDenied(b *testing.B) {
	bb := setup(b)
	ctx := context.Background()
	l := store.Limit{Name: "bench", Rate: 10, Period: time.Hour}
	_, err := bb.store.Take(ctx, store.TakeParams{Key: "hot", Limit: l, Cost: 10})
	require.NoError(b, err)
	for _, conns := range []int{8, 32} {
		pool := benchPool(b, bb.schema, int32(conns))
		s, err := pgstore.New(pool, pgstore.Config{})
		require.NoError(b, err)
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) {
			storetest.BenchParallel(b, conns, func(int64) error {
				res, err := s.Take(ctx, store.TakeParams{Key: "hot", Limit: l, Cost: 1})
				if err == nil && res.Allowed {
					err = fmt.Errorf("allowed: %+v", res)
				}
				return err
			})
		})
	}
}

func benchPool(b *testing.B, schema string, conns int32) *pgxpool.Pool {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
	require.NoError(b, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns, cfg.MinConns = conns, conns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	return pool
}

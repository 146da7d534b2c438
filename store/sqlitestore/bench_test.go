package sqlitestore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/storetest"
)

// BenchmarkTake measures admissions (every decision writes and commits with
// synchronous=FULL) on one key and on 100 keys, serially and from 8
// goroutines.
func BenchmarkTake(b *testing.B) {
	l := store.Limit{Name: "bench", Rate: 1_000_000, Period: time.Second, Burst: 1_000_000_000_000}
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%03d", i)
	}
	for _, nkeys := range []int{1, 100} {
		for _, workers := range []int{1, 8} {
			b.Run(fmt.Sprintf("keys=%d/goroutines=%d", nkeys, workers), func(b *testing.B) {
				s, _ := newStore(b)
				ctx := context.Background()
				storetest.BenchParallel(b, workers, func(i int64) error {
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

// BenchmarkTakeDenied measures denials, which only read.
func BenchmarkTakeDenied(b *testing.B) {
	l := store.Limit{Name: "bench", Rate: 10, Period: time.Hour}
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("goroutines=%d", workers), func(b *testing.B) {
			s, _ := newStore(b)
			ctx := context.Background()
			if _, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 10}); err != nil {
				b.Fatal(err)
			}
			storetest.BenchParallel(b, workers, func(int64) error {
				res, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
				if err == nil && res.Allowed {
					err = fmt.Errorf("allowed: %+v", res)
				}
				return err
			})
		})
	}
}

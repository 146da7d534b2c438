package guard_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/guard"
	"github.com/sluicerl/sluice/store/memstore"
)

// BenchmarkTake measures what the guard adds to a healthy store's decision
// (over memstore, so the guard's own cost shows): a deadline, a goroutine
// and a channel per call, and the lock-free health bookkeeping.
func BenchmarkTake(b *testing.B) {
	for _, guarded := range []bool{false, true} {
		b.Run("guarded="+strconv.FormatBool(guarded), func(b *testing.B) {
			var st store.RateStore = memstore.New(memstore.Config{})
			if guarded {
				g, err := guard.New(st, guard.Config{})
				if err != nil {
					b.Fatal(err)
				}
				st = g
			}
			l := store.Limit{Name: "bench", Rate: 1_000_000, Period: time.Second, Burst: 1 << 40}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if _, err := st.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

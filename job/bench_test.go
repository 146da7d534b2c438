package job_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/store"
)

// BenchmarkNoopJobs claims and completes b.N due no-op jobs with 4
// workers (one job at a time each) and reports jobs/s. Run it with a fixed
// count, e.g. -bench NoopJobs -benchtime 10000x.
func BenchmarkNoopJobs(b *testing.B) {
	for i, be := range backends() {
		b.Run(be.name, func(b *testing.B) {
			be := backends()[i] // a store of this run's own
			ctx := context.Background()
			clk := clocktest.New(t0)
			s := be.open(b, clk)
			_, _, err := s.UpsertConnector(ctx, store.Connector{ID: "c"})
			if err != nil {
				b.Fatal(err)
			}
			for i := range b.N {
				if _, _, err := s.UpsertJob(ctx, store.JobSpec{ID: fmt.Sprintf("j%07d", i), ConnectorID: "c", Type: "noop",
					GroupKey: fmt.Sprintf("g%d", i%10)}, t0); err != nil {
					b.Fatal(err)
				}
			}
			var done atomic.Int64
			h := func(context.Context, *job.Run) error { done.Add(1); return nil }
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for w := range 4 {
				wk, err := job.New(job.Config{Store: s, Holder: fmt.Sprintf("w%d", w), Clock: clk, PassNow: true,
					Handlers: map[string]job.Handler{"noop": h}})
				if err != nil {
					b.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for done.Load() < int64(b.N) {
						if _, err := wk.Poll(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
		})
	}
}

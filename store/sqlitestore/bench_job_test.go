package sqlitestore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicerl/sluice/store"
)

// BenchmarkClaimAndFinish measures a worker's cycle as job.Worker runs it
// against this store: a claim of 4 jobs, gated by a peek at the
// connector's limit in the same file, that writes the previous claim's 4
// finishes in its transaction (one commit, synchronous=FULL). The finished
// jobs are due again at once, so the 2,000 due jobs in 10 groups stay due.
func BenchmarkClaimAndFinish(b *testing.B) {
	s, _ := newStore(b)
	ctx := context.Background()
	if _, _, err := s.UpsertConnector(ctx, store.Connector{ID: "bench", Policies: []string{"bench"}}); err != nil {
		b.Fatal(err)
	}
	const jobs = 2000
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < jobs; i = next.Add(1) - 1 {
				if _, _, err := s.UpsertJob(ctx, store.JobSpec{ID: fmt.Sprintf("j%07d", i), ConnectorID: "bench", Type: "noop",
					GroupKey: fmt.Sprintf("g%d", i%10)}, time.Time{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	l := store.Limit{Name: "bench", Rate: 1_000_000, Period: time.Second}
	gate := func(ctx context.Context, id string) (time.Duration, error) {
		_, err := s.Take(ctx, store.TakeParams{Key: id, Limit: l, Cost: 0})
		return 0, err
	}
	var fin []store.EndParams
	cpu0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		cs, ferrs, err := s.ClaimAndFinish(ctx, store.ClaimParams{Holder: "w", Limit: 4, LeaseTTL: time.Minute, Gate: gate, Types: []string{"noop"}}, fin)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range ferrs {
			if e != nil {
				b.Fatal(e)
			}
		}
		if len(cs) != 4 {
			b.Fatalf("claimed %d jobs, want 4", len(cs))
		}
		fin = fin[:0]
		for _, c := range cs {
			fin = append(fin, store.EndParams{Fence: store.Fence{JobID: c.Job.ID, Token: c.Job.LeaseToken}})
		}
	}
	b.ReportMetric(float64(b.N*4)/b.Elapsed().Seconds(), "jobs/s")
	// The process's CPU time per job: what the figure is made of on a
	// machine that other work keeps busy (the wall time is not).
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N*4), "cpu-us/job")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

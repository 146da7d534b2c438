package storetest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchParallel runs b.N calls of f on exactly workers goroutines (unlike
// b.RunParallel, whose goroutine count follows GOMAXPROCS: a store's
// throughput depends on how many callers share its round trips) and reports
// decisions per second. f gets the call's index; the first error fails the
// benchmark.
func BenchParallel(b *testing.B, workers int, f func(i int64) error) {
	b.ReportAllocs()
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	b.ResetTimer()
	start := time.Now()
	for range workers {
		wg.Go(func() {
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
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
}

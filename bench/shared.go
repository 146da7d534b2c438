package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The shared-state figures: Sluice's Redis, PostgreSQL and SQLite stores
// against their peers and floors on real servers. Each service is a
// Section: it opens its fixtures once (connections, a unique key prefix or
// schema or file), its cases run against them, and Close removes everything
// the section wrote.
//
// A shared-state case is a closed-loop load: exactly Workers goroutines,
// each making one decision after another (b.RunParallel would tie the count
// to GOMAXPROCS). cmd/sluicebench runs the cases of a section in short
// alternating slices (RunFor) so that a change in the machine's load
// touches every case alike; under go test each case is a plain benchmark
// (Bench) of b.N decisions.

// SharedConfig says where the services are. Zero fields take the defaults.
type SharedConfig struct {
	// RedisURL; empty means $SLUICE_TEST_REDIS_URL, else DefaultRedisURL.
	RedisURL string
	// PostgresURL; empty means $SLUICE_TEST_POSTGRES_URL, else
	// DefaultPostgresURL.
	PostgresURL string
	// TempDir holds the SQLite file's directory; empty means os.TempDir().
	TempDir string
}

// The services' default addresses, as in DEVELOPERS.md.
const (
	DefaultRedisURL    = "redis://127.0.0.1:6379"
	DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
)

func (c SharedConfig) withDefaults() SharedConfig {
	if c.RedisURL == "" {
		c.RedisURL = envOr("SLUICE_TEST_REDIS_URL", DefaultRedisURL)
	}
	if c.PostgresURL == "" {
		c.PostgresURL = envOr("SLUICE_TEST_POSTGRES_URL", DefaultPostgresURL)
	}
	return c
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// SharedCase is one shared-state benchmark: Workers goroutines calling op.
type SharedCase struct {
	// ID is a slash-separated name starting with the section's name,
	// matched by -only and used as the sub-benchmark name under go test.
	ID    string
	Label string
	Group Group
	// Workers is the number of goroutines making decisions.
	Workers int
	// Reference marks a case that is neither Sluice's figure nor a peer's
	// but helps to read them.
	Reference bool
	// op makes decision number i (numbered from 0 in each run) and
	// reports whether it was allowed. It may only be called while the
	// section is open.
	op func(ctx context.Context, i int64) (bool, error)
}

// Section is one service's figures. Its cases may be listed at any time;
// they run only between Open and Close. A Section is not safe for
// concurrent use, but its open cases are.
type Section struct {
	// Name is the first element of every case ID: redis, postgres, sqlite.
	Name string
	// Groups lists the groups of Cases in print order.
	Groups []Group
	Cases  []SharedCase
	// Notes describes the setup, one line each, for the report.
	Notes []string

	open   func(ctx context.Context) error
	close  func(ctx context.Context) error
	warm   func(ctx context.Context) error
	opened bool
}

// Open connects and prepares the fixtures (and touches every key once, so
// that the figures measure the steady state). An error means the service
// is unusable: the section should be skipped, and nothing is left behind.
func (s *Section) Open(ctx context.Context) error {
	if s.opened {
		return fmt.Errorf("%s: already open", s.Name)
	}
	if err := s.open(ctx); err != nil {
		_ = s.close(context.WithoutCancel(ctx))
		return err
	}
	s.opened = true
	if s.warm != nil {
		if err := s.warm(ctx); err != nil {
			_ = s.Close(context.WithoutCancel(ctx))
			return fmt.Errorf("%s: warming up: %w", s.Name, err)
		}
	}
	return nil
}

// Close removes what the section wrote (keys, schema, file) and releases
// its connections. It is safe to call on a section that failed to open.
func (s *Section) Close(ctx context.Context) error {
	s.opened = false
	return s.close(ctx)
}

// SharedSections returns the Redis, PostgreSQL and SQLite sections, none
// open yet.
func SharedSections(cfg SharedConfig) []*Section {
	cfg = cfg.withDefaults()
	return []*Section{newRedisSection(cfg), newPostgresSection(cfg), newSQLiteSection(cfg)}
}

// Sample is what one run of a shared-state case measured.
type Sample struct {
	Ops     int64         // decisions made
	Allowed int64         // of which allowed
	Elapsed time.Duration // wall time from the first call to the last answer
	CPU     time.Duration // process CPU time (user+system, all threads)
	Mallocs uint64        // heap allocations during the run
	Bytes   uint64        // heap bytes allocated during the run
}

// Add accumulates o into s.
func (s *Sample) Add(o Sample) {
	s.Ops += o.Ops
	s.Allowed += o.Allowed
	s.Elapsed += o.Elapsed
	s.CPU += o.CPU
	s.Mallocs += o.Mallocs
	s.Bytes += o.Bytes
}

// Rate returns decisions per second.
func (s Sample) Rate() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Ops) / s.Elapsed.Seconds()
}

// load runs c's op on exactly c.Workers goroutines until more() says stop
// (it is called before every decision with the decision's number) and
// returns what was done. The first error stops every worker.
func (c SharedCase) load(ctx context.Context, more func(i int64) bool) (Sample, error) {
	var (
		next, done, allowed atomic.Int64
		wg                  sync.WaitGroup
		once                sync.Once
		firstErr            error
		failed              atomic.Bool
	)
	// Decisions run under a context that is never cancelled, the shape of
	// context.Background(): a context that can end costs some clients a
	// goroutine per call (see the guard rows). ctx only stops the run.
	opCtx := context.WithoutCancel(ctx)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := processCPU()
	start := time.Now()
	for range c.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n, a int64
			for !failed.Load() {
				i := next.Add(1) - 1
				if !more(i) {
					break
				}
				ok, err := c.op(opCtx, i)
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("%s: %w", c.ID, err) })
					failed.Store(true)
					break
				}
				n++
				if ok {
					a++
				}
			}
			done.Add(n)
			allowed.Add(a)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	runtime.ReadMemStats(&ms1)
	return Sample{
		Ops:     done.Load(),
		Allowed: allowed.Load(),
		Elapsed: elapsed,
		CPU:     cpu,
		Mallocs: ms1.Mallocs - ms0.Mallocs,
		Bytes:   ms1.TotalAlloc - ms0.TotalAlloc,
	}, firstErr
}

// RunFor runs the case for about d and returns what it measured.
func (c SharedCase) RunFor(ctx context.Context, d time.Duration) (Sample, error) {
	deadline := time.Now().Add(d)
	return c.load(ctx, func(int64) bool { return ctx.Err() == nil && time.Now().Before(deadline) })
}

// Bench runs b.N decisions on exactly c.Workers goroutines and reports
// decisions/s, the share allowed and the process CPU time per decision.
// The section must be open.
func (c SharedCase) Bench(b *testing.B) {
	b.ReportAllocs()
	n := int64(b.N)
	ctx := context.Background()
	b.ResetTimer()
	s, err := c.load(ctx, func(i int64) bool { return i < n })
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(s.Rate(), "decisions/s")
	b.ReportMetric(float64(s.CPU.Nanoseconds())/float64(max(s.Ops, 1)), cpuMetric)
	b.ReportMetric(float64(s.Allowed)/float64(max(s.Ops, 1)), allowedMetric)
}

// uniqueName returns a name no other run uses at the same time:
// prefix, the process id and the time.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s%d_%x", prefix, os.Getpid(), time.Now().UnixNano())
}

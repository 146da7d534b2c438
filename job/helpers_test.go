package job_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/internal/testenv"
	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/pgstore"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

var t0 = time.Date(2026, 1, 19, 0, 0, 0, 0, time.UTC)

// backend is one JobStore implementation under test. open returns a store
// on the same records each time it is called (a restart).
type backend struct {
	name string
	open func(t testing.TB, clk *clocktest.Clock) store.JobStore
}

// backends returns memstore, SQLite and PostgreSQL (which fails or skips
// as testenv says when PostgreSQL is unreachable). Each call of open on a
// backend returned for one test reaches the same records.
func backends() []backend {
	return []backend{
		{"memory", func() func(testing.TB, *clocktest.Clock) store.JobStore {
			var s *memstore.JobStore
			return func(_ testing.TB, clk *clocktest.Clock) store.JobStore {
				if s == nil {
					s = memstore.NewJobStore(memstore.JobConfig{Clock: clk})
				}
				return s
			}
		}()},
		{"sqlite", func() func(testing.TB, *clocktest.Clock) store.JobStore {
			var path string
			return func(t testing.TB, clk *clocktest.Clock) store.JobStore {
				if path == "" {
					path = filepath.Join(t.TempDir(), "jobs.db")
				}
				s, err := sqlitestore.Open(context.Background(), path, sqlitestore.Config{Clock: clk})
				require.NoError(t, err)
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
		}()},
		{"postgres", func() func(testing.TB, *clocktest.Clock) store.JobStore {
			var schema string
			return func(t testing.TB, _ *clocktest.Clock) store.JobStore {
				if schema == "" {
					schema = testenv.PostgresSchema(t, "sluice_job_")
				}
				cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
				require.NoError(t, err)
				cfg.ConnConfig.RuntimeParams["search_path"] = schema
				cfg.MaxConns = 4
				pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
				require.NoError(t, err)
				t.Cleanup(pool.Close)
				_, err = pgstore.Migrate(context.Background(), pool)
				require.NoError(t, err)
				s, err := pgstore.New(pool, pgstore.Config{})
				require.NoError(t, err)
				return s
			}
		}()},
	}
}

// eachBackend runs f as a parallel subtest per backend.
func eachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b)
		})
	}
}

// provider is a simulated exchange: streams of numbered items served in
// pages, a fixed-window request count it keeps itself (so tests count
// what the provider saw, not what Sluice believes), and scripted 429s.
type provider struct {
	clk    *clocktest.Clock
	period time.Duration
	items  int // items per stream

	mu          sync.Mutex
	windows     map[int64]int
	calls       int
	storm       int           // the next storm calls answer 429 (or stormStatus)
	stormStatus int           // the status of a storm's answers; 0: 429
	retryHdr    string        // Retry-After of a 429; empty: none
	fail        int           // the next fail calls answer 500
	onCall      func(n int)   // called with the call number, unlocked
	slow        time.Duration // each call advances the clock this much
}

func newProvider(clk *clocktest.Clock, items int) *provider {
	return &provider{clk: clk, period: time.Minute, items: items, windows: map[int64]int{}}
}

// page returns the items of stream after cursor, at most size of them.
func (p *provider) page(_ context.Context, cursor, size int) ([]int, error) {
	p.mu.Lock()
	p.calls++
	n := p.calls
	p.windows[p.clk.Now().UnixMicro()/p.period.Microseconds()]++
	var err error
	switch {
	case p.storm > 0:
		p.storm--
		h := http.Header{}
		if p.retryHdr != "" {
			h.Set("Retry-After", p.retryHdr)
		}
		err = &outbound.StatusError{Status: cmp.Or(p.stormStatus, http.StatusTooManyRequests), Header: h}
	case p.fail > 0:
		p.fail--
		err = &outbound.StatusError{Status: http.StatusInternalServerError}
	}
	on, slow := p.onCall, p.slow
	p.mu.Unlock()
	if on != nil {
		on(n)
	}
	if slow > 0 {
		p.clk.Advance(slow)
	}
	if err != nil {
		return nil, err
	}
	var out []int
	for i := cursor; i < p.items && len(out) < size; i++ {
		out = append(out, i)
	}
	return out, nil
}

func (p *provider) maxPerWindow() (most, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.windows {
		most = max(most, n)
		total += n
	}
	return most, total
}

// sink is the handler's durable destination: items written per stream.
type sink struct {
	mu    sync.Mutex
	items map[string][]int
}

func newSink() *sink { return &sink{items: map[string][]int{}} }

func (s *sink) write(stream string, items []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items[stream] = append(s.items[stream], items...)
}

func (s *sink) get(stream string) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.items[stream]...)
}

// pager is the seed 000 handler: pages from the job's cursor until the
// provider has nothing more, writing each page, then committing the cursor
// after it.
func pager(p *provider, out *sink, size int) job.Handler {
	return func(ctx context.Context, run *job.Run) error {
		cur := 0
		if c := run.Cursor(); c != "" {
			n, err := strconv.Atoi(c)
			if err != nil {
				return job.Permanent(fmt.Errorf("bad cursor %q", c))
			}
			cur = n
		}
		for {
			var items []int
			if err := run.Call(ctx, func(ctx context.Context) error {
				var err error
				items, err = p.page(ctx, cur, size)
				return err
			}); err != nil {
				return err
			}
			if len(items) == 0 {
				return nil // drained
			}
			out.write(run.Job().ID, items)
			cur = items[len(items)-1] + 1
			if err := run.Commit(ctx, strconv.Itoa(cur)); err != nil {
				return err
			}
		}
	}
}

// events collects a worker's events.
type events struct {
	mu  sync.Mutex
	all []job.Event
}

func (e *events) add(ev job.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func (e *events) kinds(jobID string) []job.EventKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []job.EventKind
	for _, ev := range e.all {
		if jobID == "" || ev.JobID == jobID {
			out = append(out, ev.Kind)
		}
	}
	return out
}

func mustWorker(t *testing.T, cfg job.Config) *job.Worker {
	t.Helper()
	cfg.PassNow = true
	if cfg.Rand == nil {
		cfg.Rand = func() float64 { return 0.5 }
	}
	w, err := job.New(cfg)
	require.NoError(t, err)
	return w
}

func setupConnector(t *testing.T, s store.JobStore, id string, policies ...string) {
	t.Helper()
	_, _, err := s.UpsertConnector(context.Background(), store.Connector{ID: id, Policies: policies})
	require.NoError(t, err)
}

func addJob(t *testing.T, s store.JobStore, clk *clocktest.Clock, spec store.JobSpec) {
	t.Helper()
	if spec.Type == "" {
		spec.Type = "ohlcv"
	}
	_, _, err := s.UpsertJob(context.Background(), spec, clk.Now())
	require.NoError(t, err)
}

func getJob(t *testing.T, s store.JobStore, id string) store.Job {
	t.Helper()
	j, err := s.GetJob(context.Background(), id)
	require.NoError(t, err)
	return j
}

// pollUntilIdle polls w until a poll runs nothing, at most limit times.
func pollUntilIdle(t *testing.T, w *job.Worker, limit int) int {
	t.Helper()
	total := 0
	for range limit {
		n, err := w.Poll(context.Background())
		require.NoError(t, err)
		if n == 0 {
			return total
		}
		total += n
	}
	t.Fatalf("still running jobs after %d polls", limit)
	return total
}

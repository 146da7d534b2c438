package job_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

// Seed 000's four acceptance checks, each a test.

const importYAML = `
connectors:
  - id: binance
    policies: [binance-weight]
    profile: binance
    priority: 50
    pairs: [BTC/USDT, ETH/USDT]
    timeframes: [1m, 1h]
    types: [ohlcv]
`

// TestSeed000ConnectorCreatedTwiceIsOneRecord: creating connector binance
// twice updates the same record, and importing the same file twice
// changes nothing.
func TestSeed000ConnectorCreatedTwiceIsOneRecord(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		im, err := job.ParseImport([]byte(importYAML))
		require.NoError(t, err)
		res, err := im.Apply(ctx, s)
		require.NoError(t, err)
		require.Equal(t, job.ImportResult{ConnectorsCreated: 1, JobsCreated: 4}, res)
		before, err := s.ListJobs(ctx, store.ListParams{})
		require.NoError(t, err)
		res, err = im.Apply(ctx, s)
		require.NoError(t, err)
		require.Equal(t, job.ImportResult{ConnectorsUnchanged: 1, JobsUnchanged: 4}, res)
		_, created, err := s.UpsertConnector(ctx, store.Connector{ID: "binance", Policies: []string{"binance-weight"}, Profile: "binance"})
		require.NoError(t, err)
		require.False(t, created)
		cs, err := s.ListConnectors(ctx, store.ListParams{})
		require.NoError(t, err)
		require.Len(t, cs, 1)
		require.Equal(t, "binance", cs[0].ID)
		require.EqualValues(t, 4, cs[0].JobsCount)
		require.EqualValues(t, 4, cs[0].ActiveJobsCount)
		after, err := s.ListJobs(ctx, store.ListParams{})
		require.NoError(t, err)
		require.Equal(t, before, after)
		ids := []string{}
		for _, j := range after {
			ids = append(ids, j.ID)
		}
		require.Equal(t, []string{"binance:BTC/USDT:1h:ohlcv", "binance:BTC/USDT:1m:ohlcv", "binance:ETH/USDT:1h:ohlcv", "binance:ETH/USDT:1m:ohlcv"}, ids)
		require.Equal(t, time.Minute, after[1].Interval)
		require.JSONEq(t, `{"symbol":"BTC/USDT","timeframe":"1m"}`, string(after[1].Params))
	})
}

// TestSeed000TwoWorkersNeverExceedLimit: two workers, each on its own
// connection to one SQLite file (as two processes would be), run five
// jobs through a provider that allows 10 requests per minute; the
// provider's own count never exceeds 10 in any window, and every item is
// fetched exactly once.
func TestSeed000TwoWorkersNeverExceedLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.New(t0)
	path := filepath.Join(t.TempDir(), "shared.db")
	prov := newProvider(clk, 40)
	out := newSink()
	const limit = 10
	var workers []*job.Worker
	var first store.JobStore
	for i := range 2 {
		s, err := sqlitestore.Open(ctx, path, sqlitestore.Config{Clock: clk})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		lim, err := limiter.New(limiter.Config{Store: s, Policies: []limiter.Policy{
			{Name: "binance-weight", Algorithm: store.FixedWindow, Rate: limit, Period: time.Minute}}})
		require.NoError(t, err)
		if i == 0 {
			first = s
			setupConnector(t, s, "binance", "binance-weight")
			for j := range 5 {
				addJob(t, s, clk, store.JobSpec{ID: fmt.Sprintf("binance:P%d/USDT:1m:ohlcv", j), ConnectorID: "binance"})
			}
		}
		workers = append(workers, mustWorker(t, job.Config{Store: s, Holder: fmt.Sprintf("w%d", i), Limiter: lim, MaxPacingWait: -1,
			Clock: clk, Handlers: map[string]job.Handler{"ohlcv": pager(prov, out, 2)}}))
	}
	done := func() bool { // every job has run to the end (its empty page)
		for j := range 5 {
			if getJob(t, first, fmt.Sprintf("binance:P%d/USDT:1m:ohlcv", j)).LastSuccessAt.IsZero() {
				return false
			}
		}
		return true
	}
	for step := 0; !done(); step++ {
		require.Less(t, step, 2000, "the jobs did not finish")
		var wg sync.WaitGroup
		ran := make([]int, 2)
		for i, w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, err := w.Poll(ctx)
				require.NoError(t, err)
				ran[i] = n
			}()
		}
		wg.Wait()
		if ran[0]+ran[1] == 0 {
			clk.Advance(10 * time.Second)
		}
	}
	most, total := prov.maxPerWindow()
	require.LessOrEqual(t, most, limit, "the provider saw more than the limit in a window")
	require.Equal(t, limit, most, "the limit was reached: the check is not vacuous")
	require.Equal(t, 5*21, total, "20 pages and one empty page per job, each fetched once")
	for j := range 5 {
		want := make([]int, 40)
		for i := range want {
			want[i] = i
		}
		require.Equal(t, want, out.get(fmt.Sprintf("binance:P%d/USDT:1m:ohlcv", j)))
	}
}

// TestSeed000PausedConnectorPreventsExecution: a paused connector's jobs
// are not run; resumed, they are.
func TestSeed000PausedConnectorPreventsExecution(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		prov := newProvider(clk, 4)
		out := newSink()
		setupConnector(t, s, "binance")
		addJob(t, s, clk, store.JobSpec{ID: "binance:BTC/USDT:1m:ohlcv", ConnectorID: "binance", Interval: time.Minute})
		require.NoError(t, s.SetConnectorStatus(ctx, "binance", store.ConnectorPaused))
		w := mustWorker(t, job.Config{Store: s, Clock: clk, Handlers: map[string]job.Handler{"ohlcv": pager(prov, out, 2)}})
		for range 3 {
			clk.Advance(time.Hour)
			n, err := w.Poll(ctx)
			require.NoError(t, err)
			require.Zero(t, n)
		}
		_, calls := prov.maxPerWindow()
		require.Zero(t, calls)
		require.NoError(t, s.SetConnectorStatus(ctx, "binance", store.ConnectorActive))
		n, err := w.Poll(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, []int{0, 1, 2, 3}, out.get("binance:BTC/USDT:1m:ohlcv"))
	})
}

// TestSeed000CursorPersistsAcrossRestarts: a run stops (request cap) after
// committing three pages; a new worker on a reopened store resumes from
// that cursor, so every item is written exactly once.
func TestSeed000CursorPersistsAcrossRestarts(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := clocktest.New(t0)
		prov := newProvider(clk, 10)
		out := newSink()
		s1 := b.open(t, clk)
		setupConnector(t, s1, "binance")
		addJob(t, s1, clk, store.JobSpec{ID: "j", ConnectorID: "binance"})
		w1 := mustWorker(t, job.Config{Store: s1, Clock: clk, Envelope: job.Envelope{MaxRequests: 3},
			Handlers: map[string]job.Handler{"ohlcv": pager(prov, out, 2)}})
		n, err := w1.Poll(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, "6", getJob(t, s1, "j").Cursor)
		// Restart: a new store on the same records, a new worker.
		clk.Advance(time.Minute)
		s2 := b.open(t, clk)
		require.Equal(t, "6", getJob(t, s2, "j").Cursor)
		w2 := mustWorker(t, job.Config{Store: s2, Clock: clk, Handlers: map[string]job.Handler{"ohlcv": pager(prov, out, 2)}})
		n, err = w2.Poll(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, out.get("j"))
		require.Equal(t, "10", getJob(t, s2, "j").Cursor)
	})
}

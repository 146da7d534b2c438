package job_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/breaker"
	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/retry"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// Seed 002's ten acceptance checks, each a test named after it.

// autoClock is a fake clock whose timers fire at once, moving the time
// forward by their duration: waits (pacing, retry backoff) take no real
// time and are still counted in the run's time.
type autoClock struct{ *clocktest.Clock }

// idleTTL is the outbound clients' IdleTTL in these tests: their idle
// sweep's timer (every idleTTL/2) is the one autoClock never fires, since
// firing it would move the fake clock on by itself, again and again.
const idleTTL = 10000 * time.Hour

func (c autoClock) NewTimer(d time.Duration) clock.Timer {
	if d >= idleTTL/2 {
		return firedTimer{make(chan time.Time)} // never fires
	}
	c.Advance(d)
	ch := make(chan time.Time, 1)
	ch <- c.Now()
	return firedTimer{ch}
}

type firedTimer struct{ ch chan time.Time }

func (f firedTimer) C() <-chan time.Time { return f.ch }
func (f firedTimer) Stop() bool          { return false }

// newOutbound returns an outbound client on the fake clock, with fast
// retries (full-jitter backoff of at most 1ms of fake time).
func newOutbound(t *testing.T, clk *clocktest.Clock, cfg outbound.Config) *outbound.Client {
	t.Helper()
	cfg.Clock = autoClock{clk}
	cfg.IdleTTL = idleTTL
	cfg.Store = memstore.New(memstore.Config{Clock: clk})
	if cfg.Retry.Base == 0 {
		cfg.Retry.Base, cfg.Retry.Cap = time.Millisecond, time.Millisecond
	}
	c, err := outbound.New(cfg)
	require.NoError(t, err)
	return c
}

func gaps(t *testing.T, s store.JobStore, jobID string) []store.GapRecord {
	t.Helper()
	g, err := s.ListGaps(context.Background(), store.ListParams{JobID: jobID})
	require.NoError(t, err)
	return g
}

func runs(t *testing.T, s store.JobStore, jobID string) []store.RunRecord {
	t.Helper()
	r, err := s.ListRuns(context.Background(), store.ListParams{JobID: jobID})
	require.NoError(t, err)
	return r
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestSeed002UnboundedWithoutEnvelope: with no run envelope a run goes on
// until the source is drained: 200 pages in one run, no gap.
func TestSeed002UnboundedWithoutEnvelope(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		prov, out := newProvider(clk, 400), newSink()
		setupConnector(t, s, "p")
		addJob(t, s, clk, store.JobSpec{ID: "j", ConnectorID: "p"})
		w := mustWorker(t, job.Config{Store: s, Clock: clk, Handlers: map[string]job.Handler{"ohlcv": pager(prov, out, 2)}})
		require.Equal(t, 1, pollUntilIdle(t, w, 5))
		require.Equal(t, seq(400), out.get("j"))
		rs := runs(t, s, "j")
		require.Len(t, rs, 1)
		require.Equal(t, store.RunSucceeded, rs[0].Outcome)
		require.EqualValues(t, 200, rs[0].Slices)
		require.EqualValues(t, 201, rs[0].Requests)
		require.Empty(t, gaps(t, s, "j"))
	})
}

// TestSeed002RequestCapEmitsGapWithoutPressure: an exhausted request cap
// ends the run with a resumable gap record whose reason is not in the
// source-pressure set, arms no cooldown, and the job runs again soon.
func TestSeed002RequestCapEmitsGapWithoutPressure(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		prov, out := newProvider(clk, 20), newSink()
		setupConnector(t, s, "p")
		addJob(t, s, clk, store.JobSpec{ID: "j", ConnectorID: "p", Interval: time.Hour})
		w := mustWorker(t, job.Config{Store: s, Clock: clk, Envelope: job.Envelope{MaxRequests: 4}, DeferDelay: 5 * time.Second,
			Handlers: map[string]job.Handler{"ohlcv": pager(prov, out, 2)}})
		n, err := w.Poll(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		g := gaps(t, s, "j")
		require.Len(t, g, 1)
		require.Equal(t, store.GapRequestCap, g[0].Reason)
		require.False(t, store.IsPressureReason(g[0].Reason))
		require.Equal(t, "8", g[0].Cursor)
		j := getJob(t, s, "j")
		require.Zero(t, j.Failures)
		require.Empty(t, j.ParkedReason)
		require.Equal(t, clk.Now().Add(5*time.Second), j.NextRunAt)
		c, err := s.GetConnector(ctx, "p")
		require.NoError(t, err)
		require.True(t, c.PressureUntil.IsZero(), "no source-pressure cooldown")
		// Rescheduled soon, it resumes at the gap's cursor.
		clk.Advance(5 * time.Second)
		for range 4 {
			_, err := w.Poll(ctx)
			require.NoError(t, err)
			clk.Advance(5 * time.Second)
		}
		require.Equal(t, seq(20), out.get("j"))
	})
}

// TestSeed002WallClockDefersWithCheckpointAtLastWrite: when the wall-clock
// deadline passes, the run defers the rest with a wall_clock gap, checked
// between pages (the page in flight completes), and the checkpoint is
// the last durably written page.
func TestSeed002WallClockDefersWithCheckpointAtLastWrite(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		prov, out := newProvider(clk, 20), newSink()
		prov.slow = 4 * time.Second // each page takes 4s
		setupConnector(t, s, "p")
		addJob(t, s, clk, store.JobSpec{ID: "j", ConnectorID: "p"})
		w := mustWorker(t, job.Config{Store: s, Clock: clk, Envelope: job.Envelope{MaxDuration: 10 * time.Second},
			Handlers: map[string]job.Handler{"ohlcv": pager(prov, out, 2)}})
		_, err := w.Poll(context.Background())
		require.NoError(t, err)
		g := gaps(t, s, "j")
		require.Len(t, g, 1)
		require.Equal(t, store.GapWallClock, g[0].Reason)
		// Pages at 4s and 8s are within the deadline; the one ending at 12s
		// was in flight when it passed: it completes and is committed.
		require.Equal(t, "6", g[0].Cursor)
		require.Equal(t, seq(6), out.get("j"))
		require.Equal(t, "6", getJob(t, s, "j").Cursor)
		require.Zero(t, getJob(t, s, "j").Failures)
	})
}

// TestSeed002RetryBudgetDefersRatherThanSpins: once the run's retry budget
// is spent the run stops at the slice boundary with a retry_budget gap
// instead of retrying on; the same holds when the outbound client's own
// retry budget runs dry.
func TestSeed002RetryBudgetDefersRatherThanSpins(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		prov, out := newProvider(clk, 20), newSink()
		prov.fail = 2 // the first page needs two retries
		setupConnector(t, s, "p")
		addJob(t, s, clk, store.JobSpec{ID: "j", ConnectorID: "p"})
		ob := newOutbound(t, clk, outbound.Config{})
		w := mustWorker(t, job.Config{Store: s, Clock: clk, Outbound: ob, Envelope: job.Envelope{MaxRetries: 2},
			Handlers: map[string]job.Handler{"ohlcv": pager(prov, out, 2)}})
		_, err := w.Poll(ctx)
		require.NoError(t, err)
		g := gaps(t, s, "j")
		require.Len(t, g, 1)
		require.Equal(t, store.GapRetryBudget, g[0].Reason)
		require.Equal(t, "2", g[0].Cursor)
		rs := runs(t, s, "j")
		require.EqualValues(t, 3, rs[0].Requests)
		require.EqualValues(t, 2, rs[0].Retries)
		require.Zero(t, getJob(t, s, "j").Failures)

		// The outbound client's retry budget: empty after one retry.
		addJob(t, s, clk, store.JobSpec{ID: "k", ConnectorID: "p"})
		prov.mu.Lock()
		prov.fail = 1000
		prov.mu.Unlock()
		ob2 := newOutbound(t, clk, outbound.Config{Retry: retry.Config{BudgetCapacity: 1, BudgetFloor: -1, MaxAttempts: 10},
			Breaker: breaker.Config{MinRequests: 1000, ConsecutiveFailures: 1000}})
		w2 := mustWorker(t, job.Config{Store: s, Clock: clk, Outbound: ob2, Handlers: map[string]job.Handler{"ohlcv": pager(prov, out, 2)}})
		clk.Advance(time.Hour)
		_, err = w2.Poll(ctx)
		require.NoError(t, err)
		g = gaps(t, s, "k")
		require.Len(t, g, 1)
		require.Equal(t, store.GapRetryBudget, g[0].Reason)
		rs = runs(t, s, "k")
		require.LessOrEqual(t, rs[0].Requests, int64(2), "no spinning: one attempt and the one retry the budget held")
	})
}

// TestSeed002PacingIsPerProvider: a provider whose pacing has no capacity
// parks its own job; another provider's job runs to the end in the same
// poll, undelayed.
func TestSeed002PacingIsPerProvider(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		slow, fast := newProvider(clk, 20), newProvider(clk, 20)
		out := newSink()
		setupConnector(t, s, "slow", "slow-limit")
		setupConnector(t, s, "fast", "fast-limit")
		addJob(t, s, clk, store.JobSpec{ID: "slow-job", ConnectorID: "slow", Type: "slow"})
		addJob(t, s, clk, store.JobSpec{ID: "fast-job", ConnectorID: "fast", Type: "fast"})
		lim, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{Clock: clk}), Policies: []limiter.Policy{
			{Name: "slow-limit", Algorithm: store.FixedWindow, Rate: 1, Period: time.Hour},
			{Name: "fast-limit", Algorithm: store.FixedWindow, Rate: 1000, Period: time.Hour}}})
		require.NoError(t, err)
		w := mustWorker(t, job.Config{Store: s, Clock: clk, Limiter: lim, MaxPacingWait: time.Second, Concurrency: 2,
			Handlers: map[string]job.Handler{"slow": pager(slow, out, 2), "fast": pager(fast, out, 2)}})
		n, err := w.Poll(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.Equal(t, seq(20), out.get("fast-job"))
		require.Equal(t, seq(2), out.get("slow-job"))
		sj := getJob(t, s, "slow-job")
		require.Equal(t, store.PressureNoCapacity, sj.ParkedReason)
		require.Zero(t, sj.Failures)
		require.Equal(t, store.RunSucceeded, runs(t, s, "fast-job")[0].Outcome)
		_, fastCalls := fast.maxPerWindow()
		require.Equal(t, 11, fastCalls)
	})
}

// TestSeed002ErrorsNeverDecreaseDelay: a fast 429 never raises the pacing
// rate (the inter-request delay only grows or stays), and the job parks
// rather than failing.
func TestSeed002ErrorsNeverDecreaseDelay(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		prov, out := newProvider(clk, 40), newSink()
		setupConnector(t, s, "p")
		addJob(t, s, clk, store.JobSpec{ID: "j", ConnectorID: "p"})
		ob := newOutbound(t, clk, outbound.Config{Retry: retry.Config{MaxAttempts: 1}, AIMD: aimd.Config{IgnoreLatency: true}})
		var rates []float64
		prov.onCall = func(n int) {
			if r, ok := ob.Rate("connector:p"); ok {
				rates = append(rates, r)
			}
			if n == 5 {
				prov.mu.Lock()
				prov.storm = 3
				prov.mu.Unlock()
			}
		}
		w := mustWorker(t, job.Config{Store: s, Clock: clk, Outbound: ob, Handlers: map[string]job.Handler{"ohlcv": pager(prov, out, 2)}})
		_, err := w.Poll(ctx)
		require.NoError(t, err)
		before, ok := ob.Rate("connector:p")
		require.True(t, ok)
		require.Equal(t, store.PressureRateLimited, getJob(t, s, "j").ParkedReason)
		require.Zero(t, getJob(t, s, "j").Failures)
		// Each further fast 429 leaves the rate where it was or lower.
		for range 2 {
			clk.Advance(time.Hour)
			_, err := w.Poll(ctx)
			require.NoError(t, err)
			after, _ := ob.Rate("connector:p")
			require.LessOrEqual(t, after, before)
			before = after
		}
		require.NotEmpty(t, rates)
	})
}

// TestSeed002CheckpointNeverPastLastDurableWrite: a page whose write fails
// is never committed: the cursor stays at the last written page, and the
// next run resumes there without a hole.
func TestSeed002CheckpointNeverPastLastDurableWrite(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		prov, out := newProvider(clk, 10), newSink()
		setupConnector(t, s, "p")
		addJob(t, s, clk, store.JobSpec{ID: "j", ConnectorID: "p"})
		writes := 0
		failWrite := true
		h := func(ctx context.Context, run *job.Run) error {
			cur, _ := strconv.Atoi(run.Cursor())
			for {
				var items []int
				if err := run.Call(ctx, func(ctx context.Context) error {
					var err error
					items, err = prov.page(ctx, cur, 2)
					return err
				}); err != nil {
					return err
				}
				if len(items) == 0 {
					return nil
				}
				writes++
				if writes == 3 && failWrite {
					return errors.New("disk full") // the write was not confirmed
				}
				out.write("j", items)
				cur = items[len(items)-1] + 1
				if err := run.Commit(ctx, strconv.Itoa(cur)); err != nil {
					return err
				}
			}
		}
		w := mustWorker(t, job.Config{Store: s, Clock: clk, BackoffBase: time.Second, Handlers: map[string]job.Handler{"ohlcv": h}})
		_, err := w.Poll(ctx)
		require.NoError(t, err)
		j := getJob(t, s, "j")
		require.Equal(t, "4", j.Cursor, "the third page was fetched but not written")
		require.EqualValues(t, 1, j.Failures)
		require.Equal(t, "disk full", j.LastError)
		failWrite = false
		clk.Advance(time.Hour)
		_, err = w.Poll(ctx)
		require.NoError(t, err)
		require.Equal(t, seq(10), out.get("j"))
		require.Equal(t, "10", getJob(t, s, "j").Cursor)
	})
}

// TestSeed002CatchUpDoesNotAdvanceSteadyCursor: a catch-up run commits the
// catch-up bookmark only, and its gap quotes that bookmark.
func TestSeed002CatchUpDoesNotAdvanceSteadyCursor(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		setupConnector(t, s, "p")
		addJob(t, s, clk, store.JobSpec{ID: "j", ConnectorID: "p", Type: "backfill"})
		h := func(ctx context.Context, run *job.Run) error {
			for i := 1; ; i++ {
				if err := run.Call(ctx, func(context.Context) error { return nil }); err != nil {
					return err
				}
				if err := run.CommitCatchUp(ctx, "2025-12-"+strconv.Itoa(i)); err != nil {
					return err
				}
			}
		}
		w := mustWorker(t, job.Config{Store: s, Clock: clk, Envelope: job.Envelope{MaxRequests: 3}, Handlers: map[string]job.Handler{"backfill": h}})
		_, err := w.Poll(context.Background())
		require.NoError(t, err)
		j := getJob(t, s, "j")
		require.Equal(t, "", j.Cursor, "the steady-state cursor did not move")
		require.Equal(t, "2025-12-3", j.CatchUpCursor)
		g := gaps(t, s, "j")
		require.Len(t, g, 1)
		require.True(t, g[0].CatchUp)
		require.Equal(t, "2025-12-3", g[0].Cursor)
	})
}

// TestSeed002BreakerTransitionsObservable: breaker state changes become
// durable records (states, reason, counters; no routes or payloads) and
// the job parks with breaker_open.
func TestSeed002BreakerTransitionsObservable(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		prov, out := newProvider(clk, 10), newSink()
		prov.fail = 1000
		setupConnector(t, s, "p")
		addJob(t, s, clk, store.JobSpec{ID: "j", ConnectorID: "p"})
		log := job.NewBreakerLog(s, nil, 0)
		ob := newOutbound(t, clk, outbound.Config{Retry: retry.Config{MaxAttempts: 10, BudgetCapacity: 100},
			Breaker: breaker.Config{ConsecutiveFailures: 3, MinRequests: 1000}, OnBreakerEvent: log.OnEvent})
		w := mustWorker(t, job.Config{Store: s, Clock: clk, Outbound: ob, Handlers: map[string]job.Handler{"ohlcv": pager(prov, out, 2)}})
		_, err := w.Poll(ctx)
		require.NoError(t, err)
		dropped, failed, err := log.Close(ctx)
		require.NoError(t, err)
		require.Zero(t, dropped)
		require.Zero(t, failed)
		ts, err := s.ListBreakerTransitions(ctx, store.ListParams{ConnectorID: "p"})
		require.NoError(t, err)
		require.NotEmpty(t, ts)
		first := ts[len(ts)-1]
		require.Equal(t, "closed", first.From)
		require.Equal(t, "open", first.To)
		require.Equal(t, "consecutive_failures", first.Reason)
		require.Equal(t, "connector:p", first.Key)
		j := getJob(t, s, "j")
		require.Equal(t, store.PressureBreakerOpen, j.ParkedReason)
		require.Zero(t, j.Failures)
	})
}

// TestSeed002MoreThanOnePageRecoveredPerRun: one run keeps paging until
// the source is empty; the page size is never a stopping condition.
func TestSeed002MoreThanOnePageRecoveredPerRun(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		prov, out := newProvider(clk, 35), newSink()
		setupConnector(t, s, "p")
		addJob(t, s, clk, store.JobSpec{ID: "j", ConnectorID: "p"})
		w := mustWorker(t, job.Config{Store: s, Clock: clk, Handlers: map[string]job.Handler{"ohlcv": pager(prov, out, 10)}})
		n, err := w.Poll(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, seq(35), out.get("j"))
		rs := runs(t, s, "j")
		require.Len(t, rs, 1)
		require.EqualValues(t, 4, rs[0].Slices)
		require.Equal(t, store.RunSucceeded, rs[0].Outcome)
	})
}

package job_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/retry"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// TestStorm429EndsParkedThenSucceeds: a storm of 429s with Retry-After
// parks the job for the provider's wait each time, counting no failure
// and using no attempt, and the job succeeds once the storm is over.
func TestStorm429EndsParkedThenSucceeds(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		prov, out := newProvider(clk, 10), newSink()
		prov.storm, prov.retryHdr = 20, "7"
		setupConnector(t, s, "p")
		addJob(t, s, clk, store.JobSpec{ID: "j", ConnectorID: "p", Interval: time.Hour})
		ob := newOutbound(t, clk, outbound.Config{Retry: retry.Config{MaxAttempts: 3}})
		ev := &events{}
		w := mustWorker(t, job.Config{Store: s, Clock: clk, Outbound: ob, OnEvent: ev.add,
			Handlers: map[string]job.Handler{"ohlcv": pager(prov, out, 5)}})
		parks := 0
		for step := 0; getJob(t, s, "j").LastSuccessAt.IsZero(); step++ {
			require.Less(t, step, 100, "no success after the storm")
			n, err := w.Poll(ctx)
			require.NoError(t, err)
			j := getJob(t, s, "j")
			require.Zero(t, j.Failures, "a 429 storm counts no failure")
			require.Zero(t, j.ConsecutiveFailures)
			if n > 0 && j.LastSuccessAt.IsZero() {
				parks++
				require.Equal(t, store.PressureRateLimited, j.ParkedReason)
				require.Equal(t, clk.Now().Add(7*time.Second), j.ParkedUntil, "parked for the provider's Retry-After")
				require.Equal(t, j.ParkedUntil, j.NextRunAt)
			}
			if n == 0 {
				clk.Advance(time.Second)
			}
		}
		require.GreaterOrEqual(t, parks, 2)
		require.Equal(t, seq(10), out.get("j"))
		j := getJob(t, s, "j")
		require.Empty(t, j.ParkedReason, "the success clears the park")
		rs := runs(t, s, "j")
		require.Equal(t, store.RunSucceeded, rs[0].Outcome)
		for _, r := range rs[1:] {
			require.Equal(t, store.RunParked, r.Outcome)
		}
		require.Equal(t, job.EventSuccess, ev.kinds("j")[len(ev.kinds("j"))-1])
	})
}

// TestFencingLeaseTakeover: a worker frozen past its lease loses the job
// to another, which resumes from the last committed cursor; the frozen
// worker's commit is refused, so no committed slice is lost and one slice
// at most is fetched twice.
func TestFencingLeaseTakeover(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		prov, out := newProvider(clk, 8), newSink()
		setupConnector(t, s, "p")
		addJob(t, s, clk, store.JobSpec{ID: "j", ConnectorID: "p"})
		frozen, thaw := make(chan struct{}), make(chan struct{})
		var commitErr error
		frozenPager := func(ctx context.Context, run *job.Run) error {
			cur := 0
			for page := 1; ; page++ {
				var items []int
				if err := run.Call(ctx, func(ctx context.Context) error {
					var err error
					items, err = prov.page(ctx, cur, 2)
					return err
				}); err != nil {
					return err
				}
				out.write("A", items)
				cur = items[len(items)-1] + 1
				if page == 2 {
					close(frozen)
					<-thaw
				}
				if err := run.Commit(ctx, strconv.Itoa(cur)); err != nil {
					commitErr = err
					return err
				}
			}
		}
		evA := &events{}
		a := mustWorker(t, job.Config{Store: s, Clock: clk, Holder: "A", LeaseTTL: time.Minute, Heartbeat: 1000 * time.Hour, OnEvent: evA.add,
			Handlers: map[string]job.Handler{"ohlcv": frozenPager}})
		bw := mustWorker(t, job.Config{Store: s, Clock: clk, Holder: "B", LeaseTTL: time.Minute,
			Handlers: map[string]job.Handler{"ohlcv": pager(prov, out, 2)}})
		doneA := make(chan error, 1)
		go func() {
			_, err := a.Poll(ctx)
			doneA <- err
		}()
		select {
		case <-frozen:
		case <-time.After(time.Minute):
			t.Fatal("worker A never reached its second page")
		}
		// B cannot take the job while A's lease holds, then can.
		n, err := bw.Poll(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		clk.Advance(2 * time.Minute)
		n, err = bw.Poll(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		close(thaw)
		select {
		case err := <-doneA:
			require.NoError(t, err)
		case <-time.After(time.Minute):
			t.Fatal("worker A did not return")
		}
		require.ErrorIs(t, commitErr, job.ErrLeaseLost)
		require.ErrorIs(t, commitErr, store.ErrStaleToken)
		require.Contains(t, evA.kinds("j"), job.EventLeaseLost)
		require.Equal(t, []int{0, 1, 2, 3}, out.get("A"))
		require.Equal(t, []int{2, 3, 4, 5, 6, 7}, out.get("j"), "B resumed after A's last committed slice")
		j := getJob(t, s, "j")
		require.Equal(t, "8", j.Cursor)
		rs := runs(t, s, "j")
		require.Len(t, rs, 2)
		require.Equal(t, store.RunSucceeded, rs[0].Outcome)
		require.Equal(t, "B", rs[0].Holder)
		require.Equal(t, store.RunAbandoned, rs[1].Outcome)
		require.EqualValues(t, 1, rs[1].Slices)
	})
}

// TestFairnessSmallGroupsFinishBeforeLargeHalf: one group with 1,000 due
// jobs and nine with 10 each, two workers: every small group finishes
// before the large one is half done. Completions are counted, not timed.
func TestFairnessSmallGroupsFinishBeforeLargeHalf(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		setupConnector(t, s, "shopify")
		for i := range 1000 {
			addJob(t, s, clk, store.JobSpec{ID: fmt.Sprintf("big-%04d", i), ConnectorID: "shopify", GroupKey: "shop-big", Priority: 10})
		}
		for g := range 9 {
			for i := range 10 {
				addJob(t, s, clk, store.JobSpec{ID: fmt.Sprintf("small-%d-%02d", g, i), ConnectorID: "shopify", GroupKey: fmt.Sprintf("shop-%d", g)})
			}
		}
		var mu sync.Mutex
		var order []string
		h := func(_ context.Context, run *job.Run) error {
			mu.Lock()
			order = append(order, run.Job().GroupKey)
			mu.Unlock()
			return nil
		}
		var wg sync.WaitGroup
		for i := range 2 {
			w := mustWorker(t, job.Config{Store: s, Clock: clk, Holder: fmt.Sprintf("w%d", i), Handlers: map[string]job.Handler{"ohlcv": h}})
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5000 {
					n, err := w.Poll(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					all := len(order) == 1090
					mu.Unlock()
					if n == 0 && all {
						return
					}
				}
			}()
		}
		wg.Wait()
		require.Len(t, order, 1090)
		bigDone, halfAt := 0, -1
		lastSmall := map[string]int{}
		for i, g := range order {
			if g == "shop-big" {
				bigDone++
				if bigDone == 500 {
					halfAt = i
				}
				continue
			}
			lastSmall[g] = i
		}
		require.Len(t, lastSmall, 9)
		for g, at := range lastSmall {
			require.Less(t, at, halfAt, "group %s finished after the large group was half done", g)
		}
	})
}

// TestGracefulShutdownReleasesOrFinishes: when Run's context ends, a
// handler that finishes within the grace period records its outcome, and
// one that does not is cancelled and its job released: due at once, no
// failure counted.
func TestGracefulShutdownReleasesOrFinishes(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		setupConnector(t, s, "p")
		addJob(t, s, clk, store.JobSpec{ID: "stuck", ConnectorID: "p", Type: "stuck"})
		addJob(t, s, clk, store.JobSpec{ID: "quick", ConnectorID: "p", Type: "quick"})
		started := make(chan string, 2)
		proceed := make(chan struct{})
		hs := map[string]job.Handler{
			"stuck": func(ctx context.Context, run *job.Run) error {
				started <- "stuck"
				<-ctx.Done()
				return ctx.Err()
			},
			"quick": func(ctx context.Context, run *job.Run) error {
				started <- "quick"
				<-proceed
				return run.Commit(ctx, "done")
			},
		}
		run := func(grace time.Duration, types ...string) {
			sub := map[string]job.Handler{}
			for _, ty := range types {
				sub[ty] = hs[ty]
			}
			w, err := job.New(job.Config{Store: s, Handlers: sub, ShutdownGrace: grace, PollInterval: time.Millisecond})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			select {
			case <-started:
			case <-time.After(time.Minute):
				t.Fatal("the handler never started")
			}
			cancel()
			if types[0] == "quick" {
				close(proceed)
			}
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(time.Minute):
				t.Fatal("Run did not return")
			}
		}
		run(time.Millisecond, "stuck")
		j := getJob(t, s, "stuck")
		require.Zero(t, j.Failures)
		require.Empty(t, j.LeaseHolder)
		require.Equal(t, store.RunReleased, runs(t, s, "stuck")[0].Outcome)
		run(time.Hour, "quick")
		j = getJob(t, s, "quick")
		require.Equal(t, "done", j.Cursor)
		require.Equal(t, store.RunSucceeded, runs(t, s, "quick")[0].Outcome)
	})
}

// TestFailureBackoffAndPermanent: failures back off with full jitter,
// doubling per failure in a row; a permanent error disables the job.
func TestFailureBackoffAndPermanent(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		setupConnector(t, s, "p")
		addJob(t, s, clk, store.JobSpec{ID: "j", ConnectorID: "p", Interval: time.Minute})
		fails := 3
		h := func(ctx context.Context, run *job.Run) error {
			if fails > 0 {
				fails--
				return errors.New("upstream 500")
			}
			if fails == 0 {
				fails--
				return nil
			}
			return job.Permanent(errors.New("symbol delisted"))
		}
		w := mustWorker(t, job.Config{Store: s, Clock: clk, BackoffBase: 10 * time.Second, Handlers: map[string]job.Handler{"ohlcv": h}})
		for i, want := range []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second} {
			n, err := w.Poll(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			j := getJob(t, s, "j")
			require.EqualValues(t, i+1, j.Failures)
			require.Equal(t, clk.Now().Add(want), j.NextRunAt, "failure %d", i+1)
			clk.Advance(want)
		}
		_, err := w.Poll(ctx)
		require.NoError(t, err)
		j := getJob(t, s, "j")
		require.Zero(t, j.ConsecutiveFailures)
		require.Equal(t, clk.Now().Add(time.Minute+3*time.Second), j.NextRunAt, "interval plus jitter 0.5 x 0.1")
		clk.Advance(time.Hour)
		_, err = w.Poll(ctx)
		require.NoError(t, err)
		j = getJob(t, s, "j")
		require.True(t, j.Disabled)
		require.Equal(t, "symbol delisted", j.LastError)
		clk.Advance(24 * time.Hour)
		n, err := w.Poll(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "a permanent error stops retrying")
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	h := map[string]job.Handler{"x": func(context.Context, *job.Run) error { return nil }}
	s := backends()[0].open(t, clocktest.New(t0))
	for name, cfg := range map[string]job.Config{
		"no store":      {Handlers: h},
		"no handlers":   {Store: s},
		"nil handler":   {Store: s, Handlers: map[string]job.Handler{"x": nil}},
		"negative ttl":  {Store: s, Handlers: h, LeaseTTL: -1},
		"tiny ttl":      {Store: s, Handlers: h, LeaseTTL: time.Microsecond},
		"concurrency":   {Store: s, Handlers: h, Concurrency: -1},
		"envelope":      {Store: s, Handlers: h, Envelope: job.Envelope{MaxRequests: -1}},
		"backoff":       {Store: s, Handlers: h, BackoffBase: -time.Second},
		"poll interval": {Store: s, Handlers: h, PollInterval: -time.Second},
	} {
		_, err := job.New(cfg)
		require.ErrorIs(t, err, job.ErrInvalidConfig, name)
	}
}

func TestParseImportNamesWhatIsWrong(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"connectors: [{id: binance, pairz: [x]}]", "field pairz not found"},
		{"connectors: [{policies: [a]}]", "connectors[0]: store: invalid job record: store: invalid identifier: connector id is empty"},
		{"connectors: [{id: binance, pairs: [BTC/USDT], timeframes: [1M], types: [ohlcv]}]", `connector "binance": timeframe "1M"`},
		{"connectors: [{id: binance, pairs: [BTC/USDT], timeframes: [1x], types: [ohlcv]}]", "unknown unit"},
		{"connectors: [{id: binance, pairs: [BTC/USDT]}]", "pairs, timeframes and types must all be set"},
		{"connectors: [{id: a}, {id: a}]", `connector "a": listed twice`},
		{"connectors: [{id: a, status: running}]", "status must be active, paused or disabled"},
		{"connectors: [{id: a, pairs: [x, x], timeframes: [1m], types: [t]}]", `job "a:x:1m:t" listed twice`},
		{"connectors: [{id: a, pairs: [x], timeframes: [1m], types: [t], interval: soon}]", "interval"},
		{"connectors: {", "job: invalid import"},
	} {
		_, err := job.ParseImport([]byte(tc.yaml))
		require.ErrorIs(t, err, job.ErrInvalidImport, tc.yaml)
		require.ErrorContains(t, err, tc.want, tc.yaml)
	}
	im, err := job.ParseImport([]byte(`connectors: [{id: a, pairs: [x], timeframes: [1M], types: [t], interval: 1d}]`))
	require.NoError(t, err)
	require.Equal(t, 24*time.Hour, im.Jobs[0].Interval, "interval overrides a timeframe of no fixed length")
}

func FuzzParseImport(f *testing.F) {
	f.Add([]byte(importYAML))
	f.Add([]byte("connectors: [{id: a, pairs: [x], timeframes: [1m], types: [t]}]"))
	f.Add([]byte("connectors: [{id: \"\\0\"}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		im, err := job.ParseImport(data)
		if err != nil {
			require.ErrorIs(t, err, job.ErrInvalidImport)
			return
		}
		for _, c := range im.Connectors {
			require.NoError(t, c.Check())
		}
		for _, s := range im.Jobs {
			require.NoError(t, s.Check())
		}
	})
}

// TestBan418ParksBanned: an exchange's IP ban (418 with Retry-After, as
// Binance answers after repeated 429s) parks the job as banned for the
// ban's length, counting no failure, and the job succeeds after it.
func TestBan418ParksBanned(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		prov, out := newProvider(clk, 10), newSink()
		prov.storm, prov.stormStatus, prov.retryHdr = 1, 418, "120"
		setupConnector(t, s, "p")
		addJob(t, s, clk, store.JobSpec{ID: "j", ConnectorID: "p", Interval: time.Hour})
		w := mustWorker(t, job.Config{Store: s, Clock: clk,
			Handlers: map[string]job.Handler{"ohlcv": pager(prov, out, 5)}})
		n, err := w.Poll(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		j := getJob(t, s, "j")
		require.Equal(t, store.PressureBanned, j.ParkedReason)
		require.Equal(t, clk.Now().Add(120*time.Second), j.ParkedUntil, "parked for the ban's Retry-After")
		require.Zero(t, j.Failures, "a ban counts no failure")
		clk.Advance(121 * time.Second)
		n, err = w.Poll(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, seq(10), out.get("j"))
		require.Empty(t, getJob(t, s, "j").ParkedReason)
	})
}

// TestCronScheduleNextRunAfterSuccess: a cron job that succeeded is due at
// its next cron time (read in its time zone) plus jitter short of the
// cron time after it, on the store clock.
func TestCronScheduleNextRunAfterSuccess(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := clocktest.New(t0.Add(10*time.Hour + 7*time.Minute + 30*time.Second)) // 10:07:30 UTC, 11:07:30 in Paris
		s := b.open(t, clk)
		setupConnector(t, s, "p")
		addJob(t, s, clk, store.JobSpec{ID: "quarter", ConnectorID: "p", Cron: "*/15 * * * *"})
		addJob(t, s, clk, store.JobSpec{ID: "paris", ConnectorID: "p", Cron: "0 12 * * *", TimeZone: "Europe/Paris"})
		w := mustWorker(t, job.Config{Store: s, Clock: clk, Concurrency: 2,
			Handlers: map[string]job.Handler{"ohlcv": func(context.Context, *job.Run) error { return nil }}})
		n, err := w.Poll(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		// Jitter 0.5 x 0.1 of the gap to the following cron time.
		require.Equal(t, t0.Add(10*time.Hour+15*time.Minute+45*time.Second), getJob(t, s, "quarter").NextRunAt)
		require.Equal(t, t0.Add(11*time.Hour+72*time.Minute), getJob(t, s, "paris").NextRunAt, "12:00 in Paris is 11:00 UTC, plus 0.05 x 24h")
		clk.Advance(8 * time.Minute) // 10:15:30: not yet due
		n, err = w.Poll(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		clk.Advance(15 * time.Second)
		n, err = w.Poll(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, t0.Add(10*time.Hour+30*time.Minute+45*time.Second), getJob(t, s, "quarter").NextRunAt)
		// With jitter beyond the gap, the next run stays short of the slot after it.
		w2 := mustWorker(t, job.Config{Store: s, Clock: clk, Jitter: 5, Rand: func() float64 { return 0.999 },
			Handlers: map[string]job.Handler{"ohlcv": func(context.Context, *job.Run) error { return nil }}})
		require.NoError(t, s.TriggerJob(ctx, "quarter", clk.Now()))
		clk.Advance(time.Second)
		n, err = w2.Poll(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		next := getJob(t, s, "quarter").NextRunAt
		require.True(t, next.Before(t0.Add(10*time.Hour+45*time.Minute)), "next %s", next)
		require.True(t, !next.Before(t0.Add(10*time.Hour+30*time.Minute)), "next %s", next)
	})
}

func TestParseImportCron(t *testing.T) {
	t.Parallel()
	im, err := job.ParseImport([]byte(`connectors: [{id: a, pairs: [x], timeframes: [1M], types: [t], cron: "0 1 1 * *", time_zone: Asia/Tokyo}]`))
	require.NoError(t, err)
	require.Equal(t, "0 1 1 * *", im.Jobs[0].Cron)
	require.Equal(t, "Asia/Tokyo", im.Jobs[0].TimeZone)
	require.Zero(t, im.Jobs[0].Interval, "cron replaces the timeframe's interval")
	for _, tc := range []struct{ yaml, want string }{
		{`connectors: [{id: a, pairs: [x], timeframes: [1m], types: [t], cron: "* * *"}]`, `connector "a": store: invalid job record: cron "* * *"`},
		{`connectors: [{id: a, pairs: [x], timeframes: [1m], types: [t], cron: "@hourly", interval: 1h}]`, "interval or cron, not both"},
		{`connectors: [{id: a, pairs: [x], timeframes: [1m], types: [t], cron: "@hourly", time_zone: Atlantis}]`, `time_zone "Atlantis"`},
		{`connectors: [{id: a, pairs: [x], timeframes: [1m], types: [t], time_zone: UTC}]`, "needs cron"},
	} {
		_, err := job.ParseImport([]byte(tc.yaml))
		require.ErrorIs(t, err, job.ErrInvalidImport, tc.yaml)
		require.ErrorContains(t, err, tc.want, tc.yaml)
	}
	// Importing again changes nothing; changing the cron updates the jobs.
	st := memstore.NewJobStore(memstore.JobConfig{})
	res, err := im.Apply(context.Background(), st)
	require.NoError(t, err)
	require.Equal(t, 1, res.JobsCreated)
	res, err = im.Apply(context.Background(), st)
	require.NoError(t, err)
	require.Equal(t, 1, res.JobsUnchanged)
	im.Jobs[0].Cron = "0 2 1 * *"
	res, err = im.Apply(context.Background(), st)
	require.NoError(t, err)
	require.Equal(t, 1, res.JobsUpdated)
}

// TestClaimAheadHeartbeatsWaitingAndReleasesOnShutdown: Run claims
// ClaimAhead jobs beyond its Concurrency; a job claimed ahead waits for a
// handler slot with its lease heartbeated (past its first expiry nobody
// else can take it), and when Run's context ends it is released without
// running (due at once, no failure counted) while the running one
// finishes.
func TestClaimAheadHeartbeatsWaitingAndReleasesOnShutdown(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		clk, s := twoJobs(t, b)
		started := make(chan string, 2)
		proceed := make(chan struct{})
		h := func(ctx context.Context, run *job.Run) error {
			started <- run.Job().ID
			<-proceed
			return nil
		}
		ev := &events{}
		w := mustWorker(t, job.Config{Store: s, Clock: clk, Holder: "w", Concurrency: 1, ClaimAhead: 1, LeaseTTL: 30 * time.Second,
			Heartbeat: 10 * time.Second, PollInterval: time.Hour, OnEvent: ev.add, Handlers: map[string]job.Handler{"ohlcv": h}})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		var running string
		select {
		case running = <-started:
		case <-time.After(time.Minute):
			t.Fatal("no handler started")
		}
		waiting := map[string]string{"a": "b", "b": "a"}[running]
		// Run's poll timer and both jobs' heartbeats: the waiting job was
		// claimed in the same claim as the running one.
		for i := 1; i <= 3; i++ {
			clk.BlockUntilTimers(3)
			clk.Advance(10 * time.Second)
		}
		clk.BlockUntilTimers(3) // the third heartbeats were written
		j := getJob(t, s, waiting)
		require.Equal(t, "w", j.LeaseHolder)
		require.Equal(t, t0.Add(60*time.Second), j.LeaseUntil, "the waiting job's lease was not heartbeated")
		cs, err := s.ClaimJobs(context.Background(), store.ClaimParams{Holder: "thief", LeaseTTL: time.Minute, Now: clk.Now()})
		require.NoError(t, err)
		require.Empty(t, cs, "a job held by the worker was claimed by another")
		cancel()
		close(proceed)
		waitRun(t, done)
		require.Len(t, started, 0, "the waiting job's handler ran after shutdown")
		j = getJob(t, s, waiting)
		require.Empty(t, j.LeaseHolder)
		require.Zero(t, j.Failures)
		require.Equal(t, store.RunReleased, runs(t, s, waiting)[0].Outcome)
		require.Equal(t, store.RunSucceeded, runs(t, s, running)[0].Outcome)
		require.Equal(t, []job.EventKind{job.EventClaim, job.EventRelease}, ev.kinds(waiting))
	})
}

// TestClaimAheadWaitSpendsNoEnvelope: a job claimed ahead that waits a
// minute for its slot still has its whole 30-second wall-clock envelope
// when its handler starts: its commit succeeds instead of ending the run
// as a wall_clock gap.
func TestClaimAheadWaitSpendsNoEnvelope(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		clk, s := twoJobs(t, b)
		started := make(chan string, 2)
		proceed := make(chan struct{})
		h := func(ctx context.Context, run *job.Run) error {
			started <- run.Job().ID
			<-proceed
			return run.Commit(ctx, "c")
		}
		ev := &events{}
		w := mustWorker(t, job.Config{Store: s, Clock: clk, Holder: "w", Concurrency: 1, ClaimAhead: 1, LeaseTTL: 30 * time.Second,
			Heartbeat: 10 * time.Second, PollInterval: time.Hour, Envelope: job.Envelope{MaxDuration: 30 * time.Second},
			OnEvent: ev.add, Handlers: map[string]job.Handler{"ohlcv": h}})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		var running string
		select {
		case running = <-started:
		case <-time.After(time.Minute):
			t.Fatal("no handler started")
		}
		waiting := map[string]string{"a": "b", "b": "a"}[running]
		clk.BlockUntilTimers(3) // Run's poll timer and both heartbeats
		clk.Advance(time.Minute)
		clk.BlockUntilTimers(3) // the heartbeats were written
		close(proceed)
		require.Eventually(t, func() bool {
			return len(ev.kinds("a")) == 3 && len(ev.kinds("b")) == 3
		}, time.Minute, 5*time.Millisecond, "both jobs reported an outcome")
		cancel()
		waitRun(t, done)
		// The running job's handler did take a minute: its envelope ran
		// out (the check is not vacuous); the waiting one's did not.
		require.Equal(t, []job.EventKind{job.EventClaim, job.EventCommit, job.EventDefer}, ev.kinds(running))
		require.Equal(t, []job.EventKind{job.EventClaim, job.EventCommit, job.EventSuccess}, ev.kinds(waiting))
	})
}

// TestLongJobsAreNotClaimedAhead: with ClaimAhead auto, two workers of
// Concurrency 1 and two long jobs run one job each: neither claims the
// second job ahead of a handler that has not returned, so neither holds a
// job it cannot start while the other has a free slot.
func TestLongJobsAreNotClaimedAhead(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		clk, s := twoJobs(t, b)
		type start struct{ holder, job string }
		started := make(chan start, 2)
		proceed := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var done []chan error
		for _, holder := range []string{"A", "B"} {
			h := func(ctx context.Context, run *job.Run) error {
				started <- start{holder, run.Job().ID}
				<-proceed
				return nil
			}
			w := mustWorker(t, job.Config{Store: s, Clock: clk, Holder: holder, Concurrency: 1, LeaseTTL: 30 * time.Second,
				Heartbeat: 10 * time.Second, PollInterval: 100 * time.Millisecond, Handlers: map[string]job.Handler{"ohlcv": h}})
			d := make(chan error, 1)
			done = append(done, d)
			go func() { d <- w.Run(ctx) }()
		}
		got := map[string]string{}
		for len(got) < 2 {
			select {
			case st := <-started:
				got[st.holder] = st.job
			case <-time.After(time.Minute):
				a, b := getJob(t, s, "a"), getJob(t, s, "b")
				t.Fatalf("after a minute only %v ran: one worker holds both jobs (a held by %q, b by %q)", got, a.LeaseHolder, b.LeaseHolder)
			}
		}
		require.ElementsMatch(t, []string{"a", "b"}, []string{got["A"], got["B"]})
		cancel()
		close(proceed)
		for _, d := range done {
			waitRun(t, d)
		}
	})
}

// twoJobs returns a store of backend b on a fake clock with connector p and
// its due jobs a and b.
func twoJobs(t *testing.T, b backend) (*clocktest.Clock, store.JobStore) {
	t.Helper()
	clk := clocktest.New(t0)
	s := b.open(t, clk)
	setupConnector(t, s, "p")
	addJob(t, s, clk, store.JobSpec{ID: "a", ConnectorID: "p"})
	addJob(t, s, clk, store.JobSpec{ID: "b", ConnectorID: "p"})
	return clk, s
}

// waitRun waits, a minute at most, for a Run to return through done, and
// requires it to have returned nil.
func waitRun(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("Run did not return")
	}
}

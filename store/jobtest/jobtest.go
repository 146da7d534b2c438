// Package jobtest is the conformance suite of store.JobStore: every
// backend (store/memstore, store/sqlitestore, store/pgstore) runs Run from
// its own tests and passes it unchanged. Times are set through the params'
// Now, so no test depends on the machine's speed.
package jobtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

// NewStore returns an empty store for one test, cleaned up by t.
type NewStore func(t *testing.T) store.JobStore

// T0 is the suite's start time.
var T0 = time.Date(2026, 1, 19, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return T0.Add(d) }

// Run runs the suite against the backend newStore builds.
func Run(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		f    func(t *testing.T, s store.JobStore)
	}{
		{"ConnectorUpsertNeverDuplicates", connectorUpsert},
		{"ConnectorCountsKeptTrue", connectorCounts},
		{"ConnectorBadInput", connectorBadInput},
		{"JobUpsertIdempotentKeepsState", jobUpsert},
		{"JobBadInput", jobBadInput},
		{"ClaimPriorityOrder", claimPriority},
		{"ClaimOnlyDueEnabledActive", claimOnlyDue},
		{"PausedConnectorPreventsExecution", pausedConnector},
		{"ClaimNeverTwoHolders", claimConcurrent},
		{"FencingAfterLeaseTakeover", fencing},
		{"HeartbeatExtendsLease", heartbeat},
		{"CatchUpDoesNotAdvanceSteadyCursor", bookmarks},
		{"FinishSchedulesNextRun", finish},
		{"CronScheduleStoredAndValidated", cronSchedule},
		{"CronFinishSchedulesNextCronTime", cronFinish},
		{"FinishJobsBatchFencedEach", finishBatch},
		{"ClaimAndFinishOneTransaction", claimAndFinish},
		{"ClaimAndFinishGatesFinishedJobs", claimAndFinishGate},
		{"FailCountsAndBacksOff", fail},
		{"ParkCountsNoFailureAndHoldsConnector", park},
		{"DeferWritesGapRecord", deferGap},
		{"ReleaseHandsBack", release},
		{"GateMovesNextRunInsteadOfClaiming", gate},
		{"FairnessRoundRobinGroups", fairness},
		{"FairnessWeightedGroups", weighted},
		{"FairnessManyGroupsBatch", manyGroups},
		{"GroupsListedWithWeights", groupsList},
		{"TriggerMakesDue", trigger},
		{"BreakerTransitions", transitions},
		{"ListPaging", paging},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.f(t, newStore(t))
		})
	}
}

func conn(t *testing.T, s store.JobStore, id string) {
	t.Helper()
	_, _, err := s.UpsertConnector(context.Background(), store.Connector{ID: id, Policies: []string{id + "-weight"}})
	require.NoError(t, err)
}

func job(t *testing.T, s store.JobStore, spec store.JobSpec) store.Job {
	t.Helper()
	if spec.Type == "" {
		spec.Type = "ohlcv"
	}
	j, _, err := s.UpsertJob(context.Background(), spec, T0)
	require.NoError(t, err)
	return j
}

func claim(t *testing.T, s store.JobStore, holder string, n int, now time.Time) []store.Claim {
	t.Helper()
	cs, err := s.ClaimJobs(context.Background(), store.ClaimParams{Holder: holder, Limit: n, LeaseTTL: time.Minute, Now: now})
	require.NoError(t, err)
	return cs
}

func ids(cs []store.Claim) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Job.ID)
	}
	return out
}

func fence(c store.Claim) store.Fence { return store.Fence{JobID: c.Job.ID, Token: c.Job.LeaseToken} }

func connectorUpsert(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	c, created, err := s.UpsertConnector(ctx, store.Connector{ID: "binance", Policies: []string{"binance-weight"}, Profile: "binance"})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, store.ConnectorActive, c.Status)
	c2, created, err := s.UpsertConnector(ctx, store.Connector{ID: "binance", Status: store.ConnectorPaused, Policies: []string{"a", "b"}})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, store.ConnectorPaused, c2.Status)
	require.Equal(t, []string{"a", "b"}, c2.Policies)
	require.Equal(t, c.CreatedAt, c2.CreatedAt)
	all, err := s.ListConnectors(ctx, store.ListParams{})
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, "binance", all[0].ID)
	// An upsert without a status keeps the stored one.
	c3, _, err := s.UpsertConnector(ctx, store.Connector{ID: "binance", Policies: []string{"a", "b"}})
	require.NoError(t, err)
	require.Equal(t, store.ConnectorPaused, c3.Status)
	require.NoError(t, s.SetConnectorStatus(ctx, "binance", store.ConnectorActive))
	got, err := s.GetConnector(ctx, "binance")
	require.NoError(t, err)
	require.Equal(t, store.ConnectorActive, got.Status)
	_, err = s.GetConnector(ctx, "kraken")
	require.ErrorIs(t, err, store.ErrConnectorNotFound)
	require.ErrorIs(t, s.SetConnectorStatus(ctx, "kraken", store.ConnectorPaused), store.ErrConnectorNotFound)
}

func connectorCounts(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "binance")
	conn(t, s, "kraken")
	job(t, s, store.JobSpec{ID: "binance:BTC/USDT:1m:ohlcv", ConnectorID: "binance"})
	job(t, s, store.JobSpec{ID: "binance:ETH/USDT:1m:ohlcv", ConnectorID: "binance", Disabled: true})
	job(t, s, store.JobSpec{ID: "kraken:BTC/USD:1m:ohlcv", ConnectorID: "kraken"})
	c, err := s.GetConnector(ctx, "binance")
	require.NoError(t, err)
	require.EqualValues(t, 2, c.JobsCount)
	require.EqualValues(t, 1, c.ActiveJobsCount)
	require.True(t, c.LastJobRunTime.IsZero())
	cs := claim(t, s, "w1", 10, at(time.Second))
	require.Len(t, cs, 2)
	c, err = s.GetConnector(ctx, "binance")
	require.NoError(t, err)
	require.Equal(t, at(time.Second), c.LastJobRunTime)
	job(t, s, store.JobSpec{ID: "binance:ETH/USDT:1m:ohlcv", ConnectorID: "binance"})
	c, err = s.GetConnector(ctx, "binance")
	require.NoError(t, err)
	require.EqualValues(t, 2, c.ActiveJobsCount)
}

func connectorBadInput(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	for _, c := range []store.Connector{{}, {ID: "a\x00b"}, {ID: "a\nb"}, {ID: string(make([]byte, 300))}, {ID: "x", Status: "running"}, {ID: "x", Policies: []string{""}}} {
		_, _, err := s.UpsertConnector(ctx, c)
		require.ErrorIs(t, err, store.ErrInvalidJob, "%+v", c)
	}
	require.ErrorIs(t, s.SetConnectorStatus(ctx, "x", "running"), store.ErrInvalidJob)
}

func jobUpsert(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "binance")
	spec := store.JobSpec{ID: "binance:BTC/USDT:1m:ohlcv", ConnectorID: "binance", Type: "ohlcv",
		Params: []byte(`{"symbol":"BTC/USDT","timeframe":"1m"}`), Priority: 50, Interval: time.Minute}
	j, created, err := s.UpsertJob(ctx, spec, T0)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, T0, j.NextRunAt)
	require.Equal(t, "binance", j.GroupKey)
	require.JSONEq(t, `{"symbol":"BTC/USDT","timeframe":"1m"}`, string(j.Params))
	cs := claim(t, s, "w1", 1, at(time.Second))
	require.Len(t, cs, 1)
	require.NoError(t, s.CommitCursor(ctx, store.CommitParams{Fence: fence(cs[0]), Cursor: `{"since_ms":1705622400000}`, Now: at(2 * time.Second)}))
	require.NoError(t, s.FinishJob(ctx, store.EndParams{Fence: fence(cs[0]), Delay: time.Minute, Now: at(3 * time.Second)}))
	j2, created, err := s.UpsertJob(ctx, spec, at(time.Hour))
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, `{"since_ms":1705622400000}`, j2.Cursor)
	require.Equal(t, at(3*time.Second+time.Minute), j2.NextRunAt)
	require.EqualValues(t, 1, j2.Runs)
	all, err := s.ListJobs(ctx, store.ListParams{ConnectorID: "binance"})
	require.NoError(t, err)
	require.Len(t, all, 1)
	_, _, err = s.UpsertJob(ctx, store.JobSpec{ID: "kraken:x", ConnectorID: "kraken", Type: "ohlcv"}, T0)
	require.ErrorIs(t, err, store.ErrConnectorNotFound)
	_, err = s.GetJob(ctx, "nope")
	require.ErrorIs(t, err, store.ErrJobNotFound)
}

func jobBadInput(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "c")
	for _, j := range []store.JobSpec{
		{ConnectorID: "c", Type: "t"},
		{ID: "j", Type: "t"},
		{ID: "j", ConnectorID: "c"},
		{ID: "j", ConnectorID: "c", Type: "t", Params: []byte(`{bad`)},
		{ID: "j", ConnectorID: "c", Type: "t", Interval: -time.Second},
		{ID: "j", ConnectorID: "c", Type: "t", GroupKey: "g\x01"},
	} {
		_, _, err := s.UpsertJob(ctx, j, T0)
		require.ErrorIs(t, err, store.ErrInvalidJob, "%+v", j)
	}
	_, err := s.ClaimJobs(ctx, store.ClaimParams{Holder: "", LeaseTTL: time.Minute})
	require.ErrorIs(t, err, store.ErrInvalidJob)
	_, err = s.ClaimJobs(ctx, store.ClaimParams{Holder: "w", LeaseTTL: 0})
	require.ErrorIs(t, err, store.ErrInvalidJob)
	_, err = s.ClaimJobs(ctx, store.ClaimParams{Holder: "w", Limit: store.MaxClaim + 1, LeaseTTL: time.Minute})
	require.ErrorIs(t, err, store.ErrInvalidJob)
	_, err = s.ListRuns(ctx, store.ListParams{After: "x"})
	require.ErrorIs(t, err, store.ErrInvalidJob)
	_, err = s.ListJobs(ctx, store.ListParams{Limit: -1})
	require.ErrorIs(t, err, store.ErrInvalidJob)
}

func claimPriority(t *testing.T, s store.JobStore) {
	conn(t, s, "c")
	job(t, s, store.JobSpec{ID: "low", ConnectorID: "c", Priority: 1})
	job(t, s, store.JobSpec{ID: "high", ConnectorID: "c", Priority: 90})
	job(t, s, store.JobSpec{ID: "mid", ConnectorID: "c", Priority: 50})
	require.Equal(t, []string{"high"}, ids(claim(t, s, "w", 1, at(time.Second))))
	require.Equal(t, []string{"mid", "low"}, ids(claim(t, s, "w", 5, at(time.Second))))
	require.Empty(t, claim(t, s, "w", 5, at(time.Second)))
}

func claimOnlyDue(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "c")
	conn(t, s, "off")
	job(t, s, store.JobSpec{ID: "due", ConnectorID: "c"})
	job(t, s, store.JobSpec{ID: "disabled", ConnectorID: "c", Disabled: true})
	job(t, s, store.JobSpec{ID: "other-type", ConnectorID: "c", Type: "trades"})
	job(t, s, store.JobSpec{ID: "off-job", ConnectorID: "off"})
	require.NoError(t, s.SetConnectorStatus(ctx, "off", store.ConnectorDisabled))
	cs, err := s.ClaimJobs(ctx, store.ClaimParams{Holder: "w", Limit: 10, LeaseTTL: time.Minute, Types: []string{"ohlcv"}, Now: at(time.Second)})
	require.NoError(t, err)
	require.Equal(t, []string{"due"}, ids(cs))
	require.Equal(t, int64(1), cs[0].Job.LeaseToken)
	require.Equal(t, "w", cs[0].Job.LeaseHolder)
	require.Equal(t, at(time.Second+time.Minute), cs[0].Job.LeaseUntil)
	require.Equal(t, at(time.Second), cs[0].At)
	require.Equal(t, "c", cs[0].Connector.ID)
	require.Equal(t, []string{"c-weight"}, cs[0].Connector.Policies)
	require.Equal(t, store.ConnectorActive, cs[0].Connector.Status)
	// Not before its next_run_at.
	require.NoError(t, s.FinishJob(ctx, store.EndParams{Fence: fence(cs[0]), Delay: time.Minute, Now: at(2 * time.Second)}))
	require.Equal(t, []string{"other-type"}, ids(claim(t, s, "w", 10, at(time.Minute))))
	require.Equal(t, []string{"due"}, ids(claim(t, s, "w", 10, at(2*time.Second+time.Minute))))
}

// pausedConnector is seed 000's third acceptance check at the store: a
// paused connector's jobs are never claimed; resumed, they are.
func pausedConnector(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "binance")
	job(t, s, store.JobSpec{ID: "binance:BTC/USDT:1m:ohlcv", ConnectorID: "binance"})
	require.NoError(t, s.SetConnectorStatus(ctx, "binance", store.ConnectorPaused))
	require.Empty(t, claim(t, s, "w", 10, at(time.Hour)))
	require.NoError(t, s.SetConnectorStatus(ctx, "binance", store.ConnectorActive))
	require.Len(t, claim(t, s, "w", 10, at(time.Hour)), 1)
}

func claimConcurrent(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "c")
	const jobs, workers = 60, 6
	for i := range jobs {
		job(t, s, store.JobSpec{ID: fmt.Sprintf("j%03d", i), ConnectorID: "c", GroupKey: fmt.Sprintf("g%d", i%4)})
	}
	var mu sync.Mutex
	seen := map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("w%d", w)
			for {
				cs, err := s.ClaimJobs(ctx, store.ClaimParams{Holder: holder, Limit: 3, LeaseTTL: time.Hour, Now: at(time.Second)})
				if err != nil {
					errs <- err
					return
				}
				if len(cs) == 0 {
					return
				}
				mu.Lock()
				for _, c := range cs {
					if prev, ok := seen[c.Job.ID]; ok {
						errs <- fmt.Errorf("job %s claimed by %s and %s", c.Job.ID, prev, holder)
					}
					seen[c.Job.ID] = holder
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, seen, jobs)
}

func fencing(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "c")
	job(t, s, store.JobSpec{ID: "j", ConnectorID: "c"})
	old := claim(t, s, "w1", 1, at(time.Second))[0]
	require.NoError(t, s.CommitCursor(ctx, store.CommitParams{Fence: fence(old), Cursor: "page-1", Now: at(2 * time.Second)}))
	// Held: nobody else may claim it.
	require.Empty(t, claim(t, s, "w2", 1, at(30*time.Second)))
	// The lease expires: w2 takes over with a greater token.
	nw := claim(t, s, "w2", 1, at(2*time.Minute))
	require.Len(t, nw, 1)
	require.Greater(t, nw[0].Job.LeaseToken, old.Job.LeaseToken)
	require.Equal(t, "page-1", nw[0].Job.Cursor)
	// The old holder can neither commit, heartbeat nor end the run.
	require.ErrorIs(t, s.CommitCursor(ctx, store.CommitParams{Fence: fence(old), Cursor: "page-2-stale", Now: at(2 * time.Minute)}), store.ErrStaleToken)
	_, err := s.Heartbeat(ctx, store.HeartbeatParams{Fence: fence(old), LeaseTTL: time.Minute, Now: at(2 * time.Minute)})
	require.ErrorIs(t, err, store.ErrStaleToken)
	require.ErrorIs(t, s.FinishJob(ctx, store.EndParams{Fence: fence(old), Now: at(2 * time.Minute)}), store.ErrStaleToken)
	j, err := s.GetJob(ctx, "j")
	require.NoError(t, err)
	require.Equal(t, "page-1", j.Cursor)
	require.NoError(t, s.CommitCursor(ctx, store.CommitParams{Fence: fence(nw[0]), Cursor: "page-2", Now: at(3 * time.Minute)}))
	require.NoError(t, s.FinishJob(ctx, store.EndParams{Fence: fence(nw[0]), Delay: time.Hour, Now: at(3 * time.Minute)}))
	// After the finish the token is spent too.
	require.ErrorIs(t, s.CommitCursor(ctx, store.CommitParams{Fence: fence(nw[0]), Cursor: "x", Now: at(4 * time.Minute)}), store.ErrStaleToken)
	runs, err := s.ListRuns(ctx, store.ListParams{JobID: "j"})
	require.NoError(t, err)
	require.Len(t, runs, 2)
	require.Equal(t, store.RunSucceeded, runs[0].Outcome)
	require.EqualValues(t, 1, runs[0].Slices)
	require.Equal(t, store.RunAbandoned, runs[1].Outcome)
	require.EqualValues(t, 1, runs[1].Slices)
	require.ErrorIs(t, s.CommitCursor(ctx, store.CommitParams{Fence: store.Fence{JobID: "nope", Token: 1}, Cursor: "x"}), store.ErrJobNotFound)
}

func heartbeat(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "c")
	job(t, s, store.JobSpec{ID: "j", ConnectorID: "c"})
	c := claim(t, s, "w1", 1, at(0))[0]
	until, err := s.Heartbeat(ctx, store.HeartbeatParams{Fence: fence(c), LeaseTTL: 5 * time.Minute, Now: at(50 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, at(50*time.Second+5*time.Minute), until)
	require.Empty(t, claim(t, s, "w2", 1, at(4*time.Minute)))
	require.Len(t, claim(t, s, "w2", 1, at(6*time.Minute)), 1)
	_, err = s.Heartbeat(ctx, store.HeartbeatParams{Fence: fence(c), LeaseTTL: 0})
	require.ErrorIs(t, err, store.ErrInvalidJob)
}

func bookmarks(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "c")
	job(t, s, store.JobSpec{ID: "j", ConnectorID: "c"})
	c := claim(t, s, "w", 1, at(0))[0]
	require.NoError(t, s.CommitCursor(ctx, store.CommitParams{Fence: fence(c), Cursor: "steady-1", Now: at(time.Second)}))
	require.NoError(t, s.CommitCursor(ctx, store.CommitParams{Fence: fence(c), Cursor: "backfill-7", CatchUp: true, Now: at(2 * time.Second)}))
	j, err := s.GetJob(ctx, "j")
	require.NoError(t, err)
	require.Equal(t, "steady-1", j.Cursor)
	require.Equal(t, "backfill-7", j.CatchUpCursor)
}

func finish(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "c")
	job(t, s, store.JobSpec{ID: "j", ConnectorID: "c", Interval: time.Minute})
	c := claim(t, s, "w", 1, at(0))[0]
	require.NoError(t, s.FinishJob(ctx, store.EndParams{Fence: fence(c), Delay: 61 * time.Second, Stats: store.RunStats{Requests: 7, Retries: 2}, Now: at(10 * time.Second)}))
	j, err := s.GetJob(ctx, "j")
	require.NoError(t, err)
	require.Equal(t, at(71*time.Second), j.NextRunAt)
	require.Equal(t, at(10*time.Second), j.LastSuccessAt)
	require.Equal(t, at(0), j.LastRunAt)
	require.EqualValues(t, 1, j.Runs)
	require.Empty(t, j.LeaseHolder)
	runs, err := s.ListRuns(ctx, store.ListParams{JobID: "j"})
	require.NoError(t, err)
	require.Equal(t, store.RunRecord{ID: runs[0].ID, JobID: "j", Token: 1, Holder: "w", StartedAt: at(0), EndedAt: at(10 * time.Second),
		Outcome: store.RunSucceeded, Requests: 7, Retries: 2}, runs[0])
}

func cronSchedule(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "binance")
	spec := store.JobSpec{ID: "binance:BTC/USDT:1h:ohlcv", ConnectorID: "binance", Type: "ohlcv", Cron: "5 * * * *", TimeZone: "Europe/Paris"}
	j, created, err := s.UpsertJob(ctx, spec, T0)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "5 * * * *", j.Cron)
	require.Equal(t, "Europe/Paris", j.TimeZone)
	require.Zero(t, j.Interval)
	got, err := s.GetJob(ctx, spec.ID)
	require.NoError(t, err)
	require.Equal(t, j, got)
	listed, err := s.ListJobs(ctx, store.ListParams{})
	require.NoError(t, err)
	require.Equal(t, []store.Job{j}, listed)
	cs := claim(t, s, "w", 1, at(time.Second))
	require.Len(t, cs, 1)
	require.Equal(t, "5 * * * *", cs[0].Job.Cron, "a claim carries the schedule")
	require.Equal(t, "Europe/Paris", cs[0].Job.TimeZone)
	require.NoError(t, s.ReleaseJob(ctx, store.EndParams{Fence: fence(cs[0]), Now: at(time.Second)}))
	// Changing the schedule to an interval clears the cron fields.
	spec.Cron, spec.TimeZone, spec.Interval = "", "", time.Minute
	j, created, err = s.UpsertJob(ctx, spec, T0)
	require.NoError(t, err)
	require.False(t, created)
	require.Empty(t, j.Cron)
	require.Empty(t, j.TimeZone)
	require.Equal(t, time.Minute, j.Interval)
	// Bad schedules are refused by name, and nothing is written.
	for _, bad := range []store.JobSpec{
		{ID: spec.ID, ConnectorID: "binance", Type: "ohlcv", Cron: "5 * * *"},
		{ID: spec.ID, ConnectorID: "binance", Type: "ohlcv", Cron: "@sometimes"},
		{ID: spec.ID, ConnectorID: "binance", Type: "ohlcv", Cron: "0 9 * * *", TimeZone: "Nowhere/Special"},
		{ID: spec.ID, ConnectorID: "binance", Type: "ohlcv", Cron: "@hourly", Interval: time.Hour},
		{ID: spec.ID, ConnectorID: "binance", Type: "ohlcv", TimeZone: "UTC"},
	} {
		_, _, err := s.UpsertJob(ctx, bad, T0)
		require.ErrorIs(t, err, store.ErrInvalidJob, "%+v", bad)
		require.ErrorContains(t, err, spec.ID, "the error names the job")
	}
	_, _, err = s.UpsertJob(ctx, store.JobSpec{ID: "x", ConnectorID: "binance", Type: "ohlcv", Cron: "61 * * * *"}, T0)
	require.ErrorContains(t, err, `cron "61 * * * *"`, "the error names the expression")
	got, err = s.GetJob(ctx, spec.ID)
	require.NoError(t, err)
	require.Equal(t, time.Minute, got.Interval)
	_, err = s.GetJob(ctx, "x")
	require.ErrorIs(t, err, store.ErrJobNotFound)
}

// cronFinish: a finished cron job is due at the schedule's next time after
// the finish (with ScheduleDelay's jitter short of the time after it).
func cronFinish(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "c")
	job(t, s, store.JobSpec{ID: "j", ConnectorID: "c", Cron: "*/15 * * * *"})
	for _, tc := range []struct {
		u    float64
		want time.Time
	}{
		{0, T0.Add(15 * time.Minute)},
		{0.5, T0.Add(15*time.Minute + 45*time.Second)}, // 0.5 x 0.1 x 15 minutes
	} {
		require.NoError(t, s.TriggerJob(ctx, "j", at(time.Minute)))
		c := claim(t, s, "w", 1, at(time.Minute))[0]
		now := at(7*time.Minute + 30*time.Second)
		d, err := store.ScheduleDelay(&c.Job.JobSpec, now, tc.u, 0.1)
		require.NoError(t, err)
		require.NoError(t, s.FinishJob(ctx, store.EndParams{Fence: fence(c), Delay: d, Now: now}))
		j, err := s.GetJob(ctx, "j")
		require.NoError(t, err)
		require.Equal(t, tc.want, j.NextRunAt, "u %v", tc.u)
		require.Empty(t, claim(t, s, "w", 1, tc.want.Add(-time.Microsecond)), "not due before its cron time")
	}
}

func fail(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "c")
	job(t, s, store.JobSpec{ID: "j", ConnectorID: "c"})
	c := claim(t, s, "w", 1, at(0))[0]
	require.NoError(t, s.FailJob(ctx, store.EndParams{Fence: fence(c), Delay: 30 * time.Second, Error: "boom", Now: at(time.Second)}))
	j, err := s.GetJob(ctx, "j")
	require.NoError(t, err)
	require.EqualValues(t, 1, j.Failures)
	require.EqualValues(t, 1, j.ConsecutiveFailures)
	require.Equal(t, "boom", j.LastError)
	require.Equal(t, at(31*time.Second), j.NextRunAt)
	c = claim(t, s, "w", 1, at(31*time.Second))[0]
	require.NoError(t, s.FailJob(ctx, store.EndParams{Fence: fence(c), Error: "400 bad symbol", Permanent: true, Now: at(32 * time.Second)}))
	j, err = s.GetJob(ctx, "j")
	require.NoError(t, err)
	require.EqualValues(t, 2, j.Failures)
	require.True(t, j.Disabled)
	require.Empty(t, claim(t, s, "w", 1, at(time.Hour)))
	runs, err := s.ListRuns(ctx, store.ListParams{JobID: "j"})
	require.NoError(t, err)
	require.Equal(t, store.RunFailed, runs[0].Outcome)
	require.Equal(t, "400 bad symbol", runs[0].Error)
}

func park(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "c")
	conn(t, s, "other")
	job(t, s, store.JobSpec{ID: "j1", ConnectorID: "c"})
	job(t, s, store.JobSpec{ID: "j2", ConnectorID: "c", Priority: -1})
	job(t, s, store.JobSpec{ID: "o", ConnectorID: "other"})
	c := claim(t, s, "w", 1, at(0))
	require.Equal(t, []string{"j1"}, ids(c))
	require.ErrorIs(t, s.ParkJob(ctx, store.EndParams{Fence: fence(c[0]), Reason: store.GapRequestCap, Delay: time.Second}), store.ErrInvalidJob)
	require.NoError(t, s.ParkJob(ctx, store.EndParams{Fence: fence(c[0]), Reason: store.PressureRateLimited, Delay: 2 * time.Minute,
		Stats: store.RunStats{Requests: 3, Retries: 2}, Now: at(time.Second)}))
	j, err := s.GetJob(ctx, "j1")
	require.NoError(t, err)
	require.Zero(t, j.Failures)
	require.Equal(t, store.PressureRateLimited, j.ParkedReason)
	require.Equal(t, at(time.Second+2*time.Minute), j.ParkedUntil)
	require.Equal(t, at(time.Second+2*time.Minute), j.NextRunAt)
	// The connector claims nothing until then; others are unaffected.
	require.Equal(t, []string{"o"}, ids(claim(t, s, "w", 10, at(time.Minute))))
	require.ElementsMatch(t, []string{"j1", "j2", "o"}, ids(claim(t, s, "w", 10, at(3*time.Minute))), "o's lease expired too")
	cn, err := s.GetConnector(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, at(time.Second+2*time.Minute), cn.PressureUntil)
	runs, err := s.ListRuns(ctx, store.ListParams{JobID: "j1"})
	require.NoError(t, err)
	require.Equal(t, store.RunParked, runs[1].Outcome)
}

func deferGap(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "c")
	job(t, s, store.JobSpec{ID: "j", ConnectorID: "c"})
	c := claim(t, s, "w", 1, at(0))[0]
	require.NoError(t, s.CommitCursor(ctx, store.CommitParams{Fence: fence(c), Cursor: "p3", Now: at(time.Second)}))
	require.ErrorIs(t, s.DeferJob(ctx, store.EndParams{Fence: fence(c), Reason: store.PressureRateLimited}), store.ErrInvalidJob)
	require.NoError(t, s.DeferJob(ctx, store.EndParams{Fence: fence(c), Reason: store.GapRequestCap, Delay: time.Second, Now: at(2 * time.Second)}))
	j, err := s.GetJob(ctx, "j")
	require.NoError(t, err)
	require.Zero(t, j.Failures)
	require.Empty(t, j.ParkedReason)
	require.Equal(t, at(3*time.Second), j.NextRunAt)
	gaps, err := s.ListGaps(ctx, store.ListParams{JobID: "j"})
	require.NoError(t, err)
	require.Len(t, gaps, 1)
	require.Equal(t, "p3", gaps[0].Cursor)
	require.Equal(t, store.GapRequestCap, gaps[0].Reason)
	require.Equal(t, c.RunID, gaps[0].RunID)
	require.Equal(t, at(2*time.Second), gaps[0].CreatedAt)
	cn, err := s.GetConnector(ctx, "c")
	require.NoError(t, err)
	require.True(t, cn.PressureUntil.IsZero(), "a budget gap arms no source-pressure cooldown")
	require.Len(t, claim(t, s, "w", 1, at(3*time.Second)), 1)
}

func release(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "c")
	job(t, s, store.JobSpec{ID: "j", ConnectorID: "c", Interval: time.Hour})
	c := claim(t, s, "w", 1, at(0))[0]
	require.NoError(t, s.ReleaseJob(ctx, store.EndParams{Fence: fence(c), Now: at(time.Second)}))
	j, err := s.GetJob(ctx, "j")
	require.NoError(t, err)
	require.Equal(t, at(time.Second), j.NextRunAt)
	require.Zero(t, j.Failures)
	require.Empty(t, j.LeaseHolder)
	c2 := claim(t, s, "w2", 1, at(time.Second))
	require.Len(t, c2, 1)
	require.Equal(t, int64(2), c2[0].Job.LeaseToken)
}

func gate(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "busy")
	conn(t, s, "free")
	job(t, s, store.JobSpec{ID: "b1", ConnectorID: "busy"})
	job(t, s, store.JobSpec{ID: "b2", ConnectorID: "busy"})
	job(t, s, store.JobSpec{ID: "f1", ConnectorID: "free"})
	var asked []string
	g := func(_ context.Context, id string) (time.Duration, error) {
		asked = append(asked, id)
		if id == "busy" {
			return 40 * time.Second, nil
		}
		return 0, nil
	}
	cs, err := s.ClaimJobs(ctx, store.ClaimParams{Holder: "w", Limit: 10, LeaseTTL: time.Minute, Gate: g, Now: at(time.Second)})
	require.NoError(t, err)
	require.Equal(t, []string{"f1"}, ids(cs))
	require.ElementsMatch(t, []string{"busy", "free"}, asked)
	for _, id := range []string{"b1", "b2"} {
		j, err := s.GetJob(ctx, id)
		require.NoError(t, err)
		require.Equal(t, at(41*time.Second), j.NextRunAt)
		require.Empty(t, j.LeaseHolder)
		require.Zero(t, j.Runs)
	}
	require.Empty(t, claim(t, s, "w", 10, at(40*time.Second)))
	require.Len(t, claim(t, s, "w", 10, at(41*time.Second)), 2)
	// A gate that fails fails the claim, which takes nothing.
	_, err = s.ClaimJobs(ctx, store.ClaimParams{Holder: "w2", LeaseTTL: time.Minute, Now: at(time.Hour),
		Gate: func(context.Context, string) (time.Duration, error) { return 0, errors.New("limiter down") }})
	require.ErrorContains(t, err, "limiter down")
	j, err := s.GetJob(ctx, "f1")
	require.NoError(t, err)
	require.NotEqual(t, "w2", j.LeaseHolder)
}

// fairness: one group with many due jobs and small groups with a few; the
// claim order takes one per group per round, so every small group is
// served before the large one has taken more than its round share.
func fairness(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "shopify")
	for i := range 40 {
		job(t, s, store.JobSpec{ID: fmt.Sprintf("big-%03d", i), ConnectorID: "shopify", GroupKey: "big", Priority: 100})
	}
	for g := range 3 {
		for i := range 2 {
			job(t, s, store.JobSpec{ID: fmt.Sprintf("s%d-%d", g, i), ConnectorID: "shopify", GroupKey: fmt.Sprintf("small-%d", g)})
		}
	}
	// One at a time, finishing each: round-robin over the groups.
	var order []string
	for i := range 10 {
		cs := claim(t, s, "w", 1, at(time.Duration(i)*time.Second))
		require.Len(t, cs, 1)
		order = append(order, cs[0].Job.GroupKey)
		require.NoError(t, s.FinishJob(ctx, store.EndParams{Fence: fence(cs[0]), Delay: time.Hour, Now: at(time.Duration(i) * time.Second)}))
	}
	require.Equal(t, []string{"big", "small-0", "small-1", "small-2", "big", "small-0", "small-1", "small-2", "big", "big"}, order)
	// A batch claim takes rounds too: one per group first.
	job(t, s, store.JobSpec{ID: "s9-0", ConnectorID: "shopify", GroupKey: "small-9"})
	cs := claim(t, s, "w", 3, at(time.Minute))
	require.Len(t, cs, 3)
	groups := map[string]int{}
	for _, c := range cs {
		groups[c.Job.GroupKey]++
	}
	require.Equal(t, map[string]int{"big": 2, "small-9": 1}, groups)
	require.Equal(t, "small-9", cs[0].Job.GroupKey, "the never-claimed group first")
}

func weighted(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "c")
	for i := range 20 {
		job(t, s, store.JobSpec{ID: fmt.Sprintf("a-%02d", i), ConnectorID: "c", GroupKey: "a"})
		job(t, s, store.JobSpec{ID: fmt.Sprintf("b-%02d", i), ConnectorID: "c", GroupKey: "b"})
	}
	w, err := s.GroupWeight(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, 1, w, "a group never set weighs 1")
	require.NoError(t, s.SetGroupWeight(ctx, "a", 3))
	w, err = s.GroupWeight(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, 3, w)
	for _, bad := range []int{0, -1, store.MaxGroupWeight + 1} {
		require.ErrorIs(t, s.SetGroupWeight(ctx, "a", bad), store.ErrInvalidJob, "weight %d", bad)
	}
	require.ErrorIs(t, s.SetGroupWeight(ctx, "g\x01", 2), store.ErrInvalidJob)
	// A batch claim: each round takes up to the weight from a group.
	cs := claim(t, s, "w", 8, at(time.Second))
	groups := map[string]int{}
	for _, c := range cs {
		groups[c.Job.GroupKey]++
		require.NoError(t, s.FinishJob(ctx, store.EndParams{Fence: fence(c), Delay: time.Hour, Now: at(time.Second)}))
	}
	require.Equal(t, map[string]int{"a": 6, "b": 2}, groups)
	// One at a time, finishing each: a is served three times per turn of b.
	var order []string
	for i := range 8 {
		now := at(time.Duration(2+i) * time.Second)
		cs := claim(t, s, "w", 1, now)
		require.Len(t, cs, 1)
		order = append(order, cs[0].Job.GroupKey)
		require.NoError(t, s.FinishJob(ctx, store.EndParams{Fence: fence(cs[0]), Delay: time.Hour, Now: now}))
	}
	require.Equal(t, []string{"a", "a", "a", "b", "a", "a", "a", "b"}, order)
	// Running jobs count per unit of weight: holding 3 jobs of a and 1 of
	// b, both are even, and b was served last, so a goes first.
	var held []store.Claim
	for range 4 {
		cs := claim(t, s, "w", 1, at(20*time.Second))
		require.Len(t, cs, 1)
		held = append(held, cs[0])
	}
	got := map[string]int{}
	for _, c := range held {
		got[c.Job.GroupKey]++
	}
	require.Equal(t, map[string]int{"a": 3, "b": 1}, got)
}

// manyGroups: more groups than a claim takes, with deep backlogs; every
// claim takes one job from each of the least recently served groups, and
// no job twice.
func manyGroups(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "c")
	for g := range 7 {
		for i := range 6 {
			job(t, s, store.JobSpec{ID: fmt.Sprintf("g%d-%d", g, i), ConnectorID: "c", GroupKey: fmt.Sprintf("g%d", g), Priority: i % 3})
		}
	}
	seen := map[string]bool{}
	last := map[string]int{} // each group's last claimed priority
	for round := range 14 {
		now := at(time.Duration(round+1) * time.Second)
		cs := claim(t, s, "w", 3, now)
		require.Len(t, cs, 3, "round %d", round)
		groups := map[string]bool{}
		for _, c := range cs {
			require.False(t, seen[c.Job.ID], "job %s claimed twice", c.Job.ID)
			seen[c.Job.ID] = true
			require.False(t, groups[c.Job.GroupKey], "round %d: two jobs of group %s while others wait", round, c.Job.GroupKey)
			groups[c.Job.GroupKey] = true
			if p, ok := last[c.Job.GroupKey]; ok {
				require.LessOrEqual(t, c.Job.Priority, p, "group %s: priority order", c.Job.GroupKey)
			}
			last[c.Job.GroupKey] = c.Job.Priority
			require.NoError(t, s.FinishJob(ctx, store.EndParams{Fence: fence(c), Delay: time.Hour, Now: now}))
		}
	}
	require.Len(t, seen, 42)
	require.Empty(t, claim(t, s, "w", 3, at(time.Minute)))
}

func groupsList(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	gs, err := s.ListGroups(ctx, store.ListParams{})
	require.NoError(t, err)
	require.Empty(t, gs)
	require.NotNil(t, gs, "an empty list, not nil")
	conn(t, s, "c")
	job(t, s, store.JobSpec{ID: "j1", ConnectorID: "c", GroupKey: "shop-b"})
	job(t, s, store.JobSpec{ID: "j2", ConnectorID: "c", GroupKey: "shop-b"})
	job(t, s, store.JobSpec{ID: "j3", ConnectorID: "c"})   // group: the connector
	require.NoError(t, s.SetGroupWeight(ctx, "shop-a", 5)) // no jobs yet
	require.NoError(t, s.SetGroupWeight(ctx, "shop-b", 2))
	gs, err = s.ListGroups(ctx, store.ListParams{})
	require.NoError(t, err)
	require.Equal(t, []store.Group{{Key: "c", Weight: 1}, {Key: "shop-a", Weight: 5}, {Key: "shop-b", Weight: 2}}, gs)
	gs, err = s.ListGroups(ctx, store.ListParams{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []store.Group{{Key: "c", Weight: 1}, {Key: "shop-a", Weight: 5}}, gs)
	gs, err = s.ListGroups(ctx, store.ListParams{After: "shop-a"})
	require.NoError(t, err)
	require.Equal(t, []store.Group{{Key: "shop-b", Weight: 2}}, gs)
	// Upserting a job again keeps its group's weight.
	job(t, s, store.JobSpec{ID: "j1", ConnectorID: "c", GroupKey: "shop-b"})
	w, err := s.GroupWeight(ctx, "shop-b")
	require.NoError(t, err)
	require.Equal(t, 2, w)
	_, err = s.ListGroups(ctx, store.ListParams{Limit: store.MaxListLimit + 1})
	require.ErrorIs(t, err, store.ErrInvalidJob)
}

func trigger(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "c")
	job(t, s, store.JobSpec{ID: "j", ConnectorID: "c"})
	c := claim(t, s, "w", 1, at(0))[0]
	require.NoError(t, s.FinishJob(ctx, store.EndParams{Fence: fence(c), Delay: time.Hour, Now: at(time.Second)}))
	require.Empty(t, claim(t, s, "w", 1, at(time.Minute)))
	require.NoError(t, s.TriggerJob(ctx, "j", at(time.Minute)))
	require.Len(t, claim(t, s, "w", 1, at(time.Minute)), 1)
	require.ErrorIs(t, s.TriggerJob(ctx, "nope", at(0)), store.ErrJobNotFound)
}

func transitions(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	conn(t, s, "c")
	tr, err := s.RecordBreakerTransition(ctx, store.BreakerTransition{ConnectorID: "c", Key: "api.example.com", From: "closed", To: "open",
		Reason: "failure_ratio", Requests: 20, Failures: 11, Now: at(time.Second)})
	require.NoError(t, err)
	require.Equal(t, at(time.Second), tr.At)
	_, err = s.RecordBreakerTransition(ctx, store.BreakerTransition{ConnectorID: "c", Key: "api.example.com", From: "open", To: "half_open",
		Reason: "timeout", Now: at(time.Minute)})
	require.NoError(t, err)
	_, err = s.RecordBreakerTransition(ctx, store.BreakerTransition{ConnectorID: "c"})
	require.ErrorIs(t, err, store.ErrInvalidJob)
	ts, err := s.ListBreakerTransitions(ctx, store.ListParams{ConnectorID: "c"})
	require.NoError(t, err)
	require.Len(t, ts, 2)
	require.Equal(t, "half_open", ts[0].To)
	require.Equal(t, "closed", ts[1].From)
	require.EqualValues(t, 11, ts[1].Failures)
	ts, err = s.ListBreakerTransitions(ctx, store.ListParams{ConnectorID: "c", After: fmt.Sprint(ts[0].ID)})
	require.NoError(t, err)
	require.Len(t, ts, 1)
	require.Equal(t, "open", ts[0].To)
}

func paging(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	for _, id := range []string{"c3", "c1", "c2"} {
		conn(t, s, id)
	}
	for i := range 5 {
		job(t, s, store.JobSpec{ID: fmt.Sprintf("j%d", i), ConnectorID: "c1"})
	}
	job(t, s, store.JobSpec{ID: "x", ConnectorID: "c2"})
	cs, err := s.ListConnectors(ctx, store.ListParams{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, "c1", cs[0].ID)
	require.Len(t, cs, 2)
	cs, err = s.ListConnectors(ctx, store.ListParams{After: "c2"})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	js, err := s.ListJobs(ctx, store.ListParams{ConnectorID: "c1", Limit: 3})
	require.NoError(t, err)
	require.Len(t, js, 3)
	js, err = s.ListJobs(ctx, store.ListParams{ConnectorID: "c1", After: js[2].ID})
	require.NoError(t, err)
	require.Len(t, js, 2)
	require.Equal(t, "j4", js[1].ID)
}

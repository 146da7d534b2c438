package sqlitestore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

func at(d time.Duration) time.Time { return t0.Add(d) }

func jfence(c store.Claim) store.Fence { return store.Fence{JobID: c.Job.ID, Token: c.Job.LeaseToken} }

// errKind names an outcome for comparing backends.
func errKind(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, store.ErrStaleToken):
		return "stale"
	case errors.Is(err, store.ErrJobNotFound):
		return "not found"
	default:
		return err.Error()
	}
}

// TestClaimAndFinishMatchesMemstore drives the set-based claim and the
// batched finishes with a seeded random schedule (groups of different sizes
// and weights, priorities, two connectors of which one is paused or gated at
// times, two job types, claims of 1 to 7 jobs, leases that expire and are
// taken over, stale finishes, a finish named twice in one batch, failures,
// triggers) and checks every step against memstore's JobStore, the
// reference: the same jobs claimed in the same order with the same tokens,
// the same per-finish outcomes, and in the end the same jobs and runs. This
// is fairness between groups (rounds by weight, least-loaded group first),
// priority order and fencing, as one claim of several jobs decides them.
func TestClaimAndFinishMatchesMemstore(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			lite, _ := newStore(t)
			mem := memstore.NewJobStore(memstore.JobConfig{})
			both := func(f func(s store.JobStore) error) {
				t.Helper()
				require.NoError(t, f(lite))
				require.NoError(t, f(mem))
			}
			rnd := rand.New(rand.NewPCG(seed, 16))
			for _, c := range []string{"c1", "c2"} {
				both(func(s store.JobStore) error {
					_, _, err := s.UpsertConnector(ctx, store.Connector{ID: c, Policies: []string{c}})
					return err
				})
			}
			var ids []string
			for g := range 9 {
				for i := range 1 + g*3 {
					spec := store.JobSpec{ID: fmt.Sprintf("g%d-%02d", g, i), ConnectorID: []string{"c1", "c2"}[rnd.IntN(2)],
						Type: []string{"ohlcv", "trades"}[rnd.IntN(4)/3], GroupKey: fmt.Sprintf("g%d", g), Priority: rnd.IntN(3)}
					ids = append(ids, spec.ID)
					both(func(s store.JobStore) error { _, _, err := s.UpsertJob(ctx, spec, t0); return err })
				}
			}
			for g, w := range map[string]int{"g2": 3, "g5": 2, "g8": 4} {
				both(func(s store.JobStore) error { return s.SetGroupWeight(ctx, g, w) })
			}
			held := map[string][]store.Claim{} // by worker, as the sqlite store answered
			for step := range 150 {
				now := at(time.Duration(step) * 3 * time.Second)
				w := []string{"w1", "w2", "w3"}[rnd.IntN(3)]
				switch rnd.IntN(10) {
				case 0:
					st := []store.ConnectorStatus{store.ConnectorActive, store.ConnectorPaused}[rnd.IntN(2)]
					both(func(s store.JobStore) error { return s.SetConnectorStatus(ctx, "c2", st) })
				case 1:
					id := ids[rnd.IntN(len(ids))]
					both(func(s store.JobStore) error { return s.TriggerJob(ctx, id, now) })
				case 2:
					if hs := held[w]; len(hs) > 0 {
						c := hs[0]
						held[w] = hs[1:]
						p := store.EndParams{Fence: jfence(c), Delay: 20 * time.Second, Error: "boom", Now: now}
						require.Equal(t, errKind(mem.FailJob(ctx, p)), errKind(lite.FailJob(ctx, p)), "step %d: fail %s", step, c.Job.ID)
					}
				}
				// Finish some of w's jobs (naming one twice now and then),
				// keep the others: their leases expire and are taken over.
				var fin []store.EndParams
				var keep []store.Claim
				for _, c := range held[w] {
					if rnd.IntN(3) > 0 {
						fin = append(fin, store.EndParams{Fence: jfence(c), Now: now, Delay: []time.Duration{0, 30 * time.Second, time.Hour}[rnd.IntN(3)],
							Stats: store.RunStats{Requests: int64(rnd.IntN(5))}})
					} else {
						keep = append(keep, c)
					}
				}
				if len(fin) > 0 && rnd.IntN(8) == 0 {
					fin = append(fin, fin[0])
				}
				if rnd.IntN(10) == 0 {
					fin = append(fin, store.EndParams{Fence: store.Fence{JobID: "nope", Token: 1}, Now: now})
				}
				p := store.ClaimParams{Holder: w, Limit: 1 + rnd.IntN(7), LeaseTTL: 20 * time.Second, Now: now}
				if rnd.IntN(4) == 0 {
					p.Types = []string{"trades"}
				}
				if rnd.IntN(5) == 0 {
					p.Gate = func(_ context.Context, id string) (time.Duration, error) {
						if id == "c2" {
							return 10 * time.Second, nil
						}
						return 0, nil
					}
				}
				got, gotErrs, err := lite.ClaimAndFinish(ctx, p, append([]store.EndParams(nil), fin...))
				require.NoError(t, err)
				wantErrs, err := mem.FinishJobs(ctx, append([]store.EndParams(nil), fin...))
				require.NoError(t, err)
				want, err := mem.ClaimJobs(ctx, p)
				require.NoError(t, err)
				require.Len(t, gotErrs, len(fin))
				for i := range fin {
					require.Equal(t, errKind(wantErrs[i]), errKind(gotErrs[i]), "step %d: finish %d (%s)", step, i, fin[i].JobID)
				}
				require.Equal(t, claimed(want), claimed(got), "step %d: %s claims %d", step, w, p.Limit)
				for i := range got {
					require.Equal(t, want[i].Connector.ID, got[i].Connector.ID)
					require.Equal(t, want[i].Connector.Policies, got[i].Connector.Policies)
					require.Equal(t, want[i].Job.Runs, got[i].Job.Runs)
				}
				held[w] = append(keep, got...)
			}
			for _, id := range ids {
				wj, err := mem.GetJob(ctx, id)
				require.NoError(t, err)
				gj, err := lite.GetJob(ctx, id)
				require.NoError(t, err)
				require.Equal(t, wj, gj, "job %s", id)
				wr, err := mem.ListRuns(ctx, store.ListParams{JobID: id})
				require.NoError(t, err)
				gr, err := lite.ListRuns(ctx, store.ListParams{JobID: id})
				require.NoError(t, err)
				require.Equal(t, runsOf(wr), runsOf(gr), "runs of %s", id)
			}
		})
	}
}

// claimed is what two backends' claims must agree on: the jobs in order,
// their tokens and lease times.
func claimed(cs []store.Claim) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s#%d until %s", c.Job.ID, c.Job.LeaseToken, c.Job.LeaseUntil.Format(time.RFC3339Nano)))
	}
	return out
}

// runsOf is a job's runs without their ids (each backend numbers its own).
func runsOf(rs []store.RunRecord) []store.RunRecord {
	out := []store.RunRecord{}
	for _, r := range rs {
		r.ID = 0
		out = append(out, r)
	}
	return out
}

// TestClaimAndFinishBatchFencing: in one ClaimAndFinish, a finish whose
// lease was taken over is refused (its job and the new holder's run are
// untouched), a job named twice is finished once (the second is stale, as
// it would be one call after the other), a missing job is reported, and the
// claim in the same transaction takes over an expired lease: the old run is
// abandoned, the new token is one more, and the old token can no longer
// commit.
func TestClaimAndFinishBatchFencing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	_, _, err := s.UpsertConnector(ctx, store.Connector{ID: "c"})
	require.NoError(t, err)
	for _, id := range []string{"a", "b", "c", "d"} {
		_, _, err := s.UpsertJob(ctx, store.JobSpec{ID: id, ConnectorID: "c", Type: "t", GroupKey: "g-" + id}, t0)
		require.NoError(t, err)
	}
	first, err := s.ClaimJobs(ctx, store.ClaimParams{Holder: "w1", Limit: 4, LeaseTTL: time.Minute, Now: at(0)})
	require.NoError(t, err)
	require.Len(t, first, 4)
	h := map[string]store.Claim{}
	for _, c := range first {
		h[c.Job.ID] = c
	}
	// w1 keeps a and b alive; c and d expire, and w2 takes c over.
	for _, id := range []string{"a", "b"} {
		_, err := s.Heartbeat(ctx, store.HeartbeatParams{Fence: jfence(h[id]), LeaseTTL: time.Hour, Now: at(50 * time.Second)})
		require.NoError(t, err)
	}
	w2, err := s.ClaimJobs(ctx, store.ClaimParams{Holder: "w2", Limit: 1, LeaseTTL: time.Hour, Now: at(2 * time.Minute)})
	require.NoError(t, err)
	require.Len(t, w2, 1)
	taken := w2[0]
	require.Equal(t, h[taken.Job.ID].Job.LeaseToken+1, taken.Job.LeaseToken)
	other := map[string]string{"c": "d", "d": "c"}[taken.Job.ID]

	cs, errs, err := s.ClaimAndFinish(ctx, store.ClaimParams{Holder: "w1", Limit: 4, LeaseTTL: time.Minute, Now: at(3 * time.Minute)}, []store.EndParams{
		{Fence: jfence(h["a"]), Delay: time.Hour, Now: at(3 * time.Minute)},
		{Fence: jfence(h[taken.Job.ID]), Delay: time.Hour, Now: at(3 * time.Minute)}, // taken over
		{Fence: jfence(h["a"]), Delay: time.Hour, Now: at(3 * time.Minute)},          // a again
		{Fence: store.Fence{JobID: "zz", Token: 1}, Now: at(3 * time.Minute)},
		{Fence: jfence(h["b"]), Delay: time.Hour, Now: at(3 * time.Minute)},
	})
	require.NoError(t, err)
	require.Equal(t, []string{"ok", "stale", "stale", "not found", "ok"}, []string{errKind(errs[0]), errKind(errs[1]), errKind(errs[2]), errKind(errs[3]), errKind(errs[4])})
	// a and b are not due for an hour, the taken job is w2's: the claim
	// takes over the other expired one only.
	require.Equal(t, []string{other}, ids(cs))
	require.Equal(t, h[other].Job.LeaseToken+1, cs[0].Job.LeaseToken)

	tj, err := s.GetJob(ctx, taken.Job.ID)
	require.NoError(t, err)
	require.Equal(t, "w2", tj.LeaseHolder)
	require.True(t, tj.LastSuccessAt.IsZero(), "the stale finish wrote nothing")
	runs, err := s.ListRuns(ctx, store.ListParams{JobID: taken.Job.ID})
	require.NoError(t, err)
	require.Equal(t, []string{store.RunRunning, store.RunAbandoned}, []string{runs[0].Outcome, runs[1].Outcome})

	runs, err = s.ListRuns(ctx, store.ListParams{JobID: other})
	require.NoError(t, err)
	require.Len(t, runs, 2)
	require.Equal(t, store.RunRunning, runs[0].Outcome)
	require.Equal(t, cs[0].RunID, runs[0].ID)
	require.Equal(t, store.RunAbandoned, runs[1].Outcome)
	require.Equal(t, at(3*time.Minute), runs[1].EndedAt)
	// The old token of the job taken over cannot commit.
	require.ErrorIs(t, s.CommitCursor(ctx, store.CommitParams{Fence: jfence(h[other]), Cursor: "x", Now: at(3 * time.Minute)}), store.ErrStaleToken)
	require.NoError(t, s.CommitCursor(ctx, store.CommitParams{Fence: jfence(cs[0]), Cursor: "x", Now: at(3 * time.Minute)}))

	a, err := s.GetJob(ctx, "a")
	require.NoError(t, err)
	require.Empty(t, a.LeaseHolder)
	require.Equal(t, at(3*time.Minute+time.Hour), a.NextRunAt)
	runs, err = s.ListRuns(ctx, store.ListParams{JobID: "a"})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, store.RunSucceeded, runs[0].Outcome)
}

func ids(cs []store.Claim) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Job.ID)
	}
	return out
}

// TestClaimAndFinishTwoStoresOneFile: two Stores on one file, as two
// processes would open it, each with two workers that claim and finish
// through ClaimAndFinish, contend for SQLite's write lock (BEGIN IMMEDIATE
// refused as busy is asked again): every job is claimed exactly once, never
// by two holders, and every run ends as a success.
func TestClaimAndFinishTwoStoresOneFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "jobs.db")
	a := open(t, path, sqlitestore.Config{})
	b := open(t, path, sqlitestore.Config{})
	_, _, err := a.UpsertConnector(ctx, store.Connector{ID: "c"})
	require.NoError(t, err)
	const jobs = 120
	for i := range jobs {
		_, _, err := a.UpsertJob(ctx, store.JobSpec{ID: fmt.Sprintf("j%03d", i), ConnectorID: "c", Type: "t", GroupKey: fmt.Sprintf("g%d", i%7)}, time.Time{})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	claims := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w, s := range []*sqlitestore.Store{a, a, b, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("w%d", w)
			var fin []store.EndParams
			for {
				cs, ferrs, err := s.ClaimAndFinish(ctx, store.ClaimParams{Holder: holder, Limit: 3, LeaseTTL: time.Hour}, fin)
				if err != nil {
					errs <- err
					return
				}
				for i, e := range ferrs {
					if e != nil {
						errs <- fmt.Errorf("%s: finish of %s: %w", holder, fin[i].JobID, e)
						return
					}
				}
				if len(cs) == 0 && len(fin) == 0 {
					return
				}
				fin = fin[:0]
				mu.Lock()
				for _, c := range cs {
					claims[c.Job.ID]++
					fin = append(fin, store.EndParams{Fence: jfence(c), Delay: time.Hour})
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
	require.Len(t, claims, jobs)
	for id, n := range claims {
		require.Equal(t, 1, n, "job %s claimed %d times", id, n)
		runs, err := b.ListRuns(ctx, store.ListParams{JobID: id})
		require.NoError(t, err)
		require.Len(t, runs, 1)
		require.Equal(t, store.RunSucceeded, runs[0].Outcome)
		j, err := a.GetJob(ctx, id)
		require.NoError(t, err)
		require.Empty(t, j.LeaseHolder)
		require.Equal(t, int64(1), j.Runs)
	}
}

package jobtest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

// finishBatch: a batch of finishes is fenced entry by entry: the entries
// whose token holds their job finish (stats, next run, run record), a
// stale one (its lease was taken over) or a missing job changes nothing
// and does not hold the others back; an invalid batch writes nothing.
func finishBatch(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	f, ok := s.(store.JobFinisher)
	require.True(t, ok, "every backend implements store.JobFinisher")
	conn(t, s, "c")
	for _, id := range []string{"a", "b", "c"} {
		job(t, s, store.JobSpec{ID: id, ConnectorID: "c", GroupKey: "g"})
	}
	cs := claim(t, s, "w1", 3, at(0))
	require.ElementsMatch(t, []string{"a", "b", "c"}, ids(cs))
	held := map[string]store.Claim{}
	for _, c := range cs {
		held[c.Job.ID] = c
	}
	// b's lease expires while w1 keeps a and c alive; w2 takes b over.
	for _, id := range []string{"a", "c"} {
		_, err := s.Heartbeat(ctx, store.HeartbeatParams{Fence: fence(held[id]), LeaseTTL: 5 * time.Minute, Now: at(50 * time.Second)})
		require.NoError(t, err)
	}
	nw := claim(t, s, "w2", 3, at(2*time.Minute))
	require.Equal(t, []string{"b"}, ids(nw))

	// Invalid: nothing is written.
	_, err := f.FinishJobs(ctx, []store.EndParams{{Fence: fence(held["a"]), Now: at(3 * time.Minute)}, {Fence: fence(held["c"]), Delay: -time.Second}})
	require.ErrorIs(t, err, store.ErrInvalidJob)
	j, err := s.GetJob(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, "w1", j.LeaseHolder)

	errs, err := f.FinishJobs(ctx, []store.EndParams{
		{Fence: fence(held["a"]), Delay: time.Hour, Stats: store.RunStats{Requests: 3, Retries: 1}, Now: at(3 * time.Minute)},
		{Fence: fence(held["b"]), Delay: time.Hour, Now: at(3 * time.Minute)},
		{Fence: fence(held["c"]), Delay: 2 * time.Hour, Now: at(3 * time.Minute)},
		{Fence: store.Fence{JobID: "nope", Token: 1}, Now: at(3 * time.Minute)},
	})
	require.NoError(t, err)
	require.Len(t, errs, 4)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], store.ErrStaleToken)
	require.NoError(t, errs[2])
	require.ErrorIs(t, errs[3], store.ErrJobNotFound)

	a, err := s.GetJob(ctx, "a")
	require.NoError(t, err)
	require.Empty(t, a.LeaseHolder)
	require.Equal(t, at(3*time.Minute+time.Hour), a.NextRunAt)
	require.Equal(t, at(3*time.Minute), a.LastSuccessAt)
	c, err := s.GetJob(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, c.LeaseHolder)
	require.Equal(t, at(3*time.Minute+2*time.Hour), c.NextRunAt)
	// b is still w2's, its stale finish counted nothing.
	b, err := s.GetJob(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, "w2", b.LeaseHolder)
	require.Equal(t, nw[0].Job.LeaseToken, b.LeaseToken)
	require.True(t, b.LastSuccessAt.IsZero())

	runs, err := s.ListRuns(ctx, store.ListParams{JobID: "a"})
	require.NoError(t, err)
	require.Equal(t, store.RunRecord{ID: runs[0].ID, JobID: "a", Token: held["a"].Job.LeaseToken, Holder: "w1", StartedAt: at(0),
		EndedAt: at(3 * time.Minute), Outcome: store.RunSucceeded, Requests: 3, Retries: 1}, runs[0])
	runs, err = s.ListRuns(ctx, store.ListParams{JobID: "b"})
	require.NoError(t, err)
	require.Len(t, runs, 2)
	require.Equal(t, store.RunRunning, runs[0].Outcome)
	require.Equal(t, "w2", runs[0].Holder)
	require.Equal(t, store.RunAbandoned, runs[1].Outcome)

	// A spent token finishes nothing a second time; the holder's does.
	errs, err = f.FinishJobs(ctx, []store.EndParams{{Fence: fence(held["a"]), Now: at(4 * time.Minute)}, {Fence: fence(nw[0]), Now: at(4 * time.Minute)}})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], store.ErrStaleToken)
	require.NoError(t, errs[1])
	a2, err := s.GetJob(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, a.NextRunAt, a2.NextRunAt)

	errs, err = f.FinishJobs(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, errs)
}

// claimAndFinish: a store.ClaimFinisher writes the finishes (each fenced
// on its own) in its claim's transaction, and writes them even when
// nothing is due; invalid finishes fail the call and write nothing.
func claimAndFinish(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	cf, ok := s.(store.ClaimFinisher)
	if !ok {
		t.Skip("not a store.ClaimFinisher")
	}
	conn(t, s, "c")
	job(t, s, store.JobSpec{ID: "a", ConnectorID: "c", GroupKey: "g1"})
	job(t, s, store.JobSpec{ID: "b", ConnectorID: "c", GroupKey: "g1"})
	first := claim(t, s, "w1", 2, at(0))
	require.ElementsMatch(t, []string{"a", "b"}, ids(first))
	held := map[string]store.Claim{}
	for _, c := range first {
		held[c.Job.ID] = c
	}
	_, err := s.Heartbeat(ctx, store.HeartbeatParams{Fence: fence(held["a"]), LeaseTTL: 10 * time.Minute, Now: at(50 * time.Second)})
	require.NoError(t, err)
	taken := claim(t, s, "w2", 2, at(2*time.Minute))
	require.Equal(t, []string{"b"}, ids(taken))
	job(t, s, store.JobSpec{ID: "d", ConnectorID: "c", GroupKey: "g2"})

	p := store.ClaimParams{Holder: "w1", Limit: 2, LeaseTTL: time.Minute, Now: at(150 * time.Second)}
	_, _, err = cf.ClaimAndFinish(ctx, p, []store.EndParams{{Fence: fence(held["a"]), Delay: -1}})
	require.ErrorIs(t, err, store.ErrInvalidJob)
	require.Equal(t, "w1", mustGet(t, s, "a").LeaseHolder)
	require.Empty(t, mustGet(t, s, "d").LeaseHolder, "an invalid call claims nothing either")

	cs, errs, err := cf.ClaimAndFinish(ctx, p, []store.EndParams{
		{Fence: fence(held["a"]), Delay: time.Hour, Stats: store.RunStats{Requests: 2}, Now: at(150 * time.Second)},
		{Fence: fence(held["b"]), Delay: time.Hour, Now: at(150 * time.Second)},
	})
	require.NoError(t, err)
	require.Len(t, errs, 2)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], store.ErrStaleToken)
	require.Equal(t, []string{"d"}, ids(cs), "a, finished in the same transaction, is not due; b is w2's")
	a := mustGet(t, s, "a")
	require.Empty(t, a.LeaseHolder)
	require.Equal(t, at(150*time.Second), a.LastSuccessAt)
	require.Equal(t, at(150*time.Second+time.Hour), a.NextRunAt)
	b := mustGet(t, s, "b")
	require.Equal(t, "w2", b.LeaseHolder)
	require.True(t, b.LastSuccessAt.IsZero())

	// Nothing due: the finish is written all the same.
	cs, errs, err = cf.ClaimAndFinish(ctx, store.ClaimParams{Holder: "w1", Limit: 2, LeaseTTL: time.Minute, Now: at(170 * time.Second)},
		[]store.EndParams{{Fence: fence(cs[0]), Delay: time.Hour, Now: at(170 * time.Second)}})
	require.NoError(t, err)
	require.Empty(t, cs)
	require.Equal(t, []error{nil}, errs)
	d := mustGet(t, s, "d")
	require.Empty(t, d.LeaseHolder)
	require.Equal(t, at(170*time.Second), d.LastSuccessAt)
	runs, err := s.ListRuns(ctx, store.ListParams{JobID: "d"})
	require.NoError(t, err)
	require.Equal(t, store.RunSucceeded, runs[0].Outcome)
}

// claimAndFinishGate: a job a ClaimAndFinish's finish makes due at once is
// claimed in that call only if the gate allows its connector, even when no
// other job of that connector was due (so nothing else asked about it) and
// its group has another job due (so the claim reads its group).
func claimAndFinishGate(t *testing.T, s store.JobStore) {
	ctx := context.Background()
	cf, ok := s.(store.ClaimFinisher)
	if !ok {
		t.Skip("not a store.ClaimFinisher")
	}
	conn(t, s, "busy")
	conn(t, s, "free")
	job(t, s, store.JobSpec{ID: "a", ConnectorID: "busy", GroupKey: "g"})
	first := claim(t, s, "w", 1, at(0))
	require.Equal(t, []string{"a"}, ids(first))
	job(t, s, store.JobSpec{ID: "b", ConnectorID: "free", GroupKey: "g"})
	var asked []string
	g := func(_ context.Context, id string) (time.Duration, error) {
		asked = append(asked, id)
		if id == "busy" {
			return 40 * time.Second, nil
		}
		return 0, nil
	}
	now := at(10 * time.Second)
	cs, errs, err := cf.ClaimAndFinish(ctx, store.ClaimParams{Holder: "w", Limit: 2, LeaseTTL: time.Minute, Gate: g, Now: now},
		[]store.EndParams{{Fence: fence(first[0]), Delay: 0, Now: now}})
	require.NoError(t, err)
	require.Equal(t, []error{nil}, errs)
	require.Equal(t, []string{"b"}, ids(cs), "a, due again by its finish, was claimed although its connector has no capacity")
	require.Contains(t, asked, "busy", "the gate was not asked about the finished job's connector")
	a := mustGet(t, s, "a")
	require.Empty(t, a.LeaseHolder)
	require.Equal(t, now, a.LastSuccessAt)
	require.Equal(t, at(50*time.Second), a.NextRunAt, "a is due when its connector has capacity again")
}

func mustGet(t *testing.T, s store.JobStore, id string) store.Job {
	t.Helper()
	j, err := s.GetJob(context.Background(), id)
	require.NoError(t, err)
	return j
}

package job_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// The capacity gate peeks without charging: asking it never uses a unit,
// and it answers the wait until one unit is back.
func TestCapacityGatePeeksWithoutCharging(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.New(t0)
	lim, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{Clock: clk}), Clock: clk, Policies: []limiter.Policy{
		{Name: "win", Algorithm: store.FixedWindow, Rate: 3, Period: time.Minute},
		{Name: "gcra", Rate: 10, Period: time.Second, Burst: 5},
		{Name: "shadow", Algorithm: store.FixedWindow, Rate: 1, Period: time.Hour, Shadow: true},
	}})
	require.NoError(t, err)
	policies := map[string][]string{"w": {"win", "shadow"}, "g": {"gcra"}}
	gate := job.CapacityGate(lim, func(_ context.Context, id string) ([]string, error) { return policies[id], nil })
	for range 10 {
		w, err := gate(ctx, "w")
		require.NoError(t, err)
		require.Zero(t, w)
	}
	// Ten peeks charged nothing: all three units are still there.
	for i := range 3 {
		d, err := lim.Allow(ctx, "win", "w")
		require.NoError(t, err)
		require.True(t, d.Allowed, "unit %d", i)
	}
	_, err = lim.Allow(ctx, "shadow", "w")
	require.NoError(t, err)
	clk.Advance(10 * time.Second)
	w, err := gate(ctx, "w")
	require.NoError(t, err)
	require.Greater(t, w, time.Duration(0), "no unit left in the window")
	require.LessOrEqual(t, w, 50*time.Second, "capacity returns when the window ends")
	clk.Advance(w)
	w, err = gate(ctx, "w")
	require.NoError(t, err)
	require.Zero(t, w, "the window ended")

	// GCRA: after the burst, one unit is back one emission (100ms) later.
	for range 5 {
		d, err := lim.Allow(ctx, "gcra", "g")
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	w, err = gate(ctx, "g")
	require.NoError(t, err)
	require.Equal(t, 100*time.Millisecond, w)
	clk.Advance(w)
	w, err = gate(ctx, "g")
	require.NoError(t, err)
	require.Zero(t, w)

	_, err = job.CapacityGate(lim, func(context.Context, string) ([]string, error) { return []string{"nope"}, nil })(ctx, "x")
	require.ErrorIs(t, err, limiter.ErrUnknownPolicy)
}

// ConnectorPolicies reads a connector's policies from the store and keeps
// them for its TTL.
func TestConnectorPoliciesCached(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.New(t0)
	st := memstore.NewJobStore(memstore.JobConfig{Clock: clk})
	_, _, err := st.UpsertConnector(ctx, store.Connector{ID: "c", Policies: []string{"a"}})
	require.NoError(t, err)
	pol := job.ConnectorPolicies(st, time.Minute, clk)
	got, err := pol(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, got)
	_, _, err = st.UpsertConnector(ctx, store.Connector{ID: "c", Policies: []string{"b"}})
	require.NoError(t, err)
	got, err = pol(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, got, "kept for the TTL")
	clk.Advance(time.Minute)
	got, err = pol(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, got)
	_, err = pol(ctx, "missing")
	require.ErrorIs(t, err, store.ErrConnectorNotFound)
}

// KnownPolicies drops the policies the limiter does not hold, so that a
// connector naming one does not fail the claim for everyone.
func TestKnownPoliciesDropsUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.New(t0)
	lim, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{Clock: clk}), Clock: clk, Policies: []limiter.Policy{
		{Name: "win", Algorithm: store.FixedWindow, Rate: 1, Period: time.Hour},
	}})
	require.NoError(t, err)
	known := job.KnownPolicies(lim, func(context.Context, string) ([]string, error) { return []string{"nope", "win"}, nil })
	names, err := known(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, []string{"win"}, names)
	gate := job.CapacityGate(lim, known)
	w, err := gate(ctx, "c")
	require.NoError(t, err)
	require.Zero(t, w)
	d, err := lim.Allow(ctx, "win", "c")
	require.NoError(t, err)
	require.True(t, d.Allowed)
	w, err = gate(ctx, "c")
	require.NoError(t, err)
	require.Greater(t, w, time.Duration(0), "the known policy still gates")
	boom := errors.New("boom")
	_, err = job.KnownPolicies(lim, func(context.Context, string) ([]string, error) { return nil, boom })(ctx, "c")
	require.ErrorIs(t, err, boom)
}

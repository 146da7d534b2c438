package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

// TestEvalGCRAChargeKeepsWindowCounts: a GCRA decision on a key whose
// state a window algorithm wrote (a policy reload) moves only the time when
// it charges, and leaves the state alone when it does not. Every backend
// mirrors it: memstore keeps such a state out of its lock-free cells, the
// Redis script and PostgreSQL's functions carry the counts along.
func TestEvalGCRAChargeKeepsWindowCounts(t *testing.T) {
	t.Parallel()
	g := store.Limit{Name: "n", Rate: 10, Period: time.Second, Burst: 5}
	now := int64(1_000_000_000)
	window := store.State{Time: now + 400_000, Count: 3, Prev: 2}

	st := window
	var res store.Result
	require.NoError(t, store.Eval(&g, &st, now, 1, 0, &res))
	require.True(t, res.Allowed, "%+v", res)
	require.Equal(t, store.State{Time: now + 500_000, Count: 3, Prev: 2}, st, "the state after a charge")

	for _, c := range []struct {
		cost int64
		why  string
	}{{0, "a peek"}, {5, "a refusal"}} {
		st := window
		require.NoError(t, store.Eval(&g, &st, now, c.cost, 0, &res))
		require.Equal(t, window, st, "%s changed the state", c.why)
	}
}

// TestKept: a state fresh under the limit that wrote it is stored as
// nothing. A fixed window refunded to zero keeps its end, which a GCRA
// limit of the same name (after a policy reload) would read as a TAT in the
// future; stored, it is the zero State, which every algorithm reads fresh.
func TestKept(t *testing.T) {
	t.Parallel()
	fixed := store.Limit{Name: "n", Algorithm: store.FixedWindow, Rate: 10, Period: time.Second}
	g := store.Limit{Name: "n", Rate: 10, Period: time.Second, Burst: 5}
	now := int64(1_000_000_000)
	refunded := store.State{Time: now + 400_000}
	require.True(t, store.Fresh(fixed, refunded, now))
	require.False(t, store.Fresh(g, refunded, now), "GCRA reads the window's end as a TAT")

	st, fa := store.Kept(fixed, refunded, now)
	require.Equal(t, store.State{}, st)
	require.Zero(t, fa)
	for _, l := range []store.Limit{fixed, g, {Name: "n", Algorithm: store.SlidingWindow, Rate: 10, Period: time.Second}} {
		require.True(t, store.Fresh(l, st, now), "%v reads the kept state fresh", l.Algorithm)
	}

	live := store.State{Time: now + 400_000, Count: 2}
	st, fa = store.Kept(fixed, live, now)
	require.Equal(t, live, st)
	require.Equal(t, store.FreshAt(fixed, live), fa)
}

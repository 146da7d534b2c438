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

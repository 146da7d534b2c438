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

// TestOutOfRange pins the range every backend shares: a Now override after
// the epoch and before MaxNow, and no write of a state reaching MaxTime.
func TestOutOfRange(t *testing.T) {
	t.Parallel()
	require.NoError(t, store.CheckNow(time.Time{}))
	require.NoError(t, store.CheckNow(time.UnixMicro(0)))
	require.NoError(t, store.CheckNow(time.UnixMicro(store.MaxNow-1)))
	for _, bad := range []time.Time{time.UnixMicro(-1), time.UnixMicro(store.MaxNow), time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), time.Unix(1<<62, 0)} {
		require.ErrorIs(t, store.CheckNow(bad), store.ErrOutOfRange, "%v", bad)
	}

	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	century := store.Limit{Name: "n", Rate: 1, Period: 100 * 365 * 24 * time.Hour, Burst: 1}
	var res store.Result
	st := store.State{}
	// Delayed takes of a century each: allowed until the TAT would pass
	// 2^53, then refused without a change.
	for {
		before := st
		err := store.Eval(&century, &st, now, 1, time.Duration(1<<63-1), &res)
		if err != nil {
			require.ErrorIs(t, err, store.ErrOutOfRange)
			require.Equal(t, before, st)
			require.GreaterOrEqual(t, before.Time+century.GCRA().Interval(), store.MaxTime)
			break
		}
		require.Less(t, st.Time, store.MaxTime)
	}
	require.ErrorIs(t, store.Eval(&century, &store.State{}, store.MaxNow, 1, 0, &res), store.ErrOutOfRange)
	require.ErrorIs(t, store.Eval(&century, &store.State{}, -1, 1, 0, &res), store.ErrOutOfRange)

	// A Sync that pauses past 2^53 is refused, one that stops short is not.
	p := store.SyncParams{Key: "k", Limit: century, ResetAfter: time.Duration(store.MaxTime-now) * time.Microsecond}
	_, err := store.EvalSync(store.State{}, now, &p)
	require.ErrorIs(t, err, store.ErrOutOfRange)
	p.ResetAfter -= time.Microsecond
	s, err := store.EvalSync(store.State{}, now, &p)
	require.NoError(t, err)
	require.Equal(t, store.MaxTime-1, s.Time)

	// A debt beyond gcra.MaxSpan is ErrCostExceedsLimit whatever the state
	// (Redis once accepted 2^52 units at 10^6/s).
	fast := store.Limit{Name: "n", Rate: 1_000_000, Period: time.Second, Burst: 1}
	_, err = store.EvalSettle(store.State{}, now, &store.SettleParams{Limit: fast, Actual: 1 << 52})
	require.ErrorIs(t, err, store.ErrCostExceedsLimit)

	// A fixed window's state whose end, read by a sliding window of the
	// same name, would reach 2^53 is out of range for it.
	w := int64(1) << 52
	fixed := store.Limit{Name: "n", Algorithm: store.FixedWindow, Rate: 1, Period: time.Duration(w-1) * time.Microsecond}
	sliding := store.Limit{Name: "n", Algorithm: store.SlidingWindow, Rate: 1, Period: time.Duration(w) * time.Microsecond}
	st = store.State{}
	require.NoError(t, store.Eval(&fixed, &st, w-1, 1, 0, &res)) // the window ends at 2^53-2
	require.True(t, store.InRange(fixed, st))
	require.False(t, store.InRange(sliding, st))
	require.ErrorIs(t, store.Eval(&sliding, &st, 1, 0, 0, &res), store.ErrOutOfRange)
}

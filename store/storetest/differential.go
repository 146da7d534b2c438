package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

var diffLimits = []store.Limit{
	{Name: "gcra", Algorithm: store.GCRA, Rate: 10, Period: time.Second, Burst: 5},
	{Name: "gcra-default-burst", Algorithm: store.GCRA, Rate: 3, Period: 700 * time.Millisecond},
	{Name: "fixed", Algorithm: store.FixedWindow, Rate: 10, Period: time.Second},
	{Name: "sliding", Algorithm: store.SlidingWindow, Rate: 7, Period: 500 * time.Millisecond},
	{Name: "sliding-odd", Algorithm: store.SlidingWindow, Rate: 5, Period: 333333 * time.Microsecond},
	// One name under three algorithms, as after policy reloads: each reads
	// the state the others wrote.
	{Name: "reloaded", Algorithm: store.GCRA, Rate: 8, Period: time.Second, Burst: 4},
	{Name: "reloaded", Algorithm: store.FixedWindow, Rate: 6, Period: 700 * time.Millisecond},
	{Name: "reloaded", Algorithm: store.SlidingWindow, Rate: 5, Period: 400 * time.Millisecond},
}

// Differential runs n random operations (Take, TakeAll, Settle, Sync and
// Reset over GCRA, fixed and sliding windows, one name under all three
// algorithms (policy reloads), weighted costs, MaxDelay, a clock that
// sometimes steps back) against got and the reference want (a
// fresh memstore: memstore.New(memstore.Config{})) with the same Now
// sequence, and fails at the first answer that differs: every backend must
// decide exactly as memstore does. Keys carry a random tag, so got may be
// shared with other tests.
func Differential(t *testing.T, got, want store.RateStore, seed uint64, n int) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	tag := fmt.Sprintf("diff/%016x/", rand.Uint64())
	diffKeys := []string{tag + "a", tag + "b", tag + "c"}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(int64(time.Hour))))
	now = now.Truncate(time.Microsecond)
	lastAt := map[string]int64{}
	pick := func() (store.Limit, string) {
		return diffLimits[rng.IntN(len(diffLimits))], diffKeys[rng.IntN(len(diffKeys))]
	}
	cost := func(l store.Limit) int64 {
		if rng.IntN(50) == 0 {
			return l.Max() + 1 // an error on both sides
		}
		return rng.Int64N(l.Max()/2 + 2)
	}
	maxDelay := func() time.Duration {
		if rng.IntN(5) == 0 {
			return time.Duration(rng.Int64N(int64(time.Second)))
		}
		return 0
	}
	for i := range n {
		if rng.IntN(20) == 0 {
			now = now.Add(-time.Duration(rng.Int64N(int64(50 * time.Millisecond)))).Truncate(time.Microsecond)
		} else {
			now = now.Add(time.Duration(rng.Int64N(int64(300 * time.Millisecond)))).Truncate(time.Microsecond)
		}
		var desc string
		var w, g any
		var werr, gerr error
		switch k := rng.IntN(10); {
		case k < 4:
			l, key := pick()
			p := store.TakeParams{Key: key, Limit: l, Cost: cost(l), MaxDelay: maxDelay(), Now: now}
			desc = fmt.Sprintf("%+v", p)
			wr, e1 := want.Take(ctx, p)
			gr, e2 := got.Take(ctx, p)
			w, g, werr, gerr = wr, gr, e1, e2
			if e1 == nil && wr.Allowed {
				lastAt[l.Name+"/"+key] = wr.At
			}
		case k < 6:
			p := store.TakeAllParams{MaxDelay: maxDelay(), Now: now}
			for range 1 + rng.IntN(3) {
				l, key := pick()
				p.Items = append(p.Items, store.Item{Key: key, Limit: l, Cost: cost(l)})
			}
			desc = fmt.Sprintf("%+v", p)
			wr, e1 := want.TakeAll(ctx, p)
			gr, e2 := got.TakeAll(ctx, p)
			w, g, werr, gerr = wr, gr, e1, e2
		case k < 8:
			l, key := pick()
			at, ok := lastAt[l.Name+"/"+key]
			if !ok || rng.IntN(5) == 0 {
				at = now.UnixMicro() - rng.Int64N(int64(2*l.Period/time.Microsecond))
			}
			p := store.SettleParams{Key: key, Limit: l, Reserved: rng.Int64N(l.Max() + 1),
				Actual: rng.Int64N(l.Max() + 3), ReservedAt: at, Now: now}
			desc = fmt.Sprintf("%+v", p)
			wr, e1 := want.Settle(ctx, p)
			gr, e2 := got.Settle(ctx, p)
			w, g, werr, gerr = wr, gr, e1, e2
		case k < 9:
			l, key := pick()
			p := store.SyncParams{Key: key, Limit: l, Remaining: rng.Int64N(l.Max()+3) - 1,
				ResetAfter: time.Duration(rng.Int64N(int64(3*time.Second))) - 100*time.Millisecond, Now: now}
			desc = fmt.Sprintf("%+v", p)
			wr, e1 := want.Sync(ctx, p)
			gr, e2 := got.Sync(ctx, p)
			w, g, werr, gerr = wr, gr, e1, e2
		default:
			l, key := pick()
			p := store.ResetParams{Key: key, Limit: l}
			desc = fmt.Sprintf("%+v", p)
			werr = want.Reset(ctx, p)
			gerr = got.Reset(ctx, p)
		}
		if werr != nil || gerr != nil {
			require.Equal(t, fmt.Sprint(werr), fmt.Sprint(gerr), "op %d (seed %d): %s", i, seed, desc)
			continue
		}
		require.Equal(t, w, g, "op %d (seed %d): %s", i, seed, desc)
	}
}

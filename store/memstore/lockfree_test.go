package memstore

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

// TestLockFreeTakesNeverOverAdmit runs lock-free GCRA takes (TakePrepared
// and Take, on the real clock) on one hot key while, on the same shard,
// multi-key takes, settles, sweeps and a flood of short-lived keys (which
// make the shard sweep and rebuild its index) run under the lock. Every
// path that rewrites the hot key must serialize with the lock-free ones:
// admitted cost never exceeds burst + rate x elapsed. The loops run until
// the key has admitted many bursts' worth and denied as many takes (it was
// kept at its limit), and the flood has swept several times.
func TestLockFreeTakesNeverOverAdmit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(Config{Shards: 1, MaxKeys: 4096})
	hot := store.Limit{Name: "hot", Rate: 2000, Period: time.Second, Burst: 20}
	hp, err := store.Prepare(hot)
	require.NoError(t, err)
	brief := store.Limit{Name: "brief", Rate: 1000, Period: time.Second, Burst: 1} // fresh 1ms after a take
	roomy := store.Limit{Name: "roomy", Rate: 1_000_000, Period: time.Second, Burst: 1 << 40}

	var admitted, denied atomic.Int64
	count := func(allowed bool, cost int64) {
		if allowed {
			admitted.Add(cost)
		} else {
			denied.Add(1)
		}
	}
	h := newHammer()
	for range 4 {
		h.loop(func(int) {
			var res store.Result
			if err := s.TakePrepared("k", hp, 1, &res); err != nil {
				panic(err)
			}
			count(res.Allowed, 1)
		})
	}
	for range 2 {
		h.loop(func(int) {
			res, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: hot, Cost: 2})
			if err != nil {
				panic(err)
			}
			count(res.Allowed, 2)
		})
	}
	for g := range 2 {
		h.loop(func(i int) {
			res, err := s.TakeAll(ctx, store.TakeAllParams{Items: []store.Item{
				{Key: "k", Limit: hot, Cost: 1},
				{Key: "other" + strconv.Itoa(g), Limit: roomy, Cost: 1},
			}})
			if err != nil {
				panic(err)
			}
			count(res.Allowed, 1)
		})
	}
	h.loop(func(int) {
		// Settling a reservation at its cost charges nothing, but it
		// rewrites the key under the lock.
		if _, err := s.Settle(ctx, store.SettleParams{Key: "k", Limit: hot, Reserved: 1, Actual: 1}); err != nil {
			panic(err)
		}
	})
	const sweepEvery = 512
	flooded := h.flood(s, brief, sweepEvery)
	const want = 25 * 20 // bursts' worth of the hot key
	elapsed := h.run(t, 100, func() bool {
		return admitted.Load() >= want && denied.Load() >= want && flooded.Load() >= 4*sweepEvery
	}, func() string {
		return fmt.Sprintf("admitted %d, denied %d (want >= %d each), flood takes %d (want >= %d)",
			admitted.Load(), denied.Load(), want, flooded.Load(), 4*sweepEvery)
	})

	bound := gcraBound(hot, 1, elapsed)
	got := admitted.Load()
	require.LessOrEqual(t, got, bound, "admitted %d in %v", got, elapsed)
}

// TestAlgorithmChangeReplacesCell: a limit name that changes algorithm (a
// policy reload) gets a cell of the new kind, and lock-free takes resume on
// it once a GCRA decision stores a state with no window counts.
func TestAlgorithmChangeReplacesCell(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(Config{})
	g := store.Limit{Name: "n", Rate: 1, Period: time.Hour, Burst: 1}
	w := store.Limit{Name: "n", Algorithm: store.FixedWindow, Rate: 2, Period: time.Hour}
	res, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: g, Cost: 1, Now: base})
	require.NoError(t, err)
	require.True(t, res.Allowed)
	h := s.hash("k")
	old := s.shard(h).get(h, "n", "k")
	require.True(t, old.gcra())

	res, err = s.Take(ctx, store.TakeParams{Key: "k", Limit: w, Cost: 1, Now: base})
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Limit)
	c := s.shard(h).get(h, "n", "k")
	require.NotNil(t, c)
	require.False(t, c.gcra())
	require.Equal(t, int64(dead), old.time.Load(), "the replaced cell is dead")
	require.Equal(t, 1, s.Len())

	// Back to GCRA while the window is live (it ends at base+1h): the
	// decision moves only the time and keeps the window's count
	// (store.Eval, as every backend), so the key stays in a locked cell ...
	g3 := store.Limit{Name: "n", Rate: 1, Period: time.Hour, Burst: 3}
	res, err = s.Take(ctx, store.TakeParams{Key: "k", Limit: g3, Cost: 1, Now: base.Add(30 * time.Minute)})
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.Equal(t, int64(3), res.Limit)
	require.False(t, s.shard(h).get(h, "n", "k").gcra(), "the window's count rides along")
	require.Equal(t, 1, s.Len())

	// ... until the state is fresh under the GCRA take that wrote it (its
	// TAT, base+2h, has passed): it reads as nothing (store.Live), and the
	// next GCRA decision stores a bare TAT in a lock-free cell again.
	res, err = s.Take(ctx, store.TakeParams{Key: "k", Limit: g, Cost: 1, Now: base.Add(3 * time.Hour)})
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.Equal(t, int64(1), res.Limit)
	require.True(t, s.shard(h).get(h, "n", "k").gcra(), "nothing carried once the state was fresh")
	require.Equal(t, 1, s.Len())

	// Back to the window, and back to GCRA while it is live: a locked cell.
	_, err = s.Take(ctx, store.TakeParams{Key: "k", Limit: w, Cost: 1, Now: base.Add(3 * time.Hour)})
	require.NoError(t, err)
	_, err = s.Take(ctx, store.TakeParams{Key: "k", Limit: g3, Cost: 1, Now: base.Add(3 * time.Hour)})
	require.NoError(t, err)
	require.False(t, s.shard(h).get(h, "n", "k").gcra())

	// A reset carries nothing either, lock-free takes resume.
	require.NoError(t, s.Reset(ctx, store.ResetParams{Key: "k", Limit: g}))
	res, err = s.Take(ctx, store.TakeParams{Key: "k", Limit: g, Cost: 1, Now: base.Add(4 * time.Hour)})
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.True(t, s.shard(h).get(h, "n", "k").gcra())
	require.Equal(t, 1, s.Len())
}

// TestResetKillsTheCell: a reset marks the cell dead before it leaves the
// table, so that a lock-free take holding it cannot charge a key that is
// gone (its swap fails, and it retries under the lock on the new cell).
func TestResetKillsTheCell(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(Config{})
	l := store.Limit{Name: "n", Rate: 1, Period: time.Hour, Burst: 1}
	_, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
	require.NoError(t, err)
	h := s.hash("k")
	c := s.shard(h).get(h, "n", "k")
	tat := c.time.Load()
	require.NoError(t, s.Reset(ctx, store.ResetParams{Key: "k", Limit: l}))
	require.Nil(t, s.shard(h).get(h, "n", "k"))
	require.False(t, c.time.CompareAndSwap(tat, tat+1), "a take on the reset cell must fail")
	res, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
	require.NoError(t, err)
	require.True(t, res.Allowed, "the reset key is fresh")
}

// TestSweepKeepsACellChargedUnderIt: a lock-free take that charges a cell
// after a sweep found it fresh, and before the sweep kills it, keeps the
// cell (the kill is a compare-and-swap on the TAT the sweep saw): the
// charge is not lost, and the next take is denied.
//
// Not parallel: it sets a package hook.
func TestSweepKeepsACellChargedUnderIt(t *testing.T) {
	s := New(Config{})
	// Fresh 50ms after a take: the last take below, denied, must come
	// within 50ms of the hook's (1ms made this test flaky under -race).
	l := store.Limit{Name: "brief", Rate: 20, Period: time.Second, Burst: 1}
	lp, err := store.Prepare(l)
	require.NoError(t, err)
	var res store.Result
	require.NoError(t, s.TakePrepared("k", lp, 1, &res))
	require.True(t, res.Allowed)
	time.Sleep(60 * time.Millisecond) // the key is fresh again

	charged := 0
	testHookSweep = func(c *cell) {
		if c.key != "k" {
			return
		}
		var r store.Result
		if err := s.TakePrepared("k", lp, 1, &r); err != nil {
			panic(err)
		}
		if r.Allowed {
			charged++
		}
	}
	defer func() { testHookSweep = nil }()
	s.Sweep()
	testHookSweep = nil
	require.Equal(t, 1, charged, "the hook's take ran on the fresh cell")
	require.Equal(t, 1, s.Len(), "a sweep dropped a cell charged under it")
	require.NoError(t, s.TakePrepared("k", lp, 1, &res))
	require.False(t, res.Allowed, "the charge made under the sweep was lost")
}

// TestSweepsNeverDropACharge: keys that turn fresh a millisecond after each
// take are swept continuously while lock-free takes charge them. A sweep
// kills a cell only if its TAT is still the fresh one it saw, so a charge
// that lands first keeps the cell, and a take that finds the cell dead
// retries under the lock: no key is ever admitted beyond its bound. The
// loops run until sweeps have dropped many cells and many cells have been
// charged under a sweep that found them fresh (the race this is about; the
// sweep hook yields half the time to widen its window), counted after each sweep.
//
// Not parallel: it sets a package hook.
func TestSweepsNeverDropACharge(t *testing.T) {
	s := New(Config{Shards: 1})
	l := store.Limit{Name: "brief", Rate: 1000, Period: time.Second, Burst: 1}
	lp, err := store.Prepare(l)
	require.NoError(t, err)
	const keys = 4
	var (
		admitted       [keys]atomic.Int64
		mu             sync.Mutex
		seen           []*cell // cells a sweep found fresh, before it killed them
		calls          int     // of the hook
		dropped, raced atomic.Int64
	)
	testHookSweep = func(c *cell) {
		mu.Lock()
		seen = append(seen, c)
		calls++
		yield := calls%2 == 0 // half the time: let the takers in
		mu.Unlock()
		if yield {
			runtime.Gosched()
		}
	}
	defer func() { testHookSweep = nil }()
	h := newHammer()
	for g := range 6 {
		var res store.Result
		h.loop(func(i int) {
			k := (g + i) % keys
			if err := s.TakePrepared("k"+strconv.Itoa(k), lp, 1, &res); err != nil {
				panic(err)
			}
			if res.Allowed {
				admitted[k].Add(1)
			}
		})
	}
	h.loop(func(int) {
		s.Sweep()
		// Only this loop sweeps (four keys never reach minSweep), so a
		// cell it saw is now dead or was charged before the kill.
		mu.Lock()
		for _, c := range seen {
			if c.time.Load() == dead {
				dropped.Add(1)
			} else {
				raced.Add(1)
			}
		}
		seen = seen[:0]
		mu.Unlock()
	})
	const want = 20
	elapsed := h.run(t, 100, func() bool {
		return dropped.Load() >= want && raced.Load() >= want
	}, func() string {
		return fmt.Sprintf("sweeps dropped %d cells and found %d charged under them (want >= %d each)",
			dropped.Load(), raced.Load(), want)
	})
	testHookSweep = nil
	bound := gcraBound(l, 1, elapsed)
	for k := range keys {
		got := admitted[k].Load()
		require.LessOrEqual(t, got, bound, "key %d: admitted %d in %v", k, got, elapsed)
	}
	t.Logf("dropped %d, raced %d in %v", dropped.Load(), raced.Load(), elapsed)
}

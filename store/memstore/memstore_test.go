package memstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/storetest"
)

var base = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(*testing.T) store.RateStore { return New(Config{}) })
}

// TestConformanceShared runs the suite with every subtest on one store, as a
// shared Redis or database would be, and with few shards so that subtests'
// keys share locks.
func TestConformanceShared(t *testing.T) {
	t.Parallel()
	s := New(Config{Shards: 4})
	storetest.Run(t, func(*testing.T) store.RateStore { return s })
}

func TestTakeDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ctx := context.Background()
	s := New(Config{})
	for _, tc := range []struct {
		name string
		l    store.Limit
	}{
		{"gcra", store.Limit{Name: "gcra", Rate: 1_000_000, Period: time.Second}},
		{"fixed", store.Limit{Name: "fixed", Algorithm: store.FixedWindow, Rate: 1 << 40, Period: time.Hour}},
		{"sliding", store.Limit{Name: "sliding", Algorithm: store.SlidingWindow, Rate: 1 << 20, Period: time.Hour}},
	} {
		p := store.TakeParams{Key: "existing-key", Limit: tc.l, Cost: 1, Now: base}
		_, err := s.Take(ctx, p)
		require.NoError(t, err)
		allowed := 0
		allocs := testing.AllocsPerRun(1000, func() {
			p.Now = p.Now.Add(time.Microsecond)
			res, err := s.Take(ctx, p)
			if err != nil {
				panic(err)
			}
			if res.Allowed {
				allowed++
			}
		})
		require.Zero(t, allocs, "%s: allocations per Take on an existing key", tc.name)
		require.Positive(t, allowed, tc.name)

		// The store's own clock, and denials, do not allocate either.
		p.Now = time.Time{}
		p.Cost = tc.l.Max()
		allocs = testing.AllocsPerRun(1000, func() {
			if _, err := s.Take(ctx, p); err != nil {
				panic(err)
			}
		})
		require.Zero(t, allocs, "%s: allocations per Take on the store clock", tc.name)
	}
}

// TestFloodOfUniqueKeys sends a million unique keys through a store bounded
// to 10,000, with a limit whose keys become fresh 100ms after their one take
// (10/s, burst 1), advancing simulated time 50us per key: about 2,000 keys
// hold state at any moment. The store must stay bounded, keep answering,
// and not forget a key that still owes time.
func TestFloodOfUniqueKeys(t *testing.T) {
	t.Parallel()
	const (
		maxKeys = 10_000
		keys    = 1_000_000
		step    = 50 * time.Microsecond
	)
	ctx := context.Background()
	s := New(Config{MaxKeys: maxKeys})
	fast := store.Limit{Name: "fast", Rate: 10, Period: time.Second, Burst: 1}
	slow := store.Limit{Name: "slow", Rate: 1, Period: time.Hour, Burst: 1}

	// One key that owes an hour before the flood.
	res, err := s.Take(ctx, store.TakeParams{Key: "debtor", Limit: slow, Cost: 1, Now: base})
	require.NoError(t, err)
	require.True(t, res.Allowed)

	buf := make([]byte, 0, 32)
	peak := 0
	var now time.Time
	for i := range keys {
		now = base.Add(time.Duration(i) * step)
		buf = strconv.AppendInt(append(buf[:0], "flood-"...), int64(i), 10)
		res, err := s.Take(ctx, store.TakeParams{Key: string(buf), Limit: fast, Cost: 1, Now: now})
		if err != nil {
			t.Fatalf("key %d at %v: %v (store holds %d keys)", i, now.Sub(base), err, s.Len())
		}
		if !res.Allowed {
			t.Fatalf("fresh key %d denied", i)
		}
		if i%1000 == 0 {
			n := s.Len()
			peak = max(peak, n)
			require.LessOrEqual(t, n, maxKeys, "after %d keys", i)
		}
	}
	n := s.Len()
	require.LessOrEqual(t, n, maxKeys)
	// Keys did become fresh and were dropped: far fewer are held than
	// were seen, and at least the live ones are.
	require.Greater(t, int64(peak), 100*time.Millisecond.Microseconds()/step.Microseconds()/2, "peak %d", peak)

	// The debtor still owes: eviction never hands its budget back.
	res, err = s.Take(ctx, store.TakeParams{Key: "debtor", Limit: slow, Cost: 1, Now: now})
	require.NoError(t, err)
	require.False(t, res.Allowed)
	require.Equal(t, time.Hour-now.Sub(base), res.RetryAfter)
}

// TestFullStoreRefusesInsteadOfEvicting fills a store with keys that all
// still hold state: a new key must get ErrTooManyKeys, and every old key
// must keep what it owes.
func TestFullStoreRefusesInsteadOfEvicting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name          string
		maxKeys, shrd int
	}{
		{"one shard", 1000, 1},
		{"default shards", 1000, 0},
		{"fewer keys than shards", 100, 0},
	} {
		s := New(Config{MaxKeys: tc.maxKeys, Shards: tc.shrd})
		slow := store.Limit{Name: "slow", Rate: 1, Period: time.Hour, Burst: 1}
		var held []string
		refused := 0
		for i := range 3 * tc.maxKeys {
			key := "k" + strconv.Itoa(i)
			res, err := s.Take(ctx, store.TakeParams{Key: key, Limit: slow, Cost: 1, Now: base.Add(time.Duration(i) * time.Millisecond)})
			if err != nil {
				require.ErrorIs(t, err, store.ErrTooManyKeys, tc.name)
				refused++
				continue
			}
			require.True(t, res.Allowed, tc.name)
			held = append(held, key)
		}
		require.Positive(t, refused, "%s: never refused a key", tc.name)
		require.LessOrEqual(t, len(held), tc.maxKeys, tc.name)
		require.Equal(t, len(held), s.Len(), tc.name)
		now := base.Add(time.Duration(3*tc.maxKeys) * time.Millisecond)
		for _, key := range held {
			res, err := s.Take(ctx, store.TakeParams{Key: key, Limit: slow, Cost: 1, Now: now})
			require.NoError(t, err, "%s: existing key %s", tc.name, key)
			require.False(t, res.Allowed, "%s: key %s was forgotten: its budget came back", tc.name, key)
		}
		// A peek needs no room: it still answers for an unknown key.
		res, err := s.Take(ctx, store.TakeParams{Key: "new", Limit: slow, Cost: 0, Now: now})
		require.NoError(t, err)
		require.True(t, res.Allowed)
		// TakeAll with a new key whose shard is full is refused whole. (A
		// shard may have stayed empty: with one key per shard, 300 random
		// keys miss a given one of 64 shards about 1% of the time.)
		full := fullShardKey(t, s)
		_, err = s.TakeAll(ctx, store.TakeAllParams{Now: now, Items: []store.Item{
			{Key: held[0], Limit: slow, Cost: 0}, {Key: full, Limit: slow, Cost: 1},
		}})
		require.ErrorIs(t, err, store.ErrTooManyKeys, tc.name)
		// Once the keys are fresh again there is room.
		later := now.Add(time.Hour)
		res, err = s.Take(ctx, store.TakeParams{Key: full, Limit: slow, Cost: 1, Now: later})
		require.NoError(t, err, tc.name)
		require.True(t, res.Allowed, tc.name)
	}
}

// fullShardKey returns a key the store does not hold whose shard is full.
func fullShardKey(t *testing.T, s *Store) string {
	t.Helper()
	for i := range 100000 {
		key := "new" + strconv.Itoa(i)
		h := s.hash(key)
		sh := s.shard(h)
		sh.mu.Lock()
		full := sh.t.n >= s.maxPerShard && sh.t.find(h, "slow", key) == nil
		sh.mu.Unlock()
		if full {
			return key
		}
	}
	t.Fatal("no shard is full")
	return ""
}

// TestTakeAllOnFullStoreChargesNothing: a TakeAll refused for want of room
// must not have charged any of its items, even when an item's key was held
// but fresh (so a sweep may drop it while room is being made).
func TestTakeAllOnFullStoreChargesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(Config{Shards: 1, MaxKeys: 3})
	slow := store.Limit{Name: "slow", Rate: 2, Period: time.Hour}
	fast := store.Limit{Name: "fast", Rate: 10, Period: time.Second, Burst: 1} // fresh after 100ms
	take := func(key string, l store.Limit, cost int64, now time.Time) store.Result {
		t.Helper()
		res, err := s.Take(ctx, store.TakeParams{Key: key, Limit: l, Cost: cost, Now: now})
		require.NoError(t, err)
		return res
	}
	require.True(t, take("x", slow, 1, base).Allowed)
	require.True(t, take("y", slow, 1, base).Allowed)
	require.True(t, take("a", fast, 1, base).Allowed)
	require.Equal(t, 3, s.Len())

	// 200ms on, "a" is fresh but still held. Taking x, a and a new key n
	// needs room for two keys where only one can be made.
	now := base.Add(200 * time.Millisecond)
	_, err := s.TakeAll(ctx, store.TakeAllParams{Now: now, Items: []store.Item{
		{Key: "x", Limit: slow, Cost: 1},
		{Key: "a", Limit: fast, Cost: 1},
		{Key: "n", Limit: slow, Cost: 1},
	}})
	require.ErrorIs(t, err, store.ErrTooManyKeys)
	require.Equal(t, int64(1), take("x", slow, 0, now).Remaining, "x was charged by a refused TakeAll")
	require.Equal(t, int64(1), take("a", fast, 0, now).Remaining, "a was charged by a refused TakeAll")
	require.Equal(t, int64(2), take("n", slow, 0, now).Remaining, "n was charged by a refused TakeAll")
	require.LessOrEqual(t, s.Len(), 3)
}

func TestSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.New(base)
	s := New(Config{Clock: clk})
	fast := store.Limit{Name: "fast", Rate: 10, Period: time.Second, Burst: 1}                  // fresh after 100ms
	slow := store.Limit{Name: "slow", Rate: 1, Period: time.Hour, Burst: 1}                     // fresh after 1h
	win := store.Limit{Name: "win", Algorithm: store.FixedWindow, Rate: 5, Period: time.Second} // fresh at the second
	for i := range 100 {
		for _, l := range []store.Limit{fast, slow, win} {
			_, err := s.Take(ctx, store.TakeParams{Key: "k" + strconv.Itoa(i), Limit: l, Cost: 1})
			require.NoError(t, err)
		}
	}
	// Peeks and denials store nothing.
	_, err := s.Take(ctx, store.TakeParams{Key: "peeked", Limit: fast, Cost: 0})
	require.NoError(t, err)
	require.Equal(t, 300, s.Len())

	s.Sweep()
	require.Equal(t, 300, s.Len(), "swept keys that still hold state")
	clk.Advance(100*time.Millisecond - time.Microsecond)
	s.Sweep()
	require.Equal(t, 300, s.Len(), "swept keys a microsecond early")
	clk.Advance(time.Microsecond)
	s.Sweep()
	require.Equal(t, 200, s.Len())
	clk.Advance(900 * time.Millisecond)
	s.Sweep()
	require.Equal(t, 100, s.Len())
	// The survivors still owe.
	res, err := s.Take(ctx, store.TakeParams{Key: "k7", Limit: slow, Cost: 1})
	require.NoError(t, err)
	require.False(t, res.Allowed)
	clk.Advance(time.Hour)
	s.Sweep()
	require.Zero(t, s.Len())
}

// TestStoreClockNeverRunsBackwards: with no Now override the store reads its
// clock, clamped per key so that a clock stepped back mints nothing.
func TestStoreClockNeverRunsBackwards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.New(base)
	s := New(Config{Clock: clk})
	l := store.Limit{Name: "l", Algorithm: store.FixedWindow, Rate: 3, Period: time.Minute}
	clk.Advance(59 * time.Second)
	for range 3 {
		res, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	clk.Advance(2 * time.Second) // next window
	res, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 3})
	require.NoError(t, err)
	require.True(t, res.Allowed)
	// Stepped back into the previous window: the store stays in the new
	// one, which is full.
	clk.Advance(-30 * time.Second)
	res, err = s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
	require.NoError(t, err)
	require.False(t, res.Allowed)
	require.Equal(t, base.Add(61*time.Second).UnixMicro(), res.At)
	r2, err := s.TakeAll(ctx, store.TakeAllParams{Items: []store.Item{{Key: "k", Limit: l, Cost: 1}, {Key: "other", Limit: l, Cost: 1}}})
	require.NoError(t, err)
	require.False(t, r2.Allowed)
	require.Equal(t, base.Add(61*time.Second).UnixMicro(), r2.Results[0].At)
	// Settle and Sync too.
	r3, err := s.Sync(ctx, store.SyncParams{Key: "k", Limit: l, Remaining: 0})
	require.NoError(t, err)
	require.Equal(t, base.Add(61*time.Second).UnixMicro(), r3.At)
}

func BenchmarkTake(b *testing.B) {
	ctx := context.Background()
	s := New(Config{})
	p := store.TakeParams{Key: "bench-key", Limit: store.Limit{Name: "bench", Rate: 1_000_000, Period: time.Second}, Cost: 1}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Take(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTakeParallel(b *testing.B) {
	ctx := context.Background()
	s := New(Config{})
	l := store.Limit{Name: "bench", Rate: 1_000_000, Period: time.Second}
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "bench-key-" + strconv.Itoa(i)
	}
	var seq atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1) * 7919)
		for pb.Next() {
			i++
			if _, err := s.Take(ctx, store.TakeParams{Key: keys[i%len(keys)], Limit: l, Cost: 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

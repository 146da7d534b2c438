// Package storetest is the conformance suite every store.RateStore backend
// runs: memstore, and the Redis, PostgreSQL and SQLite stores.
//
// Run drives time only through the params' Now field, with fake instants
// from 2030 on, so a backend's own clock never matters and nothing sleeps.
// Every subtest uses limit names and keys unique to the subtest and to the
// Run call, so the suite can share one backend (even a persistent one) with
// other tests and with earlier runs.
package storetest

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

// base is the suite's epoch: midnight, so on every minute and hour boundary
// of the epoch-aligned windows.
var base = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

const us = time.Microsecond

// Run runs the conformance suite against the stores newStore returns. It
// may return a new store per call or the same one every time. The subtests
// run in parallel; Run returns only once all of them have finished, so the
// caller may close a shared store as soon as Run returns.
func Run(t *testing.T, newStore func(t *testing.T) store.RateStore) {
	t.Helper()
	// Names carry a per-run tag so a persistent backend never sees the
	// state an earlier run left behind.
	run := fmt.Sprintf("%016x", rand.Uint64())
	tests := []struct {
		name string
		f    func(*bundle)
	}{
		{"GCRA", testGCRA},
		{"FixedWindow", testFixedWindow},
		{"SlidingWindow", testSlidingWindow},
		{"WeightedCost", testWeightedCost},
		{"PeekNeverChangesState", testPeek},
		{"Reset", testReset},
		{"Errors", testErrors},
		{"MaxDelay", testMaxDelay},
		{"NamesDoNotShareState", testNamesDoNotShareState},
		{"BackwardsClockMintsNothing", testBackwardsClock},
		{"StateFreshUnderItsWriterIsAbsent", testStaleStateAbsent},
		{"Settle", testSettle},
		{"Sync", testSync},
		{"TakeAll", testTakeAll},
		{"TakeAllContention", testTakeAllContention},
		{"ConcurrentGCRA", testConcurrentGCRA},
		{"ConcurrentFixedWindow", testConcurrentFixedWindow},
		{"LongRun", testLongRun},
	}
	// The group returns when its parallel subtests have all finished.
	t.Run("RateStore", func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.f(&bundle{t: t, s: newStore(t), ctx: context.Background(), prefix: "storetest/" + run + "/" + t.Name()})
			})
		}
	})
}

// bundle is one subtest's view of the store.
type bundle struct {
	t      *testing.T
	s      store.RateStore
	ctx    context.Context
	prefix string
}

// limit returns a limit whose name is unique to the subtest and to what.
func (b *bundle) limit(what string, alg store.Algorithm, rate int64, period time.Duration, burst int64) store.Limit {
	return store.Limit{Name: b.prefix + "/" + what, Algorithm: alg, Rate: rate, Period: period, Burst: burst}
}

// key returns a key unique to the subtest.
func (b *bundle) key(what string) string { return b.prefix + "/key/" + what }

func (b *bundle) take(key string, l store.Limit, cost int64, now time.Time) store.Result {
	b.t.Helper()
	res, err := b.s.Take(b.ctx, store.TakeParams{Key: key, Limit: l, Cost: cost, Now: now})
	require.NoError(b.t, err, "take %d of %s at %v", cost, l.Name, now.Sub(base))
	return res
}

func (b *bundle) peek(key string, l store.Limit, now time.Time) store.Result {
	b.t.Helper()
	return b.take(key, l, 0, now)
}

// drain takes 1 unit at now until denied and returns how many were taken.
func (b *bundle) drain(key string, l store.Limit, now time.Time) int64 {
	b.t.Helper()
	var n int64
	for ; n <= 10*l.Max(); n++ {
		if !b.take(key, l, 1, now).Allowed {
			return n
		}
	}
	b.t.Fatalf("%s never denied at %v after %d units", l.Name, now.Sub(base), n)
	return n
}

// algorithms are the three limit kinds, each sized to allow 10 units at once
// and to refill slowly (over an hour), so that steps at one instant are
// easy to reason about.
func (b *bundle) algorithms(what string) []store.Limit {
	return []store.Limit{
		b.limit(what+"/gcra", store.GCRA, 10, time.Hour, 0),
		b.limit(what+"/fixed", store.FixedWindow, 10, time.Hour, 0),
		b.limit(what+"/sliding", store.SlidingWindow, 10, time.Hour, 0),
	}
}

type step struct {
	at         time.Duration
	cost       int64
	allowed    bool
	remaining  int64
	retryAfter time.Duration
	resetAfter time.Duration
}

func (b *bundle) steps(key string, l store.Limit, steps []step) {
	b.t.Helper()
	for i, st := range steps {
		now := at(st.at)
		res := b.take(key, l, st.cost, now)
		want := store.Result{
			Allowed:    st.allowed,
			Limit:      l.Max(),
			Remaining:  st.remaining,
			RetryAfter: st.retryAfter,
			ResetAfter: st.resetAfter,
			At:         now.UnixMicro(),
		}
		require.Equal(b.t, want, res, "step %d: %s cost %d at %v", i, l.Algorithm, st.cost, st.at)
	}
}

func testGCRA(b *bundle) {
	// 10 per second, bursts of 5: one unit per 100ms.
	l := b.limit("l", store.GCRA, 10, time.Second, 5)
	ms := time.Millisecond
	b.steps(b.key("k"), l, []step{
		{at: 0, cost: 0, allowed: true, remaining: 5},
		{at: 0, cost: 1, allowed: true, remaining: 4, resetAfter: 100 * ms},
		{at: 0, cost: 4, allowed: true, remaining: 0, resetAfter: 500 * ms},
		{at: 0, cost: 1, allowed: false, remaining: 0, retryAfter: 100 * ms, resetAfter: 500 * ms},
		{at: 100*ms - us, cost: 1, allowed: false, remaining: 0, retryAfter: us, resetAfter: 400*ms + us},
		{at: 100 * ms, cost: 1, allowed: true, remaining: 0, resetAfter: 500 * ms},
		{at: 350 * ms, cost: 3, allowed: false, remaining: 2, retryAfter: 50 * ms, resetAfter: 250 * ms},
		{at: 350 * ms, cost: 2, allowed: true, remaining: 0, resetAfter: 450 * ms},
		// Idle for a minute banks only the burst.
		{at: time.Minute, cost: 0, allowed: true, remaining: 5},
		{at: time.Minute, cost: 5, allowed: true, remaining: 0, resetAfter: 500 * ms},
		{at: time.Minute, cost: 1, allowed: false, remaining: 0, retryAfter: 100 * ms, resetAfter: 500 * ms},
	})
	// Burst defaults to Rate.
	l2 := b.limit("default-burst", store.GCRA, 3, time.Second, 0)
	require.Equal(b.t, int64(3), b.drain(b.key("k"), l2, at(0)))
	require.Equal(b.t, int64(3), b.peek(b.key("k"), l2, at(0)).Limit)
}

func testFixedWindow(b *bundle) {
	// 10 per minute, windows aligned to the store clock's minutes.
	l := b.limit("l", store.FixedWindow, 10, time.Minute, 0)
	s := time.Second
	b.steps(b.key("k"), l, []step{
		// The first take, 45s into the minute, resets on the minute.
		{at: 45 * s, cost: 0, allowed: true, remaining: 10},
		{at: 45 * s, cost: 4, allowed: true, remaining: 6, resetAfter: 15 * s},
		{at: 50 * s, cost: 6, allowed: true, remaining: 0, resetAfter: 10 * s},
		{at: 50 * s, cost: 1, allowed: false, remaining: 0, retryAfter: 10 * s, resetAfter: 10 * s},
		{at: 60*s - us, cost: 1, allowed: false, remaining: 0, retryAfter: us, resetAfter: us},
		{at: 60 * s, cost: 10, allowed: true, remaining: 0, resetAfter: 60 * s},
		{at: 119 * s, cost: 1, allowed: false, remaining: 0, retryAfter: s, resetAfter: s},
		{at: 120 * s, cost: 3, allowed: true, remaining: 7, resetAfter: 60 * s},
		{at: 10 * time.Minute, cost: 0, allowed: true, remaining: 10},
	})
	// Per window, never more than the limit, at any arrival rate: 5x the
	// limit over ten windows.
	l2 := b.limit("saturated", store.FixedWindow, 10, time.Second, 0)
	perWindow := map[int64]int64{}
	for i := range 500 {
		now := at(time.Duration(i) * 20 * time.Millisecond)
		if b.take(b.key("k"), l2, 1, now).Allowed {
			perWindow[now.Unix()]++
		}
	}
	require.Len(b.t, perWindow, 10)
	for w, n := range perWindow {
		require.Equal(b.t, int64(10), n, "window starting at %d", w)
	}
}

func testSlidingWindow(b *bundle) {
	// 10 per 10s, the previous window weighted by its overlap.
	l := b.limit("l", store.SlidingWindow, 10, 10*time.Second, 0)
	s := time.Second
	b.steps(b.key("k"), l, []step{
		{at: 5 * s, cost: 4, allowed: true, remaining: 6, resetAfter: 15 * s},
		{at: 9 * s, cost: 6, allowed: true, remaining: 0, resetAfter: 11 * s},
		{at: 9 * s, cost: 1, allowed: false, remaining: 0, retryAfter: 2 * s, resetAfter: 11 * s},
		// The previous 10 weigh ceil(10*(10-e)/10) at e seconds in.
		{at: 10 * s, cost: 1, allowed: false, remaining: 0, retryAfter: s, resetAfter: 10 * s},
		{at: 11 * s, cost: 1, allowed: true, remaining: 0, resetAfter: 19 * s},
		{at: 15 * s, cost: 0, allowed: true, remaining: 4, resetAfter: 15 * s},
		{at: 15 * s, cost: 5, allowed: false, remaining: 4, retryAfter: s, resetAfter: 15 * s},
		{at: 15 * s, cost: 4, allowed: true, remaining: 0, resetAfter: 15 * s},
		{at: 40 * s, cost: 0, allowed: true, remaining: 10},
	})
}

func testWeightedCost(b *bundle) {
	for _, l := range []store.Limit{
		b.limit("gcra", store.GCRA, 100, time.Hour, 0),
		b.limit("fixed", store.FixedWindow, 100, time.Hour, 0),
		b.limit("sliding", store.SlidingWindow, 100, time.Hour, 0),
	} {
		key := b.key("k")
		now := at(time.Minute)
		want := int64(100)
		for _, cost := range []int64{1, 7, 3, 30, 2, 50} {
			res := b.take(key, l, cost, now)
			want -= cost
			require.True(b.t, res.Allowed, "%s cost %d", l.Algorithm, cost)
			require.Equal(b.t, want, res.Remaining, "%s: cost %d must consume %d units", l.Algorithm, cost, cost)
		}
		// 7 left: 8 is refused whole, 7 fits exactly.
		require.False(b.t, b.take(key, l, 8, now).Allowed, l.Algorithm.String())
		require.Equal(b.t, int64(7), b.peek(key, l, now).Remaining, l.Algorithm.String())
		res := b.take(key, l, 7, now)
		require.True(b.t, res.Allowed, l.Algorithm.String())
		require.Zero(b.t, res.Remaining, l.Algorithm.String())
		// The whole limit in one request on a fresh key.
		require.True(b.t, b.take(b.key("whole"), l, 100, now).Allowed, l.Algorithm.String())
	}
}

func testPeek(b *bundle) {
	for _, l := range b.algorithms("l") {
		key := b.key("k")
		now := at(30 * time.Second)
		// A peek at an unknown key reports it full and keeps it so.
		for range 3 {
			res := b.peek(key, l, now)
			require.True(b.t, res.Allowed)
			require.Equal(b.t, int64(10), res.Remaining, l.Algorithm.String())
			require.Zero(b.t, res.ResetAfter, l.Algorithm.String())
		}
		require.True(b.t, b.take(key, l, 3, now).Allowed)
		for i := range 5 {
			res := b.peek(key, l, now.Add(time.Duration(i)*us))
			require.Equal(b.t, int64(7), res.Remaining, "%s peek %d", l.Algorithm, i)
		}
		res := b.take(key, l, 1, now)
		require.True(b.t, res.Allowed)
		require.Equal(b.t, int64(6), res.Remaining, l.Algorithm.String())
		// Peeks at an empty key charge nothing either.
		require.True(b.t, b.take(key, l, 6, now).Allowed)
		for range 3 {
			require.Zero(b.t, b.peek(key, l, now).Remaining, l.Algorithm.String())
		}
		require.Equal(b.t, int64(0), b.drain(key, l, now), l.Algorithm.String())
	}
}

func testReset(b *bundle) {
	for _, l := range b.algorithms("l") {
		key, other := b.key("k"), b.key("other")
		now := at(time.Minute)
		require.Equal(b.t, int64(10), b.drain(key, l, now))
		require.True(b.t, b.take(other, l, 4, now).Allowed)
		require.NoError(b.t, b.s.Reset(b.ctx, store.ResetParams{Key: key, Limit: l}))
		res := b.peek(key, l, now)
		require.Equal(b.t, int64(10), res.Remaining, l.Algorithm.String())
		require.Zero(b.t, res.ResetAfter, l.Algorithm.String())
		require.Equal(b.t, int64(10), b.drain(key, l, now), l.Algorithm.String())
		// Only that key was reset.
		require.Equal(b.t, int64(6), b.peek(other, l, now).Remaining, l.Algorithm.String())
		// Resetting an unknown key is not an error.
		require.NoError(b.t, b.s.Reset(b.ctx, store.ResetParams{Key: b.key("never"), Limit: l}))
	}
}

func testErrors(b *bundle) {
	t := b.t
	key := b.key("k")
	now := at(0)
	for _, l := range b.algorithms("l") {
		require.True(t, b.take(key, l, 2, now).Allowed)
		_, err := b.s.Take(b.ctx, store.TakeParams{Key: key, Limit: l, Cost: 11, Now: now})
		require.ErrorIs(t, err, store.ErrCostExceedsLimit, l.Algorithm.String())
		_, err = b.s.Take(b.ctx, store.TakeParams{Key: key, Limit: l, Cost: 11, MaxDelay: time.Hour, Now: now})
		require.ErrorIs(t, err, store.ErrCostExceedsLimit, l.Algorithm.String())
		_, err = b.s.Take(b.ctx, store.TakeParams{Key: key, Limit: l, Cost: -1, Now: now})
		require.ErrorIs(t, err, store.ErrNegativeCost, l.Algorithm.String())
		_, err = b.s.TakeAll(b.ctx, store.TakeAllParams{Now: now, Items: []store.Item{{Key: key, Limit: l, Cost: 1}, {Key: key, Limit: l, Cost: 11}}})
		require.ErrorIs(t, err, store.ErrCostExceedsLimit, l.Algorithm.String())
		_, err = b.s.TakeAll(b.ctx, store.TakeAllParams{Now: now, Items: []store.Item{{Key: key, Limit: l, Cost: 1}, {Key: key, Limit: l, Cost: -1}}})
		require.ErrorIs(t, err, store.ErrNegativeCost, l.Algorithm.String())
		_, err = b.s.Settle(b.ctx, store.SettleParams{Key: key, Limit: l, Reserved: -1, Actual: 1, Now: now})
		require.ErrorIs(t, err, store.ErrNegativeCost, l.Algorithm.String())
		_, err = b.s.Settle(b.ctx, store.SettleParams{Key: key, Limit: l, Reserved: 1, Actual: -1, Now: now})
		require.ErrorIs(t, err, store.ErrNegativeCost, l.Algorithm.String())
		// None of that charged anything.
		require.Equal(t, int64(8), b.peek(key, l, now).Remaining, l.Algorithm.String())
	}

	// A cost above the burst is refused even when the rate is higher.
	l := b.limit("burst", store.GCRA, 100, time.Second, 5)
	_, err := b.s.Take(b.ctx, store.TakeParams{Key: key, Limit: l, Cost: 6, Now: now})
	require.ErrorIs(t, err, store.ErrCostExceedsLimit)
	require.True(t, b.take(key, l, 5, now).Allowed)

	// Empty keys and names.
	good := b.limit("good", store.GCRA, 10, time.Second, 0)
	noName := good
	noName.Name = ""
	for _, tc := range []struct {
		key string
		l   store.Limit
	}{{"", good}, {key, noName}} {
		_, err := b.s.Take(b.ctx, store.TakeParams{Key: tc.key, Limit: tc.l, Cost: 1, Now: now})
		require.ErrorIs(t, err, store.ErrEmptyKey)
		_, err = b.s.TakeAll(b.ctx, store.TakeAllParams{Now: now, Items: []store.Item{{Key: key, Limit: good, Cost: 1}, {Key: tc.key, Limit: tc.l, Cost: 1}}})
		require.ErrorIs(t, err, store.ErrEmptyKey)
		_, err = b.s.Settle(b.ctx, store.SettleParams{Key: tc.key, Limit: tc.l, Reserved: 2, Actual: 1, Now: now})
		require.ErrorIs(t, err, store.ErrEmptyKey)
		_, err = b.s.Sync(b.ctx, store.SyncParams{Key: tc.key, Limit: tc.l, Remaining: 1, Now: now})
		require.ErrorIs(t, err, store.ErrEmptyKey)
		require.ErrorIs(t, b.s.Reset(b.ctx, store.ResetParams{Key: tc.key, Limit: tc.l}), store.ErrEmptyKey)
	}
	// The refused TakeAll charged none of its good items.
	require.Equal(t, int64(10), b.peek(key, good, now).Remaining)

	// Keys and names that break the identifier rule: every operation
	// refuses them as the caller's mistake, before the backend sees them.
	for _, bad := range HostileIDs() {
		badName := good
		badName.Name = bad
		for _, tc := range []struct {
			key string
			l   store.Limit
		}{{bad, good}, {key, badName}} {
			_, err := b.s.Take(b.ctx, store.TakeParams{Key: tc.key, Limit: tc.l, Cost: 1, Now: now})
			require.ErrorIs(t, err, store.ErrInvalidID, "%q", bad)
			_, err = b.s.TakeAll(b.ctx, store.TakeAllParams{Now: now, Items: []store.Item{{Key: key, Limit: good, Cost: 1}, {Key: tc.key, Limit: tc.l, Cost: 1}}})
			require.ErrorIs(t, err, store.ErrInvalidID, "%q", bad)
			_, err = b.s.Settle(b.ctx, store.SettleParams{Key: tc.key, Limit: tc.l, Reserved: 2, Actual: 1, Now: now})
			require.ErrorIs(t, err, store.ErrInvalidID, "%q", bad)
			_, err = b.s.Sync(b.ctx, store.SyncParams{Key: tc.key, Limit: tc.l, Remaining: 1, Now: now})
			require.ErrorIs(t, err, store.ErrInvalidID, "%q", bad)
			require.ErrorIs(t, b.s.Reset(b.ctx, store.ResetParams{Key: tc.key, Limit: tc.l}), store.ErrInvalidID, "%q", bad)
		}
	}
	require.Equal(t, int64(10), b.peek(key, good, now).Remaining)

	// Invalid limits.
	for _, bad := range []store.Limit{
		b.limit("zero-rate", store.GCRA, 0, time.Second, 0),
		b.limit("negative-rate", store.GCRA, -1, time.Second, 0),
		b.limit("zero-period", store.GCRA, 10, 0, 0),
		b.limit("negative-burst", store.GCRA, 10, time.Second, -1),
		b.limit("finer-than-1us", store.GCRA, 2_000_000, time.Second, 0),
		b.limit("window-zero-rate", store.FixedWindow, 0, time.Second, 0),
		b.limit("window-zero-period", store.FixedWindow, 10, 0, 0),
		b.limit("window-sub-us", store.SlidingWindow, 10, 999*time.Nanosecond, 0),
		b.limit("sliding-too-large", store.SlidingWindow, 1<<40, 24*time.Hour, 0),
		b.limit("unknown-algorithm", store.Algorithm(42), 10, time.Second, 0),
	} {
		_, err := b.s.Take(b.ctx, store.TakeParams{Key: key, Limit: bad, Cost: 1, Now: now})
		require.ErrorIs(t, err, store.ErrInvalidLimit, bad.Name)
		_, err = b.s.TakeAll(b.ctx, store.TakeAllParams{Now: now, Items: []store.Item{{Key: key, Limit: good, Cost: 1}, {Key: key, Limit: bad, Cost: 1}}})
		require.ErrorIs(t, err, store.ErrInvalidLimit, bad.Name)
		_, err = b.s.Settle(b.ctx, store.SettleParams{Key: key, Limit: bad, Reserved: 2, Actual: 1, Now: now})
		require.ErrorIs(t, err, store.ErrInvalidLimit, bad.Name)
		_, err = b.s.Sync(b.ctx, store.SyncParams{Key: key, Limit: bad, Remaining: 1, Now: now})
		require.ErrorIs(t, err, store.ErrInvalidLimit, bad.Name)
	}
	require.Equal(t, int64(10), b.peek(key, good, now).Remaining)
	// The same sliding limit is fine as a fixed window.
	big := b.limit("fixed-large", store.FixedWindow, 1<<40, 24*time.Hour, 0)
	require.True(t, b.take(key, big, 1<<39, now).Allowed)
}

func testMaxDelay(b *bundle) {
	t := b.t
	// 10 per second, burst 2: one unit per 100ms.
	l := b.limit("l", store.GCRA, 10, time.Second, 2)
	key := b.key("k")
	now := at(0)
	ms := time.Millisecond
	take := func(maxDelay time.Duration) store.Result {
		t.Helper()
		res, err := b.s.Take(b.ctx, store.TakeParams{Key: key, Limit: l, Cost: 1, MaxDelay: maxDelay, Now: now})
		require.NoError(t, err)
		return res
	}
	require.True(t, b.take(key, l, 2, now).Allowed)
	res := take(0)
	require.False(t, res.Allowed)
	require.Equal(t, 100*ms, res.RetryAfter)
	// Reserve the unit that conforms in 100ms.
	res = take(150 * ms)
	require.True(t, res.Allowed)
	require.Equal(t, 100*ms, res.Delay)
	require.Zero(t, res.RetryAfter)
	// The next would need 200ms: too long, and nothing is charged.
	res = take(150 * ms)
	require.False(t, res.Allowed)
	require.Zero(t, res.Delay)
	require.Equal(t, 200*ms, res.RetryAfter)
	res = take(200 * ms)
	require.True(t, res.Allowed)
	require.Equal(t, 200*ms, res.Delay)
	// Both reservations advanced the key: at +300ms nothing conforms yet.
	require.False(t, b.take(key, l, 1, at(300*ms-us)).Allowed)
	require.True(t, b.take(key, l, 1, at(300*ms)).Allowed)
	// A request that conforms now has no delay.
	res, err := b.s.Take(b.ctx, store.TakeParams{Key: b.key("fresh"), Limit: l, Cost: 1, MaxDelay: time.Second, Now: now})
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.Zero(t, res.Delay)

	// Windows ignore MaxDelay: a full window stays denied.
	w := b.limit("window", store.FixedWindow, 2, time.Minute, 0)
	require.True(t, b.take(key, w, 2, now).Allowed)
	res, err = b.s.Take(b.ctx, store.TakeParams{Key: key, Limit: w, Cost: 1, MaxDelay: time.Hour, Now: now})
	require.NoError(t, err)
	require.False(t, res.Allowed)
	require.Zero(t, res.Delay)
}

func testNamesDoNotShareState(b *bundle) {
	for _, alg := range []store.Algorithm{store.GCRA, store.FixedWindow, store.SlidingWindow} {
		l1 := b.limit("one-"+alg.String(), alg, 5, time.Hour, 0)
		l2 := b.limit("two-"+alg.String(), alg, 5, time.Hour, 0)
		key := b.key("shared")
		now := at(time.Minute)
		require.Equal(b.t, int64(5), b.drain(key, l1, now))
		require.Equal(b.t, int64(5), b.peek(key, l2, now).Remaining, alg.String())
		require.Equal(b.t, int64(5), b.drain(key, l2, now), alg.String())
		// Nor do keys under one name.
		require.Equal(b.t, int64(5), b.peek(b.key("another"), l1, now).Remaining, alg.String())
	}
}

func testBackwardsClock(b *bundle) {
	for _, l := range b.algorithms("l") {
		key := b.key("k")
		T := at(30 * time.Minute)
		require.Equal(b.t, int64(10), b.drain(key, l, T), l.Algorithm.String())
		retryAtT := b.take(key, l, 1, T).RetryAfter
		for _, back := range []time.Duration{us, time.Second, 10 * time.Second, time.Minute, time.Hour, 24 * time.Hour} {
			now := T.Add(-back)
			for range 3 {
				res := b.take(key, l, 1, now)
				require.False(b.t, res.Allowed, "%s %v back", l.Algorithm, back)
				require.Zero(b.t, res.Remaining, "%s %v back", l.Algorithm, back)
				require.GreaterOrEqual(b.t, res.RetryAfter, retryAtT, "%s %v back", l.Algorithm, back)
			}
		}
		// Nothing was charged or minted: still exhausted at T.
		require.False(b.t, b.take(key, l, 1, T).Allowed, l.Algorithm.String())
		require.Equal(b.t, retryAtT, b.take(key, l, 1, T).RetryAfter, l.Algorithm.String())

		// A half-used key never shows more at an earlier instant.
		key2 := b.key("half")
		require.True(b.t, b.take(key2, l, 6, T).Allowed)
		for _, back := range []time.Duration{us, time.Minute, time.Hour} {
			res := b.take(key2, l, 5, T.Add(-back))
			require.False(b.t, res.Allowed, "%s %v back", l.Algorithm, back)
			require.LessOrEqual(b.t, res.Remaining, int64(4), "%s %v back", l.Algorithm, back)
		}
		require.Equal(b.t, int64(4), b.drain(key2, l, T), l.Algorithm.String())
	}
}

// testStaleStateAbsent checks that a key's state is absent once it is
// fresh under the limit that wrote it (store.Live): read under another
// algorithm of the same name (a policy reload), it is a fresh key on every
// backend, whether or not a sweep, Cleanup or Redis expiry removed it yet.
func testStaleStateAbsent(b *bundle) {
	t := b.t
	ms := time.Millisecond
	// 4 per 50ms window, and, under the same name, GCRA one per 50ms.
	fixed := b.limit("reloaded", store.FixedWindow, 4, 50*ms, 0)
	sliding := b.limit("reloaded", store.SlidingWindow, 4, 50*ms, 0)
	gcra := b.limit("reloaded", store.GCRA, 1, 50*ms, 1)

	// The window of [0, 50ms) counts 2. At 70ms it has ended: the state
	// is fresh under the fixed window that wrote it. A GCRA take then
	// writes a TAT of 120ms, past the end of the window holding 70ms
	// (100ms), which a fixed window reads as a window ending at 120ms:
	// its count must be the GCRA's (none), not the stale 2.
	key := b.key("fixed-gcra-fixed")
	require.True(t, b.take(key, fixed, 2, at(10*ms)).Allowed)
	require.True(t, b.take(key, gcra, 1, at(70*ms)).Allowed)
	res := b.take(key, fixed, 3, at(70*ms))
	require.True(t, res.Allowed, "fixed cost 3 after the window counting 2 ended and a GCRA take: %+v", res)
	require.Equal(t, int64(1), res.Remaining)

	// The same through TakeAll.
	key = b.key("fixed-gcra-takeall")
	require.True(t, b.take(key, fixed, 2, at(10*ms)).Allowed)
	require.True(t, b.take(key, gcra, 1, at(70*ms)).Allowed)
	all, err := b.s.TakeAll(b.ctx, store.TakeAllParams{Items: []store.Item{{Key: key, Limit: fixed, Cost: 3}}, Now: at(70 * ms)})
	require.NoError(t, err)
	require.True(t, all.Allowed, "take all: %+v", all)
	require.Equal(t, int64(1), all.Results[0].Remaining)

	// A fixed window that counted 4 has ended at 50ms; a sliding window of
	// the same name reading it at 60ms must not weigh it as its previous
	// window's count.
	key = b.key("fixed-sliding")
	require.True(t, b.take(key, fixed, 4, at(10*ms)).Allowed)
	res = b.take(key, sliding, 1, at(60*ms))
	require.True(t, res.Allowed, "sliding after the fixed window ended: %+v", res)
	require.Equal(t, int64(3), res.Remaining)

	// And a Settle charging the sliding window there.
	key = b.key("fixed-sliding-settle")
	require.True(t, b.take(key, fixed, 4, at(10*ms)).Allowed)
	res, err = b.s.Settle(b.ctx, store.SettleParams{Key: key, Limit: sliding, Reserved: 0, Actual: 1,
		ReservedAt: at(60 * ms).UnixMicro(), Now: at(60 * ms)})
	require.NoError(t, err)
	require.Equal(t, int64(3), res.Remaining, "settle on the sliding window after the fixed window ended")

	// Before its writer's fresh time the state is there: one microsecond
	// before the end of the window that counted 4, a sliding window reads
	// it as its own current window.
	key = b.key("fixed-sliding-live")
	require.True(t, b.take(key, fixed, 4, at(10*ms)).Allowed)
	res = b.take(key, sliding, 1, at(50*ms-us))
	require.False(t, res.Allowed, "the window counting 4 is still live: %+v", res)
}

func testSettle(b *bundle) {
	t := b.t
	now := at(10 * time.Minute)
	for _, alg := range []store.Algorithm{store.GCRA, store.FixedWindow, store.SlidingWindow} {
		// 20 per hour: nothing refills between the steps.
		l := b.limit(alg.String(), alg, 20, time.Hour, 0)
		settle := func(key string, reserved, actual int64) store.Result {
			t.Helper()
			res := b.take(key, l, reserved, now)
			require.True(t, res.Allowed, "%s reserve %d", alg, reserved)
			require.Equal(t, 20-reserved, res.Remaining, alg.String())
			sr, err := b.s.Settle(b.ctx, store.SettleParams{Key: key, Limit: l, Reserved: reserved, Actual: actual, ReservedAt: res.At, Now: now.Add(time.Second)})
			require.NoError(t, err, alg.String())
			return sr
		}
		// Reserve 10, actual 3: 7 back.
		res := settle(b.key("refund"), 10, 3)
		require.Equal(t, int64(17), res.Remaining, alg.String())
		require.Equal(t, l.Max(), res.Limit, alg.String())
		require.Equal(t, int64(17), b.peek(b.key("refund"), l, now.Add(time.Second)).Remaining, alg.String())
		require.Equal(t, int64(17), b.drain(b.key("refund"), l, now.Add(time.Second)), alg.String())
		// Reserve 10, actual 15: 5 more charged.
		res = settle(b.key("charge"), 10, 15)
		require.Equal(t, int64(5), res.Remaining, alg.String())
		require.Equal(t, int64(5), b.drain(b.key("charge"), l, now.Add(time.Second)), alg.String())
		// Actual equal to the reservation changes nothing.
		res = settle(b.key("exact"), 10, 10)
		require.Equal(t, int64(10), res.Remaining, alg.String())
		// A refund never raises a key above its limit.
		res = settle(b.key("refund-all"), 5, 0)
		require.Equal(t, int64(20), res.Remaining, alg.String())
		sr, err := b.s.Settle(b.ctx, store.SettleParams{Key: b.key("refund-all"), Limit: l, Reserved: 15, Actual: 0, ReservedAt: now.UnixMicro(), Now: now.Add(time.Second)})
		require.NoError(t, err)
		require.Equal(t, int64(20), sr.Remaining, alg.String())
		require.Equal(t, int64(20), b.drain(b.key("refund-all"), l, now.Add(time.Second)), alg.String())
		// A charge beyond the limit is debt: nothing conforms, and
		// remaining reports 0, not a negative number.
		res = settle(b.key("debt"), 20, 25)
		require.Zero(t, res.Remaining, alg.String())
		require.False(t, b.take(b.key("debt"), l, 1, now.Add(time.Second)).Allowed, alg.String())
		require.Zero(t, b.take(b.key("debt"), l, 1, now.Add(time.Second)).Remaining, alg.String())
		// A charge too large to count is refused and changes nothing: it
		// must never wrap around into budget.
		res = b.take(b.key("absurd"), l, 5, now)
		_, err = b.s.Settle(b.ctx, store.SettleParams{Key: b.key("absurd"), Limit: l, Reserved: 5, Actual: math.MaxInt64, ReservedAt: res.At, Now: now})
		require.ErrorIs(t, err, store.ErrCostExceedsLimit, alg.String())
		require.Equal(t, int64(15), b.peek(b.key("absurd"), l, now).Remaining, alg.String())
	}
	// For GCRA the debt is real time: 5 units over at 20 per hour is 15
	// minutes more before the next unit conforms.
	l := b.limit("gcra-debt", store.GCRA, 20, time.Hour, 0)
	key := b.key("debt")
	res := b.take(key, l, 20, now)
	_, err := b.s.Settle(b.ctx, store.SettleParams{Key: key, Limit: l, Reserved: 20, Actual: 25, ReservedAt: res.At, Now: now})
	require.NoError(t, err)
	require.Equal(t, 18*time.Minute, b.take(key, l, 1, now).RetryAfter)
}

func testSync(b *bundle) {
	t := b.t
	now := at(10*time.Minute + 500*time.Millisecond)
	for _, l := range []store.Limit{
		b.limit("gcra", store.GCRA, 40, time.Second, 40),
		b.limit("fixed", store.FixedWindow, 40, time.Second, 0),
		b.limit("sliding", store.SlidingWindow, 40, time.Minute, 0),
	} {
		alg := l.Algorithm.String()
		key := b.key(alg)
		// The provider says 2 remain, though we believed the key full.
		res, err := b.s.Sync(b.ctx, store.SyncParams{Key: key, Limit: l, Remaining: 2, Now: now})
		require.NoError(t, err, alg)
		require.Equal(t, int64(2), res.Remaining, alg)
		require.Equal(t, int64(2), b.drain(key, l, now), alg)

		// And the other way: after using 30, the provider says 35 remain.
		key2 := b.key(alg + "-up")
		require.True(t, b.take(key2, l, 30, now).Allowed)
		res, err = b.s.Sync(b.ctx, store.SyncParams{Key: key2, Limit: l, Remaining: 35, Now: now})
		require.NoError(t, err, alg)
		require.Equal(t, int64(35), res.Remaining, alg)
		require.Equal(t, int64(35), b.drain(key2, l, now), alg)

		// Reports beyond the limit clamp to it.
		res, err = b.s.Sync(b.ctx, store.SyncParams{Key: b.key(alg + "-clamp"), Limit: l, Remaining: 1000, Now: now})
		require.NoError(t, err, alg)
		require.Equal(t, int64(40), res.Remaining, alg)
	}

	// Remaining 0 with a Retry-After of 30s pauses the key until then.
	l := b.limit("gcra-pause", store.GCRA, 40, time.Second, 40)
	key := b.key("pause")
	res, err := b.s.Sync(b.ctx, store.SyncParams{Key: key, Limit: l, Remaining: 0, ResetAfter: 30 * time.Second, Now: now})
	require.NoError(t, err)
	require.Zero(t, res.Remaining)
	res = b.take(key, l, 1, now)
	require.False(t, res.Allowed)
	require.Equal(t, 30*time.Second, res.RetryAfter)
	require.False(t, b.take(key, l, 1, now.Add(10*time.Second)).Allowed)
	require.False(t, b.take(key, l, 1, now.Add(30*time.Second-us)).Allowed)
	require.True(t, b.take(key, l, 1, now.Add(30*time.Second)).Allowed)

	// A fixed window pauses to the first window boundary at or after the
	// reset: 30s after 10m00.5s is within the window ending at 10m31s.
	w := b.limit("fixed-pause", store.FixedWindow, 40, time.Second, 0)
	_, err = b.s.Sync(b.ctx, store.SyncParams{Key: key, Limit: w, Remaining: 0, ResetAfter: 30 * time.Second, Now: now})
	require.NoError(t, err)
	res = b.take(key, w, 1, now)
	require.False(t, res.Allowed)
	require.GreaterOrEqual(t, res.RetryAfter, 30*time.Second)
	require.LessOrEqual(t, res.RetryAfter, 31*time.Second)
	require.False(t, b.take(key, w, 1, now.Add(res.RetryAfter-us)).Allowed)
	require.Equal(t, int64(40), b.drain(key, w, now.Add(res.RetryAfter)))
}

func testTakeAll(b *bundle) {
	t := b.t
	now := at(20 * time.Minute)
	key := b.key("k")
	a := b.limit("a", store.GCRA, 10, time.Hour, 0)
	w := b.limit("b", store.FixedWindow, 10, time.Hour, 0)
	c := b.limit("c", store.SlidingWindow, 3, time.Hour, 0)
	items := []store.Item{{Key: key, Limit: a, Cost: 1}, {Key: key, Limit: w, Cost: 2}, {Key: key, Limit: c, Cost: 1}}
	takeAll := func(now time.Time) store.AllResult {
		t.Helper()
		res, err := b.s.TakeAll(b.ctx, store.TakeAllParams{Items: items, Now: now})
		require.NoError(t, err)
		require.Len(t, res.Results, len(items))
		return res
	}

	res := takeAll(now)
	require.True(t, res.Allowed)
	for i, r := range res.Results {
		require.True(t, r.Allowed, "item %d", i)
		require.Equal(t, now.UnixMicro(), r.At, "item %d", i)
	}
	require.Equal(t, []int64{9, 8, 2}, []int64{res.Results[0].Remaining, res.Results[1].Remaining, res.Results[2].Remaining})

	// Exhaust the third limit on its own.
	require.Equal(t, int64(2), b.drain(key, c, now))
	res = takeAll(now)
	require.False(t, res.Allowed)
	require.True(t, res.Results[0].Allowed, "the first limit would have allowed it")
	require.True(t, res.Results[1].Allowed, "the second limit would have allowed it")
	require.False(t, res.Results[2].Allowed, "the third limit refused")
	require.Positive(t, res.Results[2].RetryAfter)
	// Nothing was taken from the first two.
	require.Equal(t, int64(9), b.peek(key, a, now).Remaining)
	require.Equal(t, int64(8), b.peek(key, w, now).Remaining)
	require.Zero(t, b.peek(key, c, now).Remaining)
	for range 5 {
		require.False(t, takeAll(now).Allowed)
	}
	require.Equal(t, int64(9), b.drain(key, a, now))
	require.Equal(t, int64(8), b.drain(key, w, now))

	// Two items on the same limit and key see each other: 2 + 2 of a
	// fresh limit of 3 is refused whole.
	d := b.limit("d", store.GCRA, 3, time.Hour, 0)
	same := []store.Item{{Key: b.key("same"), Limit: d, Cost: 2}, {Key: b.key("same"), Limit: d, Cost: 2}}
	r2, err := b.s.TakeAll(b.ctx, store.TakeAllParams{Items: same, Now: now})
	require.NoError(t, err)
	require.False(t, r2.Allowed)
	require.Equal(t, int64(3), b.peek(b.key("same"), d, now).Remaining)
	same[1].Cost = 1
	r2, err = b.s.TakeAll(b.ctx, store.TakeAllParams{Items: same, Now: now})
	require.NoError(t, err)
	require.True(t, r2.Allowed)
	require.Zero(t, b.peek(b.key("same"), d, now).Remaining)

	// Items on different keys of one limit are independent.
	e := b.limit("e", store.FixedWindow, 5, time.Hour, 0)
	r2, err = b.s.TakeAll(b.ctx, store.TakeAllParams{Now: now, Items: []store.Item{{Key: b.key("e1"), Limit: e, Cost: 5}, {Key: b.key("e2"), Limit: e, Cost: 5}}})
	require.NoError(t, err)
	require.True(t, r2.Allowed)

	// Nothing to take is trivially allowed.
	r2, err = b.s.TakeAll(b.ctx, store.TakeAllParams{Now: now})
	require.NoError(t, err)
	require.True(t, r2.Allowed)
	require.Empty(t, r2.Results)
}

// testTakeAllContention proves TakeAll all-or-nothing under contention:
// goroutines take from three limits at once (and some from the first one
// alone) until the limits run dry; afterwards each limit must have been
// charged exactly the costs of the admitted requests that touched it.
func testTakeAllContention(b *bundle) {
	t := b.t
	// Budgets that do not refill within the run (per hour; the run spans
	// microseconds of simulated time), of each algorithm.
	limits := []store.Limit{
		b.limit("a", store.GCRA, 400, time.Hour, 0),
		b.limit("b", store.FixedWindow, 300, time.Hour, 0),
		b.limit("c", store.SlidingWindow, 200, time.Hour, 0),
	}
	key := b.key("k")
	const (
		groups  = 32
		singles = 8 // of the groups, how many take from limit a alone
		rounds  = 60
	)
	var (
		clock   atomic.Int64 // simulated microseconds since base
		charged [3]atomic.Int64
		allowed atomic.Int64
		denied  atomic.Int64
		wg      sync.WaitGroup
		errs    = make(chan error, groups)
	)
	start := make(chan struct{})
	for g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 99))
			<-start
			for i := range rounds {
				now := at(time.Duration(clock.Add(1+rng.Int64N(3))) * us)
				if i%2 == 0 {
					runtime.Gosched()
				}
				if g < singles {
					cost := 1 + rng.Int64N(3)
					res, err := b.s.Take(b.ctx, store.TakeParams{Key: key, Limit: limits[0], Cost: cost, Now: now})
					if err != nil {
						errs <- err
						return
					}
					if res.Allowed {
						charged[0].Add(cost)
					}
					continue
				}
				items := make([]store.Item, 3)
				for j := range items {
					items[j] = store.Item{Key: key, Limit: limits[j], Cost: 1 + rng.Int64N(3)}
				}
				res, err := b.s.TakeAll(b.ctx, store.TakeAllParams{Items: items, Now: now})
				if err != nil {
					errs <- err
					return
				}
				if len(res.Results) != 3 {
					errs <- fmt.Errorf("TakeAll returned %d results for 3 items", len(res.Results))
					return
				}
				refused := 0
				for _, r := range res.Results {
					if !r.Allowed {
						refused++
					}
				}
				if res.Allowed != (refused == 0) {
					errs <- fmt.Errorf("TakeAll allowed=%v with %d items refusing", res.Allowed, refused)
					return
				}
				if !res.Allowed {
					denied.Add(1)
					continue
				}
				allowed.Add(1)
				for j, it := range items {
					charged[j].Add(it.Cost)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Positive(t, allowed.Load(), "no TakeAll was admitted")
	require.Positive(t, denied.Load(), "no TakeAll was denied: the limits never ran dry")

	end := at(time.Duration(clock.Load()) * us)
	for i, l := range limits {
		got := l.Max() - b.peek(key, l, end).Remaining
		require.Equal(t, charged[i].Load(), got,
			"%s: charged %d units, the admitted requests touching it cost %d", l.Name, got, charged[i].Load())
	}
}

// admission is one admitted take: its instant (Unix µs) and cost.
type admission struct{ at, cost int64 }

// hammer runs goroutines taking from one key of l, each advancing a shared
// simulated clock by a few microseconds before every take, so that
// concurrent requests reach the store with slightly out-of-order instants.
// It returns the admitted takes and their results.
func hammer(b *bundle, l store.Limit, key string, goroutines, rounds int, maxCost int64) ([]admission, []store.Result, int) {
	t := b.t
	var (
		clock  atomic.Int64
		mu     sync.Mutex
		admits []admission
		res    []store.Result
		denied int
		wg     sync.WaitGroup
		errs   = make(chan error, goroutines)
	)
	start := make(chan struct{})
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			var mine []admission
			var mineRes []store.Result
			n := 0
			<-start
			for i := range rounds {
				now := at(time.Duration(clock.Add(1+rng.Int64N(60))) * us)
				cost := 1 + rng.Int64N(maxCost)
				if i%2 == 0 {
					// Let others overtake between reading the clock and
					// reaching the store: instants arrive out of order.
					runtime.Gosched()
				}
				r, err := b.s.Take(b.ctx, store.TakeParams{Key: key, Limit: l, Cost: cost, Now: now})
				if err != nil {
					errs <- err
					return
				}
				if r.Remaining < 0 || r.Remaining > l.Max() || (r.RetryAfter > 0) == r.Allowed || r.At != now.UnixMicro() {
					errs <- fmt.Errorf("inconsistent result %+v for cost %d at %d", r, cost, now.UnixMicro())
					return
				}
				if r.Allowed {
					mine = append(mine, admission{now.UnixMicro(), cost})
					mineRes = append(mineRes, r)
				} else {
					n++
				}
			}
			mu.Lock()
			admits = append(admits, mine...)
			res = append(res, mineRes...)
			denied += n
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return admits, res, denied
}

// testConcurrentGCRA: 64 goroutines on one key must never be admitted more
// than burst + rate*t over any interval of length t. With the rounded-up
// emission interval T, in exact integers: for admitted instants t_i <= t_j,
// the cost admitted in [t_i, t_j] is at most Burst + floor((t_j-t_i)/T).
// Requests reach the store slightly out of order, which is a clock running
// backwards: that too must mint nothing, so the bound holds on the sorted
// admitted instants.
func testConcurrentGCRA(b *bundle) {
	// 1000 per second (T = 1ms), burst 20; the goroutines offer about 30
	// times that.
	l := b.limit("l", store.GCRA, 1000, time.Second, 20)
	T := l.GCRA().Interval()
	admits, _, denied := hammer(b, l, b.key("k"), 64, 150, 3)
	require.Positive(b.t, denied, "never denied: the test offered too little")
	require.NotEmpty(b.t, admits)

	slices.SortFunc(admits, func(x, y admission) int { return cmp.Compare(x.at, y.at) })
	// Collapse equal instants so that every interval starts at the first
	// admission of an instant and ends at the last.
	var times, costs []int64
	for _, a := range admits {
		if n := len(times); n > 0 && times[n-1] == a.at {
			costs[n-1] += a.cost
			continue
		}
		times = append(times, a.at)
		costs = append(costs, a.cost)
	}
	for i := range times {
		var sum int64
		for j := i; j < len(times); j++ {
			sum += costs[j]
			bound := l.Max() + (times[j]-times[i])/T
			if sum > bound {
				b.t.Fatalf("over-admission: %d units admitted in [%d, %d] (%dus), at most %d allowed",
					sum, times[i], times[j], times[j]-times[i], bound)
			}
		}
	}
}

// testConcurrentFixedWindow: 64 goroutines on one fixed-window key must
// never be admitted more than the limit in any aligned window. A request
// that reaches the store stamped with an earlier instant than one already
// decided (a clock running backwards) may be charged to the later window
// the key has moved on to, never to an earlier one: each admission's window
// is read from its result (At + ResetAfter, the end of the window it was
// charged to), checked to be aligned and not earlier than its own instant's
// window, and the windows' totals checked against the limit.
func testConcurrentFixedWindow(b *bundle) {
	l := b.limit("l", store.FixedWindow, 5, 10*time.Millisecond, 0)
	w := l.Period.Microseconds()
	admits, results, denied := hammer(b, l, b.key("k"), 64, 150, 2)
	require.Positive(b.t, denied, "never denied: the test offered too little")
	perWindow := map[int64]int64{}
	for i, a := range admits {
		end := results[i].At + results[i].ResetAfter.Microseconds()
		require.Zero(b.t, end%w, "admission at %d charged to window ending %d: not aligned", a.at, end)
		require.Greater(b.t, end, a.at, "admission at %d charged to a window that ended at %d", a.at, end)
		perWindow[end] += a.cost
	}
	full := 0
	for end, n := range perWindow {
		require.LessOrEqual(b.t, n, l.Rate, "window ending %d admitted %d", end, n)
		if n == l.Rate {
			full++
		}
	}
	require.Positive(b.t, full, "no window was ever full: the test offered too little")
}

// testLongRun checks the long-run efficiency bound: under saturation (5x
// the allowed rate) for t = 5 simulated minutes, the units admitted must
// satisfy 0.999*ideal <= admitted <= ideal + 1, where
//
//	ideal = burst + rate*t
//
// (the burst at the start, then the rate).
func testLongRun(b *bundle) {
	const span = 5 * time.Minute
	for _, tc := range []struct {
		name  string
		l     store.Limit
		cost  int64
		every time.Duration // arrival interval: 5x the allowed rate
	}{
		// 5 per second, burst 10: 5x is one request each 40ms.
		{"gcra", b.limit("gcra", store.GCRA, 5, time.Second, 10), 1, 40 * time.Millisecond},
		// 20 units per second in requests of 4 (5 requests a second),
		// burst 20: 5x is one request each 40ms.
		{"weighted", b.limit("weighted", store.GCRA, 20, time.Second, 20), 4, 40 * time.Millisecond},
	} {
		key := b.key(tc.name)
		var admitted int64
		for d := time.Duration(0); d <= span; d += tc.every {
			if b.take(key, tc.l, tc.cost, at(d)).Allowed {
				admitted += tc.cost
			}
		}
		g := tc.l.GCRA()
		ideal := float64(g.Burst) + float64(g.Rate)*span.Seconds()/g.Period.Seconds()
		require.GreaterOrEqual(b.t, float64(admitted), 0.999*ideal, "%s: admitted %d of ideal %.0f", tc.name, admitted, ideal)
		require.LessOrEqual(b.t, float64(admitted), ideal+1, "%s: admitted %d of ideal %.0f", tc.name, admitted, ideal)
	}
}

// HostileIDs returns identifiers that break the identifier rule
// (store.CheckID): NUL, invalid UTF-8, an encoded surrogate, C0, DEL and C1
// control characters, and a key one byte over store.MaxIDBytes.
func HostileIDs() []string {
	return []string{
		"a\x00b", "a\xffb", "\xed\xa0\x80", "a\x01", "a\nb", "a\x7f", "a\u0085",
		strings.Repeat("k", store.MaxIDBytes+1),
	}
}

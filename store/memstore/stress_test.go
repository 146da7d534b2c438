package memstore

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

// TestStressMixedOperations runs every operation of the store at once on a
// few hot GCRA keys of one shard: lock-free Take and TakePrepared, TakeAll,
// reservations settled below their cost, Syncs that report the key used up,
// Resets, Sweeps, window keys and a flood of short-lived keys that make the
// shard sweep and rebuild its index. For each hot key the net admitted cost
// never exceeds burst x (1 + resets) + rate x elapsed (a Sync that reports
// nothing left only takes budget away), and afterwards the table holds its
// invariants (checkTable). The loops run until every operation has run
// many times, every hot key has been reset, and the keys have admitted and
// denied many takes.
func TestStressMixedOperations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(Config{Shards: 1, MaxKeys: 1 << 14})
	hot := store.Limit{Name: "hot", Rate: 5000, Period: time.Second, Burst: 10}
	hp, err := store.Prepare(hot)
	require.NoError(t, err)
	brief := store.Limit{Name: "brief", Rate: 1000, Period: time.Second, Burst: 1}
	win := store.Limit{Name: "win", Algorithm: store.SlidingWindow, Rate: 100, Period: 10 * time.Millisecond}
	const keys = 3
	var admitted, resets [keys]atomic.Int64
	var denied, decided atomic.Int64 // decided: by the Take and TakePrepared loops
	key := func(i int) string { return "hot" + strconv.Itoa(i%keys) }

	h := newHammer()
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	for range 3 {
		h.loop(func(i int) {
			var res store.Result
			must(s.TakePrepared(key(i), hp, 1, &res))
			decided.Add(1)
			if res.Allowed {
				admitted[i%keys].Add(1)
			} else {
				denied.Add(1)
			}
		})
	}
	h.loop(func(i int) {
		res, err := s.Take(ctx, store.TakeParams{Key: key(i), Limit: hot, Cost: 1})
		must(err)
		decided.Add(1)
		if res.Allowed {
			admitted[i%keys].Add(1)
		} else {
			denied.Add(1)
		}
	})
	h.loop(func(i int) {
		// A reservation of 2 settled at 1.
		res, err := s.Take(ctx, store.TakeParams{Key: key(i), Limit: hot, Cost: 2})
		must(err)
		if !res.Allowed {
			return
		}
		admitted[i%keys].Add(2)
		_, err = s.Settle(ctx, store.SettleParams{Key: key(i), Limit: hot, Reserved: 2, Actual: 1, ReservedAt: res.At})
		must(err)
		admitted[i%keys].Add(-1)
	})
	h.loop(func(i int) {
		a, b := i%keys, (i+1)%keys
		res, err := s.TakeAll(ctx, store.TakeAllParams{Items: []store.Item{
			{Key: key(a), Limit: hot, Cost: 1},
			{Key: key(b), Limit: hot, Cost: 1},
			{Key: "w" + strconv.Itoa(i%7), Limit: win, Cost: 1},
		}})
		must(err)
		if res.Allowed {
			admitted[a].Add(1)
			admitted[b].Add(1)
		}
	})
	// Syncs and Resets are rare: one Sync per 100 takes decided (paced by
	// the takes, not by the clock), and a Reset every 10th.
	h.loop(func(i int) {
		for decided.Load() < int64(i)*100 {
			select {
			case <-h.stop:
				return
			default:
				runtime.Gosched()
			}
		}
		_, err := s.Sync(ctx, store.SyncParams{Key: key(i), Limit: hot, Remaining: 0, ResetAfter: time.Millisecond})
		must(err)
		if i%10 == 0 {
			// Count the reset first: a take it frees may be counted
			// before the reset returns.
			resets[i%keys].Add(1)
			must(s.Reset(ctx, store.ResetParams{Key: key(i), Limit: hot}))
		}
	})
	flooded := h.flood(s, brief, 300)

	const want = 2000
	total := func() int64 {
		n := int64(0)
		for k := range keys {
			n += admitted[k].Load()
		}
		return n
	}
	everyKeyReset := func() bool {
		for k := range keys {
			if resets[k].Load() == 0 {
				return false
			}
		}
		return true
	}
	elapsed := h.run(t, 100, func() bool {
		return total() >= want && denied.Load() >= want && everyKeyReset() && flooded.Load() >= 3*300
	}, func() string {
		var r [keys]int64
		for k := range keys {
			r[k] = resets[k].Load()
		}
		return fmt.Sprintf("admitted %d, denied %d (want >= %d each), resets per key %v (want >= 1 each), flood takes %d (want >= %d)",
			total(), denied.Load(), want, r, flooded.Load(), 3*300)
	})
	for k := range keys {
		got := admitted[k].Load()
		bound := gcraBound(hot, 1+resets[k].Load(), elapsed)
		require.LessOrEqual(t, got, bound, "key %d: admitted %d in %v with %d resets", k, got, elapsed, resets[k].Load())
	}
	checkTable(t, s)
}

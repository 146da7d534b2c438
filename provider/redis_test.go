package provider

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/testenv"
	"github.com/sluicerl/sluice/lease"
	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/redisstore"
)

// redisStores returns n stores on the Redis at testenv.RedisURL, each on a
// client of its own (n processes of a fleet), sharing a prefix of this
// test's own that is deleted when the test ends.
func redisStores(t *testing.T, n int) []*redisstore.Store {
	t.Helper()
	url := testenv.RedisURL()
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	ctx := context.Background()
	prefix := fmt.Sprintf("provider-%016x:", rand.Uint64())
	var out []*redisstore.Store
	for i := range n {
		c := redis.NewClient(opts)
		t.Cleanup(func() { _ = c.Close() })
		if i == 0 {
			if err := c.Ping(ctx).Err(); err != nil {
				testenv.Unreachable(t, "Redis at "+url, err)
			}
			t.Cleanup(func() {
				iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
				for iter.Next(ctx) {
					c.Del(ctx, iter.Val())
				}
			})
		}
		s, err := redisstore.New(c, redisstore.Config{Prefix: prefix})
		require.NoError(t, err)
		out = append(out, s)
	}
	return out
}

// TestT1LuaAtomicity is seed 004's T1 on real Redis: many concurrent
// reservations against one shop's cost bucket, from two processes, never
// spend more than the bucket holds plus its refill, and the bucket never
// goes negative. The store time is fixed, so the refill is zero and the
// bound is exact: every reservation that fits is admitted, none more.
func TestT1LuaAtomicity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := redisStores(t, 2)
	s, err := Embedded()
	require.NoError(t, err)
	p, _ := s.Get("shopify-graphql")
	clk := &fixedNow{t: t0}
	var rts []*Runtime
	for _, st := range stores {
		rt, err := NewRuntime(Config{Profile: p, Store: st, Now: clk.now})
		require.NoError(t, err)
		rts = append(rts, rt)
	}
	const workers, each, cost = 32, 12, 7 // 384 reservations of 7 against 1000 points
	var mu sync.Mutex
	admitted, refused := 0, 0
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rt := rts[w%len(rts)]
			for range each {
				tk, err := rt.Reserve(ctx, Call{Key: "Atomic-Shop", Cost: cost})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if tk.OK {
					admitted++
				} else {
					refused++
					if tk.Reason != "points" || tk.Delay <= 0 {
						t.Errorf("refusal %q after %s: want points with a delay", tk.Reason, tk.Delay)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, workers*each, admitted+refused)
	require.Equal(t, 1000/cost, admitted, "capacity 1000, no refill at a fixed time: exactly floor(1000/7) fit")
	left := peek(t, rts[0], 0, "atomic-shop.myshopify.com", clk.t)
	require.Equal(t, int64(1000-admitted*cost), left)
	require.GreaterOrEqual(t, left, int64(0), "never negative")

	// With the store's own clock (Redis TIME): what was admitted between
	// two reads of the store clock is at most capacity + refill.
	rdb := stores[0]
	free, err := NewRuntime(Config{Profile: p, Store: rdb})
	require.NoError(t, err)
	c := redis.NewClient(mustOpts(t))
	defer c.Close()
	start, err := c.Time(ctx).Result()
	require.NoError(t, err)
	var spent int64
	var wg2 sync.WaitGroup
	for range 16 {
		wg2.Go(func() {
			for range 40 {
				tk, err := free.Reserve(ctx, Call{Key: "atomic-shop-2", Cost: 25})
				if err != nil {
					t.Error(err)
					return
				}
				if tk.OK {
					mu.Lock()
					spent += 25
					mu.Unlock()
				}
			}
		})
	}
	wg2.Wait()
	end, err := c.Time(ctx).Result()
	require.NoError(t, err)
	bound := 1000 + int64(end.Sub(start).Seconds()*50) + 25
	require.LessOrEqual(t, spent, bound, "admitted %d points in %s", spent, end.Sub(start))
}

func mustOpts(t *testing.T) *redis.Options {
	o, err := redis.ParseURL(testenv.RedisURL())
	require.NoError(t, err)
	return o
}

// TestT2Backoff429 is seed 004's T2 on real Redis: a 429 with Retry-After
// delays the work by exactly what the provider asked (in the "2" and the
// "2.0" forms), for every process, and a THROTTLED GraphQL answer delays
// it by (requested - currentlyAvailable) / restoreRate, derived from the
// response, not a constant.
func TestT2Backoff429(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := redisStores(t, 2)
	s, err := Embedded()
	require.NoError(t, err)
	for _, ra := range []string{"2", "2.0"} {
		t.Run("REST Retry-After "+ra, func(t *testing.T) {
			p, _ := s.Get("shopify-rest")
			clk := &fixedNow{t: t0}
			a, err := NewRuntime(Config{Profile: p, Store: stores[0], Now: clk.now, Prefix: "t2-" + ra + ":"})
			require.NoError(t, err)
			b, err := NewRuntime(Config{Profile: p, Store: stores[1], Now: clk.now, Prefix: "t2-" + ra + ":"})
			require.NoError(t, err)
			tk, err := a.Reserve(ctx, Call{Key: "shop", Method: "GET", Path: "/admin/api/2026-01/orders.json"})
			require.NoError(t, err)
			require.True(t, tk.OK)
			h := http.Header{"Retry-After": {ra}}
			o, err := a.Settle(ctx, tk, signal.Response{Status: 429, Header: h})
			require.NoError(t, err)
			require.Equal(t, Throttled, o.Kind)
			require.True(t, o.Retry, "delayed, not failed")
			require.Equal(t, 2*time.Second, o.Delay)
			// The job is delayed until t0+2s: the other process too.
			tk, err = b.Reserve(ctx, Call{Key: "SHOP.myshopify.com"})
			require.NoError(t, err)
			require.False(t, tk.OK)
			require.Equal(t, "paused", tk.Reason)
			require.Equal(t, 2*time.Second, tk.Delay)
			clk.advance(1500 * time.Millisecond)
			tk, err = b.Reserve(ctx, Call{Key: "shop"})
			require.NoError(t, err)
			require.Equal(t, 500*time.Millisecond, tk.Delay, "a coherent timestamp: t0+2s")
			clk.advance(500 * time.Millisecond)
			tk, err = b.Reserve(ctx, Call{Key: "shop"})
			require.NoError(t, err)
			require.True(t, tk.OK)
		})
	}
	t.Run("GraphQL THROTTLED", func(t *testing.T) {
		p, _ := s.Get("shopify-graphql")
		clk := &fixedNow{t: t0}
		a, err := NewRuntime(Config{Profile: p, Store: stores[0], Now: clk.now, Prefix: "t2-gql:"})
		require.NoError(t, err)
		b, err := NewRuntime(Config{Profile: p, Store: stores[1], Now: clk.now, Prefix: "t2-gql:"})
		require.NoError(t, err)
		tk, err := a.Reserve(ctx, Call{Key: "shop", Cost: 300})
		require.NoError(t, err)
		require.True(t, tk.OK)
		// A plan restoring 100/s with 60 points left.
		o, err := a.Settle(ctx, tk, signal.Response{Status: 200, Body: gqlBody(300, "null", 2000, 60, 100, "THROTTLED")})
		require.NoError(t, err)
		require.Equal(t, Throttled, o.Kind)
		require.Equal(t, 2400*time.Millisecond, o.Delay, "(300 - 60) / 100 s")
		// b has not seen a response yet: the bucket in the store is what a
		// learned, it is synced, and the delay comes out of it.
		tk, err = a.Reserve(ctx, Call{Key: "shop", Cost: 300})
		require.NoError(t, err)
		require.False(t, tk.OK)
		require.Equal(t, 2400*time.Millisecond, tk.Delay)
		tk, err = b.Reserve(ctx, Call{Key: "shop", Cost: 300})
		require.NoError(t, err)
		require.False(t, tk.OK, "the other process finds the shop's bucket synced")
	})
}

// TestT3BulkLock is seed 004's T3 on real Redis: two bulk jobs of one shop
// (spelt two ways): the first holds the lock, the second finds it held and
// is delayed; another shop runs in parallel; only the holder renews and
// releases; after the release the second runs. The lease key is the job
// group key. From API 2026-01 five bulk queries run at once.
func TestT3BulkLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := redisStores(t, 2)
	s, err := Embedded()
	require.NoError(t, err)
	p, _ := s.Get("shopify-bulk")
	l1, err := lease.New(lease.Config{Store: stores[0]})
	require.NoError(t, err)
	l2, err := lease.New(lease.Config{Store: stores[1]})
	require.NoError(t, err)

	first, err := p.LeaseParams("bulk-query", "https://Shop-A.myshopify.com/admin", "2025-10", "job-1")
	require.NoError(t, err)
	second, err := p.LeaseParams("bulk-query", "shop-a", "2025-10", "job-2")
	require.NoError(t, err)
	group, err := GroupKey(p, "SHOP-A.MYSHOPIFY.COM")
	require.NoError(t, err)
	require.Equal(t, group, first.Key, "lease key == group key")
	require.Equal(t, first.Key, second.Key)
	require.Equal(t, int64(1), first.Permits)

	h1, res, err := l1.Acquire(ctx, first)
	require.NoError(t, err)
	require.NotNil(t, h1)
	require.True(t, res.Acquired)
	h2, res, err := l2.Acquire(ctx, second)
	require.NoError(t, err)
	require.Nil(t, h2, "the second bulk job of the shop waits")
	require.Greater(t, res.RetryAfter, time.Duration(0), "delayed until the lease could end")

	// A mutation is another operation type, and shop B is another shop.
	mut, err := p.LeaseParams("bulk-mutation", "shop-a", "2025-10", "job-3")
	require.NoError(t, err)
	hm, _, err := l2.Acquire(ctx, mut)
	require.NoError(t, err)
	require.NotNil(t, hm)
	other, err := p.LeaseParams("bulk-query", "shop-b", "2025-10", "job-4")
	require.NoError(t, err)
	hb, _, err := l2.Acquire(ctx, other)
	require.NoError(t, err)
	require.NotNil(t, hb, "other shops run in parallel")

	// Only the holder releases.
	err = stores[1].Release(ctx, storeRelease(first, "job-2", h1.Token()))
	require.Error(t, err, "a non-holder cannot release")
	require.NoError(t, h1.Release(ctx))
	h2, _, err = l2.Acquire(ctx, second)
	require.NoError(t, err)
	require.NotNil(t, h2, "after the release the second runs")
	require.Greater(t, h2.Token(), h1.Token(), "fencing tokens increase")
	for _, h := range []*lease.Lease{h2, hm, hb} {
		require.NoError(t, h.Release(ctx))
	}

	// API 2026-01: up to five bulk queries per shop.
	var held []*lease.Lease
	for i := range 6 {
		lp, err := p.LeaseParams("bulk-query", "shop-c", "2026-01", fmt.Sprintf("q%d", i))
		require.NoError(t, err)
		h, _, err := l1.Acquire(ctx, lp)
		require.NoError(t, err)
		if i < 5 {
			require.NotNil(t, h, "query %d of 5", i)
			held = append(held, h)
		} else {
			require.Nil(t, h, "a sixth bulk query waits")
		}
	}
	for _, h := range held {
		require.NoError(t, h.Release(ctx))
	}
}

func storeRelease(p lease.Params, holder string, token int64) store.ReleaseParams {
	return store.ReleaseParams{Name: p.Name, Key: p.Key, Holder: holder, Token: token}
}

// TestRedisCallLeaseFleet: GitHub-style concurrency over real Redis, two
// processes (a store and a Runtime each): with a lease of 2 permits held
// around every call, 6 concurrent calls from both never have more than 2
// in flight, and all succeed.
func TestRedisCallLeaseFleet(t *testing.T) {
	t.Parallel()
	stores := redisStores(t, 2)
	p := callLeaseProfile(t, 2)
	var trs []*Transport
	var cls []*countingLeases
	for _, st := range stores {
		cl := newCountingLeases(st)
		cls = append(cls, cl)
		rt, err := NewRuntime(Config{Profile: p, Store: st, Leases: cl})
		require.NoError(t, err)
		trs = append(trs, &Transport{Runtime: rt, Key: func(*http.Request) Call { return Call{Key: "tok"} }})
	}
	srv := newInflightServer(t)
	refused := func() int64 { return cls[0].refused.Load() + cls[1].refused.Load() }
	runConcurrent(t, srv, trs, refused, 2, 6)
	require.Equal(t, 0, holders(t, stores[0], "provider:", "tok"), "every permit freed once the bodies are closed")
}

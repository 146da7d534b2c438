package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"batched", Config{}},
		{"one-in-flight", Config{MaxInFlight: 1, MaxBatch: 8}},
		{"unbatched", Config{Unbatched: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, single(t), tc.cfg)
			storetest.Run(t, func(*testing.T) store.RateStore { return s })
		})
	}
}

// TestConformanceCluster runs the suite on the test cluster. The suite's
// TakeAll combines different keys, which a cluster refuses unless they
// share a slot: each subtest gets a store of its own whose prefix carries a
// hash tag, the tags chosen so that the subtests spread over every node.
func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	c := clusterClient(t)
	ctx := context.Background()
	shards, err := c.ClusterShards(ctx).Result()
	require.NoError(t, err)
	require.Len(t, shards, 3, "a 3-node cluster")
	var (
		mu   sync.Mutex
		n    int
		used = map[int]bool{}
	)
	storetest.Run(t, func(t *testing.T) store.RateStore {
		mu.Lock()
		i := n % len(shards)
		n++
		used[i] = true
		mu.Unlock()
		r := shards[i].Slots[0]
		tag := tagIn(int(r.Start), int(r.End))
		return newStore(t, c, Config{Prefix: testPrefix() + "{" + tag + "}:"})
	})
	t.Cleanup(func() { require.Len(t, used, 3, "every shard served a subtest") })
}

// tagIn returns a random hash tag whose slot is in [lo, hi].
func tagIn(lo, hi int) string {
	for {
		tag := fmt.Sprintf("%08x", rand.Uint32())
		if s := int(slot(tag)); s >= lo && s <= hi {
			return tag
		}
	}
}

var base = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// TestDifferential runs one random sequence of operations, with a fixed
// sequence of instants, against memstore and against Redis: every result
// and every error must be the same.
func TestDifferential(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
		cfg    Config
	}{
		{"single", func(t *testing.T) redis.UniversalClient { return single(t) }, Config{}},
		{"single-unbatched", func(t *testing.T) redis.UniversalClient { return single(t) }, Config{Unbatched: true}},
		{"cluster", func(t *testing.T) redis.UniversalClient { return clusterClient(t) }, Config{}},
		{"ring", func(t *testing.T) redis.UniversalClient { return ringClient(t) }, Config{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, tc.client(t), tc.cfg)
			for seed := range uint64(4) {
				differential(t, s, seed, 600)
			}
		})
	}
}

// TestStoretestDifferential runs the shared differential of store/storetest
// on one server (its TakeAll items have no common hash tag, which a cluster
// needs).
func TestStoretestDifferential(t *testing.T) {
	t.Parallel()
	s := newStore(t, single(t), Config{})
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			storetest.Differential(t, s, memstore.New(memstore.Config{}), seed, 1500)
		})
	}
}

func differential(t *testing.T, rs *Store, seed uint64, n int) {
	ctx := context.Background()
	ms := memstore.New(memstore.Config{})
	rng := rand.New(rand.NewPCG(seed, 42))
	run := fmt.Sprintf("d%d/", seed)
	limits := []store.Limit{
		{Name: run + "gcra", Algorithm: store.GCRA, Rate: 5, Period: time.Second, Burst: 3},
		{Name: run + "gcra-default-burst", Algorithm: store.GCRA, Rate: 100, Period: time.Minute},
		{Name: run + "gcra-odd", Algorithm: store.GCRA, Rate: 7, Period: 1001 * time.Millisecond, Burst: 11},
		{Name: run + "fixed", Algorithm: store.FixedWindow, Rate: 5, Period: 500 * time.Millisecond},
		{Name: run + "fixed-odd", Algorithm: store.FixedWindow, Rate: 9, Period: 1234567 * time.Microsecond},
		{Name: run + "sliding", Algorithm: store.SlidingWindow, Rate: 7, Period: 2 * time.Second},
		{Name: run + "sliding-short", Algorithm: store.SlidingWindow, Rate: 3, Period: 300 * time.Millisecond},
		{Name: run + "sliding-odd", Algorithm: store.SlidingWindow, Rate: 13, Period: 777777 * time.Microsecond},
		// One name under three algorithms (policy reloads).
		{Name: run + "reloaded", Algorithm: store.GCRA, Rate: 8, Period: time.Second, Burst: 4},
		{Name: run + "reloaded", Algorithm: store.FixedWindow, Rate: 6, Period: 700 * time.Millisecond},
		{Name: run + "reloaded", Algorithm: store.SlidingWindow, Rate: 5, Period: 400 * time.Millisecond},
		{Name: run + "invalid", Algorithm: store.GCRA, Rate: 0, Period: time.Second},
		{Name: "", Algorithm: store.GCRA, Rate: 1, Period: time.Second},
	}
	// Keys in groups whose members share a hash tag, so TakeAll works on a
	// cluster too: "u1" has the default tag u1, like "{u1}a".
	groups := [][]string{{"u1", "{u1}a", "{u1}:b"}, {"k2"}, {"we{ir}d%:key}"}}
	pickLimit := func() store.Limit {
		if rng.IntN(30) == 0 {
			return limits[len(limits)-2+rng.IntN(2)] // an invalid one
		}
		return limits[rng.IntN(len(limits)-2)]
	}
	cost := func(l store.Limit) int64 {
		switch rng.IntN(20) {
		case 0:
			return -1
		case 1:
			return l.Max() + 1
		case 2, 3, 4:
			return 0
		}
		return 1 + rng.Int64N(max(l.Max(), 1))
	}
	type taken struct {
		key      string
		l        store.Limit
		reserved int64
		at       int64
	}
	var (
		takes    []taken
		now      = base.Add(time.Duration(rng.Int64N(int64(time.Hour))))
		outcomes = map[string]int{}
	)
	for i := range n {
		switch rng.IntN(4) {
		case 0:
			// Same instant.
		case 1:
			now = now.Add(time.Duration(rng.Int64N(1000)) * time.Microsecond)
		default:
			now = now.Add(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
		}
		group := groups[rng.IntN(len(groups))]
		key := group[rng.IntN(len(group))]
		var op string
		var rres, mres any
		var rerr, merr error
		switch r := rng.IntN(100); {
		case r < 45:
			l := pickLimit()
			p := store.TakeParams{Key: key, Limit: l, Cost: cost(l), Now: now}
			if rng.IntN(4) == 0 {
				p.MaxDelay = time.Duration(rng.Int64N(int64(2 * time.Second)))
			}
			op = fmt.Sprintf("take %+v", p)
			rres, rerr = rs.Take(ctx, p)
			mres, merr = ms.Take(ctx, p)
			if res, ok := mres.(store.Result); ok && merr == nil && res.Allowed && p.Cost > 0 {
				takes = append(takes, taken{key, l, p.Cost, res.At})
			}
		case r < 65:
			p := store.TakeAllParams{Now: now}
			if rng.IntN(4) == 0 {
				p.MaxDelay = time.Duration(rng.Int64N(int64(time.Second)))
			}
			for range rng.IntN(5) {
				l := pickLimit()
				p.Items = append(p.Items, store.Item{Key: group[rng.IntN(len(group))], Limit: l, Cost: cost(l)})
			}
			op = fmt.Sprintf("take all %+v", p)
			rres, rerr = rs.TakeAll(ctx, p)
			mres, merr = ms.TakeAll(ctx, p)
		case r < 80:
			p := store.SettleParams{Key: key, Limit: pickLimit(), Reserved: rng.Int64N(5), Actual: rng.Int64N(8), ReservedAt: now.UnixMicro(), Now: now}
			if len(takes) > 0 && rng.IntN(4) != 0 {
				tk := takes[rng.IntN(len(takes))]
				p.Key, p.Limit, p.Reserved, p.ReservedAt = tk.key, tk.l, tk.reserved, tk.at
				p.Actual = rng.Int64N(2*tk.reserved + 2)
			}
			if rng.IntN(25) == 0 {
				p.Actual = -1
			}
			op = fmt.Sprintf("settle %+v", p)
			rres, rerr = rs.Settle(ctx, p)
			mres, merr = ms.Settle(ctx, p)
		case r < 95:
			l := pickLimit()
			p := store.SyncParams{Key: key, Limit: l, Remaining: rng.Int64N(l.Max()+3) - 1, Now: now}
			if rng.IntN(2) == 0 {
				p.Remaining = 0
				p.ResetAfter = time.Duration(rng.Int64N(int64(5*time.Second))) - time.Second
			}
			op = fmt.Sprintf("sync %+v", p)
			rres, rerr = rs.Sync(ctx, p)
			mres, merr = ms.Sync(ctx, p)
		default:
			p := store.ResetParams{Key: key, Limit: pickLimit()}
			op = fmt.Sprintf("reset %+v", p)
			rerr = rs.Reset(ctx, p)
			merr = ms.Reset(ctx, p)
		}
		require.Equal(t, fmt.Sprint(merr), fmt.Sprint(rerr), "seed %d op %d: %s", seed, i, op)
		if merr == nil {
			require.Equal(t, mres, rres, "seed %d op %d: %s", seed, i, op)
		}
		kind, _, _ := strings.Cut(op, " {")
		outcome := "ok"
		switch r := mres.(type) {
		case store.Result:
			outcome = map[bool]string{true: "allowed", false: "denied"}[r.Allowed]
		case store.AllResult:
			outcome = map[bool]string{true: "allowed", false: "denied"}[r.Allowed]
		}
		if merr != nil {
			outcome = "error"
		}
		outcomes[kind+" "+outcome]++
	}
	t.Logf("seed %d: %v", seed, outcomes)
}

// TestKeyExpiry checks that a key expires exactly when its state becomes
// fresh: PEXPIRETIME is FreshAt rounded up to the millisecond.
func TestKeyExpiry(t *testing.T) {
	t.Parallel()
	c := single(t)
	s := newStore(t, c, Config{})
	ctx := context.Background()
	for _, l := range []store.Limit{
		{Name: "gcra", Algorithm: store.GCRA, Rate: 10, Period: time.Second},
		{Name: "fixed", Algorithm: store.FixedWindow, Rate: 10, Period: 3 * time.Second},
		{Name: "sliding", Algorithm: store.SlidingWindow, Rate: 10, Period: 3 * time.Second},
	} {
		// A key whose fresh time passes between the take and the reads
		// has expired by them (a window aligned to the clock may end at
		// once, and a stalled test reads late): the store's own clock,
		// read after them, says so, and the check runs again on a new
		// key. Bounded: each try fails only across a fresh time.
		checked := false
		for try := 0; try < 10 && !checked; try++ {
			k := fmt.Sprintf("k%d", try)
			res, err := s.Take(ctx, store.TakeParams{Key: k, Limit: l, Cost: 5})
			require.NoError(t, err)
			require.True(t, res.Allowed)
			// The current window's end for a sliding window, plus a
			// window while it weighs as the previous one: exactly
			// ResetAfter, as for the others.
			freshAt := res.At + res.ResetAfter.Microseconds()
			key, _ := rateKey(s.Prefix(), k, l.Name)
			exp, err := c.PExpireTime(ctx, key).Result()
			require.NoError(t, err, "PEXPIRETIME needs Redis 7")
			// The stored state, as memstore would hold it, with its
			// fresh time beside a window's counts.
			v, getErr := c.Get(ctx, key).Result()
			now, err := c.Time(ctx).Result()
			require.NoError(t, err)
			if now.UnixMicro() >= freshAt {
				continue // expired before the reads, or may have
			}
			require.NoError(t, getErr)
			require.Equal(t, (freshAt+999)/1000, exp.Milliseconds(), l.Algorithm.String())
			switch l.Algorithm {
			case store.GCRA:
				require.Equal(t, fmt.Sprint(freshAt), v)
			case store.FixedWindow:
				require.Equal(t, fmt.Sprintf("%d 5 0 %d", freshAt, freshAt), v)
			case store.SlidingWindow:
				require.Equal(t, fmt.Sprintf("%d 5 0 %d", freshAt-l.Period.Microseconds(), freshAt), v)
			}
			checked = true
		}
		require.True(t, checked, "%s: every try's key reached its fresh time before it was read", l.Algorithm)
	}

	// With an overridden clock (tests), expiry runs from the override but
	// never shorter than a while of real time.
	l := store.Limit{Name: "override", Algorithm: store.GCRA, Rate: 10, Period: time.Second}
	_, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 5, Now: base})
	require.NoError(t, err)
	key, _ := rateKey(s.Prefix(), "k", l.Name)
	ttl, err := c.PTTL(ctx, key).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 9*time.Minute)
	require.LessOrEqual(t, ttl, 10*time.Minute)
	l.Period = 24 * time.Hour
	_, err = s.Take(ctx, store.TakeParams{Key: "k2", Limit: l, Cost: 5, Now: base})
	require.NoError(t, err)
	key, _ = rateKey(s.Prefix(), "k2", l.Name)
	ttl, err = c.PTTL(ctx, key).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 12*time.Hour-time.Minute)
	require.LessOrEqual(t, ttl, 12*time.Hour)
}

// TestFreshKeysAreDeleted checks that state equal to a fresh key's is never
// kept.
func TestFreshKeysAreDeleted(t *testing.T) {
	t.Parallel()
	c := single(t)
	s := newStore(t, c, Config{})
	ctx := context.Background()
	keys := func() []string { return keysWith(t, c, s.Prefix()) }
	for _, l := range []store.Limit{
		{Name: "gcra", Algorithm: store.GCRA, Rate: 10, Period: time.Hour},
		{Name: "fixed", Algorithm: store.FixedWindow, Rate: 10, Period: time.Hour},
		{Name: "sliding", Algorithm: store.SlidingWindow, Rate: 10, Period: time.Hour},
	} {
		name := l.Algorithm.String()
		// Peeks and denials write nothing.
		_, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 0})
		require.NoError(t, err)
		require.Empty(t, keys(), name)
		_, err = s.TakeAll(ctx, store.TakeAllParams{Items: []store.Item{{Key: "k", Limit: l, Cost: 6}, {Key: "k", Limit: l, Cost: 6}}})
		require.NoError(t, err)
		require.Empty(t, keys(), name)
		// A take writes; refunding all of it deletes the key.
		res, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 4})
		require.NoError(t, err)
		require.Len(t, keys(), 1, name)
		_, err = s.Settle(ctx, store.SettleParams{Key: "k", Limit: l, Reserved: 4, Actual: 0, ReservedAt: res.At})
		require.NoError(t, err)
		require.Empty(t, keys(), name)
		// A provider reporting the key full deletes it too.
		_, err = s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 4})
		require.NoError(t, err)
		require.Len(t, keys(), 1, name)
		res, err = s.Sync(ctx, store.SyncParams{Key: "k", Limit: l, Remaining: 10})
		require.NoError(t, err)
		require.Equal(t, int64(10), res.Remaining)
		require.Empty(t, keys(), name)
		// And a reset.
		_, err = s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 4})
		require.NoError(t, err)
		require.NoError(t, s.Reset(ctx, store.ResetParams{Key: "k", Limit: l}))
		require.Empty(t, keys(), name)
	}
	// A state that has gone fresh is dropped by the next write at a later
	// instant that leaves it fresh: a GCRA refund after its TAT passed.
	l := store.Limit{Name: "late", Algorithm: store.GCRA, Rate: 10, Period: time.Second}
	res, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 2, Now: base})
	require.NoError(t, err)
	require.Len(t, keys(), 1)
	_, err = s.Settle(ctx, store.SettleParams{Key: "k", Limit: l, Reserved: 2, Actual: 1, ReservedAt: res.At, Now: base.Add(time.Second)})
	require.NoError(t, err)
	require.Empty(t, keys())
}

// TestCrossSlot: on a cluster, the keys of one TakeAll must share a slot.
func TestCrossSlot(t *testing.T) {
	t.Parallel()
	l1 := store.Limit{Name: "weight", Algorithm: store.GCRA, Rate: 10, Period: time.Second}
	l2 := store.Limit{Name: "orders", Algorithm: store.FixedWindow, Rate: 10, Period: time.Second}

	// Refused before anything is sent: no server needed.
	for _, c := range []redis.UniversalClient{
		redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}),
		redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1", "b": "127.0.0.1:2"}}),
	} {
		s, err := New(c, Config{})
		require.NoError(t, err)
		_, err = s.TakeAll(context.Background(), store.TakeAllParams{Items: []store.Item{
			{Key: "acct1", Limit: l1, Cost: 1}, {Key: "acct2", Limit: l2, Cost: 1},
		}})
		require.ErrorIs(t, err, ErrCrossSlot)
		require.ErrorContains(t, err, `"acct1"`)
		require.ErrorContains(t, err, `"acct2"`)
		require.NoError(t, c.Close())
	}

	// On a real cluster: keys sharing a tag go together.
	c := clusterClient(t)
	s := newStore(t, c, Config{})
	ctx := context.Background()
	res, err := s.TakeAll(ctx, store.TakeAllParams{Items: []store.Item{
		{Key: "acct1", Limit: l1, Cost: 4}, {Key: "acct1", Limit: l2, Cost: 3},
		{Key: "{acct1}:ip:10.0.0.1", Limit: l1, Cost: 2}, {Key: "{acct1}", Limit: l2, Cost: 2},
	}})
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.Equal(t, []int64{6, 7, 8, 5}, []int64{res.Results[0].Remaining, res.Results[1].Remaining, res.Results[2].Remaining, res.Results[3].Remaining},
		`"acct1" and "{acct1}" are the same key`)
	_, err = s.TakeAll(ctx, store.TakeAllParams{Items: []store.Item{
		{Key: "acct1", Limit: l1, Cost: 1}, {Key: "acct2", Limit: l2, Cost: 1},
	}})
	require.ErrorIs(t, err, ErrCrossSlot)
	// Our slot function agrees with the cluster's.
	for _, k := range []string{"acct1", "{acct1}:ip:10.0.0.1", "we{ir}d", "%{}"} {
		rk, tag := rateKey(s.Prefix(), k, "n")
		want, err := c.ClusterKeySlot(ctx, rk).Result()
		require.NoError(t, err)
		require.Equal(t, want, int64(slot(tag)), k)
	}
}

// TestBatching: 64 goroutines share round trips and are never admitted
// more than the limit.
func TestBatching(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"single", func(t *testing.T) redis.UniversalClient { return single(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return clusterClient(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, tc.client(t), Config{})
			ctx := context.Background()
			// Refills a unit in 40h: never within a run, however slow.
			l := store.Limit{Name: "l", Algorithm: store.GCRA, Rate: 500, Period: 20000 * time.Hour}
			w := store.Limit{Name: "w", Algorithm: store.FixedWindow, Rate: 500, Period: time.Hour}
			var (
				admitted, fixed atomic.Int64
				wg              sync.WaitGroup
				errs            = make(chan error, 64)
			)
			for g := range 64 {
				wg.Go(func() {
					for range 20 {
						res, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
						if err != nil {
							errs <- err
							return
						}
						if res.Allowed {
							admitted.Add(1)
						}
						// Other keys too: on a cluster, other nodes.
						res, err = s.Take(ctx, store.TakeParams{Key: fmt.Sprint("k", g%8), Limit: w, Cost: 1, Now: base})
						if err != nil {
							errs <- err
							return
						}
						if res.Allowed {
							fixed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.GreaterOrEqual(t, admitted.Load(), int64(500))
			require.LessOrEqual(t, admitted.Load(), int64(501), "over-admission")
			require.Equal(t, int64(8*160), fixed.Load()) // 8 keys of 160 takes each, all within 500
			p, n := s.pipelines.Load(), s.batched.Load()
			require.Positive(t, p, "nothing was batched")
			t.Logf("%d pipelines carried %d of %d calls (%.1f per pipeline)", p, n, 64*40, float64(n)/float64(p))
			// A caller returns as soon as its reply is in; the round
			// trip's bookkeeping (inFlight) ends just after: wait for
			// it rather than race it (a busy machine lost that race).
			waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.inFlight == 0 && len(s.queue) == 0 })
		})
	}
}

// TestContext: a caller's context bounds its wait, whether it is queued or
// its round trip is under way, and a call abandoned while queued is never
// sent.
func TestContext(t *testing.T) {
	t.Parallel()
	direct := single(t)
	p := newProxy(t, direct.Options().Addr)
	opt, err := redis.ParseURL(testRedisURL())
	require.NoError(t, err)
	opt.Addr = p.addr()
	opt.MaxRetries = -1
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	require.NoError(t, c.Ping(ctx).Err())

	s := newStore(t, c, Config{MaxInFlight: 1})
	check, err := New(direct, Config{Prefix: s.Prefix()})
	require.NoError(t, err)
	l := store.Limit{Name: "l", Algorithm: store.FixedWindow, Rate: 100, Period: time.Hour}
	take := func(ctx context.Context, cost int64) error {
		_, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: cost, Now: base})
		return err
	}
	remaining := func() int64 {
		t.Helper()
		res, err := check.Take(ctx, store.TakeParams{Key: "k", Limit: l, Now: base})
		require.NoError(t, err)
		return res.Remaining
	}

	// An expired context sends nothing.
	done, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, take(done, 1), context.Canceled)
	require.Equal(t, int64(100), remaining())

	// Hold the answers back: the first call takes the only round trip.
	p.pause()
	first := make(chan error, 1)
	go func() { first <- take(ctx, 1) }()
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.inFlight == 1 })

	// A queued call returns when its context is cancelled...
	qctx, qcancel := context.WithCancel(ctx)
	queued := make(chan error, 1)
	go func() { queued <- take(qctx, 10) }()
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.queue) == 1 })
	qcancel()
	require.ErrorIs(t, <-queued, context.Canceled)
	// ... or when its deadline passes.
	dctx, dcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer dcancel()
	require.ErrorIs(t, returns(t, func() error { return take(dctx, 20) }), context.DeadlineExceeded)

	// Let the answers through: the first call completes, and the two
	// abandoned calls are never sent.
	p.resume()
	require.NoError(t, <-first)
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.inFlight == 0 })
	require.Equal(t, int64(99), remaining())

	// A round trip under way: the caller returns at its deadline.
	p.pause()
	dctx2, dcancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer dcancel2()
	require.Error(t, returns(t, func() error { return take(dctx2, 1) }))
	p.resume()
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.inFlight == 0 })
	require.NoError(t, take(ctx, 1), "the store works again")
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, time.Minute, time.Millisecond)
}

// returns runs f and returns its error, failing the test if f has not
// returned within a minute: with the proxy holding the answers back, a
// call that did not give up at its deadline would never return.
func returns(t *testing.T, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the call did not return at its deadline while its answer was held back")
		return nil
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer func() { _ = c.Close() }()
	_, err := New(nil, Config{})
	require.Error(t, err)
	for _, bad := range []string{"a{b:", "a{}:", "{"} {
		_, err = New(c, Config{Prefix: bad})
		require.ErrorContains(t, err, "prefix", bad)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer func() { _ = cc.Close() }()
	s, err := New(cc, Config{Prefix: "a{b}:"})
	require.NoError(t, err)
	require.Equal(t, standalone, s.routing, "a tagged prefix puts every key in one slot")
	_, err = New(c, Config{MaxBatch: -1})
	require.Error(t, err)
	s, err = New(c, Config{})
	require.NoError(t, err)
	require.Equal(t, "sluice:", s.Prefix())

	// Limits beyond what Lua's doubles hold exactly, refused before any
	// round trip.
	ctx := context.Background()
	huge := store.Limit{Name: "huge", Algorithm: store.GCRA, Rate: 1, Period: 200 * 365 * 24 * time.Hour}
	_, err = s.Take(ctx, store.TakeParams{Key: "k", Limit: huge, Cost: 1})
	require.ErrorIs(t, err, store.ErrInvalidLimit)
	huge.Algorithm = store.FixedWindow
	_, err = s.Take(ctx, store.TakeParams{Key: "k", Limit: huge, Cost: 1})
	require.ErrorIs(t, err, store.ErrInvalidLimit)
	ok := store.Limit{Name: "ok", Algorithm: store.GCRA, Rate: 1, Period: time.Second}
	_, err = s.Sync(ctx, store.SyncParams{Key: "k", Limit: ok, ResetAfter: 1<<63 - 1})
	require.ErrorIs(t, err, ErrOutOfRange)
	require.ErrorIs(t, err, store.ErrOutOfRange)
	// A debt of 2^40 s is beyond gcra.MaxSpan: ErrCostExceedsLimit, as on
	// every backend (it was ErrOutOfRange here, and Redis accepted 2^52
	// units at 10^6/s).
	_, err = s.Settle(ctx, store.SettleParams{Key: "k", Limit: ok, Reserved: 0, Actual: 1 << 40})
	require.ErrorIs(t, err, store.ErrCostExceedsLimit)
	fast := store.Limit{Name: "fast", Algorithm: store.GCRA, Rate: 1_000_000, Period: time.Second, Burst: 1}
	_, err = s.Settle(ctx, store.SettleParams{Key: "k", Limit: fast, Reserved: 0, Actual: 1 << 52})
	require.ErrorIs(t, err, store.ErrCostExceedsLimit)
	_, err = s.Take(ctx, store.TakeParams{Key: "k", Limit: ok, Cost: 1, Now: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)})
	require.ErrorIs(t, err, ErrOutOfRange)
	require.False(t, errors.Is(err, store.ErrInvalidLimit))
}

func TestKeyLayout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ key, name, want, tag string }{
		{"acct42", "binance-weight", "sluice:rate:{acct42}:binance-weight", "acct42"},
		{"{acct42}", "binance-weight", "sluice:rate:{acct42}:binance-weight", "acct42"},
		{"{acct42}:ip:10.0.0.1", "w", "sluice:rate:{acct42}:ip:10.0.0.1:w", "acct42"},
		{"ip:{acct42}", "w", "sluice:rate:ip:{acct42}:w", "acct42"},
		{"a}b", "w", "sluice:rate:{a%7Db}:w", "a%7Db"},
		{"{}x", "w", "sluice:rate:{%7B%7Dx}:w", "%7B%7Dx"},
		{"a{b", "w", "sluice:rate:{a%7Bb}:w", "a%7Bb"},
		{"x{a{b}y}", "w", "sluice:rate:x{a%7Bb}y%7D:w", "a%7Bb"},
		{"100%", "n:a%me", "sluice:rate:{100%25}:n%3Aa%25me", "100%25"},
	} {
		got, tag := rateKey(DefaultPrefix, tc.key, tc.name)
		require.Equal(t, tc.want, got, "%q %q", tc.key, tc.name)
		require.Equal(t, tc.tag, tag, "%q", tc.key)
	}
	// No two (key, name) pairs share a Redis key, but for "k" and "{k}".
	type pair struct{ key, name string }
	seen := map[string]pair{}
	parts := []string{"", "a", "{", "}", "%", ":", "{a}", "%7B", "a:b", "{a}:b"}
	for _, a := range parts {
		for _, b := range parts {
			for _, c := range parts {
				key := a + b + c
				if key == "" {
					continue
				}
				for _, name := range []string{"n", "n:x", "x:n", "%3A", ":"} {
					rk, _ := rateKey(DefaultPrefix, key, name)
					id := pair{key, name}
					if prev, ok := seen[rk]; ok && prev != id {
						same := prev.name == name && (prev.key == "{"+key+"}" || key == "{"+prev.key+"}")
						require.True(t, same, "%q and %q share %s", prev, id, rk)
					}
					seen[rk] = id
				}
			}
		}
	}
	// CRC16 test vectors of Redis Cluster.
	require.Equal(t, uint16(12739), slot("123456789"))
	require.Equal(t, uint16(12182), slot("foo"))
	require.Equal(t, uint16(11058), slot("somekey"))
}

// FuzzDifferential runs storetest.FuzzDifferential against one Redis store
// shared by every input (SLUICE_INTEGRATION=1).
func FuzzDifferential(f *testing.F) {
	s := newStore(f, single(f), Config{})
	storetest.FuzzDifferential(f, func(*testing.T) store.RateStore { return s },
		func() store.RateStore { return memstore.New(memstore.Config{}) })
}

// TestDeadlineOnTheCallersGoroutine: on a client with
// ContextTimeoutEnabled a lone call whose context has a deadline makes its
// round trip on the caller's goroutine, and still returns at its deadline
// while the answer is held back; without the option it takes a goroutine
// of its own.
func TestDeadlineOnTheCallersGoroutine(t *testing.T) {
	t.Parallel()
	direct := single(t)
	p := newProxy(t, direct.Options().Addr)
	for _, enabled := range []bool{true, false} {
		opt, err := redis.ParseURL(testRedisURL())
		require.NoError(t, err)
		opt.Addr = p.addr()
		opt.MaxRetries = -1
		opt.ContextTimeoutEnabled = enabled
		c := redis.NewClient(opt)
		t.Cleanup(func() { _ = c.Close() })
		s := newStore(t, c, Config{})
		require.True(t, s.HonoursDeadline())
		l := store.Limit{Name: "l", Algorithm: store.GCRA, Rate: 100, Period: time.Hour}
		take := func(ctx context.Context) error {
			_, err := s.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		require.NoError(t, take(ctx))
		cancel()
		if enabled {
			require.Zero(t, s.spawned.Load(), "the round trip ran on the caller's goroutine")
		} else {
			require.Equal(t, int64(1), s.spawned.Load(), "the round trip ran on a goroutine of its own")
		}

		// A round trip under way: the caller returns at its deadline.
		p.pause()
		dctx, dcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		require.Error(t, returns(t, func() error { return take(dctx) }))
		dcancel()
		p.resume()
		waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.inFlight == 0 })
		require.NoError(t, take(context.Background()), "the store works again")
	}
}

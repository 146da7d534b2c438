package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// TestBatchDifferential sends random batches of takes (several on one key,
// at instants that step forward within a batch, mixed with a TakeAll of
// their own) through one pipeline, as the batcher does, and checks each
// against memstore deciding the same takes one by one in queue order.
func TestBatchDifferential(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"single", func(t *testing.T) redis.UniversalClient { return single(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return clusterClient(t) }},
		{"ring", func(t *testing.T) redis.UniversalClient { return ringClient(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, tc.client(t), Config{})
			ms := memstore.New(memstore.Config{})
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(7, 7))
			limits := []store.Limit{
				{Name: "gcra", Algorithm: store.GCRA, Rate: 5, Period: time.Second, Burst: 4},
				{Name: "fixed", Algorithm: store.FixedWindow, Rate: 6, Period: 700 * time.Millisecond},
				{Name: "sliding", Algorithm: store.SlidingWindow, Rate: 7, Period: time.Second},
				// The name of the GCRA limit with a window algorithm (a
				// policy reload): its keys hold window state that a GCRA
				// take must read, past the script's GCRA fast paths.
				{Name: "gcra", Algorithm: store.FixedWindow, Rate: 3, Period: 900 * time.Millisecond},
			}
			keys := []string{"a", "b", "c", "{a}x"}
			now := base
			stats := map[bool]int{}
			for round := range 200 {
				var (
					batch []*call
					want  []store.Result
					ps    []store.TakeParams
				)
				for range 1 + rng.IntN(40) {
					if rng.IntN(3) == 0 {
						now = now.Add(time.Duration(rng.Int64N(int64(200 * time.Millisecond))))
					}
					p := store.TakeParams{Key: keys[rng.IntN(len(keys))], Limit: limits[rng.IntN(len(limits))], Now: now}
					p.Cost = rng.Int64N(p.Limit.Max() + 1)
					if rng.IntN(4) == 0 {
						p.MaxDelay = time.Duration(rng.Int64N(int64(time.Second)))
					}
					batch = append(batch, takeCall(t, s, ctx, &p))
					res, err := ms.Take(ctx, p)
					require.NoError(t, err)
					want = append(want, res)
					ps = append(ps, p)
				}
				// A call that is not a take, in the middle: a reset of a
				// key nobody else in the batch uses.
				rk, _ := rateKey(s.Prefix(), "other", "gcra")
				batch = append(batch[:len(batch)/2], append([]*call{newCall(ctx, resetRequest(rk), nil)}, batch[len(batch)/2:]...)...)
				s.flush(batch)
				i := 0
				for _, c := range batch {
					if !c.req.single {
						<-c.done
						require.NoError(t, c.err)
						continue
					}
					got, err := c.takeResult(&ps[i].Limit)
					require.NoError(t, err)
					require.Equal(t, want[i], got, "round %d take %d: %+v", round, i, ps[i])
					stats[got.Allowed]++
					i++
				}
			}
			t.Logf("allowed %d, denied %d", stats[true], stats[false])
		})
	}
}

// TestNoScript checks that a flushed script cache costs nothing but a
// reload, on the direct path and in pipelines.
func TestNoScript(t *testing.T) {
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
			c := tc.client(t)
			s := newStore(t, c, Config{})
			ctx := context.Background()
			flush := func() {
				t.Helper()
				if cc, ok := c.(*redis.ClusterClient); ok {
					require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
						return n.ScriptFlush(ctx).Err()
					}))
					return
				}
				require.NoError(t, c.ScriptFlush(ctx).Err())
			}
			l := store.Limit{Name: "l", Algorithm: store.GCRA, Rate: 100, Period: time.Hour}

			// Direct.
			flush()
			res, err := s.Take(ctx, store.TakeParams{Key: "a", Limit: l, Cost: 1})
			require.NoError(t, err)
			require.Equal(t, int64(99), res.Remaining)

			// One pipeline of takes, combined and not (on a cluster,
			// several nodes), and a TakeAll.
			flush()
			var batch []*call
			for i := range 16 {
				p := store.TakeParams{Key: fmt.Sprint("k", i%8), Limit: l, Cost: 1}
				r, err := s.takeRequest(&p)
				require.NoError(t, err)
				r.single = i%2 == 0 // the others are script calls of their own
				batch = append(batch, newCall(ctx, r, nil))
			}
			s.flush(batch)
			for i, cl := range batch {
				res, err := cl.takeResult(&l)
				require.NoError(t, err, i)
				require.True(t, res.Allowed, i)
				require.Equal(t, int64(99-i/8), res.Remaining, i)
			}
		})
	}
}

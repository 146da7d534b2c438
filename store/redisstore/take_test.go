package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// TestServerClockDifferential takes on the server's clock (no Now), alone
// and in batches, and checks every result against the reference decision
// (store.Eval, storing what store.Kept keeps, as memstore does) of the same
// take at the instant the script read (Result.At). It covers what the
// differentials with a fixed Now cannot: the script's paths that read
// TIME, its GCRA fast path ("g") allowed, denied and delayed, and a GCRA
// take of a key holding window state (a limit whose algorithm changed).
//
// The reference also expires a key when its state turns fresh under the
// limit that wrote it, as Redis does (store.Kept's doc): read under the
// other algorithm of the same name, such a key differs from the state
// memstore would keep, and on a slow machine the gaps between takes are
// long enough for it to happen. Within a few milliseconds of the expiry
// (Redis expires at millisecond resolution) either answer is accepted.
func TestServerClockDifferential(t *testing.T) {
	t.Parallel()
	c := single(t)
	ctx := context.Background()
	limits := []store.Limit{
		{Name: "gcra", Algorithm: store.GCRA, Rate: 20, Period: time.Second, Burst: 3},
		{Name: "gcra-slow", Algorithm: store.GCRA, Rate: 2, Period: time.Second, Burst: 2},
		{Name: "fixed", Algorithm: store.FixedWindow, Rate: 4, Period: 300 * time.Millisecond},
		{Name: "sliding", Algorithm: store.SlidingWindow, Rate: 5, Period: 400 * time.Millisecond},
		// One name under two algorithms: its keys hold window state that
		// a GCRA take must read past the fast path, and a TAT that a
		// window take reads.
		{Name: "reloaded", Algorithm: store.GCRA, Rate: 10, Period: time.Second, Burst: 2},
		{Name: "reloaded", Algorithm: store.FixedWindow, Rate: 3, Period: 500 * time.Millisecond},
	}
	keys := []string{"a", "b", "c"}
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprint("batched=", batched), func(t *testing.T) {
			t.Parallel()
			s := newStore(t, c, Config{})
			// What the last write left under each Redis key (name and
			// key), and the limit that wrote it.
			type entry struct {
				st store.State
				l  store.Limit
			}
			model := map[string]entry{}
			rng := rand.New(rand.NewPCG(11, map[bool]uint64{false: 3, true: 4}[batched]))
			outcomes := map[string]int{}
			for round := range 150 {
				if rng.IntN(4) == 0 {
					// Let the limits refill a little.
					time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
				}
				var ps []store.TakeParams
				for range 1 + rng.IntN(6) {
					p := store.TakeParams{Key: keys[rng.IntN(len(keys))], Limit: limits[rng.IntN(len(limits))]}
					p.Cost = rng.Int64N(p.Limit.Max() + 1)
					if rng.IntN(3) == 0 {
						p.MaxDelay = time.Duration(rng.Int64N(int64(time.Second)))
					}
					ps = append(ps, p)
				}
				got := make([]store.Result, len(ps))
				if batched {
					batch := make([]*call, len(ps))
					for i := range ps {
						batch[i] = takeCall(t, s, ctx, &ps[i])
					}
					s.flush(batch)
					for i, cl := range batch {
						res, err := cl.takeResult(&ps[i].Limit)
						require.NoError(t, err)
						got[i] = res
					}
				} else {
					for i := range ps {
						res, err := s.Take(ctx, ps[i])
						require.NoError(t, err)
						got[i] = res
					}
				}
				for i, p := range ps {
					at := got[i].At
					// decide is the reference take of p at at on state
					// st, and the state it leaves.
					decide := func(st store.State) (store.Result, store.State) {
						var res store.Result
						ns := st
						require.NoError(t, store.Eval(&p.Limit, &ns, at, p.Cost, p.MaxDelay, &res))
						if ns != st {
							ns, _ = store.Kept(p.Limit, ns, at)
						}
						return res, ns
					}
					k := p.Limit.Name + "\x00" + p.Key
					e := model[k]
					want, ns := decide(e.st)
					if e.st != (store.State{}) {
						const slack = 5000 // µs
						fa := store.FreshAt(e.l, e.st)
						gone, nsGone := decide(store.State{})
						switch {
						case at > fa+slack, at > fa && got[i] == gone:
							want, ns = gone, nsGone // Redis expired the key
						}
					}
					require.Equal(t, want, got[i], "round %d take %d: %+v", round, i, ps[i])
					switch {
					case ns == (store.State{}):
						delete(model, k)
					case ns != e.st:
						model[k] = entry{ns, p.Limit}
					}
					switch {
					case !got[i].Allowed:
						outcomes["denied"]++
					case got[i].Delay > 0:
						outcomes["delayed"]++
					default:
						outcomes["allowed"]++
					}
				}
			}
			t.Logf("%v", outcomes)
			// The mix must reach every outcome, or the test shows less
			// than it claims.
			require.Positive(t, outcomes["denied"])
			require.Positive(t, outcomes["delayed"])
			require.Positive(t, outcomes["allowed"])
		})
	}
}

// TestGCRATakeOnWindowState checks the fall-through of the GCRA fast path
// on the server's clock: the take reads the window state, replies in the
// fast path's shape, and keeps the window's counts beside the new time.
func TestGCRATakeOnWindowState(t *testing.T) {
	t.Parallel()
	c := single(t)
	s := newStore(t, c, Config{})
	ms := memstore.New(memstore.Config{})
	ctx := context.Background()
	win := store.Limit{Name: "n", Algorithm: store.FixedWindow, Rate: 5, Period: time.Hour}
	gcra := store.Limit{Name: "n", Algorithm: store.GCRA, Rate: 10, Period: time.Hour, Burst: 10}
	take := func(key string, l store.Limit, cost int64) store.Result {
		t.Helper()
		res, err := s.Take(ctx, store.TakeParams{Key: key, Limit: l, Cost: cost})
		require.NoError(t, err)
		want, err := ms.Take(ctx, store.TakeParams{Key: key, Limit: l, Cost: cost, Now: time.UnixMicro(res.At)})
		require.NoError(t, err)
		require.Equal(t, want, res, l.Algorithm.String())
		return res
	}
	k := "k"
	if res := take(k, win, 2); res.ResetAfter < time.Second {
		// The hour ends before the GCRA take could read the window:
		// start again, on another key, in the next hour.
		time.Sleep(res.ResetAfter + 50*time.Millisecond)
		k = "k2"
		take(k, win, 2)
	}
	take(k, gcra, 1)
	key, _ := rateKey(s.Prefix(), k, "n")
	v, err := c.Get(ctx, key).Result()
	require.NoError(t, err)
	require.Len(t, strings.Fields(v), 4, "window state kept beside the TAT, with its fresh time: %q", v)
	ttl, err := c.PTTL(ctx, key).Result()
	require.NoError(t, err)
	require.Positive(t, ttl)
}

// TestStoredLayouts reads the two layouts of a window state: "t c p f",
// absent from its fresh time f on (store.Live), and the "t c p" of older
// versions, which carries no fresh time and reads as it is until Redis
// expires it.
func TestStoredLayouts(t *testing.T) {
	t.Parallel()
	c := single(t)
	s := newStore(t, c, Config{})
	ctx := context.Background()
	// A fixed window of [0, 50ms) from 2030 counted 4 and ended at 50ms;
	// at 60ms a sliding window of the same name reads it.
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	end := base.Add(50 * time.Millisecond).UnixMicro()
	sliding := store.Limit{Name: "layout", Algorithm: store.SlidingWindow, Rate: 4, Period: 50 * time.Millisecond}
	for _, tc := range []struct {
		key, value string
		remaining  int64
	}{
		{"current", fmt.Sprintf("%d 4 0 %d", end, end), 4},
		{"older", fmt.Sprintf("%d 4 0", end), 0},
	} {
		k, _ := rateKey(s.Prefix(), tc.key, sliding.Name)
		require.NoError(t, c.Set(ctx, k, tc.value, time.Hour).Err())
		res, err := s.Take(ctx, store.TakeParams{Key: tc.key, Limit: sliding, Now: base.Add(60 * time.Millisecond)})
		require.NoError(t, err, tc.key)
		require.Equal(t, tc.remaining, res.Remaining, "%s: %q", tc.key, tc.value)
	}
}

// TestBatchReadsLiveState: in one 'b' call, a take after the fresh time of
// the state an earlier take of the call wrote reads nothing (store.Live),
// as the same takes made one by one do on memstore.
func TestBatchReadsLiveState(t *testing.T) {
	t.Parallel()
	c := single(t)
	s := newStore(t, c, Config{})
	ms := memstore.New(memstore.Config{})
	ctx := context.Background()
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	fixed := store.Limit{Name: "live", Algorithm: store.FixedWindow, Rate: 4, Period: 50 * time.Millisecond}
	gcra := store.Limit{Name: "live", Algorithm: store.GCRA, Rate: 1, Period: 50 * time.Millisecond, Burst: 1}
	ps := []store.TakeParams{
		{Key: "k", Limit: fixed, Cost: 2, Now: base.Add(10 * time.Millisecond)},
		{Key: "k", Limit: gcra, Cost: 1, Now: base.Add(70 * time.Millisecond)},
		{Key: "k", Limit: fixed, Cost: 3, Now: base.Add(70 * time.Millisecond)},
	}
	batch := make([]*call, len(ps))
	for i := range ps {
		batch[i] = takeCall(t, s, ctx, &ps[i])
	}
	s.flush(batch)
	for i := range ps {
		got, err := batch[i].takeResult(&ps[i].Limit)
		require.NoError(t, err, "take %d", i)
		want, err := ms.Take(ctx, ps[i])
		require.NoError(t, err, "take %d", i)
		require.Equal(t, want, got, "take %d", i)
	}
	require.EqualValues(t, 1, s.pipelines.Load(), "one pipeline")
	require.EqualValues(t, 3, s.batched.Load(), "of the three takes")
}

// TestGCRATakeOutOfRange checks that a take whose TAT would pass 2^53 us
// fails with ErrOutOfRange and writes nothing, alone and in a batch.
func TestGCRATakeOutOfRange(t *testing.T) {
	t.Parallel()
	c := single(t)
	s := newStore(t, c, Config{})
	ctx := context.Background()
	// The TAT moves by Cost hours a take; two such takes from 2100 pass
	// 2^53 us (year 2255). The max delay lets the second through to the
	// write.
	l := store.Limit{Name: "far", Algorithm: store.GCRA, Rate: 1, Period: time.Hour, Burst: 1_000_000}
	p := store.TakeParams{Key: "direct", Limit: l, Cost: 1_000_000, MaxDelay: 200 * 365 * 24 * time.Hour,
		Now: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)}
	key, _ := rateKey(s.Prefix(), "direct", l.Name)

	res, err := s.Take(ctx, p)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	before, err := c.Get(ctx, key).Result()
	require.NoError(t, err)
	_, err = s.Take(ctx, p)
	require.ErrorIs(t, err, ErrOutOfRange)
	after, err := c.Get(ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, before, after, "a failed take wrote")

	p.Key = "batched"
	batch := []*call{takeCall(t, s, ctx, &p), takeCall(t, s, ctx, &p)}
	s.flush(batch)
	res, err = batch[0].takeResult(&l)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	_, err = batch[1].takeResult(&l)
	require.ErrorIs(t, err, ErrOutOfRange)
}

// takeCall returns the call of p, as the batcher queues it.
func takeCall(t testing.TB, s *Store, ctx context.Context, p *store.TakeParams) *call {
	t.Helper()
	r, err := s.takeRequest(p)
	require.NoError(t, err)
	return newCall(ctx, r, nil)
}

// takeResult waits for the reply of a take's call and returns its Result.
func (c *call) takeResult(l *store.Limit) (store.Result, error) {
	<-c.done
	if c.err != nil {
		return store.Result{}, c.err
	}
	return c.items[0].result(l, c.now), nil
}

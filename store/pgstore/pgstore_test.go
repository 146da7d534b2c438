package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/testenv"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/pgstore"
	"github.com/sluicerl/sluice/store/storetest"
)

// bundle is what setup gives a test: a pool whose search_path is a schema
// of its own, migrated, and a Store over it.
type bundle struct {
	pool   *pgxpool.Pool
	store  *pgstore.Store
	schema string
}

type options struct {
	maxConns int32
}

func setup(tb testing.TB, opts ...options) *bundle {
	tb.Helper()
	var o options
	if len(opts) > 0 {
		o = opts[0]
	}
	ctx := context.Background()
	schema := testenv.PostgresSchema(tb, "sluice_test_")
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
	require.NoError(tb, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 4 // tests run in parallel: stay well below max_connections
	if o.maxConns > 0 {
		cfg.MaxConns = o.maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close) // runs before the schema is dropped
	steps, err := pgstore.Migrate(ctx, pool)
	require.NoError(tb, err)
	require.NotEmpty(tb, steps)
	s, err := pgstore.New(pool, pgstore.Config{})
	require.NoError(tb, err)
	return &bundle{pool: pool, store: s, schema: schema}
}

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func TestConformance(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxConns: 8})
	storetest.Run(t, func(*testing.T) store.RateStore { return b.store })
}

func TestDifferential(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			storetest.Differential(t, b.store, memstore.New(memstore.Config{}), seed, 600)
		})
	}
}

func TestTakeUsesDatabaseClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	l := store.Limit{Name: "clock", Rate: 10, Period: time.Minute}
	before := time.Now()
	res, err := b.store.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
	require.NoError(t, err)
	require.True(t, res.Allowed)
	// The database runs on this machine: its clock is close to ours.
	require.InDelta(t, before.UnixMicro(), res.At, float64(time.Minute/time.Microsecond))
	dbNow, err := b.store.Ping(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, dbNow.UnixMicro(), res.At)
	require.Equal(t, int64(9), res.Remaining)
}

func TestValidationMatchesMemstore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	g := store.Limit{Name: "g", Rate: 10, Period: time.Second, Burst: 5}
	_, err := b.store.Take(ctx, store.TakeParams{Key: "", Limit: g, Cost: 1})
	require.ErrorIs(t, err, store.ErrEmptyKey)
	_, err = b.store.Take(ctx, store.TakeParams{Key: "k", Limit: g, Cost: 6})
	require.ErrorIs(t, err, store.ErrCostExceedsLimit)
	_, err = b.store.Take(ctx, store.TakeParams{Key: "k", Limit: g, Cost: -1})
	require.ErrorIs(t, err, store.ErrNegativeCost)
	_, err = b.store.Take(ctx, store.TakeParams{Key: "k", Limit: store.Limit{Name: "bad", Rate: 0, Period: time.Second}, Cost: 1})
	require.ErrorIs(t, err, store.ErrInvalidLimit)
	_, err = b.store.TakeAll(ctx, store.TakeAllParams{Items: []store.Item{{Key: "k", Limit: g, Cost: 1}, {Key: "k", Limit: g, Cost: 9}}})
	require.ErrorIs(t, err, store.ErrCostExceedsLimit)
	_, err = b.store.Settle(ctx, store.SettleParams{Key: "k", Limit: g, Reserved: -1})
	require.ErrorIs(t, err, store.ErrNegativeCost)
	require.ErrorIs(t, b.store.Reset(ctx, store.ResetParams{Key: "k"}), store.ErrEmptyKey)
	all, err := b.store.TakeAll(ctx, store.TakeAllParams{})
	require.NoError(t, err)
	require.True(t, all.Allowed)
}

// TestHotKeyExact hammers one key from many connections: the admitted cost
// never exceeds what the limit allows, and the store's own count agrees.
func TestHotKeyExact(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxConns: 8})
	ctx := context.Background()
	for _, tc := range []struct {
		l   store.Limit
		now time.Time
	}{
		// On the database's clock: a unit refills in 400h, never within a run.
		{store.Limit{Name: "gcra", Rate: 50, Period: 20000 * time.Hour}, time.Time{}},
		// At a fixed instant: one window, even when the hour turns.
		{store.Limit{Name: "fixed", Algorithm: store.FixedWindow, Rate: 50, Period: time.Hour}, t0},
	} {
		l := tc.l
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 20 {
					cost := int64(1 + (g+i)%3)
					res, err := b.store.Take(ctx, store.TakeParams{Key: "hot", Limit: l, Cost: cost, Now: tc.now})
					if err != nil {
						t.Error(err)
						return
					}
					if res.Allowed {
						admitted.Add(cost)
					}
				}
			}()
		}
		wg.Wait()
		// 16*20 requests of mean cost 2 against a limit of 50.
		require.LessOrEqual(t, admitted.Load(), int64(50), l.Name)
		require.GreaterOrEqual(t, admitted.Load(), int64(48), l.Name) // only a cost that did not fit is left
		peek, err := b.store.Take(ctx, store.TakeParams{Key: "hot", Limit: l, Now: tc.now})
		require.NoError(t, err)
		require.Equal(t, 50-admitted.Load(), peek.Remaining, l.Name)
	}
}

// TestTakeAllNoDeadlock runs all-or-nothing takes over overlapping key sets
// in every order, concurrently with single takes of the same keys:
// PostgreSQL would abort a deadlocked transaction with an error. Every
// decision is at one store-side instant, so that the limit cannot refill
// however slowly the test runs, and each key's remaining budget accounts for
// every charge exactly.
func TestTakeAllNoDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxConns: 8})
	ctx := context.Background()
	l := store.Limit{Name: "multi", Rate: 1000, Period: time.Hour}
	keys := []string{"k1", "k2", "k3", "k4"}
	var wg sync.WaitGroup
	var charged [4]atomic.Int64
	for g := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				switch (g + i) % 5 {
				case 0:
					k := (g + i) % 4
					res, err := b.store.Take(ctx, store.TakeParams{Key: keys[k], Limit: l, Cost: 1, Now: t0})
					if err != nil || !res.Allowed {
						t.Error(err, res)
						return
					}
					charged[k].Add(1)
				default:
					perm := []int{0, 1, 2, 3}
					for j := range perm {
						s := (g*7 + i*3 + j) % 4
						perm[j], perm[s] = perm[s], perm[j]
					}
					items := make([]store.Item, 3)
					for j := range items {
						items[j] = store.Item{Key: keys[perm[j]], Limit: l, Cost: 1}
					}
					res, err := b.store.TakeAll(ctx, store.TakeAllParams{Items: items, Now: t0})
					if err != nil || !res.Allowed {
						t.Error(err, res)
						return
					}
					for j := range items {
						charged[perm[j]].Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	for k, key := range keys {
		peek, err := b.store.Take(ctx, store.TakeParams{Key: key, Limit: l, Now: t0})
		require.NoError(t, err)
		require.Equal(t, 1000-charged[k].Load(), peek.Remaining, key)
	}
}

func TestTakeAllAllOrNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	small := store.Limit{Name: "small", Algorithm: store.FixedWindow, Rate: 2, Period: time.Minute}
	big := store.Limit{Name: "big", Rate: 100, Period: time.Minute}
	items := []store.Item{{Key: "k", Limit: big, Cost: 10}, {Key: "k", Limit: small, Cost: 2}}
	res, err := b.store.TakeAll(ctx, store.TakeAllParams{Items: items, Now: t0})
	require.NoError(t, err)
	require.True(t, res.Allowed)
	res, err = b.store.TakeAll(ctx, store.TakeAllParams{Items: items, Now: t0})
	require.NoError(t, err)
	require.False(t, res.Allowed)
	require.True(t, res.Results[0].Allowed)
	require.False(t, res.Results[1].Allowed)
	peek, err := b.store.Take(ctx, store.TakeParams{Key: "k", Limit: big, Now: t0})
	require.NoError(t, err)
	require.Equal(t, int64(90), peek.Remaining, "the denied call charged nothing")
	// A denied call on new keys leaves no rows behind.
	_, err = b.store.TakeAll(ctx, store.TakeAllParams{Now: t0, Items: []store.Item{
		{Key: "new", Limit: big, Cost: 1}, {Key: "k", Limit: small, Cost: 1}}})
	require.NoError(t, err)
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM sluice_rate_state WHERE key = 'new'").Scan(&n))
	require.Zero(t, n)
}

func TestCleanupDropsOnlyFreshRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	s, err := pgstore.New(b.pool, pgstore.Config{CleanupBatch: 7})
	require.NoError(t, err)
	past := time.Now().Add(-time.Hour)
	l := store.Limit{Name: "c", Rate: 10, Period: time.Second}
	for i := range 30 {
		_, err := s.Take(ctx, store.TakeParams{Key: fmt.Sprint("old", i), Limit: l, Cost: 1, Now: past})
		require.NoError(t, err)
	}
	live := store.Limit{Name: "live", Rate: 10, Period: time.Hour}
	for i := range 5 {
		_, err := s.Take(ctx, store.TakeParams{Key: fmt.Sprint("live", i), Limit: live, Cost: 3})
		require.NoError(t, err)
	}
	n, err := s.Cleanup(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(30), n)
	var left []string
	rows, err := b.pool.Query(ctx, "SELECT key FROM sluice_rate_state")
	require.NoError(t, err)
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	slices.Sort(left)
	require.Equal(t, []string{"live0", "live1", "live2", "live3", "live4"}, left)
	peek, err := s.Take(ctx, store.TakeParams{Key: "live0", Limit: live})
	require.NoError(t, err)
	require.Equal(t, int64(7), peek.Remaining)
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	_, err := pgstore.New(nil, pgstore.Config{})
	require.Error(t, err)
}

// TestBatchedTakesWithDeadlines: goroutines outnumber MaxInFlight, so Takes
// queue and go out in batches, and many give up on short deadlines while
// queued or in flight. Whatever was acknowledged is charged, and nothing is
// admitted past the limit.
func TestBatchedTakesWithDeadlines(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxConns: 8})
	s, err := pgstore.New(b.pool, pgstore.Config{MaxInFlight: 2, MaxBatch: 5})
	require.NoError(t, err)
	l := store.Limit{Name: "batched", Rate: 300, Period: 20000 * time.Hour} // no refill within a run
	var acked, timedOut atomic.Int64
	var wg sync.WaitGroup
	for g := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+(g*i)%40)*time.Millisecond)
				res, err := s.Take(ctx, store.TakeParams{Key: fmt.Sprint("k", (g+i)%3), Limit: l, Cost: 1})
				cancel()
				switch {
				case errors.Is(err, context.DeadlineExceeded):
					timedOut.Add(1)
				case err != nil:
					t.Error(err)
					return
				case res.Allowed:
					acked.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	var charged int64
	for k := range 3 {
		peek, err := s.Take(context.Background(), store.TakeParams{Key: fmt.Sprint("k", k), Limit: l})
		require.NoError(t, err)
		charged += 300 - peek.Remaining
	}
	require.GreaterOrEqual(t, charged, acked.Load())
	require.LessOrEqual(t, charged, acked.Load()+timedOut.Load())
	t.Logf("%d acknowledged, %d timed out, %d charged", acked.Load(), timedOut.Load(), charged)
}

// FuzzDifferential runs storetest.FuzzDifferential against one PostgreSQL
// store shared by every input (SLUICE_INTEGRATION=1).
func FuzzDifferential(f *testing.F) {
	b := setup(f)
	storetest.FuzzDifferential(f, func(*testing.T) store.RateStore { return b.store },
		func() store.RateStore { return memstore.New(memstore.Config{}) })
}

// TestRowsOfOlderVersions reads rows written before migration 0008, which
// have no exact_fresh_at: as they are until their fresh_at (an upper bound),
// and as nothing from then on, as Cleanup may delete them.
func TestRowsOfOlderVersions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// A fixed window of [0, 50ms) counted 4; the old code set fresh_at a
	// minute past its end.
	end := t0.Add(50 * time.Millisecond).UnixMicro()
	_, err := b.pool.Exec(ctx, `INSERT INTO sluice_rate_state (name, key, t, count, prev, fresh_at)
VALUES ('old', 'k', $1, 4, 0, $2)`, end, end+60_000_000)
	require.NoError(t, err)
	sliding := store.Limit{Name: "old", Algorithm: store.SlidingWindow, Rate: 4, Period: 50 * time.Millisecond}
	// At 60ms a sliding window reads the count as its previous window's.
	res, err := b.store.Take(ctx, store.TakeParams{Key: "k", Limit: sliding, Now: t0.Add(60 * time.Millisecond)})
	require.NoError(t, err)
	require.Zero(t, res.Remaining, "read as it is before fresh_at")
	// Once fresh_at has passed, the row is nothing.
	fixed := store.Limit{Name: "old", Algorithm: store.FixedWindow, Rate: 4, Period: 50 * time.Millisecond}
	gcra := store.Limit{Name: "old", Algorithm: store.GCRA, Rate: 1, Period: time.Minute, Burst: 1}
	at := time.UnixMicro(end + 60_000_000)
	res, err = b.store.Take(ctx, store.TakeParams{Key: "k", Limit: gcra, Cost: 1, Now: at})
	require.NoError(t, err)
	require.True(t, res.Allowed)
	res, err = b.store.Take(ctx, store.TakeParams{Key: "k", Limit: fixed, Cost: 4, Now: at})
	require.NoError(t, err)
	require.True(t, res.Allowed, "the old count is gone with its fresh_at: %+v", res)
	var exact int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT exact_fresh_at FROM sluice_rate_state WHERE name = 'old' AND key = 'k'").Scan(&exact))
	require.Equal(t, res.At+res.ResetAfter.Microseconds(), exact, "a write sets the exact fresh time")
}

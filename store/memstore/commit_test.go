package memstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

// checkTable checks, with every shard locked, what the store relies on
// between operations: every slot of the current index holds a live cell
// that a lookup finds, n counts them, and minFresh is a time no later than
// any cell's fresh time (never one of the state word's markers).
func checkTable(t *testing.T, s *Store) {
	t.Helper()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		ix := sh.t.idx.Load()
		n := 0
		for j := range ix.slots {
			c := ix.cellAt(j)
			if c == nil {
				continue
			}
			n++
			w := c.time.Load()
			require.True(t, live(w), "shard %d: cell %q holds marker %d", i, c.key, w)
			h := s.hash(c.key)
			require.Same(t, c, sh.t.find(h, c.name, c.key), "shard %d: %q not found", i, c.key)
			require.LessOrEqual(t, sh.minFresh, c.freshTime(), "shard %d: minFresh after %q's fresh time", i, c.key)
		}
		require.Equal(t, n, sh.t.n, "shard %d", i)
		if n > 0 {
			require.True(t, live(sh.minFresh), "shard %d: minFresh is a marker (%d)", i, sh.minFresh)
		}
		sh.mu.Unlock()
	}
}

// TestTakeAllCommitSweepsNoFrozenCell: a multi-key take whose new keys
// outgrow the shard's sweep threshold part way through its commit must not
// sweep while cells it froze are still frozen (room requires none): the
// sweep would read the frozen marker as a fresh time and leave it in
// minFresh.
func TestTakeAllCommitSweepsNoFrozenCell(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(Config{Shards: 1})
	at := time.Unix(1_700_000_000, 0)
	long := store.Limit{Name: "long", Rate: 1, Period: time.Hour, Burst: 10}
	_, err := s.Take(ctx, store.TakeParams{Key: "held", Limit: long, Cost: 1, Now: at})
	require.NoError(t, err)

	items := make([]store.Item, 0, 1101)
	for i := range 1100 {
		items = append(items, store.Item{Key: "new" + strconv.Itoa(i), Limit: long, Cost: 1})
	}
	items = append(items, store.Item{Key: "held", Limit: long, Cost: 1}) // frozen last
	res, err := s.TakeAll(ctx, store.TakeAllParams{Items: items, Now: at})
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.Equal(t, 1101, s.Len())
	checkTable(t, s)
}

// TestLockedDecisionNotBehindLockFreeOnes: a Sync that read the clock and
// then waited for the shard lock while lock-free takes charged the key at
// later times must not decide at its earlier reading: a provider's "none
// left" would then date from before those takes, and give their budget
// back. (Under the lock alone the clamp kept decisions in time order.)
func TestLockedDecisionNotBehindLockFreeOnes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(Config{})
	l := store.Limit{Name: "n", Rate: 100, Period: time.Second, Burst: 5} // a unit per 10ms
	lp, err := store.Prepare(l)
	require.NoError(t, err)
	var res store.Result
	require.NoError(t, s.TakePrepared("k", lp, 1, &res))
	require.True(t, res.Allowed)

	h := s.hash("k")
	sh := s.shard(h)
	sh.mu.Lock()
	done := make(chan error)
	go func() {
		_, err := s.Sync(ctx, store.SyncParams{Key: "k", Limit: l, Remaining: 0})
		done <- err
	}()
	// Let the clock move past the Sync's reading (if the Sync has not read
	// it yet, the test passes without proving anything; it cannot fail).
	time.Sleep(40 * time.Millisecond)
	for i := 0; ; i++ {
		require.Less(t, i, 10)
		require.NoError(t, s.TakePrepared("k", lp, 1, &res)) // lock-free
		if !res.Allowed {
			break
		}
	}
	sh.mu.Unlock()
	require.NoError(t, <-done)
	require.NoError(t, s.TakePrepared("k", lp, 1, &res))
	require.False(t, res.Allowed, "a Sync decided before the takes it followed gave their budget back")
}

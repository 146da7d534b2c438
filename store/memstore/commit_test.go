package memstore

import (
	"context"
	"runtime"
	"strconv"
	"strings"
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
	// The Sync has read the clock once it waits for the lock. Let the
	// clock move on by more than a unit from there (a sleep only ever
	// lasts longer), so that a decision at that reading would free one.
	waitForLockIn(t, "memstore.(*Store).update", "memstore.TestLockedDecisionNotBehindLockFreeOnes")
	time.Sleep(4 * l.Period / time.Duration(l.Rate))
	for i := 0; ; i++ {
		require.Less(t, i, 1000, "lock-free takes never ran out")
		require.NoError(t, s.TakePrepared("k", lp, 1, &res)) // lock-free
		if !res.Allowed {
			break
		}
	}
	taken := sh.get(h, "n", "k").time.Load() // the TAT the takes left
	sh.mu.Unlock()
	require.NoError(t, <-done)
	synced := sh.get(h, "n", "k").time.Load()
	require.GreaterOrEqual(t, synced, taken,
		"a Sync decided before the takes it followed gave their budget back (its TAT is %dµs earlier)", taken-synced)
}

// waitForLockIn waits until a goroutine that creator started is blocked on
// a mutex inside fn (both as they appear in a goroutine dump), and fails
// the test if none is within a minute.
func waitForLockIn(t *testing.T, fn, creator string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, fn+"(") && strings.Contains(g, "sync.(*Mutex).Lock") &&
				strings.Contains(g, "created by github.com/sluicerl/sluice/store/"+creator+" ") {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no goroutine of %s waited for a lock in %s within a minute", creator, fn)
}

package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/pgstore"
	"github.com/sluicerl/sluice/store/storetest"
)

func TestLeaseConformance(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxConns: 8})
	storetest.RunLeases(t, func(*testing.T) store.LeaseStore { return b.store })
}

// TestLeaseTokensSurviveNewStores: a new Store over the same schema (a
// restarted process) keeps issuing greater tokens, after the key's rows
// are gone.
func TestLeaseTokensSurviveNewStores(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var last int64
	for i := range 3 {
		s, err := pgstore.New(b.pool, pgstore.Config{})
		require.NoError(t, err)
		now := t0.Add(time.Duration(i) * time.Hour)
		res, err := s.Acquire(ctx, store.AcquireParams{Name: "n", Key: "k", Holder: "h", Permits: 1, TTL: time.Second, Now: now})
		require.NoError(t, err)
		require.True(t, res.Acquired)
		require.Greater(t, res.Lease.Token, last)
		last = res.Lease.Token
	}
}

// TestFence: the helper for users' own SQL accepts the holder's token in
// the user's transaction, refuses a stale one, and holds the permit so
// that a successor waits for the user's commit.
func TestFence(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxConns: 8})
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, "CREATE TABLE jobs (id text PRIMARY KEY, cursor text)")
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, "INSERT INTO jobs VALUES ('j', '')")
	require.NoError(t, err)

	// Real time: the function reads the database clock. The lease lasts
	// until its renewal below shortens it, however slow the steps between.
	a, err := b.store.Acquire(ctx, store.AcquireParams{Name: "job", Key: "j", Holder: "a", Permits: 1, TTL: time.Minute})
	require.NoError(t, err)
	require.True(t, a.Acquired)

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }() // on failure: the schema's cleanup would wait for its locks
	require.NoError(t, pgstore.Fence(ctx, tx, "job", "j", a.Lease.Token))
	var txPID int
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&txPID))
	_, err = tx.Exec(ctx, "UPDATE jobs SET cursor = 'a' WHERE id = 'j'")
	require.NoError(t, err)

	// The fence blocks a take-over only: the holder's keep-alive still
	// renews, and a refused acquirer is answered, while tx is open (one
	// that waited for tx would wait until the deadline).
	short, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = b.store.Renew(short, store.RenewParams{Name: "job", Key: "j", Holder: "a", Token: a.Lease.Token, TTL: 500 * time.Millisecond})
	require.NoError(t, err, "the holder's renewal waited for its own transaction")
	c, err := b.store.Acquire(short, store.AcquireParams{Name: "job", Key: "j", Holder: "c", Permits: 1, TTL: time.Minute})
	require.NoError(t, err, "a refused acquire waited for the fenced transaction")
	require.False(t, c.Acquired)

	// A successor arriving after the lease ended must wait for the commit.
	got := make(chan store.AcquireResult, 1)
	go func() {
		for {
			res, err := b.store.Acquire(ctx, store.AcquireParams{Name: "job", Key: "j", Holder: "b", Permits: 1, TTL: time.Minute})
			if err != nil {
				t.Error(err)
				close(got)
				return
			}
			if res.Acquired {
				got <- res
				return
			}
			time.Sleep(res.RetryAfter)
		}
	}()
	// Once a's renewed TTL has passed the successor tries to take over,
	// and must then be blocked by tx, not given the permit.
	for deadline := time.Now().Add(time.Minute); ; {
		var blocked bool
		require.NoError(t, b.pool.QueryRow(ctx,
			"SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid)))", txPID).Scan(&blocked))
		if blocked {
			break
		}
		select {
		case <-got:
			t.Fatal("a successor took the permit while the fenced transaction was open")
		case <-time.After(5 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "no successor waited for the fenced transaction within a minute")
	}
	select {
	case <-got:
		t.Fatal("a successor took the permit while the fenced transaction was open")
	default:
	}
	require.NoError(t, tx.Commit(ctx))
	bres, ok := <-got
	require.True(t, ok)
	require.Greater(t, bres.Lease.Token, a.Lease.Token)

	// a's token is stale now: its transaction fails and writes nothing.
	tx, err = b.pool.Begin(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, pgstore.Fence(ctx, tx, "job", "j", a.Lease.Token), store.ErrStaleToken)
	require.NoError(t, tx.Rollback(ctx))
	var cursor string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT cursor FROM jobs WHERE id = 'j'").Scan(&cursor))
	require.Equal(t, "a", cursor)
}

func TestLeaseDifferential(t *testing.T) {
	t.Parallel()
	b := setup(t)
	storetest.LeaseDifferential(t, b.store, memstore.NewLeases(memstore.LeasesConfig{}), 7, 1500)
}

func TestCleanupLeases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := time.Now()
	for i, ttl := range []time.Duration{time.Millisecond, time.Hour} {
		res, err := b.store.Acquire(ctx, store.AcquireParams{Name: "n", Key: "k", Holder: fmt.Sprint("h", i), Permits: 2, TTL: ttl, Now: now.Add(-time.Minute)})
		require.NoError(t, err)
		require.True(t, res.Acquired)
	}
	n, err := b.store.CleanupLeases(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "only the expired permit")
	var left int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM sluice_lease_holder").Scan(&left))
	require.Equal(t, 1, left)
	res, err := b.store.Acquire(ctx, store.AcquireParams{Name: "n", Key: "k", Holder: "h2", Permits: 2, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, res.Acquired)
	require.Equal(t, int64(3), res.Lease.Token, "tokens go on")
}

func TestLeaseAcrossStores(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other, err := pgstore.New(b.pool, pgstore.Config{})
	require.NoError(t, err)
	storetest.LeaseAcrossStores(t, b.store, other)
}

// TestTakeAllAcquireRefusalAnnounces: a lease refused by TakeAllAcquire,
// like one refused by Acquire, makes the holder's release announce itself
// to waiters; nothing is charged.
func TestTakeAllAcquireRefusalAnnounces(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxConns: 8})
	ctx := context.Background()
	ch, stop, err := b.store.WatchLease(ctx, "n", "k")
	require.NoError(t, err)
	defer stop()
	a, err := b.store.Acquire(ctx, store.AcquireParams{Name: "n", Key: "k", Holder: "a", Permits: 1, TTL: time.Minute})
	require.NoError(t, err)
	require.True(t, a.Acquired)
	lim := store.Limit{Name: "r", Rate: 2, Period: time.Second, Burst: 2}
	res, err := b.store.TakeAllAcquire(ctx, store.TakeAllAcquireParams{
		Items: []store.Item{{Key: "k", Limit: lim, Cost: 1}},
		Lease: store.AcquireParams{Name: "n", Key: "k", Holder: "b", Permits: 1, TTL: time.Minute},
	})
	require.NoError(t, err)
	require.False(t, res.Allowed)
	require.False(t, res.Lease.Acquired)
	peek, err := b.store.Take(ctx, store.TakeParams{Key: "k", Limit: lim})
	require.NoError(t, err)
	require.Equal(t, int64(2), peek.Remaining, "nothing charged")
	require.NoError(t, b.store.Release(ctx, store.ReleaseParams{Name: "n", Key: "k", Holder: "a", Token: a.Lease.Token}))
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatal("the release a refused TakeAllAcquire waits for was not announced")
	}
}

// FuzzLeaseDifferential runs storetest.FuzzLeaseDifferential against one
// PostgreSQL store shared by every input (SLUICE_INTEGRATION=1).
func FuzzLeaseDifferential(f *testing.F) {
	b := setup(f)
	storetest.FuzzLeaseDifferential(f, func(*testing.T) store.LeaseStore { return b.store },
		func() store.LeaseStore { return memstore.NewLeases(memstore.LeasesConfig{}) })
}

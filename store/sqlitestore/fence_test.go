package sqlitestore_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/sluicerl/sluice/store"
)

// TestFence: a user's own transaction on the same file commits a write only
// while its token holds the permit; a released, expired or superseded token
// is refused, and the write rolled back never lands.
func TestFence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := newStore(t)
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	_, err = db.ExecContext(ctx, "CREATE TABLE cursor (id integer PRIMARY KEY, page text, token bigint)")
	require.NoError(t, err)

	write := func(token int64, page string) error {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		// Write first, so that the transaction holds SQLite's write lock
		// before the check.
		if _, err := tx.ExecContext(ctx, "INSERT OR REPLACE INTO cursor (id, page, token) VALUES (1, ?, ?)", page, token); err != nil {
			return err
		}
		if err := s.Fence(ctx, tx, "jobs", "sync-1", token); err != nil {
			return err
		}
		return tx.Commit()
	}
	page := func() string {
		var p string
		require.NoError(t, db.QueryRowContext(ctx, "SELECT page FROM cursor WHERE id = 1").Scan(&p))
		return p
	}

	a, err := s.Acquire(ctx, store.AcquireParams{Name: "jobs", Key: "sync-1", Holder: "a", Permits: 1, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, a.Acquired)
	require.NoError(t, write(a.Lease.Token, "page-1"))
	require.Equal(t, "page-1", page())

	// Released: a's token is stale, and its write does not land.
	require.NoError(t, s.Release(ctx, store.ReleaseParams{Name: "jobs", Key: "sync-1", Holder: "a", Token: a.Lease.Token}))
	require.ErrorIs(t, write(a.Lease.Token, "stale"), store.ErrStaleToken)
	require.Equal(t, "page-1", page())

	// A successor's token writes; the old one stays refused.
	b, err := s.Acquire(ctx, store.AcquireParams{Name: "jobs", Key: "sync-1", Holder: "b", Permits: 1, TTL: time.Hour})
	require.NoError(t, err)
	require.Greater(t, b.Lease.Token, a.Lease.Token)
	require.NoError(t, write(b.Lease.Token, "page-2"))
	require.ErrorIs(t, write(a.Lease.Token, "stale"), store.ErrStaleToken)
	require.Equal(t, "page-2", page())

	// Expired on the store clock: a lease taken an hour ago for a minute.
	c, err := s.Acquire(ctx, store.AcquireParams{Name: "jobs", Key: "sync-2", Holder: "c", Permits: 1, TTL: time.Minute,
		Now: time.Now().Add(-time.Hour)})
	require.NoError(t, err)
	require.True(t, c.Acquired)
	require.ErrorIs(t, s.Fence(ctx, db, "jobs", "sync-2", c.Lease.Token), store.ErrStaleToken)

	require.ErrorIs(t, s.Fence(ctx, db, "", "k", 1), store.ErrEmptyKey)
}

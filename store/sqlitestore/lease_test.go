package sqlitestore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/sqlitestore"
	"github.com/sluicerl/sluice/store/storetest"
)

func TestLeaseConformance(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	storetest.RunLeases(t, func(*testing.T) store.LeaseStore { return s })
}

// TestLeaseTokensSurviveRestart: tokens keep increasing after the file is
// closed and opened again, and after the key's rows are gone.
func TestLeaseTokensSurviveRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "leases.db")
	var last int64
	for i := range 3 {
		s, err := sqlitestore.Open(ctx, path, sqlitestore.Config{})
		require.NoError(t, err)
		now := t0.Add(time.Duration(i) * time.Hour)
		res, err := s.Acquire(ctx, store.AcquireParams{Name: "n", Key: "k", Holder: "h", Permits: 1, TTL: time.Second, Now: now})
		require.NoError(t, err)
		require.True(t, res.Acquired)
		require.Greater(t, res.Lease.Token, last)
		last = res.Lease.Token
		if i == 1 {
			require.NoError(t, s.Release(ctx, store.ReleaseParams{Name: "n", Key: "k", Holder: "h", Token: last, Now: now}))
		}
		require.NoError(t, s.Close())
	}
}

func TestLeaseDifferential(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	storetest.LeaseDifferential(t, s, memstore.NewLeases(memstore.LeasesConfig{}), 7, 1500)
}

func TestCleanupLeases(t *testing.T) {
	t.Parallel()
	s, path := newStore(t)
	ctx := context.Background()
	now := time.Now()
	for i, ttl := range []time.Duration{time.Millisecond, time.Hour} {
		res, err := s.Acquire(ctx, store.AcquireParams{Name: "n", Key: "k", Holder: string(rune('a' + i)), Permits: 2, TTL: ttl, Now: now.Add(-time.Minute)})
		require.NoError(t, err)
		require.True(t, res.Acquired)
	}
	n, err := s.CleanupLeases(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "only the expired permit")
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	var left int
	require.NoError(t, db.QueryRow("SELECT count(*) FROM sluice_lease_holder").Scan(&left))
	require.Equal(t, 1, left)
}

func TestLeaseAcrossStores(t *testing.T) {
	t.Parallel()
	a, path := newStore(t)
	b := open(t, path, sqlitestore.Config{})
	storetest.LeaseAcrossStores(t, a, b)
}

// FuzzLeaseDifferential runs storetest.FuzzLeaseDifferential against one
// SQLite store shared by every input.
func FuzzLeaseDifferential(f *testing.F) {
	s, _ := newStore(f)
	storetest.FuzzLeaseDifferential(f, func(*testing.T) store.LeaseStore { return s },
		func() store.LeaseStore { return memstore.NewLeases(memstore.LeasesConfig{}) })
}

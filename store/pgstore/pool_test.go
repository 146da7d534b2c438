package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/testenv"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/pgstore"
)

// TestTimedOutCallKeepsItsConnection: a Take that times out while it waits
// for a row lock is cancelled on the server, and its connection goes back
// to the pool: the next call opens no new session.
func TestTimedOutCallKeepsItsConnection(t *testing.T) {
	t.Parallel()
	b := setup(t) // migrates the schema
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testenv.WithSearchPath(testenv.PostgresURL(), b.schema))
	require.NoError(t, err)
	cfg.MaxConns = 1
	pgstore.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	st, err := pgstore.New(pool, pgstore.Config{MaxBatch: 1})
	require.NoError(t, err)
	l := store.Limit{Name: "lock", Rate: 10, Period: time.Second}
	_, err = st.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
	require.NoError(t, err)
	var pid int32
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))

	// Hold the key's row locked from another session, so a take waits.
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT * FROM sluice_rate_state WHERE name = 'lock' AND key = 'k' FOR UPDATE")
	require.NoError(t, err)
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = st.Take(tctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
	cancel()
	require.Error(t, err, "the take waited for the lock past its deadline")
	require.NoError(t, tx.Rollback(ctx))

	_, err = st.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
	require.NoError(t, err)
	var after int32
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&after))
	require.Equal(t, pid, after, "the timed-out call's session is reused")
	require.Equal(t, int64(1), pool.Stat().NewConnsCount(), "sessions opened")
}

// TestInvalidUTF8KeyIsARequestError: a key PostgreSQL cannot store is
// refused as the request's fault, by the identifier rule, before the
// database is asked (a refusal the database would make is
// store.ErrInvalidValue: TestDatabaseRefusalIsARequestError).
func TestInvalidUTF8KeyIsARequestError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, key := range []string{"bad\xff", "a\x00b"} {
		_, err := b.store.Take(context.Background(), store.TakeParams{Key: key, Limit: store.Limit{Name: "x", Rate: 1, Period: time.Second}, Cost: 1})
		require.ErrorIs(t, err, store.ErrInvalidID, "%q", key)
	}
}

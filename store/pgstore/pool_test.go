package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	pool, st := onePool(t, b, nil)
	l := store.Limit{Name: "lock", Rate: 10, Period: time.Second}
	_, err := st.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
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

// TestStrayCancelIsRunAgain: a cancel request that reaches PostgreSQL
// while the connection runs another call's statement (pgx sends one for a
// call whose context ended, and on a busy machine it can arrive after the
// connection went back to the pool) cancels that statement though its own
// context is alive. The statement was rolled back, so it is run again: the
// caller gets its answer, charged once, and no error that would make the
// guard take the store for broken.
func TestStrayCancelIsRunAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	pool, st := onePool(t, b, nil)
	l := store.Limit{Name: "stray", Rate: 10, Period: time.Hour}
	_, err := st.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
	require.NoError(t, err)
	var pid int32
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))

	ops := []struct {
		name string
		lock string // what another session holds so that the call waits
		call func() error
	}{
		{"take", "SELECT * FROM sluice_rate_state WHERE name = 'stray' AND key = 'k' FOR UPDATE", func() error {
			_, err := st.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
			return err
		}},
		{"settle", "SELECT * FROM sluice_rate_state WHERE name = 'stray' AND key = 'k' FOR UPDATE", func() error {
			_, err := st.Settle(ctx, store.SettleParams{Key: "k", Limit: l, Reserved: 1, Actual: 2})
			return err
		}},
		{"holders", "LOCK TABLE sluice_lease_holder IN ACCESS EXCLUSIVE MODE", func() error {
			_, err := st.Holders(ctx, store.HoldersParams{Name: "stray", Key: "k"})
			return err
		}},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			tx, err := b.pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = tx.Exec(ctx, op.lock)
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() { done <- op.call() }()
			began := waitLocked(t, b, pid, time.Time{}, done)
			var sent bool
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT pg_cancel_backend($1)", pid).Scan(&sent))
			require.True(t, sent)
			// Cancelled, the call is run again (a statement that began
			// later) and waits on the lock again, rather than answering
			// with the cancel.
			waitLocked(t, b, pid, began, done)
			require.NoError(t, tx.Rollback(ctx))
			select {
			case err := <-done:
				require.NoError(t, err, "a cancel meant for another statement is not this call's failure")
			case <-time.After(time.Minute):
				t.Fatal("no answer within a minute of the lock's release")
			}
		})
	}
	// Each retried statement charged once: 1 + 1 (take) + 1 (settle 1 -> 2).
	r, err := st.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 0})
	require.NoError(t, err)
	require.Equal(t, int64(10-3), r.Remaining)
}

// waitLocked waits until session pid waits for a lock in a statement that
// began after after, and returns when that statement began. The call on
// pid must not answer meanwhile: done receives its answer.
func waitLocked(t *testing.T, b *bundle, pid int32, after time.Time, done <-chan error) time.Time {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for {
		var began time.Time
		err := b.pool.QueryRow(ctx,
			"SELECT query_start FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock' AND query_start > $2",
			pid, after).Scan(&began)
		if err == nil {
			return began
		}
		require.ErrorIs(t, err, pgx.ErrNoRows)
		select {
		case err := <-done:
			t.Fatalf("the call answered while the lock was held: %v", err)
		default:
		}
		require.True(t, time.Now().Before(deadline), "session %d never waited for a lock in a statement begun after %s", pid, after)
		time.Sleep(5 * time.Millisecond)
	}
}

// TestStatementTimeoutIsATimeout: a statement PostgreSQL cancels on its own
// (statement_timeout) while the caller's context is alive is reported as a
// timeout (the guard counts it toward sustained timeouts), not as a
// connection error that declares the store down at once.
func TestStatementTimeoutIsATimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, st := onePool(t, b, map[string]string{"statement_timeout": "50"})
	l := store.Limit{Name: "slow", Rate: 10, Period: time.Hour}
	_, err := st.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
	require.NoError(t, err)
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SELECT * FROM sluice_rate_state WHERE name = 'slow' AND key = 'k' FOR UPDATE")
	require.NoError(t, err)
	_, err = st.Take(ctx, store.TakeParams{Key: "k", Limit: l, Cost: 1})
	require.Error(t, err)
	var te interface{ Timeout() bool }
	require.Truef(t, errors.As(err, &te) && te.Timeout(), "a statement_timeout is a timeout: %v", err)
	require.NotErrorIs(t, err, store.ErrInvalidValue)
}

// onePool returns a store on a pool of one connection to b's schema,
// configured as serve configures its pools (ConfigurePool), with params
// set on the session, and unbatched takes.
func onePool(t *testing.T, b *bundle, params map[string]string) (*pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.WithSearchPath(testenv.PostgresURL(), b.schema))
	require.NoError(t, err)
	cfg.MaxConns = 1
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pgstore.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	st, err := pgstore.New(pool, pgstore.Config{MaxBatch: 1})
	require.NoError(t, err)
	return pool, st
}

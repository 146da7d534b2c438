package pgstore

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/internal/testenv"
	"github.com/sluicerl/sluice/store"
)

// TestInFlightDefaults needs no server: pgxpool connects lazily.
func TestInFlightDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	cfg.MaxConns = 7
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	for _, tc := range []struct {
		cfg  Config
		want int
	}{
		{Config{}, 4},                            // batching: few in flight, big batches
		{Config{MaxBatch: 1}, 7},                 // no batching: every connection
		{Config{MaxBatch: 1, MaxInFlight: 2}, 2}, // as given
		{Config{MaxInFlight: 3}, 3},
	} {
		s, err := New(pool, tc.cfg)
		require.NoError(t, err)
		require.Equal(t, tc.want, s.maxInFlight, "%+v", tc.cfg)
	}
}

// TestRequestSQLStatesAreRequestErrors: the data exceptions PostgreSQL
// raises for a request's own values are store.ErrInvalidValue (a 4xx that
// never counts toward an outage); other server errors are not.
func TestRequestSQLStatesAreRequestErrors(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bool{
		"22021": true, "22P05": true, "22003": true, "54000": true,
		"57014": false, "53300": false, "40001": false, "XX000": false,
	} {
		err := wrap("take", &pgconn.PgError{Code: code, Message: "m"})
		require.Equal(t, want, errors.Is(err, store.ErrInvalidValue), code)
	}
	require.ErrorIs(t, wrap("settle", &pgconn.PgError{Code: sqlStateCostExceeds}), store.ErrCostExceedsLimit)
	require.ErrorIs(t, wrap("take", &pgconn.PgError{Code: sqlStateOutOfRange}), store.ErrOutOfRange)
	// Every code the functions raise means one thing: the lease fence's
	// stale token is not a rate's out-of-range state.
	codes := []string{sqlStateCostExceeds, sqlStateOutOfRange, SQLStateStaleToken}
	require.Len(t, map[string]bool{codes[0]: true, codes[1]: true, codes[2]: true}, len(codes))
	require.NotErrorIs(t, wrap("take", &pgconn.PgError{Code: SQLStateStaleToken}), store.ErrOutOfRange)
}

// TestDatabaseRefusalIsARequestError: a value the database itself refuses
// (here text that is not UTF-8, SQLSTATE 22021, which the identifier rule
// keeps from any key) comes back from wrap as store.ErrInvalidValue, a
// request error, and not as a store failure.
func TestDatabaseRefusalIsARequestError(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), testenv.PostgresURL())
	require.NoError(t, err)
	defer pool.Close()
	var s string
	err = pool.QueryRow(context.Background(), "SELECT $1::text", "bad\xff").Scan(&s)
	if err != nil && !errors.As(err, new(*pgconn.PgError)) {
		testenv.Unreachable(t, "PostgreSQL", err)
	}
	require.Error(t, err, "PostgreSQL took text that is not UTF-8")
	require.ErrorIs(t, wrap("take", err), store.ErrInvalidValue)
}

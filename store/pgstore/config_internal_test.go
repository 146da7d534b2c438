package pgstore

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

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
}

package pgstore

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
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

package cli

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

func TestCleanupsOf(t *testing.T) {
	t.Parallel()
	st, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "s.db"), sqlitestore.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	var whats []string
	for _, c := range cleanupsOf(st) {
		whats = append(whats, c.what)
	}
	require.Equal(t, []string{"rate state", "expired leases"}, whats)
	require.Empty(t, cleanupsOf(struct{}{}))
}

// TestRunCleanupsDeletesStaleRows: a SQLite state store's rate row is gone
// once its state equals a fresh key, without anyone calling Cleanup.
func TestRunCleanupsDeletesStaleRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "s.db"), sqlitestore.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	lim := store.Limit{Name: "api", Rate: 1000, Period: time.Second, Burst: 1000}
	_, err = st.Take(ctx, store.TakeParams{Key: "k", Limit: lim, Cost: 1})
	require.NoError(t, err)

	var deleted atomic.Int64
	counting := []cleanup{{"rate state", func(ctx context.Context) (int64, error) {
		n, err := st.Cleanup(ctx)
		deleted.Add(n)
		return n, err
	}}}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runCleanups(cctx, slog.New(slog.DiscardHandler), counting, 5*time.Millisecond)
	}()
	require.Eventually(t, func() bool { return deleted.Load() == 1 }, time.Minute, 5*time.Millisecond)
	cancel()
	<-done
}

func TestRunCleanupsKeepsGoingAfterErrors(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	failing := []cleanup{{"rate state", func(context.Context) (int64, error) {
		calls.Add(1)
		return 0, errors.New("database is locked")
	}}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); runCleanups(ctx, slog.New(slog.DiscardHandler), failing, time.Millisecond) }()
	require.Eventually(t, func() bool { return calls.Load() >= 3 }, time.Minute, time.Millisecond)
	cancel()
	<-done // returns once ctx ends

	// Off: an interval of 0 returns at once without calling anything.
	before := calls.Load()
	runCleanups(t.Context(), slog.New(slog.DiscardHandler), failing, 0)
	require.Equal(t, before, calls.Load())
}

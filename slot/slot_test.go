package slot_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/slot"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/sqlitestore"
)

func newStore(t *testing.T) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "slots.db"), sqlitestore.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// seeded is a concurrency-safe seeded jitter source.
func seeded(seed uint64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := slot.New(slot.Config{Store: newStore(t), MaxBatch: -1})
	require.ErrorContains(t, err, "MaxBatch")
	// No store: in memory.
	s, err := slot.New(slot.Config{})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = s.PutConfig(ctx, store.SlotConfig{Name: "m", MaxPerWindow: 1, WindowSize: time.Second})
	require.NoError(t, err)
	a, err := s.Assign(ctx, "e1", "m", t0)
	require.NoError(t, err)
	b, err := s.Assign(ctx, "e2", "m", t0)
	require.NoError(t, err)
	require.Equal(t, t0.Add(time.Second), b.WindowStart)
	require.Equal(t, t0, a.WindowStart)
}

func TestConfigCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	clk := clocktest.New(t0)
	a, err := slot.New(slot.Config{Store: st, Clock: clk})
	require.NoError(t, err)
	b, err := slot.New(slot.Config{Store: st, Clock: clk}) // another process
	require.NoError(t, err)

	_, err = a.Config(ctx, "default")
	require.ErrorIs(t, err, slot.ErrConfigNotFound)
	_, err = a.PutConfig(ctx, store.SlotConfig{Name: "default", MaxPerWindow: 100, WindowSize: 4 * time.Second})
	require.NoError(t, err)
	c, err := b.Config(ctx, "default")
	require.NoError(t, err)
	require.Equal(t, int64(1), c.Version)

	_, err = a.PutConfig(ctx, store.SlotConfig{Name: "default", MaxPerWindow: 50, WindowSize: 4 * time.Second})
	require.NoError(t, err)
	// b still has version 1 cached...
	c, err = b.Config(ctx, "default")
	require.NoError(t, err)
	require.Equal(t, int64(1), c.Version)
	// ...until the TTL passes,
	clk.Advance(slot.DefaultCacheTTL)
	c, err = b.Config(ctx, "default")
	require.NoError(t, err)
	require.Equal(t, int64(2), c.Version)
	// or at once after a flush.
	require.NoError(t, a.Deactivate(ctx, "default"))
	_, err = a.Config(ctx, "default")
	require.ErrorIs(t, err, slot.ErrConfigNotFound)
	c, err = b.Config(ctx, "default")
	require.NoError(t, err)
	require.Equal(t, int64(2), c.Version)
	b.Flush("default")
	_, err = b.Config(ctx, "default")
	require.ErrorIs(t, err, slot.ErrConfigNotFound)
	_, err = b.Assign(ctx, "e", "default", t0)
	require.ErrorIs(t, err, slot.ErrConfigNotFound)
}

func TestAssignIsReproducibleWithSeededJitter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	run := func() []slot.Slot {
		s, err := slot.New(slot.Config{Store: newStore(t), Jitter: seeded(42)})
		require.NoError(t, err)
		_, err = s.PutConfig(ctx, store.SlotConfig{Name: "default", MaxPerWindow: 3, WindowSize: 4 * time.Second})
		require.NoError(t, err)
		var out []slot.Slot
		for i := range 10 {
			sl, err := s.Assign(ctx, fmt.Sprint("e", i), "default", t0.Add(time.Second))
			require.NoError(t, err)
			out = append(out, sl)
		}
		return out
	}
	a, b := run(), run()
	require.Equal(t, a, b)
	// Proportional first window: 3 * 3/4 -> 2 slots, then 3 a window.
	require.Equal(t, t0, a[1].WindowStart)
	require.Equal(t, t0.Add(4*time.Second), a[2].WindowStart)
}

func TestAssignBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := slot.New(slot.Config{Store: newStore(t), Jitter: seeded(1), MaxBatch: 500})
	require.NoError(t, err)
	_, err = s.PutConfig(ctx, store.SlotConfig{Name: "bulk", MaxPerWindow: 100, WindowSize: 4 * time.Second})
	require.NoError(t, err)
	evs := make([]slot.Event, 500)
	for i := range evs {
		evs[i] = slot.Event{EventID: fmt.Sprint("b", i), RequestedTime: t0}
	}
	res, err := s.AssignBatch(ctx, "bulk", evs)
	require.NoError(t, err)
	for i, r := range res {
		require.NoError(t, r.Err)
		require.Equal(t, t0.Add(time.Duration(i/100)*4*time.Second), r.Slot.WindowStart)
	}
	_, err = s.AssignBatch(ctx, "bulk", append(evs, slot.Event{EventID: "x", RequestedTime: t0}))
	require.ErrorIs(t, err, slot.ErrBatchTooLarge)
	_, err = s.AssignBatch(ctx, "bulk", []slot.Event{{EventID: "", RequestedTime: t0}})
	require.ErrorIs(t, err, store.ErrInvalidEvent)
	_, err = s.AssignBatch(ctx, "nope", evs[:1])
	require.ErrorIs(t, err, slot.ErrConfigNotFound)
	got, err := s.Get(ctx, "b250")
	require.NoError(t, err)
	require.Equal(t, t0.Add(8*time.Second), got.WindowStart)
	rep, err := s.Verify(ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.Equal(t, int64(500), rep.Slots)
}

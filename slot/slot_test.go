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

// TestJitterIsUniform: with a uniform jitter source, scheduled times spread
// evenly over the window (a chi-square test on 10 buckets, 9 degrees of
// freedom, below 27.88, its 0.1% critical value), and in the requested
// window only over its remaining part.
func TestJitterIsUniform(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := slot.New(slot.Config{Jitter: seeded(7), MaxBatch: 10_000})
	require.NoError(t, err)
	const n = 10_000
	_, err = s.PutConfig(ctx, store.SlotConfig{Name: "u", MaxPerWindow: n, WindowSize: 10 * time.Second})
	require.NoError(t, err)
	// Asked for 5 s into the window: n/2 fit there, in [5s, 10s); the
	// other half fill the next window, over all of it.
	req := t0.Add(5 * time.Second)
	evs := make([]slot.Event, n)
	for i := range evs {
		evs[i] = slot.Event{EventID: fmt.Sprint("u", i), RequestedTime: req}
	}
	res, err := s.AssignBatch(ctx, "u", evs)
	require.NoError(t, err)
	var first, second [10]int
	for _, r := range res {
		require.NoError(t, r.Err)
		off := r.Slot.ScheduledTime.Sub(r.Slot.WindowStart)
		switch r.Slot.WindowStart {
		case t0:
			require.GreaterOrEqual(t, off, 5*time.Second)
			first[(off-5*time.Second)/(500*time.Millisecond)]++
		case t0.Add(10 * time.Second):
			second[off/time.Second]++
		default:
			t.Fatalf("window %s", r.Slot.WindowStart)
		}
	}
	chi2 := func(b [10]int) float64 {
		var x float64
		for _, o := range b {
			d := float64(o) - n/2/10
			x += d * d / (n / 2 / 10)
		}
		return x
	}
	require.Less(t, chi2(first), 27.88, "first window: %v", first)
	require.Less(t, chi2(second), 27.88, "second window: %v", second)
	require.Equal(t, n/2, sum(first[:]))
	require.Equal(t, n/2, sum(second[:]))
}

func sum(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}

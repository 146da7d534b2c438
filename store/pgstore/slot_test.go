package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/slottest"
)

func TestSlotConformance(t *testing.T) {
	t.Parallel()
	slottest.Run(t, func(t *testing.T) store.SlotStore { return setup(t, options{maxConns: 8}).store })
}

// TestSlotLockedWindowsSkipped: windows another transaction holds are
// skipped, never waited on, and past the headroom the search gives up with
// ErrExhausted.
func TestSlotLockedWindowsSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	c, err := b.store.PutSlotConfig(ctx, store.SlotConfig{Name: "lk", MaxPerWindow: 5, WindowSize: time.Second, Headroom: 3})
	require.NoError(t, err)
	t0 := slottest.T0
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	lock := func(i int) {
		var ok bool
		require.NoError(t, tx.QueryRow(ctx, "SELECT sluice_slot_lock($1, $2)", "lk", t0.Add(time.Duration(i)*time.Second).UnixMicro()).Scan(&ok))
		require.True(t, ok)
	}
	// Hold the requested window and the next two: the fourth is taken.
	for i := range 3 {
		lock(i)
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sl, err := b.store.AssignSlot(actx, store.AssignSlotParams{Config: c, Event: store.SlotEvent{EventID: "a", RequestedTime: t0, Jitter: 0.5}})
	require.NoError(t, err)
	require.Equal(t, t0.Add(3*time.Second), sl.WindowStart)
	// Hold three more: nothing within the headroom of 3 after window 1.
	for i := 3; i < 6; i++ {
		lock(i)
	}
	_, err = b.store.AssignSlot(actx, store.AssignSlotParams{Config: c, Event: store.SlotEvent{EventID: "b", RequestedTime: t0, Jitter: 0.5}})
	require.ErrorIs(t, err, store.ErrExhausted)
	res, err := b.store.AssignSlots(actx, store.AssignSlotsParams{Config: c, Events: []store.SlotEvent{{EventID: "c", RequestedTime: t0}}})
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, store.ErrExhausted)
	require.NoError(t, tx.Rollback(ctx))
	sl, err = b.store.AssignSlot(ctx, store.AssignSlotParams{Config: c, Event: store.SlotEvent{EventID: "b", RequestedTime: t0, Jitter: 0.5}})
	require.NoError(t, err)
	require.Equal(t, t0, sl.WindowStart)
	slottest.Verify(t, b.store)
}

// TestSlotConcurrentBatches: three bulk loads of one instant at once. Each
// transaction holds many windows, so the other's search finds them held
// and runs out of headroom; the retry rounds let every event through once
// the holder commits.
func TestSlotConcurrentBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, options{maxConns: 4})
	ctx := context.Background()
	c, err := b.store.PutSlotConfig(ctx, store.SlotConfig{Name: "cb", MaxPerWindow: 10, WindowSize: time.Second, Headroom: 5})
	require.NoError(t, err)
	const n = 3000
	var wg sync.WaitGroup
	const loads = 3
	errs := make([]error, loads)
	for g := range loads {
		wg.Go(func() {
			evs := make([]store.SlotEvent, n)
			for i := range evs {
				evs[i] = store.SlotEvent{EventID: fmt.Sprintf("cb%d-%d", g, i), RequestedTime: slottest.T0, Jitter: 0.5}
			}
			res, err := b.store.AssignSlots(ctx, store.AssignSlotsParams{Config: c, Events: evs})
			errs[g] = err
			for _, r := range res {
				errs[g] = errors.Join(errs[g], r.Err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	rep := slottest.Verify(t, b.store)
	require.Equal(t, int64(loads*n), rep.Slots)
}

// TestSlotNeedsReadCommitted: under a stronger isolation the count read
// after a window's lock could be stale, so the functions refuse to run.
func TestSlotNeedsReadCommitted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT * FROM sluice_slot_assign('x', 1, 10, 1000000, 100, 'e', 0, 0.5)")
	require.ErrorContains(t, err, "assignments need READ COMMITTED isolation, not repeatable read")
}

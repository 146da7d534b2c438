package sqlitestore

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

// TestSlotSkipDoesNotWalk: after 50 full windows, placing an event counts
// only the requested window and the first open one: the skip goes through
// the index of open windows, never window by window over the full ones.
// (The conformance suite's skip test cannot tell a walk from a skip, since
// full windows never count against the headroom.)
func TestSlotSkipDoesNotWalk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "walk.db"), Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	c, err := s.PutSlotConfig(ctx, store.SlotConfig{Name: "walk", MaxPerWindow: 2, WindowSize: time.Second, Headroom: 2})
	require.NoError(t, err)
	t0 := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	evs := make([]store.SlotEvent, 100)
	for i := range evs {
		evs[i] = store.SlotEvent{EventID: fmt.Sprint("w-", i), RequestedTime: t0, Jitter: 0.5}
	}
	_, err = s.AssignSlots(ctx, store.AssignSlotsParams{Config: c, Events: evs})
	require.NoError(t, err)
	for _, at := range []time.Time{t0, t0.Add(20*time.Second + time.Millisecond)} {
		var ws int64
		var counted int
		var ok bool
		require.NoError(t, s.do(ctx, 0, func(tx *txn) error {
			st, err := s.slotStatements(tx.ctx)
			if err != nil {
				return err
			}
			w := newSlotWalk(tx, st, &c)
			ws, _, ok, err = w.place(&store.SlotEvent{EventID: "one", RequestedTime: at, Jitter: 0.5})
			counted = len(w.order) // the windows whose count it read
			return err
		}))
		require.True(t, ok, "no window within the headroom")
		require.Equal(t, t0.Add(50*time.Second).UnixMicro(), ws)
		require.LessOrEqual(t, counted, 2, "from %s: %d windows counted", at, counted)
	}
}

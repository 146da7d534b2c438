package memstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/slottest"
)

func TestSlotConformance(t *testing.T) {
	t.Parallel()
	slottest.Run(t, func(*testing.T) store.SlotStore { return memstore.NewSlots(nil) })
}

// TestSlotsByteBound: bookings past MaxBytes fail with store.ErrTooManyKeys
// and change nothing; booked events keep their slots (a repeat answers
// EXISTING, full or not); SlotStats counts the bytes and the refusals.
func TestSlotsByteBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const idLen = 100
	id := func(i int) string { return fmt.Sprintf("%03d", i) + strings.Repeat("e", idLen-3) }
	// Room for the config, the first window counter, the window after it
	// (created when the first fills) and exactly 3 slots.
	maxBytes := int64(len("c")+memstore.ConfigOverhead) + 2*memstore.WindowOverhead + 3*int64(idLen+memstore.SlotOverhead)
	s := memstore.NewSlotsWith(memstore.SlotsConfig{MaxBytes: maxBytes})
	cfg, err := s.PutSlotConfig(ctx, store.SlotConfig{Name: "c", WindowSize: time.Minute, MaxPerWindow: 2})
	require.NoError(t, err)
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	assign := func(i int) (store.Slot, error) {
		return s.AssignSlot(ctx, store.AssignSlotParams{Config: cfg, Event: store.SlotEvent{EventID: id(i), RequestedTime: at}})
	}
	var booked []store.Slot
	for i := range 3 {
		sl, err := assign(i)
		require.NoError(t, err, "event %d", i)
		booked = append(booked, sl)
	}
	st := s.SlotStats()
	require.Equal(t, memstore.SlotStats{Slots: 3, Windows: 2, Configs: 1, Bytes: maxBytes, MaxBytes: maxBytes}, st,
		"exactly at the bound")

	_, err = assign(3)
	require.ErrorIs(t, err, store.ErrTooManyKeys)
	require.Contains(t, err.Error(), "bound of")
	res, err := s.AssignSlots(ctx, store.AssignSlotsParams{Config: cfg, Events: []store.SlotEvent{
		{EventID: id(1), RequestedTime: at}, {EventID: id(4), RequestedTime: at}}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.Equal(t, store.SlotExisting, res[0].Slot.Status)
	require.ErrorIs(t, res[1].Err, store.ErrTooManyKeys)
	_, err = s.PutSlotConfig(ctx, store.SlotConfig{Name: "c", WindowSize: time.Minute, MaxPerWindow: 3})
	require.ErrorIs(t, err, store.ErrTooManyKeys)

	after := s.SlotStats()
	require.Equal(t, int64(3), after.Refused)
	after.Refused = 0
	require.Equal(t, st, after, "a refusal changes nothing")
	for i, want := range booked {
		sl, err := assign(i)
		require.NoError(t, err)
		want.Status = store.SlotExisting
		require.Equal(t, want, sl, "event %d keeps its slot", i)
	}
	rep, err := s.VerifySlots(ctx)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)

	// A booking that fills its window counts the counter it opens for
	// the next window: with room for a 4th slot but not that counter, it
	// is refused; with room for both, it is booked, exactly to the bound.
	for _, extra := range []int64{0, memstore.WindowOverhead} {
		bound := maxBytes + idLen + memstore.SlotOverhead + extra
		s := memstore.NewSlotsWith(memstore.SlotsConfig{MaxBytes: bound})
		cfg, err := s.PutSlotConfig(ctx, store.SlotConfig{Name: "c", WindowSize: time.Minute, MaxPerWindow: 2})
		require.NoError(t, err)
		for i := range 4 {
			_, err = s.AssignSlot(ctx, store.AssignSlotParams{Config: cfg, Event: store.SlotEvent{EventID: id(i), RequestedTime: at}})
		}
		if extra == 0 {
			require.ErrorIs(t, err, store.ErrTooManyKeys)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, bound, s.SlotStats().Bytes)
		require.Equal(t, 3, s.SlotStats().Windows)
	}
}

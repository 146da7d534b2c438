package store_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

func TestParseWindowSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"PT4S", 4 * time.Second, ""},
		{"PT1M", time.Minute, ""},
		{"PT1H30M", 90 * time.Minute, ""},
		{"P1D", 24 * time.Hour, ""},
		{"PT0.1S", 100 * time.Millisecond, ""},
		{"PT0.000001S", time.Microsecond, ""},
		{"PT86399.999999S", 24*time.Hour - time.Microsecond, ""},
		{"PT1.0000005S", 0, "fraction of a microsecond"},
		{"PT0.0000001S", 0, "fraction of a microsecond"},
		{"P1M", 0, "no fixed length"},
		{"P1Y", 0, "no fixed length"},
		{"P1W", 0, "no fixed length"},
		{"P2D", 0, "longer than 24h"},
		{"-PT4S", 0, "negative"},
		{"4s", 0, "not an ISO-8601 duration"},
		{"", 0, "not an ISO-8601 duration"},
	} {
		got, err := store.ParseWindowSize(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
		back, err := store.ParseWindowSize(store.FormatWindowSize(got))
		require.NoError(t, err)
		require.Equal(t, got, back, "round trip of %s", tc.in)
	}
}

func TestSlotConfigValidate(t *testing.T) {
	t.Parallel()
	ok := store.SlotConfig{Name: "default", MaxPerWindow: 100, WindowSize: 4 * time.Second}
	require.NoError(t, ok.Validate())
	require.Equal(t, int64(store.DefaultSlotHeadroom), ok.EffectiveHeadroom())
	for _, tc := range []struct {
		mut  func(*store.SlotConfig)
		want string
	}{
		{func(c *store.SlotConfig) { c.Name = "" }, "name is empty"},
		{func(c *store.SlotConfig) { c.Name = strings.Repeat("n", 129) }, "longer than 128"},
		{func(c *store.SlotConfig) { c.MaxPerWindow = 0 }, "maxPerWindow"},
		{func(c *store.SlotConfig) { c.MaxPerWindow = store.MaxSlotsPerWindow + 1 }, "maxPerWindow"},
		{func(c *store.SlotConfig) { c.WindowSize = time.Microsecond }, "windowSize must be from 1ms"},
		{func(c *store.SlotConfig) { c.WindowSize = 25 * time.Hour }, "windowSize must be from 1ms"},
		{func(c *store.SlotConfig) { c.WindowSize = time.Second + time.Nanosecond }, "whole microseconds"},
		{func(c *store.SlotConfig) { c.Headroom = -1 }, "headroom"},
	} {
		c := ok
		tc.mut(&c)
		err := c.Validate()
		require.ErrorIs(t, err, store.ErrInvalidSlotConfig)
		require.ErrorContains(t, err, tc.want)
	}
}

func TestRequestedMicrosRoundsUp(t *testing.T) {
	t.Parallel()
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		at   time.Time
		want int64
	}{
		{base, base.UnixMicro()},
		{base.Add(time.Microsecond), base.UnixMicro() + 1},
		{base.Add(1), base.UnixMicro() + 1},
		{base.Add(999), base.UnixMicro() + 1},
		{base.Add(1001), base.UnixMicro() + 2},
		{base.Add(1).In(time.FixedZone("X", -5*3600)), base.UnixMicro() + 1},
	} {
		e := store.SlotEvent{RequestedTime: tc.at}
		require.Equal(t, tc.want, e.RequestedMicros(), "%s", tc.at)
	}
}

func TestPlanSlotAndOffset(t *testing.T) {
	t.Parallel()
	const size = 4_000_000
	for _, tc := range []struct {
		req, ws, el, first int64
	}{
		{8_000_000, 8_000_000, 0, 100},
		{9_000_000, 8_000_000, 1_000_000, 75},
		{11_990_000, 8_000_000, 3_990_000, 0},
		{11_999_999, 8_000_000, 3_999_999, 0},
		{8_000_001, 8_000_000, 1, 99},
	} {
		p := store.PlanSlot(tc.req, size, 100)
		require.Equal(t, store.SlotPlan{Requested: tc.req, WindowStart: tc.ws, Elapsed: tc.el, FirstMax: tc.first}, p)
	}
	// The offset is in [from, size) for every jitter, even the largest.
	for _, j := range []float64{0, 0.25, 0.5, 0.999999, math.Nextafter(1, 0)} {
		for _, from := range []int64{0, 1, 3_999_999} {
			off := store.SlotOffset(j, from, size)
			require.GreaterOrEqual(t, off, from)
			require.Less(t, off, int64(size))
		}
	}
	require.Equal(t, int64(1_000_000), store.SlotOffset(0.25, 0, size))
	require.Equal(t, int64(2_500_000), store.SlotOffset(0.5, 1_000_000, size))
}

func TestSlotBatchOrder(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	evs := []store.SlotEvent{
		{EventID: "c", RequestedTime: t0.Add(2 * time.Second)},
		{EventID: "a", RequestedTime: t0},
		{EventID: "b", RequestedTime: t0.Add(time.Second)},
		{EventID: "a", RequestedTime: t0.Add(time.Hour)},
		{EventID: "d", RequestedTime: t0},
	}
	order, first, err := store.SlotBatchOrder(evs)
	require.NoError(t, err)
	require.Equal(t, []int{1, 4, 2, 0}, order)
	require.Equal(t, []int{0, 1, 2, 1, 4}, first)
	out := make([]store.SlotResult, len(evs))
	out[1] = store.SlotResult{Slot: store.Slot{EventID: "a", Status: store.SlotNew}}
	store.FillRepeats(out, first)
	require.Equal(t, store.SlotExisting, out[3].Slot.Status)
	require.Equal(t, "a", out[3].Slot.EventID)
	require.Equal(t, store.SlotNew, out[1].Slot.Status)
	_, _, err = store.SlotBatchOrder([]store.SlotEvent{{EventID: "x"}})
	require.ErrorIs(t, err, store.ErrInvalidEvent)
	require.ErrorContains(t, err, "event 0")
}

// FuzzParseWindowSize: no input panics; what parses is a valid window size
// or is refused by Validate with a clear error, and formats back to itself.
func FuzzParseWindowSize(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		d, err := store.ParseWindowSize(s)
		if err != nil {
			return
		}
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.LessOrEqual(t, d, store.MaxSlotWindow)
		c := store.SlotConfig{Name: "f", MaxPerWindow: 1, WindowSize: d}
		if c.Validate() != nil {
			return
		}
		back, err := store.ParseWindowSize(store.FormatWindowSize(d))
		require.NoError(t, err)
		require.Equal(t, d, back)
	})
}

package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

func TestNowMicros(t *testing.T) {
	t.Parallel()
	require.Zero(t, store.NowMicros(time.Time{}), "no override")
	require.Zero(t, store.NowMicros(time.UnixMicro(0)), "the epoch reads as none")
	require.Equal(t, int64(1_700_000_000_123_456), store.NowMicros(time.UnixMicro(1_700_000_000_123_456)))
	require.Equal(t, int64(-5), store.NowMicros(time.UnixMicro(-5)))
}

func TestReservedEnd(t *testing.T) {
	t.Parallel()
	win := store.Limit{Name: "w", Algorithm: store.FixedWindow, Rate: 10, Period: 10 * time.Microsecond}
	for _, tc := range []struct {
		limit store.Limit
		at    int64
		want  int64
	}{
		{win, 0, 10},
		{win, 3, 10},
		{win, 9, 10},
		{win, 10, 20}, // a window's end belongs to the next window
		{win, -1, 0},
		{win, -10, 0},
		{win, -11, -10},
		{store.Limit{Name: "s", Algorithm: store.SlidingWindow, Rate: 10, Period: time.Second}, 2_500_000, 3_000_000},
		{store.Limit{Name: "g", Algorithm: store.GCRA, Rate: 10, Period: time.Second}, 2_500_000, 0},
		{store.Limit{Name: "z", Algorithm: store.FixedWindow, Rate: 10}, 2_500_000, 0},
	} {
		p := store.SettleParams{Limit: tc.limit, ReservedAt: tc.at}
		require.Equal(t, tc.want, p.ReservedEnd(), "%s at %d", tc.limit.Algorithm, tc.at)
	}
}

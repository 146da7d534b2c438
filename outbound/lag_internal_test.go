package outbound

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// Issue 18: the store's jitter adds to how late the calls leave (sendLag),
// and the turns that were due at once, which say nothing of the timers,
// count in it too. A process whose timers fire late is starved whatever
// its store did: the higher of the two judges.
func TestLateTimersJudgeLatencyWhateverTheStoreDid(t *testing.T) {
	t.Parallel()
	c, err := New(Config{})
	require.NoError(t, err)
	c.lag.Store(60_000)  // timers 60 ms late
	c.sendLag.Store(500) // most turns overdue, the store steady
	require.True(t, c.starved(200_000), "late timers explain an answer 200 ms slow")
	c.lag.Store(500)
	c.sendLag.Store(60_000) // a store that stalls
	require.True(t, c.starved(200_000), "so do the store's stalls")
	c.sendLag.Store(500)
	require.False(t, c.starved(200_000), "on time, the answer is the provider's")
}

// spread keeps a process's attempts on a key half a pacing interval
// apart, but never past the caller's limit (Acquire's MaxWait): the turn
// is booked, and it is better sent with the bunch than refused.
func TestSpreadStopsAtTheCallersLimit(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.UnixMicro(t0))
	c, err := New(Config{Clock: clk})
	require.NoError(t, err)
	ks := &keyState{}
	lim := c.pacing(10) // 100 ms apart
	require.Zero(t, c.spread(ks, lim, 0, t0), "the first leaves at once")
	require.Equal(t, 50*time.Millisecond, c.spread(ks, lim, 0, t0), "the next half an interval later")
	require.Equal(t, 100*time.Millisecond, c.spread(ks, lim, 0, t0))
	require.Equal(t, 20*time.Millisecond, c.spread(ks, lim, t0+20_000, t0), "not past the caller's limit")
	require.Zero(t, c.spread(ks, lim, t0, t0), "a limit already passed: at once")
	require.Equal(t, 150*time.Millisecond, c.spread(ks, lim, 0, t0), "the next keeps its distance from the last spread")
}

// An attempt whose turn passed more than two intervals (and 50 ms) before
// keeps a whole interval from the last attempt, not half: the bunch a
// stall held back drains at the pace.
func TestSpreadKeepsAWholeIntervalAfterAPassedTurn(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.UnixMicro(t0))
	c, err := New(Config{Clock: clk})
	require.NoError(t, err)
	lim := c.pacing(10) // 100 ms apart
	for _, tc := range []struct {
		name string
		turn int64
		want time.Duration
	}{
		{"due now", t0, 50 * time.Millisecond},
		{"two intervals ago", t0 - 200_000, 50 * time.Millisecond},
		{"more than two intervals ago", t0 - 200_001, 100 * time.Millisecond},
	} {
		ks := &keyState{}
		require.Zero(t, c.spread(ks, lim, 0, t0), "%s: the first leaves at once", tc.name)
		require.Equal(t, tc.want, c.spread(ks, lim, 0, tc.turn), tc.name)
	}
	fast := c.pacing(100) // 10 ms apart: the 50 ms floor
	ks := &keyState{}
	require.Zero(t, c.spread(ks, fast, 0, t0))
	require.Equal(t, 5*time.Millisecond, c.spread(ks, fast, 0, t0-50_000), "50 ms ago: not passed")
	require.Equal(t, 15*time.Millisecond, c.spread(ks, fast, 0, t0-50_001), "passed: a whole interval after the last")
}

// turnAt places a turn delay after the store's decision when the store's
// clock agrees with this process's (the decision lies between the call
// and its answer), and delay after the answer otherwise: a store whose
// clock is off says nothing of when, on this clock, it decided.
func TestTurnAtTrustsTheStoresClockOnlyWithinTheCall(t *testing.T) {
	t.Parallel()
	asked := time.UnixMicro(t0)
	answered := asked.Add(120 * time.Millisecond) // held up 120 ms
	delay := 30 * time.Millisecond
	for _, tc := range []struct {
		name string
		at   int64
		want int64
	}{
		{"decided at once, answered late", t0 + 1_000, t0 + 31_000},
		{"decided as it answered", t0 + 120_000, t0 + 150_000},
		{"a store clock 10 s behind", t0 - 10_000_000, t0 + 150_000},
		{"a store clock 10 s ahead", t0 + 10_000_000, t0 + 150_000},
		{"no decision time", 0, t0 + 150_000},
	} {
		require.Equal(t, tc.want, turnAt(asked, answered, tc.at, delay), tc.name)
	}
}

// A call given up while it waits in the spread (its context ends) returns
// the turn it booked: the key's next attempt is not pushed back an
// interval by a call that never left.
func TestASpreadCallGivenUpReturnsItsTurn(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.UnixMicro(t0))
	c, err := New(Config{Clock: clk, Store: memstore.New(memstore.Config{Clock: clk}),
		AIMD: aimd.Config{Start: 10, SlowStart: -1, UsageMultiple: -1}})
	require.NoError(t, err)
	ks := c.keys.acquire("api.test", "api.test")
	idle := clk.Timers() // the idle sweep's
	defer c.keys.release(ks)
	// The last attempt of a bunch was spread to 10 s from now: the next
	// one's turn is due at once, and it waits in the spread.
	ks.left.Store(t0 + 10_000_000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.wait(ctx, ks) }()
	waiting := make(chan struct{})
	go func() { clk.BlockUntilTimers(idle + 1); close(waiting) }()
	select {
	case <-waiting:
	case err := <-done:
		t.Fatalf("the call returned before it waited on the clock: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the call never waited on the clock")
	}
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(time.Minute):
		t.Fatal("the call did not give up")
	}
	lim := c.pacing(c.ctl.Rate(new(aimd.State)))
	r, err := c.store.Take(context.Background(), store.TakeParams{Key: ks.names.pace, Limit: lim, Cost: 1})
	require.NoError(t, err)
	require.True(t, r.Allowed, "the turn the call booked was given back")
	require.Zero(t, r.Delay)
}

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
	require.Zero(t, c.spread(ks, lim, 0), "the first leaves at once")
	require.Equal(t, 50*time.Millisecond, c.spread(ks, lim, 0), "the next half an interval later")
	require.Equal(t, 100*time.Millisecond, c.spread(ks, lim, 0))
	require.Equal(t, 20*time.Millisecond, c.spread(ks, lim, t0+20_000), "not past the caller's limit")
	require.Zero(t, c.spread(ks, lim, t0), "a limit already passed: at once")
	require.Equal(t, 150*time.Millisecond, c.spread(ks, lim, 0), "the next keeps its distance from the last spread")
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

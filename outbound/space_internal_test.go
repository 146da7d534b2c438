package outbound

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/store/memstore"
)

// spaceAt returns the key's spacing rate (turn.space) at t.
func spaceAt(ks *keyState, t time.Time) float64 {
	return ks.adapt.turn(t.UnixMicro()).space
}

// pauseUntil pauses the key until t, as a Retry-After heard of does.
func pauseUntil(ks *keyState, t time.Time) {
	ks.adapt.mu.Lock()
	defer ks.adapt.mu.Unlock()
	ks.adapt.ctl.Extend(&ks.adapt.state, t.UnixMicro())
}

// Issue 18: a provider whose bucket holds one call (a limit of 50/s with a
// burst of 20 ms) refused the second of the two processes' first calls
// after every pause, since both resumed at the same instant, and the fleet
// held 1 call a second for the 30 s after the limit halved. A key found
// paused again as soon as it resumed from a pause long enough to fill the
// provider's bucket spaces the fleet's calls from then on: at spaceMargin
// times the fleet's rate (this process's over its share), for spacedFor.
// Nothing else turns spacing on: a pause long after the last one ended, a
// pause after a pause of a few milliseconds (which fills no bucket), nor
// one with no share of the fleet known (a process alone, as far as it can
// tell).
func TestAPauseAsTheFleetResumesSpacesItsCalls(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		first time.Duration // the first pause's length
		gap   time.Duration // from its end to the next pause, found at once
		share float64       // 0: none told
		want  bool
	}{
		{"paused again at once", time.Second, 5 * time.Millisecond, 0.5, true},
		{"paused again within the process's interval", time.Second, 60 * time.Millisecond, 0.5, true},
		{"paused again a second later", time.Second, time.Second, 0.5, false},
		{"after a pause of milliseconds", 20 * time.Millisecond, 5 * time.Millisecond, 0.5, false},
		{"no share known", time.Second, 5 * time.Millisecond, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
			clk := clocktest.New(t0)
			c, err := New(Config{Clock: clk, Store: memstore.New(memstore.Config{Clock: clk}), Instance: "a"})
			require.NoError(t, err)
			ks := c.keys.acquire("api.space.test", "api.space.test")
			t.Cleanup(func() { c.keys.release(ks) })
			ks.adapt.mu.Lock()
			ks.adapt.ctl.SetRate(&ks.adapt.state, 20)
			if tc.share > 0 {
				ks.adapt.ctl.FleetShare(&ks.adapt.state, t0.UnixMicro(), tc.share)
			}
			ks.adapt.mu.Unlock()

			require.Zero(t, spaceAt(ks, t0), "spaced before any pause")
			pauseUntil(ks, t0.Add(tc.first))
			require.Zero(t, spaceAt(ks, t0), "spaced at the first pause")
			resumed := t0.Add(tc.first)
			require.Zero(t, spaceAt(ks, resumed), "spaced as the fleet resumes")
			again := resumed.Add(tc.gap)
			pauseUntil(ks, again.Add(time.Second))
			spaceAt(ks, again) // the process finds the second pause
			after := again.Add(time.Second)
			if !tc.want {
				require.Zero(t, spaceAt(ks, after), "spaced after the second pause")
				require.Zero(t, c.keySnapshot(ks, after.UnixMicro()).Spacing, "the snapshot's spacing")
				return
			}
			require.InDelta(t, spaceMargin*40, c.keySnapshot(ks, after.UnixMicro()).Spacing, 1e-9, "the snapshot's spacing")
			// 20/s of a fleet of which this process sends half: the
			// fleet's 40/s, times the margin.
			require.InDelta(t, spaceMargin*40, spaceAt(ks, after), 1e-9, "spacing after the second pause")
			lasts := time.Duration(spacedFor) * time.Microsecond
			require.InDelta(t, spaceMargin*40, spaceAt(ks, again.Add(lasts-time.Second)), 1e-9, "spacing just before spacedFor passed")
			require.Zero(t, spaceAt(ks, again.Add(lasts+time.Second)), "spacing after spacedFor")
		})
	}
}

// The spacing itself: two processes that resume at the same instant (two
// clients of one store), each at 20/s of a fleet of 40/s, leave
// 1/(spaceMargin x 40) s apart when spaced, and together when not.
func TestSpacedProcessesLeaveApart(t *testing.T) {
	t.Parallel()
	for _, spaced := range []bool{true, false} {
		name := "spaced"
		if !spaced {
			name = "not spaced"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
			clk := clocktest.New(t0)
			st := memstore.New(memstore.Config{Clock: clk})
			newKey := func(instance string) (*Client, *keyState) {
				c, err := New(Config{Clock: clk, Store: st, Instance: instance})
				require.NoError(t, err)
				ks := c.keys.acquire("api.space.test", "api.space.test")
				t.Cleanup(func() { c.keys.release(ks) })
				ks.adapt.mu.Lock()
				ks.adapt.ctl.SetRate(&ks.adapt.state, 20)
				ks.adapt.ctl.FleetShare(&ks.adapt.state, t0.UnixMicro(), 0.5)
				if spaced {
					ks.adapt.spacedAt = t0.UnixMicro()
				}
				ks.adapt.mu.Unlock()
				return c, ks
			}
			ca, ka := newKey("a")
			cb, kb := newKey("b")
			ctx := context.Background()
			require.NoError(t, ca.wait(ctx, ka), "A's turn")
			// B either leaves at once or sleeps on a timer of its own
			// (the clients' idle sweeps hold timers already).
			n0 := clk.Timers()
			done := make(chan error, 1)
			go func() { done <- cb.wait(ctx, kb) }()
			deadline := time.Now().Add(30 * time.Second)
			for clk.Timers() <= n0 {
				select {
				case err := <-done:
					require.NoError(t, err, "B's turn")
					require.False(t, spaced, "B left with A, not spaced")
					require.Equal(t, t0, clk.Now())
					return
				default:
				}
				require.True(t, time.Now().Before(deadline), "B neither left nor waited")
				time.Sleep(time.Millisecond)
			}
			require.True(t, spaced, "B waited, not spaced")
			fleet := 40.0
			interval := time.Duration(float64(time.Second) / (spaceMargin * fleet))
			clk.Advance(interval - time.Microsecond)
			require.Greater(t, clk.Timers(), n0, "B left before the fleet's interval passed")
			clk.Advance(time.Microsecond)
			require.NoError(t, <-done, "B's turn")
		})
	}
}

// A call that gives up while it waits for the fleet's spacing turn gives
// the turn back: a third process resuming with the other two takes it, one
// interval after the first, not two.
func TestASpacingTurnGivenUpIsGivenBack(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	clk := clocktest.New(t0)
	st := memstore.New(memstore.Config{Clock: clk})
	newKey := func(instance string) (*Client, *keyState) {
		c, err := New(Config{Clock: clk, Store: st, Instance: instance})
		require.NoError(t, err)
		ks := c.keys.acquire("api.space.test", "api.space.test")
		t.Cleanup(func() { c.keys.release(ks) })
		ks.adapt.mu.Lock()
		// A third of a fleet of 60/s each.
		ks.adapt.ctl.SetRate(&ks.adapt.state, 20)
		ks.adapt.ctl.FleetShare(&ks.adapt.state, t0.UnixMicro(), 1.0/3)
		ks.adapt.spacedAt = t0.UnixMicro()
		ks.adapt.mu.Unlock()
		return c, ks
	}
	ca, ka := newKey("a")
	cb, kb := newKey("b")
	cc, kc := newKey("c")
	require.NoError(t, ca.wait(context.Background(), ka), "A's turn")
	waiting := func(ctx context.Context, c *Client, ks *keyState) chan error {
		n0 := clk.Timers()
		done := make(chan error, 1)
		go func() { done <- c.wait(ctx, ks) }()
		deadline := time.Now().Add(30 * time.Second)
		for clk.Timers() <= n0 {
			select {
			case err := <-done:
				t.Fatalf("left at once (%v), not spaced", err)
			default:
			}
			require.True(t, time.Now().Before(deadline), "neither left nor waited")
			time.Sleep(time.Millisecond)
		}
		return done
	}
	ctx, cancel := context.WithCancel(context.Background())
	doneB := waiting(ctx, cb, kb)
	cancel()
	require.ErrorIs(t, <-doneB, context.Canceled, "B gave up")
	doneC := waiting(context.Background(), cc, kc)
	fleet := 60.0
	interval := time.Duration(float64(time.Second) / (spaceMargin * fleet))
	clk.Advance(interval)
	select {
	case err := <-doneC:
		require.NoError(t, err, "C's turn")
	case <-time.After(30 * time.Second):
		t.Fatal("C still waits one interval after A's turn: B's turn was not given back")
	}
}

// Spacing is best effort: a call that may wait less than its spacing turn
// (a permit's MaxWait) leaves on its own pace, at once, rather than wait
// past what it may.
func TestASpacingTurnPastTheCallsWaitIsNotTaken(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	clk := clocktest.New(t0)
	st := memstore.New(memstore.Config{Clock: clk})
	newKey := func(instance string) (*Client, *keyState) {
		c, err := New(Config{Clock: clk, Store: st, Instance: instance})
		require.NoError(t, err)
		ks := c.keys.acquire("api.space.test", "api.space.test")
		t.Cleanup(func() { c.keys.release(ks) })
		ks.adapt.mu.Lock()
		ks.adapt.ctl.SetRate(&ks.adapt.state, 20)
		ks.adapt.ctl.FleetShare(&ks.adapt.state, t0.UnixMicro(), 0.5)
		ks.adapt.spacedAt = t0.UnixMicro()
		ks.adapt.mu.Unlock()
		return c, ks
	}
	ca, ka := newKey("a")
	cb, kb := newKey("b")
	ctx := context.Background()
	require.NoError(t, ca.wait(ctx, ka), "A's turn")
	// The fleet's interval is 1/(1.05 x 40) s, about 24 ms; B may wait 5.
	done := make(chan error, 1)
	go func() { done <- cb.waitUntil(ctx, kb, t0.Add(5*time.Millisecond).UnixMicro()) }()
	select {
	case err := <-done:
		require.NoError(t, err, "B's turn")
		require.Equal(t, t0, clk.Now())
	case <-time.After(30 * time.Second):
		t.Fatal("B waits for a spacing turn past its limit")
	}
}

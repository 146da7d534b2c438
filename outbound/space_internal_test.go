package outbound

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// spaceAt returns the key's spacing rate (turn.space) at t.
func spaceAt(ks *keyState, t time.Time) float64 {
	return ks.adapt.turn(t.UnixMicro()).space
}

// spaceKey returns a client on a manual clock from t0 and its state for
// the key api.space.test, released when the test ends.
func spaceKey(t *testing.T, t0 time.Time) (*Client, *keyState) {
	t.Helper()
	clk := clocktest.New(t0)
	c, err := New(Config{Clock: clk, Store: memstore.New(memstore.Config{Clock: clk}), Instance: "a"})
	require.NoError(t, err)
	ks := c.keys.acquire("api.space.test", "api.space.test")
	t.Cleanup(func() { c.keys.release(ks) })
	return c, ks
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
// Nothing else turns spacing on: a pause long after the last one ended, nor
// a pause after a pause of a few milliseconds (which fills no bucket). With
// no share of the fleet known, or a share of all of it (the others' calls
// too few to count), the fleet's rate is taken as this process's: a process
// alone loses nothing by it.
func TestAPauseAsTheFleetResumesSpacesItsCalls(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		first time.Duration // the first pause's length
		gap   time.Duration // from its end to the next pause, found at once
		share float64       // 0: none told
		want  float64       // the fleet's rate spaced at, over spaceMargin (0: none)
	}{
		{"paused again at once", time.Second, 5 * time.Millisecond, 0.5, 40},
		{"paused again within the process's interval", time.Second, 60 * time.Millisecond, 0.5, 40},
		{"paused again a second later", time.Second, time.Second, 0.5, 0},
		{"after a pause of milliseconds", 20 * time.Millisecond, 5 * time.Millisecond, 0.5, 0},
		{"no share known", time.Second, 5 * time.Millisecond, 0, 20},
		{"a share of all", time.Second, 5 * time.Millisecond, 1, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
			c, ks := spaceKey(t, t0)
			ks.adapt.mu.Lock()
			ks.adapt.ctl.SetRate(&ks.adapt.state, 20)
			if tc.share > 0 {
				ks.adapt.ctl.FleetShare(&ks.adapt.state, t0.UnixMicro(), tc.share)
			}
			ks.adapt.mu.Unlock()

			// The key's first turn, long before: the pauses below are
			// not at its start (TestTheFleetsFirstCallsClashingCutNothing).
			require.Zero(t, spaceAt(ks, t0.Add(-time.Minute)), "spaced at the key's start")
			require.Zero(t, spaceAt(ks, t0), "spaced before any pause")
			pauseUntil(ks, t0.Add(tc.first))
			require.Zero(t, spaceAt(ks, t0), "spaced at the first pause")
			resumed := t0.Add(tc.first)
			require.Zero(t, spaceAt(ks, resumed), "spaced as the fleet resumes")
			again := resumed.Add(tc.gap)
			pauseUntil(ks, again.Add(time.Second))
			spaceAt(ks, again) // the process finds the second pause
			after := again.Add(time.Second)
			if tc.want == 0 {
				require.Zero(t, spaceAt(ks, after), "spaced after the second pause")
				require.Zero(t, c.keySnapshot(ks, after.UnixMicro()).Spacing, "the snapshot's spacing")
				return
			}
			require.InDelta(t, spaceMargin*tc.want, c.keySnapshot(ks, after.UnixMicro()).Spacing, 1e-9, "the snapshot's spacing")
			// 20/s of a fleet of which this process sends half: the
			// fleet's 40/s, times the margin.
			require.InDelta(t, spaceMargin*tc.want, spaceAt(ks, after), 1e-9, "spacing after the second pause")
			lasts := time.Duration(spacedFor) * time.Microsecond
			require.InDelta(t, spaceMargin*tc.want, spaceAt(ks, again.Add(lasts-time.Second)), 1e-9, "spacing just before spacedFor passed")
			require.Zero(t, spaceAt(ks, again.Add(lasts+time.Second)), "spacing after spacedFor")
		})
	}
}

// spacedFleet is a fleet of processes (clients of one store, on one
// manual clock from t0), each at 20/s and share of the fleet's calls, its
// key spaced from t0 when spaced.
type spacedFleet struct {
	t      *testing.T
	t0     time.Time
	clk    *clocktest.Clock
	st     store.RateStore
	share  float64
	spaced bool
}

func newSpacedFleet(t *testing.T, share float64, spaced bool) *spacedFleet {
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	clk := clocktest.New(t0)
	return &spacedFleet{t: t, t0: t0, clk: clk, st: memstore.New(memstore.Config{Clock: clk}), share: share, spaced: spaced}
}

// process returns the client named instance and its key.
func (f *spacedFleet) process(instance string) (*Client, *keyState) {
	c, err := New(Config{Clock: f.clk, Store: f.st, Instance: instance})
	require.NoError(f.t, err)
	ks := c.keys.acquire("api.space.test", "api.space.test")
	f.t.Cleanup(func() { c.keys.release(ks) })
	ks.adapt.mu.Lock()
	defer ks.adapt.mu.Unlock()
	ks.adapt.ctl.SetRate(&ks.adapt.state, 20)
	ks.adapt.ctl.FleetShare(&ks.adapt.state, f.t0.UnixMicro(), f.share)
	if f.spaced {
		ks.adapt.spacedAt = f.t0.UnixMicro()
	}
	return c, ks
}

// start runs wait in a goroutine (startWait).
func (f *spacedFleet) start(wait func() error) (done <-chan error, left bool) {
	return startWait(f.t, f.clk, wait)
}

// startWait runs wait in a goroutine and returns once it has returned
// (left) or sleeps on a timer of its own on clk (timers already pending,
// such as the clients' idle sweeps, do not count): an event either way,
// waited for up to 30 s of wall time.
func startWait(t *testing.T, clk *clocktest.Clock, wait func() error) (done <-chan error, left bool) {
	t.Helper()
	sleeps := clk.TimersAtLeast(clk.Timers() + 1)
	ch := make(chan error, 1)
	go func() { ch <- wait() }()
	select {
	case err := <-ch:
		ch <- err
		return ch, true
	case <-sleeps:
		return ch, false
	case <-time.After(30 * time.Second):
		t.Fatal("the call neither left nor waited")
		return nil, false
	}
}

// twoResumed returns process B of a fleet of two (each a share of a half
// of 40/s) once process A took its turn, at the fleet's resume.
func (f *spacedFleet) twoResumed() (*Client, *keyState) {
	ca, ka := f.process("a")
	cb, kb := f.process("b")
	require.NoError(f.t, ca.wait(context.Background(), ka), "A's turn")
	return cb, kb
}

// result returns what a call started returned, failing with msg if it
// has not returned within 30 s of wall time.
func (f *spacedFleet) result(done <-chan error, msg string) error {
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		f.t.Fatal(msg)
		return nil
	}
}

// interval is the fleet's spacing interval at a fleet of fleet calls a
// second.
func interval(fleet float64) time.Duration {
	return time.Duration(float64(time.Second) / (spaceMargin * fleet))
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
			f := newSpacedFleet(t, 0.5, spaced)
			cb, kb := f.twoResumed()
			done, left := f.start(func() error { return cb.wait(context.Background(), kb) })
			if left {
				require.NoError(t, <-done, "B's turn")
				require.False(t, spaced, "B left with A, not spaced")
				require.Equal(t, f.t0, f.clk.Now())
				return
			}
			require.True(t, spaced, "B waited, not spaced")
			n := f.clk.Timers()
			f.clk.Advance(interval(40) - time.Microsecond)
			require.Equal(t, n, f.clk.Timers(), "B left before the fleet's interval passed")
			f.clk.Advance(time.Microsecond)
			require.NoError(t, f.result(done, "B still waits after the fleet's interval"), "B's turn")
		})
	}
}

// A call that gives up while it waits for the fleet's spacing turn gives
// the turn back: a third process resuming with the other two takes it, one
// interval after the first, not two.
func TestASpacingTurnGivenUpIsGivenBack(t *testing.T) {
	t.Parallel()
	f := newSpacedFleet(t, 1.0/3, true) // a third of a fleet of 60/s each
	ca, ka := f.process("a")
	cb, kb := f.process("b")
	cc, kc := f.process("c")
	require.NoError(t, ca.wait(context.Background(), ka), "A's turn")
	ctx, cancel := context.WithCancel(context.Background())
	doneB, left := f.start(func() error { return cb.wait(ctx, kb) })
	require.False(t, left, "B left at once, not spaced")
	cancel()
	require.ErrorIs(t, f.result(doneB, "B did not give up"), context.Canceled, "B gave up")
	doneC, left := f.start(func() error { return cc.wait(context.Background(), kc) })
	require.False(t, left, "C left at once, not spaced")
	f.clk.Advance(interval(60))
	require.NoError(t, f.result(doneC, "C still waits one interval after A's turn: B's turn was not given back"), "C's turn")
}

// A call that may wait less than its spacing turn (a permit's MaxWait) gives
// up with a *WaitError saying how long, at once, rather than wait past what
// it may or leave within a token's time of another process's call (as it
// did before: issue 18, a bucket of one token at 1-2 calls a second, where
// the fleet's interval is longer than MaxReserve).
func TestASpacingTurnPastTheCallsWaitIsNotTaken(t *testing.T) {
	t.Parallel()
	f := newSpacedFleet(t, 0.5, true)
	cb, kb := f.twoResumed()
	ctx := context.Background()
	// The fleet's interval is 1/(1.05 x 40) s, about 24 ms; B may wait 5.
	done, left := f.start(func() error { return cb.waitUntil(ctx, kb, f.t0.Add(5*time.Millisecond).UnixMicro()) })
	require.True(t, left, "B waits for a spacing turn past its limit")
	var we *WaitError
	require.ErrorAs(t, <-done, &we, "B left within the fleet's interval of A")
	require.False(t, we.Paused)
	require.Greater(t, we.RetryAfter, 5*time.Millisecond, "the spacing turn is past B's limit")
	require.Equal(t, f.t0, f.clk.Now())
}

// A spacing turn further off than a turn may be booked (Config.MaxReserve,
// 100 ms) is waited for, as the own pace's is: at a fleet of 2 calls a
// second the interval is 476 ms, and B leaves no sooner.
func TestASpacingTurnPastMaxReserveIsWaitedFor(t *testing.T) {
	t.Parallel()
	f := newSpacedFleet(t, 0.5, true)
	ca, ka := f.process("a")
	cb, kb := f.process("b")
	for _, ks := range []*keyState{ka, kb} {
		ks.adapt.mu.Lock()
		ks.adapt.ctl.SetRate(&ks.adapt.state, 1) // a fleet of 2/s
		ks.adapt.mu.Unlock()
	}
	require.NoError(t, ca.wait(context.Background(), ka), "A's turn")
	done, left := f.start(func() error { return cb.wait(context.Background(), kb) })
	require.False(t, left, "B left with A, its spacing turn 476 ms off")
	for f.clk.Now().Before(f.t0.Add(interval(2) - time.Millisecond)) {
		select {
		case err := <-done:
			t.Fatalf("B left %v after A, within the fleet's interval (%v): %v", f.clk.Now().Sub(f.t0), interval(2), err)
		default:
		}
		n := f.clk.Timers()
		require.Positive(t, n, "B waits on no timer")
		f.clk.Advance(time.Millisecond)
		require.Eventually(t, func() bool { return f.clk.Timers() > 0 || len(done) > 0 }, 30*time.Second, time.Millisecond)
	}
	f.clk.Advance(interval(2))
	require.NoError(t, f.result(done, "B still waits after the fleet's interval"), "B's turn")
}

// Issue 18, limits of 30/s halving to 15/s: a provider's bucket of a tenth
// of a second holds 1.5 calls there, so two processes' calls leaving within
// a token's time of each other were refused at a rate far under the limit
// (bare-429 and 503 fell to 5-7 calls a second under 15, still refused),
// with no pause to turn spacing on. A refusal at a fleet rate of
// lowSpaceRate or less spaces the fleet's calls; not one at a higher rate,
// in slow start (which ends at the refusal), or with no share known.
func TestARefusalAtALowFleetRateSpacesItsCalls(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		rate      float64 // this process's, a second
		share     float64 // 0: none told
		slowStart bool    // refused while still in slow start
		want      float64
	}{
		{"a low fleet rate", 10, 0.5, false, spaceMargin * 20},
		{"at lowSpaceRate", lowSpaceRate / 2, 0.5, false, spaceMargin * lowSpaceRate},
		{"a high fleet rate", 30, 0.5, false, 0},
		{"in slow start", 10, 0.5, true, 0},
		{"no share known", 10, 0, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
			_, ks := spaceKey(t, t0)
			refuse := func(at time.Time) {
				ks.adapt.observe(aimd.Sample{Outcome: aimd.Throttled, Latency: 20_000}, &signal.Report{Status: 429, Throttled: true}, at.UnixMicro(), 0)
			}
			// The key's first turn, long before: no refusal below is
			// the fleet's first calls clashing
			// (TestTheFleetsFirstCallsClashingCutNothing).
			spaceAt(ks, t0.Add(-time.Minute))
			at := t0
			if !tc.slowStart {
				refuse(at) // ends slow start
				at = at.Add(10 * time.Second)
			}
			ks.adapt.mu.Lock()
			require.Equal(t, tc.slowStart, ks.adapt.state.Probing())
			ks.adapt.ctl.SetRate(&ks.adapt.state, tc.rate)
			if tc.share > 0 {
				ks.adapt.ctl.FleetShare(&ks.adapt.state, at.UnixMicro(), tc.share)
			}
			ks.adapt.mu.Unlock()
			require.Zero(t, spaceAt(ks, at), "spaced before the refusal")
			refuse(at)
			ks.adapt.mu.Lock()
			ks.adapt.ctl.SetRate(&ks.adapt.state, tc.rate) // the rate the spacing is read at
			ks.adapt.mu.Unlock()
			require.InDelta(t, tc.want, spaceAt(ks, at.Add(time.Second)), 1e-9)
		})
	}
}

// Issue 18, a bucket of one token at 100/s: the two processes' first calls,
// sent at Start at the same instant, clashed, and the refusal cut both out
// of slow start to 0.64 of Start; each pause's end cost the next, and the
// fleet sent a call a second for 40 s. A refusal within resumeSpan of the
// key's first turn, at a rate of a few calls a second, is the fleet's first
// calls clashing (aimd.Sample.Clash): neither the process refused nor one
// hearing of it cuts, and both space the fleet's calls from then on (with no
// share known yet, at their own rate). Later, or at a high rate, it is an
// ordinary refusal, and no key is spaced by it. A bare 429 (no pause to
// tell the fleet of) spaces the process refused.
func TestTheFleetsFirstCallsClashingCutNothing(t *testing.T) {
	t.Parallel()
	t.Run("a bare 429", func(t *testing.T) {
		t.Parallel()
		t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
		_, ks := spaceKey(t, t0)
		ks.adapt.mu.Lock()
		ks.adapt.ctl.SetRate(&ks.adapt.state, 1)
		ks.adapt.mu.Unlock()
		require.Zero(t, spaceAt(ks, t0), "spaced at the key's start")
		o := ks.adapt.observe(aimd.Sample{Outcome: aimd.Throttled, Latency: 20_000},
			&signal.Report{Status: 429, Throttled: true}, t0.Add(20*time.Millisecond).UnixMicro(), 0)
		require.NotEqual(t, aimd.Decreased, o.decision.Change, "the first calls' clash cut the rate")
		require.InDelta(t, spaceMargin*1, spaceAt(ks, t0.Add(time.Second)), 1e-9, "not spaced")
	})
	for _, tc := range []struct {
		name  string
		rate  float64       // this process's, a second
		after time.Duration // from the key's first turn to the refusal
		clash bool
	}{
		{"at the fleet's start", 1, 20 * time.Millisecond, true},
		{"a second after it", 1, time.Second, false},
		{"at a high rate", 100, 20 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
			_, ka := spaceKey(t, t0) // refused
			_, kb := spaceKey(t, t0) // hears of it
			for _, ks := range []*keyState{ka, kb} {
				ks.adapt.mu.Lock()
				ks.adapt.ctl.SetRate(&ks.adapt.state, tc.rate)
				ks.adapt.mu.Unlock()
				require.Zero(t, spaceAt(ks, t0), "spaced at the key's start")
			}
			at := t0.Add(tc.after)
			o := ka.adapt.observe(aimd.Sample{Outcome: aimd.Throttled, Latency: 20_000, RetryAfter: 1_000_000},
				&signal.Report{Status: 429, Throttled: true}, at.UnixMicro(), 0)
			news, _ := kb.adapt.notePause(at.Add(time.Millisecond).UnixMicro(), 1_000_000-1_000, 0, false)
			require.True(t, news, "B heard of no pause")
			for name, ks := range map[string]*keyState{"A": ka, "B": kb} {
				rate := ks.adapt.ctl.Rate(&ks.adapt.state)
				spaceAt(ks, at.Add(2*time.Millisecond)) // finds the pause
				space := spaceAt(ks, at.Add(2*time.Second))
				if !tc.clash {
					require.Less(t, rate, tc.rate, "%s: an ordinary refusal cut nothing", name)
					require.Zero(t, space, "%s: spaced", name)
					continue
				}
				require.Equal(t, tc.rate, rate, "%s: the first calls' clash cut the rate", name)
				require.True(t, ks.adapt.state.Probing(), "%s: out of slow start", name)
				require.InDelta(t, spaceMargin*tc.rate, space, 1e-9, "%s: the fleet's calls not spaced at its own rate", name)
			}
			if tc.clash {
				require.NotEqual(t, aimd.Decreased, o.decision.Change)
			}
		})
	}
}

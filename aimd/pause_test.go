package aimd

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// busyFor feeds s a fast success every 10 ms for d µs from *at.
func busyFor(c *Controller, s *State, at *int64, d int64) {
	for end := *at + d; *at < end; {
		*at += 10 * ms
		c.Observe(s, *at, ok(10*ms))
	}
}

// probeAfter keeps the key busy from at, lets it reach its level within
// 8 s, and returns how long after refused (µs) a probe first raised the
// rate above that level, failing if none came within 60 s of it.
func probeAfter(t *testing.T, c *Controller, s *State, at, refused int64) int64 {
	t.Helper()
	busyFor(c, s, &at, 8*s1)
	level := s.rate
	for s.rate <= level {
		busyFor(c, s, &at, 100*ms)
		require.Less(t, at, refused+60*s1, "no probe within 60 s")
	}
	return at - refused
}

// Issue 18: a probe above the limit of a provider that answers with a
// Retry-After costs the whole key that pause (a second, when the provider
// rounds up). The hold before probing is then at least probeCost times the
// longest pause: 30 s after a pause of 1 s, where a refusal without one
// probes again after Hold (10 s).
func TestProbeWaitsInProportionToThePause(t *testing.T) {
	t.Parallel()
	cfg := Config{Start: 100, SlowStart: -1, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.9, Hold: 10 * time.Second, UsageMultiple: -1}
	for _, tc := range []struct {
		name       string
		retryAfter int64
		// The rate levels off at once after a pause, 3.5 s after a
		// refusal without one; it holds there until holdUntil and probes
		// by probeBy (µs after the refusal).
		holdUntil, probeBy int64
	}{
		{"no pause", 0, 12 * s1, 16 * s1},
		{"a pause of 1 s", s1, 29 * s1, 33 * s1},
		{"a pause of 10 ms, after one of 1 s", s1, 29 * s1, 33 * s1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := mustNew(t, cfg)
			s := c.Init()
			at := t0
			c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: tc.retryAfter})
			if tc.name == "a pause of 10 ms, after one of 1 s" {
				busyFor(c, &s, &at, 5*s1)
				c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: 10 * ms})
			}
			refused := at
			busyFor(c, &s, &at, 5*s1)
			level := s.rate
			require.Less(t, level, 100.0)
			for at < refused+tc.holdUntil {
				busyFor(c, &s, &at, s1)
				require.InDelta(t, level, s.rate, 1e-9, "holding %d s after the refusal", (at-refused)/s1)
			}
			busyFor(c, &s, &at, refused+tc.probeBy-at)
			require.Greater(t, s.rate, level, "probing again %d s after the refusal", (at-refused)/s1)
		})
	}
}

// Issue 18: slow start grows e^SlowStart a second, so when its first
// refusal comes back the rate is far over the limit. With a Retry-After
// (every refusal more costs a pause) it cuts twice as deep and recovers
// under the rate one decrease leaves (0.9 x 0.8 of the rate refused), not
// to 0.9 of the overshoot. A refusal soon after the pause, while
// recovering, says even the rate it resumed at was over the limit: the
// recovery stays under that one.
func TestSlowStartEndsUnderItsOvershoot(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 10, SlowStart: 2, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.9, UsageMultiple: -1})
	s := c.Init()
	at := t0
	for s.rate < 100 {
		at += 10 * ms
		c.Observe(&s, at, ok(10*ms))
	}
	require.True(t, s.Probing())
	r := s.rate
	d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 10 * ms, RetryAfter: s1})
	require.Equal(t, Decreased, d.Change)
	require.InDelta(t, 0.64*r, d.Rate, 1e-9, "twice as deep")
	busyFor(c, &s, &at, 6*s1)
	require.InDelta(t, 0.9*0.8*r, s.rate, 1e-9, "recovered under one decrease of the overshoot")

	// Again, refused 500 ms after the pause, at 0.7 r: the recovery
	// stays under 0.64 r, the rate it resumed at.
	s = c.Init()
	at = t0
	for s.rate < 100 {
		at += 10 * ms
		c.Observe(&s, at, ok(10*ms))
	}
	r = s.rate
	c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 10 * ms, RetryAfter: s1})
	at += s1
	for s.rate < 0.7*r {
		at += 10 * ms
		c.Observe(&s, at, ok(10*ms))
	}
	from := s.rate
	d = c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 10 * ms, RetryAfter: s1})
	require.InDelta(t, 0.64*from, d.Rate, 1e-9)
	busyFor(c, &s, &at, 6*s1)
	require.InDelta(t, 0.9*0.64*r, s.rate, 1e-9, "under the rate the last pause resumed at")
}

// Issue 18: the level the slow start's end leaves (0.9 x 0.8 of the rate
// first refused) depends on how far the slow start overshot, so it may lie
// well under the limit (0.86 of it after an overshoot of 1.18x), and
// nothing but a probe says so. It holds for Hold alone before its first
// probe, not 30 times the pause; a level that a refusal soon after the
// pause set holds for 30 times the pause, as any other.
func TestFirstLevelAfterSlowStartProbesAfterHold(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 10, SlowStart: 2, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.9, Hold: 10 * time.Second, UsageMultiple: -1})
	probedAt := func(chained bool) int64 {
		s := c.Init()
		at := t0
		for s.rate < 100 {
			at += 10 * ms
			c.Observe(&s, at, ok(10*ms))
		}
		c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 10 * ms, RetryAfter: s1})
		refused := at
		if chained {
			at += s1 + 200*ms
			c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 10 * ms, RetryAfter: s1})
			refused = at
		}
		return probeAfter(t, c, &s, at, refused)
	}
	first := probedAt(false)
	require.Less(t, first, 20*s1, "the slow start's level probed %v after the refusal", time.Duration(first)*time.Microsecond)
	require.GreaterOrEqual(t, first, 10*s1, "after a whole Hold")
	again := probedAt(true)
	require.GreaterOrEqual(t, again, 30*s1, "a level a chained refusal set probed %v after it", time.Duration(again)*time.Microsecond)
}

// Issue 18, a saturated machine: resumed at 45/s after the limit halved to
// 50/s, the fleet grew to 57/s and was refused under 2 s after the pause.
// That chained refusal says the rate refused was over the limit, not the
// rate resumed at, which was served: the level recovery aims at under it
// is a guess, probed after Hold alone (chainGrew), where it held 41/s for
// 25 s. A chained refusal near the rate resumed at says that one was over
// too: its level holds 30 times the pause, as any other.
func TestChainedLevelUnderARateThatGrewProbesAfterHold(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 10, SlowStart: 2, IgnoreLatency: true, Decrease: 0.7, Plateau: 0.9, Hold: 10 * time.Second, UsageMultiple: -1})
	probedAt := func(after int64) int64 {
		s := c.Init()
		at := t0
		for s.rate < 100 {
			at += 10 * ms
			c.Observe(&s, at, ok(10*ms))
		}
		c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 10 * ms, RetryAfter: s1})
		resumed := s.rate
		at += s1
		busyFor(c, &s, &at, after)
		grew := s.rate / resumed
		c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 10 * ms, RetryAfter: s1})
		refused := at
		if after > s1 {
			require.Greater(t, grew, chainGrew, "grown past the rate resumed at")
		} else {
			require.Less(t, grew, chainGrew, "near the rate resumed at")
		}
		return probeAfter(t, c, &s, at, refused)
	}
	grown := probedAt(1500 * ms)
	require.Less(t, grown, 20*s1, "a level under a rate that grew probed %v after the refusal", time.Duration(grown)*time.Microsecond)
	require.GreaterOrEqual(t, grown, 10*s1, "after a whole Hold")
	near := probedAt(200 * ms)
	require.GreaterOrEqual(t, near, 30*s1, "a level under the rate resumed at probed %v after it", time.Duration(near)*time.Microsecond)
}

// A Retry-After that comes soon after the rate levelled off says the level
// is over the limit (a bucket refuses sooner the further over it is): the
// next level is the plateau under it, not half way back. One that comes
// after the level held a while says it was just over: half way back (9 s
// after the first refusal: from 10 s, one at a rate held that long is
// excused, TestRefusalAtASustainedRateIsExcused).
func TestLevelAfterARetryAfter(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 100, SlowStart: -1, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.9, Hold: time.Minute, UsageMultiple: -1})
	for _, tc := range []struct {
		after int64 // µs after the first refusal
		level float64
	}{
		{3500 * ms, 0.9 * 90},
		{9 * s1, 0.95 * 90},
	} {
		s := c.Init()
		at := t0
		c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms})
		busyFor(c, &s, &at, tc.after)
		require.InDelta(t, 90.0, s.rate, 1e-9, "levelled off at 0.9 x 100")
		c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1})
		busyFor(c, &s, &at, 5*s1)
		require.InDelta(t, tc.level, s.rate, 1e-9, "refused %v after the first refusal", time.Duration(tc.after)*time.Microsecond)
	}
}

// Issue 18, item 5: a latency rise with no throttle signal moves the rate
// only within bounds. Slow successes cut the rate (down to half at once),
// but never below LatencyFloor of the highest rate calls succeeded at in
// the last window or two; a throttle takes it lower.
func TestLatencyAloneIsBounded(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 100, Ceiling: 100, SlowStart: -1, Decrease: 0.5, LatencyFactor: 2, UsageMultiple: -1})
	s := c.Init()
	at := t0
	busyFor(c, &s, &at, s1) // the target: 10 ms; 100/s proven
	require.InDelta(t, 100.0, s.rate, 1e-9)
	decreases := 0
	for range 500 { // 5 s of calls 20 times slower
		at += 10 * ms
		d := c.Observe(&s, at, Sample{Outcome: Success, Latency: 200 * ms})
		if d.Change == Decreased {
			require.Equal(t, ReasonLatency, d.Reason)
			decreases++
		}
		require.GreaterOrEqual(t, s.rate, LatencyFloor*100-1e-9)
	}
	require.Positive(t, decreases)
	require.InDelta(t, LatencyFloor*100, s.rate, 1e-9, "at the bound")
	d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 10 * ms})
	require.Equal(t, Decreased, d.Change)
	require.InDelta(t, 0.5*LatencyFloor*100, d.Rate, 1e-9, "a throttle goes below it")

	// The bound is the rate proven lately: after 20 s at the bound, the
	// latency alone may take 60 % off that.
	s = c.Init()
	at = t0
	busyFor(c, &s, &at, s1)
	for range 2500 { // 25 s
		at += 10 * ms
		c.Observe(&s, at, Sample{Outcome: Success, Latency: 200 * ms})
	}
	require.Less(t, s.rate, LatencyFloor*100)
	require.GreaterOrEqual(t, s.rate, LatencyFloor*LatencyFloor*100-1e-9)
}

// Issue 18: a process starved of CPU sends calls in bunches that empty a
// provider's small burst below a rate the fleet kept up for seconds. Such
// a process's refusal (Sample.Bunched) with a Retry-After at a rate
// sustained for a whole sustainSpan, excuseSpan or more after the last
// throttle signal, pauses the key but keeps its rate, and the refusals of
// the calls in flight with it are not news. A refusal again soon after the
// pause says the limit did fall: it halves the rate kept. One again within
// excuseSpan, not soon after the pause, is an ordinary decrease.
func TestRefusalAtASustainedRateIsExcused(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 100, SlowStart: -1, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.9, Hold: time.Minute, UsageMultiple: -1})
	level := func() (State, int64) {
		s, at := levelledAt90(t, c)
		d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1, Bunched: true})
		require.Equal(t, Unchanged, d.Change)
		require.InDelta(t, 90.0, d.Rate, 1e-9, "excused: the rate held")
		require.Equal(t, at+s1, d.PausedUntil, "paused all the same")
		d = c.Observe(&s, at+20*ms, Sample{Outcome: Throttled, Latency: 30 * ms, RetryAfter: 980 * ms, Bunched: true})
		require.Equal(t, Unchanged, d.Change, "a call in flight with it")
		return s, at + s1
	}

	t.Run("kept after the pause", func(t *testing.T) {
		t.Parallel()
		s, at := level()
		busyFor(c, &s, &at, 5*s1)
		require.InDelta(t, 90.0, s.rate, 1e-9)
	})
	t.Run("refused again soon after the pause", func(t *testing.T) {
		t.Parallel()
		s, at := level()
		busyFor(c, &s, &at, 200*ms)
		d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1})
		require.Equal(t, Decreased, d.Change)
		require.InDelta(t, 0.5*90, d.Rate, 1e-9, "the fall confirmed: halved (confirmedCut)")
		requireHeldThenProbed(t, c, &s, &at, 59*s1)
	})
	t.Run("refused again soon after a pause not excused", func(t *testing.T) {
		t.Parallel()
		s := c.Init()
		at := t0
		c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms})
		busyFor(c, &s, &at, 3*s1) // not sustained long enough after the refusal
		d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1})
		require.Equal(t, Decreased, d.Change)
		from := d.Rate
		at += s1
		busyFor(c, &s, &at, 200*ms)
		d = c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1})
		require.InDelta(t, 0.64*from, d.Rate, 1e-9, "twice as deep, not halved")
	})
	t.Run("refused again within excuseSpan", func(t *testing.T) {
		t.Parallel()
		s, at := level()
		busyFor(c, &s, &at, 5*s1)
		d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1})
		require.Equal(t, Decreased, d.Change)
		require.InDelta(t, 0.9*90, d.Rate, 1e-9, "the plateau under the rate refused")
		// And the rate it left is not sustained yet: a refusal at it
		// 10 s later is no excuse until it held 2 s (it levels off at
		// 0.95 x 90 after the refusal at a level held a while).
		busyFor(c, &s, &at, 10*s1)
		require.InDelta(t, 0.95*90, s.rate, 1e-9)
		d = c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1, Bunched: true})
		require.Equal(t, Unchanged, d.Change, "held for seconds, 10 s after the last refusal")
	})
	t.Run("not above the rate sustained", func(t *testing.T) {
		t.Parallel()
		s, at := levelledAt90(t, c)
		c.SetRate(&s, 95) // the fleet's shared rate, never held here
		d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1, Bunched: true})
		require.Equal(t, Decreased, d.Change)
		require.InDelta(t, 0.9*95, d.Rate, 1e-9, "an ordinary decrease: the plateau under it")
	})
	t.Run("not for an idle key", func(t *testing.T) {
		t.Parallel()
		s := c.Init()
		at := t0
		c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms})
		for end := at + 12*s1; at < end; { // a call a second at 90/s
			at += s1
			c.Observe(&s, at, ok(10*ms))
		}
		d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1, Bunched: true})
		require.Equal(t, Decreased, d.Change)
		require.InDelta(t, 0.9*90, d.Rate, 1e-9, "an ordinary decrease: the plateau under it")
	})
}

// Issue 18: a refusal at a rate the key held for seconds, from a process
// whose calls are not bunched, is answered as any refusal after slow start
// is: the key resumes at the plateau under the rate refused, and keeps
// near it when nothing follows (a level near the limit refused now and
// then, as on a saturated machine, where halving at once ran the fleet at
// half its limit for 30 s and more). A refusal again soon after the pause
// says the limit fell: the rate refused first halves and holds there, with
// no recovery towards the old level. A pause heard from another process (a
// Failed sample with a Retry-After) does the same.
func TestRefusalAtAHeldRateCutsToThePlateau(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 100, SlowStart: -1, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.9, Hold: time.Minute, UsageMultiple: -1})
	for _, tc := range []struct {
		name string
		in   Sample
	}{
		{"refused", Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1}},
		{"a pause heard from the fleet", Sample{Outcome: Failed, RetryAfter: s1}},
	} {
		held := func(t *testing.T) (State, int64) {
			s, at := levelledAt90(t, c)
			d := c.Observe(&s, at, tc.in)
			require.Equal(t, Decreased, d.Change)
			require.InDelta(t, 0.9*90, d.Rate, 1e-9, "the plateau under the rate refused")
			require.Equal(t, at+s1, d.PausedUntil, "and paused")
			d = c.Observe(&s, at+20*ms, Sample{Outcome: Throttled, Latency: 30 * ms, RetryAfter: 980 * ms})
			require.Equal(t, Unchanged, d.Change, "a call in flight with it")
			return s, at + s1 // the pause
		}
		t.Run(tc.name+", then nothing", func(t *testing.T) {
			t.Parallel()
			s, at := held(t)
			busyFor(c, &s, &at, 20*s1)
			require.InDelta(t, 0.95*90, s.rate, 1e-9, "near the rate refused: half way back, as after a level held a while")
		})
		t.Run(tc.name+", then refused soon after the pause", func(t *testing.T) {
			t.Parallel()
			s, at := held(t)
			busyFor(c, &s, &at, 200*ms)
			d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1})
			require.Equal(t, Decreased, d.Change)
			require.InDelta(t, 0.5*90, d.Rate, 1e-9, "the fall confirmed: half the rate refused first (confirmedCut)")
			at += s1
			requireHeldThenProbed(t, c, &s, &at, 58*s1)
		})
	}
	t.Run("not within excuseSpan of the last refusal", func(t *testing.T) {
		t.Parallel()
		s := c.Init()
		at := t0
		c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms})
		busyFor(c, &s, &at, 9*s1)
		d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1})
		require.Equal(t, Decreased, d.Change)
		require.InDelta(t, 0.9*90, d.Rate, 1e-9, "the plateau under the rate refused")
		at += s1
		busyFor(c, &s, &at, 200*ms)
		from := s.rate
		d = c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1})
		require.InDelta(t, 0.64*from, d.Rate, 1e-9, "refused again soon after: twice as deep, not halved")
	})
}

// Issue 18 item 4: a probe above the proven plateau that gets 10 % past
// it with no trouble has found a limit that rose; the rate then ramps up
// (x1.65 a second) rather than creep up at 2 % of the old peak a second,
// which took 45 s to find a doubled limit. The ramp ends at the first
// refusal as a slow start does: with a Retry-After, cut twice as deep.
func TestProbePastTheSpanRampsToARaisedLimit(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 100, SlowStart: 2, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.9, Hold: 10 * time.Second, UsageMultiple: -1})
	s := c.Init()
	at := t0
	c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms})
	require.False(t, s.Probing())
	// Level off and hold until the probe begins.
	for s.Good() == 0 {
		busyFor(c, &s, &at, s1)
		require.Less(t, at, t0+60*s1, "no probe within 60 s")
	}
	good, began := s.Good(), at
	require.False(t, s.Probing(), "a probe starts without ramping")
	for s.rate < 2*good {
		// Served at 200 calls a second, past 1.1 x the rate refused
		// (100/s): the limit rose.
		for end := at + 100*ms; at < end; {
			at += 5 * ms
			c.Observe(&s, at, ok(10*ms))
		}
		require.Less(t, at, began+10*s1, "the rate reached only %.1f/s (plateau %.1f/s) 10 s after the probe began", s.rate, good)
	}
	require.True(t, s.Probing(), "ramping")
	r := s.rate
	d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 10 * ms, RetryAfter: s1})
	require.Equal(t, Decreased, d.Change)
	require.False(t, s.Probing(), "a refusal ends the ramp")
	require.InDelta(t, r*0.8*0.8, s.rate, 1e-6, "cut twice as deep, as at the end of a slow start")
}

// A probe that fails within the span (the limit did not move) does not
// ramp: it returns to the proven plateau.
func TestProbeWithinTheSpanDoesNotRamp(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 100, SlowStart: 2, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.9, Hold: 10 * time.Second, UsageMultiple: -1})
	s := c.Init()
	at := t0
	c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms})
	for s.rate <= s.Good()*1.05 || s.Good() == 0 {
		busyFor(c, &s, &at, 100*ms)
		require.False(t, s.Probing(), "ramping at %.2f x the plateau", s.rate/max(s.Good(), 1e-9))
		require.Less(t, at, t0+60*s1)
	}
	good := s.Good()
	c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 10 * ms, RetryAfter: s1})
	require.InDelta(t, good, s.rate, 1e-9)
	require.False(t, s.Probing())
}

// A key served slower than its proven plateau (the pace does not bind:
// the application sends less) proves nothing by probing past it: no ramp.
func TestProbeOfAnIdleKeyDoesNotRamp(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 100, SlowStart: 2, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.9, Hold: 10 * time.Second, UsageMultiple: -1})
	s := c.Init()
	at := t0
	c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms})
	for end := at + 40*s1; at < end; {
		at += 20 * ms // 50 calls a second, under the plateau of 90
		c.Observe(&s, at, ok(10*ms))
		require.False(t, s.Probing(), "ramping at %.1f/s, %d s after the refusal", s.rate, (at-t0)/s1)
	}
	require.Greater(t, s.Good(), 0.0, "the plateau was proven and probed above")
}

// A provider's burst lets a pace over its limit pass for a while, and a
// key that sends less than it may is not refused, so a probe may be well
// past probeSpan when the first refusal comes: before it ramped, it found
// no limit that rose, and it returns to the proven plateau (issue 18:
// recovering from 1.12 x the plateau as from an ordinary refusal left the
// key at 0.86 of the limit).
func TestProbeRefusedBeforeItRampedReturnsToThePlateau(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 100, SlowStart: 2, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.9, Hold: 10 * time.Second, UsageMultiple: -1})
	s := c.Init()
	at := t0
	c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms})
	for s.Good() == 0 || s.rate < 1.15*s.Good() {
		at += 20 * ms // served at 50/s: the probe does not ramp
		c.Observe(&s, at, ok(10*ms))
		require.Less(t, at, t0+60*s1)
	}
	require.False(t, s.Probing())
	good := s.Good()
	c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 10 * ms, RetryAfter: s1})
	require.InDelta(t, good, s.rate, 1e-9, "back to the proven plateau")
}

// Issue 18 item 4: a probe above the proven plateau grows by probeGrowth
// times itself a second, so that it passes probeSpan (where a limit that
// rose shows) within about a second; at the additive 2 % of the peak a
// second it took 5 s. Without slow start the increase stays additive.
func TestProbeGrowsGeometrically(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		slowStart float64
		// After a second of probing the rate is at least min and at
		// most max times the plateau.
		min, max float64
	}{
		{"with slow start", 2, 1.1, 1.11},
		{"without slow start", -1, 1.0, 1.03},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := mustNew(t, Config{Start: 100, SlowStart: tc.slowStart, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.9, Hold: 10 * time.Second, UsageMultiple: -1})
			s := c.Init()
			at := t0
			c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms})
			for s.Good() == 0 {
				at += 10 * ms
				c.Observe(&s, at, ok(10*ms))
				require.Less(t, at, t0+60*s1, "no probe within a minute")
			}
			good := s.Good()
			require.InDelta(t, 90.0, good, 1e-9)
			begun := at
			for at < begun+s1 {
				at += 12 * ms
				c.Observe(&s, at, ok(10*ms))
			}
			// Served at 83 calls a second, under 1.1 x the plateau: no
			// ramp, the probe alone.
			require.False(t, s.Probing(), "ramping")
			require.GreaterOrEqual(t, s.rate, tc.min*good, "a second into the probe")
			require.LessOrEqual(t, s.rate, tc.max*good, "a second into the probe")
		})
	}
}

// Issue 18: a probe ramps only once served past probeSpan times the rate
// where trouble was found, not merely past probeSpan times the plateau
// under it: a provider's burst lets the rate it refused pass for a second
// (with a plateau at 0.92 of the limit, 1.1 x it is 1.01 x the limit), and
// a ramp that took that for a raised limit was refused at once and cut
// twice as deep. Refused at 100/s, with a plateau of 90/s, a probe served
// at 100 calls a second is no proof; refused, it returns to the plateau.
func TestProbeRampsOnlyPastTheRateRefused(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 100, SlowStart: 2, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.9, Hold: 10 * time.Second, UsageMultiple: -1})
	s := c.Init()
	at := t0
	c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms})
	for s.Good() == 0 || s.rate < 1.15*s.Good() {
		busyFor(c, &s, &at, 100*ms) // served at 100 calls a second
		require.False(t, s.Probing(), "ramping at %.1f/s, served at 100/s, %d ms after the refusal at 100/s", s.rate, (at-t0)/ms)
		require.Less(t, at, t0+60*s1)
	}
	good := s.Good()
	require.InDelta(t, 90.0, good, 1e-9)
	c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 10 * ms, RetryAfter: s1})
	require.InDelta(t, good, s.rate, 1e-9, "back to the proven plateau")
}

// levelledAt90 returns a key of c (Plateau 0.9, Start 100, no slow start)
// that levelled off at 90/s after a refusal and held there 12 s with
// calls, and the time it got there.
func levelledAt90(t *testing.T, c *Controller) (State, int64) {
	t.Helper()
	s := c.Init()
	at := t0
	c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms})
	busyFor(c, &s, &at, 12*s1)
	require.InDelta(t, 90.0, s.rate, 1e-9, "levelled off at 0.9 x 100")
	return s, at
}

// requireHeldThenProbed checks that a key halved from 90/s holds 45/s for
// hold µs of calls more, with no recovery towards the old level, and that
// a probe above it begins within 3 s after that.
func requireHeldThenProbed(t *testing.T, c *Controller, s *State, at *int64, hold int64) {
	t.Helper()
	busyFor(c, s, at, hold)
	require.InDelta(t, 0.5*90, s.rate, 1e-9, "held")
	busyFor(c, s, at, 3*s1)
	require.Greater(t, s.rate, 0.5*90, "a probe looks for more")
}

// Issue 18: a confirmed fall halves the rate the key held, not what a
// latency cut left of it before the fall: a fleet slowed to 0.83 of 100/s
// by latency alone when the limit halved was halved to 0.83 of the new
// 50/s, and held there for the last 30 s of the run.
func TestConfirmedFallHalvesTheRateHeld(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 100, SlowStart: -1, Decrease: 0.8, Plateau: 0.9, LatencyFactor: 2, Hold: time.Minute, UsageMultiple: -1})
	for _, bunched := range []bool{true, false} {
		t.Run(fmt.Sprintf("bunched %v", bunched), func(t *testing.T) {
			t.Parallel()
			s, at := levelledAt90(t, c)
			for s.rate >= 90 { // slow successes: a latency cut
				at += 10 * ms
				c.Observe(&s, at, Sample{Outcome: Success, Latency: 100 * ms})
				require.Less(t, at, t0+20*s1, "no latency cut")
			}
			busyFor(c, &s, &at, s1) // past the cooldown, recovering
			slowed := s.rate
			require.Less(t, slowed, 0.9*90)
			c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1, Bunched: bunched})
			at += s1
			busyFor(c, &s, &at, 200*ms)
			d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1})
			require.Equal(t, Decreased, d.Change)
			require.InDelta(t, 0.5*90, d.Rate, 1e-9, "the fall confirmed: half the rate held (90), not of the %.1f latency left", slowed)
		})
	}
}

// The halving of a confirmed fall never raises the rate: when latency
// alone took the key under half the rate it held, the refusal cuts to the
// plateau under the rate refused, as any refusal does.
func TestConfirmedFallNeverRaisesTheRate(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 100, SlowStart: -1, Decrease: 0.8, Plateau: 0.9, LatencyFactor: 2, Hold: time.Minute, UsageMultiple: -1})
	s, at := levelledAt90(t, c)
	for range 500 { // 5 s of calls 10 times slower: down to the bound
		at += 10 * ms
		c.Observe(&s, at, Sample{Outcome: Success, Latency: 100 * ms})
	}
	slowed := s.rate
	require.Less(t, slowed, 0.5*90, "latency took the key under half the rate held")
	c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1, Bunched: true})
	require.InDelta(t, slowed, s.rate, 1e-9, "excused: the rate kept")
	at += s1
	busyFor(c, &s, &at, 200*ms)
	from := s.rate
	require.Less(t, from, 0.5*90, "still under half the rate held")
	d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1})
	require.Equal(t, Decreased, d.Change)
	require.InDelta(t, 0.9*from, d.Rate, 1e-9, "the plateau under the rate refused (%.1f)", from)
}

// A fleet's first calls clashing at a provider whose bucket holds a token or
// two (Sample.Clash) cut nothing before the slow start grew: the pause is
// waited out and the slow start goes on (issue 18, a bucket of one token at
// 100/s: cut to 0.64 of Start and out of slow start, the fleet sent a call a
// second for 40 s). The next refusal, clash or not, is an ordinary one, and
// so is a clash once the rate grew.
func TestTheFleetsFirstCallsClashingCutNothing(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{})
	clash := Sample{Outcome: Throttled, Latency: 20 * ms, RetryAfter: s1, Clash: true}

	s := c.Init()
	d := c.Observe(&s, t0+20*ms, clash)
	require.NotEqual(t, Decreased, d.Change, "the first calls' clash cut")
	require.Equal(t, c.start, s.rate)
	require.True(t, s.probing, "out of slow start")
	require.Equal(t, t0+20*ms+s1, d.PausedUntil, "the pause is waited out")
	d = c.Observe(&s, t0+s1+40*ms, clash)
	require.Equal(t, Decreased, d.Change, "a second clash is a refusal")
	require.False(t, s.probing)

	s = c.Init()
	d = c.Observe(&s, t0+20*ms, Sample{Outcome: Throttled, Latency: 20 * ms, RetryAfter: s1})
	require.Equal(t, Decreased, d.Change, "a refusal at Start with no clash")

	s = c.Init()
	for at := t0; s.rate < 2*c.start; at += 100 * ms {
		c.Observe(&s, at, ok(20*ms))
	}
	d = c.Observe(&s, t0+5*s1, clash)
	require.Equal(t, Decreased, d.Change, "a clash once the slow start grew")
}

// Issue 18: a provider that states the milliseconds until its next token
// pauses the key for a short while (outbound makes it 150 ms at least).
// A call sent after that pause ended, and refused, was sent at the rate the
// refusal left: news, within the cooldown too, so a key whose cut did not
// take it under a limit that halved cuts again at once (a refusal soon
// after its pause), rather than send for the rest of the cooldown at a rate
// the provider refuses (a provider that bans after five refusals in 10 s
// counted four more, and banned the fleet). A call sent before the
// decrease, answered after it, is the same episode's, and so is one sent
// after a pause of a few milliseconds.
func TestARefusalAfterAShortPauseIsNewsWithinTheCooldown(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 100, SlowStart: -1, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.9, Cooldown: 500 * time.Millisecond,
		Hold: 10 * time.Second, UsageMultiple: -1})
	s := c.Init()
	at := t0
	busyFor(c, &s, &at, 3*s1)
	d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 20 * ms, RetryAfter: 150 * ms})
	require.Equal(t, Decreased, d.Change)
	first := s.rate
	// In flight when the refusal came: the same episode.
	d = c.Observe(&s, at+10*ms, Sample{Outcome: Throttled, Latency: 20 * ms, RetryAfter: 150 * ms})
	require.NotEqual(t, Decreased, d.Change)
	require.GreaterOrEqual(t, s.rate, first)
	// Sent 10 ms after the pause's end, refused 20 ms later: news.
	d = c.Observe(&s, at+180*ms, Sample{Outcome: Throttled, Latency: 20 * ms, RetryAfter: 150 * ms})
	require.Equal(t, Decreased, d.Change, "a refusal of a call sent after the pause, within the cooldown")
	require.Less(t, s.rate, first*c.decrease, "refused soon after the pause: a chained cut")

	// A pause of a few milliseconds (sharePause) sheds nothing: a refusal
	// after it is the same rate's, and waits for the cooldown (or the
	// served share) as before.
	s = c.Init()
	at = t0
	busyFor(c, &s, &at, 3*s1)
	d = c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 20 * ms, RetryAfter: 5 * ms})
	require.Equal(t, Decreased, d.Change)
	first = s.rate
	d = c.Observe(&s, at+40*ms, Sample{Outcome: Throttled, Latency: 20 * ms, RetryAfter: 5 * ms})
	require.NotEqual(t, Decreased, d.Change, "sent after a pause of 5 ms, within the cooldown")
	require.GreaterOrEqual(t, s.rate, first)
}

// Issue 18 (chainMargin), two OS processes against a bucket that states the
// milliseconds to its next token and bans after five refusals in 10 s: at
// the halving three episodes within a second (the last two chained soon
// after their pauses) cost four refusals, and recovery to the plateau under
// the rate the last one resumed at was 1.02 of the new limit: refused again
// 5.4 s later, a ban. A first chained refusal recovers to the plateau under
// the rate it resumed at; a second in a row, chainMargin under that.
func TestASecondChainedRefusalRecoversFurtherUnder(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 10, SlowStart: 2, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.91, Hold: 10 * time.Second, UsageMultiple: -1})
	levelAfter := func(chains int) (level, resumed float64) {
		s := c.Init()
		at := t0
		for s.rate < 100 {
			at += 10 * ms
			c.Observe(&s, at, ok(10*ms))
		}
		refuse := func() {
			d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 10 * ms, RetryAfter: s1})
			require.Equal(t, Decreased, d.Change)
		}
		refuse() // the slow start's end
		for range chains {
			resumed = s.rate
			at += s1 + 200*ms // soon after the pause
			refuse()
		}
		busyFor(c, &s, &at, 5*s1)
		return s.rate, resumed
	}
	level, resumed := levelAfter(1)
	require.InDelta(t, 0.91*resumed, level, 1e-6, "one chained refusal: the plateau under the rate it resumed at")
	level, resumed = levelAfter(2)
	require.InDelta(t, chainMargin*0.91*resumed, level, 1e-6, "a second in a row: chainMargin under that")
}

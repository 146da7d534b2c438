package aimd

import (
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

// A Retry-After that comes soon after the rate levelled off says the level
// is over the limit (a bucket refuses sooner the further over it is): the
// next level is the plateau under it, not half way back. One that comes
// after the level held a while says it was just over: half way back.
func TestLevelAfterARetryAfter(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 100, SlowStart: -1, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.9, Hold: time.Minute, UsageMultiple: -1})
	for _, tc := range []struct {
		after int64 // µs after the first refusal
		level float64
	}{
		{3500 * ms, 0.9 * 90},
		{10 * s1, 0.95 * 90},
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

package aimd

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Issue 18: a throttle with no Retry-After (a bare 429, a 503) leaves the
// key sending, so the share of the calls sent since the last decrease that
// were served says how far over the limit the rate is: once shareSamples
// of them are answered and fewer than Decrease were served, the rate goes
// to shareMargin of that share at once, without waiting for the cooldown.
func TestServedShareCutsToTheLimit(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 200, SlowStart: -1, IgnoreLatency: true, Decrease: 0.8, Cooldown: 500 * time.Millisecond, UsageMultiple: -1})
	first := func() (State, int64) {
		s := c.Init()
		at := t0
		d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms})
		require.InDelta(t, 160.0, d.Rate, 1e-9, "the first cut: Decrease")
		return s, at
	}

	// halfServed observes 4 successes and 4 refusals (with a Retry-After
	// of ra, if any), alternating every 5 ms, all sent after the cut.
	halfServed := func(s *State, at *int64, ra int64) Decision {
		var d Decision
		for i := range 8 {
			*at += 5 * ms
			in := Sample{Outcome: Success, Latency: 2 * ms}
			if i%2 == 1 {
				in = Sample{Outcome: Throttled, Latency: 2 * ms, RetryAfter: ra}
			}
			d = c.Observe(s, *at, in)
		}
		return d
	}

	// Refusals with no Retry-After, and with one of a few milliseconds
	// (sharePause), which sheds no load either.
	for _, ra := range []int64{0, 10 * ms} {
		t.Run(fmt.Sprintf("half served, Retry-After %d µs", ra), func(t *testing.T) {
			t.Parallel()
			s, at := first()
			d := halfServed(&s, &at, ra)
			require.Less(t, at-t0, int64(500*ms), "within the cooldown")
			require.Equal(t, Decreased, d.Change)
			require.InDelta(t, 160*0.5*shareMargin, d.Rate, 0.5, "to the served share, at once")
		})
	}
	t.Run("mostly served", func(t *testing.T) {
		t.Parallel()
		s, at := first()
		for range 9 {
			at += 5 * ms
			c.Observe(&s, at, Sample{Outcome: Success, Latency: 2 * ms})
		}
		at += 5 * ms
		d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 2 * ms})
		require.Equal(t, Unchanged, d.Change, "within the cooldown, 90 % served: no news")
		at = t0 + 600*ms
		d = c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 2 * ms})
		require.InDelta(t, 160*0.8, d.Rate, 0.5, "after it: Decrease, as before")
	})
	t.Run("not with a Retry-After that pauses", func(t *testing.T) {
		t.Parallel()
		s, at := first()
		d := halfServed(&s, &at, 200*ms)
		require.Equal(t, Unchanged, d.Change, "refusals that pause the key are no share")
		require.InDelta(t, 160.0, d.Rate, 0.5)
	})
	t.Run("calls sent before the cut do not count", func(t *testing.T) {
		t.Parallel()
		s, at := first()
		var d Decision
		for range 8 {
			at += 5 * ms
			d = c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 100 * ms})
		}
		require.Equal(t, Unchanged, d.Change)
		require.InDelta(t, 160.0, d.Rate, 0.5)
	})
}

// Issue 18: a ban says the provider counted too many refusals, and what it
// allows when the ban ends is unknown. The key starts over from Start and
// recovers to a quarter of the rate it was banned at, where it holds for
// the Hold (not 30 x the ban) before it probes; the other
// answers of the same ban (calls that were in flight, or another
// process's heard of as the ban ends) change nothing; a new ban after it
// restarts the key again. A probe that ramps after the hold levels off
// under the rate banned at rather than overshoot it (a ramp's overshoot
// costs several refusals at once, which earned the fleet its next ban).
func TestABanRestartsTheRate(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 2, SlowStart: 2, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.91, Hold: 10 * time.Second, UsageMultiple: -1})
	s := c.Init()
	at := t0
	c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms})
	c.SetRate(&s, 100)
	busyFor(c, &s, &at, 3*s1)
	require.InDelta(t, 100.0, s.rate, 1e-9)
	ban := 30 * s1
	d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: ban, Banned: true})
	require.Equal(t, Decreased, d.Change)
	require.InDelta(t, 2.0, d.Rate, 1e-9, "from Start")
	require.Equal(t, at+ban, d.PausedUntil)
	d = c.Observe(&s, at+3*ms, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: ban - 3*ms, Banned: true})
	require.InDelta(t, 2.0, d.Rate, 1e-9, "the same ban")
	at += ban
	// Another process's answer of the same ban, heard of from the store
	// once ours ended (outbound's notePause): it ends 6 ms after ours.
	d = c.Observe(&s, at+2*ms, Sample{Outcome: Failed, RetryAfter: 4 * ms, Banned: true})
	require.InDelta(t, 2.0, d.Rate, 1e-9, "the same ban, no second start over")
	at += 4 * ms
	busyFor(c, &s, &at, 6*s1)
	require.InDelta(t, 25.0, s.rate, 1e-9, "back to a quarter of the rate banned at")
	busyFor(c, &s, &at, 5*s1)
	require.InDelta(t, 25.0, s.rate, 1e-9, "held there")
	busyFor(c, &s, &at, 8*s1)
	require.Greater(t, s.rate, 25.0, "then a probe")
	// The probe finds no trouble and ramps, up to the plateau under the
	// rate banned at, where it levels off and holds.
	for end := at + 30*s1; s.rate < 91 && at < end; {
		busyFor(c, &s, &at, 10*ms)
	}
	require.InDelta(t, 91.0, s.rate, 1e-9, "levelled off at 0.91 x the 100/s banned at")
	busyFor(c, &s, &at, 5*s1)
	require.InDelta(t, 91.0, s.rate, 1e-9, "held there")
	from := s.rate
	d = c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: 2 * ban, Banned: true})
	require.InDelta(t, 2.0, d.Rate, 1e-9, "a new ban starts over")
	at += 2 * ban
	busyFor(c, &s, &at, 6*s1)
	require.InDelta(t, from/4, s.rate, 1e-9, "back to a quarter of the rate banned at")
}

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
// answers of the same ban (calls that were in flight) change nothing.
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
	busyFor(c, &s, &at, 6*s1)
	require.InDelta(t, 25.0, s.rate, 1e-9, "back to a quarter of the rate banned at")
	busyFor(c, &s, &at, 5*s1)
	require.InDelta(t, 25.0, s.rate, 1e-9, "held there")
	busyFor(c, &s, &at, 8*s1)
	require.Greater(t, s.rate, 25.0, "then a probe")
}

// Issue 18: a refusal soon after the pause of the slow start's end finds
// the limit in the calls served since that refusal: its pause refilled the
// provider's bucket and the calls since spent it, so that 50 served over
// the 1.5 s since it began say 33/s, whatever the burst. The rate goes
// there (a cut by Decrease twice would leave 82/s, over the limit again
// against a provider with a second of burst) and holds there for
// gentleDelay, so that a provider banning after a few refusals in 10 s
// sees no third run of them within 10 s of the first; then it climbs back
// towards the level the cut left. A process that only hears of the
// refusals (a pause another process put in the store) does the same with
// its own calls.
func TestChainedRefusalCutsToTheRateServedSinceThePause(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 200, SlowStart: 2, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.91, Hold: 10 * time.Second, Cooldown: 500 * time.Millisecond, UsageMultiple: -1})
	const est = 50.0 / 1.5
	chain := func(t *testing.T, outcome Outcome) (State, int64) {
		s := c.Init()
		at := t0
		d := c.Observe(&s, at, Sample{Outcome: outcome, Latency: 5 * ms, RetryAfter: s1})
		require.Equal(t, Decreased, d.Change)
		require.InDelta(t, 200*0.8*0.8, d.Rate, 1e-9, "the end of the slow start")
		at += s1
		busyFor(c, &s, &at, 500*ms) // 50 served
		d = c.Observe(&s, at, Sample{Outcome: outcome, Latency: 5 * ms, RetryAfter: s1})
		require.Equal(t, Decreased, d.Change)
		require.InDelta(t, est, d.Rate, 0.1, "the rate served since the first refusal")
		return s, at + s1
	}
	for _, tc := range []struct {
		name    string
		outcome Outcome
	}{{"refused", Throttled}, {"heard", Failed}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, at := chain(t, tc.outcome)
			feed(c, &s, &at, gentleDelay-100*ms, 30*ms)
			require.InDelta(t, est, s.rate, 0.1, "held there")
			feed(c, &s, &at, 2*s1, 30*ms)
			require.Greater(t, s.rate, 1.5*est, "then a climb")
		})
	}
	// A refusal in the climb after calls that came to no more over the
	// rate served than the pause refilled: the climb only spent the
	// provider's burst, and the rate served was the limit.
	t.Run("a climb that spent the burst", func(t *testing.T) {
		t.Parallel()
		s, at := chain(t, Throttled)
		feed(c, &s, &at, gentleDelay+s1, 30*ms) // 33/s: the limit
		require.Greater(t, s.rate, 1.5*est)
		d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1})
		require.Equal(t, Decreased, d.Change)
		require.InDelta(t, est, d.Rate, 0.1, "back to the rate served")
		at += s1
		feed(c, &s, &at, 10*s1, 30*ms)
		require.InDelta(t, est, s.rate, 0.1, "and held")
	})
	// One after calls served well over it: the limit is higher, and the
	// cut is the usual one, under the rate refused.
	t.Run("a climb that found more", func(t *testing.T) {
		t.Parallel()
		s, at := chain(t, Throttled)
		feed(c, &s, &at, gentleDelay, 30*ms)
		feed(c, &s, &at, 2*s1, 10*ms) // 100/s
		from := s.rate
		require.Greater(t, from, 2*est)
		d := c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1})
		require.Equal(t, Decreased, d.Change)
		require.InDelta(t, 0.91*from, d.Rate, 1e-9, "the plateau under the rate refused")
	})
}

// feed observes a success every every µs for d µs from *at.
func feed(c *Controller, s *State, at *int64, d, every int64) {
	for end := *at + d; *at < end; {
		*at += every
		c.Observe(s, *at, ok(10*ms))
	}
}

func TestServedRate(t *testing.T) {
	t.Parallel()
	require.InDelta(t, 40.0, servedRate(60, t0, t0+1500*ms), 1e-9)
	require.Zero(t, servedRate(minServedCalls-1, t0, t0+s1), "too few calls")
	require.Zero(t, servedRate(60, 0, t0), "no decrease yet")
	require.Zero(t, servedRate(60, t0, t0), "no time")
}

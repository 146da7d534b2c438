package aimd

import (
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

	t.Run("half served", func(t *testing.T) {
		t.Parallel()
		s, at := first()
		var d Decision
		for i := range 8 { // 4 served, 4 refused, all sent after the cut
			at += 5 * ms
			out := Success
			if i%2 == 1 {
				out = Throttled
			}
			d = c.Observe(&s, at, Sample{Outcome: out, Latency: 2 * ms})
		}
		require.Less(t, at-t0, int64(500*ms), "within the cooldown")
		require.Equal(t, Decreased, d.Change)
		require.InDelta(t, 160*0.5*shareMargin, d.Rate, 0.5, "to the served share, at once")
	})
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
	t.Run("not with a Retry-After", func(t *testing.T) {
		t.Parallel()
		s, at := first()
		var d Decision
		for i := range 8 {
			at += 5 * ms
			if i%2 == 1 {
				d = c.Observe(&s, at, Sample{Outcome: Throttled, Latency: 2 * ms, RetryAfter: 10 * ms})
			} else {
				d = c.Observe(&s, at, Sample{Outcome: Success, Latency: 2 * ms})
			}
		}
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

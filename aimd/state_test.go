package aimd_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/aimd"
)

var start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

const msec = int64(1000)

// P95 is the nearest-rank 95th percentile of the successes since the last
// decrease: the one figure the controller cuts on and outbound's snapshot
// shows.
func TestStateP95(t *testing.T) {
	t.Parallel()
	c, err := aimd.New(aimd.Config{Start: 10, LatencyTarget: time.Second})
	require.NoError(t, err)
	s := c.Init()
	require.Zero(t, s.P95(), "no successes yet")
	now := start
	for i := int64(20); i >= 1; i-- { // 20 ms down to 1 ms
		now += 10 * msec
		c.Observe(&s, now, aimd.Sample{Outcome: aimd.Success, Latency: i * msec})
	}
	require.Equal(t, 19*msec, s.P95(), "rank ceil(0.95 x 20) = 19 of 1..20 ms")
	for range aimd.RingSize {
		now += 10 * msec
		c.Observe(&s, now, aimd.Sample{Outcome: aimd.Success, Latency: 5 * msec})
	}
	require.Equal(t, 5*msec, s.P95(), "only the last RingSize count")
	now += 10 * msec
	d := c.Observe(&s, now, aimd.Sample{Outcome: aimd.Throttled, Latency: msec})
	require.Equal(t, aimd.Decreased, d.Change)
	require.Zero(t, s.P95(), "a decrease starts the evidence afresh")
	require.False(t, s.Probing(), "slow start ends at the first decrease")
}

// SetRate adopts a rate decided elsewhere within [Floor, Ceiling], and the
// controller adapts from it.
func TestControllerSetRate(t *testing.T) {
	t.Parallel()
	c, err := aimd.New(aimd.Config{Start: 10, Floor: 1, Ceiling: 100, Decrease: 0.5, IgnoreLatency: true})
	require.NoError(t, err)
	s := c.Init()
	c.SetRate(&s, 40)
	require.Equal(t, 40.0, c.Rate(&s))
	d := c.Observe(&s, start, aimd.Sample{Outcome: aimd.Throttled})
	require.Equal(t, 20.0, d.Rate, "the decrease applies to the adopted rate")
	c.SetRate(&s, 1e9)
	require.Equal(t, 100.0, c.Rate(&s), "clamped to the ceiling")
	c.SetRate(&s, 0)
	require.Equal(t, 1.0, c.Rate(&s), "clamped to the floor")
	c.SetRate(&s, math.NaN())
	require.Equal(t, 1.0, c.Rate(&s), "a NaN is ignored")
	var fresh aimd.State
	c.SetRate(&fresh, 30)
	require.Equal(t, 30.0, c.Rate(&fresh), "a zero State starts, then takes the rate")
}

// A capped latency target judges latencies against the cap: successes
// slower than LatencyFactor x the cap no longer raise the rate, and their
// p95 decreases it.
func TestStateCapTarget(t *testing.T) {
	t.Parallel()
	// At 100/s, 40 ms over the 10 ms cap is 4 calls queued
	// (aimd.QueueCalls): a real queue, not one wait for a slot.
	c, err := aimd.New(aimd.Config{Start: 100, LatencyTarget: 100 * time.Millisecond, SlowStart: -1, Increase: 1, UsageMultiple: -1})
	require.NoError(t, err)
	run := func(capped bool) float64 {
		s := c.Init()
		now := start
		for range 20 {
			now += 100 * msec
			if capped {
				s.CapTarget(10 * msec)
			}
			c.Observe(&s, now, aimd.Sample{Outcome: aimd.Success, Latency: 50 * msec})
		}
		return c.Rate(&s)
	}
	require.Greater(t, run(false), 100.0, "50 ms is fast against a 100 ms target")
	require.LessOrEqual(t, run(true), 100.0, "50 ms is slow against a 10 ms cap: no increase (and the p95 cuts)")
	s := c.Init()
	s.CapTarget(0)
	s.CapTarget(-5)
	c.Observe(&s, start, aimd.Sample{Outcome: aimd.Success, Latency: 150 * msec})
	c.Observe(&s, start+s1(), aimd.Sample{Outcome: aimd.Success, Latency: 150 * msec})
	require.Greater(t, c.Rate(&s), 100.0, "a cap <= 0 does nothing")
}

func s1() int64 { return int64(time.Second / time.Microsecond) }

// Hint reports the provider's rate that caps the key.
func TestStateHint(t *testing.T) {
	t.Parallel()
	c, err := aimd.New(aimd.Config{Start: 50})
	require.NoError(t, err)
	s := c.Init()
	require.Zero(t, s.Hint())
	d := c.Observe(&s, start, aimd.Sample{Outcome: aimd.Success, Latency: msec, Hint: 20})
	require.Equal(t, 20.0, s.Hint())
	require.Equal(t, 20.0, d.Rate)
	require.Equal(t, aimd.ReasonHint, d.Reason)
}

// Fastest is the least value of this BaseWindow and the last: a fast value
// is kept through the next window, and forgotten in the one after, so
// that the base follows a provider (or a store) that has become slower
// for good.
func TestFastestForgetsAfterTwoWindows(t *testing.T) {
	t.Parallel()
	var f aimd.Fastest
	require.Zero(t, f.Value(), "nothing seen")
	require.Equal(t, 20*msec, f.Add(start, 20*msec))
	require.Equal(t, 10*msec, f.Add(start+msec, 10*msec))
	require.Equal(t, 10*msec, f.Add(start+2*msec, 30*msec), "slower values keep the fastest")
	// The next window still holds the last one's fastest.
	w := int64(aimd.BaseWindow)
	require.Equal(t, 10*msec, f.Add(start+w, 50*msec))
	require.Equal(t, 10*msec, f.Add(start+w+w/2, 40*msec))
	// The one after holds only the last window's: 40 ms, then 50 ms
	// once that window too has gone by.
	require.Equal(t, 40*msec, f.Add(start+2*w, 60*msec))
	require.Equal(t, 60*msec, f.Add(start+3*w, 70*msec))
	require.Equal(t, int64(1), f.Add(start+3*w+1, 0), "at least 1")
	// A clock that went back starts a new window rather than keeping
	// the base for ever.
	require.Equal(t, int64(1), f.Add(start, 90*msec))
	require.Equal(t, 90*msec, f.Add(start+w, 95*msec))
}

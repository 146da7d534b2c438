package guard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDeadlineFollowsP99: the deadline is the factor times the 99th
// percentile of the answers' latency, within the floor and the ceiling;
// a timeout doubles it at once, and it comes down by at most half per
// recomputation.
func TestDeadlineFollowsP99(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	d := newDeadline(100*ms, 2*time.Second, 4)
	require.Equal(t, 100*ms, d.get())
	// Too few samples: the floor.
	for range minSamples - 1 {
		d.observe(300 * ms)
	}
	require.Equal(t, 100*ms, d.get())
	d.observe(300 * ms)
	require.Equal(t, 1200*ms, d.get(), "4 x p99 once minSamples answers are in")

	// p99 of 1024 samples is the 1014th smallest: 10 slow answers in the
	// last 1024 do not move it, 11 do.
	d = newDeadline(100*ms, 2*time.Second, 4)
	slowThenFast := func(slow int) {
		for i := range recomputeEvery {
			lat := 10 * ms
			if i < slow {
				lat = 400 * ms
			}
			d.observe(lat)
		}
	}
	for range latencySamples / recomputeEvery {
		slowThenFast(0)
	}
	require.Equal(t, 100*ms, d.get(), "floor: 4 x 10ms is below it")
	slowThenFast(10)
	require.Equal(t, 100*ms, d.get(), "10 slow answers in 1024")
	slowThenFast(1)
	require.Equal(t, 1600*ms, d.get(), "11 slow answers in 1024")

	// The ceiling.
	d = newDeadline(100*ms, 2*time.Second, 4)
	for range minSamples {
		d.observe(time.Second)
	}
	require.Equal(t, 2*time.Second, d.get())

	// Quiet answers bring it down by half per recomputation at most.
	d = newDeadline(100*ms, 10*time.Second, 4)
	for range minSamples {
		d.observe(time.Second)
	}
	require.Equal(t, 4*time.Second, d.get())
	for range latencySamples - minSamples {
		d.observe(ms) // the slow samples are still in the ring
	}
	require.Equal(t, 4*time.Second, d.get())
	for range recomputeEvery {
		d.observe(ms) // now they are not
	}
	require.Equal(t, 2*time.Second, d.get(), "down by half")
	for range recomputeEvery {
		d.observe(ms)
	}
	require.Equal(t, time.Second, d.get(), "down by half again")
	for range 10 * recomputeEvery {
		d.observe(ms)
	}
	require.Equal(t, 100*ms, d.get(), "back to the floor")

	// A fixed deadline never moves.
	d = newDeadline(100*ms, 100*ms, 4)
	for range minSamples {
		d.observe(time.Second)
	}
	require.Equal(t, 100*ms, d.get())
}

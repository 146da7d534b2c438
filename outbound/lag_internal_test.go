package outbound

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
)

// Issue 18: a process starved now and then does not read an answer slowed
// down with a stall as the provider's. Its timers fire on time but for two
// stalls of 60 ms: the EWMA of their lateness (11 ms after the second)
// cannot explain an answer of 200 ms, the latest peak can, for one to two
// seconds; then the answer is the provider's again.
func TestAStallExplainsSlowAnswersForASecondOrTwo(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(regT0)
	c := &Client{clk: clk}
	const slow = 200 * time.Millisecond
	require.False(t, c.starved(slow.Microseconds()), "never late")
	c.noteLag(60 * time.Millisecond)
	for range 21 {
		clk.Advance(20 * time.Millisecond)
		c.noteLag(0)
	}
	clk.Advance(20 * time.Millisecond)
	c.noteLag(60 * time.Millisecond)
	ewma := c.lag.Load()
	require.Less(t, lagShare*ewma, slow.Microseconds(), "the EWMA alone cannot explain it")
	require.True(t, c.starved(slow.Microseconds()), "the stall just before can")
	require.False(t, c.starved((time.Second).Microseconds()), "nor an answer of a second")
	clk.Advance(900 * time.Millisecond)
	require.True(t, c.starved(slow.Microseconds()), "within the window and the next")
	for range 110 { // 2.2 s on time
		clk.Advance(20 * time.Millisecond)
		c.noteLag(0)
	}
	require.False(t, c.starved(slow.Microseconds()), "stalls long past explain nothing")
}

package outbound

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 18: the store's jitter adds to how late the calls leave (sendLag),
// and the turns that were due at once, which say nothing of the timers,
// count in it too. A process whose timers fire late is starved whatever
// its store did: the higher of the two judges.
func TestLateTimersJudgeLatencyWhateverTheStoreDid(t *testing.T) {
	t.Parallel()
	c, err := New(Config{})
	require.NoError(t, err)
	c.lag.Store(60_000)  // timers 60 ms late
	c.sendLag.Store(500) // most turns overdue, the store steady
	require.True(t, c.starved(200_000), "late timers explain an answer 200 ms slow")
	c.lag.Store(500)
	c.sendLag.Store(60_000) // a store that stalls
	require.True(t, c.starved(200_000), "so do the store's stalls")
	c.sendLag.Store(500)
	require.False(t, c.starved(200_000), "on time, the answer is the provider's")
}

package job

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAheadFollowsHandlerTime: with ClaimAhead auto (zero) a worker claims
// none ahead before a handler has returned and while handlers take longer
// than a claim per slot, as many as its slots free during one claim in
// between, and 3 x Concurrency at most; a ClaimAhead set is used as it is.
func TestAheadFollowsHandlerTime(t *testing.T) {
	auto := &Worker{cfg: Config{Concurrency: 4, ClaimAhead: autoAheadMax * 4}, autoAhead: true}
	claim := 5 * time.Millisecond
	require.Zero(t, auto.ahead(claim), "claimed ahead before any handler returned")

	auto.noteHandler(time.Minute)
	require.Zero(t, auto.ahead(claim), "claimed ahead of minute-long jobs")

	auto.handlerNS.Store(int64(10 * time.Millisecond))
	require.Equal(t, 2, auto.ahead(claim), "4 slots of 10 ms jobs free 2 during a 5 ms claim")

	auto.handlerNS.Store(int64(50 * time.Microsecond))
	require.Equal(t, 12, auto.ahead(claim), "no more than 3 x Concurrency ahead")

	// The mean follows the handlers: short jobs after long ones bring
	// the claim ahead back.
	auto.handlerNS.Store(int64(time.Second))
	for range 200 {
		auto.noteHandler(100 * time.Microsecond)
	}
	require.Equal(t, 12, auto.ahead(claim))
	auto.noteHandler(0)
	require.Positive(t, auto.handlerNS.Load())

	set := &Worker{cfg: Config{Concurrency: 4, ClaimAhead: 3}}
	require.Equal(t, 3, set.ahead(claim))
	set.noteHandler(time.Minute)
	require.Equal(t, 3, set.ahead(claim), "a ClaimAhead set is not sized")
	none := &Worker{cfg: Config{Concurrency: 4, ClaimAhead: 0}}
	require.Zero(t, none.ahead(claim))
}

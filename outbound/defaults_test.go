package outbound_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/retry"
)

// TestZeroAIMDIsDefaultAIMD: a client built with no AIMD settings (as
// `sluice serve` builds its own) adapts with DefaultAIMD(), the settings
// the figures were measured with, not with package aimd's plain
// defaults. The same calls (successes, then a refusal, then successes) on
// a fake clock leave the key at the same rate as under DefaultAIMD(), and
// at another one under aimd's defaults.
func TestZeroAIMDIsDefaultAIMD(t *testing.T) {
	t.Parallel()
	rateAfter := func(cfg aimd.Config) float64 {
		w := watch(time.Unix(1_700_000_000, 0))
		n := 0
		base := roundTripFunc(func(*http.Request) (*http.Response, error) {
			n++
			if n == 25 {
				return response(http.StatusTooManyRequests, "")(), nil
			}
			return response(http.StatusOK, "ok")(), nil
		})
		c, err := outbound.New(outbound.Config{Base: base, Clock: w, AIMD: cfg, Retry: retry.Config{MaxAttempts: 1}})
		require.NoError(t, err)
		for range 30 {
			getAdvancing(t, w, c, "http://api.example.com/x")
		}
		ks, ok := c.KeySnapshot("api.example.com")
		require.True(t, ok)
		return ks.Rate
	}
	zero := rateAfter(aimd.Config{})
	require.Equal(t, rateAfter(outbound.DefaultAIMD()), zero, "the zero AIMD config adapts as DefaultAIMD()")
	plain := rateAfter(aimd.Config{LatencyWeight: aimd.DefaultLatencyWeight}) // aimd's defaults, but not the zero value
	require.NotEqual(t, plain, zero, "DefaultAIMD() should differ from aimd's defaults in what these calls show")
	require.Greater(t, zero, 0.0)
}

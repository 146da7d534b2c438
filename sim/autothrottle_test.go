package sim

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
)

// slowTransport answers status after latency on a fake clock.
type slowTransport struct {
	clk     *clocktest.Clock
	latency time.Duration
	status  *int
}

func (s slowTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	s.clk.Advance(s.latency)
	rec := httptest.NewRecorder()
	rec.WriteHeader(*s.status)
	return rec.Result(), nil
}

func TestAutoThrottle(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(t0)
	status := http.StatusOK
	a, err := NewAutoThrottle(slowTransport{clk, 100 * time.Millisecond, &status}, AutoThrottleConfig{Clock: clk})
	require.NoError(t, err)
	require.InDelta(t, 1.0, a.Rate(), 1e-9, "start delay 1 s")
	req := httptest.NewRequest(http.MethodGet, "http://sim.test/", nil)
	_, err = a.RoundTrip(req)
	require.NoError(t, err)
	// Half way from 1 s to the 100 ms latency.
	require.InDelta(t, 1/0.55, a.Rate(), 1e-9)

	// The next request waits out the delay since the last start.
	status = http.StatusTooManyRequests
	done := make(chan error)
	go func() {
		_, err := a.RoundTrip(req)
		done <- err
	}()
	clk.BlockUntilTimers(1)
	clk.Advance(450 * time.Millisecond)
	require.NoError(t, <-done)
	// A 429 would lower the delay to 325 ms: the ratchet keeps 550 ms.
	require.InDelta(t, 1/0.55, a.Rate(), 1e-9)

	_, err = NewAutoThrottle(nil, AutoThrottleConfig{TargetConcurrency: -1})
	require.ErrorIs(t, err, ErrInvalidConfig)
}

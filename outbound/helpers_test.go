package outbound_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/retry"
	"github.com/sluicerl/sluice/store"
)

func aimdStart(r float64) aimd.Config    { return aimd.Config{Start: r} }
func aimdDecrease(f float64) aimd.Config { return aimd.Config{Decrease: f} }

// attempts returns sluice_outbound_attempts_total{key, outcome}.
func attempts(t *testing.T, reg *prometheus.Registry, key, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "sluice_outbound_attempts_total" {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if (l.GetName() == "key" && l.GetValue() != key) || (l.GetName() == "outcome" && l.GetValue() != outcome) {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

type ioReadCloser = io.ReadCloser

func nopBody(s string) io.ReadCloser { return io.NopCloser(strings.NewReader(s)) }

// getAdvancing makes one call through c to u and closes its body, moving
// clk on by 50 ms a millisecond of real time until the call returns: a call
// that waits (for a pause, or its turn) waits on clk.
func getAdvancing(t *testing.T, clk *clocktest.Clock, c http.RoundTripper, u string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp := get(t, c, u)
		_ = resp.Body.Close()
	}()
	for {
		select {
		case <-done:
			return
		case <-time.After(time.Millisecond):
			clk.Advance(50 * time.Millisecond)
		}
	}
}

// fleetOf returns two clients, as two processes sharing st, over a and b:
// a start far above any limit, no latency rule, no retries.
func fleetOf(t *testing.T, st store.RateStore, clk clock.Clock, a, b http.RoundTripper) (ca, cb *outbound.Client) {
	t.Helper()
	cfg := func(base http.RoundTripper) outbound.Config {
		return outbound.Config{Base: base, Store: st, Clock: clk, AIMD: aimd.Config{Start: 1e4, IgnoreLatency: true},
			Retry: retry.Config{MaxAttempts: 1}}
	}
	ca, err := outbound.New(cfg(a))
	require.NoError(t, err)
	cb, err = outbound.New(cfg(b))
	require.NoError(t, err)
	return ca, cb
}

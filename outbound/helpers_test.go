package outbound_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/clock"
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

package outbound_test

import (
	"io"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/aimd"
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

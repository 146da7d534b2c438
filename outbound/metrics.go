package outbound

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicerl/sluice/aimd"
)

// Registerer is where a Client registers its metrics:
// prometheus.Registerer.
type Registerer = prometheus.Registerer

type metrics struct {
	calls    *prometheus.CounterVec
	retries  *prometheus.CounterVec
	rejected *prometheus.CounterVec
	rate     *prometheus.GaugeVec
	wait     *prometheus.HistogramVec
}

func newMetrics(reg Registerer) (*metrics, error) {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_outbound_attempts_total",
			Help: "Outbound attempts by key label (profile or host) and outcome (success, throttled, overloaded, failed).",
		}, []string{"key", "outcome"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_outbound_retries_total",
			Help: "Outbound retries by key label.",
		}, []string{"key"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_outbound_rejected_total",
			Help: "Outbound calls stopped by a layer, by key label and reason (breaker_open, budget_exhausted).",
		}, []string{"key", "reason"}),
		rate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_outbound_rate",
			Help: "Adapted rate in requests per second, by key label.",
		}, []string{"key"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_outbound_wait_seconds",
			Help:    "Time attempts waited for their turn, by key label.",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 30},
		}, []string{"key"}),
	}
	for _, c := range []prometheus.Collector{m.calls, m.retries, m.rejected, m.rate, m.wait} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

var outcomeNames = [...]string{aimd.Success: "success", aimd.Throttled: "throttled", aimd.Overloaded: "overloaded", aimd.Failed: "failed"}

func (m *metrics) observe(label string, o aimd.Outcome, rate float64) {
	name := "failed"
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		name = outcomeNames[o]
	}
	m.calls.WithLabelValues(label, name).Inc()
	m.rate.WithLabelValues(label).Set(rate)
}

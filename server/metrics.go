package server

import (
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Values of the result label of sluice_decisions_total.
const (
	resultAllowed      = "allowed"
	resultDenied       = "denied"
	resultShadowDenied = "shadow_denied"
	resultError        = "error"
)

// policyUnknown is the policy label of requests naming a policy the server
// does not hold: client input never becomes a label value. (A configured
// policy named "unknown" shares the label.)
const policyUnknown = "unknown"

// metrics are the server's Prometheus collectors. Label values come only
// from the configured policy names, fixed result and route names and HTTP
// status codes: never from keys or other client input.
type metrics struct {
	decisions *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	requests  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, policies []string) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total",
			Help: "Rate decisions by policy and result (allowed, denied, shadow_denied, error). Policies the server does not hold count as policy=\"unknown\".",
		}, []string{"policy", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_decision_duration_seconds",
			Help: "Time the limiter took to decide, by policy.",
			// 10us .. ~2.6s: in-memory decisions take microseconds,
			// shared stores a network round trip.
			Buckets: prometheus.ExponentialBuckets(10e-6, 4, 10),
		}, []string{"policy"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_requests_total",
			Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.duration, m.requests} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("server: register metrics: %w", err)
		}
	}
	// Known series start at zero, so rates work from the first scrape.
	for _, p := range slices.Concat(policies, []string{policyUnknown}) {
		for _, r := range []string{resultAllowed, resultDenied, resultShadowDenied, resultError} {
			if p == policyUnknown && r != resultError {
				continue
			}
			m.decisions.WithLabelValues(p, r)
		}
		if p != policyUnknown {
			m.duration.WithLabelValues(p)
		}
	}
	return m, nil
}

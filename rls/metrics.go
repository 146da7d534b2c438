package rls

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
)

// The metrics, counted in hits (hits_addend units) as envoyproxy/ratelimit
// counts its ratelimit.service.rate_limit.DOMAIN.KEY.* stats, with the
// domain and key (the rule's path, "key_value.key2") as labels:
//
//	sluice_rls_total_hits_total{domain,key}
//	sluice_rls_over_limit_total{domain,key}
//	sluice_rls_near_limit_total{domain,key}
//	sluice_rls_within_limit_total{domain,key}
//	sluice_rls_shadow_mode_total{domain,key}
//	sluice_rls_requests_total{code}        ok, over_limit, invalid_argument, unavailable
//	sluice_rls_request_duration_seconds    ShouldRateLimit's time, store included
//	sluice_rls_detailed_series_capped_total  hits counted under the rule's key because
//	                                         MaxDetailedSeries request-valued series exist
//
// A key label holds request values only for detailed_metric and
// value_to_metric rules, as in envoyproxy/ratelimit, and at most
// Config.MaxDetailedSeries such series exist: the label sets stay bounded
// by the configuration.

type counters struct {
	total, over, near, within, shadow prometheus.Counter
}

type metrics struct {
	total, over, near, within, shadow *prometheus.CounterVec
	requests                          map[string]prometheus.Counter
	duration                          prometheus.Histogram
	capped                            prometheus.Counter

	mu          sync.RWMutex
	detailed    map[[2]string]*counters
	maxDetailed int
}

func newMetrics(reg prometheus.Registerer, maxDetailed int) (*metrics, error) {
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_rls_" + name, Help: help}, []string{"domain", "key"})
	}
	m := &metrics{
		total:       vec("total_hits_total", "Hits of envoy rate limit rules, by domain and rule key (envoyproxy/ratelimit's total_hits)."),
		over:        vec("over_limit_total", "Hits over the limit, shadow and quota mode included (over_limit)."),
		near:        vec("near_limit_total", "Admitted hits past the near-limit ratio of the limit (near_limit)."),
		within:      vec("within_limit_total", "Hits within the limit (within_limit)."),
		shadow:      vec("shadow_mode_total", "Hits over the limit of shadow_mode or quota_mode rules, answered OK (shadow_mode)."),
		requests:    map[string]prometheus.Counter{},
		detailed:    map[[2]string]*counters{},
		maxDetailed: maxDetailed,
	}
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_rls_requests_total",
		Help: "ShouldRateLimit calls by outcome: ok, over_limit, invalid_argument, unavailable.",
	}, []string{"code"})
	for _, c := range []string{codeOK, codeOverLimit, codeInvalid, codeUnavailable} {
		m.requests[c] = reqs.WithLabelValues(c)
	}
	m.duration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_rls_request_duration_seconds",
		Help:    "Time ShouldRateLimit took to decide, the store included.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2.5, 12),
	})
	m.capped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_rls_detailed_series_capped_total",
		Help: "Descriptors of detailed_metric or value_to_metric rules counted under the rule's key because the series limit was reached.",
	})
	if reg != nil {
		for _, c := range []prometheus.Collector{m.total, m.over, m.near, m.within, m.shadow, reqs, m.duration, m.capped} {
			if err := reg.Register(c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if errors.As(err, &are) {
					return nil, fmt.Errorf("rls: metrics already registered: a registry holds the metrics of one Service: %w", err)
				}
				return nil, fmt.Errorf("rls: metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *metrics) series(domain, key string) *counters {
	return &counters{
		total:  m.total.WithLabelValues(domain, key),
		over:   m.over.WithLabelValues(domain, key),
		near:   m.near.WithLabelValues(domain, key),
		within: m.within.WithLabelValues(domain, key),
		shadow: m.shadow.WithLabelValues(domain, key),
	}
}

func (m *metrics) observe(code string, d time.Duration) {
	m.requests[code].Inc()
	m.duration.Observe(d.Seconds())
}

// forRequest returns the counters a matched descriptor counts in: its
// rule's, or, for detailed_metric and value_to_metric rules, those of a
// key built from the request's values as envoyproxy/ratelimit builds it.
func (m *metrics) forRequest(ls *leafState, entries []*ratelimitv3.RateLimitDescriptor_Entry, path []*node, wild []bool) *counters {
	v2m := false
	for _, n := range path {
		v2m = v2m || n.valueToMetric
	}
	if !ls.l.detailed && !v2m {
		return ls.stats
	}
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		n := path[i]
		v := ""
		switch {
		case wild[i] && n.share:
			v = n.value
		case ls.l.detailed:
			v = e.Value
		case wild[i] && n.valueToMetric:
			v = e.Value
		case wild[i] || n.value != "":
			v = n.value
		case n.valueToMetric:
			v = e.Value
		}
		b.WriteString(e.Key)
		if v != "" {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	key := b.String()
	if key == ls.l.statKey {
		return ls.stats
	}
	id := [2]string{ls.l.domain, key}
	m.mu.RLock()
	c := m.detailed[id]
	m.mu.RUnlock()
	if c != nil {
		return c
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c = m.detailed[id]; c != nil {
		return c
	}
	if len(m.detailed) >= m.maxDetailed {
		m.capped.Inc()
		return ls.stats
	}
	c = m.series(ls.l.domain, key)
	m.detailed[id] = c
	return c
}

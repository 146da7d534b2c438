package server

import (
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// seedMetrics starts the series of lv's policies at zero, so rates work
// from the first scrape; a reload seeds the policies it adds.
func (s *Server) seedMetrics(lv *live) {
	var names []string
	for _, p := range lv.lim.Policies() {
		names = append(names, p.Name)
		if p.Algorithm == store.Concurrency {
			for _, op := range []string{"acquire", "renew", "release"} {
				s.leaseOps.WithLabelValues(p.Name, op, leaseOK)
			}
		}
	}
	s.metrics.seed(names)
}

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
	m.seed(policies)
	return m, nil
}

// seed starts the series of policies (and of unknown ones) at zero.
func (m *metrics) seed(policies []string) {
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
}

// memStats is what an in-memory rate store reports of its size and bounds
// (*memstore.Store has it).
type memStats interface{ Stats() memstore.Stats }

// memCollector exports a memStats store's size, bounds, evictions and
// refusals, reading Stats once per scrape.
type memCollector struct {
	st                                      memStats
	keys, bytes, maxKeys, maxBytes, evicted *prometheus.Desc
	refused                                 *prometheus.Desc
}

func newMemCollector(st memStats) *memCollector {
	return &memCollector{
		st:       st,
		keys:     prometheus.NewDesc("sluice_memstore_keys", "Keys the in-memory rate store holds state for.", nil, nil),
		bytes:    prometheus.NewDesc("sluice_memstore_bytes", "Bytes the in-memory rate store's byte bound counts for its keys (key length plus a fixed overhead each).", nil, nil),
		maxKeys:  prometheus.NewDesc("sluice_memstore_max_keys", "The in-memory rate store's key bound.", nil, nil),
		maxBytes: prometheus.NewDesc("sluice_memstore_max_bytes", "The in-memory rate store's byte bound.", nil, nil),
		evicted:  prometheus.NewDesc("sluice_memstore_evicted_total", "Keys the in-memory rate store dropped because their state had become a fresh key's (never one that owes anything).", nil, nil),
		refused:  prometheus.NewDesc("sluice_memstore_refused_total", "Requests for a new key the in-memory rate store refused because it was full of keys that still hold state (answered 503).", nil, nil),
	}
}

func (c *memCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.keys, c.bytes, c.maxKeys, c.maxBytes, c.evicted, c.refused} {
		ch <- d
	}
}

func (c *memCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.st.Stats()
	ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(s.Keys))
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(s.Bytes))
	ch <- prometheus.MustNewConstMetric(c.maxKeys, prometheus.GaugeValue, float64(s.MaxKeys))
	ch <- prometheus.MustNewConstMetric(c.maxBytes, prometheus.GaugeValue, float64(s.MaxBytes))
	ch <- prometheus.MustNewConstMetric(c.evicted, prometheus.CounterValue, float64(s.Evicted))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.Refused))
}

// memSlotStats is what an in-memory slot store reports of its size and
// bound (*memstore.Slots has it).
type memSlotStats interface{ SlotStats() memstore.SlotStats }

// memSlotCollector exports a memSlotStats store's bookings, bytes, bound
// and refusals, reading SlotStats once per scrape.
type memSlotCollector struct {
	st                              memSlotStats
	slots, bytes, maxBytes, refused *prometheus.Desc
}

func newMemSlotCollector(st memSlotStats) *memSlotCollector {
	return &memSlotCollector{
		st:       st,
		slots:    prometheus.NewDesc("sluice_memstore_slot_bookings", "Slots the in-memory slot store holds (it never forgets one).", nil, nil),
		bytes:    prometheus.NewDesc("sluice_memstore_slot_bytes", "Bytes the in-memory slot store's byte bound counts for its slots, window counters and config versions.", nil, nil),
		maxBytes: prometheus.NewDesc("sluice_memstore_slot_max_bytes", "The in-memory slot store's byte bound.", nil, nil),
		refused:  prometheus.NewDesc("sluice_memstore_slot_refused_total", "Bookings and config versions the in-memory slot store refused at its byte bound (answered 503).", nil, nil),
	}
}

func (c *memSlotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.slots, c.bytes, c.maxBytes, c.refused} {
		ch <- d
	}
}

func (c *memSlotCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.st.SlotStats()
	ch <- prometheus.MustNewConstMetric(c.slots, prometheus.GaugeValue, float64(s.Slots))
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(s.Bytes))
	ch <- prometheus.MustNewConstMetric(c.maxBytes, prometheus.GaugeValue, float64(s.MaxBytes))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.Refused))
}

// registerMemMetrics registers memCollector when the limiter's rate store
// is an in-memory one, and memSlotCollector when the slot store is.
func (s *Server) registerMemMetrics(lim *limiter.Limiter) error {
	var cs []prometheus.Collector
	if st, ok := lim.Store().(memStats); ok {
		cs = append(cs, newMemCollector(st))
	}
	if s.slots != nil {
		if st, ok := s.slots.Store().(memSlotStats); ok {
			cs = append(cs, newMemSlotCollector(st))
		}
	}
	for _, c := range cs {
		if err := s.reg.Register(c); err != nil {
			return fmt.Errorf("server: register metrics: %w", err)
		}
	}
	return nil
}

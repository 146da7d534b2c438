package outbound

import (
	"slices"
	"time"

	"github.com/sluicerl/sluice/breaker"
)

// KeySnapshot is one key's state (seed 001 section 11): a plain value,
// copied from each of the key's parts under that part's own guard, so the
// counters of a key busy at the time may be a call apart.
type KeySnapshot struct {
	Key      string `json:"key"`
	Label    string `json:"label"`
	InFlight int64  `json:"in_flight"`
	// Rate is the adapted rate in requests per second, Hint the
	// provider-reported rate capping it (0: none), Probing whether the
	// controller is still in slow start.
	Rate    float64 `json:"rate"`
	Hint    float64 `json:"hint"`
	Probing bool    `json:"probing"`
	// Spacing is the rate (requests per second) at which the fleet
	// spaces its calls on a GCRA its processes share, 0 when it does not:
	// for five minutes after the key was found paused again as the fleet
	// resumed from a pause (a provider whose bucket holds fewer calls than
	// the processes send at once). It is 1.05 times the fleet's rate as
	// this process estimates it (its own rate over its share of the
	// fleet's calls).
	Spacing float64 `json:"spacing"`
	// PausedFor is how long the key is paused by a Retry-After (0: not
	// paused); nextEarliest - now in seed 001's terms.
	PausedFor time.Duration `json:"paused_for"`
	// AvgLatency is an EWMA of attempt latency; P50Latency and
	// P95Latency the median and 95th percentile (nearest rank) of the
	// latest 64 successes' latencies (0 before any). The controller's own
	// p95 (aimd.State.P95) starts afresh at each decrease; these do not,
	// so a throttle does not blank them.
	AvgLatency time.Duration `json:"avg_latency"`
	P50Latency time.Duration `json:"p50_latency"`
	P95Latency time.Duration `json:"p95_latency"`
	// Stated is the provider's own limit as its latest response that
	// stated one gave it (Known false: none stated yet).
	Stated StatedLimit `json:"stated"`
	// RetryAfterPauses counts the throttles that came with a Retry-After;
	// LastRetryAfter is the latest one's delay and LastRetryAfterAt when
	// it came (zero without one).
	RetryAfterPauses int64           `json:"retry_after_pauses"`
	LastRetryAfter   time.Duration   `json:"last_retry_after"`
	LastRetryAfterAt time.Time       `json:"last_retry_after_at"`
	Requests         int64           `json:"requests"`
	Successes        int64           `json:"successes"`
	Throttles        int64           `json:"throttles"`
	Errors           int64           `json:"errors"`
	Retries          int64           `json:"retries"`
	Rejected         int64           `json:"rejected"`
	Breaker          BreakerSnapshot `json:"breaker"`
	LastActive       time.Time       `json:"last_active"`
}

// StatedLimit is the headline quota a provider stated in a response's
// rate limit headers (the most constraining policy it reported): a plain
// value. A field the response did not state is zero.
type StatedLimit struct {
	// Known is whether any response stated a limit or remaining.
	Known bool `json:"known"`
	// Limit units per Window; Remaining of them left when it was said.
	Limit     int64         `json:"limit"`
	Remaining int64         `json:"remaining"`
	Window    time.Duration `json:"window"`
	// ResetAt is when the provider said more quota comes; SeenAt when the
	// response came.
	ResetAt time.Time `json:"reset_at"`
	SeenAt  time.Time `json:"seen_at"`
}

// Snapshot is the client's state at one time: a plain value.
type Snapshot struct {
	At        time.Time `json:"at"`
	Requests  int64     `json:"requests"`
	Throttles int64     `json:"throttles"`
	Retries   int64     `json:"retries"`
	// Rejected counts calls stopped by an open breaker or an exhausted
	// retry budget.
	Rejected         int64         `json:"rejected"`
	OpenBreakers     int           `json:"open_breakers"`
	HalfOpenBreakers int           `json:"half_open_breakers"`
	Keys             []KeySnapshot `json:"keys"`
}

// Snapshot returns the state of the max most recently active keys (all
// when max <= 0), most recent first, with client-wide counters.
func (c *Client) Snapshot(max int) Snapshot {
	now := c.now()
	states := c.keys.all()
	s := Snapshot{At: time.UnixMicro(now), Requests: c.requests.Load(), Throttles: c.throttles.Load(),
		Retries: c.retries.Load(), Rejected: c.rejected.Load()}
	for _, ks := range states {
		k := c.keySnapshot(ks, now)
		switch k.Breaker.State {
		case breaker.Open.String():
			s.OpenBreakers++
		case breaker.HalfOpen.String():
			s.HalfOpenBreakers++
		}
		s.Keys = append(s.Keys, k)
	}
	slices.SortFunc(s.Keys, func(a, b KeySnapshot) int { return b.LastActive.Compare(a.LastActive) })
	if max > 0 && len(s.Keys) > max {
		s.Keys = s.Keys[:max]
	}
	return s
}

// keySnapshot is one key's part of a Snapshot at now.
func (c *Client) keySnapshot(ks *keyState, now int64) KeySnapshot {
	v := ks.adapt.view(now)
	k := KeySnapshot{
		Key: ks.key, Label: ks.label, InFlight: ks.bulk.inFlight.Load(),
		Rate: v.rate, Hint: v.hint, Probing: v.probing, Spacing: v.spacing, PausedFor: v.pausedFor,
		AvgLatency: v.avgLatency, P50Latency: v.p50Latency, P95Latency: v.p95Latency,
		Stated: v.stated, RetryAfterPauses: v.pauses.n, LastRetryAfter: time.Duration(v.pauses.last) * time.Microsecond,
		Requests: ks.counts.requests.Load(), Successes: ks.counts.successes.Load(),
		Throttles: ks.counts.throttles.Load(), Errors: ks.counts.errors.Load(),
		Retries: ks.counts.retries.Load(), Rejected: ks.counts.rejected.Load(),
		LastActive: time.UnixMicro(ks.lastActive.Load()),
	}
	if v.pauses.n > 0 {
		k.LastRetryAfterAt = time.UnixMicro(v.pauses.at).UTC()
	}
	k.Breaker = ks.policy.snapshot(now)
	return k
}
